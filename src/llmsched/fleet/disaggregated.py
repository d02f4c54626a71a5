"""The disaggregated cluster (PD disaggregation, Splitwise) as engines on one clock: prompt
machines, token machines and the routers between them. The model (the cluster, its schedule,
its validator, its lower bound) is :mod:`llmsched.engines.disaggregation`.

Every machine is an engine of the one decision loop (:mod:`llmsched.engines.loop`) under the
pool rule (:class:`~llmsched.engines.disaggregation.rule.PoolRule`), whose queue tells a machine's
requests apart (:class:`~llmsched.engines.disaggregation.rule.MachineQueue`):

* a prompt machine holds the requests routed to it in a request policy
  (:class:`~llmsched.policies.RequestPolicy`) and runs prefill stages back to back; the policy
  chooses the waiting requests each stage holds (``take(capacity)``), up to the machine's
  prefill capacity, and the stage's requests leave for the machines that decode them. ``fcfs``
  (the default) takes them first come first served.
* a token machine decodes with continuous batching: a request whose keys and values have
  arrived joins at the next iteration boundary when a client is free, and waits in order
  otherwise; its runs of iterations over which nothing joins or finishes are jumped over in
  closed form. Every machine can decode (a prompt machine when the mixed pool lends it), so a
  prompt machine is a token machine with a queue.
* :class:`ClusterClock` drives them from one event heap: arrivals, keys and values arriving,
  and the times the machines ask to be woken at (a stage's end, a run's next event), in time
  order (ties in the order they were scheduled).

Routing goes through routers of :mod:`llmsched.fleet.routers`. An arriving request goes to the
prompt machine ``prompt_router`` picks (``jsq-prompt-tokens``: the fewest prompt tokens queued
or in prefill, ties to the lowest index, as Splitwise's cluster scheduler does); when a prompt
machine starts a stage, each of its requests goes to the token machine ``token_router`` picks
(``jsq-requests``: the fewest requests decoding, waiting or on their way, ties to the lowest
index; the token machines share their clients, so ``jsq`` chooses alike), so that each transfer
can start with the stage, layer by layer. What a router
sees of a pool (:class:`~llmsched.fleet.routers.base.Loads`): ``requests``, the requests each
machine holds (for a prompt machine, those queued or in its prefill stage, and any it decodes
when lent); ``prompt_tokens``, their prompt tokens; ``clients``, the token machines' clients;
``work``, zeros (a router that weighs requests by their sizes is refused); ``rates``, each
pool's cost model's seconds per prompt and per output token when busy.

The mixed pool's rules (see :mod:`llmsched.engines.disaggregation`) are the cluster's, not a
router's: a prompt machine lent to the token pool shows the prompt pool's router every request
that has arrived and all their prompt tokens on top of its own, so that a router balancing load
sends it arrivals only while every prompt machine is lent; a request whose token machine is
full, when every token machine is full, goes to an idle prompt machine instead; an idle token
machine takes a stage from the prompt queue holding the most tokens, when that queue holds more
than one stage's worth.

A prompt machine's request policy is started with the token machines' clients as its own: a
policy's client is a place in the hand-over to a stage, so one ``take`` gives a stage at most
that many requests (the most a lent token machine decodes at once), and the clients are free
again as soon as their requests are in the stage. A prompt machine's own stage takes again,
with the room left, until the policy has nothing more that fits. There is no iteration policy:
a prompt machine only prefills and a token machine only decodes, so no machine chooses between
the phases.

The run is non-anticipative: routers and policies learn of a request when it arrives, and the
true output lengths only decide when a request finishes (unless a policy plans with them,
``sizes="oracle"``; the schedule's ``info`` says so).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Generator, Sequence
from typing import Any

import numpy as np

from llmsched.core.checks import rng
from llmsched.core.schedule import decoding_at
from llmsched.core.workload import Workload
from llmsched.engines.answers import refuse_idle
from llmsched.engines.disaggregation.cluster import DisaggregatedCluster
from llmsched.engines.disaggregation.rule import HANDED, LENT, PROMPT, MachineQueue, PoolRule, stage_requests
from llmsched.engines.disaggregation.schedule import DisaggregatedSchedule
from llmsched.engines.loop import EngineStream, open_engine
from llmsched.fleet.engine import Engine
from llmsched.fleet.routers import REGISTRY, Loads, Router, RouterSetup, as_router, engine_index
from llmsched.online.registry import make_request_policy
from llmsched.policies import KnownRequests, RequestPolicy, oracle_lengths, planned_ahead

__all__ = ["simulate_disaggregated"]

#: The routers by default: Splitwise's join-the-shortest-queue on each pool.
PROMPT_ROUTER = "jsq-prompt-tokens"
TOKEN_ROUTER = "jsq-requests"

# Events, in the heap as (time, sequence, kind, who, version).
_ARRIVE, _TRANSFER_DONE, _WAKE = 0, 1, 2


class ClusterClock:
    """The cluster's machines on one event clock, with a router in front of each pool.

    Every machine is an engine running the one decision loop under
    :class:`~llmsched.engines.disaggregation.rule.PoolRule`, as a generator
    (:func:`~llmsched.engines.loop.open_engine`) that stops whenever it needs to know what has
    reached it up to a time. The clock keeps one heap of events (arrivals, keys and values
    arriving, the times the machines asked to be woken at), in time order (ties in the order
    they were scheduled); between them it routes requests and lends stages.

    Built from checked arguments (:func:`simulate_disaggregated` checks them): it starts the
    machines and the routers; :meth:`run` runs the workload once and returns its schedule.
    """

    def __init__(
        self,
        workload: Workload,
        cluster: DisaggregatedCluster,
        policies: list[RequestPolicy],
        names: list[str],
        prompt_router: Router,
        token_router: Router,
        seed: Any,
    ):
        self.workload, self.cluster, self.seed, self.names = workload, cluster, seed, names
        self.prompt_router, self.token_router = prompt_router, token_router
        n = len(workload)
        P, T = cluster.prompt_machines, cluster.token_machines
        M = P + T
        self.P, self.M, self.mixed = P, M, cluster.mixed
        self.lend_busy_above = cluster.lend_busy_above
        self.lend_busy = cluster.lend_busy_above is not None
        self.clients = clients = cluster.token_clients
        self.prompt: list[int] = workload.prompt_tokens.tolist()
        self.output: list[int] = workload.output_tokens.tolist()
        predicted = workload.predicted_output
        self.predicted: list[int] = predicted.tolist() if predicted is not None else [0] * n
        self.policies = policies

        # The machines: each an engine on a stream, asking its queue.
        self.streams: list[EngineStream] = []
        self.queues: list[MachineQueue] = []
        self.engines: list[Generator[float, None, Any]] = []
        for m in range(M):
            stream = EngineStream()
            stream.done = []
            prompts = None
            if m < P:  # a prompt machine: its policy learns of its requests as they are routed to it
                known = KnownRequests(
                    n, predicted is not None, oracle_lengths(policies[m]), False, workload.name
                )
                prompts = (policies[m], known)
            queue = MachineQueue(m, clients, stream, prompts, cluster.prompt_batch_tokens if m < P else None)
            engine = open_engine(
                cluster.cost_of(m),
                clients,
                queue,
                None,
                stream,
                predicted is not None,
                workload.name,
                n,
                PoolRule(queue),
            )
            self.streams.append(stream)
            self.queues.append(queue)
            self.engines.append(engine)
            next(engine)  # started, policy and all (a policy refuses what it cannot run here): idle
        self.capacity = [int(cluster.cost_of(m).prefill_capacity) for m in range(M)]

        # The routers' views, written as the machines change: the requests each machine
        # decodes, waits to decode or expects, and their prompt tokens; the requests each
        # prompt machine holds queued or in its stage, and their prompt tokens.
        self.held = np.zeros(M, dtype=np.int64)
        self.held_on_prompt = 0  # requests decoding on prompt machines (lent to the token pool)
        self.held_tokens = np.zeros(M, dtype=np.int64)
        self.queued_requests = np.zeros(P, dtype=np.int64)
        self.queued_tokens = np.zeros(P, dtype=np.int64)
        self.waiting_tokens = [0] * P  # prompt tokens waiting on each prompt machine, not in a stage

        order = np.argsort(workload.arrival, kind="stable")
        self.order: list[int] = order.tolist()
        views = []
        for router, engines, cost, held, tokens in (
            (prompt_router, P, cluster.prompt_cost, self.queued_requests, self.queued_tokens),
            (token_router, T, cluster.token_cost, self.held[P:], self.held_tokens[P:]),
        ):
            pool = Engine(cost, clients)
            router.start(
                RouterSetup(
                    engines,
                    n,
                    workload.prompt_tokens,
                    np.zeros(0, dtype=np.int64),
                    order,
                    seed,
                    np.full(engines, pool.tokens_per_s),
                )
            )
            views.append(
                Loads(
                    held,
                    np.full(engines, clients, dtype=np.int64),
                    np.zeros(engines),
                    tokens,
                    np.tile(pool.seconds_per_token, (engines, 1)),
                )
            )
        self.prompt_loads, self.token_loads = views
        # A prompt machine lent to the token pool shows the prompt pool's router every request
        # that has arrived on top of what it holds, and their prompt tokens: more than any
        # machine not lent can hold (and nothing of the requests still to come).
        self.lent_requests = 1
        self.lent_tokens = 1

        # What ran: the stages in the order they started; each request's stage, the machine
        # that decodes it (and its index there), and when its keys and values arrived there.
        self.stage_machine: list[int] = []
        self.stage_start: list[float] = []
        self.stage_end: list[float] = []
        self.stage_requests: list[list[int]] = []
        self.in_stage: list[int] = [-1] * M  # each machine's stage under way (-1: none)
        # Token memory: each request's blocks, each machine's free blocks, when each transfer
        # started (its reservation), and the transfers waiting for a machine's memory.
        memory = cluster.token_memory
        self.need: list[int] | None = None
        self.free_blocks = [0] * M
        self.transfer_start = [math.nan] * n
        self.waiting_transfers: list[deque[int]] = [deque() for _ in range(M)]
        if memory is not None:
            self.need = np.asarray(cluster.reserved_blocks(workload.prompt_tokens)).tolist()
            self.free_blocks = [memory.blocks] * M
        self.lending = [False] * M  # a stage lent to the machine and not taken yet
        self.request_stage = [-1] * n
        self.request_machine = [-1] * n
        self.request_local = [-1] * n
        self.transfer_end = [math.nan] * n
        self.known_of: list[KnownRequests | None] = [None] * n  # the view of the policy that took it
        # Each prompt's whole transfer, by the cluster's formula (with no stage to overlap,
        # all of it remains); a stage's overlap is taken off as its requests leave.
        self.link: list[float] = np.asarray(cluster.transfer(workload.prompt_tokens, 0.0)).tolist()
        self.results: list[Any] = [None] * M
        self.version = [0] * M
        self.events: list[tuple[float, int, int, int, int]] = []
        self.sequence = itertools.count()  # ties in the order events were scheduled

    def push(self, time: float, kind: int, who: int, version: int = 0) -> None:
        heapq.heappush(self.events, (time, next(self.sequence), kind, who, version))

    # -- the machines -------------------------------------------------------------------------
    def resume(self, m: int, now: float) -> None:
        """Let machine ``m`` run on from ``now`` until it needs to know more; then account for
        what it did: the requests it finished, the stage it took."""
        stream = self.streams[m]
        stage = self.in_stage[m]
        if stage >= 0 and now >= self.stage_end[stage]:
            self.ended_stage(m, now)
        if stream.done:  # finished at the end of a run cut short, which has now come
            self.finished(m, stream.done, now)
        try:
            wake = next(self.engines[m])
        except StopIteration as done:
            self.results[m] = done.value
            return
        version = self.version[m] = self.version[m] + 1
        if wake < math.inf:
            heapq.heappush(self.events, (wake, next(self.sequence), _WAKE, m, version))
        if stream.done and stream.done_at <= now:
            self.finished(m, stream.done, now)
        if stream.stage is not None:
            start, end, pairs = stream.stage
            stream.stage = None
            self.started_stage(m, stage_requests(pairs, self.queues[m]), start, end)
        if self.mixed and m >= self.P and self.in_stage[m] < 0 and (self.lend_busy or not self.held[m]):
            self.lend(m, now)

    def finished(self, m: int, done: list[int], now: float) -> None:
        """Requests finished decoding on machine ``m`` (by ``now``): the policy that prefilled
        each learns its output length; under token memory their blocks are freed, and the
        transfers waiting for them start."""
        member, prompt, output, known_of = self.queues[m].member, self.prompt, self.output, self.known_of
        tokens = 0
        for local in done:
            request = member[local]
            tokens += prompt[request]
            known = known_of[request]
            if known is not None:
                known.finish(output[request])
            if self.need is not None:
                self.free_blocks[m] += self.need[request]
        self.held[m] -= len(done)
        self.held_tokens[m] -= tokens
        if m < self.P:
            self.held_on_prompt -= len(done)
        done.clear()
        if self.need is not None:
            self.start_waiting(m, now)

    def start_waiting(self, m: int, now: float) -> None:
        """Start, first come first served, the transfers to machine ``m`` waiting for its
        memory, while they fit what is free (token memory)."""
        waiting, need, free = self.waiting_transfers[m], self.need, self.free_blocks
        assert need is not None
        while waiting and free[m] >= need[waiting[0]]:
            request = waiting.popleft()
            free[m] -= need[request]
            self.transfer_start[request] = now
            stage = self.request_stage[request]
            if self.stage_end[stage] <= now and self.in_stage[self.stage_machine[stage]] != stage:
                at = now + self.link[request]  # its stage is over: all of it now
                self.transfer_end[request] = at
                self.push(at, _TRANSFER_DONE, request)
            # else its stage is under way: it leaves when the stage ends (ended_stage)

    def add(self, m: int, request: int, kind: int, now: float) -> None:
        """``request`` reaches machine ``m`` at ``now``."""
        local = self.queues[m].add(
            request, kind, self.prompt[request], self.output[request], self.predicted[request], now
        )
        if kind != PROMPT:
            self.request_local[request] = local

    def expect(self, m: int, request: int) -> None:
        """``request`` will decode on machine ``m``."""
        self.queues[m].expect()
        self.held[m] += 1
        if m < self.P:
            self.held_on_prompt += 1
        self.held_tokens[m] += self.prompt[request]
        self.request_machine[request] = m

    # -- routing ------------------------------------------------------------------------------
    def route_arrival(self, request: int, now: float) -> None:
        """Route an arriving request to a prompt machine, whose policy learns of it."""
        self.lent_requests += 1
        self.lent_tokens += self.prompt[request]
        loads = self.prompt_loads
        P = self.P
        if self.held_on_prompt:  # prompt machines lent to the token pool (the mixed pool)
            held = self.held[:P]
            lent = held > 0
            loads = Loads(
                loads.requests + held + lent * self.lent_requests,
                loads.clients,
                loads.work,
                loads.prompt_tokens + self.held_tokens[:P] + lent * self.lent_tokens,
                loads.rates,
            )
        p = self.prompt_router.route(request, loads)
        if type(p) is not int or not 0 <= p < P:
            p = engine_index(self.prompt_router, request, p, P)
        self.add(p, request, PROMPT, now)
        self.known_of[request] = self.queues[p].known
        self.waiting_tokens[p] += self.prompt[request]
        self.queued_tokens[p] += self.prompt[request]
        self.queued_requests[p] += 1

    def destination(self, request: int, source: int) -> int:
        """The machine that decodes ``request``, prefilled on prompt machine ``source``: the
        token pool's router's choice; with the mixed pool, when every token machine is full,
        an idle prompt machine other than ``source``, lent to the token pool."""
        P, T, clients = self.P, self.M - self.P, self.clients
        t = self.token_router.route(request, self.token_loads)
        if type(t) is not int or not 0 <= t < T:
            t = engine_index(self.token_router, request, t, T)
        held = self.held
        if self.mixed and held[P + t] >= clients and int(held[P:].min()) >= clients:
            idle = [
                q
                for q in range(P)
                if q != source and self.in_stage[q] < 0 and not self.waiting_tokens[q] and held[q] < clients
            ]
            if idle:
                return min(idle, key=lambda q: (held[q], q))
        return P + t

    # -- stages -------------------------------------------------------------------------------
    def started_stage(self, m: int, batch: list[int], start: float, end: float) -> None:
        """Machine ``m`` took a stage of ``batch`` from ``start`` to ``end``. A prompt
        machine's requests are each routed to the machine that will decode them, so that
        each transfer can start with the stage; a lent stage's requests decode where they
        are, with no transfer."""
        stage = len(self.stage_start)
        self.stage_machine.append(m)
        self.stage_start.append(start)
        self.stage_end.append(end)
        self.stage_requests.append(batch)
        self.in_stage[m] = stage
        request_stage = self.request_stage
        for request in batch:
            request_stage[request] = stage
        if m < self.P:
            self.waiting_tokens[m] -= sum(map(self.prompt.__getitem__, batch))
            for request in batch:
                target = self.destination(request, m)
                self.expect(target, request)
                if self.need is not None:  # the transfer waits for the target's memory
                    if not self.waiting_transfers[target] and self.free_blocks[target] >= self.need[request]:
                        self.free_blocks[target] -= self.need[request]
                        self.transfer_start[request] = start
                    else:
                        self.waiting_transfers[target].append(request)
        else:
            self.lending[m] = False
            for request in batch:
                self.transfer_end[request] = end
                if self.need is not None:  # its blocks here, from its stage on (see lend)
                    self.transfer_start[request] = start

    def ended_stage(self, m: int, now: float) -> None:
        """Machine ``m``'s stage ends at ``now``: a prompt machine's requests leave it, and
        their keys and values the rest of the way (each layer's leave once the stage has
        computed it, with the overlap: what remains is transfer_seconds', in the same
        operations)."""
        stage = self.in_stage[m]
        self.in_stage[m] = -1
        batch = self.stage_requests[stage]
        if m >= self.P:  # a lent stage: its requests are handed back to decode here, no transfer
            for request in batch:  # (expected here since the stage was lent)
                self.add(m, request, HANDED, now)
            return
        self.queued_tokens[m] -= sum(map(self.prompt.__getitem__, batch))
        self.queued_requests[m] -= len(batch)
        cluster = self.cluster
        overlap, layers = cluster.overlap, cluster.layers
        lag = (self.stage_end[stage] - self.stage_start[stage]) * (layers - 1) / layers if overlap else 0.0
        link, transfer_end, transfer_start = self.link, self.transfer_end, self.transfer_start
        begun = self.stage_start[stage]
        for request in batch:
            x = link[request]
            if self.need is None or transfer_start[request] == begun:  # with its stage
                at = (max(x / layers, x - lag) if overlap else x) + now
            elif transfer_start[request] == transfer_start[request]:  # room came during the stage
                at = now + x
            else:
                continue  # it waits for memory (start_waiting sends it)
            transfer_end[request] = at
            self.push(at, _TRANSFER_DONE, request)

    def lend(self, t: int, now: float) -> None:
        """An idle token machine takes a stage from the prompt queue holding the most tokens,
        when it holds more than one stage's worth (the mixed pool); with ``lend_busy_above``,
        a token machine that decodes does too, when every prompt machine holds more than that
        many prompt tokens queued or in its stage (its decoding pauses for the stage)."""
        if self.in_stage[t] >= 0 or self.lending[t]:
            return
        busy = self.held[t] > 0
        if busy:  # only past the backlog threshold, and with a client free
            above = self.lend_busy_above
            if above is None or not self.streams[t].free or min(self.queued_tokens.tolist()) <= above:
                return
        waiting = self.waiting_tokens
        most = max(waiting)
        if not most:
            return
        source = waiting.index(most)  # the first of those holding the most
        if not busy and most <= self.capacity[source]:
            return  # no more than one stage waits: the prompt pool keeps up
        need = self.need
        if need is not None and (
            self.waiting_transfers[t] or self.most_reserved(source, self.capacity[t]) > self.free_blocks[t]
        ):
            return  # its memory: transfers wait for it, or a stage might not fit
        batch = self.queues[source].lend(self.capacity[t], now)
        if not batch:
            return
        if need is not None:  # reserved now, counted from the stage's start
            self.free_blocks[t] -= sum(map(need.__getitem__, batch))
        tokens = sum(map(self.prompt.__getitem__, batch))
        self.waiting_tokens[source] -= tokens
        self.queued_tokens[source] -= tokens
        self.queued_requests[source] -= len(batch)
        self.lending[t] = True  # until the machine takes the stage
        for request in batch:
            self.add(t, request, LENT, now)
            self.expect(t, request)
        if self.streams[t].cuttable:  # else it takes the stage when its run ends
            self.resume(t, now)

    def most_reserved(self, source: int, capacity: int) -> int:
        """The most blocks a stage of at most ``capacity`` prompt tokens, of prompts waiting
        on prompt machine ``source``, could reserve under token memory: the fractional
        knapsack's bound (the prompts taken by blocks per token, the most first, the last
        one whole), whichever the policy gives."""
        need, prompt = self.need, self.prompt
        assert need is not None
        waiting = sorted(self.queues[source].waiting, key=lambda r: (-need[r] / prompt[r], r))
        room, most = capacity, 0
        for request in waiting:
            most += need[request]
            room -= prompt[request]
            if room <= 0:
                break
        return most

    # -- the clock ----------------------------------------------------------------------------
    def run(self) -> DisaggregatedSchedule:
        """Run the workload; return its schedule."""
        P, M = self.P, self.M
        streams, queues, events = self.streams, self.queues, self.events
        request_machine, resume = self.request_machine, self.resume
        arrival = self.workload.arrival.tolist()
        for request in self.order:
            self.push(arrival[request], _ARRIVE, request)
        while events:
            now, _, kind, who, version = heapq.heappop(events)
            if kind == _ARRIVE:
                self.route_arrival(who, now)
                if events and events[0][2] == _ARRIVE and events[0][0] <= now:
                    continue  # more arrive at this instant: they may share a stage
                # Every idle prompt machine with prompts waiting is asked for a stage (one
                # that decodes or expects to takes none).
                for p in range(P):
                    queue = queues[p]
                    if streams[p].cuttable and queue.waiting and not queue.load:
                        resume(p, now)
                if self.mixed:
                    for t in range(P, M):
                        self.lend(t, now)
            elif kind == _TRANSFER_DONE:
                m = request_machine[who]
                self.add(m, who, HANDED, now)
                if streams[m].cuttable:
                    resume(m, now)
            elif version == self.version[who]:  # a machine's wake-up, not overtaken
                resume(who, now)
        return self.schedule()

    def schedule(self) -> DisaggregatedSchedule:
        """What the run did; a ValueError when a policy left requests waiting with nothing
        left to happen."""
        for p in range(self.P):
            queue = self.queues[p]
            if queue.waiting:
                refuse_idle(self.policies[p], self.clients, len(queue.waiting))
        for m in range(self.M):
            self.streams[m].closed = True
            if self.results[m] is None:
                self.resume(m, math.inf)
            if self.results[m] is None:  # pragma: no cover - the loop must end once closed and idle
                raise RuntimeError(f"machine {m} did not end once every request had reached it")
        rows = [self._runs(m) for m in range(self.M)]
        runs = [np.concatenate([row[k] for row in rows]) for k in range(8)]
        # The runs in the order they ended, ties by machine.
        by_end = np.lexsort((runs[0], runs[7]))
        machine, start, iterations, first, step, active, context, end = (column[by_end] for column in runs)
        makespan = max(max(self.stage_end, default=0.0), float(end.max()) if end.size else 0.0)
        n = len(self.workload)
        client = np.full(n, -1, dtype=np.int64)
        decode_start = np.full(n, -1, dtype=np.int64)
        for request in range(n):
            m, local = self.request_machine[request], self.request_local[request]
            if local >= 0:
                client[request] = self.streams[m].client_of[local]
                decode_start[request] = self.streams[m].decode_start[local]
        return DisaggregatedSchedule(
            self.workload,
            self.cluster,
            np.asarray(self.stage_machine, dtype=np.int64),
            np.asarray(self.stage_start, dtype=np.float64),
            np.asarray(self.stage_end, dtype=np.float64),
            machine,
            start,
            iterations,
            first,
            step,
            active,
            context,
            np.asarray(self.request_stage, dtype=np.int64),
            np.asarray(self.request_machine, dtype=np.int64),
            client,
            np.asarray(self.transfer_end, dtype=np.float64),
            decode_start,
            np.where(decode_start >= 0, decode_start + self.workload.output_tokens, -1),
            makespan,
            self.info(),
            None if self.need is None else np.asarray(self.transfer_start, dtype=np.float64),
        )

    def _runs(self, m: int) -> list[np.ndarray]:
        """Machine ``m``'s decode runs: machine, start, iterations, first iteration's time,
        step, requests decoding and their context at the first iteration, end."""
        _, record = self.results[m]
        stream = self.streams[m]
        iterations = np.asarray(record.run_iterations, dtype=np.int64)
        first_iteration = np.cumsum(iterations) - iterations
        decode_start = np.asarray(stream.decode_start, dtype=np.int64)
        decode_end = np.where(decode_start >= 0, decode_start + np.asarray(stream.output, dtype=np.int64), -1)
        active, context = decoding_at(
            first_iteration, decode_start, decode_end, np.asarray(stream.prompt, dtype=np.int64)
        )
        return [
            np.full(iterations.size, m, dtype=np.int64),
            np.asarray(record.run_start, dtype=np.float64),
            iterations,
            np.asarray(record.run_time, dtype=np.float64),
            np.asarray(record.run_step, dtype=np.float64),
            active.astype(np.int64),
            context.astype(np.int64),
            np.asarray(record.run_end, dtype=np.float64),
        ]

    def info(self) -> dict[str, Any]:
        """The schedule's ``info``: the mode and the cluster's switches, the request policy
        (a tuple of names when the prompt machines' differ), whether one planned with the
        true output lengths, the routers, and the seed when a router drew from it."""
        names = self.names
        routers = (self.prompt_router, self.token_router)
        return {
            "mode": "disaggregated",
            "mixed": self.cluster.mixed,
            "overlap": self.cluster.overlap,
            "request_policy": names[0] if len(set(names)) == 1 else tuple(names),
            "oracle_lengths": any(oracle_lengths(policy) for policy in self.policies),
            "prompt_router": self.prompt_router.name,
            "token_router": self.token_router.name,
            "seed": self.seed if any(getattr(r, "seeded", False) for r in routers) else None,
        }


def simulate_disaggregated(
    workload: Workload,
    cluster: DisaggregatedCluster,
    request_policy: str | RequestPolicy | Sequence[str | RequestPolicy] = "fcfs",
    prompt_router: str | Router = PROMPT_ROUTER,
    token_router: str | Router = TOKEN_ROUTER,
    seed: Any = 0,
) -> DisaggregatedSchedule:
    """Simulate ``workload`` on a disaggregated ``cluster``; return its schedule.

    There is no iteration policy: a prompt machine only prefills and a token machine only
    decodes (continuous batching), so no machine chooses between a prefill and more decoding.

    Parameters
    ----------
    workload
        The requests, arriving at the cluster (true output lengths decide when each finishes).
    cluster
        The pools, their cost models, clients and link (:class:`DisaggregatedCluster`).
    request_policy
        How each prompt machine fills its stages from the requests waiting on it: a registered
        name (:func:`~llmsched.online.registry.request_policy_names`; each prompt machine gets
        its own policy of that name), a request-policy object (a cluster of one prompt
        machine), or a sequence of names or objects, one per prompt machine. ``"fcfs"``: first
        come first served. A policy planned ahead over every request (``planned_ahead``, e.g.
        static queues given up front) is refused: a prompt machine learns its requests as they
        are routed to it.
    prompt_router, token_router
        The router of each pool (a registered name of :mod:`llmsched.fleet.routers` or a router
        object, one for each pool): where an arriving request is prefilled (by default
        ``jsq-prompt-tokens``), and where a request starting its prefill stage is decoded (by
        default ``jsq-requests``). A router that weighs requests by their sizes is refused.
    seed
        Seeds a randomised router's draws (``random``, ``power-of-two``).

    Returns
    -------
    DisaggregatedSchedule
        Its ``info`` names the request policy, the routers, and whether a policy planned with
        the true output lengths (``oracle_lengths``).

    Raises
    ------
    TypeError, ValueError
        Before any work: an invalid workload or cluster (a prompt longer than a stage holds),
        an unknown policy or router, a policy planned ahead, a request policy that needs
        predictions the workload lacks, a weighing router, a closed-batch router on requests
        that arrive over time. During the run: a policy or router answer that breaks its
        contract, or a policy that leaves requests waiting with nothing left to happen.
    """
    if not isinstance(cluster, DisaggregatedCluster):
        raise TypeError(f"cluster must be a DisaggregatedCluster, got {type(cluster).__name__}")
    if not isinstance(workload, Workload):
        raise TypeError(f"workload must be a Workload, got {type(workload).__name__}")
    cluster.check(workload)
    policies, names = _prompt_policies(request_policy, cluster.prompt_machines)
    prompt = _pool_router("prompt_router", prompt_router, workload)
    token = _pool_router("token_router", token_router, workload)
    if prompt is token:
        raise ValueError("prompt_router and token_router are one object; each pool needs its own router")
    rng("seed", seed)
    return ClusterClock(workload, cluster, policies, names, prompt, token, seed).run()


def _prompt_policies(
    request_policy: str | RequestPolicy | Sequence[str | RequestPolicy], machines: int
) -> tuple[list[RequestPolicy], list[str]]:
    """One request policy per prompt machine and the name each goes by (the registered name it
    was made from, else its ``name``), or a TypeError / ValueError saying why not."""
    if isinstance(request_policy, str):
        policies = [make_request_policy(request_policy) for _ in range(machines)]
        given: Sequence[str | RequestPolicy] = [request_policy] * machines
    elif isinstance(request_policy, Sequence):
        if len(request_policy) != machines:
            raise ValueError(
                f"request_policy gives {len(request_policy)} policies for {machines} prompt machines; "
                "give one per prompt machine, or one name for all"
            )
        policies = [make_request_policy(policy) for policy in request_policy]
        given = request_policy
        if len({id(policy) for policy in policies}) < machines:
            raise ValueError(
                "request_policy gives one policy object to several prompt machines; each needs its own"
            )
    else:
        if machines > 1:
            raise ValueError(
                f"a request-policy object serves one prompt machine, and this cluster has {machines}: "
                "give a name (each prompt machine gets its own policy) or a sequence of one object a machine"
            )
        policies = [make_request_policy(request_policy)]
        given = policies
    for policy in policies:
        if planned_ahead(policy):
            raise ValueError(
                f"request policy {getattr(policy, 'name', type(policy).__name__)!r} was planned ahead over "
                "every request; a prompt machine learns its requests as they are routed to it: use a policy "
                "that plans as requests arrive (fcfs, shortest-first, static without queues, ...)"
            )
    names = [g if isinstance(g, str) else str(getattr(g, "name", type(g).__name__)) for g in given]
    return policies, names


def _pool_router(what: str, router: str | Router, workload: Workload) -> Router:
    """A fresh router for a name, or the router object, once it is seen to suit a pool."""
    chosen = as_router(router)
    if chosen.weighs:
        allowed = [name for name, kind in REGISTRY.items() if not getattr(kind, "weighs", False)]
        raise ValueError(
            f"{what} {chosen.name!r} weighs requests by their sizes; a disaggregated cluster's routers "
            f"see the pools' loads only: use one of {allowed}"
        )
    if chosen.closed_batch and float(workload.arrival.max()) != float(workload.arrival.min()):
        raise ValueError(
            f"{what} {chosen.name!r} plans a closed batch (every request arriving at one instant); "
            "these requests arrive over time"
        )
    return chosen
