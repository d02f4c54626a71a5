"""The disaggregated cluster (PD disaggregation, Splitwise) as engines on one clock: prompt
machines, token machines and the routers between them. The model (the cluster, its schedule,
its validator, its lower bound) is :mod:`llmsched.engines.disaggregation`.

* A :class:`PromptMachine` holds the requests routed to it in a request policy
  (:class:`~llmsched.policies.RequestPolicy`) and runs prefill stages back to back; the policy
  chooses the waiting requests each stage holds (``take(capacity)``), up to the machine's
  prefill capacity. ``fcfs`` (the default) takes them first come first served.
* A :class:`TokenMachine` decodes with continuous batching: a request whose keys and values
  have arrived joins at the next iteration boundary when a client is free, and waits in order
  otherwise; its runs of iterations over which nothing joins or finishes are jumped over in
  closed form. Every machine can decode (a prompt machine when the mixed pool lends it), so a
  prompt machine is a token machine with a queue.
* A :class:`ClusterClock` drives them from one event heap: arrivals, stage ends, keys and
  values arriving, and runs reaching their next event, in time order (ties in the order they
  were scheduled).

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
and every prompt token of the workload on top of its own, so that a router balancing load
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
from collections.abc import Sequence
from typing import Any

import numpy as np

from llmsched.core.checks import rng
from llmsched.core.cost import context_rate, is_context_aware
from llmsched.core.workload import Workload
from llmsched.engines.answers import check_pair, check_ready, refuse_capacity, refuse_idle, refuse_take
from llmsched.engines.disaggregation.cluster import DisaggregatedCluster
from llmsched.engines.disaggregation.schedule import DisaggregatedSchedule
from llmsched.engines.loop import admits, iteration_times
from llmsched.fleet.engine import Engine
from llmsched.fleet.routers import REGISTRY, Loads, Router, RouterSetup, as_router, engine_index
from llmsched.online.registry import make_request_policy
from llmsched.policies import KnownRequests, RequestPolicy, oracle_lengths, planned_ahead

__all__ = ["simulate_disaggregated"]

#: The routers by default: Splitwise's join-the-shortest-queue on each pool.
PROMPT_ROUTER = "jsq-prompt-tokens"
TOKEN_ROUTER = "jsq-requests"

# Events, in the heap as (time, sequence, kind, who, version).
_ARRIVE, _STAGE_DONE, _TRANSFER_DONE, _RUN_EVENT = 0, 1, 2, 3


class _Ledger:
    """What the run records per request and per run, and the routers' views of the pools,
    shared by the machines and the clock."""

    __slots__ = (
        "decode_end",
        "decode_start",
        "held",
        "held_tokens",
        "known_of",
        "output",
        "prompt",
        "queued_requests",
        "queued_tokens",
        "request_client",
        "request_machine",
        "runs",
        "transfer_end",
        "where",
    )

    def __init__(self, workload: Workload, prompt_machines: int, machines: int):
        n = len(workload)
        self.prompt: list[int] = workload.prompt_tokens.tolist()
        self.output: list[int] = workload.output_tokens.tolist()
        self.request_client = [-1] * n
        self.request_machine = [-1] * n
        self.transfer_end = [math.nan] * n
        self.decode_start = [-1] * n
        self.decode_end = [-1] * n
        self.runs: list[tuple[int, float, int, float, float, int, int]] = []
        # The prompt machine a request waits on (-1 before it arrives and once a stage takes
        # it), and the view of the policy that took it, told when it finishes.
        self.where = [-1] * n
        self.known_of: list[KnownRequests | None] = [None] * n
        # The routers' views, written as the machines change: the requests each machine
        # decodes, waits to decode or expects, and their prompt tokens; the requests each
        # prompt machine holds queued or in its stage, and their prompt tokens.
        self.held = np.zeros(machines, dtype=np.int64)
        self.held_tokens = np.zeros(machines, dtype=np.int64)
        self.queued_requests = np.zeros(prompt_machines, dtype=np.int64)
        self.queued_tokens = np.zeros(prompt_machines, dtype=np.int64)


class TokenMachine:
    """A machine as the token pool uses it: continuous batching over its clients.

    A request routed here is *on its way* (``incoming``) until its keys and values arrive,
    then *waits* until a client is free at an iteration boundary, then decodes in every
    iteration until its last token. Iterations are numbered ``0, 1, ...`` over the machine's
    runs (``g``); a *run* is iterations over which nothing joins or finishes, timed in closed
    form (each iteration ``per_context * active`` longer than the one before under a
    context-aware cost model). The mixed pool may lend the machine a prefill stage when it
    holds nothing (``prefilling``); it then decodes that stage's requests itself.
    """

    __slots__ = (
        "clients",
        "context_offset",
        "fresh",
        "g",
        "heap",
        "incoming",
        "index",
        "ledger",
        "load",
        "load_tokens",
        "next_k",
        "per_context",
        "prefilling",
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

    def __init__(self, index: int, clients: int, tau: list[float], per_context: float, ledger: _Ledger):
        self.index = index
        self.clients = clients
        self.tau = tau
        self.per_context = per_context
        self.ledger = ledger
        self.prefilling = False  # running a prefill stage (its own, or one lent to it)
        # Free clients, built as requests take them (nothing is sized by idle clients): a stack
        # of released clients on top of the clients never used, fresh, fresh + 1, ... (the
        # lowest first), as if every client were stacked up front.
        self.released: list[int] = []
        self.fresh = 0
        self.running: dict[int, int] = {}  # client -> request
        self.heap: list[tuple[int, int, int]] = []  # (decode end, client, request)
        self.waiting: deque[int] = deque()  # arrived keys and values, no client yet
        self.incoming = 0  # requests routed here whose keys and values are on their way
        self.load = 0  # requests decoding, waiting or on their way
        self.load_tokens = 0  # their prompt tokens
        self.g = 0
        self.context_offset = 0  # context at iteration g: context_offset + active * g
        self.run_start = math.nan  # the current run's start (NaN when none runs)
        self.run_first = 0.0
        self.run_active = 0
        self.run_context = 0
        self.version = 0  # moves on whenever the run's scheduled event changes
        self.next_k = 0  # iterations of the current run up to its scheduled event

    @property
    def free(self) -> int:
        """Clients free now."""
        return len(self.released) + self.clients - self.fresh

    def expect(self, request: int) -> None:
        """``request`` is routed here: its keys and values are on their way (or in a stage
        lent to this machine)."""
        ledger = self.ledger
        index = self.index
        self.incoming += 1
        self.load += 1
        self.load_tokens += ledger.prompt[request]
        ledger.held[index] = self.load
        ledger.held_tokens[index] = self.load_tokens
        ledger.request_machine[request] = index

    def elapsed(self, k: int) -> float:
        """Seconds of the current run's first ``k`` iterations."""
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

    def receive(self, request: int, now: float) -> float:
        """The keys and values of ``request`` arrive at ``now``: it waits for a client. Returns
        when the run's next event is, if that changed, else -1."""
        self.incoming -= 1
        self.waiting.append(request)
        if self.run_start != self.run_start:  # NaN: no run
            if not self.prefilling:
                self.admit()
                return self.open_run(now)
        elif len(self.released) + self.clients - self.fresh:
            # A client is free: it joins at the first iteration end at or after now.
            k = min(self.iterations_until(now), self.heap[0][0] - self.g)
            if k < self.next_k:
                self.version += 1
                self.next_k = k
                return self.run_start + self.elapsed(k)
        return -1.0

    def end_lent_stage(self, batch: list[int], now: float) -> float:
        """The stage lent to this machine ends at ``now``: its requests wait here, with no
        transfer. Returns when the run it starts has its next event (-1 when none)."""
        transfer_end, waiting = self.ledger.transfer_end, self.waiting
        for request in batch:
            transfer_end[request] = now
            waiting.append(request)
        self.incoming -= len(batch)
        self.admit()
        return self.open_run(now)

    def admit(self) -> None:
        """Waiting requests take free clients, in order: the last released first, else the
        lowest never used."""
        waiting = self.waiting
        free = len(self.released) + self.clients - self.fresh
        if not (waiting and free):
            return
        ledger = self.ledger
        prompt, output = ledger.prompt, ledger.output
        request_client, decode_start, decode_end = (
            ledger.request_client,
            ledger.decode_start,
            ledger.decode_end,
        )
        released, running, heap, g = self.released, self.running, self.heap, self.g
        while waiting and free:
            request = waiting.popleft()
            if released:
                client = released.pop()
            else:
                client = self.fresh
                self.fresh += 1
            free -= 1
            running[client] = request
            request_client[request] = client
            decode_start[request] = g
            decode_end[request] = g + output[request]
            self.context_offset += prompt[request] - g
            heapq.heappush(heap, (g + output[request], client, request))

    def finish(self) -> None:
        """The requests whose last token came at the end of iteration ``g - 1`` leave; the
        policy that prefilled each learns its output length."""
        heap, g = self.heap, self.g
        if not heap or heap[0][0] != g:
            return
        ledger = self.ledger
        prompt, output, decode_start, known_of = (
            ledger.prompt,
            ledger.output,
            ledger.decode_start,
            ledger.known_of,
        )
        while heap and heap[0][0] == g:
            _, client, request = heapq.heappop(heap)
            del self.running[client]
            self.released.append(client)
            self.context_offset -= prompt[request] - decode_start[request]
            self.load -= 1
            self.load_tokens -= prompt[request]
            known = known_of[request]
            if known is not None:
                known.finish(output[request])
        ledger.held[self.index] = self.load
        ledger.held_tokens[self.index] = self.load_tokens

    def close_run(self) -> float:
        """Record the current run up to its scheduled event; return when it ends."""
        k = self.next_k
        end = self.run_start + self.elapsed(k)
        growth = self.per_context * self.run_active
        self.ledger.runs.append(
            (self.index, self.run_start, k, self.run_first, growth, self.run_active, self.run_context)
        )
        self.g += k
        return end

    def open_run(self, now: float) -> float:
        """Start a run at ``now`` with the running requests; return when its next event is
        (the next finish), or -1 when nothing runs."""
        self.version += 1
        if not self.running:
            self.run_start = math.nan
            return -1.0
        active = len(self.running)
        self.run_start = now
        self.run_active = active
        self.run_context = self.context_offset + active * self.g
        self.run_first = self.tau[active] + self.per_context * self.run_context
        self.next_k = self.heap[0][0] - self.g
        return now + self.elapsed(self.next_k)


class PromptMachine(TokenMachine):
    """A prompt machine: the requests routed to it wait in its request policy, and it runs
    prefill stages back to back, each filled by its policy.

    It starts a stage when it is not prefilling and decodes nothing (lent to the token pool,
    it takes no stage until its decoding is done). ``queued`` counts the prompt tokens waiting,
    ``in_stage`` those of the stage it runs and ``holding`` the requests of both; a token
    machine lent to the prompt pool takes a stage from here too (:meth:`take`).
    """

    __slots__ = (
        "capacity",
        "holding",
        "in_stage",
        "known",
        "policy",
        "policy_clients",
        "queued",
        "stage_size",
    )

    def __init__(
        self,
        index: int,
        clients: int,
        tau: list[float],
        per_context: float,
        ledger: _Ledger,
        capacity: int,
        policy: RequestPolicy,
        known: KnownRequests,
    ):
        super().__init__(index, clients, tau, per_context, ledger)
        self.capacity = capacity
        self.policy = policy
        self.known = known
        self.policy_clients = clients
        self.queued = 0  # prompt tokens waiting, not yet in a stage
        self.in_stage = 0  # prompt tokens in the stage it runs
        self.stage_size = 0  # requests in the stage it runs
        self.holding = 0  # requests waiting or in the stage it runs

    def _show(self) -> None:
        """Write what it holds into the prompt pool's router view."""
        ledger = self.ledger
        ledger.queued_tokens[self.index] = self.queued + self.in_stage
        ledger.queued_requests[self.index] = self.holding

    def arrive(self, request: int, predicted: int, arrival: float) -> None:
        """``request`` is routed here as it arrives: the policy learns of it."""
        ledger = self.ledger
        prompt = ledger.prompt[request]
        self.known.reveal(request, prompt, predicted, ledger.output[request], arrival)
        ledger.where[request] = self.index
        ledger.known_of[request] = self.known
        self.policy.arrive(request)
        self.queued += prompt
        self.holding += 1
        self._show()

    def start_stage(self) -> list[int]:
        """Its own next stage: the waiting requests its policy gives it (none when it runs
        a stage already, decodes, or nothing waits)."""
        if self.prefilling or self.load or not self.queued:
            return []
        batch = self.take(self.capacity, True)
        if batch:
            self.in_stage = sum(map(self.ledger.prompt.__getitem__, batch))
            self.queued -= self.in_stage
            self.stage_size = len(batch)
        return batch

    def end_stage(self) -> None:
        """Its stage ends: the requests leave for their token machines."""
        self.holding -= self.stage_size
        self.in_stage = self.stage_size = 0
        self._show()

    def lend_stage(self, capacity: int) -> list[int]:
        """A stage of at most ``capacity`` tokens for a token machine lent to the prompt pool:
        one take of its policy (at most ``policy_clients`` requests, the most the lent machine
        decodes at once)."""
        batch = self.take(capacity, False)
        if batch:
            self.queued -= sum(map(self.ledger.prompt.__getitem__, batch))
            self.holding -= len(batch)
            self._show()
        return batch

    def take(self, capacity: int, whole: bool) -> list[int]:
        """The waiting requests the policy gives a stage of ``capacity`` tokens: one take, or,
        ``whole``, takes until the policy has nothing more that fits. Every answer is checked
        as the decision loop checks it (:mod:`llmsched.engines.answers`), with the same
        messages."""
        policy, ledger = self.policy, self.ledger
        prompt, where, index, clients = ledger.prompt, ledger.where, self.index, self.policy_clients
        batch: list[int] = []
        room = capacity
        while room > 0:  # a prompt holds a token at least
            ready = policy.ready()
            if type(ready) is not int or ready < 0:
                ready = check_ready(ready, policy)
            if not ready:
                break
            asked = room
            pairs = policy.take(asked)
            if type(pairs) is not list or not pairs:
                if type(pairs) is list and batch:
                    break  # nothing more fits in the room left
                refuse_take(pairs, policy, asked, ready)
            for pair in pairs:
                if type(pair) is tuple and len(pair) == 2 and type(pair[0]) is int and type(pair[1]) is int:
                    request, client = pair
                else:
                    request, client = check_pair(pair, policy, asked)
                if not (0 <= request < len(where) and where[request] == index and 0 <= client < clients):
                    raise ValueError(
                        f"request policy {type(policy).__name__}.take({asked}) is invalid: "
                        + _pair_problem(request, client, len(where), clients, where, index, batch)
                    )
                where[request] = -1
                room -= prompt[request]
                batch.append(request)
            if room < 0:
                refuse_capacity(asked - room, asked, policy)
            if len(pairs) > 1 and len({client for _, client in pairs}) < len(pairs):
                raise ValueError(
                    f"request policy {type(policy).__name__}.take({asked}) is invalid: a client appears twice"
                )
            release = policy.release
            for _, client in pairs:
                release(client)  # its request is in the stage: the place in the hand-over is free
            if not whole:
                break
        return batch


def _pair_problem(
    request: int, client: int, n: int, clients: int, where: list[int], machine: int, batch: list[int]
) -> str:
    """What is wrong with a pair that failed the quick check (worded as the decision loop's)."""
    if not 0 <= request < n:
        return f"request {request} is not in the workload (0..{n - 1})"
    if request in batch:
        return f"request {request} appears twice"
    if where[request] != machine:
        return (
            f"request {request} does not wait on prompt machine {machine} "
            "(not arrived, taken or routed elsewhere)"
        )
    return f"client {client} does not exist (clients are 0..{clients - 1})"


class ClusterClock:
    """The cluster's machines on one event clock, with a router in front of each pool.

    Built from checked arguments (:func:`simulate_disaggregated` checks them): it starts the
    policies and the routers; :meth:`run` runs the workload once and returns its schedule.
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
        self.P, self.M, self.mixed = P, P + T, cluster.mixed
        clients = cluster.token_clients
        self.ledger = ledger = _Ledger(workload, P, P + T)
        costs = (cluster.prompt_cost, cluster.token_cost)
        tau = [iteration_times(cost, min(clients, n)) for cost in costs]
        rates = [context_rate(cost) for cost in costs]
        predicted = workload.predicted_output
        self.predicted: list[int] = predicted.tolist() if predicted is not None else [0] * n
        self.prompt_machines: list[PromptMachine] = []
        for p, policy in enumerate(policies):
            known = KnownRequests(n, predicted is not None, oracle_lengths(policy), False, workload.name)
            policy.start(known, clients)
            capacity = int(cluster.prompt_cost.prefill_capacity)
            self.prompt_machines.append(
                PromptMachine(p, clients, tau[0], rates[0], ledger, capacity, policy, known)
            )
        self.machines: list[TokenMachine] = [*self.prompt_machines]
        self.machines += [TokenMachine(P + t, clients, tau[1], rates[1], ledger) for t in range(T)]
        self.squares_priced = [is_context_aware(cluster.cost_of(m)) for m in range(P + T)]

        order = np.argsort(workload.arrival, kind="stable")
        self.order: list[int] = order.tolist()
        views = []
        for router, engines, cost, held, tokens in (
            (prompt_router, P, cluster.prompt_cost, ledger.queued_requests, ledger.queued_tokens),
            (token_router, T, cluster.token_cost, ledger.held[P:], ledger.held_tokens[P:]),
        ):
            engine = Engine(cost, clients)
            router.start(
                RouterSetup(
                    engines,
                    n,
                    workload.prompt_tokens,
                    np.zeros(0, dtype=np.int64),
                    order,
                    seed,
                    np.full(engines, engine.tokens_per_s),
                )
            )
            views.append(
                Loads(
                    held,
                    np.full(engines, clients, dtype=np.int64),
                    np.zeros(engines),
                    tokens,
                    np.tile(engine.seconds_per_token, (engines, 1)),
                )
            )
        self.prompt_loads, self.token_loads = views
        # A prompt machine lent to the token pool shows the prompt pool's router the whole
        # workload on top of what it holds: more than any machine not lent can hold.
        self.lent_requests = n + 1
        self.lent_tokens = int(workload.total_prompt_tokens) + 1

        self.stage_machine: list[int] = []
        self.stage_start: list[float] = []
        self.stage_end: list[float] = []
        self.stage_requests: list[list[int]] = []
        self.request_stage = [-1] * n
        self.events: list[tuple[float, int, int, int, int]] = []
        self.sequence = itertools.count()  # ties in the order events were scheduled

    def push(self, time: float, kind: int, who: int, version: int = 0) -> None:
        heapq.heappush(self.events, (time, next(self.sequence), kind, who, version))

    # -- routing ------------------------------------------------------------------------------
    def route_arrival(self, request: int, now: float) -> None:
        """Route an arriving request to a prompt machine, whose policy learns of it."""
        loads = self.prompt_loads
        if self.mixed and any(machine.load for machine in self.prompt_machines):
            ledger, P = self.ledger, self.P
            held = ledger.held[:P]
            lent = held > 0
            loads = Loads(
                loads.requests + held + lent * self.lent_requests,
                loads.clients,
                loads.work,
                loads.prompt_tokens + ledger.held_tokens[:P] + lent * self.lent_tokens,
                loads.rates,
            )
        p = self.prompt_router.route(request, loads)
        if type(p) is not int or not 0 <= p < self.P:
            p = engine_index(self.prompt_router, request, p, self.P)
        self.prompt_machines[p].arrive(request, self.predicted[request], now)

    def destination(self, request: int, source: int) -> TokenMachine:
        """The machine that decodes ``request``, prefilled on prompt machine ``source``: the
        token pool's router's choice; with the mixed pool, when every token machine is full,
        an idle prompt machine other than ``source``, lent to the token pool."""
        P, T = self.P, self.M - self.P
        t = self.token_router.route(request, self.token_loads)
        if type(t) is not int or not 0 <= t < T:
            t = engine_index(self.token_router, request, t, T)
        chosen = self.machines[P + t]
        clients = chosen.clients
        if self.mixed and chosen.load >= clients and int(self.ledger.held[P:].min()) >= clients:
            idle = [
                q
                for q in self.prompt_machines
                if q.index != source and not q.prefilling and not q.queued and q.load < clients
            ]
            if idle:
                return min(idle, key=lambda q: (q.load, q.index))
        return chosen

    # -- stages -------------------------------------------------------------------------------
    def record_stage(self, m: int, batch: list[int], now: float) -> None:
        """Machine ``m`` prefills ``batch`` from ``now``; its end is scheduled."""
        self.machines[m].prefilling = True
        cost: Any = self.cluster.cost_of(m)
        prompt = self.ledger.prompt
        tokens = sum(map(prompt.__getitem__, batch))
        if self.squares_priced[m]:
            seconds = float(cost.prefill_time(tokens, sum(prompt[r] ** 2 for r in batch)))
        else:
            seconds = float(cost.prefill_time(tokens))
        stage = len(self.stage_start)
        self.stage_machine.append(m)
        self.stage_start.append(now)
        self.stage_end.append(now + seconds)
        self.stage_requests.append(batch)
        request_stage = self.request_stage
        for request in batch:
            request_stage[request] = stage
        self.push(now + seconds, _STAGE_DONE, stage)

    def start_prompt(self, p: int, now: float) -> None:
        """Prompt machine ``p`` starts its next stage, if it can; each of the stage's requests
        is routed to the machine that will decode it, so its transfer can start with the
        stage."""
        batch = self.prompt_machines[p].start_stage()
        if batch:
            self.record_stage(p, batch, now)
            for request in batch:
                self.destination(request, p).expect(request)

    def lend(self, t: int, now: float) -> None:
        """An idle token machine takes a stage from the prompt queue holding the most tokens,
        when it holds more than one stage's worth (the mixed pool)."""
        machine = self.machines[t]
        if machine.prefilling or machine.load:
            return
        source = max(self.prompt_machines, key=lambda q: (q.queued, -q.index))
        if source.queued <= source.capacity:
            return  # no more than one stage waits: the prompt pool keeps up
        batch = source.lend_stage(int(self.cluster.cost_of(t).prefill_capacity))
        if batch:
            self.record_stage(t, batch, now)
            for request in batch:
                machine.expect(request)

    def after_idle(self, m: int, now: float) -> None:
        """A machine whose decoding ran dry goes back to its own pool's work."""
        if self.machines[m].load:
            return
        if m < self.P:
            self.start_prompt(m, now)
        elif self.mixed:
            self.lend(m, now)

    # -- the clock ----------------------------------------------------------------------------
    def run(self) -> DisaggregatedSchedule:
        """Run the workload; return its schedule."""
        workload, cluster, ledger = self.workload, self.cluster, self.ledger
        P, M, mixed = self.P, self.M, self.mixed
        machines, prompt_machines = self.machines, self.prompt_machines
        transfer_end, request_machine = ledger.transfer_end, ledger.request_machine
        events, push, heappop = self.events, self.push, heapq.heappop
        stage_machine, stage_start, stage_end = self.stage_machine, self.stage_start, self.stage_end
        route_arrival, start_prompt = self.route_arrival, self.start_prompt
        # Each prompt's whole transfer x, by the cluster's formula (with no stage to overlap,
        # all of x remains); a stage's overlap is taken off as its requests leave.
        link: list[float] = np.asarray(cluster.transfer(workload.prompt_tokens, 0.0)).tolist()
        overlap, layers = cluster.overlap, cluster.layers
        arrival = workload.arrival.tolist()
        for request in self.order:
            push(arrival[request], _ARRIVE, request)

        while events:
            now, _, kind, who, version = heappop(events)
            if kind == _ARRIVE:
                route_arrival(who, now)
                if events and events[0][2] == _ARRIVE and events[0][0] <= now:
                    continue  # more arrive at this instant: they may share a stage
                for p in range(P):
                    start_prompt(p, now)
                if mixed:
                    for t in range(P, M):
                        self.lend(t, now)
            elif kind == _STAGE_DONE:
                m = stage_machine[who]
                batch = self.stage_requests[who]
                machine = machines[m]
                machine.prefilling = False
                if m < P:
                    prompt_machines[m].end_stage()
                    # Each layer's keys and values leave once the stage has computed it
                    # (overlap): what remains after the stage is transfer_seconds', in the
                    # same operations.
                    lag = (stage_end[who] - stage_start[who]) * (layers - 1) / layers if overlap else 0.0
                    for request in batch:
                        x = link[request]
                        at = (max(x / layers, x - lag) if overlap else x) + now
                        transfer_end[request] = at
                        push(at, _TRANSFER_DONE, request)
                    start_prompt(m, now)
                else:
                    at = machine.end_lent_stage(batch, now)
                    if at >= 0.0:
                        push(at, _RUN_EVENT, m, machine.version)
            elif kind == _TRANSFER_DONE:
                m = request_machine[who]
                machine = machines[m]
                at = machine.receive(who, now)
                if at >= 0.0:
                    push(at, _RUN_EVENT, m, machine.version)
            else:  # a machine's run reaches its event
                machine = machines[who]
                if version != machine.version:
                    continue
                end = machine.close_run()
                machine.finish()
                machine.admit()
                at = machine.open_run(end)
                if at >= 0.0:
                    push(at, _RUN_EVENT, who, machine.version)
                if not machine.running:
                    self.after_idle(who, end)
        return self.schedule()

    def schedule(self) -> DisaggregatedSchedule:
        """What the run did; a ValueError when a policy left requests waiting with nothing
        left to happen."""
        for machine in self.prompt_machines:
            if machine.queued:
                waiting = sum(1 for p in self.ledger.where if p == machine.index)
                refuse_idle(machine.policy, machine.policy_clients, waiting)
        ledger = self.ledger
        rows = ledger.runs
        makespan = max(
            max(self.stage_end, default=0.0), max((r[1] + _run_span(r) for r in rows), default=0.0)
        )
        runs = np.array(rows, dtype=object) if rows else np.zeros((0, 7), dtype=object)
        return DisaggregatedSchedule(
            self.workload,
            self.cluster,
            np.asarray(self.stage_machine, dtype=np.int64),
            np.asarray(self.stage_start, dtype=np.float64),
            np.asarray(self.stage_end, dtype=np.float64),
            runs[:, 0].astype(np.int64),
            runs[:, 1].astype(np.float64),
            runs[:, 2].astype(np.int64),
            runs[:, 3].astype(np.float64),
            runs[:, 4].astype(np.float64),
            runs[:, 5].astype(np.int64),
            runs[:, 6].astype(np.int64),
            np.asarray(self.request_stage, dtype=np.int64),
            np.asarray(ledger.request_machine, dtype=np.int64),
            np.asarray(ledger.request_client, dtype=np.int64),
            np.asarray(ledger.transfer_end, dtype=np.float64),
            np.asarray(ledger.decode_start, dtype=np.int64),
            np.asarray(ledger.decode_end, dtype=np.int64),
            makespan,
            self.info(),
        )

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
            "oracle_lengths": any(oracle_lengths(m.policy) for m in self.prompt_machines),
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


def _run_span(row: tuple[int, float, int, float, float, int, int]) -> float:
    _, _, k, first, step, _, _ = row
    return first * k + step * (k * (k - 1) / 2)
