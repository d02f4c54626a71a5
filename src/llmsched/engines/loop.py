"""The one decision loop: arrive -> ready -> decide -> take -> release -> run an iteration.

Every engine, in every mode, runs this loop; what differs is

* the *batching rule* it asks what each iteration holds (:mod:`llmsched.engines.rule`): a
  prefill stage or a run of decode iterations under competition
  (:class:`~llmsched.engines.competition.rule.CompetitionRule`), decoding plus prompt chunks
  within a token budget under fusion (:class:`~llmsched.engines.fusion.rule.FusionRule`);
* the *executor* that runs those iterations and tells the time
  (:mod:`llmsched.engines.clock`): :class:`CostClock`, the simulator, on which a run of
  decode iterations over which nothing can change is one arithmetic step (the loop never
  steps through single iterations in Python on this clock), or the torch engine
  (:class:`llmsched.runtime.executor.EngineExecutor`), which runs and times each on the device.

The loop moves from one decision point to the next: after a prefill stage or a mixed
iteration, when a request finishes, when a request arrives while a client is free, or when
the rule's number of decode iterations has run. Each request finishes at a known global
decode iteration (the iteration counter when it starts decoding plus its output length), so
finishes come off a heap in O(log J). Memory and time grow with the requests and the
clients in use, never with idle clients.

The loop checks every answer of the policies and of the rule
(:mod:`llmsched.engines.answers`) and records what ran in one place
(:class:`~llmsched.engines.rule.RunRecord`), whichever rule and executor ran it; the rule
turns the record into its mode's schedule.
"""

from __future__ import annotations

import heapq
import math
import sys
from collections.abc import Generator, Sequence
from typing import Any, Protocol, TypeVar

import numpy as np

from llmsched.core.cost import CostModel, context_rate
from llmsched.core.instance import check_instance
from llmsched.core.memory import KVMemory
from llmsched.core.schedule import DECODE, PREFILL
from llmsched.core.workload import Workload
from llmsched.engines.answers import (
    TAKEN,
    UNARRIVED,
    WAITING,
    check_executor,
    check_open_ended,
    check_pair,
    check_ready,
    check_request_policy,
    policy_name,
    refuse_capacity,
    refuse_idle,
    refuse_pair,
    refuse_step,
    refuse_take,
)
from llmsched.engines.clock import CostClock, DecodeRun, Executor, admits, iteration_times
from llmsched.engines.competition.rule import CompetitionRule
from llmsched.engines.competition.schedule import Schedule
from llmsched.engines.rule import (
    DECODE_ONLY,
    HAND_OFF,
    JOIN,
    PREFILL_ONLY,
    PREFILL_STAGE,
    TAKE,
    WHOLE,
    BatchingRule,
    LoopView,
    RuleStart,
    RunRecord,
)
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

# The clock's names and the view stay importable from here, where the runtime, the
# disaggregated cluster and the fleet have always found them.
__all__ = [
    "CostClock",
    "DecodeRun",
    "EngineStream",
    "Executor",
    "LoopView",
    "PlannedIterations",
    "RequestLists",
    "ScheduleT",
    "admits",
    "iteration_times",
    "open_engine",
    "replay_policies",
    "run_loop",
    "simulate_policies",
    "stream_schedule",
]

_INF = math.inf
#: The schedule class a batching rule builds (:class:`~llmsched.engines.competition.schedule.Schedule`
#: for the competition rule).
ScheduleT = TypeVar("ScheduleT")


class RequestLists:
    """The loop's per-request lists, by request index (``order`` and ``due`` in arrival order).

    ``state`` holds each request's state (:data:`~llmsched.engines.answers.UNARRIVED`,
    ``WAITING`` or ``TAKEN``); ``client_of``, ``taken_at`` (the number of the take that took
    it) and ``decode_start`` (its first decode iteration) read -1 until they are known.
    """

    __slots__ = (
        "arrival",
        "client_of",
        "decode_start",
        "due",
        "order",
        "output",
        "planned",
        "prompt",
        "state",
        "taken_at",
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
        self.state = bytearray(n)  # UNARRIVED, WAITING or TAKEN, per request
        self.client_of = [-1] * n
        self.taken_at = [-1] * n
        self.decode_start = [-1] * n

    def grow(self, prompt: int, output: int, planned: int, arrival: float) -> int:
        """Add a request, not arrived, none of its placement known; return its index (the
        caller puts it in the order of arrival, or, a preempted request's continuation,
        makes it wait at once)."""
        index = len(self.prompt)
        self.prompt.append(prompt)
        self.output.append(output)
        self.planned.append(planned)
        self.arrival.append(arrival)
        self.state.append(UNARRIVED)
        self.client_of.append(-1)
        self.taken_at.append(-1)
        self.decode_start.append(-1)
        return index

    @classmethod
    def of(cls, workload: Workload) -> RequestLists:
        """The lists of a closed run of ``workload`` (every request known, in arrival order)."""
        predicted = workload.predicted_output
        return cls(
            workload.prompt_tokens.tolist(),
            workload.output_tokens.tolist(),
            workload.arrival.tolist(),
            predicted.tolist() if predicted is not None else [0] * len(workload),
            np.argsort(workload.arrival, kind="stable").tolist(),
        )


class EngineStream(RequestLists):
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

    For a driver that follows the engine's work request by request (a disaggregated
    cluster): ``stage`` is ``(start, end, pairs)`` of the prefill stage the engine has just
    taken, set when it yields after taking it (the driver clears it); ``done``, when the
    driver sets it to a list, gets the index of every request that finishes decoding, and
    ``done_at`` the time they finished: the end of the run the engine has just run, which,
    for a run cut short by an arrival, is later than that arrival (the time the engine
    yields next); the driver empties the list when it has read it.

    For a driver that splits a request's phases between engines of a fused rule:
    ``phase`` holds each request's :data:`~llmsched.engines.rule.WHOLE`,
    :data:`~llmsched.engines.rule.PREFILL_ONLY` (it leaves when its prompt's last chunk has run,
    counted among the finished and, with ``done``, listed there at that iteration's end) or
    :data:`~llmsched.engines.rule.DECODE_ONLY` (taken, it joins the decoding requests at once,
    its prompt prefilled elsewhere: it needs no prefill capacity); ``phased`` says whether any
    request is not ``WHOLE``.

    ``horizon``, set by the driver each time it resumes the engine, is the earliest time at
    which anything may reach the engine or read its counts (for a fleet without backoff, its
    next arrival), so the engine runs on past a time it would yield while that time is before
    the horizon (by more than :func:`admits`' tolerance). The default, ``-inf``, has it yield
    every time.
    """

    __slots__ = (
        "closed",
        "cuttable",
        "done",
        "done_at",
        "finished",
        "finished_planned",
        "finished_prompt",
        "free",
        "horizon",
        "knowns",
        "most_active",
        "phase",
        "phased",
        "prefilled_prompt",
        "stage",
        "started",
        "withdrawn",
    )

    def __init__(self) -> None:
        super().__init__([], [], [], [], [])
        self.knowns: tuple[KnownRequests, ...] = ()
        self.withdrawn: list[int] = []
        self.closed = False
        self.cuttable = False
        self.started = 0  # taken or withdrawn (and forgotten)
        self.finished = 0
        self.finished_planned = 0  # planned output tokens of the finished requests
        self.finished_prompt = 0  # and their prompt tokens
        self.prefilled_prompt = 0  # prompt tokens of the requests whose prefill has ended
        self.free = 0
        self.horizon = -_INF
        self.most_active = 0  # the most requests that can decode at once (set when opened)
        self.stage: tuple[float, float, list[tuple[int, int]]] | None = None
        self.done: list[int] | None = None
        self.done_at = 0.0
        self.phase = bytearray()
        self.phased = False

    def grow(self, prompt: int, output: int, planned: int, arrival: float) -> int:
        self.phase.append(WHOLE)
        return super().grow(prompt, output, planned, arrival)

    def add(self, prompt: int, output: int, planned: int, arrival: float, phase: int = WHOLE) -> int:
        """Add a request that reached the engine at ``arrival``; return its index there.
        ``phase``: what of its work it does here (see the class's docstring)."""
        if phase != WHOLE:
            if phase not in (PREFILL_ONLY, DECODE_ONLY):
                raise ValueError(f"phase must be WHOLE, PREFILL_ONLY or DECODE_ONLY, got {phase!r}")
            self.phased = True
        self.phase.append(phase)
        index = RequestLists.grow(self, prompt, output, planned, arrival)
        self.due.append(arrival)
        self.order.append(index)
        for known in self.knowns:
            known.add_slot()
        return index


def _clairvoyant(value: object) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"clairvoyant must be True or False, got {value!r}")
    return bool(value)


def open_engine(
    cost: CostModel,
    clients: int,
    request_policy: RequestPolicy,
    iteration_policy: IterationPolicy | None,
    stream: EngineStream,
    predictions: bool,
    name: str = "stream",
    most_requests: int | None = None,
    rule: BatchingRule[Any] | None = None,
) -> Generator[float, None, Any]:
    """The decision loop of one engine whose requests arrive through ``stream``, on the
    cost model's clock, as a generator (see :class:`EngineStream`). ``most_requests`` bounds
    the requests the stream will hold (a fleet's workload size), so that nothing is sized by
    clients that can never be busy. ``iteration_policy`` and ``rule`` as for :func:`run_loop`.

    Prime it with ``next``; resume it with ``next`` once the time it yielded has come or an
    arrival was added while ``stream.cuttable``. When ``stream.closed`` and nothing is
    left it returns its result (in ``StopIteration.value``), which :func:`stream_schedule`
    turns into the rule's schedule.
    """
    check_request_policy(request_policy)
    rule = _rule(rule, iteration_policy)
    stream.most_active = int(clients) if most_requests is None else min(int(clients), int(most_requests))
    return _run(
        stream,
        sys.maxsize,
        predictions,
        name,
        cost,
        int(clients),
        request_policy,
        rule,
        CostClock(),
        False,
        stream,
    )


def _rule(rule: BatchingRule[Any] | None, iteration_policy: IterationPolicy | None) -> BatchingRule[Any]:
    """The rule a run asks: ``rule``, or competition's under ``iteration_policy``."""
    if rule is None:
        return CompetitionRule(iteration_policy)  # type: ignore[arg-type]  # it checks the policy
    if iteration_policy is not None:
        raise TypeError(
            f"iteration_policy must be None with a batching rule ({type(rule).__name__} asks "
            f"its own policies), got {type(iteration_policy).__name__}"
        )
    return rule


def stream_schedule(
    workload: Workload,
    cost: CostModel,
    clients: int,
    stream: EngineStream,
    kept: Sequence[int],
    result: Any,
) -> Any:
    """The schedule of an engine run by :func:`open_engine`, as its rule builds it:
    ``workload`` holds the requests it kept (not withdrawn), whose indices in the stream are
    ``kept``, in order; under KV-cache memory, the pieces of preempted requests among them
    (the schedule's ``request_parent`` then numbers the user requests as ``kept`` orders the
    requests that are no piece)."""
    rule, record = result
    if record.request_parent is not None:
        # Each piece's user request, numbered as the requests kept that are no piece.
        parent = record.request_parent
        users = {request: user for user, request in enumerate(i for i in kept if parent[i] == i)}
        record.request_parent = [users[parent[i]] for i in kept]
    _place(record, stream, kept)
    return rule.schedule(workload, cost, clients, record, False)


def _place(record: RunRecord, lists: RequestLists, kept: Sequence[int] | None) -> None:
    """Copy the placement of the requests kept (all when ``kept`` is None) into ``record``,
    renumbering them 0, 1, ... in that order."""
    if getattr(lists, "phased", False):
        phase = lists.phase  # type: ignore[attr-defined]  # an EngineStream's
        record.request_phase = list(phase) if kept is None else [phase[i] for i in kept]
    if kept is None:
        record.request_client = lists.client_of
        record.request_take = lists.taken_at
        record.request_decode_start = lists.decode_start
        return
    record.request_client = [lists.client_of[i] for i in kept]
    record.request_take = [lists.taken_at[i] for i in kept]
    record.request_decode_start = [lists.decode_start[i] for i in kept]
    if record.chunk_request or record.skip_request:
        number = {old: new for new, old in enumerate(kept)}
        record.chunk_request = [number[request] for request in record.chunk_request]
        record.skip_request = [number[request] for request in record.skip_request]


def run_loop(
    workload: Workload,
    cost: CostModel,
    clients: int,
    request_policy: RequestPolicy,
    iteration_policy: IterationPolicy | None,
    executor: Executor,
    clairvoyant: bool | np.bool_ = False,
    rule: BatchingRule[ScheduleT] | None = None,
) -> Schedule | ScheduleT:
    """Run the decision loop with a request policy on ``executor``; return the schedule.

    Parameters
    ----------
    workload, cost, clients
        The instance (checked first, as ``rule`` needs it). ``cost`` is what the policies
        see and what the schedule names; the executor decides how long iterations take.
    request_policy, iteration_policy
        Policy objects (see :mod:`llmsched.policies`); they are started afresh. The
        iteration policy is competition's, for the default rule; with another ``rule`` it
        must be None (a rule that asks one holds it).
    executor
        What runs the iterations: :class:`CostClock` or a device executor.
    clairvoyant
        Reveal every request to the policies before the run starts (the paper's offline
        batch planned ahead, or a study that asks for it). By default the run is
        non-anticipative: the policies learn of a request when it arrives.
    rule
        The batching rule (:mod:`llmsched.engines.rule`); by default competition's
        (:class:`~llmsched.engines.competition.rule.CompetitionRule` of ``iteration_policy``).

    Returns
    -------
    Schedule or the rule's schedule
        Every iteration and every request's placement, ``measured`` when the executor's
        clock is a real one. Its ``info`` says whether the run was ``clairvoyant`` and
        whether the policies were told the true output lengths (``oracle_lengths``).

    Raises
    ------
    ValueError, TypeError
        On an invalid instance, an object that is not a policy or an executor, a policy answer that breaks
        its contract, or a cost-model time that is not finite and >= 0; the message names
        the policy's or the cost model's class and what was wrong.
    """
    if rule is None:  # competition's, checked in the order the loop always had
        check_instance(workload, cost, clients)
        check_request_policy(request_policy)
    else:
        rule.check(workload, cost, clients)
        check_request_policy(request_policy)
    engine_rule = _rule(rule, iteration_policy)
    check_executor(executor)
    clients = int(clients)
    n = len(workload)
    lists = RequestLists.of(workload)
    body = _run(
        lists,
        n,
        workload.predicted_output is not None,
        workload.name,
        cost,
        clients,
        request_policy,
        engine_rule,
        executor,
        _clairvoyant(clairvoyant),
        None,
        workload,
    )
    try:
        next(body)
    except StopIteration as done:
        _, record = done.value
    else:  # pragma: no cover - a closed run never yields
        raise RuntimeError("the decision loop yielded in a closed run")
    _place(record, lists, None)
    if record.request_parent is not None:
        workload = _pieces(workload, lists)
    schedule: Schedule | ScheduleT = engine_rule.schedule(workload, cost, clients, record, executor.measured)
    return schedule


def _pieces(workload: Workload, lists: RequestLists) -> Workload:
    """The workload of a run's pieces (see :class:`~llmsched.engines.rule.RunRecord`): each
    request's first piece, then the continuations in the order made, each with its prompt
    (the request's and the tokens recomputed), the tokens it decoded and its request's
    arrival and prediction."""
    predicted = lists.planned if workload.predicted_output is not None else None
    return Workload(lists.prompt, lists.output, predicted, lists.arrival, name=workload.name)


def simulate_policies(
    workload: Workload,
    cost: CostModel,
    clients: int,
    request_policy: RequestPolicy,
    iteration_policy: IterationPolicy,
    clairvoyant: bool = False,
    memory: KVMemory | None = None,
) -> Schedule:
    """Simulate two policy objects on the cost model's clock and return the schedule.

    :func:`llmsched.simulate` is this with policies named as well; here they must be
    objects (see :mod:`llmsched.policies`). ``clairvoyant`` as for :func:`run_loop`;
    ``memory``, the engine's KV-cache memory (see
    :class:`~llmsched.engines.competition.rule.CompetitionRule`). Raises as :func:`run_loop` does.
    """
    if memory is None:
        return run_loop(workload, cost, clients, request_policy, iteration_policy, CostClock(), clairvoyant)
    rule = CompetitionRule(iteration_policy, memory)
    schedule = run_loop(workload, cost, clients, request_policy, None, CostClock(), clairvoyant, rule)
    assert isinstance(schedule, Schedule)  # what CompetitionRule builds
    return schedule


class _Knowledge:
    """The :class:`~llmsched.policies.KnownRequests` of a run's policies: the request
    policy's, and one more for the rule's policies when they are told the true lengths and
    it is not (or the other way round). Every request is revealed up front in a
    ``clairvoyant`` run; ``told`` says whether some policy is told the true lengths."""

    def __init__(self, lists: RequestLists, predictions: bool, lengths: bool, clairvoyant: bool, name: str):
        self.lists, self.predictions, self.clairvoyant, self.name = lists, predictions, clairvoyant, name
        self.all = [self._new(lengths)]
        self.lengths = self.told = lengths

    def _new(self, lengths: bool) -> KnownRequests:
        lists = self.lists
        known = KnownRequests(len(lists.prompt), self.predictions, lengths, self.clairvoyant, self.name)
        if self.clairvoyant:
            prompt, planned, output, arrival = lists.prompt, lists.planned, lists.output, lists.arrival
            for request in lists.order:
                known.reveal(request, prompt[request], planned[request], output[request], arrival[request])
        return known

    def known_for(self, oracle: bool) -> KnownRequests:
        """The view of a policy of the rule's, told the true lengths if ``oracle``."""
        lengths = self.clairvoyant or oracle
        self.told = self.told or lengths
        if lengths == self.lengths:
            return self.all[0]
        if len(self.all) == 1:
            self.all.append(self._new(lengths))
        return self.all[1]


def _run(
    lists: RequestLists,
    n: int,
    predictions: bool,
    name: str,
    cost: CostModel,
    clients: int,
    requests: RequestPolicy,
    rule: BatchingRule[Any],
    executor: Executor,
    clairvoyant: bool,
    stream: EngineStream | None,
    workload: Workload | None = None,
) -> Generator[float, None, tuple[BatchingRule[Any], RunRecord]]:
    """The loop's body, a generator: it yields only with a ``stream`` (see :class:`EngineStream`)
    and returns ``(rule, record)``. Closed, ``n`` is the number of requests; on a stream it
    is ``sys.maxsize`` and the requests are those the stream holds."""
    prompt, output, arrival, planned = lists.prompt, lists.output, lists.arrival, lists.planned
    order, due_in_order, state = lists.order, lists.due, lists.state
    client_of, taken_at, decode_start = lists.client_of, lists.taken_at, lists.decode_start
    capacity = int(cost.prefill_capacity)
    token_cap = getattr(rule, "token_cap", None)  # optional: see BatchingRule
    if token_cap is not None:
        capacity = min(capacity, int(token_cap))
    size = len(prompt)  # requests known up front: all of them, or none on a stream
    if getattr(rule, "memory", None) is not None:
        check_open_ended(requests)

    # Each policy knows what it may: true lengths only for one that plans with them.
    knowledge = _Knowledge(lists, predictions, clairvoyant or oracle_lengths(requests), clairvoyant, name)
    known = knowledge.all[0]
    requests.start(known, clients)
    running: dict[int, int] = {}  # client -> request decoding on it
    engine = RuleStart(cost, clients, prompt, running, decode_start, known, knowledge.known_for)
    rule.start(engine)
    knowns = tuple(knowledge.all)
    reveal, reveal_other = known.reveal, (knowns[1].reveal if len(knowns) > 1 else None)
    # A request policy that keeps its own view of the requests (a cluster machine's queue)
    # reads nothing of the loop's: the loop neither reveals nor counts for it.
    own_view = bool(getattr(requests, "own_view", False)) and len(knowns) == 1
    tell = not clairvoyant and not own_view  # reveal each request as it arrives
    if own_view:
        knowns = ()
    most_active = min(clients, size) if stream is None else max(1, stream.most_active or clients)
    if stream is None:
        executor.start(workload, cost, clients)  # type: ignore[arg-type]
        if getattr(rule, "memory", None) is not None and isinstance(executor, CostClock):
            # The clock reads prompt lengths by request: the loop's lists, which grow with the
            # continuations of preempted requests.
            executor.open(cost, min(clients, size), prompt)
        clock = None
    else:
        stream.knowns = knowns
        # A fleet's engine runs on the cost clock, which tells a run's end before running it.
        clock = executor if isinstance(executor, CostClock) else None
        if clock is None:
            raise TypeError(f"an engine on a stream runs on a CostClock, got {type(executor).__name__}")
        clock.open(cost, most_active, prompt)

    # What the rule's view shows, when it has one.
    view = rule.view
    tau = iteration_times(cost, most_active) if view is not None else []
    per_context = context_rate(cost)
    shows_finish = view is not None and view.known.output_tokens is not None

    waiting, taken = WAITING, TAKEN
    under_way: dict[int, int] = {}  # client -> request taken whose prompt is under way
    heap: list[tuple[int, int, int]] = []  # (finish iteration, client, request)
    # Context tokens of the decoding requests at global iteration g: context_offset +
    # active * g, where context_offset sums prompt - decode_start over them.
    context_offset = 0
    record = RunRecord()
    # Bound once: the loop calls them tens of thousands of times.
    add_start, add_end, add_iterations = (
        record.run_start.append,
        record.run_end.append,
        record.run_iterations.append,
    )
    add_time, add_step = record.run_time.append, record.run_step.append
    add_chunk_request, add_chunk_run = record.chunk_request.append, record.chunk_run.append
    add_chunk_tokens = record.chunk_tokens.append
    add_mixed_run, add_mixed_tokens = record.mixed_run.append, record.mixed_tokens.append
    add_mixed_squares = record.mixed_squares.append
    add_skip_request, add_skip_run = record.skip_request.append, record.skip_run.append
    skip_iteration: list[int] = []  # the iteration of each sit-out the record holds
    run_starts = record.run_start
    add_prefill_start, add_prefill_end = record.prefill_start.append, record.prefill_end.append
    add_prefill_run = record.prefill_run.append
    heappush, heappop = heapq.heappush, heapq.heappop
    arrive, ready_now, take, release = requests.arrive, requests.ready, requests.take, requests.release
    plan, taken_by = rule.plan, rule.taken
    run_prefill, run_decode, run_mixed = executor.prefill, executor.decode, executor.mixed
    # An executor that holds requests' keys and values hears of each preemption (optional).
    run_preempt = getattr(executor, "preempt", None)
    # A rule that pads its mixed iterations has them run padded (by the executor's own method).
    run_padded = getattr(executor, "padded", None) if getattr(rule, "padded", False) else None
    if getattr(rule, "padded", False) and not callable(run_padded):
        raise ValueError(
            f"batching rule {type(rule).__name__} runs padded iterations; executor "
            f"{type(executor).__name__} has no padded method"
        )
    take_steps = (PREFILL_STAGE, TAKE, JOIN, HAND_OFF)
    first_cut = getattr(rule, "first_cut", None)  # optional: see BatchingRule
    until_event = DECODE_UNTIL_EVENT

    known_n = size  # requests known to the loop, in arrival order
    # KV-cache memory (optional, see llmsched.core.memory): blocks held by the requests taken
    # and not decoding yet (``holding``); a decoding request holds the blocks of its prompt and
    # the tokens it has decoded (at least its first), computed when needed.
    memory = getattr(rule, "memory", None)
    # What of its work each request does here (a cluster splitting the phases sets it).
    phases = stream.phase if stream is not None else None
    holding: dict[int, int] = {}
    taken_rank: dict[int, int] = {}  # each request taken, numbered in the order taken
    held_apart = 0  # sum of holding
    parent: list[int] | None = None  # each piece's request, once a request has been preempted
    continuations = 0  # pieces made by preemption
    if memory is not None:
        if stream is not None and stream.done is not None:
            raise TypeError("a cluster's machine runs without KV-cache memory (its driver follows requests)")
        total_blocks = memory.blocks
        resume = getattr(requests, "resume", arrive)  # a continuation's place among the waiting
        preempt_rank = getattr(requests, "preempt_rank", None)  # optional: which to preempt first
    next_arrival = finished = started = 0
    oldest = 0  # position in ``order`` of the oldest arrived request that may not have started
    waiting_pieces: list[tuple[float, int]] = []  # (arrival, piece): continuations, a heap
    waiting_arrival_sum = 0.0  # sum of the arrival times of the arrived, unstarted requests
    g = 0  # global decode iteration counter
    takes = 0  # takes so far
    free = clients
    cut = False
    now = executor.now()
    while finished < n:
        if stream is not None:
            known_n = len(due_in_order)
            if stream.withdrawn:
                for request in stream.withdrawn:
                    # It left (it may not have arrived here yet): it counts as started here.
                    if state[request] == waiting:
                        waiting_arrival_sum -= arrival[request]
                    state[request] = taken
                    started += 1
                stream.withdrawn.clear()
        if next_arrival < known_n and admits(now, due_in_order[next_arrival]):
            horizon = now + 8 * math.ulp(now)  # what admits() allows
            while next_arrival < known_n and due_in_order[next_arrival] <= horizon:
                request = order[next_arrival]
                if state[request]:  # withdrawn before it arrived here
                    next_arrival += 1
                    continue
                state[request] = waiting
                if tell:
                    reveal(request, prompt[request], planned[request], output[request], arrival[request])
                    if reveal_other is not None:
                        reveal_other(
                            request, prompt[request], planned[request], output[request], arrival[request]
                        )
                arrive(request)
                waiting_arrival_sum += due_in_order[next_arrival]
                next_arrival += 1
        if memory is not None:
            # The next iteration writes a token of every decoding request: when their blocks
            # do not fit, preempt (recompute) until they do. What is left free takes requests.
            need = held_apart + sum(
                memory.blocks_for(prompt[r] + g - decode_start[r] + 1) for r in running.values()
            )
            if need > total_blocks:
                if parent is None:
                    parent = []
                victims: list[tuple[int, int, int]] = []  # (client, request, its continuation)
                while need > total_blocks:
                    # The request taken last among those that have decoded (one always has: a
                    # request taken holds the blocks of its first token), by the order of the
                    # takes and within one the order the policy gave (not by index: a fleet's
                    # engine numbers pieces among the requests routed to it).
                    candidates = (r for r in running.values() if g > decode_start[r])
                    if preempt_rank is None:
                        victim = max(candidates, key=taken_rank.__getitem__)
                    else:  # the policy's lowest priority first; ties: the one taken last
                        victim = max(candidates, key=lambda r: (preempt_rank(r), taken_rank[r]))
                    client = client_of[victim]
                    decoded = g - decode_start[victim]
                    need -= memory.blocks_for(prompt[victim] + decoded + 1)
                    del running[client]
                    heap = [entry for entry in heap if entry[2] != victim]
                    heapq.heapify(heap)
                    context_offset -= prompt[victim] - decode_start[victim]
                    if skip_iteration:
                        # Its piece ends with its last token: iterations it sat out just before
                        # are no longer its own (its decode range ends before them).
                        decode_start[victim] -= _drop_trailing_sit_outs(record, skip_iteration, victim, g)
                    left = output[victim] - decoded
                    output[victim] = decoded  # this piece of the request ends here
                    for each in knowns:
                        each.finish(decoded)
                    release(client)
                    free += 1
                    finished += 1
                    # The rest continues as a new piece: its prompt and the tokens decoded so
                    # far are prefilled anew when it is taken again.
                    parent.extend(range(len(parent), len(prompt)))  # requests come on a stream
                    piece = lists.grow(
                        prompt[victim] + decoded, left, max(1, planned[victim] - decoded), arrival[victim]
                    )
                    state[piece] = waiting
                    parent.append(parent[victim])
                    if stream is not None:
                        # The fleet's counts see one request still held: its new prompt not
                        # prefilled yet, its tokens so far among those finished.
                        stream.prefilled_prompt -= prompt[piece]
                        stream.finished_prompt -= decoded
                        stream.finished_planned += planned[victim] - planned[piece]
                    continuations += 1
                    n += 1
                    for each in knowns:  # a new request to the policies (clairvoyant or not)
                        each.add_slot()
                        each.reveal(piece, prompt[piece], planned[piece], left, arrival[piece])
                    waiting_arrival_sum += arrival[piece]
                    heappush(waiting_pieces, (arrival[piece], piece))
                    resume(piece)
                    victims.append((client, victim, piece))
                if run_preempt is not None:
                    run_preempt(victims)
        active = len(heap)
        known.now = now  # the time the request policy is asked at
        ready = ready_now() if free and active < rule.admit_below else 0
        if type(ready) is not int or ready < 0:
            ready = check_ready(ready, requests)
        take_cap = capacity
        if memory is not None and ready:
            take_cap = min(capacity, memory.admission_tokens(total_blocks - need, min(free, ready)))
            if take_cap <= 0:
                ready = 0  # no prompt fits what is free: decode on until a request finishes
        if ready and active and view is not None:
            view.now = now
            view.active = active
            view.free = free
            view.ready = ready
            view.iteration_time = (
                tau[active] + per_context * (context_offset + active * g) if per_context else tau[active]
            )
            # How soon a request finishes follows from true lengths: shown only to a policy
            # that plans with them.
            view.iterations_to_finish = heap[0][0] - g if shows_finish else -1
            # Arrived and not started (a preempted request's continuation counts: it waits again).
            view.unstarted = unstarted = next_arrival + continuations - started
            while oldest < next_arrival and state[order[oldest]] == taken:
                oldest += 1
            oldest_arrival = due_in_order[oldest] if oldest < next_arrival else _INF
            if waiting_pieces:  # a continuation waits with its request's arrival
                while waiting_pieces and state[waiting_pieces[0][1]] == taken:
                    heappop(waiting_pieces)
                if waiting_pieces and waiting_pieces[0][0] < oldest_arrival:
                    oldest_arrival = waiting_pieces[0][0]
            view.oldest_arrival = oldest_arrival
            view.waiting_seconds = max(0.0, unstarted * now - waiting_arrival_sum) if unstarted else 0.0
            view._iteration = g
        # With nothing ready and nothing under way a rule can only decode on: not asked.
        step = plan(ready, active, g) if ready or rule.under_way else until_event

        pairs: list[tuple[int, int]] | None = None
        if ready and step in take_steps:
            pairs = take(take_cap)
            if type(pairs) is not list or not pairs:
                if type(pairs) is list and take_cap < capacity:
                    # The request policy's next request does not fit the free memory: decode on
                    # (a request finishes, or the chunks under way run, and memory frees).
                    step = taken_by([], len(heap)) if step == TAKE else until_event
                    pairs = None
                else:
                    refuse_take(pairs, requests, take_cap, ready)
        if pairs is not None:
            # Prefilled here now, or arrived prefilled: they decode from the next decode iteration on.
            joins = step in (PREFILL_STAGE, JOIN)
            takeable = known_n + continuations  # requests that may be taken: arrived ones and pieces
            tokens = 0
            well_formed = True
            joined = 0  # requests prefilled elsewhere that a TAKE joined to the decoding ones
            for pair in pairs:
                try:
                    request, client = pair
                except (TypeError, ValueError):
                    request, client = check_pair(pair, requests, capacity)  # raises
                if type(request) is not int or type(client) is not int or type(pair) is not tuple:
                    request, client = check_pair(pair, requests, capacity)
                    well_formed = False
                if not (0 <= request < takeable and state[request] == waiting and 0 <= client < clients) or (
                    step != HAND_OFF and (client in running or client in under_way)
                ):
                    refuse_pair(
                        request, client, requests, take_cap, takeable, clients, state, taken_at, takes,
                        {**under_way, **running}, arrival, now,
                    )  # fmt: skip
                waiting_arrival_sum -= arrival[request]
                state[request] = taken
                client_of[request] = client
                taken_at[request] = takes
                if memory is not None:
                    taken_rank[request] = len(taken_rank)
                if phases is not None and phases[request]:
                    if step != TAKE or memory is not None:
                        raise TypeError(
                            f"request {request} does one phase here; only an engine of a fused "
                            f"rule without KV-cache memory splits phases (this one asks "
                            f"{type(rule).__name__})"
                        )
                    if phases[request] == PREFILL_ONLY:
                        tokens += prompt[request]
                        under_way[client] = request
                        continue
                    # Prefilled elsewhere: it decodes from the next iteration on, with no chunk.
                    joined += 1
                    decode_start[request] = g
                    running[client] = request
                    context_offset += prompt[request] - g
                    heappush(heap, (g + output[request], client, request))
                    continue
                tokens += prompt[request]
                if joins:  # it decodes from the next decode iteration on
                    decode_start[request] = g
                    running[client] = request
                    context_offset += prompt[request] - g
                    heappush(heap, (g + output[request], client, request))
                    if stream is not None:
                        stream.prefilled_prompt += prompt[request]
                elif step == TAKE:
                    under_way[client] = request
                    if memory is not None:  # its prompt's blocks, and its first token's
                        blocks = holding[request] = memory.blocks_for(prompt[request] + 1)
                        held_apart += blocks
                # HAND_OFF: it leaves once its stage has run, holding no client here.
            if tokens > take_cap and step != JOIN:  # a join's prompt was prefilled elsewhere
                refuse_capacity(tokens, take_cap, requests)
            if not well_formed:  # numpy integers or lists: the rule and executor get tuples of ints
                pairs = [check_pair(pair, requests, capacity) for pair in pairs]
            takes += 1
            started += len(pairs)
            if step != HAND_OFF:
                free -= len(pairs)
            if step == JOIN:  # nothing ran: the rule says what runs now, as after TAKE
                active = len(heap)
                step = taken_by(pairs, active)
            elif step != TAKE:  # a stage: PREFILL_STAGE or HAND_OFF
                start, now = run_prefill(pairs, tokens)
                add_prefill_start(start)
                add_prefill_end(now)
                add_prefill_run(len(run_starts))
                if stream is not None:  # arrivals up to the stage's end are routed first
                    stream.started, stream.finished, stream.free = started, finished, free
                    stream.stage = (start, now, pairs)
                    yield now
                if step == HAND_OFF:
                    finished += len(pairs)  # they left
                continue
            else:
                if joined:  # the rule chunks the others' prompts beside every decoding request
                    pairs = [pair for pair in pairs if phases[pair[0]] != DECODE_ONLY]  # type: ignore[index]
                    active = len(heap)
                step = taken_by(pairs, active)

        context = context_offset + active * g
        mixed = False
        sitting: Sequence[int] = ()
        if type(step) is int and step > 0:
            if not active:
                # Nothing to decode and nothing to prefill: idle until the next arrival.
                if next_arrival >= known_n and stream is not None and not stream.closed:
                    stream.started, stream.finished, stream.free = started, finished, free
                    stream.cuttable = True
                    yield _INF  # until the fleet routes a request here, or closes the stream
                    stream.cuttable = False
                    known_n = len(due_in_order)
                    if next_arrival < known_n:  # what the next pass would do first, idle as it is
                        now = executor.wait_until(due_in_order[next_arrival])
                    continue
                if next_arrival >= known_n:
                    if stream is not None and started == known_n + continuations:
                        break  # closed, and every request it got has finished or left
                    refuse_idle(requests, free, known_n + continuations - started)
                now = executor.wait_until(due_in_order[next_arrival])
                continue
            # Decode a run of iterations over which the decoding set cannot change.
            run = heap[0][0] - g
            if step < run:
                run = step
            if memory is not None and run > 1:
                run = _memory_run(
                    memory, [prompt[r] + g - decode_start[r] for r in running.values()], held_apart, run
                )
            if clock is not None and stream is not None:
                stream.started, stream.finished, stream.free = started, finished, free
                # Wait for the run's end on the fleet's clock before running it, so that nothing
                # the run changes (its finishes) is seen before it happens. With a client free an
                # arrival may cut it short: the fleet then wakes the engine at that arrival.
                end = clock.run_end(active, run, context)
                if end + 8 * math.ulp(end) >= stream.horizon:  # else nothing comes before its end
                    stream.cuttable = bool(free)
                    yield end
                    stream.cuttable = False
                    known_n = len(due_in_order)
            if free and next_arrival < known_n:
                due = due_in_order[next_arrival] if first_cut is None else first_cut(next_arrival, known_n)
            else:
                due = _INF
            if stream is not None:
                cut = due < _INF
            ran_by = "decode"
            pieces: Sequence[DecodeRun] = run_decode(running, run, due, context)
        elif type(step) is tuple:
            # One iteration of every decoding request (but those sitting it out) plus the
            # rule's chunks.
            mixed = True
            if len(step) == 5:
                chunks, tokens, squares, done, sitting = step
            else:
                chunks, tokens, squares, done = step
                sitting = ()
            index = len(run_starts)
            add_mixed_run(index)
            add_mixed_tokens(tokens)
            add_mixed_squares(squares)
            for request, _, _, chunk in chunks:
                add_chunk_request(request)
                add_chunk_run(index)
                add_chunk_tokens(chunk)
            run = 1
            ran_by = "mixed"
            decoding = running
            if sitting:
                # They keep their clients and caches and decode no token in this iteration:
                # out of the iteration's batch and its context.
                decoding = dict(running)
                for request in sitting:
                    client = client_of[request] if 0 <= request < len(client_of) else -1
                    if decoding.get(client, -1) != request:
                        raise RuntimeError(
                            f"batching rule {type(rule).__name__} has request {request} sit an "
                            "iteration out; it is not decoding (or sits out twice)"
                        )
                    del decoding[client]
                    context -= prompt[request] + g - decode_start[request]
                    add_skip_request(request)
                    add_skip_run(index)
                    skip_iteration.append(g)
            if run_padded is not None:
                pieces = (run_padded(decoding, chunks, context),)
            else:
                pieces = (run_mixed(decoding, chunks, tokens, squares, context),)
        else:
            refuse_step(rule, step, ready)
        ran = 0
        for start, count, seconds, growth in pieces:
            # As the schedules add it up (adding 0.0 leaves a constant-speed run's sum as is).
            now = start + (seconds * count + growth * (count * (count - 1) / 2))
            add_start(start)
            add_end(now)
            add_iterations(count)
            add_time(seconds)
            add_step(growth)
            ran += count
        if not 0 < ran <= run:
            raise RuntimeError(
                f"executor {type(executor).__name__}.{ran_by} ran {ran} iterations; 1 to {run} were allowed"
            )
        g += ran
        if view is not None:  # the tokens decoded so far, for the view's stage_tokens
            view._decoded += (len(decoding) if mixed else active) * ran
        if mixed:
            if sitting:
                # Each finishes an iteration later: its decode_start moves on by one, so that
                # ``g - decode_start`` still counts the tokens it has decoded.
                for request in sitting:
                    decode_start[request] += 1
                context_offset -= len(sitting)
                sat = set(sitting)
                heap = [(end + 1, c, r) if r in sat else (end, c, r) for end, c, r in heap]
                heapq.heapify(heap)
            if stream is not None and now + 8 * math.ulp(now) >= stream.horizon:
                # The iteration's end on the fleet's clock, before its effects.
                stream.started, stream.finished, stream.free = started, finished, free
                yield now
            for request, client in done:  # they decode from the next iteration on
                del under_way[client]
                if stream is not None:
                    stream.prefilled_prompt += prompt[request]
                    if phases is not None and phases[request] == PREFILL_ONLY:
                        # Its keys and values leave: it decodes elsewhere, none here.
                        decode_start[request] = g
                        for each in knowns:
                            each.finish(0)
                        release(client)
                        free += 1
                        finished += 1
                        stream.finished_planned += planned[request]
                        stream.finished_prompt += prompt[request]
                        if stream.done is not None:
                            stream.done.append(request)
                            stream.done_at = now
                        continue
                if memory is not None:
                    held_apart -= holding.pop(request)
                decode_start[request] = g
                running[client] = request
                context_offset += prompt[request] - g
                heappush(heap, (g + output[request], client, request))
            cut = False  # arrivals during the iteration were routed before the engine resumed

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
                if stream.done is not None:
                    stream.done.append(request)
                    stream.done_at = now
        if cut and stream is not None:
            # A cut run ends after the arrival that woke the engine: arrivals up to its end first.
            cut = False
            if now + 8 * math.ulp(now) >= stream.horizon:
                stream.started, stream.finished, stream.free = started, finished, free
                yield now

    if stream is not None:
        stream.started, stream.finished, stream.free = started, finished, free
    record.now = now
    if parent is not None:
        parent.extend(range(len(parent), len(prompt)))
    record.request_parent = parent
    record.info = rule.info(
        {
            "request_policy": policy_name(requests),
            "clairvoyant": clairvoyant
            or planned_ahead(requests)
            or any(planned_ahead(policy) for policy in engine.policies),
            "oracle_lengths": knowledge.told,
            **executor.info(),
        }
    )
    return rule, record


def _drop_trailing_sit_outs(record: RunRecord, skip_iteration: list[int], request: int, g: int) -> int:
    """Remove from ``record`` the sit-outs of ``request`` in the iterations right before
    ``g`` (``g - 1``, ``g - 2``, ... while it sat each out); return how many."""
    target = g - 1
    dropped: list[int] = []
    for at in range(len(skip_iteration) - 1, -1, -1):
        iteration = skip_iteration[at]
        if iteration > target:
            continue  # another request's, in an iteration it has already been found in
        if iteration < target:
            break
        if record.skip_request[at] == request:
            dropped.append(at)
            target -= 1
    for at in dropped:  # from the last: the earlier positions stay put
        del record.skip_request[at], record.skip_run[at], skip_iteration[at]
    return len(dropped)


def _memory_run(memory: Any, tokens: list[int], apart: int, most: int) -> int:
    """How many of the next ``most`` decode iterations fit ``memory``: the decoding requests
    hold ``tokens`` tokens each (the next iteration writes one more each), the others
    ``apart`` blocks. The first fits (the loop preempts until it does); the blocks needed
    only grow, so the count is found by bisection."""
    held = np.asarray(tokens, dtype=np.int64)
    size, total = memory.block_size, memory.blocks

    def fits(iterations: int) -> bool:  # the last of ``iterations`` iterations fits
        return apart + int(np.sum(-(-(held + iterations) // size))) <= total

    if fits(most):
        return most
    low, high = 1, most  # fits(low), not fits(high)
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return low


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
