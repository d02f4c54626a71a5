"""Algorithm 1 (sorting and preemptive) and the sorted shared queues."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched import LinearCostModel, Workload, simulate, validate, workloads
from llmsched.engines.loop import simulate_policies
from llmsched.online import LongestFirst, PrefillFirst, ShortestFirst, SortedPreemptive


def test_algorithm1_idle_client_takes_the_longest_from_the_busiest() -> None:
    """An idle client steals the head of the queue with the most remaining tokens."""
    # Client 0 holds one short request; client 1 holds three. Round-robin with 2 clients puts
    # requests 0, 2, 4 on client 0, so make those short and give client 1 the long ones.
    prompt = [10] * 6
    output = [1, 100, 1, 50, 1, 30]
    w = Workload(prompt, output, predicted_output=output)
    cost = LinearCostModel(0.01, 1e-4, 0.01, 1e-4, 10_000)
    s = simulate(w, cost, 2, SortedPreemptive(initial="round-robin"), "prefill-first")
    assert validate(s) == []
    # Client 1's queue is 1, 3, 5 (longest first); once client 0 empties its own queue it
    # steals from client 1, which holds the most remaining tokens: request 5 is the only one
    # left on client 1's queue by then, so client 0 runs it.
    assert s.request_client[5] == 0
    assert s.request_client[1] == 1


def test_clients_without_a_queue_steal_lowest_index_first() -> None:
    """With more clients than requests, the clients given no queue are idle from the start
    and take work in index order, whatever J is; none is listed one by one."""
    w = Workload([10] * 4, [40, 30, 20, 10], arrival=[0.0, 0.0, 0.0, 0.0])
    cost = LinearCostModel(0.01, 1e-4, 0.01, 1e-4, 10)  # one prompt per prefill stage
    for clients in (6, 10**12):
        for clairvoyant in (False, True):
            policy = SortedPreemptive(initial="round-robin", sizes="oracle")
            s = simulate_policies(w, cost, clients, policy, PrefillFirst(), clairvoyant=clairvoyant)
            assert validate(s) == []
            assert sorted(s.request_client.tolist()) == [0, 1, 2, 3]
            # Planned ahead, once; online, the four fit on free clients directly and no
            # plan is needed. Either way nothing is left queued.
            assert policy.plans == (1 if clairvoyant else 0) and not policy._queues


def test_hybrid_on_gsm8k_is_deterministic_and_beats_the_baseline() -> None:
    """hybrid-oracle with the Lagrangian rule ends below the FCFS baseline on gsm8k(0)."""
    w, cost = workloads.gsm8k(0), LinearCostModel.paper()
    hybrid = simulate(w, cost, 200, "hybrid-oracle", "lagrangian")
    again = simulate(w, cost, 200, "hybrid-oracle", "lagrangian")
    assert validate(hybrid) == [] and hybrid.makespan == again.makespan
    assert hybrid.makespan < simulate(w, cost, 200).makespan - 5


def test_shortest_and_longest_first_order_the_shared_queue() -> None:
    """One client and everything waiting: shortest-first runs outputs in increasing order,
    longest-first in decreasing order."""
    out = [5, 1, 9, 3]
    w = Workload([4] * 4, out, predicted_output=out)
    cost = LinearCostModel(0.01, 1e-4, 0.01, 1e-4, 100)
    for policy, expected in ((ShortestFirst(), [1, 3, 0, 2]), (LongestFirst(), [2, 0, 3, 1])):
        s = simulate(w, cost, 1, policy)
        assert np.argsort(s.request_prefill_stage).tolist() == expected


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: SortedPreemptive(initial="random"), "initial"),
        (lambda: SortedPreemptive(sizes="truth"), "sizes"),
        (lambda: SortedPreemptive(overhead=-5), "overhead"),
        (lambda: SortedPreemptive(overhead=2.5), "overhead"),
        (lambda: ShortestFirst(sizes="psychic"), "sizes"),
    ],
)
def test_bad_parameters_are_refused(make, message) -> None:
    """Bad constructor arguments raise a ValueError naming the parameter."""
    with pytest.raises(ValueError, match=message):
        make()


def test_predicted_policies_need_predictions() -> None:
    """A policy planning with predictions refuses a workload without them."""
    w = workloads.gsm8k_like(20, seed=0)
    with pytest.raises(ValueError, match="predicted_output"):
        simulate(w, LinearCostModel.paper(), 4, "shortest-first")
