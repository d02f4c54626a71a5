"""The baselines: the free-client pool, FCFS, static queues and prefill-first."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsched import LinearCostModel, Workload, simulate, validate
from llmsched.online import FCFS, FreeClients, PrefillFirst, StaticQueues
from llmsched.policies import PREFILL_NOW
from tests.strategies import predicted_instances

SMALL_COST = LinearCostModel(1.0, 0.1, 0.5, 0.25, prefill_capacity=100)


@given(
    st.integers(1, 12),
    st.sets(st.integers(0, 11), max_size=6),
    st.lists(st.tuples(st.booleans(), st.integers(0, 11)), max_size=40),
)
def test_free_clients_match_a_sorted_set(clients, exclude, operations) -> None:
    """Pops and releases behave like a sorted set of the free clients, excluded ones joining
    only when released."""
    exclude = {c for c in exclude if c < clients}
    pool = FreeClients(clients, exclude=sorted(exclude))
    free = set(range(clients)) - exclude
    for pop, client in operations:
        assert len(pool) == len(free)
        if pop and free:
            assert pool.lowest() == min(free)
            assert pool.pop_lowest() == min(free)
            free.remove(min(free))
        elif not pop and client < clients and client not in free:
            pool.release(client)
            free.add(client)
    assert len(pool) == len(free)


def test_free_clients_need_no_memory_per_client() -> None:
    """A pool of 10**15 clients pops its lowest ones at once."""
    pool = FreeClients(10**15, exclude=[0, 2])
    assert [pool.pop_lowest() for _ in range(3)] == [1, 3, 4]
    assert len(pool) == 10**15 - 5


def test_fcfs_keeps_arrival_order_and_idles_until_arrivals() -> None:
    """Requests are prefilled in arrival order; the engine waits idle for a late arrival."""
    wl = Workload([5, 5, 5], [1, 1, 1], arrival=[10.0, 0.0, 3.0])
    s = simulate(wl, SMALL_COST, 1)
    assert np.argsort(s.stage_start[s.request_prefill_stage]).tolist() == [1, 2, 0]
    assert s.stage_start[s.request_prefill_stage[0]] == 10.0
    assert validate(s) == []


def test_fcfs_stops_at_the_first_prompt_that_does_not_fit_and_at_max_batch() -> None:
    """Strict arrival order: a stage ends at the first prompt too long for it, or at max_batch."""
    wl = Workload([40, 70, 10], [2, 2, 2])
    s = simulate(wl, SMALL_COST, 3)
    assert s.request_prefill_stage.tolist() == [0, 2, 2]  # 10 would fit beside 40, but 70 comes first
    s = simulate(Workload([5] * 5, [2] * 5), SMALL_COST, 5, FCFS(max_batch=2))
    assert np.bincount(s.request_prefill_stage).max() == 2
    with pytest.raises(ValueError, match="max_batch must be at least 1"):
        FCFS(max_batch=0)


def test_static_queues_round_robin_and_given() -> None:
    """Round-robin static queues put request i on client i mod J; given queues are followed in order."""
    wl = Workload([5] * 6, [3, 1, 4, 1, 5, 9])
    s = simulate(wl, SMALL_COST, 2, "static")
    assert s.request_client.tolist() == [0, 1, 0, 1, 0, 1]
    s = simulate(wl, SMALL_COST, 2, StaticQueues([[5, 0], [1, 2, 3, 4]]))
    assert s.request_client.tolist() == [0, 1, 1, 1, 1, 0]
    assert validate(s) == []
    with pytest.raises(ValueError, match="exactly once"):
        simulate(wl, SMALL_COST, 2, StaticQueues([[0, 1], [2, 3]]))
    with pytest.raises(ValueError, match="3 queues but there are 2 clients"):
        simulate(wl, SMALL_COST, 2, StaticQueues([[0, 1], [2, 3], [4, 5]]))


def test_static_queues_given_by_client() -> None:
    """A mapping from client to queue leaves the other clients without work, even among 10**12."""
    wl = Workload([5] * 4, [3, 1, 4, 1])
    s = simulate(wl, SMALL_COST, 10**12, StaticQueues({7: [2, 0], 10**11: [1, 3]}))
    assert s.request_client.tolist() == [7, 10**11, 7, 10**11]
    assert validate(s) == []
    with pytest.raises(ValueError, match=r"queue for client 5; clients are 0\.\.4"):
        simulate(wl, SMALL_COST, 5, StaticQueues({5: [0, 1, 2, 3]}))


@pytest.mark.parametrize(
    ("queues", "message"),
    [
        (3, "queues must be a sequence of queues or a mapping from client to queue, got int 3"),
        ("ab", "queues must be a sequence of queues or a mapping from client to queue, got str"),
        ([3, 4], r"queues\[0\] must be a sequence of request indices, got int 3"),
        ([[0], [1.5]], r"queues\[1\] holds 1.5; requests are integer indices"),
        ([[0], ["1"]], r"queues\[1\] holds '1'; requests are integer indices"),
        ({0: [0], 1.0: [1]}, "keyed by client index, got 1.0"),
        ({0: [0], 1: [True]}, "the queue of client 1 holds True"),
    ],
)
def test_static_queues_must_hold_integer_indices(queues, message) -> None:
    """Queues that are not sequences of integer request indices are refused when the policy is
    made (a request 1.5 used to become request 1 without a word)."""
    with pytest.raises(TypeError, match=message):
        StaticQueues(queues)


def test_prefill_first_always_prefills() -> None:
    """Prefill-first answers PREFILL_NOW whatever it sees."""
    policy = PrefillFirst()
    policy.start(Workload([5], [1]), SMALL_COST, 1)
    assert policy.decide(None) == PREFILL_NOW  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(predicted_instances())
def test_batch_wise_inserts_nothing_into_a_running_batch(instance) -> None:
    """Under batch-wise inference a prefill stage starts only when no request is decoding:
    each batch runs until its longest request finishes."""
    workload, cost, clients = instance
    s = simulate(workload, cost, clients, "batch-wise", "prefill-first")
    assert validate(s) == []
    prefill = s.request_prefill_stage
    for stage in np.unique(prefill).tolist():
        start = s.stage_start[stage]
        before = prefill < stage
        # Every request of an earlier batch has finished by the time this stage starts.
        assert (s.finish[before] <= start + 1e-9 * max(1.0, start)).all()


def test_batch_wise_caps_its_batches() -> None:
    """``max_batch`` caps each batch (Mico's batch sizes 2-10)."""
    from llmsched.online import make_request_policy

    work = Workload([10] * 9, [5, 1, 1, 1, 9, 1, 1, 1, 1])
    s = simulate(
        work, LinearCostModel.paper(), 8, make_request_policy("batch-wise", max_batch=4), "prefill-first"
    )
    assert np.bincount(s.request_prefill_stage[s.request_prefill_stage >= 0]).max() <= 4
    assert validate(s) == [] and len(np.unique(s.request_prefill_stage)) == 3
