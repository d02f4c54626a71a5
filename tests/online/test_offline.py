"""Offline request scheduling: balanced per-client queues run by the loop."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched import LinearCostModel, Workload, lower_bounds, simulate, validate, workloads
from llmsched.online import OfflineQueues, decode_sizes, offline_queues


def test_offline_queues_balance_and_sort() -> None:
    """Every request is queued once; each queue is longest N^p + N^d first; loads are balanced."""
    wl = workloads.gsm8k(0)
    queues, result = offline_queues(wl, 200, sizes="oracle")
    assert sorted(queues) == list(range(200))
    flat = sorted(r for q in queues.values() for r in q)
    assert flat == list(range(len(wl)))
    total = wl.prompt_tokens + wl.output_tokens
    assert all(np.all(np.diff(total[q]) <= 0) for q in queues.values())
    loads = [int(wl.output_tokens[q].sum()) for q in queues.values()]
    assert max(loads) == result.makespan == 2277


def test_more_clients_than_requests_gives_each_request_its_own_client() -> None:
    """With J >= n the optimum puts every request alone; only clients with work get a queue."""
    wl = Workload([5, 6, 7], [30, 10, 20])
    queues, result = offline_queues(wl, 10**9, sizes="oracle")
    assert len(queues) == 3 and all(len(q) == 1 for q in queues.values())
    assert max(queues) < 3 and result.makespan == 30


def test_overhead_balances_request_counts_as_well_as_tokens() -> None:
    """A per-request overhead in the offline balance evens out the number of requests per client."""
    w = workloads.gsm8k(0)
    plain, _ = offline_queues(w, 200, "oracle", overhead=0)
    padded, result = offline_queues(w, 200, "oracle", overhead=40)
    assert sorted(i for q in padded.values() for i in q) == list(range(len(w)))
    spread = [max(map(len, qs.values())) - min(map(len, qs.values())) for qs in (plain, padded)]
    assert spread[1] < spread[0]
    loads = np.bincount(result.assignment, weights=w.output_tokens + 40, minlength=200)
    assert loads.max() == result.makespan


def test_offline_oracle_beats_the_baseline_and_validates() -> None:
    """With oracle lengths the offline schedule is valid and shorter than the FCFS baseline."""
    wl = workloads.gsm8k(0)
    cost = LinearCostModel.paper()
    offline = simulate(wl, cost, 200, "offline-oracle")
    baseline = simulate(wl, cost, 200)
    assert validate(offline) == []
    assert offline.makespan < baseline.makespan
    exact = lower_bounds(wl, cost, 200, decode_tokens_makespan=2277)
    assert offline.makespan >= exact.strong


def test_offline_needs_predictions_unless_oracle() -> None:
    """The predicted variant refuses a workload without predictions; bad options are refused."""
    wl = workloads.gsm8k(0)
    with pytest.raises(ValueError, match="no predicted_output"):
        simulate(wl, LinearCostModel.paper(), 200, "offline")
    with pytest.raises(ValueError, match="sizes must be one of"):
        OfflineQueues(sizes="psychic")
    with pytest.raises(ValueError, match="overhead must be"):
        offline_queues(wl, 10, "oracle", overhead=-1)
    predicted = wl.replace(predicted_output=np.full(len(wl), 345))
    assert np.array_equal(decode_sizes(predicted), np.full(len(wl), 345))
    assert validate(simulate(predicted, LinearCostModel.paper(), 200, "offline")) == []


def test_a_plan_stopped_by_the_clock_says_the_schedule_may_depend_on_the_machine(monkeypatch) -> None:
    """The exact plan runs on deterministic work budgets; should the wall-clock safety net stop
    it first, the run warns that its schedule may differ on another machine."""
    import dataclasses

    import llmsched.online.offline as offline
    from llmsched.core.result import Status

    solve = offline.balanced_assignment

    def stopped(sizes, clients, time_limit):
        assignment, result = solve(sizes, clients, time_limit)
        return assignment, dataclasses.replace(result, status=Status.TIME_LIMIT)

    monkeypatch.setattr(offline, "balanced_assignment", stopped)
    w = workloads.gsm8k_like(40, seed=1)
    with pytest.warns(RuntimeWarning, match="may depend on the machine's speed"):
        simulate(w, LinearCostModel.paper(), 8, "offline-oracle", "prefill-first")
