"""Request policies that order by a priority and bound how long a request can be passed over.

Both keep one shared queue of the arrived requests, ordered by a key fixed when a request
arrives (the smallest first; ties to the earlier arrival, then the lower index):

* :class:`AgedShortestFirst` orders by predicted work with aging. A request's key is its
  arrival time plus ``seconds_per_token`` times its predicted work (prompt tokens plus
  ``output_weight`` times its predicted output tokens). Shortest predicted work first among
  requests that arrived together, FCFS in the limit ``seconds_per_token -> 0``; aging is
  linear in waiting time, and a linear aging term is common to every waiting request, so a
  fixed key orders them as the aged priorities would at any instant. It bounds starvation: a
  request of predicted work ``w`` is never passed over by one that arrives more than
  ``seconds_per_token * w`` seconds after it.
* :class:`DeadlineFirst` orders by a TTFT deadline (arrival plus a target linear in the prompt:
  ``ttft_base + ttft_per_token * prompt``, the form of "a slowdown over the time alone") and,
  with ``defer``, admits by it: a request whose deadline has passed by the time a client is
  free can no longer meet its target, so it waits behind every request that still can, oldest
  first among the late ones. Nothing is dropped: a deferred request runs once no request that
  can still meet its target waits. ``deferred`` counts them.

A preempted request's continuation (an engine with KV-cache memory) goes first in line, as
vLLM resumes preempted work. Under memory pressure the loop preempts the decoding request of
the largest key first (``preempt_rank``): the latest arrival aged by the most predicted work,
or the latest deadline.

Both are non-anticipative (they read a request's prompt and prediction once it has arrived,
and the loop's time), need no count of the requests (``open_ended``) and give up the waiting
request with the largest key to a fleet's backoff (``withdraw``), so they run under every
batching rule and on the engines of a fleet.
"""

from __future__ import annotations

import heapq
from collections import deque

from llmsched.core.checks import real
from llmsched.online.baselines import FreeClients
from llmsched.online.offline import check_sizes
from llmsched.online.requests import pop_largest
from llmsched.policies import KnownRequests

__all__ = ["AgedShortestFirst", "DeadlineFirst"]


class _Prioritised:
    """One queue by key, continuations first, free clients lowest index first."""

    name = "prioritised"
    #: It needs no count of the requests up front (a fleet's engine may run it).
    open_ended = True

    def start(self, known: KnownRequests, clients: int) -> None:
        self._known = known
        self._prompt = known.prompt_tokens
        self._arrival = known.arrival
        self._heap: list[tuple[float, float, int]] = []  # (key, arrival, request)
        self._late: list[tuple[float, int]] = []  # (arrival, request): see DeadlineFirst
        self._resumed: deque[int] = deque()
        self._key: dict[int, float] = {}
        self._free = FreeClients(clients)
        self._free_count = clients

    def key(self, request: int) -> float:
        """The request's priority key (smaller goes first); read when it arrives."""
        raise NotImplementedError

    def arrive(self, request: int) -> None:
        key = self._key[request] = self.key(request)
        heapq.heappush(self._heap, (key, self._arrival[request], request))

    def resume(self, request: int) -> None:
        """A preempted request's continuation: first in line."""
        self._key[request] = self.key(request)
        self._resumed.append(request)

    def preempt_rank(self, request: int) -> float:
        """Which decoding request memory preempts first: the one of the largest key."""
        return self._key[request]

    def release(self, client: int) -> None:
        self._free.release(client)
        self._free_count += 1

    def _waiting(self) -> int:
        return len(self._heap) + len(self._late) + len(self._resumed)

    def withdraw(self) -> int | None:
        """Give up the waiting request that would start last (for a fleet's backoff); None
        when none waits."""
        if self._late:
            return int(pop_largest(self._late)[-1])
        if self._heap:
            return int(pop_largest(self._heap)[-1])
        return self._resumed.pop() if self._resumed else None

    def ready(self) -> int:
        return min(self._waiting(), self._free_count)

    def _head(self) -> int | None:
        if self._resumed:
            return self._resumed[0]
        if self._heap:
            return self._heap[0][2]
        if self._late:
            return self._late[0][1]
        return None

    def _pop(self) -> int:
        if self._resumed:
            return self._resumed.popleft()
        if self._heap:
            return heapq.heappop(self._heap)[2]
        return heapq.heappop(self._late)[1]

    def take(self, capacity: int) -> list[tuple[int, int]]:
        pairs: list[tuple[int, int]] = []
        room = capacity
        while self._free_count:
            head = self._head()
            if head is None or self._prompt[head] > room:
                break
            room -= self._prompt[head]
            pairs.append((self._pop(), self._free.pop_lowest()))
            self._free_count -= 1
        return pairs


class AgedShortestFirst(_Prioritised):
    """Shortest predicted work first, with aging: the key is ``arrival + seconds_per_token *
    (prompt + output_weight * predicted output)`` (see the module's docstring).

    Parameters
    ----------
    seconds_per_token
        Seconds of waiting one token of predicted work is worth (> 0): the larger, the closer
        to shortest-first; the smaller, the closer to FCFS.
    output_weight
        Prompt tokens a predicted output token counts for (>= 0; 0 orders by prompt alone).
    sizes
        ``"predicted"`` (the workload's predictions) or ``"oracle"`` (the true lengths).
    """

    name = "aged-shortest-first"

    def __init__(
        self, seconds_per_token: float = 0.002, output_weight: float = 1.0, sizes: str = "predicted"
    ):
        self.seconds_per_token = real("seconds_per_token", seconds_per_token, low=0.0, low_open=True)
        self.output_weight = real("output_weight", output_weight, low=0.0)
        self.sizes = check_sizes(sizes)

    def start(self, known: KnownRequests, clients: int) -> None:
        self._planned = known.planned_output(self.sizes)  # ValueError when not revealed
        super().start(known, clients)

    def key(self, request: int) -> float:
        work = self._prompt[request] + self.output_weight * self._planned[request]
        return self._arrival[request] + self.seconds_per_token * work


class DeadlineFirst(_Prioritised):
    """Earliest TTFT deadline first, the late deferred (see the module's docstring).

    Parameters
    ----------
    ttft_base, ttft_per_token
        A request's TTFT target is ``ttft_base + ttft_per_token * prompt`` seconds (both >= 0,
        not both 0); its deadline, its arrival plus the target.
    defer
        Admission by the deadline: a request still waiting when its deadline has passed waits
        behind every request that can still meet its own (``deferred`` counts them). False:
        plain earliest-deadline-first.
    """

    name = "deadline-first"

    def __init__(self, ttft_base: float = 1.0, ttft_per_token: float = 0.0, defer: bool = True):
        self.ttft_base = real("ttft_base", ttft_base, low=0.0)
        self.ttft_per_token = real("ttft_per_token", ttft_per_token, low=0.0)
        if self.ttft_base == 0 and self.ttft_per_token == 0:
            raise ValueError("ttft_base and ttft_per_token are both 0: no request could meet its target")
        if not isinstance(defer, bool):
            raise TypeError(f"defer must be True or False, got {defer!r}")
        self.defer = defer
        self.deferred = 0

    def start(self, known: KnownRequests, clients: int) -> None:
        super().start(known, clients)
        self.deferred = 0

    def key(self, request: int) -> float:
        return self._arrival[request] + self.ttft_base + self.ttft_per_token * self._prompt[request]

    def ready(self) -> int:
        if self.defer:
            now = self._known.now
            heap, late = self._heap, self._late
            while heap and heap[0][0] < now:
                _, arrival, request = heapq.heappop(heap)
                heapq.heappush(late, (arrival, request))
                self.deferred += 1
        return super().ready()
