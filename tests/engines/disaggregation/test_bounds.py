"""Lower bounds on a disaggregated cluster's makespan: tight for a lone request, below every
simulated makespan."""

from __future__ import annotations

import pytest

import llmsched
from llmsched import DisaggregatedCluster, LinearCostModel, Workload, workloads
from llmsched.engines.disaggregation.bounds import disaggregated_lower_bounds

PAPER = LinearCostModel.paper()
CLUSTER = DisaggregatedCluster(
    1, 1, PAPER, PAPER, token_clients=4, kv_bytes_per_token=1e6, kv_bandwidth=100.0
)


def test_a_lone_request_runs_in_exactly_its_bound() -> None:
    """Prompt stage, transfer and decode of one request, with nothing in its way, is the bound."""
    lone = Workload([100], [5])
    bounds = disaggregated_lower_bounds(lone, CLUSTER)
    assert bounds.strong == bounds.single_request > bounds.prefill
    assert llmsched.simulate_disaggregated(lone, CLUSTER).makespan == pytest.approx(bounds.strong, rel=1e-12)


def test_the_bound_holds_on_a_loaded_cluster() -> None:
    """Sixty requests on one prompt and one token machine take longer than the strong bound."""
    workload = workloads.gsm8k_like(60, seed=1)
    bounds = disaggregated_lower_bounds(workload, CLUSTER)
    assert bounds.strong == max(bounds.prefill, bounds.single_request)
    assert bounds.strong <= llmsched.simulate_disaggregated(workload, CLUSTER).makespan


def test_a_table_pool_is_bounded_by_its_hull() -> None:
    """One pool of a measured table: the prefill bound is the first arrival plus the table's own
    least prefill time of every prompt token over the prompt machines; with lent machines, a line
    below both tables; the simulated makespans are above both."""
    table = llmsched.preset("llama2-70b/h100/tp8").cost()
    slow = llmsched.preset("llama2-70b/a100/tp8").cost()
    workload = workloads.gsm8k_like(80, seed=3)
    cluster = DisaggregatedCluster(
        2, 1, table, slow, token_clients=16, kv_bytes_per_token=1e6, kv_bandwidth=100.0
    )
    bounds = disaggregated_lower_bounds(workload, cluster)
    total = int(workload.prompt_tokens.sum())
    stages = -(-total // table.prefill_capacity)
    assert bounds.prefill == pytest.approx(workload.arrival.min() + table.min_prefill_time(total, stages) / 2)
    assert bounds.strong <= llmsched.simulate_disaggregated(workload, cluster).makespan
    lent = DisaggregatedCluster(
        2, 1, table, slow, token_clients=16, kv_bytes_per_token=1e6, kv_bandwidth=100.0, mixed=True
    )
    both = disaggregated_lower_bounds(workload, lent)
    assert 0 < both.prefill <= bounds.prefill
    assert both.strong <= llmsched.simulate_disaggregated(workload, lent).makespan
