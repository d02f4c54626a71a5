"""Event-driven simulation of the PD-competition engine.

The engine alternates prefill stages and decode stages (see DESIGN's system model). The
simulator moves from one decision point to the next: after a prefill stage, when a
request finishes, when a request arrives while a client is free, or when the iteration
policy's requested number of decode iterations has run. Between decision points the set
of decoding clients cannot change, so every iteration takes the same time and the whole
run is one arithmetic step: the simulator never loops over single iterations in Python.

Each request finishes at a known global decode iteration (the iteration counter at its
prefill plus its output length), so finishes come off a heap in O(log J).
"""

from __future__ import annotations

import heapq
import math
import numbers

import numpy as np

from llmsched._checks import positive_int
from llmsched.cost import CostModel
from llmsched.policies import (
    DECODE_UNTIL_EVENT,
    PREFILL_NOW,
    IterationPolicy,
    RequestPolicy,
    make_iteration_policy,
    make_request_policy,
)
from llmsched.schedule import DECODE, PREFILL, Schedule
from llmsched.workload import Workload

__all__ = ["EngineView", "check_instance", "simulate"]


class EngineView:
    """What an iteration policy may look at when the simulator asks it (read-only).

    Attributes
    ----------
    now
        Current time (seconds).
    clients
        Number of clients J.
    active
        Clients decoding a request now.
    free
        Clients without a request.
    ready
        Requests a prefill could start now (from the request policy).
    iteration_time
        Time of one decode iteration with the current active clients.
    iterations_to_finish
        Decode iterations until the next request finishes.
    stage_iterations
        Iterations the current decode stage has run so far.
    just_prefilled
        True right after a prefill stage (the next iteration is forced to decode).
    unstarted
        Requests not prefilled yet (arrived or not).
    """

    __slots__ = (
        "_sim",
        "active",
        "clients",
        "free",
        "iteration_time",
        "iterations_to_finish",
        "just_prefilled",
        "now",
        "ready",
        "stage_iterations",
        "unstarted",
    )

    def __init__(self, sim: _Simulation):
        self._sim = sim
        self.clients = sim.clients
        self.now = 0.0
        self.active = 0
        self.free = sim.clients
        self.ready = 0
        self.iteration_time = 0.0
        self.iterations_to_finish = 0
        self.stage_iterations = 0
        self.just_prefilled = False
        self.unstarted = len(sim.workload)

    @property
    def workload(self) -> Workload:
        return self._sim.workload

    @property
    def cost(self) -> CostModel:
        return self._sim.cost

    def decoding_requests(self) -> list[int]:
        """Requests decoding now (O(active): for policies that need more than the counts)."""
        return [entry[2] for entry in self._sim.heap]

    def decoded_tokens(self, request: int) -> int:
        """Tokens ``request`` has decoded so far (it must be decoding now)."""
        return self._sim.iteration - self._sim.decode_start[request]


def check_instance(workload: Workload, cost: CostModel, clients: int) -> None:
    """Raise ValueError (or TypeError) unless (workload, cost, clients) is a valid instance."""
    if not isinstance(workload, Workload):
        raise TypeError(f"workload must be a llmsched.Workload, got {type(workload).__name__}")
    if len(workload) == 0:
        raise ValueError("the workload has no requests")
    if not isinstance(cost, CostModel):
        raise TypeError(
            "cost must be a cost model with prefill_capacity, prefill_time(tokens) and "
            f"decode_iteration_time(active), got {type(cost).__name__}"
        )
    positive_int("clients", clients)
    capacity = cost.prefill_capacity
    longest = int(workload.prompt_tokens.argmax())
    if workload.prompt_tokens[longest] > capacity:
        raise ValueError(
            f"request {longest} has a prompt of {workload.prompt_tokens[longest]} tokens, more "
            f"than the prefill capacity of {capacity} tokens: no prefill stage can hold it"
        )
    # Times are absolute seconds in float64; far from 0 they cannot resolve an iteration.
    latest = float(workload.arrival.max())
    shortest = min(float(cost.decode_iteration_time(1)), float(cost.prefill_time(1)))
    if np.spacing(latest) * 1e6 > shortest:
        raise ValueError(
            f"arrival times up to {latest:.6g}s are too large to time stages of {shortest:.3g}s "
            "in double precision; subtract the first arrival so that times start near 0"
        )


class _Simulation:
    def __init__(
        self,
        workload: Workload,
        cost: CostModel,
        clients: int,
        request_policy: RequestPolicy,
        iteration_policy: IterationPolicy,
    ):
        self.workload = workload
        self.cost = cost
        self.clients = int(clients)
        self.rp = request_policy
        self.ip = iteration_policy
        n = len(workload)
        self.decode_start = np.full(n, -1, dtype=np.int64)
        self.heap: list[tuple[int, int, int]] = []  # (finish iteration, client, request)
        self.iteration = 0

    def run(self) -> Schedule:
        wl, cost, clients = self.workload, self.cost, self.clients
        rp, ip = self.rp, self.ip
        n = len(wl)
        prompt = wl.prompt_tokens.tolist()
        output = wl.output_tokens.tolist()
        capacity = int(cost.prefill_capacity)
        # Iteration time by active count; at most min(J, n) clients are ever active.
        tau = np.asarray(
            cost.decode_iteration_time(np.arange(min(clients, n) + 1)), dtype=np.float64
        ).tolist()

        order = np.argsort(wl.arrival, kind="stable").tolist()
        arrival = wl.arrival.tolist()
        next_arrival = 0  # index into order

        rp.start(wl, clients)
        ip.start(wl, cost, clients)
        view = EngineView(self)

        client_of = [-1] * n
        prefill_stage = [-1] * n
        decode_start = self.decode_start
        heap = self.heap

        kinds: list[int] = []
        starts: list[float] = []
        ends: list[float] = []
        firsts: list[int] = []
        iters: list[int] = []
        run_start: list[float] = []
        run_len: list[int] = []
        run_tau: list[float] = []

        t = 0.0
        g = 0  # global decode iteration counter
        free = clients
        finished = 0
        started = 0

        while finished < n:
            while next_arrival < n and _admits(t, arrival[order[next_arrival]]):
                rp.arrive(order[next_arrival])
                next_arrival += 1
            active = len(heap)
            ready = rp.ready() if free else 0
            just_prefilled = bool(kinds) and kinds[-1] == PREFILL
            decision = DECODE_UNTIL_EVENT
            if ready and active:
                view.now, view.active, view.free, view.ready = t, active, free, ready
                view.iteration_time = tau[active]
                view.iterations_to_finish = heap[0][0] - g
                view.stage_iterations = 0 if just_prefilled else iters[-1]
                view.just_prefilled = just_prefilled
                view.unstarted = n - started
                decision = _check_decision(ip.decide(view), ip)
            if ready and (not active or (decision == PREFILL_NOW and not just_prefilled)):
                pairs = rp.take(capacity)
                if not pairs:
                    raise RuntimeError(
                        f"request policy {type(rp).__name__} reported {ready} ready request(s) but took none"
                    )
                tokens = 0
                stage = len(kinds)
                for request, client in pairs:
                    tokens += prompt[request]
                    client_of[request] = client
                    prefill_stage[request] = stage
                    decode_start[request] = g
                    heapq.heappush(heap, (g + output[request], client, request))
                if tokens > capacity or len(pairs) > free:
                    raise RuntimeError(
                        f"request policy {type(rp).__name__} overfilled a prefill stage "
                        f"({tokens} tokens, {len(pairs)} requests for {free} free clients)"
                    )
                free -= len(pairs)
                started += len(pairs)
                kinds.append(PREFILL)
                starts.append(t)
                t += float(cost.prefill_time(tokens))
                ends.append(t)
                firsts.append(g)
                iters.append(0)
                continue

            if not active:
                # Nothing to decode and nothing to prefill: idle until the next arrival.
                if next_arrival >= n:
                    raise RuntimeError("no request can run, yet some are unfinished")
                t = max(t, arrival[order[next_arrival]])
                continue

            # Decode a run of iterations over which the active set cannot change.
            dt = tau[active]
            step = heap[0][0] - g
            if ready:
                step = min(step, decision if decision > 0 else 1)
            if free and next_arrival < n:
                # The fewest iterations after which the next arrival counts as arrived.
                due = arrival[order[next_arrival]]
                until = max(1, math.ceil((due - t) / dt))
                if until > 1 and _admits(t + dt * (until - 1), due):
                    until -= 1
                step = min(step, until)
            if just_prefilled:
                kinds.append(DECODE)
                starts.append(t)
                ends.append(t)
                firsts.append(g)
                iters.append(0)
            run_start.append(t)
            run_len.append(step)
            run_tau.append(dt)
            t = t + dt * step
            g += step
            ends[-1] = t
            iters[-1] += step
            self.iteration = g
            while heap and heap[0][0] == g:
                _, client, _ = heapq.heappop(heap)
                rp.release(client)
                free += 1
                finished += 1

        out = np.asarray(output, dtype=np.int64)
        return Schedule(
            workload=wl,
            cost=cost,
            clients=clients,
            stage_kind=np.asarray(kinds, dtype=np.int8),
            stage_start=np.asarray(starts),
            stage_end=np.asarray(ends),
            stage_first_iteration=np.asarray(firsts, dtype=np.int64),
            stage_iterations=np.asarray(iters, dtype=np.int64),
            run_start=np.asarray(run_start, dtype=np.float64),
            run_iterations=np.asarray(run_len, dtype=np.int64),
            run_iteration_time=np.asarray(run_tau, dtype=np.float64),
            request_client=np.asarray(client_of, dtype=np.int64),
            request_prefill_stage=np.asarray(prefill_stage, dtype=np.int64),
            request_decode_start=decode_start.copy(),
            request_decode_end=decode_start + out,
            makespan=t,
            info={
                "request_policy": getattr(rp, "name", type(rp).__name__),
                "iteration_policy": getattr(ip, "name", type(ip).__name__),
            },
        )


def _admits(t: float, due: float) -> bool:
    """Whether a request due at ``due`` has arrived at ``t``.

    Within a few ulps counts: ``t`` is a sum of iteration times that may fall a rounding
    error short of an arrival a decode run was sized to reach.
    """
    return due <= t + 8 * math.ulp(t)


def _check_decision(decision: object, policy: IterationPolicy) -> int:
    if isinstance(decision, bool) or not isinstance(decision, numbers.Integral):
        raise TypeError(
            f"iteration policy {type(policy).__name__}.decide returned {decision!r}; expected "
            "PREFILL_NOW (0) or a number of decode iterations n >= 1"
        )
    if decision < 0:
        raise ValueError(
            f"iteration policy {type(policy).__name__}.decide returned {decision}; expected "
            "PREFILL_NOW (0) or a number of decode iterations n >= 1"
        )
    return int(decision)


def simulate(
    workload: Workload,
    cost: CostModel,
    clients: int,
    request_policy: str | RequestPolicy = "fcfs",
    iteration_policy: str | IterationPolicy = "prefill-first",
) -> Schedule:
    """Run ``workload`` on ``clients`` clients under the two policies and return the schedule.

    Parameters
    ----------
    workload
        The requests (true output lengths decide when each finishes).
    cost
        Cost model of prefill stages and decode iterations.
    clients
        Number of clients J (batch slots).
    request_policy
        A name (``"fcfs"``, ``"static"``, or any registered one) or a request-policy object.
    iteration_policy
        A name (``"prefill-first"``, or any registered one) or an iteration-policy object.

    Returns
    -------
    Schedule
        Every stage and every request's placement; ``llmsched.validate`` accepts it.

    Raises
    ------
    ValueError
        On an invalid instance (no requests, fewer than one client, a prompt longer than the
        prefill capacity) or an unknown policy name, before any work.
    """
    check_instance(workload, cost, clients)
    rp = make_request_policy(request_policy)
    ip = make_iteration_policy(iteration_policy)
    return _Simulation(workload, cost, int(clients), rp, ip).run()
