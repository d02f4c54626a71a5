"""Invariants over all instances: every simulated schedule validates and respects both bounds."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from llmsched import LevelCostModel, LinearCostModel, Workload, lower_bounds, simulate, validate
from llmsched.policies import PREFILL_NOW


@st.composite
def cost_models(draw: st.DrawFn) -> LinearCostModel | LevelCostModel:
    capacity = draw(st.integers(1, 300))
    if draw(st.booleans()):
        return LinearCostModel(
            prefill_base=max(draw(st.floats(0, 0.1)), 1e-4),
            prefill_per_token=draw(st.floats(0, 1e-3)),
            decode_base=max(draw(st.floats(0, 0.05)), 1e-4),
            decode_per_client=draw(st.floats(0, 1e-3)),
            prefill_capacity=capacity,
        )
    caps = sorted(draw(st.sets(st.integers(1, capacity), min_size=1, max_size=4)) | {capacity})
    times = sorted(draw(st.lists(st.floats(0.01, 1.0), min_size=len(caps), max_size=len(caps))))
    return LevelCostModel(list(zip(caps, times, strict=True)), draw(st.floats(0.001, 0.1)))


@st.composite
def instances(draw: st.DrawFn) -> tuple[Workload, LinearCostModel | LevelCostModel, int]:
    cost = draw(cost_models())
    cap = cost.prefill_capacity
    n = draw(st.integers(1, 30))
    # Prompts anywhere in [1, capacity], with a fair chance of exactly the capacity.
    prompt = draw(st.lists(st.one_of(st.integers(1, cap), st.just(cap)), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(1, 60), min_size=n, max_size=n))
    arrivals = draw(
        st.one_of(
            st.just([0.0] * n),
            st.lists(st.floats(0, 5, allow_nan=False), min_size=n, max_size=n),
            st.lists(st.sampled_from([0.0, 0.5, 0.5, 3.0]), min_size=n, max_size=n),
        )
    )
    clients = draw(st.one_of(st.just(1), st.integers(1, n + 5)))
    return Workload(prompt, output, arrival=arrivals), cost, clients


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
