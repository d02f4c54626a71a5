"""The baseline policies: one FCFS queue, fixed per-client queues, and prefill-first.

FCFS with prefill-first is the vLLM-like baseline of Pang et al.; static queues run a
fixed assignment of requests to clients (round-robin, or an offline plan). The free-client
pool here serves every policy that hands out free clients lowest index first.
"""

from __future__ import annotations

import heapq
import math
import numbers
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from llmsched.core.checks import positive_int
from llmsched.core.cost import CostModel
from llmsched.policies import PREFILL_NOW, EngineView, KnownRequests

__all__ = ["FCFS", "BatchWise", "FreeClients", "PrefillFirst", "StaticQueues"]


class FreeClients:
    """The free clients, lowest index first, in memory proportional to the clients ever used.

    Parameters
    ----------
    clients
        Number of clients J; all are free at first.
    exclude
        Clients that are not in the pool at first (they join when released).
    """

    def __init__(self, clients: int, exclude: Sequence[int] = ()):
        self._released: list[int] = []  # heap of clients that were used and are free again
        self._fresh = 0  # the lowest client never used (and not excluded), or J
        self._clients = clients
        self._exclude = sorted(set(exclude))  # few: the fresh pointer steps over them
        self._skip = 0  # excluded clients below the fresh pointer
        self._unused = clients - len(self._exclude)  # never used, not excluded
        self._skip_excluded()

    def _skip_excluded(self) -> None:
        exclude = self._exclude
        while self._skip < len(exclude) and exclude[self._skip] <= self._fresh:
            if exclude[self._skip] == self._fresh:
                self._fresh += 1
            self._skip += 1

    def __len__(self) -> int:
        return len(self._released) + self._unused

    def release(self, client: int) -> None:
        heapq.heappush(self._released, client)

    def lowest(self) -> int:
        """The lowest free client (the pool must not be empty)."""
        if self._released and (not self._unused or self._released[0] < self._fresh):
            return self._released[0]
        return self._fresh

    def pop_lowest(self) -> int:
        """Remove and return the lowest free client (the pool must not be empty)."""
        if self._released and (not self._unused or self._released[0] < self._fresh):
            return heapq.heappop(self._released)
        client = self._fresh
        self._fresh += 1
        self._unused -= 1
        if self._exclude:
            self._skip_excluded()
        return client


class FCFS:
    """One queue shared by all clients, in arrival order (ties by request index).

    A prefill stage takes requests from the head of the queue while a client is free and
    the next prompt still fits in the stage (and, with ``max_batch``, while the stage holds
    fewer requests); it stops at the first prompt that does not fit (strict arrival order, as
    vLLM's scheduler does). Free clients are used lowest index first.
    """

    name = "fcfs"
    #: It needs no count of the requests up front (a fleet's engine may run it).
    open_ended = True

    def __init__(self, max_batch: int | None = None):
        self.max_batch = math.inf if max_batch is None else positive_int("max_batch", max_batch)
        self._limited = max_batch is not None

    def start(self, known: KnownRequests, clients: int) -> None:
        self._prompt = known.prompt_tokens
        self._queue: deque[int] = deque()
        self._free = FreeClients(clients)
        self._free_count = clients  # len(self._free), kept here: ready() is asked at every step

    def arrive(self, request: int) -> None:
        self._queue.append(request)

    def resume(self, request: int) -> None:
        """A preempted request's continuation (an engine with KV-cache memory): first in line,
        as vLLM puts a preempted request back at the head of its waiting queue."""
        self._queue.appendleft(request)

    def release(self, client: int) -> None:
        self._free.release(client)
        self._free_count += 1

    def withdraw(self) -> int | None:
        """Give up the waiting request that would start last (a fleet's backoff moves it to
        another engine); None when none waits."""
        return self._queue.pop() if self._queue else None

    def ready(self) -> int:
        count = min(len(self._queue), self._free_count)
        return min(count, int(self.max_batch)) if self._limited else count

    def take(self, capacity: int) -> list[tuple[int, int]]:
        queue, prompt, pop = self._queue, self._prompt, self._free.pop_lowest
        pairs: list[tuple[int, int]] = []
        room = capacity
        for _ in range(self.ready()):
            if prompt[queue[0]] > room:
                break
            room -= prompt[queue[0]]
            pairs.append((queue.popleft(), pop()))
        self._free_count -= len(pairs)
        return pairs


class BatchWise(FCFS):
    """Batch-wise inference without insertion (Mico's baseline): a batch of waiting requests
    is taken, in arrival order as :class:`FCFS` takes them, only when every client is free,
    and runs until its longest request finishes; clients freed earlier stay idle.

    ``max_batch`` caps a batch (Mico's batch sizes); without it a batch fills the clients
    and the prefill capacity.
    """

    name = "batch-wise"

    def start(self, known: KnownRequests, clients: int) -> None:
        super().start(known, clients)
        self._clients = clients

    def ready(self) -> int:
        if self._free_count < self._clients:
            return 0  # the batch still runs: no insertion
        return super().ready()


class StaticQueues:
    """Each client works through its own fixed queue of requests, in queue order.

    Parameters
    ----------
    queues
        Client ``j``'s requests in the order it runs them: ``queues[j]`` of a sequence of
        one queue per client, or of a mapping from client to queue (clients it leaves out
        get no request; memory then grows with the clients that have work, not with J).
        Queues given here are a plan made before the run over every request, so the run is
        marked clairvoyant (``planned_ahead``). If omitted, requests are dealt round-robin
        as they arrive: the k-th request to arrive goes to client ``k mod J`` (request ``i``
        to client ``i mod J`` when all arrive at once).

    Notes
    -----
    A prefill stage takes, among the free clients whose next request has arrived, the
    heads in order of arrival (ties by request index) while they fit in the stage.
    """

    name = "static"

    def __init__(self, queues: Sequence[Sequence[int]] | Mapping[int, Sequence[int]] | None = None):
        self._given: Sequence[list[int]] | Mapping[int, list[int]] | None = _check_queues(queues)
        self.planned_ahead = self._given is not None

    def _queues(self, n: int, clients: int) -> dict[int, list[int]]:
        given = self._given
        if given is None:
            return {}  # dealt as the requests arrive
        if isinstance(given, Mapping):
            queues = dict(given)
            outside = [j for j in queues if not 0 <= j < clients]
            if outside:
                raise ValueError(
                    f"StaticQueues has a queue for client {outside[0]}; clients are 0..{clients - 1}"
                )
        else:
            if len(given) != clients:
                raise ValueError(f"StaticQueues has {len(given)} queues but there are {clients} clients")
            queues = dict(enumerate(given))
        flat = np.array([r for q in queues.values() for r in q], dtype=np.int64)
        if flat.size != n or not np.array_equal(np.sort(flat), np.arange(n)):
            raise ValueError("StaticQueues: the queues must hold every request of the workload exactly once")
        return queues

    def start(self, known: KnownRequests, clients: int) -> None:
        n = len(known.prompt_tokens)
        queues = self._queues(n, clients)
        self._arrival = known.arrival
        self._prompt = known.prompt_tokens
        # Only clients with work get a queue: memory grows with requests, not clients.
        self._queues_of = {j: deque(q) for j, q in queues.items() if q}
        owner = [0] * n
        for j, q in self._queues_of.items():
            for request in q:
                owner[request] = j
        self._owner = owner
        self._clients = clients
        self._dealt = 0  # requests dealt round-robin so far
        self._arrived = [False] * n
        self._busy: set[int] = set()
        # Heap of (arrival, request, client) for free clients whose head has arrived.
        self._ready: list[tuple[float, int, int]] = []

    def _offer(self, client: int) -> None:
        queue = self._queues_of.get(client)
        if queue and self._arrived[queue[0]]:
            head = queue[0]
            heapq.heappush(self._ready, (self._arrival[head], head, client))

    def arrive(self, request: int) -> None:
        self._arrived[request] = True
        if self._given is None:
            client = self._dealt % self._clients
            self._dealt += 1
            self._owner[request] = client
            self._queues_of.setdefault(client, deque()).append(request)
        client = self._owner[request]
        if client not in self._busy and self._queues_of[client][0] == request:
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
            queue = self._queues_of[client]
            queue.popleft()
            if not queue:
                del self._queues_of[client]  # memory grows with the clients holding work
            self._busy.add(client)
            pairs.append((request, client))
        return pairs


def _check_queues(
    queues: Sequence[Sequence[int]] | Mapping[int, Sequence[int]] | None,
) -> list[list[int]] | dict[int, list[int]] | None:
    """``queues`` with every client and request an int, or TypeError naming what is not one
    (a request 1.5 must not quietly become request 1)."""
    if queues is None:
        return None
    what = "StaticQueues: queues must be a sequence of queues or a mapping from client to queue"
    if isinstance(queues, (str, bytes)) or not isinstance(queues, (Sequence, Mapping, np.ndarray)):
        raise TypeError(f"{what}, got {type(queues).__name__} {queues!r}")

    def queue(where: str, requests: Any) -> list[int]:
        if isinstance(requests, (str, bytes)) or not isinstance(requests, (Sequence, np.ndarray)):
            raise TypeError(
                f"StaticQueues: {where} must be a sequence of request indices, got "
                f"{type(requests).__name__} {requests!r}"
            )
        out = []
        for r in requests:
            if isinstance(r, (bool, np.bool_)) or not isinstance(r, numbers.Integral):
                raise TypeError(f"StaticQueues: {where} holds {r!r}; requests are integer indices")
            out.append(int(r))
        return out

    if isinstance(queues, Mapping):
        checked: dict[int, list[int]] = {}
        for j, q in queues.items():
            if isinstance(j, (bool, np.bool_)) or not isinstance(j, numbers.Integral):
                raise TypeError(f"StaticQueues: the queues are keyed by client index, got {j!r}")
            checked[int(j)] = queue(f"the queue of client {j}", q)
        return checked
    return [queue(f"queues[{j}]", q) for j, q in enumerate(queues)]


class PrefillFirst:
    """The vLLM-like rule: whenever a prefill is possible, prefill."""

    name = "prefill-first"

    def start(self, known: KnownRequests, cost: CostModel, clients: int) -> None:
        pass

    def decide(self, engine: EngineView) -> int:
        return PREFILL_NOW
