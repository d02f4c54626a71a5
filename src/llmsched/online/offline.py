"""Offline request scheduling (Pang et al., Sec. IV-B and Algorithm 1's sorting).

Requests are assigned to clients so that every client's estimated decode work is balanced
(the minimising-makespan bin packing of Eqs. 26-30, solved by
:func:`llmsched.mip.solve_pcmax`), and each client's queue is sorted by N^p + N^d, longest
first.

Online, the requests are not all there at the start: :class:`RollingQueues` plans the
queues over the requests that have arrived and not been planned yet, whenever a client
would otherwise sit idle or the arrivals since the last plan weigh as much as the work
still queued (a *rolling horizon*, batched so that plans stay few). With every request
present at time 0 its first plan is the paper's offline assignment, exactly.
"""

from __future__ import annotations

import heapq
import math
import warnings
from collections import deque
from typing import TYPE_CHECKING

import numpy as np

from llmsched.core.checks import time_limit as check_time_limit
from llmsched.core.result import Status
from llmsched.core.workload import Workload
from llmsched.online.baselines import FreeClients
from llmsched.policies import KnownRequests

if TYPE_CHECKING:
    from llmsched.mip.pcmax.solve import PcmaxResult

__all__ = [
    "OfflineQueues",
    "RollingQueues",
    "balanced_assignment",
    "check_overhead",
    "check_sizes",
    "decode_sizes",
    "offline_queues",
]

SIZES = ("predicted", "oracle")


def check_sizes(sizes: str) -> str:
    """``sizes`` if it names what a scheduler plans with (``predicted`` or ``oracle``)."""
    if sizes not in SIZES:
        raise ValueError(f"sizes must be one of {list(SIZES)}, got {sizes!r}")
    return sizes


def check_overhead(overhead: int) -> int:
    """``overhead`` as an int if it is a whole number of tokens >= 0 (see :func:`offline_queues`)."""
    if isinstance(overhead, bool) or not isinstance(overhead, (int, np.integer)) or overhead < 0:
        raise ValueError(f"overhead must be a whole number of tokens >= 0, got {overhead!r}")
    return int(overhead)


def decode_sizes(workload: Workload, sizes: str = "predicted") -> np.ndarray:
    """The output lengths a scheduler plans with: the predictions, or the truth (``oracle``).

    ``predicted`` needs ``workload.predicted_output``; a scheduler never sees the truth
    unless asked for the oracle explicitly.
    """
    if check_sizes(sizes) == "oracle":
        return workload.output_tokens
    if workload.predicted_output is None:
        raise ValueError(
            "the workload has no predicted_output: attach predictions (llmsched.online.with_predictions, or "
            "--predictor NAME on the command line) or plan with the true lengths (sizes='oracle', the "
            "-oracle policy names)"
        )
    return workload.predicted_output


def balanced_assignment(sizes: np.ndarray, clients: int, time_limit: float) -> tuple[np.ndarray, PcmaxResult]:
    """The machine of each job in a P||Cmax assignment of ``sizes`` to ``clients`` machines.

    With more clients than jobs it is solved on as many machines as jobs: the machines
    beyond would stay empty in any assignment, and the optimum (every job alone) is the same.
    """
    from llmsched.mip.pcmax.solve import solve_pcmax  # the solver pipeline loads only when asked for

    machines = min(int(clients), len(sizes)) if isinstance(clients, (int, np.integer)) else clients
    result = solve_pcmax(sizes, machines, time_limit=time_limit)
    return result.assignment, result


def offline_queues(
    workload: Workload,
    clients: int,
    sizes: str = "predicted",
    time_limit: float = math.inf,
    overhead: int = 0,
) -> tuple[dict[int, list[int]], PcmaxResult]:
    """Per-client request queues from the balanced assignment, longest N^p + N^d first.

    The assignment balances each client's decode tokens plus ``overhead`` per request: the
    decode iterations a client loses every time it waits for (and sits through) the prefill
    stage of its next request. With ``overhead=0`` it is the paper's model (Eqs. 26-30).

    Returns
    -------
    queues
        ``queues[j]`` is client ``j``'s queue, for the clients given a request only (a
        client left out has none), so the size does not grow with idle clients.
    result
        The assignment's :class:`~llmsched.mip.PcmaxResult`. With more clients than
        requests it is solved on as many machines as requests: the clients beyond would
        stay empty in any assignment, and the optimum (every request alone) is the same.
    """
    overhead = check_overhead(overhead)
    decode = decode_sizes(workload, sizes)
    assignment, result = balanced_assignment(decode + overhead, clients, time_limit)
    total = workload.prompt_tokens + decode
    # Group by client, longest N^p + N^d first within a client (ties by request index).
    order = np.lexsort((np.arange(len(workload)), -total, assignment))
    owners = assignment[order]
    cuts = np.flatnonzero(np.diff(owners)) + 1
    queues = {
        int(group_owners[0]): group.tolist()
        for group, group_owners in zip(np.split(order, cuts), np.split(owners, cuts), strict=True)
        if group.size
    }
    return queues, result


class RollingQueues:
    """Per-client queues planned over the requests that have arrived (a rolling horizon).

    Each client works through its own queue. The arrived requests not yet planned wait in
    a pool; a *plan* deals the whole pool out to the clients, balancing each client's
    planned decode tokens plus ``overhead`` per request on top of what it already holds
    (its queue and the request it runs), and appends each client's share to its queue,
    longest N^p + N^d first. Requests planned earlier stay ahead of later ones.

    A plan is made at a decision point when the pool holds more requests than there are
    free clients with nothing queued, and either such a client exists (it would otherwise
    sit idle), or no queue holds work, or the pool's planned work reaches ``replan`` times
    the work still queued. While the pool fits, free clients with nothing queued take its
    requests directly, oldest first. The run's first plan, when every client meets its pool
    free and empty (the closed batch of the paper: every request present at time 0), is the
    balanced assignment of Eqs. 26-30 solved to optimality by
    :func:`~llmsched.mip.solve_pcmax`; every other plan deals its pool longest first onto
    the least-loaded client (LPT with the clients' loads), so a run solves at most one
    assignment exactly.

    With ``steal`` (Algorithm 1's preemptive part), a free client with nothing queued
    takes the head of the queue of the client with the most tokens queued. In a
    clairvoyant run (see :class:`~llmsched.policies.KnownRequests`) the first plan covers
    every request at the start, as the paper's offline schedule does, and a client whose
    next request has not arrived waits for it.

    Parameters
    ----------
    initial
        ``"offline"``: plans balance the clients' loads; ``"round-robin"``: a plan deals
        its requests in arrival order, one client after another.
    sizes
        Plan with the predictions (``"predicted"``) or the true lengths (``"oracle"``).
    time_limit
        Wall-clock safety net (seconds) of each exact assignment; by default none, so the
        assignment stops on its deterministic work budget and the schedule is the same on
        any machine.
    overhead
        Tokens added to every request in the balance (see :func:`offline_queues`).
    steal
        Let a free client with nothing queued take work from the most loaded queue.
    replan
        Plan once the pool's planned work reaches this multiple of the work queued.
    """

    name = "offline"

    def __init__(
        self,
        initial: str = "offline",
        sizes: str = "predicted",
        time_limit: float = math.inf,
        overhead: int = 0,
        steal: bool = False,
        replan: float = 1.0,
    ):
        if initial not in ("offline", "round-robin"):
            raise ValueError(f"initial must be 'offline' or 'round-robin', got {initial!r}")
        if not isinstance(steal, (bool, np.bool_)):
            raise TypeError(f"steal must be True or False, got {steal!r}")
        if isinstance(replan, bool) or not isinstance(replan, (int, float)) or not 0 < replan < np.inf:
            raise ValueError(f"replan must be a finite number > 0, got {replan!r}")
        self.initial = initial
        self.sizes = check_sizes(sizes)
        self.time_limit = check_time_limit("time_limit", time_limit)
        self.overhead = check_overhead(overhead)
        self.steal = bool(steal)
        self.replan = float(replan)
        self.result: PcmaxResult | None = None
        self.plans = 0

    def start(self, known: KnownRequests, clients: int) -> None:
        n = len(known.prompt_tokens)
        self._prompt = known.prompt_tokens
        self._decode = known.planned_output(self.sizes)  # ValueError when not revealed
        self._arrival = known.arrival
        self._clients = clients
        self._arrived = [False] * n
        self._owner = [-1] * n
        self._queues: dict[int, deque[int]] = {}
        self._remain: dict[int, int] = {}  # client -> N^p + N^d queued (Algorithm 1's remain_token)
        self._load: dict[int, int] = {}  # client -> planned decode + overhead queued and running
        self._running: dict[int, int] = {}  # busy client -> planned decode + overhead of its request
        self._pool: deque[int] = deque()  # arrived, not planned, in arrival order
        self._pool_load = 0
        self._queued_load = 0
        self._dealt = 0  # requests dealt by round-robin so far
        self._free: set[int] = set()  # free clients with a queue (own work or waiting for it)
        self._own: set[int] = set()  # free clients whose own head has arrived
        # (plan of the head, arrival, head, client), lazy
        self._own_heap: list[tuple[int, float, int, int]] = []
        self._donors: list[tuple[int, int, int]] = []  # (plan of the head, -remaining tokens, client), lazy
        self._plan_of = [0] * n  # the plan that queued each request
        self.result = None
        self.plans = 0
        self._idle = FreeClients(clients)  # free clients with nothing queued, lowest first
        if known.clairvoyant:
            # The paper's offline schedule: every request planned before anything runs.
            self._plan(sorted(range(n), key=lambda i: (self._arrival[i], i)))

    # -- planning --------------------------------------------------------------------------
    def _size(self, request: int) -> int:
        return self._decode[request] + self.overhead

    def _plan(self, batch: list[int]) -> None:
        """Deal ``batch`` out to the clients and append each share to its client's queue."""
        self.plans += 1
        b = len(batch)
        epoch = self.plans
        for request in batch:
            self._plan_of[request] = epoch
        fresh: list[int] = []  # free clients with nothing queued, lowest first
        while len(self._idle) and len(fresh) < b:
            fresh.append(self._idle.pop_lowest())
        holders = sorted(self._load)  # clients with work queued or running
        fresh_set = set(fresh)
        if self.initial == "round-robin":
            targets = sorted(fresh + holders)
            start = self._dealt
            shares: dict[int, list[int]] = {c: [] for c in targets}
            for k, request in enumerate(batch):
                shares[targets[(start + k) % len(targets)]].append(request)
            self._dealt += b
        elif epoch == 1 and not holders and b > len(fresh):
            # The first pool, met by every client free and empty (the paper's closed batch):
            # the exact balanced assignment. Later plans are online decisions and stay cheap.
            sizes = np.array([self._size(i) for i in batch], dtype=np.int64)
            assignment, self.result = balanced_assignment(sizes, len(fresh), self.time_limit)
            if self.result.status is Status.TIME_LIMIT:
                # Only the clock's safety net stops a plan short of its work budget: the
                # queues, and so the schedule, may then differ on a faster or slower machine.
                warnings.warn(
                    f"{type(self).__name__}: the balanced assignment of {b} requests reached its "
                    f"{self.time_limit:g} s time limit before its work budget, so this schedule "
                    "may depend on the machine's speed; raise time_limit (or leave it out)",
                    RuntimeWarning,
                    stacklevel=2,
                )
            shares = {c: [] for c in fresh}
            for request, machine in zip(batch, assignment.tolist(), strict=True):
                shares[fresh[machine]].append(request)
        else:
            # LPT onto the least-loaded client; free empty clients first among equals.
            heap = [(0, 0, c) for c in fresh]
            heap += [(self._load[c], 1, c) for c in holders]
            heapq.heapify(heap)
            shares = {c: [] for _, _, c in heap}
            for request in sorted(batch, key=lambda i: (-self._size(i), i)):
                load, rank, client = heap[0]
                shares[client].append(request)
                heapq.heapreplace(heap, (load + self._size(request), rank, client))
        for client, share in shares.items():
            if not share:
                continue
            share.sort(key=lambda i: (-(self._prompt[i] + self._decode[i]), i))
            queue = self._queues.get(client)
            if queue is None:
                queue = self._queues[client] = deque()
            was_empty = not queue
            queue.extend(share)
            for request in share:
                self._owner[request] = client
            weight = sum(self._prompt[i] + self._decode[i] for i in share)
            load = sum(self._size(i) for i in share)
            self._remain[client] = self._remain.get(client, 0) + weight
            self._load[client] = self._load.get(client, 0) + load
            self._queued_load += load
            if client in self._free or (was_empty and client in fresh_set):
                self._free.add(client)
                self._classify(client)
            self._push_donor(client)
        for client in fresh:
            if not shares.get(client):
                self._idle.release(client)

    def _plan_pool(self) -> None:
        batch = list(self._pool)
        self._pool.clear()
        self._pool_load = 0
        self._plan(batch)

    # -- client states ---------------------------------------------------------------------
    def _head(self, client: int) -> int | None:
        q = self._queues.get(client)
        return q[0] if q else None

    def _classify(self, client: int) -> None:
        """Put a free client where it belongs: own work ready, nothing queued, or waiting."""
        self._own.discard(client)
        head = self._head(client)
        if head is None:
            self._free.discard(client)
            self._idle.release(client)
        elif self._arrived[head]:
            self._own.add(client)
            heapq.heappush(self._own_heap, (self._plan_of[head], self._arrival[head], head, client))

    def _pop_head(self, client: int) -> int:
        request = self._queues[client].popleft()
        self._remain[client] -= self._prompt[request] + self._decode[request]
        size = self._size(request)
        self._load[client] -= size
        self._queued_load -= size
        if not self._queues[client]:
            del self._remain[client], self._queues[client]
            if not self._load[client]:
                del self._load[client]
        if client in self._free:
            self._classify(client)
        self._push_donor(client)
        return request

    def _push_donor(self, client: int) -> None:
        head = self._head(client)
        if self.steal and head is not None and self._arrived[head]:
            heapq.heappush(self._donors, (self._plan_of[head], -self._remain[client], client))

    def _top_own(self) -> int | None:
        heap = self._own_heap
        while heap:
            _, _, request, client = heap[0]
            if client in self._own and self._head(client) == request:
                return client
            heapq.heappop(heap)
        return None

    def _top_donor(self) -> int | None:
        heap = self._donors
        while heap:
            epoch, neg, client = heap[0]
            head = self._head(client)
            if (
                head is not None
                and -neg == self._remain[client]
                and epoch == self._plan_of[head]
                and self._arrived[head]
            ):
                return client
            heapq.heappop(heap)
        return None

    # -- the request-policy protocol -------------------------------------------------------
    def arrive(self, request: int) -> None:
        self._arrived[request] = True
        owner = self._owner[request]
        if owner < 0:
            self._pool.append(request)
            self._pool_load += self._size(request)
        elif self._head(owner) == request:  # planned ahead (clairvoyant): its client may wait
            if owner in self._free:
                self._classify(owner)
            self._push_donor(owner)

    def release(self, client: int) -> None:
        size = self._running.pop(client, 0)
        if size:
            self._load[client] -= size
            if not self._load[client] and client not in self._queues:
                del self._load[client]
        self._free.add(client)
        self._classify(client)

    def ready(self) -> int:
        pool = len(self._pool)
        idle = len(self._idle)
        if pool > idle and (
            idle or not self._queued_load or self._pool_load >= self.replan * self._queued_load
        ):
            self._plan_pool()
            pool, idle = 0, len(self._idle)
        direct = min(pool, idle)
        if self.steal and idle > direct and self._top_donor() is not None:
            return len(self._own) + idle
        return len(self._own) + direct

    def take(self, capacity: int) -> list[tuple[int, int]]:
        pairs: list[tuple[int, int]] = []
        room = capacity
        prompt, plan_of, queues = self._prompt, self._plan_of, self._queues
        while True:
            own = self._top_own()
            donor = self._top_donor() if self.steal else None
            request = -1
            # A free client takes its own head unless work of an earlier plan is still
            # queued elsewhere: then, with stealing, that work goes first (plans are served
            # in order; within one plan, own queues first, then the most loaded queue).
            if own is not None and (donor is None or plan_of[queues[own][0]] <= plan_of[queues[donor][0]]):
                if prompt[queues[own][0]] <= room:
                    client = own
                    self._free.discard(client)
                    self._own.discard(client)
                    request = self._pop_head(client)
                elif donor is not None and len(self._idle) and prompt[queues[donor][0]] <= room:
                    client = self._idle.pop_lowest()
                    request = self._pop_head(donor)
                else:
                    break
            elif donor is not None:
                if prompt[queues[donor][0]] > room:
                    break
                if len(self._idle):
                    client = self._idle.pop_lowest()
                elif own is not None:  # a free client ahead of the oldest plan helps with it
                    client = own
                    self._free.discard(client)
                    self._own.discard(client)
                else:
                    break
                request = self._pop_head(donor)
            elif len(self._idle) and self._pool:
                if prompt[self._pool[0]] > room:
                    break
                client = self._idle.pop_lowest()
                request = self._pool.popleft()
                self._pool_load -= self._size(request)
            else:
                break
            size = self._size(request)
            self._running[client] = size
            self._load[client] = self._load.get(client, 0) + size
            room -= prompt[request]
            pairs.append((request, client))
        return pairs


class OfflineQueues(RollingQueues):
    """The paper's offline baseline: balanced per-client queues, no stealing.

    :class:`RollingQueues` with ``initial="offline"``, ``overhead=0`` and ``steal=False``.

    Parameters
    ----------
    sizes
        Plan with the workload's predictions (``"predicted"``) or the true lengths
        (``"oracle"``).
    time_limit
        Wall-clock safety net (seconds) of each exact assignment (none by default: the
        assignment stops on its deterministic work budget).
    """

    name = "offline"

    def __init__(self, sizes: str = "predicted", time_limit: float = math.inf):
        super().__init__("offline", sizes, time_limit, overhead=0, steal=False)
