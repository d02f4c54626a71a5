"""The contracts between the decision loop and the policies it asks (and nothing else).

A *request policy* decides which waiting request a free client takes; an *iteration
policy* decides whether the next stage is a prefill or more decoding. Both are plain
Python objects with no solver or torch in sight, so the same objects drive the simulator
(the cost-model clock) and the runtime (a torch engine): :mod:`llmsched.engines.loop` runs them.
The loop checks every answer against these contracts and raises a TypeError or ValueError
naming the policy's class and what was wrong.

Policies are *non-anticipative*: they learn of a request only when it arrives. The loop
hands them a :class:`KnownRequests`, which it fills in as requests arrive, never the
workload itself. A *clairvoyant* run (the paper's offline batch planned ahead, or a study
that asks for it) reveals every request before the run starts, and its schedule says so.

Named policies (FCFS, static queues, Algorithm 1, the Lagrangian rule, ...) and the
registry of their names live in :mod:`llmsched.online`.
"""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

from llmsched.core.cost import CostModel
from llmsched.core.workload import Workload

__all__ = [
    "DECODE_UNTIL_EVENT",
    "PREFILL_NOW",
    "EngineView",
    "IterationPolicy",
    "KnownRequests",
    "RequestPolicy",
    "oracle_lengths",
    "planned_ahead",
]

#: ``IterationPolicy.decide``'s answer "prefill now".
PREFILL_NOW = 0
#: ``decide``'s answer "keep decoding until something happens": the loop stops at the next
#: finish, or at the next arrival while a client is free, whichever comes first.
DECODE_UNTIL_EVENT = 1 << 62


def oracle_lengths(policy: object) -> bool:
    """Whether ``policy`` plans with the true output lengths (its ``sizes`` is ``"oracle"``).

    Such a policy is told each request's true output length when the request arrives: an
    oracle study, which the schedule's ``info`` records.
    """
    return getattr(policy, "sizes", None) == "oracle"


class KnownRequests:
    """What the policies of a run know of its requests: each one's fields from its arrival on.

    The loop creates it and fills in a request's entries when the request arrives (all of
    them before the run starts in a clairvoyant run). Until then a request's entries read
    0 (``arrival``: inf). Indices are the workload's request indices; the lists are as long
    as the workload, and a policy must not plan with that length (it counts requests that
    have not arrived). Policies keep references to the lists and treat them as read-only.
    Each policy of a run gets its own view: the true lengths appear only in the view of a
    policy that plans with them.

    Attributes
    ----------
    prompt_tokens
        Prompt length of each known request.
    predicted_output
        Predicted output length of each known request; None when the workload carries no
        predictions.
    output_tokens
        True output length of each known request, only in a run that reveals it (a
        policy planning with ``sizes="oracle"``, or a clairvoyant run); None otherwise.
    arrival
        Arrival time of each known request.
    arrived
        The known requests, in the order they became known.
    clairvoyant
        True when every request was revealed before the run started.
    total_prompt, total_predicted, total_output
        Sums over the known requests (``total_output`` only when lengths are revealed).
    finished, total_finished_output
        How many requests have finished, and their output tokens: a request's output
        length is known once it has produced its last token, whatever the run reveals.
    now
        The time of the loop's current decision point (seconds since the run started): the
        loop sets it before it asks the request policy ``ready()``, so ``ready`` and the
        ``take`` that follows it read the time they are asked at (0.0 before the run).
    """

    __slots__ = (
        "arrival",
        "arrived",
        "clairvoyant",
        "finished",
        "name",
        "now",
        "output_tokens",
        "predicted_output",
        "prompt_tokens",
        "total_finished_output",
        "total_output",
        "total_predicted",
        "total_prompt",
    )

    def __init__(
        self, size: int, predictions: bool, lengths: bool, clairvoyant: bool = False, name: str = "workload"
    ):
        self.name = name
        self.clairvoyant = bool(clairvoyant)
        self.prompt_tokens = [0] * size
        self.predicted_output: list[int] | None = [0] * size if predictions else None
        self.output_tokens: list[int] | None = [0] * size if lengths else None
        self.arrival = [math.inf] * size
        self.arrived: list[int] = []
        self.total_prompt = 0
        self.total_predicted = 0
        self.total_output = 0
        self.finished = 0
        self.total_finished_output = 0
        self.now = 0.0

    @classmethod
    def everything(cls, workload: Workload, lengths: bool = False) -> KnownRequests:
        """Every request of ``workload`` known (a clairvoyant view), for calling a policy
        directly outside the loop; ``lengths`` reveals the true output lengths too."""
        n = len(workload)
        known = cls(n, workload.predicted_output is not None, lengths, True, workload.name)
        predicted = (
            workload.predicted_output if workload.predicted_output is not None else workload.output_tokens
        )
        for request in sorted(range(n), key=workload.arrival.__getitem__):
            known.reveal(
                request,
                int(workload.prompt_tokens[request]),
                int(predicted[request]),
                int(workload.output_tokens[request]),
                float(workload.arrival[request]),
            )
        return known

    def __len__(self) -> int:
        """The number of known requests."""
        return len(self.arrived)

    def reveal(self, request: int, prompt: int, predicted: int, output: int, arrival: float) -> None:
        """Make ``request`` known (the loop calls it once, at the request's arrival).

        ``predicted`` and ``output`` are ignored where the run does not reveal them.
        """
        self.prompt_tokens[request] = prompt
        self.total_prompt += prompt
        if self.predicted_output is not None:
            self.predicted_output[request] = predicted
            self.total_predicted += predicted
        if self.output_tokens is not None:
            self.output_tokens[request] = output
            self.total_output += output
        self.arrival[request] = arrival
        self.arrived.append(request)

    def add_slot(self) -> None:
        """Make room for one more request (on an engine whose requests a fleet routes to it
        one by one); its entries read as unknown until :meth:`reveal`."""
        self.prompt_tokens.append(0)
        if self.predicted_output is not None:
            self.predicted_output.append(0)
        if self.output_tokens is not None:
            self.output_tokens.append(0)
        self.arrival.append(math.inf)

    def finish(self, output: int) -> None:
        """Record that a request finished after ``output`` tokens (the loop calls it)."""
        self.finished += 1
        self.total_finished_output += output

    def planned_output(self, sizes: str) -> list[int]:
        """The output lengths a policy plans with: ``output_tokens`` for ``"oracle"``, else
        ``predicted_output``.

        Raises
        ------
        ValueError
            When they are not revealed to this run: the workload carries no predictions
            (attach some, or plan with ``sizes="oracle"``), or the run does not reveal
            true lengths.
        """
        if sizes == "oracle":
            if self.output_tokens is None:
                raise ValueError(
                    "this run does not reveal true output lengths; a policy that plans with them "
                    "must have sizes='oracle'"
                )
            return self.output_tokens
        if self.predicted_output is None:
            raise ValueError(
                "the workload has no predicted_output: attach predictions (llmsched.online."
                "with_predictions, or --predictor NAME on the command line) or plan with the true "
                "lengths (sizes='oracle', the -oracle policy names)"
            )
        return self.predicted_output

    def mean_prompt(self) -> float:
        """Mean prompt length of the known requests (0 when none is known)."""
        return self.total_prompt / len(self.arrived) if self.arrived else 0.0

    def mean_planned_output(self, sizes: str = "predicted") -> float:
        """Mean output length a policy can plan with: over the known requests, their true
        lengths for ``sizes="oracle"`` (where revealed), their predictions otherwise; without
        those, the mean output of the requests finished so far (as an operator measures it
        from past traffic); 0 when nothing tells it yet."""
        if self.arrived:
            if sizes == "oracle" and self.output_tokens is not None:
                return self.total_output / len(self.arrived)
            if sizes != "oracle" and self.predicted_output is not None:
                return self.total_predicted / len(self.arrived)
        return self.total_finished_output / self.finished if self.finished else 0.0


def planned_ahead(policy: object) -> bool:
    """Whether ``policy``'s decisions were made ahead, knowing every request (its
    ``planned_ahead`` attribute: a replay of a clairvoyant schedule, a plan of the full MIP).
    A run with such a policy is marked clairvoyant."""
    return bool(getattr(policy, "planned_ahead", False))


@runtime_checkable
class RequestPolicy(Protocol):
    """Which waiting request each free client takes.

    The loop calls, in this order of time:

    * ``start(known, clients)`` once, before anything happens: every client is free and
      no request has arrived. ``known`` is the run's :class:`KnownRequests`: a request's
      prompt length and prediction (and, for a policy with ``sizes="oracle"``, its true
      output length) appear in it when the request arrives; in a clairvoyant run all of
      them are there from the start.
    * ``arrive(request)`` when a request arrives, in order of arrival time (ties by request
      index), at the first decision point at or after its arrival; ``known`` holds its
      entries by then.
    * ``release(client)`` when the request on ``client`` has produced its last token; the
      client is free from then on.
    * ``ready()``, only while some client is free, at every decision point: how many
      requests a prefill stage could take *now*. It must return an int >= 0; 0 means no
      prefill is possible.
    * ``take(capacity)``, only after ``ready()`` returned more than 0 and the loop decided
      to prefill: fill one prefill stage. It must return a non-empty ``list`` of
      ``(request, client)`` pairs of ints, each request arrived and not taken before, each
      client free, no request and no client twice, with prompt tokens summing to at most
      ``capacity``. The policy removes the requests it returns from what it offers. On an
      engine with KV-cache memory ``capacity`` is also what the free memory can take, and
      an empty list means the policy's next request does not fit: the engine decodes on.

    A policy whose decisions were made before the run over every request (a replay, a
    plan given by the caller) says so with a true ``planned_ahead`` attribute, and the
    schedule is marked clairvoyant.

    Two optional parts let an engine of a fleet (:mod:`llmsched.fleet.simulate`) run the policy:
    a true ``open_ended`` attribute says that it needs no count of the requests up front
    (``known``'s lists then start empty and grow as requests are routed to the engine), and
    a ``withdraw()`` method gives up one waiting request (the one it would start last) and
    returns it, or None when none waits; a fleet's backoff moves it to another engine.

    On an engine with KV-cache memory (:mod:`llmsched.core.memory`) a preempted request comes
    back as a new request (a *piece* with its own index) through the optional
    ``resume(request)``, which puts it where the policy resumes preempted work (FCFS: first
    in line, as vLLM does), or, without it, through ``arrive``. Which decoding request memory
    preempts is the policy's through the optional ``preempt_rank(request)``: the highest rank
    goes first (ties: the one taken last); without it, the request taken last, as vLLM's FCFS
    scheduler does.

    ``known.now`` is the time of the decision point at which ``ready()`` is asked (and the
    ``take`` after it): a policy may admit by time (:class:`~llmsched.online.priority.DeadlineFirst`).
    """

    def start(self, known: KnownRequests, clients: int) -> None: ...

    def arrive(self, request: int) -> None: ...

    def release(self, client: int) -> None: ...

    def ready(self) -> int: ...

    def take(self, capacity: int) -> list[tuple[int, int]]: ...


@runtime_checkable
class EngineView(Protocol):
    """What the loop shows an iteration policy when it asks (read-only, valid during the call).

    Attributes
    ----------
    now
        Current time (seconds since the run started).
    clients
        Number of clients J.
    active
        Clients decoding a request now (>= 1 whenever ``decide`` is called).
    free
        Clients without a request.
    ready
        What the request policy's ``ready()`` returned (>= 1 whenever ``decide`` is called).
    iteration_time
        The cost model's time of the next decode iteration with ``active`` clients (and,
        under a context-aware model, the context they hold now; later iterations of the
        stage read more).
    iterations_to_finish
        Decode iterations until the next request finishes, for a policy told the true
        output lengths (``sizes="oracle"``, or a clairvoyant run); -1 otherwise (it follows
        from the lengths, which running alone reveals).
    stage_iterations
        Iterations the current decode stage has run so far (0 right after a prefill).
    stage_tokens
        Tokens the current decode stage has decoded so far, over every request (the active
        clients of each of its iterations, added up; 0 right after a prefill).
    just_prefilled
        True right after a prefill stage: the next iteration decodes whatever the answer.
    unstarted
        Requests arrived and not prefilled yet (whether more will arrive is not shown).
    oldest_arrival
        Arrival time of the longest-waiting arrived, unstarted request (inf when none).
    waiting_seconds
        Seconds waited so far, summed over the arrived, unstarted requests (the TTFT they
        have accumulated).
    known
        The run's :class:`KnownRequests` (what has arrived).
    cost
        The cost model.
    """

    @property
    def now(self) -> float: ...

    @property
    def clients(self) -> int: ...

    @property
    def active(self) -> int: ...

    @property
    def free(self) -> int: ...

    @property
    def ready(self) -> int: ...

    @property
    def iteration_time(self) -> float: ...

    @property
    def iterations_to_finish(self) -> int: ...

    @property
    def stage_iterations(self) -> int: ...

    @property
    def stage_tokens(self) -> int: ...

    @property
    def just_prefilled(self) -> bool: ...

    @property
    def unstarted(self) -> int: ...

    @property
    def oldest_arrival(self) -> float: ...

    @property
    def waiting_seconds(self) -> float: ...

    @property
    def known(self) -> KnownRequests: ...

    @property
    def cost(self) -> CostModel: ...

    def decoding_requests(self) -> list[int]:
        """The requests decoding now, in no particular order (O(active))."""
        ...

    def decoded_tokens(self, request: int) -> int:
        """Tokens ``request`` has decoded so far; it must be decoding now."""
        ...


@runtime_checkable
class IterationPolicy(Protocol):
    """Whether the engine interrupts decoding with a prefill stage.

    The loop calls:

    * ``start(known, cost, clients)`` once, before anything happens (``known`` as for a
      request policy: it fills in as requests arrive);
    * ``decide(engine)`` only when there is a real choice: some client is free, the request
      policy reports ready requests, and some client is decoding. ``engine`` is an
      :class:`EngineView`. It must return :data:`PREFILL_NOW` (0) to prefill now, or an int
      ``n >= 1`` to decode ``n`` more iterations (:data:`DECODE_UNTIL_EVENT` for "until
      something happens"). The loop asks again after those ``n`` iterations, or earlier
      when a request finishes, or arrives while a client is free. Stages alternate, so
      right after a prefill stage (``engine.just_prefilled``) at least one iteration
      decodes whatever the answer.

    Without a real choice the loop does not ask: it prefills when nothing decodes and
    requests are ready, and decodes until the next event when nothing is ready.
    """

    def start(self, known: KnownRequests, cost: CostModel, clients: int) -> None: ...

    def decide(self, engine: EngineView) -> int: ...
