"""Shortest predicted work first with aging, and earliest TTFT deadline first with the late
deferred: their orders, the starvation bound, admission by time, and preemption by priority.

(Every registered policy, these included, is also checked for non-anticipation, for every
mode and batching rule, with KV-cache memory and in fleets, by the invariant tests of
tests/test_anticipation.py, tests/test_every_mode.py and tests/engines/test_memory.py.)"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import llmsched
from llmsched import (
    DisaggregatedCluster,
    LinearCostModel,
    Workload,
    simulate,
    simulate_batching,
    simulate_disaggregated,
    validate,
)
from llmsched.core.memory import KVMemory
from llmsched.online import AgedShortestFirst, DeadlineFirst, make_request_policy
from llmsched.policies import KnownRequests

COST = LinearCostModel(0.01, 1e-4, 0.01, 1e-4, 100)


def _known(prompt: list[int], predicted: list[int], arrival: list[float]) -> KnownRequests:
    return KnownRequests.everything(Workload(prompt, predicted, predicted_output=predicted, arrival=arrival))


def test_aged_shortest_first_orders_by_work_plus_waiting() -> None:
    """Keys are arrival + seconds_per_token * (prompt + output_weight * predicted): a short
    request that arrived later overtakes a long one until the long one has waited its work's
    worth."""
    known = _known([10, 10, 10], [100, 10, 10], [0.0, 0.05, 0.5])
    policy = AgedShortestFirst(seconds_per_token=0.002)
    policy.start(known, 1)
    for r in (0, 1, 2):
        policy.arrive(r)
    # keys: 0 + 0.002 * 110 = 0.22; 0.05 + 0.04 = 0.09; 0.5 + 0.04 = 0.54
    order = []
    for _ in range(3):
        assert policy.ready() == 1
        (request, client), *rest = policy.take(100)
        assert not rest and client == 0
        order.append(request)
        policy.release(client)
    assert order == [1, 0, 2]
    by_prompt = AgedShortestFirst(seconds_per_token=1.0, output_weight=0.0)
    by_prompt.start(_known([30, 20, 10], [1, 50, 99], [0.0, 0.0, 0.0]), 3)
    for r in (0, 1, 2):
        by_prompt.arrive(r)
    assert [r for r, _ in by_prompt.take(100)] == [2, 1, 0]


def test_aged_shortest_first_tends_to_fcfs_and_to_shortest_first() -> None:
    """With a vanishing aging rate it runs requests in arrival order, as FCFS does; with a
    huge one, shortest predicted work first, as shortest-first does when prompts are equal."""
    out = [40, 5, 30, 1, 20, 8]
    w = Workload([8] * 6, out, predicted_output=out, arrival=[0.0, 0.01, 0.02, 0.03, 0.04, 0.05])
    fcfs = simulate(w, COST, 1, "fcfs")
    slow = simulate(w, COST, 1, AgedShortestFirst(seconds_per_token=1e-9))
    assert slow.request_prefill_stage.tolist() == fcfs.request_prefill_stage.tolist()
    fast = simulate(w, COST, 1, AgedShortestFirst(seconds_per_token=1e3))
    shortest = simulate(w, COST, 1, "shortest-first")
    assert fast.request_prefill_stage.tolist() == shortest.request_prefill_stage.tolist()
    assert validate(fast) == [] and validate(slow) == []


@settings(max_examples=60, deadline=None)
@given(st.data(), st.floats(1e-4, 0.05), st.integers(1, 4))
def test_no_request_is_passed_over_by_one_arriving_its_work_s_worth_later(data, rate, clients) -> None:
    """The starvation bound: a request of predicted work w starts no later than any request
    that arrives more than rate * w seconds after it."""
    n = data.draw(st.integers(2, 14))
    prompt = data.draw(st.lists(st.integers(1, 60), min_size=n, max_size=n))
    output = data.draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))
    predicted = data.draw(st.lists(st.integers(1, 400), min_size=n, max_size=n))
    arrival = data.draw(st.lists(st.floats(0, 3, allow_nan=False), min_size=n, max_size=n))
    w = Workload(prompt, output, predicted_output=predicted, arrival=arrival)
    s = simulate(w, COST, clients, AgedShortestFirst(seconds_per_token=rate))
    assert validate(s) == []
    stage = s.request_prefill_stage
    work = np.asarray(prompt) + np.asarray(predicted)
    for i in range(n):
        later = w.arrival > w.arrival[i] + rate * work[i] * (1 + 1e-9)
        assert np.all(stage[later] >= stage[i])


def test_deadline_first_defers_the_late_behind_those_that_can_still_make_it() -> None:
    """Deadlines are arrival + ttft_base + ttft_per_token * prompt. Asked at time 1.0, a
    request whose deadline passed waits behind every one still on time, oldest first among
    the late; without ``defer`` the order is by deadline alone. Nothing is dropped."""
    # deadlines: 0.0 + 0.5 + 0.1 = 0.6 (late at 1.0), 0.2 + 0.6 = 0.8 (late), 0.9 + 0.6 = 1.5,
    # 0.95 + 0.5 + 0.5 = 1.95
    known = _known([10, 10, 10, 50], [5, 5, 5, 5], [0.0, 0.2, 0.9, 0.95])
    policy = DeadlineFirst(ttft_base=0.5, ttft_per_token=0.01)
    policy.start(known, 4)
    for r in range(4):
        policy.arrive(r)
    known.now = 1.0
    assert policy.ready() == 4 and policy.deferred == 2
    assert [r for r, _ in policy.take(1000)] == [2, 3, 0, 1]
    plain = DeadlineFirst(ttft_base=0.5, ttft_per_token=0.01, defer=False)
    plain.start(known, 4)
    for r in range(4):
        plain.arrive(r)
    assert plain.ready() == 4 and plain.deferred == 0
    assert [r for r, _ in plain.take(1000)] == [0, 1, 2, 3]


def test_deadline_first_meets_more_targets_than_fcfs_past_saturation() -> None:
    """Requests arrive three times faster than two clients serve them: FCFS lets every
    request wait behind the backlog, so few meet a 1 s TTFT target; deferring those already
    late keeps the others on time. Every request still runs."""
    rng = np.random.default_rng(3)
    n = 120
    w = Workload(rng.integers(10, 60, n), rng.integers(50, 150, n), arrival=np.sort(rng.uniform(0, 20, n)))
    cost = LinearCostModel(0.02, 1e-4, 0.01, 1e-4, 60)  # one or two prompts a stage
    fcfs = simulate(w, cost, 2, "fcfs")
    policy = DeadlineFirst(ttft_base=1.0)
    deferring = simulate(w, cost, 2, policy)
    assert validate(deferring) == [] and validate(fcfs) == []
    assert policy.deferred > 0
    met_fcfs = int(np.sum(fcfs.ttft <= 1.0))
    met = int(np.sum(deferring.ttft <= 1.0))
    assert met > 1.5 * met_fcfs
    assert np.all(np.isfinite(deferring.finish))  # nothing dropped


def test_memory_preempts_the_lowest_priority_not_the_last_taken() -> None:
    """Under vLLM's recompute, FCFS preempts the request taken last; a priority policy
    preempts the one of the largest key: here the long request taken first."""
    # Request 0 (predicted 500 tokens) is taken at 0; request 1 (predicted 5) at 0.05. Both
    # grow until the 10 blocks of 8 tokens run out (each needs 6 at its full 48 tokens).
    w = Workload([8, 8], [40, 40], predicted_output=[500, 5], arrival=[0.0, 0.05])
    memory = KVMemory(10, block_size=8, watermark=0.0)
    fcfs = simulate_batching(w, COST, 2, "vllm", "fcfs", 512, memory=memory)
    aged = simulate_batching(w, COST, 2, "vllm", AgedShortestFirst(seconds_per_token=1.0), 512, memory=memory)
    assert llmsched.validate(fcfs) == [] and llmsched.validate(aged) == []
    assert fcfs.preemptions.tolist()[1] > 0 and fcfs.preemptions.tolist()[0] == 0
    assert aged.preemptions.tolist()[0] > 0 and aged.preemptions.tolist()[1] == 0


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: AgedShortestFirst(seconds_per_token=0), "seconds_per_token"),
        (lambda: AgedShortestFirst(output_weight=-1), "output_weight"),
        (lambda: AgedShortestFirst(sizes="guess"), "sizes"),
        (lambda: DeadlineFirst(ttft_base=-1), "ttft_base"),
        (lambda: DeadlineFirst(ttft_base=0, ttft_per_token=0), "both 0"),
        (lambda: make_request_policy("deadline-first", ttft_per_token=float("nan")), "ttft_per_token"),
    ],
)
def test_bad_parameters_are_refused(make, message) -> None:
    with pytest.raises(ValueError, match=message):
        make()
    with pytest.raises(TypeError, match="defer"):
        DeadlineFirst(defer=1)  # type: ignore[arg-type]


def test_aged_shortest_first_needs_predictions_or_the_oracle() -> None:
    w = Workload([8, 8], [4, 4])
    with pytest.raises(ValueError, match="predicted_output"):
        simulate(w, COST, 1, "aged-shortest-first")
    assert validate(simulate(w, COST, 1, "aged-shortest-first-oracle")) == []


def test_deadline_first_defers_on_a_disaggregated_prompt_machine() -> None:
    """A prompt machine's policy is asked at the cluster's time too: past saturation it defers
    the late there as on one engine, and the cluster still runs every request."""
    rng = np.random.default_rng(4)
    n = 150
    w = Workload(rng.integers(200, 900, n), rng.integers(2, 8, n), arrival=np.sort(rng.uniform(0, 10, n)))
    cost = LinearCostModel(0.02, 2e-4, 0.01, 1e-4, 2000)  # about 6 prompts a second
    cluster = DisaggregatedCluster(1, 1, cost, cost, 16, kv_bytes_per_token=1e5, kv_bandwidth=100.0)
    policy = DeadlineFirst(ttft_base=0.5)
    deferring = simulate_disaggregated(w, cluster, policy)
    plain = simulate_disaggregated(w, cluster, DeadlineFirst(ttft_base=0.5, defer=False))
    assert deferring.validate() == [] and plain.validate() == []
    assert policy.deferred > 0
    assert int(np.sum(deferring.ttft <= 0.5)) > int(np.sum(plain.ttft <= 0.5))


def test_a_fleet_counts_what_its_engines_deferred() -> None:
    """A fleet's engines run deadline-first by name; the fleet's info adds up their deferrals."""
    rng = np.random.default_rng(5)
    n = 200
    w = Workload(rng.integers(500, 3000, n), rng.integers(2, 8, n), arrival=np.sort(rng.uniform(0, 20, n)))
    engines = [llmsched.Engine(LinearCostModel.paper(), 64, request_policy="deadline-first")] * 2
    fleet = llmsched.simulate_fleet(w, engines, "jsq")
    assert fleet.validate() == [] and fleet.info["deferred"] > 0
    fcfs = llmsched.simulate_fleet(w, [llmsched.Engine(LinearCostModel.paper(), 64)] * 2, "jsq")
    assert fcfs.info["deferred"] == 0
