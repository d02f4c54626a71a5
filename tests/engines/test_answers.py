"""The checks of policy answers, in one place: each refusal on its own, and the same broken
answer refused alike (same exception, same message) by a competition and a fused engine."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from llmsched import LinearCostModel, Workload, simulate, validate
from llmsched.engines.answers import (
    TAKEN,
    UNARRIVED,
    WAITING,
    check_decision,
    check_executor,
    check_iteration_policy,
    check_pair,
    check_ready,
    check_request_policy,
    has_methods,
    policy_name,
    refuse_capacity,
    refuse_idle,
    refuse_pair,
    refuse_step,
    refuse_take,
)
from llmsched.engines.clock import CostClock
from llmsched.engines.fusion.validate import validate_fused
from llmsched.online import FCFS, PrefillFirst
from llmsched.online.simulate import simulate_fusion

COST = LinearCostModel(1.0, 0.1, 0.5, 0.25, prefill_capacity=100)
TWO = Workload([5, 5], [4, 4])


class _Policy:
    name = "mine"


# ------------------------------------------------------------------ each check on its own
@pytest.mark.parametrize("answer", [0, 3, np.int64(2), np.int32(0), np.uint8(7)])
def test_ready_accepts_python_and_numpy_integers(answer) -> None:
    """Any integer >= 0 is a count, returned as an int."""
    value = check_ready(answer, _Policy())
    assert value == int(answer) and type(value) is int


@pytest.mark.parametrize(
    ("answer", "error"),
    [(1.0, TypeError), (None, TypeError), (True, TypeError), ("1", TypeError), (-1, ValueError)],
)
def test_ready_refuses_what_is_not_a_count(answer, error) -> None:
    """A non-integer (a bool, a whole float) is a TypeError, a negative one a ValueError."""
    with pytest.raises(error, match=r"request policy _Policy\.ready\(\) returned .*; expected an int >= 0"):
        check_ready(answer, _Policy())


def test_decision_names_the_iteration_policy() -> None:
    """decide's answers are checked as counts, in the iteration policy's words."""
    assert check_decision(np.int16(4), _Policy()) == 4
    with pytest.raises(
        ValueError, match=r"iteration policy _Policy\.decide returned -2; expected PREFILL_NOW"
    ):
        check_decision(-2, _Policy())


@pytest.mark.parametrize("pair", [(0, 1), [0, 1], (np.int64(0), np.int32(1))])
def test_pair_accepts_two_integers_in_a_tuple_or_list(pair) -> None:
    assert check_pair(pair, _Policy(), 10) == (0, 1)


@pytest.mark.parametrize("pair", [(0,), (0, 1, 2), (0.0, 0.0), (0, 1.0), (True, 0), "01", None, (0, None)])
def test_pair_refuses_anything_else(pair) -> None:
    """(0.0, 0.0), a bool, a short tuple: not a pair of ints."""
    with pytest.raises(
        TypeError, match=r"_Policy\.take\(10\) returned .* in its list; expected \(request, client\)"
    ):
        check_pair(pair, _Policy(), 10)


def test_take_must_be_a_non_empty_list() -> None:
    with pytest.raises(TypeError, match=r"take\(10\) returned tuple \(\); expected a list"):
        refuse_take((), _Policy(), 10, 2)
    with pytest.raises(ValueError, match=r"take\(10\) returned no pair although ready\(\) reported 2"):
        refuse_take([], _Policy(), 10, 2)


@pytest.mark.parametrize(
    ("index", "client", "message"),
    [
        (5, 0, r"request 5 is not in the workload \(0..3\)"),
        (0, 0, r"request 0 has not arrived \(it arrives at 7 s; now is 2.5 s\)"),
        (1, 0, "request 1 appears twice"),
        (2, 0, "request 2 was taken before"),
        (3, 9, r"client 9 does not exist \(clients are 0..2\)"),
        (3, 0, "client 0 appears twice"),
        (3, 2, "client 2 is busy with request 2"),
    ],
)
def test_pair_problems_are_named(index, client, message) -> None:
    """Each way a well-formed pair can be wrong gets its own message (take 4 took request 1
    onto client 0; request 2 holds client 2 since an earlier take; request 3 waits)."""
    state = [UNARRIVED, TAKEN, TAKEN, WAITING]
    taken_at = [-1, 4, 1, -1]
    holding = {0: 1, 2: 2}
    with pytest.raises(ValueError, match=r"request policy _Policy\.take\(10\) is invalid: " + message):
        refuse_pair(index, client, _Policy(), 10, 4, 3, state, taken_at, 4, holding, [7.0] * 4, 2.5)


def test_capacity_idle_and_rule_refusals() -> None:
    with pytest.raises(
        ValueError, match="its requests hold 120 prompt tokens, more than the capacity of 100"
    ):
        refuse_capacity(120, 100, _Policy())
    with pytest.raises(
        ValueError, match=r"returned 0 with 2 free client\(s\).* 3 request\(s\) never started"
    ):
        refuse_idle(_Policy(), 2, 3)
    with pytest.raises(ValueError, match=r"batching rule _Policy answered -7 with 1 request\(s\) ready"):
        refuse_step(_Policy(), -7, 1)
    with pytest.raises(TypeError, match=r"batching rule _Policy answered 'x'"):
        refuse_step(_Policy(), "x", 0)


def test_objects_are_checked_for_their_methods() -> None:
    """A class is a factory, not a policy; an executor needs mixed as well as decode."""
    assert has_methods(FCFS(), ("ready", "take")) and not has_methods(FCFS, ("ready", "take"))
    assert policy_name(FCFS()) == "fcfs" and policy_name(object()) == "object"
    check_request_policy(FCFS())
    check_iteration_policy(PrefillFirst())
    check_executor(CostClock())
    with pytest.raises(TypeError, match="request_policy must be an object"):
        check_request_policy(PrefillFirst())
    with pytest.raises(TypeError, match="iteration_policy must be an object"):
        check_iteration_policy(FCFS())

    class NoMixed:
        measured = False

        def start(self): ...
        def now(self): ...
        def wait_until(self): ...
        def prefill(self): ...
        def decode(self): ...
        def info(self): ...

    with pytest.raises(TypeError, match=r"executor must be an object with .* mixed"):
        check_executor(NoMixed())


# ------------------------------------------------------------------ the same refusal in every mode
class _Answering(FCFS):
    """FCFS whose first ``ready()`` or first ``take()`` answer is replaced."""

    def __init__(self, ready=None, take=None):
        super().__init__()
        self.bad_ready, self.bad_take = ready, take
        self.readies = self.takes = 0

    def ready(self):
        self.readies += 1
        good = super().ready()
        return self.bad_ready[0] if self.bad_ready is not None and self.readies == 1 else good

    def take(self, capacity):
        self.takes += 1
        good = super().take(capacity)
        return self.bad_take[0] if self.bad_take is not None and self.takes == 1 else good


def _refusals(workload: Workload, clients: int, **answers) -> list[tuple[type, str]]:
    """What a competition engine and a fused one raise on the same answers."""
    refused = []
    for run in (
        lambda policy: simulate(workload, COST, clients, policy, "prefill-first"),
        lambda policy: simulate_fusion(workload, COST, clients, policy, 64),
    ):
        with pytest.raises((TypeError, ValueError)) as caught:
            run(_Answering(**answers))
        refused.append((caught.type, str(caught.value)))
    return refused


broken_ready = st.one_of(
    st.floats(allow_nan=True),
    st.none(),
    st.booleans(),
    st.text(max_size=3),
    st.integers(max_value=-1),
    st.integers(-(2**40), -1).map(np.int64),
    st.lists(st.integers(0, 3), max_size=2),
    st.sampled_from([np.float64(1.0), np.bool_(True), 1 + 0j]),
)


@given(broken_ready)
def test_a_broken_ready_is_refused_alike_in_every_mode(answer) -> None:
    """ready() answering a float, a bool, a string, a negative count (numpy or not): both
    engines raise the same exception with the same message."""
    competition, fusion = _refusals(TWO, 2, ready=(answer,))
    assert competition == fusion
    negative = isinstance(answer, (int, np.integer)) and not isinstance(answer, bool) and answer < 0
    assert competition[0] is (ValueError if negative else TypeError)


_valid = st.tuples(st.integers(0, 1), st.integers(0, 1))
_well_formed = st.one_of(
    _valid,
    _valid.map(list),
    _valid.map(lambda pair: (np.int64(pair[0]), np.int32(pair[1]))),
    st.tuples(st.integers(-3, 6), st.integers(-3, 6)),
)
_malformed = st.one_of(
    st.just((0.0, 0.0)),
    st.tuples(st.floats(allow_nan=False), st.integers(0, 1)),
    st.tuples(st.integers(0, 1), st.floats(allow_nan=False)),
    st.tuples(st.booleans(), st.integers(0, 1)),
    st.tuples(st.integers(0, 1)),
    st.tuples(st.integers(0, 1), st.integers(0, 1), st.integers(0, 1)),
    st.sampled_from(["ab", None, (0, None), (np.float64(0.0), 1)]),
)


def _is_broken(answer: object) -> bool:
    """Whether a take() answer for TWO's first take (both requests waiting, both clients
    free) breaks the contract."""
    if type(answer) is not list or not answer:
        return True
    pairs = []
    for pair in answer:
        try:
            pairs.append(check_pair(pair, _Policy(), 100))
        except TypeError:
            return True
    requests, clients = [r for r, _ in pairs], [c for _, c in pairs]
    return (
        not all(0 <= r < 2 and 0 <= c < 2 for r, c in pairs)
        or len(set(requests)) < len(requests)
        or len(set(clients)) < len(clients)
    )


broken_take = st.one_of(
    st.just([]),
    st.sampled_from([(), None, "ab", {0: 0}, ((0, 0),)]),
    st.lists(st.one_of(_well_formed, _malformed), min_size=1, max_size=3),
)


@given(broken_take)
def test_a_broken_take_is_refused_alike_in_every_mode(answer) -> None:
    """take() answering another type, an empty list, pairs of floats or bools ((0.0, 0.0)
    included), requests or clients out of range or twice: both engines raise the same
    exception with the same message."""
    assume(_is_broken(answer))
    competition, fusion = _refusals(TWO, 2, take=(answer,))
    assert competition == fusion
    assert f"request policy _Answering.take({COST.prefill_capacity})" in competition[1]


@pytest.mark.parametrize(
    ("workload", "clients", "answer", "message"),
    [
        (Workload([60, 60], [4, 4]), 2, [(0, 0), (1, 1)], "120 prompt tokens"),
        (Workload([5, 5], [4, 4], arrival=[0.0, 50.0]), 2, [(0, 0), (1, 1)], "request 1 has not arrived"),
    ],
)
def test_capacity_and_arrival_are_refused_alike(workload, clients, answer, message) -> None:
    """A take over the prefill capacity, or of a request yet to arrive, in both modes."""
    competition, fusion = _refusals(workload, clients, take=(answer,))
    assert competition == fusion and competition[0] is ValueError and message in competition[1]


class _Later(FCFS):
    """FCFS whose second take answers ``answer``."""

    def __init__(self, answer):
        super().__init__()
        self.answer, self.takes = answer, 0

    def take(self, capacity):
        self.takes += 1
        good = super().take(capacity)
        return self.answer if self.takes == 2 else good


@pytest.mark.parametrize(
    ("answer", "message"),
    [([(0, 2)], "request 0 was taken before"), ([(2, 0)], "client 0 is busy with request 0")],
)
def test_later_takes_are_refused_alike(answer, message) -> None:
    """A request taken before, or a client still holding its request, in both modes."""
    workload = Workload([5, 5, 5], [40, 40, 40], arrival=[0.0, 0.0, 0.5])
    refused = []
    for run in (
        lambda: simulate(workload, COST, 3, _Later(answer), "prefill-first"),
        lambda: simulate_fusion(workload, COST, 3, _Later(answer), 64),
    ):
        with pytest.raises(ValueError, match=message) as caught:
            run()
        refused.append(str(caught.value))
    assert refused[0] == refused[1]


def test_a_policy_that_never_offers_work_is_refused_alike() -> None:
    """ready() answering 0 forever, with everything arrived and nothing running."""
    competition, fusion = _refusals(TWO, 2, ready=(0,))
    assert competition == fusion and "2 request(s) never started" in competition[1]


def test_numpy_answers_are_accepted_in_every_mode() -> None:
    """ready() and take() may answer with numpy integers, and take() with lists for pairs,
    under competition and under fusion alike."""

    class Numpy(FCFS):
        def ready(self):
            return np.int64(super().ready())

        def take(self, capacity):
            return [[np.int32(r), np.int64(c)] for r, c in super().take(capacity)]

    workload = Workload([5, 9, 7, 3], [3, 1, 4, 1], arrival=[0.0, 0.0, 0.4, math.pi])
    assert validate(simulate(workload, COST, 2, Numpy(), "prefill-first")) == []
    assert validate_fused(simulate_fusion(workload, COST, 2, Numpy(), 8)) == []
