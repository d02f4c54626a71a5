"""Invariants over all instances and every registered policy: the loop accepts what the
policies answer, every schedule validates and respects both lower bounds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsched import lower_bounds, simulate, validate
from llmsched.online import iteration_policy_names, request_policy_names
from llmsched.policies import PREFILL_NOW
from tests.strategies import instances, predicted_instances


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


@pytest.mark.parametrize(
    ("request_policy", "iteration_policy"),
    [(r, i) for r in request_policy_names() for i in iteration_policy_names()],
)
@settings(max_examples=25)
@given(instance=st.one_of(predicted_instances(), instances()))
def test_every_registered_policy_pair_produces_valid_schedules(
    instance, request_policy, iteration_policy
) -> None:
    """Every registered request x iteration policy runs through the loop's checks and gives a
    schedule that validates and never beats a lower bound; without predictions a policy
    that plans with them refuses, saying so."""
    workload, cost, clients = instance
    try:
        schedule = simulate(workload, cost, clients, request_policy, iteration_policy)
    except ValueError as error:
        assert workload.predicted_output is None and "predicted_output" in str(error)
        return
    _check(schedule, workload, cost, clients)


def test_every_registered_name_is_covered() -> None:
    """The property tests draw from the registry, which holds today's names."""
    assert {"fcfs", "static", "hybrid-oracle", "sorted-preemptive-rr"} <= set(request_policy_names())
    assert set(iteration_policy_names()) >= {"prefill-first", "lagrangian", "threshold"}


@pytest.mark.parametrize("request_policy", request_policy_names())
@settings(max_examples=25)
@given(instance=predicted_instances(), seed=st.integers(0, 2**32 - 1))
def test_arbitrary_iteration_decisions_produce_valid_schedules(instance, seed, request_policy) -> None:
    """Whatever an iteration policy answers, every request policy's schedule validates and
    respects the bounds."""
    workload, cost, clients = instance
    schedule = simulate(workload, cost, clients, request_policy, RandomIterationPolicy(seed))
    _check(schedule, workload, cost, clients)


# Policies that read requests before they arrive, against the contract of
# llmsched.policies on an arrival stream: the balanced queues of offline, sorted-preemptive
# and hybrid are planned at the start over every request's prompt and prediction (round-robin
# queues are sorted by them); lagrangian's mean prompt and threshold's k are taken over every
# request at the start. On an offline batch (all at time 0) nothing is read early.
READS_AHEAD = ("offline", "sorted-preemptive", "hybrid", "lagrangian", "threshold")


def _online(name: str) -> bool:
    return not name.startswith(READS_AHEAD)


@pytest.mark.parametrize(
    ("request_policy", "iteration_policy"),
    [(r, i) for r in request_policy_names() for i in iteration_policy_names() if _online(r) and _online(i)],
)
@settings(max_examples=15)
@given(instance=predicted_instances(), data=st.data())
def test_online_policies_decide_nothing_on_requests_yet_to_arrive(
    instance, data, request_policy, iteration_policy
) -> None:
    """Changing the requests that arrive after a time T (prompts, outputs, predictions)
    changes nothing the policies decided before T."""
    workload, cost, clients = instance
    cut = data.draw(st.floats(0.0, 5.0), label="T")
    later = workload.arrival > cut + 1e-6
    n_later = int(later.sum())
    draw = data.draw
    prompt, output, predicted = (
        np.array(workload.prompt_tokens),
        np.array(workload.output_tokens),
        np.array(workload.predicted_output),
    )
    prompt[later] = draw(st.lists(st.integers(1, cost.prefill_capacity), min_size=n_later, max_size=n_later))
    output[later] = draw(st.lists(st.integers(1, 60), min_size=n_later, max_size=n_later))
    predicted[later] = draw(st.lists(st.integers(1, 80), min_size=n_later, max_size=n_later))
    other = workload.replace(prompt_tokens=prompt, output_tokens=output, predicted_output=predicted)

    def before_cut(schedule):
        stages = np.flatnonzero(schedule.stage_start < cut)
        placed = np.flatnonzero(np.isin(schedule.request_prefill_stage, stages))
        return (
            schedule.stage_kind[stages].tolist(),
            schedule.stage_start[stages].tolist(),
            placed.tolist(),
            schedule.request_client[placed].tolist(),
            schedule.request_prefill_stage[placed].tolist(),
        )

    first, second = (simulate(w, cost, clients, request_policy, iteration_policy) for w in (workload, other))
    assert before_cut(first) == before_cut(second)


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
