"""The contracts between the decision loop and the policies it asks (and nothing else).

A *request policy* decides which waiting request a free client takes; an *iteration
policy* decides whether the next stage is a prefill or more decoding. Both are plain
Python objects with no solver or torch in sight, so the same objects drive the simulator
(the cost-model clock) and the runtime (a torch engine): :mod:`llmsched.loop` runs them.
The loop checks every answer against these contracts and raises a TypeError or ValueError
naming the policy's class and what was wrong.

Named policies (FCFS, static queues, Algorithm 1, the Lagrangian rule, ...) and the
registry of their names live in :mod:`llmsched.online`.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from llmsched.cost import CostModel
from llmsched.workload import Workload

__all__ = ["DECODE_UNTIL_EVENT", "PREFILL_NOW", "EngineView", "IterationPolicy", "RequestPolicy"]

# ``IterationPolicy.decide``'s answer "prefill now".
PREFILL_NOW = 0
# ``decide``'s answer "keep decoding until something happens": the loop stops at the next
# finish, or at the next arrival while a client is free, whichever comes first.
DECODE_UNTIL_EVENT = 1 << 62


@runtime_checkable
class RequestPolicy(Protocol):
    """Which waiting request each free client takes.

    The loop calls, in this order of time:

    * ``start(workload, clients)`` once, before anything happens: every client is free and
      no request has arrived. A policy must not read a request before it arrives (its
      prompt length and prediction are known from then on), unless the caller asked for a
      clairvoyant run (``sizes="oracle"``).
    * ``arrive(request)`` when a request arrives, in order of arrival time (ties by request
      index), at the first decision point at or after its arrival.
    * ``release(client)`` when the request on ``client`` has produced its last token; the
      client is free from then on.
    * ``ready()``, only while some client is free, at every decision point: how many
      requests a prefill stage could take *now*. It must return an int >= 0; 0 means no
      prefill is possible.
    * ``take(capacity)``, only after ``ready()`` returned more than 0 and the loop decided
      to prefill: fill one prefill stage. It must return a non-empty ``list`` of
      ``(request, client)`` pairs of ints, each request arrived and not taken before, each
      client free, no request and no client twice, with prompt tokens summing to at most
      ``capacity``. The policy removes the requests it returns from what it offers.
    """

    def start(self, workload: Workload, clients: int) -> None: ...

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
        The cost model's time of one decode iteration with ``active`` clients.
    iterations_to_finish
        Decode iterations until the next request finishes.
    stage_iterations
        Iterations the current decode stage has run so far (0 right after a prefill).
    just_prefilled
        True right after a prefill stage: the next iteration decodes whatever the answer.
    unstarted
        Requests arrived and not prefilled yet (whether more will arrive is not shown).
    workload, cost
        The instance being run.
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
    def just_prefilled(self) -> bool: ...

    @property
    def unstarted(self) -> int: ...

    @property
    def workload(self) -> Workload: ...

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

    * ``start(workload, cost, clients)`` once, before anything happens;
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

    def start(self, workload: Workload, cost: CostModel, clients: int) -> None: ...

    def decide(self, engine: EngineView) -> int: ...
