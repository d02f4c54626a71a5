"""The batching rule: what each iteration of an engine holds.

Every engine, in every mode, runs the one decision loop of :mod:`llmsched.engines.loop`
(arrive -> ready -> decide -> take -> release -> run an iteration) over an executor
(:mod:`llmsched.engines.clock`). What differs between engines is the rule the loop asks, at
every decision point, what the next iteration holds. A rule is a small class with the
methods of :class:`BatchingRule`, one per file (``engines/<mode>/rule.py``):

* :class:`llmsched.engines.competition.rule.CompetitionRule`: a prefill stage (which pauses
  decoding) or a run of decode iterations, as the iteration policy decides;
* :class:`llmsched.engines.fusion.rule.FusionRule`: every decoding request plus prompt
  chunks up to a token budget (Sarathi-Serve's chunked prefill);
* :class:`llmsched.engines.disaggregation.rule.PoolRule`: a machine of a disaggregated
  cluster: prompt stages whose requests leave, requests that arrive prefilled and join
  decoding, and stages lent to it.

At a decision point the loop has admitted the arrivals and knows ``active`` (the requests
decoding). While a client is free, and fewer than the rule's
:attr:`BatchingRule.admit_below` requests decode, it asks the request policy's ``ready()``;
then, with requests ready or prompts :attr:`BatchingRule.under_way`, it asks
:meth:`BatchingRule.plan` (else it decodes on), which answers with one of:

* :data:`PREFILL_STAGE` (with requests ready): free clients take requests (the loop asks the
  request policy's ``take`` and checks the pairs, :mod:`llmsched.engines.answers`), and they
  are prefilled at once, as one stage, decoding paused; they decode from the next decode
  iteration on;
* :data:`TAKE` (with requests ready): free clients take requests, whose prompts are then
  under way; the loop hands the pairs to :meth:`BatchingRule.taken`, which answers with one
  of the following;
* :data:`JOIN` (with requests ready): free clients take requests whose prompts were
  prefilled elsewhere (their keys and values arrived with them); they decode from the next
  decode iteration on, with no stage here, and the loop hands the pairs to
  :meth:`BatchingRule.taken` for what runs now;
* :data:`HAND_OFF` (with requests ready): requests are taken and prefilled at once, as one
  stage, and then leave the engine (a prompt machine of a disaggregated cluster: they decode
  elsewhere); the clients the request policy named are free again at once;
* a :data:`MixedBatch` tuple: one iteration of every decoding request plus the prompt chunks it
  holds (of prompts under way); the requests it names in ``done`` decode from the next
  iteration on; a fifth member (:data:`MixedBatchSitting`) names decoding requests that sit
  the iteration out (no token; each then finishes an iteration later);
* an int ``n >= 1``: decode at most ``n`` iterations, fewer when a request finishes or a
  request arrives while a client is free (``DECODE_UNTIL_EVENT``: only then).

The loop does everything else: arrivals, the request policy's calls and the checks of its
answers (and of the rule's), the executor's calls, finishes and releases, the fleet's
stream, and the record of what ran (:class:`RunRecord`), which the rule's
:meth:`BatchingRule.schedule` turns into the mode's schedule. A rule never sees the
executor, so every rule runs on the cost clock and on a device alike.

Adding a rule (vLLM's prefill-first continuous batching, Orca's mixed iterations of whole
prompts) is one new file with one such class.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from llmsched.core.cost import CostModel
from llmsched.core.workload import Workload
from llmsched.policies import KnownRequests, oracle_lengths

__all__ = [
    "DECODE_ONLY",
    "HAND_OFF",
    "JOIN",
    "PREFILL_ONLY",
    "PREFILL_STAGE",
    "TAKE",
    "WHOLE",
    "BatchingRule",
    "LoopView",
    "MixedBatch",
    "MixedBatchSitting",
    "RuleStart",
    "RunRecord",
    "Schedule_co",
]

#: :meth:`BatchingRule.plan`'s answer "free clients take requests; their prompts are under
#: way" (then :meth:`BatchingRule.taken` says what runs).
TAKE = -1
#: :meth:`BatchingRule.plan`'s answer "free clients take requests, prefilled now as one stage".
PREFILL_STAGE = -2
#: :meth:`BatchingRule.plan`'s answer "free clients take requests prefilled elsewhere; they
#: decode from the next decode iteration on".
JOIN = -3
#: :meth:`BatchingRule.plan`'s answer "take requests and prefill them now as one stage; then
#: they leave the engine".
HAND_OFF = -4

#: What of its work a request does on an engine of a fused rule (a cluster that splits the
#: phases between machines says so when it puts the request on the engine's stream, see
#: :class:`~llmsched.engines.loop.EngineStream`): both phases (``WHOLE``); its prefill only,
#: after which its keys and values leave and it decodes elsewhere (``PREFILL_ONLY``: its first
#: token is its prefill's, it decodes none here); or its decode only, its keys and values
#: prefilled elsewhere (``DECODE_ONLY``: no chunk here, it joins the decoding requests when
#: taken).
WHOLE, PREFILL_ONLY, DECODE_ONLY = 0, 1, 2

#: The schedule class a batching rule builds.
Schedule_co = TypeVar("Schedule_co", covariant=True)


#: A rule's answer "run one mixed iteration": ``(chunks, tokens, squares, done)``, what it holds
#: besides the decoding requests. ``chunks`` are :data:`~llmsched.engines.clock.Chunk` tuples
#: (request, client, start, tokens) holding ``tokens`` prompt tokens of ``squares`` squared
#: tokens; ``done`` are the ``(request, client)`` pairs whose prompts the iteration completes,
#: in the order taken. (A plain tuple: a rule builds one an iteration.) A fifth member,
#: ``sitting``, may name decoding requests that sit the iteration out (SplitwiseSim's Orca:
#: decoding requests past the token cap wait, keeping their clients and caches); see
#: :data:`MixedBatchSitting`.
MixedBatch = tuple[list[tuple[int, int, int, int]], int, int, Sequence[tuple[int, int]]]
#: :data:`MixedBatch` with the requests that sit the iteration out: ``(chunks, tokens,
#: squares, done, sitting)``.
MixedBatchSitting = tuple[list[tuple[int, int, int, int]], int, int, Sequence[tuple[int, int]], Sequence[int]]


class LoopView:
    """The :class:`~llmsched.policies.EngineView` the loop offers an iteration policy.

    A rule that asks one creates the view (:attr:`BatchingRule.view`); the loop fills in the
    engine's state just before each :meth:`BatchingRule.plan` call with requests ready and
    active, and the rule fills in ``stage_iterations``, ``stage_tokens`` and
    ``just_prefilled``, which depend on its stages. The values hold during the call.
    """

    __slots__ = (
        "_decode_start",
        "_decoded",
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
        "stage_tokens",
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
        self._decoded = 0  # tokens decoded since the run started (the loop adds each run's)
        self.now = 0.0
        self.active = 0
        self.free = clients
        self.ready = 0
        self.iteration_time = 0.0
        self.iterations_to_finish = 0
        self.stage_iterations = 0
        self.stage_tokens = 0
        self.just_prefilled = False
        self.unstarted = 0
        self.oldest_arrival = float("inf")
        self.waiting_seconds = 0.0

    def decoding_requests(self) -> list[int]:
        """The requests decoding now, in no particular order (O(active))."""
        return list(self._running.values())

    def decoded_tokens(self, request: int) -> int:
        """Tokens ``request`` has decoded so far; it must be decoding now."""
        return self._iteration - self._decode_start[request]


class RuleStart:
    """What a rule learns of the engine when a run starts (:meth:`BatchingRule.start`).

    Attributes
    ----------
    cost, clients
        The engine's cost model and clients.
    prompt
        Each request's prompt length, by the loop's request index (a list that grows while
        a fleet routes requests to the engine).
    running, decode_start
        The loop's live map of client -> request decoding on it, and each request's first
        decode iteration (for a :class:`LoopView`).
    known
        The request policy's :class:`~llmsched.policies.KnownRequests`.
    """

    __slots__ = ("_new_known", "clients", "cost", "decode_start", "known", "policies", "prompt", "running")

    def __init__(
        self,
        cost: CostModel,
        clients: int,
        prompt: list[int],
        running: Mapping[int, int],
        decode_start: Sequence[int],
        known: KnownRequests,
        new_known: Callable[[bool], KnownRequests],
    ):
        self.cost = cost
        self.clients = clients
        self.prompt = prompt
        self.running = running
        self.decode_start = decode_start
        self.known = known
        self.policies: list[object] = []  # the rule's own policies, for the run's info
        self._new_known = new_known

    def known_for(self, policy: object) -> KnownRequests:
        """The :class:`~llmsched.policies.KnownRequests` a policy of the rule's own starts
        with: the request policy's when both are told the same (the true lengths or not),
        else one of its own, which the loop keeps up to date too. The run's ``info`` then
        accounts for ``policy`` (``oracle_lengths``, ``clairvoyant``)."""
        self.policies.append(policy)
        return self._new_known(oracle_lengths(policy))


class RunRecord:
    """What one run of the loop did: the one record the loop keeps, whatever the rule.

    Runs, in time order: what the executor ran, prefill stages aside: runs of decode
    iterations (as the executor reports them) and mixed iterations. Run ``r`` is
    ``run_iterations[r]`` iterations from ``run_start[r]`` to ``run_end[r]``, the first
    ``run_time[r]`` seconds long and each next one ``run_step[r]`` longer. Mixed
    iterations: ``mixed_run[m]`` is the run of the ``m``-th, whose chunks hold
    ``mixed_tokens[m]`` prompt tokens of ``mixed_squares[m]`` squared tokens; chunk ``c``
    gave ``chunk_tokens[c]`` tokens of request ``chunk_request[c]``'s prompt in run
    ``chunk_run[c]``. (Who decoded in a run follows from the requests' decode ranges and
    the sit-outs.) Sit-outs: request ``skip_request[s]`` decoded no token in mixed iteration
    ``skip_run[s]`` (a run of one iteration), though it was decoding (it kept its client and
    cache); its decode range then ends an iteration later.

    Prefill stages, in time order: stage ``k`` ran from ``prefill_start[k]`` to
    ``prefill_end[k]``, after the first ``prefill_run[k]`` runs. ``now`` is the loop's time
    when it ended.

    Requests (set when the run ends, for the requests the schedule keeps, renumbered 0, 1,
    ... in that order): each one's ``request_client``, ``request_take`` (the number of the
    take that took it: 0, 1, ...; -1 when never taken) and ``request_decode_start`` (its
    first decode iteration, moved on by one for each iteration it sat out, so that its
    decode range ends ``output`` iterations later; -1 when it never decoded).
    ``chunk_request`` and ``skip_request`` are renumbered too.

    ``request_phase``: None, or, on an engine a cluster splits the phases on, each request's
    :data:`WHOLE`, :data:`PREFILL_ONLY` or :data:`DECODE_ONLY`.

    ``request_parent``: None, or, when an engine with KV-cache memory preempted requests, the
    request of each *piece* (the requests above are then pieces: a preempted request's work
    up to its preemption, and each continuation, appended in the order made; see
    :mod:`llmsched.core.memory`).
    """

    __slots__ = (
        "chunk_request",
        "chunk_run",
        "chunk_tokens",
        "info",
        "mixed_run",
        "mixed_squares",
        "mixed_tokens",
        "now",
        "prefill_end",
        "prefill_run",
        "prefill_start",
        "request_client",
        "request_decode_start",
        "request_parent",
        "request_phase",
        "request_take",
        "run_end",
        "run_iterations",
        "run_start",
        "run_step",
        "run_time",
        "skip_request",
        "skip_run",
    )

    run_start: list[float]
    run_end: list[float]
    run_iterations: list[int]
    run_time: list[float]
    run_step: list[float]
    mixed_run: list[int]
    mixed_tokens: list[int]
    mixed_squares: list[int]
    chunk_request: list[int]
    chunk_run: list[int]
    chunk_tokens: list[int]
    prefill_start: list[float]
    prefill_end: list[float]
    prefill_run: list[int]
    skip_request: list[int]
    skip_run: list[int]

    def __init__(self) -> None:
        # A list of numbers per field, which the loop appends to: tuples would cost more to
        # turn into arrays than the appends save, and the collector would walk them.
        for name in self.__slots__:
            if name.startswith(("run_", "mixed_", "chunk_", "prefill_", "skip_")):
                setattr(self, name, [])
        self.now = 0.0
        self.request_client: Sequence[int] = ()
        self.request_take: Sequence[int] = ()
        self.request_decode_start: Sequence[int] = ()
        self.request_parent: list[int] | None = None
        self.request_phase: list[int] | None = None
        self.info: dict[str, Any] = {}


class BatchingRule(Protocol[Schedule_co]):
    """What an engine's iterations hold; the loop asks it at every decision point.

    A rule holds its own state for one run (the chunks under way, the stage it is in);
    :meth:`start` resets it, so one rule object serves one run at a time.

    Attributes
    ----------
    mode
        The engine mode the rule schedules (``"competition"``, ``"fusion"``).
    view
        A :class:`LoopView` the loop fills in before each :meth:`plan` call with requests
        ready and decoding (for a rule that asks an iteration policy), or None.
    admit_below
        Free clients may take requests only while fewer than this many requests decode
        (``math.inf``: whatever decodes). A rule that fills a token budget keeps it at the
        budget less the prompt tokens it has not put in a chunk yet.
    under_way
        The prompts the rule holds, taken and not yet run (any collection; empty when
        none): while it holds some, the loop asks :meth:`plan` even with no request
        ready; else such a plan could only decode on.

    first_cut
        Optional: None (or no such attribute), or a function ``(position, known)`` giving
        the time of the first request, at or after ``position`` in the order of arrival and
        before ``known``, whose arrival may cut a run of decode iterations short (``inf``
        when none). By default every arrival may, while a client is free; a rule whose
        engine cannot take some requests while it decodes (a prompt machine lent to
        decoding) leaves them out.

    token_cap
        Optional: None (or no such attribute), or the most prompt tokens one take may hold
        when that is fewer than the cost model's prefill capacity (vLLM's
        ``max_num_batched_tokens``): the loop passes the smaller to the request policy's
        ``take`` and refuses a group above it.

    The loop reads ``admit_below`` and ``under_way`` at every decision point: in a rule they
    are plain attributes, kept up to date, not computed when read.
    """

    mode: str
    view: LoopView | None

    @property
    def admit_below(self) -> float: ...

    @property
    def under_way(self) -> Collection[object]: ...

    def check(self, workload: Workload, cost: CostModel, clients: int) -> None:
        """Refuse (TypeError, ValueError) an instance this rule cannot run, before any work."""
        ...

    def start(self, engine: RuleStart) -> None:
        """A run starts: every client is free, no request has arrived. A rule that asks a
        policy of its own starts it here, with ``engine.known_for(policy)``."""
        ...

    def plan(self, ready: int, active: int, iteration: int) -> int | MixedBatch | MixedBatchSitting:
        """The next step: :data:`PREFILL_STAGE`, :data:`TAKE`, a :data:`MixedBatch` or
        decode at most ``n >= 1`` iterations. ``ready`` requests are ready (0 when none, or
        when the loop did not ask), ``active`` decode, and ``iteration`` decode iterations
        have run so far (mixed ones included)."""
        ...

    def taken(self, pairs: list[tuple[int, int]], active: int) -> int | MixedBatch | MixedBatchSitting:
        """Free clients just took ``pairs`` (checked ``(request, client)`` pairs of ints)
        after :data:`TAKE` or :data:`JOIN` (``active`` then counts the requests that
        joined): the next step, a :data:`MixedBatch` or decode ``n``."""
        ...

    def info(self, facts: dict[str, Any]) -> dict[str, Any]:
        """The schedule's ``info``: ``facts`` (``request_policy``, ``clairvoyant``,
        ``oracle_lengths`` and the executor's entries) with the rule's own entries."""
        ...

    def schedule(
        self, workload: Workload, cost: CostModel, clients: int, record: RunRecord, measured: bool
    ) -> Schedule_co:
        """The mode's schedule of the run ``record`` holds, for ``workload``."""
        ...
