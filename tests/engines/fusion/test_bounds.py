"""Lower bounds on a fused engine's makespan: the strong bound is the larger of its parts and
no fused schedule beats it."""

from __future__ import annotations

import llmsched
from llmsched import LinearCostModel, Workload, workloads
from llmsched.engines.fusion.bounds import fused_lower_bounds

PAPER = LinearCostModel.paper()


def test_the_strong_bound_is_the_larger_part_and_holds() -> None:
    """On 60 GSM8K-shaped requests the work bound dominates; the simulated makespan is above it."""
    workload = workloads.gsm8k_like(60, seed=1)
    bounds = fused_lower_bounds(workload, PAPER, 8, 512)
    assert bounds.strong == max(bounds.work, bounds.single_request) == bounds.work
    assert bounds.single_request < bounds.work <= llmsched.simulate_fusion(workload, PAPER, 8).makespan


def test_a_lone_request_needs_an_iteration_per_output_token_at_least() -> None:
    """One request of 5 output tokens needs at least 5 iterations; its bound is its lone run's time."""
    lone = Workload([100], [5])
    bounds = fused_lower_bounds(lone, PAPER, 4, 512)
    assert bounds.iterations >= 5
    assert bounds.strong == bounds.single_request <= llmsched.simulate_fusion(lone, PAPER, 4).makespan


def test_on_a_measured_table_no_fused_schedule_beats_the_bounds() -> None:
    """Under a table, mixed by the fused rule or by SplitwiseSim's factor, the simulated makespan
    is above both parts of the bound; the factor only makes iterations dearer, never the bound
    lower than the work of a lone request."""
    from dataclasses import replace

    workload = workloads.gsm8k_like(60, seed=2)
    table = llmsched.preset("llama2-70b/a100/tp8").cost()
    for cost in (table, replace(table, mixed_factor=None)):
        bounds = fused_lower_bounds(workload, cost, 8, 1024)
        assert bounds.strong == max(bounds.work, bounds.single_request) > 0
        assert bounds.strong <= llmsched.simulate_fusion(workload, cost, 8, token_budget=1024).makespan


def test_under_a_linear_model_an_iteration_costs_at_least_the_smaller_base() -> None:
    """The lines of a linear model: m = min(a_d, a_p) with slopes b_d and b_p (and the flat line
    at the least decode time)."""
    from llmsched.engines.fusion.bounds import _iteration_lines

    lines = _iteration_lines(PAPER, 0.03)
    assert (
        min(PAPER.decode_base, PAPER.prefill_base),
        PAPER.decode_per_client,
        PAPER.prefill_per_token,
    ) in lines
    assert (min(0.03, PAPER.prefill_base), 0.0, PAPER.prefill_per_token) in lines
