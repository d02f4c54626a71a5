"""Non-anticipation: no policy reads a request before it arrives.

For every registered request and iteration policy: removing the requests that arrive
after a time T, or changing them, leaves every stage that ends before T unchanged (its
kind, times and requests). A clairvoyant run is the one allowed exception, and it must be
asked for.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsched import LinearCostModel, Workload, simulate, validate
from llmsched.engines.competition.schedule import Schedule
from llmsched.engines.loop import simulate_policies
from llmsched.online import (
    PrefillFirst,
    SortedPreemptive,
    TunedThreshold,
    iteration_policy_names,
    make_iteration_policy,
    make_request_policy,
    request_policy_names,
)
from tests.strategies import predicted_instances

PAIRS = [(r, "prefill-first") for r in request_policy_names()] + [
    ("fcfs", i) for i in iteration_policy_names()
]
# The paper's strategies with their own iteration rules, whose decisions depend on both.
PAIRS += [("hybrid", "lagrangian"), ("hybrid-oracle", "threshold"), ("offline", "slo")]


def _before(schedule: Schedule, t: float, ids: np.ndarray | None = None) -> list[tuple]:
    """The stages that end before ``t``: kind, start, end, and their requests (as indices of
    the original workload, ``ids`` mapping the schedule's to them) and clients."""
    out = []
    for stage in np.flatnonzero(schedule.stage_end < t).tolist():
        members = np.flatnonzero(schedule.request_prefill_stage == stage)
        out.append(
            (
                int(schedule.stage_kind[stage]),
                float(schedule.stage_start[stage]),
                float(schedule.stage_end[stage]),
                int(schedule.stage_iterations[stage]),
                (members if ids is None else ids[members]).tolist(),
                schedule.request_client[members].tolist(),
            )
        )
    return out


def _variants(
    workload: Workload, t: float, capacity: int, data: st.DataObject
) -> list[tuple[Workload, np.ndarray]]:
    """The workload without its requests that arrive after ``t``, and with them changed;
    each with the original index of each of its requests."""
    late = workload.arrival > t
    keep = np.flatnonzero(~late)
    variants = [(workload.subset(keep), keep)] if keep.size else []
    if late.any():
        k = int(late.sum())
        new_prompt = data.draw(st.lists(st.integers(1, capacity), min_size=k, max_size=k))
        new_output = data.draw(st.lists(st.integers(1, 90), min_size=k, max_size=k))
        prompt, output = workload.prompt_tokens.copy(), workload.output_tokens.copy()
        predicted = np.asarray(workload.predicted_output).copy()
        prompt[late] = new_prompt
        output[late] = new_output
        predicted[late] = new_output[::-1]
        arrival = workload.arrival.copy()
        arrival[late] = np.maximum(arrival[late] * 1.5, t + 0.25)  # later still, but after t
        variants.append(
            (
                Workload(prompt, output, predicted_output=predicted, arrival=arrival, name=workload.name),
                np.arange(len(workload)),
            )
        )
    return variants


def _sorted_by_arrival(workload: Workload) -> Workload:
    # Requests in arrival order: removing the late ones keeps every other index.
    return workload.subset(np.argsort(workload.arrival, kind="stable"))


@pytest.mark.parametrize(("request_policy", "iteration_policy"), PAIRS)
@settings(max_examples=40)
@given(instance=predicted_instances(), data=st.data())
def test_the_future_does_not_change_the_past(
    instance, data, request_policy: str, iteration_policy: str
) -> None:
    workload, cost, clients = instance
    if np.all(workload.arrival == workload.arrival[0]):
        workload = workload.replace(arrival=np.linspace(0.0, 3.0, len(workload)))
    if data.draw(st.booleans()):
        # In arrival order; otherwise late requests may come first among the indices.
        workload = _sorted_by_arrival(workload)
    t = float(data.draw(st.sampled_from(sorted(set(workload.arrival.tolist())))))

    def run(w: Workload) -> Schedule:
        s = simulate(
            w, cost, clients, make_request_policy(request_policy), make_iteration_policy(iteration_policy)
        )
        assert validate(s) == []
        assert s.info["clairvoyant"] is False
        return s

    past = _before(run(workload), t)
    for variant, ids in _variants(workload, t, cost.prefill_capacity, data):
        assert _before(run(variant), t, ids) == past


@settings(max_examples=40)
@given(instance=predicted_instances(), data=st.data())
def test_tuning_sees_only_the_past(instance, data) -> None:
    """The threshold rule tuned by simulation tunes on what has arrived by its first decision."""
    workload, cost, clients = instance
    workload = _sorted_by_arrival(workload).replace(arrival=np.linspace(0.0, 3.0, len(workload)))
    t = float(data.draw(st.sampled_from(workload.arrival.tolist())))

    def run(w: Workload) -> Schedule:
        return simulate_policies(
            w, cost, clients, make_request_policy("fcfs"), TunedThreshold("fcfs", [1, 3])
        )

    past = _before(run(workload), t)
    for variant, ids in _variants(workload, t, cost.prefill_capacity, data):
        assert _before(run(variant), t, ids) == past


def test_a_clairvoyant_run_plans_ahead_and_says_so() -> None:
    """Asked for, a clairvoyant hybrid plans the late request into a client's queue at time
    0: that client waits for it, and the first stage already differs from the run that does
    not know the late request is coming. The schedules say which is which."""
    w = Workload([1, 1, 1, 1], [50, 50, 50, 400], arrival=[0.0, 0.0, 0.0, 1.0])
    cost = LinearCostModel(0.01, 0.001, 0.01, 0.0, 10)
    runs = {}
    for clairvoyant in (False, True):
        policy = SortedPreemptive(sizes="oracle")
        runs[clairvoyant] = simulate_policies(w, cost, 2, policy, PrefillFirst(), clairvoyant=clairvoyant)
        assert validate(runs[clairvoyant]) == []
        assert runs[clairvoyant].info["clairvoyant"] is clairvoyant
        assert runs[clairvoyant].info["oracle_lengths"] is True
    # Online: both clients start at once. Clairvoyant: the 400-token request is planned
    # alone on one client (the balance), which waits for it; the other takes the three
    # short ones in turn.
    assert _before(runs[False], 0.5) != _before(runs[True], 0.5)
    assert len(runs[False].request_client[runs[False].request_prefill_stage == 0]) == 2
    assert len(runs[True].request_client[runs[True].request_prefill_stage == 0]) == 1


def test_clairvoyant_must_be_a_bool() -> None:
    w = Workload([1], [1])
    with pytest.raises(TypeError, match="clairvoyant must be True or False"):
        simulate_policies(w, LinearCostModel.paper(), 1, make_request_policy("fcfs"), PrefillFirst(), "yes")  # type: ignore[arg-type]
