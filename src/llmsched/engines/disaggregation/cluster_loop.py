"""The disaggregated cluster's event loop (PD disaggregation, Splitwise) on the cost models'
clocks. The model is in :mod:`llmsched.engines.disaggregation.schedule`.

Routing is join-the-shortest-queue on each pool, as Splitwise's cluster scheduler does: an
arriving request goes to the prompt machine with the fewest prompt tokens queued or in
prefill (ties to the lowest index); when a prompt machine starts a stage, each of its
requests is given the token machine with the fewest requests decoding, waiting or on their
way (so each transfer can start with the stage, layer by layer). A prompt machine runs
stages back to back, first come first served, up to its capacity; a token machine decodes
with continuous batching: a request whose keys and values have arrived joins at the next
iteration boundary when a client is free, and waits in order otherwise. A token machine's
runs of iterations over which nothing joins or finishes are jumped over in closed form.

The loop is non-anticipative: it routes and batches only requests that have arrived; the
true output lengths only decide when a request finishes.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from typing import Any

import numpy as np

from llmsched.core.cost import context_rate, is_context_aware
from llmsched.core.workload import Workload
from llmsched.engines.disaggregation.cluster import DisaggregatedCluster
from llmsched.engines.disaggregation.schedule import DisaggregatedSchedule
from llmsched.engines.loop import admits, iteration_times

__all__ = ["simulate_disaggregated"]

_ARRIVE, _STAGE_DONE, _TRANSFER_DONE, _DECODER = 0, 1, 2, 3


class _Decoder:
    """A token machine: continuous batching, runs jumped over in closed form."""

    __slots__ = (
        "clients",
        "context_offset",
        "fresh",
        "g",
        "heap",
        "incoming",
        "next_k",
        "per_context",
        "released",
        "run_active",
        "run_context",
        "run_first",
        "run_start",
        "running",
        "tau",
        "version",
        "waiting",
    )

    def __init__(self, clients: int, tau: list[float], per_context: float):
        self.clients = clients
        self.tau = tau
        self.per_context = per_context
        # Free clients, built as requests take them (nothing is sized by idle clients): a stack
        # of released clients on top of the clients never used, fresh, fresh + 1, ... (the
        # lowest first), as if every client were stacked up front.
        self.released: list[int] = []
        self.fresh = 0
        self.running: dict[int, int] = {}  # client -> request
        self.heap: list[tuple[int, int, int]] = []  # (decode end, client, request)
        self.waiting: deque[int] = deque()  # arrived keys and values, no client yet
        self.incoming = 0  # requests routed here whose keys and values are on their way
        self.g = 0
        self.context_offset = 0
        self.run_start = math.nan  # the current run's start (NaN when idle)
        self.run_first = 0.0
        self.run_active = 0
        self.run_context = 0
        self.version = 0
        self.next_k = 0  # iterations of the current run up to its scheduled event

    @property
    def free(self) -> int:
        """Clients free now."""
        return len(self.released) + self.clients - self.fresh

    def take_client(self) -> int:
        """A free client: the last released, else the lowest never used."""
        if self.released:
            return self.released.pop()
        self.fresh += 1
        return self.fresh - 1

    @property
    def load(self) -> int:
        return len(self.running) + len(self.waiting) + self.incoming

    def elapsed(self, k: int) -> float:
        return self.run_first * k + self.per_context * self.run_active * (k * (k - 1) / 2)

    def iterations_until(self, due: float) -> int:
        """The fewest iterations of the current run after whose end ``due`` has come."""
        first, growth = self.run_first, self.per_context * self.run_active
        span = max(due - self.run_start, 0.0)
        if first <= 0 and growth <= 0:
            return 1
        half = growth / 2
        linear = first - half
        root = 2 * span / (linear + math.sqrt(linear * linear + 4 * half * span)) if span > 0 else 0.0
        k = max(1, math.ceil(root))
        while k > 1 and admits(self.run_start + self.elapsed(k - 1), due):
            k -= 1
        while not admits(self.run_start + self.elapsed(k), due):
            k += 1
        return k


def simulate_disaggregated(workload: Workload, cluster: DisaggregatedCluster) -> DisaggregatedSchedule:
    """Simulate ``workload`` on a disaggregated ``cluster``; return its schedule.

    Raises
    ------
    TypeError, ValueError
        On an invalid workload or cluster (a prompt longer than a stage holds), before any work.
    """
    if not isinstance(cluster, DisaggregatedCluster):
        raise TypeError(f"cluster must be a DisaggregatedCluster, got {type(cluster).__name__}")
    if not isinstance(workload, Workload):
        raise TypeError(f"workload must be a Workload, got {type(workload).__name__}")
    cluster.check(workload)
    n = len(workload)
    P, T = cluster.prompt_machines, cluster.token_machines
    M = P + T
    clients = cluster.token_clients
    prompt = workload.prompt_tokens.tolist()
    output = workload.output_tokens.tolist()
    arrival = workload.arrival.tolist()
    costs = [cluster.prompt_cost if m < P else cluster.token_cost for m in range(M)]
    squares_priced = [is_context_aware(cost) for cost in costs]
    caps = [int(cost.prefill_capacity) for cost in costs]
    pool_tau = [iteration_times(cost, min(clients, n)) for cost in (cluster.prompt_cost, cluster.token_cost)]
    rates = [context_rate(cost) for cost in costs]
    # Every machine can decode (a prompt machine only when lent to the token pool).
    decoders = [_Decoder(clients, pool_tau[m >= P], rates[m]) for m in range(M)]
    queues: list[deque[int]] = [deque() for _ in range(P)]
    waiting = [0] * P  # prompt tokens queued, not yet in a stage, per prompt machine
    in_stage = [0] * P  # prompt tokens in the stage a prompt machine runs
    prefilling = [False] * M  # a machine running a prefill stage

    stage_machine: list[int] = []
    stage_start: list[float] = []
    stage_end: list[float] = []
    stage_requests: list[list[int]] = []
    run_rows: list[tuple[int, float, int, float, float, int, int]] = []
    request_stage = [-1] * n
    request_machine = [-1] * n
    request_client = [-1] * n
    transfer_end = [math.nan] * n
    decode_start = [-1] * n
    decode_end = [-1] * n
    events: list[tuple[float, int, int, int, int]] = []  # (time, sequence, kind, who, version)
    sequence = 0

    def push(time: float, kind: int, who: int, version: int = 0) -> None:
        nonlocal sequence
        heapq.heappush(events, (time, sequence, kind, who, version))
        sequence += 1

    for request in np.argsort(workload.arrival, kind="stable").tolist():
        push(arrival[request], _ARRIVE, request)

    def stage_time(machine: int, requests: list[int]) -> float:
        cost: Any = costs[machine]
        tokens = sum(prompt[r] for r in requests)
        if squares_priced[machine]:
            return float(cost.prefill_time(tokens, sum(prompt[r] ** 2 for r in requests)))
        return float(cost.prefill_time(tokens))

    def take_stage(p: int, capacity: int, limit: int) -> list[int]:
        """The head of prompt machine ``p``'s queue, first come first served, up to
        ``capacity`` tokens and ``limit`` requests."""
        queue = queues[p]
        batch: list[int] = []
        tokens = 0
        while queue and len(batch) < limit and tokens + prompt[queue[0]] <= capacity:
            request = queue.popleft()
            batch.append(request)
            tokens += prompt[request]
        waiting[p] -= tokens
        return batch

    def record_stage(machine: int, batch: list[int], now: float) -> int:
        prefilling[machine] = True
        seconds = stage_time(machine, batch)
        stage = len(stage_start)
        stage_machine.append(machine)
        stage_start.append(now)
        stage_end.append(now + seconds)
        stage_requests.append(batch)
        for request in batch:
            request_stage[request] = stage
        push(now + seconds, _STAGE_DONE, stage)
        return stage

    def destination(source: int) -> int:
        """Join the shortest queue of the token pool; with the mixed pool, when every token
        machine is full, an idle prompt machine other than ``source`` is lent to it."""
        best = min(range(P, M), key=lambda m: (decoders[m].load, m))
        if cluster.mixed and decoders[best].load >= clients:
            idle = [
                q
                for q in range(P)
                if q != source and not prefilling[q] and not queues[q] and decoders[q].load < clients
            ]
            if idle:
                return min(idle, key=lambda q: (decoders[q].load, q))
        return best

    def start_prompt(p: int, now: float) -> None:
        """A prompt machine starts its next stage, unless it prefills or decodes already."""
        if prefilling[p] or decoders[p].load:
            return
        batch = take_stage(p, caps[p], n)
        if not batch:
            return
        in_stage[p] = sum(prompt[r] for r in batch)
        record_stage(p, batch, now)
        for request in batch:
            m = destination(p)
            decoders[m].incoming += 1
            request_machine[request] = m

    def lend(t: int, now: float) -> None:
        """An idle token machine takes a stage from the most loaded prompt queue."""
        d = decoders[t]
        if not cluster.mixed or prefilling[t] or d.load:
            return
        p = max(range(P), key=lambda q: (waiting[q], -q))
        if waiting[p] <= caps[p]:
            return  # no more than one stage waits: the prompt pool keeps up
        batch = take_stage(p, caps[t], clients)
        if not batch:
            return
        record_stage(t, batch, now)
        for request in batch:
            request_machine[request] = t
            d.incoming += 1

    def close_run(d: _Decoder, m: int, k: int) -> float:
        """Record ``k`` iterations of ``d``'s current run; return when they end."""
        end = d.run_start + d.elapsed(k)
        growth = d.per_context * d.run_active
        run_rows.append((m, d.run_start, k, d.run_first, growth, d.run_active, d.run_context))
        d.g += k
        return end

    def open_run(d: _Decoder, m: int, now: float) -> None:
        """Start a run at ``now`` with the running requests; schedule its next event."""
        d.version += 1
        if not d.running:
            d.run_start = math.nan
            return
        active = len(d.running)
        d.run_start = now
        d.run_active = active
        d.run_context = d.context_offset + active * d.g
        d.run_first = d.tau[active] + d.per_context * d.run_context
        d.next_k = d.heap[0][0] - d.g
        push(d.run_start + d.elapsed(d.next_k), _DECODER, m, d.version)

    def admit(d: _Decoder) -> None:
        while d.waiting and d.free:
            request = d.waiting.popleft()
            client = d.take_client()
            d.running[client] = request
            request_client[request] = client
            decode_start[request] = d.g
            decode_end[request] = d.g + output[request]
            d.context_offset += prompt[request] - d.g
            heapq.heappush(d.heap, (d.g + output[request], client, request))

    def finish(d: _Decoder) -> None:
        while d.heap and d.heap[0][0] == d.g:
            _, client, request = heapq.heappop(d.heap)
            del d.running[client]
            d.released.append(client)
            d.context_offset -= prompt[request] - decode_start[request]

    def after_idle(m: int, now: float) -> None:
        """A machine whose decoder ran dry goes back to its own pool's work."""
        if decoders[m].load:
            return
        if m < P:
            start_prompt(m, now)
        else:
            lend(m, now)

    now = 0.0
    while events:
        now, _, kind, who, version = heapq.heappop(events)
        if kind == _ARRIVE:
            # Shortest queue of prompt tokens, among the machines not lent out first.
            p = min(range(P), key=lambda q: (decoders[q].load > 0, waiting[q] + in_stage[q], q))
            queues[p].append(who)
            waiting[p] += prompt[who]
            if events and events[0][2] == _ARRIVE and events[0][0] <= now:
                continue  # more arrive at this instant: they may share a stage
            for q in range(P):
                start_prompt(q, now)
            for t in range(P, M):
                lend(t, now)
        elif kind == _STAGE_DONE:
            machine = stage_machine[who]
            batch = stage_requests[who]
            seconds = stage_end[who] - stage_start[who]
            prefilling[machine] = False
            if machine < P:
                in_stage[machine] = 0
                arrive_at = np.asarray(cluster.transfer(np.array([prompt[r] for r in batch]), seconds)) + now
                for request, at in zip(batch, arrive_at.tolist(), strict=True):
                    transfer_end[request] = at
                    push(at, _TRANSFER_DONE, request)
                start_prompt(machine, now)
            else:
                d = decoders[machine]
                for request in batch:  # decoded here: no transfer
                    transfer_end[request] = now
                    d.incoming -= 1
                    d.waiting.append(request)
                admit(d)
                open_run(d, machine, now)
        elif kind == _TRANSFER_DONE:
            m = request_machine[who]
            d = decoders[m]
            d.incoming -= 1
            d.waiting.append(who)
            if math.isnan(d.run_start):
                if not prefilling[m]:
                    admit(d)
                    open_run(d, m, now)
            elif d.free:
                # Join at the first iteration end at or after now.
                k = min(d.iterations_until(now), d.heap[0][0] - d.g)
                if k < d.next_k:
                    d.version += 1
                    d.next_k = k
                    push(d.run_start + d.elapsed(k), _DECODER, m, d.version)
        else:  # a machine's run reaches its event
            d = decoders[who]
            if version != d.version:
                continue
            end = close_run(d, who, d.next_k)
            finish(d)
            admit(d)
            open_run(d, who, end)
            if not d.running:
                after_idle(who, end)
    makespan = max(max(stage_end, default=0.0), max((r[1] + _run_span(r) for r in run_rows), default=0.0))
    runs = np.array(run_rows, dtype=object) if run_rows else np.zeros((0, 7), dtype=object)
    return DisaggregatedSchedule(
        workload,
        cluster,
        np.asarray(stage_machine, dtype=np.int64),
        np.asarray(stage_start, dtype=np.float64),
        np.asarray(stage_end, dtype=np.float64),
        runs[:, 0].astype(np.int64),
        runs[:, 1].astype(np.float64),
        runs[:, 2].astype(np.int64),
        runs[:, 3].astype(np.float64),
        runs[:, 4].astype(np.float64),
        runs[:, 5].astype(np.int64),
        runs[:, 6].astype(np.int64),
        np.asarray(request_stage, dtype=np.int64),
        np.asarray(request_machine, dtype=np.int64),
        np.asarray(request_client, dtype=np.int64),
        np.asarray(transfer_end, dtype=np.float64),
        np.asarray(decode_start, dtype=np.int64),
        np.asarray(decode_end, dtype=np.int64),
        makespan,
        {"mode": "disaggregated", "mixed": cluster.mixed, "overlap": cluster.overlap},
    )


def _run_span(row: tuple[int, float, int, float, float, int, int]) -> float:
    _, _, k, first, step, _, _ = row
    return first * k + step * (k * (k - 1) / 2)
