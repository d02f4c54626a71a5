"""The one decision loop: arrive -> ready -> decide -> take -> release, over an executor.

The simulator and the runtime run this same loop; what differs is the *executor* behind
it, which runs the stages the loop decides on and tells the time:

* :class:`CostClock`, the simulator: a stage takes what the cost model says, and a run of
  decode iterations over which nothing can change is one arithmetic step (the loop never
  steps through single iterations in Python on this clock);
* the torch engine (:class:`llmsched.runtime.executor.EngineExecutor`): it runs and times
  every iteration on the device.

The loop moves from one decision point to the next: after a prefill stage, when a request
finishes, when a request arrives while a client is free, or when the iteration policy's
requested number of decode iterations has run. Each request finishes at a known global
decode iteration (the iteration counter at its prefill plus its output length), so
finishes come off a heap in O(log J). Memory and time grow with the requests and the
clients in use, never with idle clients.

The loop checks every answer of the policies (see :mod:`llmsched.policies`) and every
time the cost model gives, and builds the schedule in one place (``_Recorder``)
whichever executor ran it: the clock's schedule holds one decode run per jump, a device's
one per iteration.
"""

from __future__ import annotations

import heapq
import math
import numbers
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from llmsched.core.cost import CostModel, context_rate, is_context_aware
from llmsched.core.instance import check_instance, check_stage_time
from llmsched.core.schedule import DECODE, PREFILL
from llmsched.core.workload import Workload
from llmsched.engines.competition.schedule import Schedule
from llmsched.policies import (
    DECODE_UNTIL_EVENT,
    PREFILL_NOW,
    EngineView,
    IterationPolicy,
    KnownRequests,
    RequestPolicy,
    oracle_lengths,
    planned_ahead,
)

__all__ = [
    "CostClock",
    "DecodeRun",
    "Executor",
    "LoopView",
    "PlannedIterations",
    "admits",
    "iteration_times",
    "replay_policies",
    "run_loop",
    "simulate_policies",
]

#: (start, iterations, first iteration time, step): ``iterations`` consecutive decode
#: iterations from ``start``, the first ``first iteration time`` seconds long and each next
#: one ``step`` seconds longer (0 unless the cost model prices context).
DecodeRun = tuple[float, int, float, float]

# A request's state in the loop.
_UNARRIVED, _WAITING, _TAKEN = 0, 1, 2
_INF = math.inf


def admits(now: float, due: float) -> bool:
    """Whether a request due at ``due`` has arrived at ``now``.

    Within a few ulps counts: ``now`` is a sum of iteration times that may fall a rounding
    error short of an arrival a decode run was sized to reach.
    """
    return due <= now + 8 * math.ulp(now)


def iteration_times(cost: CostModel, most_active: int) -> list[float]:
    """``cost.decode_iteration_time(a)`` for ``a`` from 0 to ``most_active``, each checked.

    Raises
    ------
    ValueError
        When a time for one or more active clients is not finite or is negative, naming
        the cost model and the value.
    """
    times = np.asarray(cost.decode_iteration_time(np.arange(most_active + 1)), dtype=np.float64)
    if times.shape != (most_active + 1,):
        times = np.broadcast_to(times, (most_active + 1,))
    used = times[1:]
    # NaN fails both comparisons; a NaN or inf anywhere makes the max not < inf.
    if used.size and not (used.min() >= 0 and used.max() < math.inf):
        active = int(np.flatnonzero(~(np.isfinite(used) & (used >= 0)))[0]) + 1
        check_stage_time(cost, f"decode_iteration_time({active})", times[active])
    return times.tolist()


@runtime_checkable
class Executor(Protocol):
    """What runs the stages the loop decides on, and tells the time.

    The loop calls ``start`` once, then any sequence of the others; an executor needs no
    other knowledge of the policies.

    Attributes
    ----------
    measured
        True when the times are measured on a clock (the schedule is then marked measured
        and its times are not the cost model's).
    """

    measured: bool

    def start(self, workload: Workload, cost: CostModel, clients: int) -> None:
        """Prepare a run: time 0 is now."""
        ...

    def now(self) -> float:
        """Seconds since ``start``. The loop asks once; then it takes the time from what
        ``prefill``, ``decode`` and ``wait_until`` return."""
        ...

    def wait_until(self, time: float) -> float:
        """Idle (nothing decodes, nothing can be prefilled) until ``time``; return the time
        now (at least ``time``)."""
        ...

    def prefill(self, pairs: Sequence[tuple[int, int]], tokens: int) -> tuple[float, float]:
        """Run one prefill stage of ``(request, client)`` pairs holding ``tokens`` prompt
        tokens; return its (start, end)."""
        ...

    def decode(
        self, running: Mapping[int, int], iterations: int, due: float, context: int
    ) -> list[DecodeRun]:
        """Run decode iterations of the requests in ``running`` (client -> request).

        Run ``iterations`` of them, or fewer: stop after the first iteration whose end
        admits ``due`` (an arrival the loop must see; ``inf`` when none). Run at least one.
        ``context`` is the context tokens of the running requests at the first iteration
        (it grows by ``len(running)`` an iteration). Return what ran as :data:`DecodeRun`
        tuples in time order; the last one's end (its start plus the sum of its iteration
        times) is the time now.
        """
        ...

    def info(self) -> dict[str, Any]:
        """What the schedule's ``info`` should say about this executor."""
        ...


class CostClock:
    """The simulator's executor: stages take the cost model's times, with no device.

    A run of decode iterations is one step of arithmetic: ``k`` iterations of ``tau``
    seconds end at ``start + tau * k``. Under a context-aware cost model the context grows
    by one token per active request and iteration, so iteration ``i`` of the run lasts
    ``tau + step * i`` (``step = c_d * active``) and ``k`` of them end at
    ``start + tau * k + step * k (k - 1) / 2``. An arrival the loop must see cuts the run at
    the first iteration end at or after it.
    """

    __slots__ = ("_cost", "_per_context", "_prefill_time", "_prompt", "_tau", "_time")
    measured = False

    def __init__(self) -> None:
        self._time = 0.0
        self._tau: list[float] = []
        self._cost: Any = None
        self._prefill_time: Any = None
        self._per_context = 0.0
        self._prompt: list[int] | None = None  # prompt lengths, for a model that prices squares

    def start(self, workload: Workload, cost: CostModel, clients: int) -> None:
        # At most min(J, n) clients are ever active.
        self.open(cost, min(clients, len(workload)), workload.prompt_tokens.tolist())

    def open(self, cost: CostModel, most_active: int, prompt: list[int]) -> None:
        """Start a run in which at most ``most_active`` requests decode together; ``prompt``
        holds each request's prompt length (a list that may grow as requests join)."""
        self._time = 0.0
        self._cost = cost
        self._prefill_time = cost.prefill_time
        self._tau = iteration_times(cost, most_active)
        aware = is_context_aware(cost)
        self._per_context = context_rate(cost)
        self._prompt = prompt if aware else None
        if aware and not (0.0 <= self._per_context < _INF):
            check_stage_time(cost, "decode_per_context", self._per_context)

    def run_end(self, active: int, iterations: int, context: int) -> float:
        """When ``iterations`` decode iterations of ``active`` requests holding ``context``
        tokens would end if nothing cut them short (what :meth:`decode` returns with no due)."""
        tau = self._tau[active]
        if self._per_context:
            first = tau + self._per_context * context
            growth = self._per_context * active
            return self._time + (first * iterations + growth * (iterations * (iterations - 1) / 2))
        return self._time + tau * iterations

    def now(self) -> float:
        return self._time

    def wait_until(self, time: float) -> float:
        self._time = max(self._time, time)
        return self._time

    def prefill(self, pairs: Sequence[tuple[int, int]], tokens: int) -> tuple[float, float]:
        start = self._time
        prompt = self._prompt
        if prompt is None:
            seconds = float(self._prefill_time(tokens))
        else:
            squares = sum(prompt[request] ** 2 for request, _ in pairs)
            seconds = float(self._prefill_time(tokens, squares))
        if not 0.0 <= seconds < _INF:
            check_stage_time(self._cost, f"prefill_time({tokens})", seconds)
        end = self._time = start + seconds
        return start, end

    def decode(
        self, running: Mapping[int, int], iterations: int, due: float, context: int = 0
    ) -> list[DecodeRun]:
        start = self._time
        tau = self._tau[len(running)]
        if self._per_context:
            return self._decode_growing(start, tau, len(running), iterations, due, context)
        step = iterations
        if due < _INF and tau > 0:
            # The fewest iterations after which the arrival counts as arrived.
            until = max(1, math.ceil((due - start) / tau))
            if until > 1 and admits(start + tau * (until - 1), due):
                until -= 1
            step = min(step, until)
        self._time = start + tau * step
        return [(start, step, tau, 0.0)]

    def _decode_growing(
        self, start: float, tau: float, active: int, iterations: int, due: float, context: int
    ) -> list[DecodeRun]:
        """A run whose iterations grow by ``c_d * active`` each (a context-aware model)."""
        first = tau + self._per_context * context
        growth = self._per_context * active

        def elapsed(k: int) -> float:
            return first * k + growth * (k * (k - 1) / 2)

        step = iterations
        if due < _INF and (first > 0 or growth > 0):
            # The fewest iterations k with start + elapsed(k) >= due: the positive root of
            # growth/2 k^2 + (first - growth/2) k - (due - start), then corrected for rounding.
            # Written 2 span / (linear + sqrt(...)), which does not cancel when growth is tiny
            # next to first (linear = first - growth/2 >= 0, the context holding one token per
            # active request at least).
            span = max(due - start, 0.0)
            half = growth / 2
            linear = first - half
            root = 2 * span / (linear + math.sqrt(linear * linear + 4 * half * span))
            until = max(1, min(iterations, math.ceil(root)))
            while until > 1 and admits(start + elapsed(until - 1), due):
                until -= 1
            while until < iterations and not admits(start + elapsed(until), due):
                until += 1
            step = min(step, until)
        self._time = start + elapsed(step)
        return [(start, step, first, growth)]

    def info(self) -> dict[str, Any]:
        return {}


class LoopView:
    """The :class:`~llmsched.policies.EngineView` the loop offers an iteration policy.

    The loop fills it in just before each ``decide`` call; its values hold during the call.
    """

    __slots__ = (
        "_decode_start",
        "_iteration",
        "_running",
        "active",
        "clients",
        "cost",
        "free",
        "iteration_time",
        "iterations_to_finish",
        "just_prefilled",
        "known",
        "now",
        "oldest_arrival",
        "ready",
        "stage_iterations",
        "unstarted",
        "waiting_seconds",
    )

    def __init__(
        self,
        known: KnownRequests,
        cost: CostModel,
        clients: int,
        running: Mapping[int, int],
        decode_start: Sequence[int],
    ):
        self.known = known
        self.cost = cost
        self.clients = clients
        self._running = running
        self._decode_start = decode_start
        self._iteration = 0
        self.now = 0.0
        self.active = 0
        self.free = clients
        self.ready = 0
        self.iteration_time = 0.0
        self.iterations_to_finish = 0
        self.stage_iterations = 0
        self.just_prefilled = False
        self.unstarted = 0
        self.oldest_arrival = _INF
        self.waiting_seconds = 0.0

    def decoding_requests(self) -> list[int]:
        """The requests decoding now, in no particular order (O(active))."""
        return list(self._running.values())

    def decoded_tokens(self, request: int) -> int:
        """Tokens ``request`` has decoded so far; it must be decoding now."""
        return self._iteration - self._decode_start[request]


class _Recorder:
    """The stages and decode runs of one run, in time order: the one place a loop's
    schedule is built, whichever executor ran it.

    The loop appends to the lists directly (a method call per stage and per run showed
    in the simulator's benchmark); :meth:`schedule` turns them into a Schedule.
    """

    __slots__ = (
        "end",
        "first",
        "iterations",
        "kind",
        "run_iterations",
        "run_start",
        "run_step",
        "run_time",
        "start",
    )

    def __init__(self) -> None:
        self.kind: list[int] = []  # PREFILL or DECODE, per stage
        self.start: list[float] = []
        self.end: list[float] = []
        self.first: list[int] = []  # global index of the stage's first decode iteration
        self.iterations: list[int] = []  # decode iterations of the stage
        # Every decode run, as the executor reported it (three lists: one list of tuples
        # converts to arrays at more than twice the cost).
        self.run_start: list[float] = []
        self.run_iterations: list[int] = []
        self.run_time: list[float] = []
        self.run_step: list[float] = []

    def schedule(
        self,
        workload: Workload,
        cost: CostModel,
        clients: int,
        client_of: list[int],
        prefill_stage: list[int],
        decode_start: list[int],
        measured: bool,
        info: dict[str, Any],
    ) -> Schedule:
        start = np.asarray(decode_start, dtype=np.int64)
        return Schedule(
            workload=workload,
            cost=cost,
            clients=clients,
            stage_kind=np.asarray(self.kind, dtype=np.int8),
            stage_start=np.asarray(self.start, dtype=np.float64),
            stage_end=np.asarray(self.end, dtype=np.float64),
            stage_first_iteration=np.asarray(self.first, dtype=np.int64),
            stage_iterations=np.asarray(self.iterations, dtype=np.int64),
            run_start=np.asarray(self.run_start, dtype=np.float64),
            run_iterations=np.asarray(self.run_iterations, dtype=np.int64),
            run_iteration_time=np.asarray(self.run_time, dtype=np.float64),
            request_client=np.asarray(client_of, dtype=np.int64),
            request_prefill_stage=np.asarray(prefill_stage, dtype=np.int64),
            request_decode_start=start,
            request_decode_end=start + workload.output_tokens,
            makespan=self.end[-1] if self.end else 0.0,
            measured=measured,
            info=info,
            # None when every run is at constant speed (a model blind to context).
            run_iteration_step=np.asarray(self.run_step, dtype=np.float64) if any(self.run_step) else None,
        )


def _has_methods(policy: object, methods: tuple[str, ...]) -> bool:
    # What isinstance(policy, RequestPolicy) checks, at an eighth of its cost; a class is a
    # factory, not a policy, even though it has the methods.
    return not isinstance(policy, type) and all(callable(getattr(policy, m, None)) for m in methods)


def _name(policy: object) -> str:
    return str(getattr(policy, "name", type(policy).__name__))


def _integer(value: object) -> int | None:
    """``value`` as an int if it is an integer (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return None
    return int(value)


def _count(answer: object, what: str, expected: str) -> int:
    """``answer`` as an int >= 0, or a TypeError (not an integer) / ValueError (negative)
    that names the policy's method (``what``) and says what it must return."""
    value = _integer(answer)
    if value is None or value < 0:
        raise (TypeError if value is None else ValueError)(f"{what} returned {answer!r}; expected {expected}")
    return value


def _check_ready(ready: object, policy: RequestPolicy) -> int:
    return _count(
        ready,
        f"request policy {type(policy).__name__}.ready()",
        "an int >= 0 (the number of requests a prefill could take now)",
    )


def _check_decision(decision: object, policy: IterationPolicy) -> int:
    return _count(
        decision,
        f"iteration policy {type(policy).__name__}.decide",
        "PREFILL_NOW (0) or a number of decode iterations n >= 1",
    )


def _check_pair(pair: object, policy: RequestPolicy, capacity: int) -> tuple[int, int]:
    """A well-formed ``(request, client)`` pair of ints, or TypeError."""
    if isinstance(pair, (tuple, list)) and len(pair) == 2:
        request, client = _integer(pair[0]), _integer(pair[1])
        if request is not None and client is not None:
            return request, client
    raise TypeError(
        f"request policy {type(policy).__name__}.take({capacity}) returned {pair!r} in its list; "
        "expected (request, client) pairs of ints"
    )


def _refuse_take(pairs: object, policy: RequestPolicy, capacity: int, ready: int) -> None:
    """Raise for a take() answer that is not a non-empty list."""
    name = type(policy).__name__
    if type(pairs) is not list:
        raise TypeError(
            f"request policy {name}.take({capacity}) returned {type(pairs).__name__} {pairs!r}; "
            "expected a list of (request, client) pairs"
        )
    raise ValueError(
        f"request policy {name}.take({capacity}) returned no pair although ready() reported "
        f"{ready} ready request(s)"
    )


def _pair_problem(
    request: int,
    client: int,
    n: int,
    clients: int,
    state: bytearray,
    stage: int,
    prefill_stage: list[int],
    running: Mapping[int, int],
    arrival: list[float],
    now: float,
) -> str:
    """What is wrong with a ``(request, client)`` pair that failed the loop's quick check."""
    if not 0 <= request < n:
        return f"request {request} is not in the workload (0..{n - 1})"
    if state[request] == _UNARRIVED:
        return (
            f"request {request} has not arrived (it arrives at {arrival[request]:.9g} s; now is {now:.9g} s)"
        )
    if state[request] == _TAKEN:
        if prefill_stage[request] == stage:
            return f"request {request} appears twice"
        return f"request {request} was taken before"
    if not 0 <= client < clients:
        return f"client {client} does not exist (clients are 0..{clients - 1})"
    if prefill_stage[running[client]] == stage:
        return f"client {client} appears twice"
    return f"client {client} is busy with request {running[client]}"


def _check_objects(request_policy: object, iteration_policy: object, executor: object) -> None:
    if not _has_methods(request_policy, ("start", "arrive", "release", "ready", "take")):
        raise TypeError(
            "request_policy must be an object with start, arrive, release, ready and take methods, "
            f"got {type(request_policy).__name__}"
        )
    if not _has_methods(iteration_policy, ("start", "decide")):
        raise TypeError(
            "iteration_policy must be an object with start and decide methods, "
            f"got {type(iteration_policy).__name__}"
        )
    if not _has_methods(executor, ("start", "now", "wait_until", "prefill", "decode", "info")) or not hasattr(
        executor, "measured"
    ):
        raise TypeError(
            "executor must be an object with start, now, wait_until, prefill, decode and info methods "
            f"and a measured attribute (a CostClock or a device executor), got {type(executor).__name__}"
        )


class _Requests:
    """The loop's per-request lists, by request index (``order`` and ``due`` in arrival order)."""

    __slots__ = (
        "arrival",
        "client_of",
        "decode_start",
        "due",
        "order",
        "output",
        "planned",
        "prefill_stage",
        "prompt",
        "state",
    )

    def __init__(
        self,
        prompt: list[int],
        output: list[int],
        arrival: list[float],
        planned: list[int],
        order: list[int],
    ):
        n = len(prompt)
        self.prompt, self.output, self.arrival, self.planned = prompt, output, arrival, planned
        self.order = order
        self.due = [arrival[i] for i in order]
        self.state = bytearray(n)  # _UNARRIVED, _WAITING or _TAKEN, per request
        self.client_of = [-1] * n
        self.prefill_stage = [-1] * n
        self.decode_start = [-1] * n

    @classmethod
    def of(cls, workload: Workload) -> _Requests:
        """The lists of a closed run of ``workload`` (every request known, in arrival order)."""
        predicted = workload.predicted_output
        return cls(
            workload.prompt_tokens.tolist(),
            workload.output_tokens.tolist(),
            workload.arrival.tolist(),
            predicted.tolist() if predicted is not None else [0] * len(workload),
            np.argsort(workload.arrival, kind="stable").tolist(),
        )


class EngineStream(_Requests):
    """One engine's requests as a fleet routes them to it, for :func:`open_engine`.

    The fleet adds a request with :meth:`add` once the request has reached the engine (its
    arrival there), in time order; the engine numbers its requests in that order. The
    engine's loop runs as a generator: it yields the time up to which it needs every
    arrival routed before it can go on (``inf`` when it waits for one), and writes its
    counts here at every yield. While ``cuttable`` is True (the engine is idle, or decodes
    with a client free), an arrival changes what it does: the fleet wakes it at that
    arrival's time; otherwise the fleet wakes it at the time it yielded.

    ``withdrawn`` holds requests the fleet took back from the engine's request policy
    (through the policy's optional ``withdraw``, for backoff); the loop forgets
    them at its next step. ``closed`` tells an idle engine that nothing more will come.
    """

    __slots__ = (
        "closed",
        "cuttable",
        "finished",
        "finished_planned",
        "finished_prompt",
        "free",
        "knowns",
        "most_active",
        "started",
        "withdrawn",
    )

    def __init__(self) -> None:
        super().__init__([], [], [], [], [])
        self.knowns: tuple[KnownRequests, ...] = ()
        self.withdrawn: list[int] = []
        self.closed = False
        self.cuttable = False
        self.started = 0  # prefilled or withdrawn (and forgotten)
        self.finished = 0
        self.finished_planned = 0  # planned output tokens of the finished requests
        self.finished_prompt = 0  # and their prompt tokens
        self.free = 0
        self.most_active = 0  # the most requests that can decode at once (set when opened)

    def add(self, prompt: int, output: int, planned: int, arrival: float) -> int:
        """Add a request that reached the engine at ``arrival``; return its index there."""
        index = len(self.prompt)
        self.prompt.append(prompt)
        self.output.append(output)
        self.planned.append(planned)
        self.arrival.append(arrival)
        self.due.append(arrival)
        self.order.append(index)
        self.state.append(_UNARRIVED)
        self.client_of.append(-1)
        self.prefill_stage.append(-1)
        self.decode_start.append(-1)
        for known in self.knowns:
            known.add_slot()
        return index


def open_engine(
    cost: CostModel,
    clients: int,
    request_policy: RequestPolicy,
    iteration_policy: IterationPolicy,
    stream: EngineStream,
    predictions: bool,
    name: str = "stream",
    most_requests: int | None = None,
) -> Any:
    """The decision loop of one engine whose requests arrive through ``stream``, on the
    cost model's clock, as a generator (see :class:`EngineStream`). ``most_requests`` bounds
    the requests the stream will hold (a fleet's workload size), so that nothing is sized by
    clients that can never be busy.

    Prime it with ``next``; resume it with ``next`` once the time it yielded has come or an
    arrival was added while ``stream.cuttable``. When ``stream.closed`` and nothing is
    left it returns ``(recorder, info)`` (in ``StopIteration.value``), which
    :func:`stream_schedule` turns into a schedule.
    """
    _check_objects(request_policy, iteration_policy, CostClock())
    stream.most_active = int(clients) if most_requests is None else min(int(clients), int(most_requests))
    return _decisions(
        stream,
        sys.maxsize,
        predictions,
        name,
        cost,
        int(clients),
        request_policy,
        iteration_policy,
        CostClock(),
        False,
        stream,
    )


def stream_schedule(
    workload: Workload,
    cost: CostModel,
    clients: int,
    stream: EngineStream,
    kept: Sequence[int],
    result: tuple[_Recorder, dict[str, Any]],
) -> Schedule:
    """The schedule of an engine run by :func:`open_engine`: ``workload`` holds the requests
    it kept (not withdrawn), whose indices in the stream are ``kept``, in order."""
    record, info = result
    client_of = [stream.client_of[i] for i in kept]
    prefill_stage = [stream.prefill_stage[i] for i in kept]
    decode_start = [stream.decode_start[i] for i in kept]
    return record.schedule(workload, cost, clients, client_of, prefill_stage, decode_start, False, info)


def run_loop(
    workload: Workload,
    cost: CostModel,
    clients: int,
    request_policy: RequestPolicy,
    iteration_policy: IterationPolicy,
    executor: Executor,
    clairvoyant: bool = False,
) -> Schedule:
    """Run the decision loop with two policy objects on ``executor``; return the schedule.

    Parameters
    ----------
    workload, cost, clients
        The instance (checked first). ``cost`` is what the iteration policy sees and what
        the schedule names; the executor decides how long stages take.
    request_policy, iteration_policy
        Policy objects (see :mod:`llmsched.policies`); they are started afresh.
    executor
        What runs the stages: :class:`CostClock` or a device executor.
    clairvoyant
        Reveal every request to the policies before the run starts (the paper's offline
        batch planned ahead, or a study that asks for it). By default the run is
        non-anticipative: the policies learn of a request when it arrives.

    Returns
    -------
    Schedule
        Every stage and every request's placement, ``measured`` when the executor's clock
        is a real one. Its ``info`` says whether the run was ``clairvoyant`` and whether
        the policies were told the true output lengths (``oracle_lengths``).

    Raises
    ------
    ValueError, TypeError
        On an invalid instance, an object that is not a policy or an executor, a policy answer that breaks
        its contract, or a cost-model time that is not finite and >= 0; the message names
        the policy's or the cost model's class and what was wrong.
    """
    check_instance(workload, cost, clients)
    _check_objects(request_policy, iteration_policy, executor)
    clients = int(clients)
    n = len(workload)
    lists = _Requests.of(workload)
    if not isinstance(clairvoyant, (bool, np.bool_)):
        raise TypeError(f"clairvoyant must be True or False, got {clairvoyant!r}")
    body = _decisions(
        lists,
        n,
        workload.predicted_output is not None,
        workload.name,
        cost,
        clients,
        request_policy,
        iteration_policy,
        executor,
        bool(clairvoyant),
        None,
        workload,
    )
    try:
        next(body)
    except StopIteration as done:
        record, info = done.value
    else:  # pragma: no cover - a closed run never yields
        raise RuntimeError("the decision loop yielded in a closed run")
    return record.schedule(
        workload,
        cost,
        clients,
        lists.client_of,
        lists.prefill_stage,
        lists.decode_start,
        executor.measured,
        info,
    )


def _decisions(
    lists: _Requests,
    n: int,
    predictions: bool,
    name: str,
    cost: CostModel,
    clients: int,
    requests: RequestPolicy,
    iterations: IterationPolicy,
    executor: Executor,
    clairvoyant: bool,
    stream: EngineStream | None,
    workload: Workload | None = None,
) -> Any:
    """The loop's body, a generator: it yields only with a ``stream`` (see :class:`EngineStream`)
    and returns ``(recorder, info)``. Closed, ``n`` is the number of requests; on a stream it
    is ``sys.maxsize`` and the requests are those the stream holds."""
    requests_name = type(requests).__name__
    prompt, output, arrival, planned = lists.prompt, lists.output, lists.arrival, lists.planned
    order, due_in_order, state = lists.order, lists.due, lists.state
    client_of, prefill_stage, decode_start = lists.client_of, lists.prefill_stage, lists.decode_start
    capacity = int(cost.prefill_capacity)
    size = len(prompt)  # requests known up front: all of them, or none on a stream
    most_active = min(clients, size) if stream is None else max(1, stream.most_active or clients)
    tau = iteration_times(cost, most_active)

    # Each policy knows what it may: true lengths only for one that plans with them.
    lengths_r = clairvoyant or oracle_lengths(requests)
    lengths_i = clairvoyant or oracle_lengths(iterations)
    known = KnownRequests(size, predictions, lengths_r, clairvoyant, name)
    known_i = (
        known if lengths_i == lengths_r else KnownRequests(size, predictions, lengths_i, clairvoyant, name)
    )
    knowns = (known,) if known_i is known else (known, known_i)
    reveal, reveal_i = known.reveal, (None if known_i is known else known_i.reveal)
    if clairvoyant:
        for request in order:
            for each in knowns:
                each.reveal(request, prompt[request], planned[request], output[request], arrival[request])

    requests.start(known, clients)
    iterations.start(known_i, cost, clients)
    if stream is None:
        executor.start(workload, cost, clients)  # type: ignore[arg-type]
    else:
        stream.knowns = knowns
        executor.open(cost, most_active, prompt)  # type: ignore[attr-defined]

    waiting, taken_before = _WAITING, _TAKEN
    running: dict[int, int] = {}  # client -> request decoding on it
    heap: list[tuple[int, int, int]] = []  # (finish iteration, client, request)
    record = _Recorder()
    kinds, starts, ends = record.kind, record.start, record.end
    firsts, stage_iterations = record.first, record.iterations
    run_start, run_iterations, run_time = record.run_start, record.run_iterations, record.run_time
    run_step = record.run_step
    # Context tokens of the decoding requests at global iteration g: context_offset +
    # active * g, where context_offset sums prompt - decode_start over them.
    context_offset = 0
    per_context = context_rate(cost)
    view = LoopView(known_i, cost, clients, running, decode_start)
    heappush, heappop = heapq.heappush, heapq.heappop
    # Bound once: the loop calls them tens of thousands of times.
    arrive, ready_now, take, release = requests.arrive, requests.ready, requests.take, requests.release
    decide = iterations.decide
    run_prefill, run_decode = executor.prefill, executor.decode
    prefill_kind, decode_kind, prefill_now = PREFILL, DECODE, PREFILL_NOW
    until_event = DECODE_UNTIL_EVENT

    known_n = size  # requests known to the loop, in arrival order
    next_arrival = finished = started = 0
    oldest = 0  # position in ``order`` of the oldest arrived request that may not have started
    waiting_arrival_sum = 0.0  # sum of the arrival times of the arrived, unstarted requests
    g = 0  # global decode iteration counter
    free = clients
    just_prefilled = False  # the last stage is a prefill stage
    now = executor.now()
    while finished < n:
        if stream is not None:
            known_n = len(due_in_order)
            if stream.withdrawn:
                for request in stream.withdrawn:
                    state[request] = taken_before  # it left: it counts as started here
                    waiting_arrival_sum -= arrival[request]
                    started += 1
                stream.withdrawn.clear()
        if next_arrival < known_n and admits(now, due_in_order[next_arrival]):
            horizon = now + 8 * math.ulp(now)  # what admits() allows
            while next_arrival < known_n and due_in_order[next_arrival] <= horizon:
                request = order[next_arrival]
                state[request] = waiting
                if not clairvoyant:
                    reveal(request, prompt[request], planned[request], output[request], arrival[request])
                    if reveal_i is not None:
                        reveal_i(
                            request, prompt[request], planned[request], output[request], arrival[request]
                        )
                arrive(request)
                waiting_arrival_sum += due_in_order[next_arrival]
                next_arrival += 1
        active = len(heap)
        ready = ready_now() if free else 0
        if type(ready) is not int or ready < 0:
            ready = _check_ready(ready, requests)
        decision = until_event
        if ready and active:
            view.now = now
            view.active = active
            view.free = free
            view.ready = ready
            view.iteration_time = (
                tau[active] + per_context * (context_offset + active * g) if per_context else tau[active]
            )
            # How soon a request finishes follows from true lengths: shown only to a policy
            # that plans with them.
            view.iterations_to_finish = heap[0][0] - g if lengths_i else -1
            view.stage_iterations = 0 if just_prefilled else stage_iterations[-1]
            view.just_prefilled = just_prefilled
            view.unstarted = unstarted = next_arrival - started  # arrived: the future is not shown
            while oldest < next_arrival and state[order[oldest]] == taken_before:
                oldest += 1
            view.oldest_arrival = due_in_order[oldest] if oldest < next_arrival else _INF
            view.waiting_seconds = max(0.0, unstarted * now - waiting_arrival_sum) if unstarted else 0.0
            view._iteration = g
            decision = decide(view)
            if type(decision) is not int or decision < 0:
                decision = _check_decision(decision, iterations)

        if ready and (not active or (decision == prefill_now and not just_prefilled)):
            pairs = take(capacity)
            if type(pairs) is not list or not pairs:
                _refuse_take(pairs, requests, capacity, ready)
            stage = len(kinds)
            tokens = 0
            well_formed = True
            for pair in pairs:
                try:
                    request, client = pair
                except (TypeError, ValueError):
                    request, client = _check_pair(pair, requests, capacity)  # raises
                if type(request) is not int or type(client) is not int or type(pair) is not tuple:
                    request, client = _check_pair(pair, requests, capacity)
                    well_formed = False
                if not (0 <= request < known_n and state[request] == waiting and 0 <= client < clients) or (
                    client in running
                ):
                    problem = _pair_problem(
                        request, client, known_n, clients, state, stage, prefill_stage, running, arrival, now
                    )
                    raise ValueError(f"request policy {requests_name}.take({capacity}) is invalid: {problem}")
                tokens += prompt[request]
                waiting_arrival_sum -= arrival[request]
                state[request] = taken_before
                running[client] = request
                client_of[request] = client
                prefill_stage[request] = stage
                decode_start[request] = g
                context_offset += prompt[request] - g
                heappush(heap, (g + output[request], client, request))
            if tokens > capacity:
                raise ValueError(
                    f"request policy {requests_name}.take({capacity}) is invalid: its requests hold "
                    f"{tokens} prompt tokens, more than the capacity of {capacity}"
                )
            if not well_formed:  # numpy integers or lists: the executor gets tuples of ints
                pairs = [_check_pair(pair, requests, capacity) for pair in pairs]
            free -= len(pairs)
            started += len(pairs)
            start, now = run_prefill(pairs, tokens)
            kinds.append(prefill_kind)
            starts.append(start)
            ends.append(now)
            firsts.append(g)
            stage_iterations.append(0)
            just_prefilled = True
            if stream is not None:  # arrivals up to the stage's end are routed first
                stream.started, stream.finished, stream.free = started, finished, free
                yield now
            continue

        if not active:
            # Nothing to decode and nothing to prefill: idle until the next arrival.
            if next_arrival >= known_n and stream is not None and not stream.closed:
                stream.started, stream.finished, stream.free = started, finished, free
                stream.cuttable = True
                yield _INF  # until the fleet routes a request here, or closes the stream
                stream.cuttable = False
                continue
            if next_arrival >= known_n:
                if stream is not None and started == known_n:
                    break  # closed, and every request it got has finished or left
                raise ValueError(
                    f"request policy {requests_name}.ready() returned 0 with {free} free client(s), "
                    f"nothing decoding and every request arrived, yet {known_n - started} request(s) never "
                    "started: the run cannot go on"
                )
            now = executor.wait_until(due_in_order[next_arrival])
            continue

        # Decode a run of iterations over which the active set cannot change.
        step = heap[0][0] - g
        if ready:
            asked = decision if decision > 0 else 1
            if asked < step:
                step = asked
        cut = False
        if stream is not None:
            stream.started, stream.finished, stream.free = started, finished, free
            # Wait for the run's end on the fleet's clock before running it, so that nothing
            # the run changes (its finishes) is seen before it happens. With a client free an
            # arrival may cut it short: the fleet then wakes the engine at that arrival.
            stream.cuttable = bool(free)
            yield executor.run_end(active, step, context_offset + active * g)  # type: ignore[attr-defined]
            stream.cuttable = False
            known_n = len(due_in_order)
            cut = bool(free) and next_arrival < known_n
        due = due_in_order[next_arrival] if free and next_arrival < known_n else _INF
        ran = 0
        for start, count, seconds, growth in run_decode(running, step, due, context_offset + active * g):
            if just_prefilled:
                kinds.append(decode_kind)
                starts.append(start)
                ends.append(start)
                firsts.append(g)
                stage_iterations.append(0)
                just_prefilled = False
            run_start.append(start)
            run_iterations.append(count)
            run_time.append(seconds)
            run_step.append(growth)
            # As Schedule.run_end adds it up (adding 0.0 leaves a constant-speed run's sum as is).
            now = start + (seconds * count + growth * (count * (count - 1) / 2))
            ends[-1] = now
            stage_iterations[-1] += count
            ran += count
        if not 0 < ran <= step:
            raise RuntimeError(
                f"executor {type(executor).__name__}.decode ran {ran} iterations; 1 to {step} were allowed"
            )
        g += ran
        while heap and heap[0][0] == g:
            _, client, request = heappop(heap)
            del running[client]
            context_offset -= prompt[request] - decode_start[request]
            for each in knowns:
                each.finish(output[request])
            release(client)
            free += 1
            finished += 1
            if stream is not None:
                stream.finished_planned += planned[request]
                stream.finished_prompt += prompt[request]
        if cut and stream is not None:
            # A cut run ends after the arrival that woke the engine: arrivals up to its end first.
            stream.started, stream.finished, stream.free = started, finished, free
            yield now

    if stream is not None:
        stream.started, stream.finished, stream.free = started, finished, free
    info = {
        "request_policy": _name(requests),
        "iteration_policy": _name(iterations),
        "clairvoyant": clairvoyant or planned_ahead(requests) or planned_ahead(iterations),
        "oracle_lengths": lengths_r or lengths_i,
        **executor.info(),
    }
    return record, info


def simulate_policies(
    workload: Workload,
    cost: CostModel,
    clients: int,
    request_policy: RequestPolicy,
    iteration_policy: IterationPolicy,
    clairvoyant: bool = False,
) -> Schedule:
    """Simulate two policy objects on the cost model's clock and return the schedule.

    :func:`llmsched.simulate` is this with policies named as well; here they must be
    objects (see :mod:`llmsched.policies`). ``clairvoyant`` as for :func:`run_loop`.
    Raises as :func:`run_loop` does.
    """
    return run_loop(workload, cost, clients, request_policy, iteration_policy, CostClock(), clairvoyant)


class _ReplayRequests:
    """Takes a schedule's prefill stages in order, each once its requests have arrived and
    its clients are free."""

    def __init__(self, groups: list[list[tuple[int, int]]], name: str, sizes: str, ahead: bool):
        self.name = name
        # What the replayed decisions were made with, for the run's info.
        self.sizes = sizes
        self.planned_ahead = ahead
        self._groups = groups
        self._group_of = {request: k for k, group in enumerate(groups) for request, _ in group}
        self._clients = [{client for _, client in group} for group in groups]
        self.taken = 0  # groups taken so far; the next one is groups[taken]
        self._missing = 0  # requests of the next group not arrived, plus its clients busy
        self._arrived: set[int] = set()
        self._busy: set[int] = set()

    def _count_missing(self) -> None:
        if self.taken < len(self._groups):
            group = self._groups[self.taken]
            self._missing = sum((r not in self._arrived) + (c in self._busy) for r, c in group)

    def start(self, known: KnownRequests, clients: int) -> None:
        self.taken = 0
        self._arrived = set()
        self._busy = set()
        self._count_missing()

    def arrive(self, request: int) -> None:
        self._arrived.add(request)
        if self._group_of.get(request) == self.taken:
            self._missing -= 1

    def release(self, client: int) -> None:
        self._busy.discard(client)
        if self.taken < len(self._groups) and client in self._clients[self.taken]:
            self._missing -= 1

    def ready(self) -> int:
        if self.taken >= len(self._groups) or self._missing:
            return 0
        return len(self._groups[self.taken])

    def take(self, capacity: int) -> list[tuple[int, int]]:
        group = self._groups[self.taken]
        self._busy.update(self._clients[self.taken])
        self.taken += 1
        self._count_missing()
        return list(group)


class _TakesStages(Protocol):
    taken: int


class PlannedIterations:
    """An iteration policy that decodes each planned decode stage for its planned iterations.

    For replays: ``requests`` is the replay's request policy, whose ``taken`` counts the
    prefill stages taken so far; ``iterations[k]`` is the length of the decode stage after
    the ``k``-th of them. Once a stage has run its length the policy answers PREFILL_NOW
    (the loop decodes on, until the next event, while the next stage cannot start).
    """

    def __init__(self, requests: _TakesStages, iterations: Sequence[int], name: str = "planned"):
        self.name = name
        self._requests = requests
        self._iterations = iterations

    def start(self, known: KnownRequests, cost: CostModel, clients: int) -> None:
        pass

    def decide(self, engine: EngineView) -> int:
        planned = self._iterations[self._requests.taken - 1]  # the stage after the last prefill
        left = planned - (0 if engine.just_prefilled else engine.stage_iterations)
        return left if left >= 1 else PREFILL_NOW


def replay_policies(schedule: Schedule) -> tuple[RequestPolicy, IterationPolicy]:
    """Policies that make ``schedule``'s decisions again: the same prefill stages (same
    requests on the same clients, in order) and decode stages of the same lengths.

    Run on the cost clock with the schedule's instance they give the schedule back (its
    times up to rounding). On a device whose clock runs ahead of the cost model, a stage
    whose requests have not arrived yet waits for them by decoding on (stages never pause).
    """
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule must be a llmsched.Schedule, got {type(schedule).__name__}")
    prefills = np.flatnonzero(schedule.stage_kind == PREFILL)
    members: dict[int, list[tuple[int, int]]] = {int(s): [] for s in prefills}
    for request, (stage, client) in enumerate(
        zip(schedule.request_prefill_stage.tolist(), schedule.request_client.tolist(), strict=True)
    ):
        members.setdefault(stage, []).append((request, client))
    groups = [members[int(s)] for s in prefills]
    kinds = schedule.stage_kind
    after = [
        int(schedule.stage_iterations[s + 1]) if s + 1 < kinds.size and kinds[s + 1] == DECODE else 0
        for s in prefills.tolist()
    ]
    sizes = "oracle" if schedule.info.get("oracle_lengths") else "predicted"
    ahead = bool(schedule.info.get("clairvoyant"))
    requests = _ReplayRequests(groups, str(schedule.info.get("request_policy", "replay")), sizes, ahead)
    return requests, PlannedIterations(requests, after, str(schedule.info.get("iteration_policy", "replay")))
