"""Scheduling policies the simulator asks at decision points, and the baseline ones.

A *request policy* decides which waiting request a free client takes; an *iteration
policy* decides whether the next stage is a prefill or more decoding. Both are plain
Python objects with no solver or torch in sight, so the same objects drive the simulator
and the runtime adapter.

The simulator calls a request policy as follows:

* ``start(workload, clients)`` once, before anything happens: every client is free and
  no request has arrived;
* ``arrive(request)`` when a request arrives (in order of arrival time);
* ``release(client)`` when a client's request has produced its last token;
* ``ready()`` for the number of requests that could be prefilled *now* (arrived, not yet
  taken, with a free client that may take them); 0 means no prefill is possible;
* ``take(capacity)`` to fill one prefill stage: it removes and returns ``(request, client)``
  pairs whose prompt tokens sum to at most ``capacity``; at least one pair when
  ``ready() > 0``.

An iteration policy has ``start(workload, cost, clients)`` and ``decide(engine)``. The
simulator asks only when there is a real choice (a prefill is possible and some client is
decoding). ``decide`` returns ``PREFILL_NOW`` (0) to prefill now, or ``n >= 1`` to decode ``n``
more iterations; the simulator asks again after those ``n`` iterations, or earlier when a
request finishes or arrives. Stages alternate, so right after a prefill stage at least one
decode iteration runs whatever the answer. ``engine`` is a read-only view of the simulator
(see :class:`llmsched.simulate.EngineView`).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from llmsched._checks import positive_int
from llmsched.cost import CostModel
from llmsched.workload import Workload

if TYPE_CHECKING:
    from llmsched.simulate import EngineView

__all__ = [
    "DECODE_UNTIL_EVENT",
    "FCFS",
    "PREFILL_NOW",
    "IterationPolicy",
    "PrefillFirst",
    "RequestPolicy",
    "StaticQueues",
    "iteration_policy_names",
    "make_iteration_policy",
    "make_request_policy",
    "register_iteration_policy",
    "register_request_policy",
    "request_policy_names",
]

PREFILL_NOW = 0
# "Keep decoding until something happens": the simulator stops at the next finish/arrival.
DECODE_UNTIL_EVENT = 1 << 62


@runtime_checkable
class RequestPolicy(Protocol):
    def start(self, workload: Workload, clients: int) -> None: ...

    def arrive(self, request: int) -> None: ...

    def release(self, client: int) -> None: ...

    def ready(self) -> int: ...

    def take(self, capacity: int) -> list[tuple[int, int]]: ...


@runtime_checkable
class IterationPolicy(Protocol):
    def start(self, workload: Workload, cost: CostModel, clients: int) -> None: ...

    def decide(self, engine: EngineView) -> int: ...


class FCFS:
    """One queue shared by all clients, in arrival order (ties by request index).

    A prefill stage takes requests from the head of the queue while a client is free and
    the next prompt still fits in the stage (and, with ``max_batch``, while the stage holds
    fewer requests); it stops at the first prompt that does not fit (strict arrival order, as
    vLLM's scheduler does). Free clients are used lowest index first.
    """

    name = "fcfs"

    def __init__(self, max_batch: int | None = None):
        self.max_batch = math.inf if max_batch is None else positive_int("max_batch", max_batch)

    def start(self, workload: Workload, clients: int) -> None:
        self._prompt = workload.prompt_tokens.tolist()
        self._queue: deque[int] = deque()
        self._free = _FreeClients(clients)

    def arrive(self, request: int) -> None:
        self._queue.append(request)

    def release(self, client: int) -> None:
        self._free.release(client)

    def ready(self) -> int:
        return int(min(len(self._queue), len(self._free), self.max_batch))

    def take(self, capacity: int) -> list[tuple[int, int]]:
        queue, free, prompt = self._queue, self._free, self._prompt
        pairs: list[tuple[int, int]] = []
        room = capacity
        while queue and free and len(pairs) < self.max_batch and prompt[queue[0]] <= room:
            request = queue.popleft()
            room -= prompt[request]
            pairs.append((request, free.pop_lowest()))
        return pairs


class _FreeClients:
    """The free clients, lowest index first, in memory proportional to the clients ever used."""

    def __init__(self, clients: int):
        self._released: list[int] = []  # heap of clients that were used and are free again
        self._fresh = 0  # clients fresh..J-1 have never been used
        self._clients = clients

    def __len__(self) -> int:
        return len(self._released) + self._clients - self._fresh

    def release(self, client: int) -> None:
        heapq.heappush(self._released, client)

    def pop_lowest(self) -> int:
        if self._released and (self._fresh >= self._clients or self._released[0] < self._fresh):
            return heapq.heappop(self._released)
        self._fresh += 1
        return self._fresh - 1


class StaticQueues:
    """Each client works through its own fixed queue of requests, in queue order.

    Parameters
    ----------
    queues
        ``queues[j]`` lists client ``j``'s requests in the order it runs them. If omitted,
        requests are dealt round-robin: request ``i`` goes to client ``i mod J``.

    A prefill stage takes, among the free clients whose next request has arrived, the
    heads in order of arrival (ties by request index) while they fit in the stage.
    """

    name = "static"

    def __init__(self, queues: Sequence[Sequence[int]] | None = None):
        self._given = None if queues is None else [list(map(int, q)) for q in queues]

    def start(self, workload: Workload, clients: int) -> None:
        n = len(workload)
        if self._given is None:
            queues = [list(range(j, n, clients)) for j in range(min(clients, n))]
        else:
            queues = self._given
            if len(queues) != clients:
                raise ValueError(f"StaticQueues has {len(queues)} queues but there are {clients} clients")
            flat = np.array([r for q in queues for r in q], dtype=np.int64)
            if flat.size != n or not np.array_equal(np.sort(flat), np.arange(n)):
                raise ValueError(
                    "StaticQueues: the queues must hold every request of the workload exactly once"
                )
        self._arrival = workload.arrival.tolist()
        self._prompt = workload.prompt_tokens.tolist()
        # Only clients with work get a queue: memory grows with requests, not clients.
        self._queues = {j: deque(q) for j, q in enumerate(queues) if q}
        owner = [0] * n
        for j, q in self._queues.items():
            for request in q:
                owner[request] = j
        self._owner_list = owner
        self._arrived = [False] * n
        self._busy: set[int] = set()
        # Heap of (arrival, request, client) for free clients whose head has arrived.
        self._ready: list[tuple[float, int, int]] = []

    def _offer(self, client: int) -> None:
        queue = self._queues.get(client)
        if queue and self._arrived[queue[0]]:
            head = queue[0]
            heapq.heappush(self._ready, (self._arrival[head], head, client))

    def arrive(self, request: int) -> None:
        self._arrived[request] = True
        client = self._owner_list[request]
        if client not in self._busy and self._queues[client][0] == request:
            self._offer(client)

    def release(self, client: int) -> None:
        self._busy.discard(client)
        self._offer(client)

    def ready(self) -> int:
        return len(self._ready)

    def take(self, capacity: int) -> list[tuple[int, int]]:
        ready, prompt = self._ready, self._prompt
        pairs: list[tuple[int, int]] = []
        room = capacity
        while ready and prompt[ready[0][1]] <= room:
            _, request, client = heapq.heappop(ready)
            room -= prompt[request]
            self._queues[client].popleft()
            self._busy.add(client)
            pairs.append((request, client))
        return pairs


class PrefillFirst:
    """The vLLM-like rule: whenever a prefill is possible, prefill."""

    name = "prefill-first"

    def start(self, workload: Workload, cost: CostModel, clients: int) -> None:
        pass

    def decide(self, engine: EngineView) -> int:
        return PREFILL_NOW


def _offline_oracle() -> Any:
    from llmsched.mip.offline import OfflineQueues  # solvers load only when asked for

    return OfflineQueues(sizes="oracle")


def _offline_predicted() -> Any:
    from llmsched.mip.offline import OfflineQueues

    return OfflineQueues(sizes="predicted")


def _online(name: str, **params: Any) -> Callable[[], Any]:
    # The online policies load only when asked for (the offline ones need the solvers).
    def factory() -> Any:
        from llmsched import online

        return getattr(online, name)(**params)

    return factory


def _hybrid(sizes: str) -> Any:
    """Algorithm 1 over offline queues balanced with the hybrid's per-request overhead."""
    from llmsched import online

    return online.SortedPreemptive(initial="offline", sizes=sizes, overhead=online.HYBRID_OVERHEAD)


_REQUEST_POLICIES: dict[str, Callable[..., Any]] = {
    "fcfs": FCFS,
    "static": StaticQueues,
    "offline": _offline_predicted,
    "offline-oracle": _offline_oracle,
    "sorted-preemptive": _online("SortedPreemptive", initial="offline"),
    "sorted-preemptive-oracle": _online("SortedPreemptive", initial="offline", sizes="oracle"),
    "hybrid": lambda: _hybrid("predicted"),
    "hybrid-oracle": lambda: _hybrid("oracle"),
    "sorted-preemptive-rr": _online("SortedPreemptive", initial="round-robin"),
    "sorted-preemptive-rr-oracle": _online("SortedPreemptive", initial="round-robin", sizes="oracle"),
    "shortest-first": _online("ShortestFirst"),
    "shortest-first-oracle": _online("ShortestFirst", sizes="oracle"),
    "longest-first": _online("LongestFirst"),
    "longest-first-oracle": _online("LongestFirst", sizes="oracle"),
}
_ITERATION_POLICIES: dict[str, Callable[..., Any]] = {
    "prefill-first": PrefillFirst,
    "lagrangian": _online("Lagrangian"),
    "threshold": _online("Threshold"),
}


def register_request_policy(name: str, factory: Callable[..., Any]) -> None:
    """Make ``factory()`` available to :func:`llmsched.simulate` under ``name``."""
    _REQUEST_POLICIES[name] = factory


def register_iteration_policy(name: str, factory: Callable[..., Any]) -> None:
    """Make ``factory()`` available to :func:`llmsched.simulate` under ``name``."""
    _ITERATION_POLICIES[name] = factory


def request_policy_names() -> list[str]:
    return sorted(_REQUEST_POLICIES)


def iteration_policy_names() -> list[str]:
    return sorted(_ITERATION_POLICIES)


def make_request_policy(policy: str | RequestPolicy) -> RequestPolicy:
    """A request policy from its name, or the object itself."""
    if isinstance(policy, str):
        if policy not in _REQUEST_POLICIES:
            raise ValueError(f"unknown request policy {policy!r}; choose one of {request_policy_names()}")
        return _REQUEST_POLICIES[policy]()
    if not isinstance(policy, RequestPolicy):
        raise TypeError(
            "request_policy must be a name or an object with start, arrive, release, ready "
            f"and take methods, got {type(policy).__name__}"
        )
    return policy


def make_iteration_policy(policy: str | IterationPolicy) -> IterationPolicy:
    """An iteration policy from its name, or the object itself."""
    if isinstance(policy, str):
        if policy not in _ITERATION_POLICIES:
            raise ValueError(f"unknown iteration policy {policy!r}; choose one of {iteration_policy_names()}")
        return _ITERATION_POLICIES[policy]()
    if not isinstance(policy, IterationPolicy):
        raise TypeError(
            "iteration_policy must be a name or an object with start and decide methods, "
            f"got {type(policy).__name__}"
        )
    return policy
