"""The decision loop: its mechanics on the cost clock, the checks on every policy answer and
cost-model time, other executors, rules and streams, the replay of a schedule, and schedules
that stay what they were, bit for bit."""

from __future__ import annotations

import dataclasses
import hashlib
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmsched import ContextCostModel, LinearCostModel, Workload, validate
from llmsched.core.cost import is_context_aware
from llmsched.core.schedule import DECODE, PREFILL
from llmsched.engines.competition.rule import CompetitionRule
from llmsched.engines.loop import (
    CostClock,
    EngineStream,
    admits,
    open_engine,
    replay_policies,
    run_loop,
    simulate_policies,
    stream_schedule,
)
from llmsched.online import FCFS, PrefillFirst, StaticQueues, make_iteration_policy, make_request_policy
from llmsched.online.registry import iteration_policy_names, request_policy_names
from llmsched.policies import DECODE_UNTIL_EVENT, PREFILL_NOW, EngineView
from tests.strategies import instances, predicted_instances

SMALL_COST = LinearCostModel(1.0, 0.1, 0.5, 0.25, prefill_capacity=100)


def _run(workload: Workload, clients: int, requests=None, iterations=None, cost=SMALL_COST):
    return simulate_policies(workload, cost, clients, requests or FCFS(), iterations or PrefillFirst())


# ------------------------------------------------------------------ mechanics on the cost clock
def test_hand_computed_schedule() -> None:
    """A three-request, two-client run matches a schedule worked out by hand."""
    s = _run(Workload([10, 20, 30], [2, 1, 3]), 2)
    # P[0,4] holds requests 0 and 1; one decode iteration with 2 active (1 s) ends request 1;
    # P[5,9] prefills request 2 onto client 1; then 2 active (1 s) and 1 active (0.75 s) x 2.
    assert s.stage_kind.tolist() == [PREFILL, DECODE, PREFILL, DECODE]
    assert s.stage_start.tolist() == [0.0, 4.0, 5.0, 9.0]
    assert s.stage_end.tolist() == [4.0, 5.0, 9.0, 11.5]
    assert s.stage_iterations.tolist() == [0, 1, 0, 3]
    assert s.iteration_end.tolist() == [5.0, 10.0, 10.75, 11.5]
    assert s.request_client.tolist() == [0, 1, 1]
    assert s.finish.tolist() == [10.0, 5.0, 11.5]
    assert s.makespan == 11.5
    assert s.info == {
        "request_policy": "fcfs",
        "iteration_policy": "prefill-first",
        "clairvoyant": False,
        "oracle_lengths": False,
    }
    assert not s.measured and validate(s) == []


def test_capacity_limited_prefills_alternate_with_single_iterations() -> None:
    """When the waiting prompts exceed one stage, prefill-first runs one decode iteration between stages."""
    s = _run(Workload([60, 60, 60], [5, 5, 5]), 3)
    assert s.stage_kind.tolist()[:5] == [PREFILL, DECODE, PREFILL, DECODE, PREFILL]
    assert s.stage_iterations[1] == 1 and s.stage_iterations[3] == 1
    assert validate(s) == []


def test_engine_idles_until_the_next_arrival() -> None:
    """With nothing to run the clock jumps to the next arrival; requests start in arrival order."""
    s = _run(Workload([5, 5, 5], [1, 1, 1], arrival=[10.0, 0.0, 3.0]), 1)
    starts = s.stage_start[s.request_prefill_stage]
    assert np.argsort(starts).tolist() == [1, 2, 0]
    assert starts[0] == 10.0 and starts[2] == 3.0
    assert validate(s) == []


def test_arrival_during_decode_starts_a_prefill_at_the_next_iteration_boundary() -> None:
    """A request arriving mid-decode with a client free is prefilled at the first iteration end after it."""
    s = _run(Workload([5, 5], [100, 3], arrival=[0.0, 2.2]), 2)
    # Prefill of request 0 ends at 1.5; iterations of 0.75 s end at 2.25, 3.0, ...
    assert s.stage_start[s.request_prefill_stage[1]] == pytest.approx(2.25)
    assert validate(s) == []


@pytest.mark.parametrize("prompt", [57, 100, 3])
def test_arrival_on_an_iteration_boundary_is_not_delayed(prompt: int) -> None:
    """A request arriving exactly when an iteration ends is prefilled then, not one iteration later."""
    cost = LinearCostModel.paper()
    for k in range(1, 120):
        arrival = cost.prefill_time(prompt) + k * cost.decode_iteration_time(1)
        s = _run(Workload([prompt, 5], [500, 1], arrival=[0.0, arrival]), 2, cost=cost)
        start = s.stage_start[s.request_prefill_stage[1]]
        assert abs(start - arrival) < 1e-9, (k, start, arrival)
        assert validate(s) == []


def test_decide_is_asked_only_with_a_real_choice() -> None:
    """The iteration policy sees ready and active work whenever it is asked, and decode-n is honoured."""
    seen: list[tuple[int, int, int]] = []

    class DecodeFour:
        def start(self, workload, cost, clients) -> None:
            pass

        def decide(self, engine) -> int:
            seen.append((engine.ready, engine.active, engine.free))
            return 4 if engine.stage_iterations < 4 else PREFILL_NOW

    s = _run(Workload([5] * 4, [10, 2, 10, 10]), 3, iterations=DecodeFour())
    assert seen and all(r > 0 and a > 0 for r, a, _ in seen)
    # Request 1 frees a client after 2 iterations; asked then, the policy decodes 4 more before
    # the prefill of request 3.
    assert s.stage_iterations[s.request_prefill_stage[3] - 1] == 6
    assert seen[0] == (1, 2, 1)
    assert validate(s) == []


class _Probe:
    """An iteration policy that checks the view against what it can work out itself."""

    sizes = "oracle"  # told the true lengths: it checks iterations_to_finish against them

    def __init__(self) -> None:
        self.calls = 0

    def start(self, known, cost, clients) -> None:
        self.output = known.output_tokens
        self.prompt = known.prompt_tokens

    def decide(self, engine) -> int:
        self.calls += 1
        assert isinstance(engine, EngineView)
        decoding = engine.decoding_requests()
        assert len(decoding) == engine.active and engine.active + engine.free == engine.clients
        left = [int(self.output[r]) - engine.decoded_tokens(r) for r in decoding]
        assert min(left) == engine.iterations_to_finish >= 1
        if is_context_aware(engine.cost):
            context = sum(self.prompt[r] + engine.decoded_tokens(r) for r in decoding)
            expected = engine.cost.decode_iteration_time(engine.active, context)
            assert engine.iteration_time == pytest.approx(expected, rel=1e-12, abs=1e-15)
        else:
            assert engine.iteration_time == engine.cost.decode_iteration_time(engine.active)
        assert engine.stage_iterations == 0 if engine.just_prefilled else engine.stage_iterations >= 1
        return 3 if self.calls % 3 else PREFILL_NOW


@given(instances())
def test_the_view_shows_the_engine_state(instance) -> None:
    """At every decision the view's counts, decoded tokens and times agree with each other."""
    workload, cost, clients = instance
    schedule = simulate_policies(workload, cost, clients, FCFS(), _Probe())
    assert validate(schedule) == []


class _Recorder:
    """An iteration policy that records the view's fields at every decision and decodes 2."""

    def __init__(self) -> None:
        self.seen: list[tuple] = []

    def start(self, workload, cost, clients) -> None:
        pass

    def decide(self, engine) -> int:
        fields = ("now", "active", "free", "ready", "iterations_to_finish", "stage_iterations", "unstarted")
        self.seen.append(tuple(getattr(engine, name) for name in fields))
        return 2


def test_the_view_shows_nothing_of_requests_yet_to_arrive() -> None:
    """Until a request arrives the view is the same with it or without it (its count of
    unstarted requests used to include those yet to arrive)."""
    arrivals = [0.0, 0.0, 0.0, 0.0, 0.0, 30.0, 30.0]
    stream = Workload([5] * 7, [40, 2, 40, 3, 40, 5, 5], arrival=arrivals)
    recorders = _Recorder(), _Recorder()
    for workload, recorder in zip((stream, stream.subset(np.arange(5))), recorders, strict=True):
        _run(workload, 3, iterations=recorder)
    before = [[seen for seen in recorder.seen if seen[0] < 30.0] for recorder in recorders]
    assert before[0] and before[0] == before[1]


def test_idle_clients_cost_nothing() -> None:
    """A trillion clients for three requests run as fast as three (nothing is sized by J)."""
    s = _run(Workload([5, 6, 7], [3, 2, 1]), 10**12)
    assert sorted(s.request_client.tolist()) == [0, 1, 2] and validate(s) == []


# ------------------------------------------------------------------ checks on request policies
class _BadTake(FCFS):
    """FCFS whose ``call``-th take is replaced by ``answer(good answer)``."""

    def __init__(self, answer, call: int = 1):
        super().__init__()
        self.answer, self.call, self.calls = answer, call, 0

    def take(self, capacity):
        self.calls += 1
        good = super().take(capacity)
        return self.answer(good) if self.calls == self.call else good


TWO = Workload([5, 5], [4, 4])
LATE = Workload([5, 5], [4, 4], arrival=[0.0, 50.0])


@pytest.mark.parametrize(
    ("workload", "clients", "answer", "call", "error", "message"),
    [
        (TWO, 2, lambda good: tuple(good), 1, TypeError, r"returned tuple .*expected a list"),
        (TWO, 2, lambda good: [(0,)], 1, TypeError, r"returned \(0,\) in its list"),
        (TWO, 2, lambda good: [(0, 0.0)], 1, TypeError, r"expected \(request, client\) pairs of ints"),
        (TWO, 2, lambda good: [(True, 0)], 1, TypeError, "pairs of ints"),
        (TWO, 2, lambda good: [], 1, ValueError, r"returned no pair although ready\(\) reported 2"),
        (LATE, 2, lambda good: [(0, 0), (1, 1)], 1, ValueError, "request 1 has not arrived"),
        (TWO, 2, lambda good: [(2, 0)], 1, ValueError, r"request 2 is not in the workload \(0..1\)"),
        (TWO, 2, lambda good: [(-1, 0)], 1, ValueError, "request -1 is not in the workload"),
        (TWO, 2, lambda good: [(0, 0), (0, 1)], 1, ValueError, "request 0 appears twice"),
        (TWO, 2, lambda good: [(0, 2)], 1, ValueError, r"client 2 does not exist \(clients are 0..1\)"),
        (TWO, 2, lambda good: [(0, 0), (1, 0)], 1, ValueError, "client 0 appears twice"),
        (Workload([60, 60], [4, 4]), 2, lambda good: [(0, 0), (1, 1)], 1, ValueError, "120 prompt tokens"),
    ],
)
def test_bad_take_is_reported(workload, clients, answer, call, error, message) -> None:
    """Every way a take() answer can break the contract is reported with the policy's class."""
    with pytest.raises(error, match=message) as caught:
        _run(workload, clients, requests=_BadTake(answer, call))
    assert "request policy _BadTake.take(" in str(caught.value)


def test_taking_a_request_again_is_reported() -> None:
    """A request taken in an earlier stage cannot be taken again."""
    workload = Workload([5, 5, 5], [4, 4, 4], arrival=[0.0, 0.0, 0.5])
    with pytest.raises(ValueError, match="request 0 was taken before"):
        _run(workload, 3, requests=_BadTake(lambda good: [(0, 2)], call=2))


def test_taking_a_busy_client_is_reported() -> None:
    """A client still decoding its request cannot take another."""
    workload = Workload([5, 5, 5], [4, 4, 4], arrival=[0.0, 0.0, 0.5])
    with pytest.raises(ValueError, match="client 0 is busy with request 0"):
        _run(workload, 3, requests=_BadTake(lambda good: [(2, 0)], call=2))


class _BadReady(FCFS):
    def __init__(self, answer):
        super().__init__()
        self.answer = answer

    def ready(self):
        return self.answer


@pytest.mark.parametrize(
    ("answer", "error"),
    [(1.5, TypeError), (None, TypeError), (True, TypeError), ("1", TypeError), (-1, ValueError)],
)
def test_bad_ready_is_reported(answer, error) -> None:
    """ready() must return an int >= 0; anything else is reported with the policy's class."""
    with pytest.raises(error, match=r"request policy _BadReady.ready\(\) returned .*expected an int >= 0"):
        _run(TWO, 2, requests=_BadReady(answer))


def test_numpy_integers_are_accepted_from_policies() -> None:
    """ready(), take() and decide() may answer with numpy integers."""

    class NumpyFCFS(FCFS):
        def ready(self):
            return np.int64(super().ready())

        def take(self, capacity):
            return [(np.int32(r), np.int64(c)) for r, c in super().take(capacity)]

    class NumpyDecide(PrefillFirst):
        def decide(self, engine):
            return np.int64(2)

    s = _run(Workload([5] * 4, [3, 1, 4, 1]), 2, NumpyFCFS(), NumpyDecide())
    assert validate(s) == [] and s.request_client.dtype == np.int64


def test_a_policy_that_never_offers_arrived_work_is_reported() -> None:
    """A request policy answering 0 forever, with every request arrived and nothing running, is reported."""
    with pytest.raises(ValueError, match=r"_BadReady.ready\(\) returned 0 .* 2 request\(s\) never started"):
        _run(TWO, 2, requests=_BadReady(0))


# ------------------------------------------------------------------ checks on iteration policies
def _answering(answer):
    class Answer:
        def start(self, workload, cost, clients) -> None:
            pass

        def decide(self, engine):
            return answer

    return Answer()


@pytest.mark.parametrize(
    ("answer", "error"), [(0.7, TypeError), (None, TypeError), (True, TypeError), (-1, ValueError)]
)
def test_bad_decision_is_reported(answer, error) -> None:
    """decide() must return PREFILL_NOW or n >= 1; anything else is reported with the policy's class."""
    with pytest.raises(error, match=r"iteration policy Answer.decide returned"):
        _run(Workload([5] * 3, [4, 1, 4]), 2, iterations=_answering(answer))


def test_decode_until_event_runs_to_the_next_finish() -> None:
    """DECODE_UNTIL_EVENT decodes until a request finishes, then the policy is asked again."""
    s = _run(Workload([5] * 3, [4, 1, 4]), 2, iterations=_answering(DECODE_UNTIL_EVENT))
    assert validate(s) == []


def test_non_policies_are_refused() -> None:
    """Objects without the protocol's methods are refused before any work."""
    with pytest.raises(TypeError, match="request_policy must be an object"):
        simulate_policies(TWO, SMALL_COST, 2, object(), PrefillFirst())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="iteration_policy must be an object"):
        simulate_policies(TWO, SMALL_COST, 2, FCFS(), "prefill-first")  # type: ignore[arg-type]


@pytest.mark.parametrize("executor", [None, 3, CostClock, object()])
def test_non_executors_are_refused(executor) -> None:
    """run_loop refuses an executor that lacks the protocol (a class is a factory, not one)."""
    with pytest.raises(TypeError, match=r"executor must be an object with start, now, wait_until"):
        run_loop(TWO, SMALL_COST, 2, FCFS(), PrefillFirst(), executor)


# ------------------------------------------------------------------ checks on the cost model
class _Broken:
    """A linear cost model that answers ``value`` for some calls."""

    prefill_capacity = 100

    def __init__(self, prefill_bad=lambda tokens: None, decode_bad=lambda active: None):
        self.base = LinearCostModel(1.0, 0.1, 0.5, 0.25, 100)
        self.prefill_bad, self.decode_bad = prefill_bad, decode_bad

    def prefill_time(self, tokens):
        bad = self.prefill_bad(tokens)
        return self.base.prefill_time(tokens) if bad is None else bad

    def decode_iteration_time(self, active):
        active = np.asarray(active)
        times = np.asarray(self.base.decode_iteration_time(active), dtype=float)
        answers = [self.decode_bad(int(a)) for a in active.ravel()]
        fixed = np.array([t if a is None else a for t, a in zip(times.ravel(), answers, strict=True)])
        return fixed.reshape(times.shape) if times.ndim else float(fixed[0])


@pytest.mark.parametrize(
    ("cost", "message"),
    [
        (_Broken(prefill_bad=lambda t: math.nan if t > 8 else None), r"prefill_time\(10\) = nan"),
        (_Broken(prefill_bad=lambda t: -1.0 if t > 8 else None), r"prefill_time\(10\) = -1.0"),
        (_Broken(prefill_bad=lambda t: math.inf if t > 8 else None), r"prefill_time\(10\) = inf"),
        (_Broken(decode_bad=lambda a: math.nan if a == 2 else None), r"decode_iteration_time\(2\) = nan"),
        (_Broken(decode_bad=lambda a: -0.5 if a == 2 else None), r"decode_iteration_time\(2\) = -0.5"),
    ],
)
def test_cost_model_times_must_be_finite_and_non_negative(cost, message) -> None:
    """A NaN, infinite or negative stage time is reported with the cost model's class and value."""
    with pytest.raises(ValueError, match=message) as caught:
        _run(Workload([5, 5], [3, 3]), 2, cost=cost)
    assert "cost model _Broken" in str(caught.value)


def test_zero_time_stages_are_allowed() -> None:
    """Stages of no time are finite and >= 0: the run goes on (and arrivals still wait)."""
    zero = _Broken(prefill_bad=lambda t: 0.0, decode_bad=lambda a: 0.0)
    s = _run(Workload([5, 5, 5], [3, 3, 2], arrival=[0.0, 0.0, 2.0]), 2, cost=zero)
    assert validate(s) == []
    assert s.stage_start[s.request_prefill_stage[2]] == 2.0


# ------------------------------------------------------------------ other executors
class _OneAtATime(CostClock):
    """The cost clock, but stepping one iteration per call as a device executor does."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def decode(self, running, iterations, due, context=0):
        self.calls += 1
        runs = []
        for step in range(iterations):
            runs += super().decode(running, 1, due, context + len(running) * step)
            if admits(self.now(), due):
                break
        return runs


# Policies whose decisions depend on counts only, not on times (which differ in the last bits
# when iterations are summed one by one).
@given(instances(), st.sampled_from(["fcfs", "static"]), st.sampled_from(["prefill-first", "threshold"]))
def test_an_executor_stepping_single_iterations_makes_the_same_decisions(
    instance, request, iteration
) -> None:
    """The loop's decisions do not depend on how the executor splits decode runs."""
    workload, cost, clients = instance
    workload = workload.replace(arrival=np.zeros(len(workload)))
    jumping = simulate_policies(
        workload, cost, clients, make_request_policy(request), make_iteration_policy(iteration)
    )
    stepping = run_loop(
        workload, cost, clients, make_request_policy(request), make_iteration_policy(iteration), _OneAtATime()
    )
    for field in ("stage_kind", "stage_iterations", "request_client", "request_prefill_stage"):
        assert np.array_equal(getattr(jumping, field), getattr(stepping, field)), field
    np.testing.assert_allclose(stepping.iteration_end, jumping.iteration_end, rtol=1e-9, atol=1e-9)
    assert validate(stepping) == []


def test_an_executor_running_too_many_iterations_is_reported() -> None:
    """An executor that runs more iterations than allowed (or none) breaks the loop loudly."""

    class Greedy(CostClock):
        def decode(self, running, iterations, due, context=0):
            return super().decode(running, iterations + 1, math.inf, context)

    with pytest.raises(RuntimeError, match=r"Greedy\.decode ran"):
        run_loop(Workload([5, 5], [3, 1]), SMALL_COST, 2, FCFS(), PrefillFirst(), Greedy())


# ------------------------------------------------------------------ replay
@given(
    predicted_instances(), st.sampled_from(request_policy_names()), st.sampled_from(iteration_policy_names())
)
def test_replaying_a_schedule_on_the_clock_gives_it_back(instance, request, iteration) -> None:
    """replay_policies make a schedule's decisions again: same stages, clients, iterations and times."""
    workload, cost, clients = instance
    original = simulate_policies(
        workload, cost, clients, make_request_policy(request), make_iteration_policy(iteration)
    )
    again = simulate_policies(workload, cost, clients, *replay_policies(original))
    for field in (
        "stage_kind",
        "stage_first_iteration",
        "stage_iterations",
        "request_client",
        "request_prefill_stage",
        "request_decode_start",
    ):
        assert np.array_equal(getattr(original, field), getattr(again, field)), field
    np.testing.assert_allclose(again.iteration_end, original.iteration_end, rtol=1e-12, atol=1e-12)
    assert again.info == original.info


def test_replay_refuses_what_is_not_a_schedule() -> None:
    """replay_policies takes a Schedule only."""
    with pytest.raises(TypeError, match=r"schedule must be a llmsched\.Schedule"):
        replay_policies("schedule")  # type: ignore[arg-type]


def test_static_queues_run_through_the_loop_as_given() -> None:
    """Given static queues are followed in order (the loop takes what the policy offers)."""
    wl = Workload([5] * 6, [3, 1, 4, 1, 5, 9])
    s = _run(wl, 2, StaticQueues([[5, 0], [1, 2, 3, 4]]))
    assert s.request_client.tolist() == [0, 1, 1, 1, 1, 0]
    order = np.argsort(s.stage_start[s.request_prefill_stage[[1, 2, 3, 4]]])
    assert order.tolist() == [0, 1, 2, 3]


class _Peek:
    """An iteration policy that records what it is told of the lengths."""

    def __init__(self, sizes: str | None = None) -> None:
        self.sizes = sizes
        self.seen: list[tuple[bool, int]] = []

    def start(self, known, cost, clients) -> None:
        self.known = known

    def decide(self, engine) -> int:
        self.seen.append((self.known.output_tokens is not None, engine.iterations_to_finish))
        return PREFILL_NOW


@pytest.mark.parametrize("request_policy", ["hybrid-oracle", "fcfs"])
def test_true_lengths_reach_only_the_policy_that_plans_with_them(request_policy: str) -> None:
    """A run whose request policy plans with the true lengths shows them to that policy
    only: the iteration policy beside it sees neither the lengths nor how soon a request
    finishes, unless it plans with them itself."""
    w = Workload([10] * 12, [5, 40, 7, 30, 9, 3, 50, 8, 6, 20, 11, 4], arrival=np.arange(12) * 0.02)
    cost = LinearCostModel.paper()
    for sizes, told in ((None, False), ("oracle", True)):
        peek = _Peek(sizes)
        s = simulate_policies(w, cost, 3, make_request_policy(request_policy), peek)
        assert validate(s) == [] and peek.seen
        assert all(lengths is told for lengths, _ in peek.seen)
        assert all((finish >= 1) if told else (finish == -1) for _, finish in peek.seen)
        assert s.info["oracle_lengths"] is (told or request_policy == "hybrid-oracle")


# ------------------------------------------------------------------ rules and streams
def test_run_loop_takes_the_rule() -> None:
    """run_loop with FusionRule on the cost clock is simulate_fusion, array for array."""
    from llmsched.engines.fusion.rule import FusionRule
    from llmsched.online.simulate import simulate_fusion

    workload, cost = seeded_workload(7, 40, 3.0), COSTS["context"]
    ruled = run_loop(workload, cost, 4, FCFS(), None, CostClock(), rule=FusionRule(64))
    assert fingerprint(ruled) == fingerprint(simulate_fusion(workload, cost, 4, "fcfs", 64))


def _stream_run(workload: Workload, clients: int, **rule):
    """Feed ``workload`` to an engine through a stream, as a fleet does, and return its schedule."""
    stream = EngineStream()
    iterations = None if rule else PrefillFirst()  # a rule of the test's holds its own policies
    loop = open_engine(SMALL_COST, clients, FCFS(), iterations, stream, False, **rule)
    wake = next(loop)
    order = np.argsort(workload.arrival, kind="stable").tolist()
    for t in sorted(set(workload.arrival.tolist())):
        while not admits(wake, t):  # the engine runs up to the arrival first
            wake = next(loop)
        for request in order:  # every arrival at t reaches the engine before it resumes
            if workload.arrival[request] == t:
                stream.add(int(workload.prompt_tokens[request]), int(workload.output_tokens[request]), 0, t)
        if stream.cuttable:  # idle, or decoding with a client free: it wakes at the arrival
            wake = next(loop)
    stream.closed = True
    result = None
    while result is None:
        try:
            next(loop)
        except StopIteration as done:
            result = done.value
    local = workload.subset(order)
    return stream_schedule(local, SMALL_COST, clients, stream, range(len(workload)), result)


def test_an_engine_on_a_stream_ends_as_a_closed_run() -> None:
    """Fed every request through a stream, in time, an engine makes the closed run's
    schedule under competition's rule and under fusion's."""
    from llmsched.engines.fusion.rule import FusionRule
    from llmsched.engines.fusion.validate import validate_fused

    workload = Workload([5, 9, 30, 4, 12], [6, 3, 8, 2, 5], arrival=[0.0, 0.0, 1.0, 2.5, 2.5])
    streamed = _stream_run(workload, 2)
    closed = simulate_policies(workload, SMALL_COST, 2, FCFS(), PrefillFirst())
    assert validate(streamed) == [] and streamed.makespan == closed.makespan
    assert np.array_equal(streamed.stage_kind, closed.stage_kind)
    fused = _stream_run(workload, 2, rule=FusionRule(16))
    assert validate_fused(fused) == []
    closed_fused = run_loop(workload, SMALL_COST, 2, FCFS(), None, CostClock(), rule=FusionRule(16))
    for field in ("run_start", "run_iterations", "run_chunk_tokens", "chunk_request", "request_decode_start"):
        assert np.array_equal(getattr(fused, field), getattr(closed_fused, field)), field


def test_an_engine_that_got_nothing_has_an_empty_schedule() -> None:
    """A fleet's engine no request reached ends with no stage under either rule."""
    from llmsched.engines.fusion.rule import FusionRule

    for rule in ({}, {"rule": FusionRule(8)}):
        stream = EngineStream()
        loop = open_engine(SMALL_COST, 2, FCFS(), None if rule else PrefillFirst(), stream, False, **rule)
        assert next(loop) == math.inf and stream.cuttable
        stream.closed = True
        with pytest.raises(StopIteration) as done:
            next(loop)
        schedule = stream_schedule(Workload([1], [1]).subset([]), SMALL_COST, 2, stream, [], done.value.value)
        assert schedule.makespan == 0.0


def test_a_stream_runs_on_the_cost_clock_only() -> None:
    """The fleet waits for a run's end before it runs, which only the cost clock can tell."""
    from llmsched.engines.loop import _run

    stream = EngineStream()
    rule = CompetitionRule(PrefillFirst())
    body = _run(stream, 1, False, "s", SMALL_COST, 1, FCFS(), rule, object(), False, stream)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="an engine on a stream runs on a CostClock"):
        next(body)


# ------------------------------------------------------------------ schedules that stay what they were
def fingerprint(schedule) -> str:
    """A digest of every array, number and the info of a schedule, bit for bit."""
    digest = hashlib.sha256()
    for field in dataclasses.fields(schedule):
        value = getattr(schedule, field.name)
        if (
            field.name in ("request_parent", "memory", "request_transfer_start", "request_phase")
            and value is None
        ):
            continue  # fields a schedule gained later, at their defaults: the digests stay
        if field.name in ("skip_request", "skip_run") and not value.size:
            continue  # the same: no sit-outs
        if isinstance(value, np.ndarray):
            digest.update(f"{field.name}:{value.dtype.str}:{value.shape}".encode())
            digest.update(np.ascontiguousarray(value).tobytes())
        elif field.name in ("makespan", "info", "clients", "token_budget", "measured") or value is None:
            digest.update(f"{field.name}={value!r}".encode())
    return digest.hexdigest()[:16]


def seeded_workload(seed: int, n: int, horizon: float) -> Workload:
    """Requests of GSM8K-like lengths arriving over ``horizon`` seconds, with predictions."""
    rng = np.random.default_rng(seed)
    output = rng.integers(1, 120, n)
    return Workload(
        rng.integers(5, 900, n),
        output,
        predicted_output=np.maximum(1, output + rng.integers(-20, 21, n)),
        arrival=np.sort(rng.uniform(0, horizon, n)).round(4),
    )


COSTS = {
    "linear": LinearCostModel.paper(),
    "context": ContextCostModel(0.004, 6e-5, 2e-8, 0.003, 2e-4, 1.5e-6, 1000),
    "table": ContextCostModel(
        0.02, 1e-4, 1e-9, 0.02, 0.0, 2e-7, 2048, decode_by_batch=(0.021, 0.022, 0.02, 0.025, 0.03)
    ),
}


@pytest.mark.parametrize(
    ("case", "digest"),
    [
        ((0, 60, 6.0, "linear", 8, "fcfs", "prefill-first", False), "5740f8dfab908523"),
        ((1, 80, 0.0, "linear", 200, "hybrid", "lagrangian", False), "15f507ccbf6e8dca"),
        ((2, 80, 10.0, "context", 6, "sorted-preemptive", "threshold", False), "8e160a3b30875903"),
        ((3, 60, 3.0, "context", 16, "shortest-first", "slo", True), "24d479ccc0cf5cb5"),
        ((4, 50, 5.0, "table", 4, "offline-oracle", "prefill-first", False), "ab857c43c0072f55"),
        ((5, 120, 20.0, "table", 12, "sorted-preemptive-rr-oracle", "lagrangian", False), "bbe2bb427049e5e8"),
    ],
)
def test_competition_schedules_are_what_they_were(case, digest) -> None:
    """Schedules of the competition engine are bit for bit those the loop built before it
    ran every rule (digests of every array, the makespan and the info, recorded then), over
    linear, context-aware and batch-table cost models, online and clairvoyant runs."""
    from llmsched import simulate

    seed, n, horizon, cost, clients, request, iteration, clairvoyant = case
    schedule = simulate(
        seeded_workload(seed, n, horizon), COSTS[cost], clients, request, iteration, clairvoyant
    )
    assert validate(schedule) == []
    assert fingerprint(schedule) == digest
