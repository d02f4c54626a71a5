"""Invariants over all instances: every simulated schedule validates and respects both bounds."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from llmsched import lower_bounds, simulate, validate
from llmsched.policies import PREFILL_NOW
from tests.strategies import instances


class RandomIterationPolicy:
    """Answers at random: prefill now, or decode a random number of iterations."""

    name = "random"

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def start(self, workload, cost, clients) -> None:
        pass

    def decide(self, engine) -> int:
        assert engine.ready > 0 and engine.active > 0
        return PREFILL_NOW if self.rng.random() < 0.4 else int(self.rng.integers(1, 20))


def _check(schedule, workload, cost, clients) -> None:
    violations = validate(schedule)
    assert violations == [], violations[:5]
    bounds = lower_bounds(workload, cost, clients)
    tol = 1e-9 * max(1.0, schedule.makespan)
    assert schedule.makespan >= bounds.paper - tol
    assert schedule.makespan >= bounds.strong - tol
    assert 0 < schedule.utilization <= 1 + 1e-12
    assert np.all(schedule.finish > schedule.workload.arrival)


@given(instances(), st.sampled_from(["fcfs", "static"]))
def test_baseline_policies_produce_valid_schedules_above_both_bounds(instance, request_policy) -> None:
    """FCFS and static queues under prefill-first validate and never beat either lower bound."""
    workload, cost, clients = instance
    _check(simulate(workload, cost, clients, request_policy, "prefill-first"), workload, cost, clients)


@given(instances(), st.sampled_from(["fcfs", "static"]), st.integers(0, 2**32 - 1))
def test_arbitrary_iteration_decisions_produce_valid_schedules(instance, request_policy, seed) -> None:
    """Whatever an iteration policy answers, the simulator's schedule validates and respects the bounds."""
    workload, cost, clients = instance
    schedule = simulate(workload, cost, clients, request_policy, RandomIterationPolicy(seed))
    _check(schedule, workload, cost, clients)


@given(instances())
def test_metrics_agree_with_the_segment_table(instance) -> None:
    """Utilization computed from to_frame() segments equals Schedule.utilization."""
    workload, cost, clients = instance
    schedule = simulate(workload, cost, clients)
    frame = schedule.to_frame()
    busy = float((frame["end"] - frame["start"]).sum())
    assert abs(busy / (clients * schedule.makespan) - schedule.utilization) < 1e-9
    decoded = frame[frame["kind"] == "decode"].groupby("request")["tokens"].sum()
    assert decoded.reindex(range(len(workload))).to_numpy().tolist() == workload.output_tokens.tolist()
