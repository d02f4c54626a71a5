"""Run schedules and policies on the engine, and compare how requests are inserted.

* :func:`execute_schedule` runs a :class:`~llmsched.Schedule` stage by stage (its prefill
  stages, its decode iterations, on its clients) and returns the measured schedule beside
  the predicted one;
* :func:`run_policies` drives a request policy and an iteration policy live, the same
  objects :func:`llmsched.simulate` asks, with the engine's real state and clock;
* :func:`run_insertion` serves requests on J slots in one of three ways, as Mico and Baton
  compare them: ``static`` batches run to completion (prompts padded to the longest; a
  finished request keeps computing until its batch ends), ``padded`` continuous batching
  (a new prompt joins the batch in one step padded against it), and ``apart`` (the prompt
  is prefilled on its own and its keys and values embedded in the free slot).

Every stage is timed on the device clock (synchronized). Measured schedules pass every rule
of :func:`llmsched.validate` but ``stage_time``, which compares times with the cost model.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import numpy as np

from llmsched.cost import CostModel
from llmsched.policies import (
    DECODE_UNTIL_EVENT,
    PREFILL_NOW,
    IterationPolicy,
    RequestPolicy,
    make_iteration_policy,
    make_request_policy,
)
from llmsched.runtime.engine import Engine
from llmsched.schedule import DECODE, PREFILL, Schedule
from llmsched.simulate import _check_decision, check_instance, simulate
from llmsched.workload import Workload

__all__ = [
    "Execution",
    "InsertionResult",
    "execute_schedule",
    "make_prompts",
    "run_alone",
    "run_insertion",
    "run_policies",
    "static_cache_need",
]


def make_prompts(workload: Workload, vocab_size: int, seed: int = 0) -> list[list[int]]:
    """Token ids for each request's prompt (its length from the workload), seeded."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab_size, size=int(n)).tolist() for n in workload.prompt_tokens]


def _check_fit(engine: Engine, workload: Workload, prompts: Sequence[Sequence[int]]) -> None:
    if not isinstance(engine, Engine):
        raise TypeError(f"engine must be a llmsched.runtime.Engine, got {type(engine).__name__}")
    if len(prompts) != len(workload):
        raise ValueError(f"{len(prompts)} prompts for {len(workload)} requests")
    longest = int(np.max(workload.prompt_tokens + workload.output_tokens))
    if longest > engine.max_len:
        raise ValueError(
            f"a request needs {longest} tokens of cache (prompt + output), more than the engine's "
            f"max_len={engine.max_len}"
        )
    for i, prompt in enumerate(prompts):
        if len(prompt) != int(workload.prompt_tokens[i]):
            raise ValueError(
                f"prompt {i} has {len(prompt)} tokens; the workload says {workload.prompt_tokens[i]}"
            )


def run_alone(engine: Engine, workload: Workload, prompts: Sequence[Sequence[int]]) -> list[list[int]]:
    """Each request's greedy tokens when it runs by itself (slot 0, nothing else running)."""
    _check_fit(engine, workload, prompts)
    out = []
    for i, prompt in enumerate(prompts):
        engine.reset()
        engine.prefill([prompt], [0])
        out.append([engine.decode([0])[0] for _ in range(int(workload.output_tokens[i]))])
    engine.reset()
    return out


@dataclass
class Execution:
    """A run on the engine: the measured schedule, the tokens, and what was predicted."""

    measured: Schedule
    tokens: list[list[int]]
    predicted: Schedule | None = None
    wall_s: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "measured_makespan_s": self.measured.makespan,
            "measured_tokens_per_s": self.measured.tokens_per_s,
            "measured_utilization": self.measured.utilization,
        }
        if self.predicted is not None:
            out["predicted_makespan_s"] = self.predicted.makespan
            out["makespan_error"] = self.measured.makespan / self.predicted.makespan - 1.0
        return out


class _Recorder:
    """Stage and iteration times, and the per-request placement, of a live run."""

    def __init__(self, engine: Engine, workload: Workload, cost: CostModel, clients: int):
        self.engine, self.workload, self.cost, self.clients = engine, workload, cost, clients
        n = len(workload)
        self.kind: list[int] = []
        self.start: list[float] = []
        self.end: list[float] = []
        self.first: list[int] = []
        self.iters: list[int] = []
        self.iteration_end: list[float] = []
        self.client = [-1] * n
        self.prefill_stage = [-1] * n
        self.decode_start = [-1] * n
        self.decode_end = [-1] * n
        self.tokens: list[list[int]] = [[] for _ in range(n)]
        self.t0 = engine.clock()

    def now(self) -> float:
        return self.engine.clock() - self.t0

    def prefill(self, pairs: Sequence[tuple[int, int]], prompts: Sequence[Sequence[int]]) -> None:
        start = self.now()
        self.engine.prefill([prompts[r] for r, _ in pairs], [c for _, c in pairs])
        end = self.now()
        stage = len(self.kind)
        g = len(self.iteration_end)
        for request, client in pairs:
            self.client[request] = client
            self.prefill_stage[request] = stage
            self.decode_start[request] = g
        self.kind.append(PREFILL)
        self.start.append(start)
        self.end.append(end)
        self.first.append(g)
        self.iters.append(0)

    def decode(self, running: dict[int, int]) -> None:
        """One iteration of the requests in ``running`` (client -> request)."""
        if not self.kind or self.kind[-1] != DECODE:
            start = self.now()
            self.kind.append(DECODE)
            self.start.append(start)
            self.end.append(start)
            self.first.append(len(self.iteration_end))
            self.iters.append(0)
        clients = list(running)
        fed = self.engine.decode(clients)
        end = self.now()
        for client, token in zip(clients, fed, strict=True):
            self.tokens[running[client]].append(token)
        self.iteration_end.append(end)
        self.end[-1] = end
        self.iters[-1] += 1

    def schedule(self, info: dict[str, Any]) -> Schedule:
        n = len(self.workload)
        decode_end = [
            self.decode_start[i] + len(self.tokens[i]) if self.decode_start[i] >= 0 else -1 for i in range(n)
        ]
        return Schedule.from_iteration_end(
            self.workload,
            self.cost,
            self.clients,
            np.asarray(self.kind, dtype=np.int8),
            np.asarray(self.start),
            np.asarray(self.end),
            np.asarray(self.first),
            np.asarray(self.iters),
            np.asarray(self.iteration_end),
            np.asarray(self.client),
            np.asarray(self.prefill_stage),
            np.asarray(self.decode_start),
            np.asarray(decode_end),
            self.end[-1] if self.end else 0.0,
            measured=True,
            info=info,
        )


def execute_schedule(
    schedule: Schedule, engine: Engine, prompts: Sequence[Sequence[int]] | None = None, seed: int = 0
) -> Execution:
    """Run ``schedule``'s stages on ``engine`` in order, on its clients; time every stage.

    ``prompts`` are the token ids (default: :func:`make_prompts` with ``seed``). The measured
    schedule has the same stages, clients and iterations, with the clock's times.
    """
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule must be a llmsched.Schedule, got {type(schedule).__name__}")
    workload = schedule.workload
    if schedule.clients > engine.slots:
        raise ValueError(f"the schedule uses {schedule.clients} clients; the engine has {engine.slots} slots")
    if prompts is None:
        prompts = make_prompts(workload, engine.config.vocab_size, seed)
    _check_fit(engine, workload, prompts)
    engine.reset()
    start_wall = time.perf_counter()
    rec = _Recorder(engine, workload, schedule.cost, schedule.clients)
    by_stage: dict[int, list[int]] = {}
    for request, stage in enumerate(schedule.request_prefill_stage.tolist()):
        by_stage.setdefault(stage, []).append(request)
    starts = schedule.request_decode_start
    ends = schedule.request_decode_end
    order = np.argsort(starts, kind="stable")
    running: dict[int, int] = {}
    cursor = 0
    for stage in range(schedule.num_stages):
        if schedule.stage_kind[stage] == PREFILL:
            requests = by_stage.get(stage, [])
            for request in requests:
                wait = float(workload.arrival[request]) - rec.now()
                if wait > 0:
                    time.sleep(wait)  # an arrival in the future: the stage starts after it
            pairs = [(r, int(schedule.request_client[r])) for r in requests]
            rec.prefill(pairs, prompts)
            continue
        first = int(schedule.stage_first_iteration[stage])
        for g in range(first, first + int(schedule.stage_iterations[stage])):
            while cursor < len(order) and starts[order[cursor]] <= g:
                request = int(order[cursor])
                running[int(schedule.request_client[request])] = request
                cursor += 1
            rec.decode(running)
            for client in [c for c, r in running.items() if ends[r] <= g + 1]:
                engine.release(client)
                del running[client]
    for client in list(running):
        engine.release(client)
    measured = rec.schedule({"executed": True, "device": str(engine.device)})
    return Execution(measured, rec.tokens, schedule, time.perf_counter() - start_wall)


class _LiveView:
    """What an iteration policy sees during a live run (the fields of ``EngineView``)."""

    def __init__(
        self, workload: Workload, cost: CostModel, clients: int, running: dict[int, int], done: list[int]
    ):
        self.workload = workload
        self.cost = cost
        self.clients = clients
        self._running = running
        self._done = done
        self.now = 0.0
        self.active = 0
        self.free = clients
        self.ready = 0
        self.iteration_time = 0.0
        self.iterations_to_finish = 0
        self.stage_iterations = 0
        self.just_prefilled = False
        self.unstarted = len(workload)

    def decoding_requests(self) -> list[int]:
        return list(self._running.values())

    def decoded_tokens(self, request: int) -> int:
        return self._done[request]


def run_policies(
    workload: Workload,
    engine: Engine,
    cost: CostModel,
    clients: int,
    request_policy: str | RequestPolicy = "fcfs",
    iteration_policy: str | IterationPolicy = "prefill-first",
    prompts: Sequence[Sequence[int]] | None = None,
    seed: int = 0,
) -> Execution:
    """Drive the policies live on the engine, as :func:`llmsched.simulate` drives them on
    the cost model: the same decision points, the engine's clock and state.

    ``cost`` is what the policies may consult (a fitted model) and what the measured
    schedule names; the times are the clock's. Arrivals are honoured on the clock.
    """
    check_instance(workload, cost, clients)
    if clients > engine.slots:
        raise ValueError(
            f"clients must be an integer in 1..{engine.slots} (the engine's slots), got {clients!r}"
        )
    if prompts is None:
        prompts = make_prompts(workload, engine.config.vocab_size, seed)
    _check_fit(engine, workload, prompts)
    # The prediction: the same policies, fresh copies, in the simulator on ``cost``.
    predicted = simulate(
        workload,
        cost,
        clients,
        copy.deepcopy(make_request_policy(request_policy)),
        copy.deepcopy(make_iteration_policy(iteration_policy)),
    )
    rp = make_request_policy(request_policy)
    ip = make_iteration_policy(iteration_policy)
    if not isinstance(request_policy, str):
        rp = copy.deepcopy(request_policy)  # a fresh copy: the live run must not share state
    if not isinstance(iteration_policy, str):
        ip = copy.deepcopy(iteration_policy)
    engine.reset()
    start_wall = time.perf_counter()
    rec = _Recorder(engine, workload, cost, clients)
    n = len(workload)
    order = np.argsort(workload.arrival, kind="stable").tolist()
    arrival = workload.arrival.tolist()
    output = workload.output_tokens.tolist()
    capacity = int(cost.prefill_capacity)
    rp.start(workload, clients)
    ip.start(workload, cost, clients)
    running: dict[int, int] = {}
    decoded = [0] * n
    view = _LiveView(workload, cost, clients, running, decoded)
    next_arrival = finished = started = 0
    planned = 0  # decode iterations the iteration policy asked for, still to run
    while finished < n:
        now = rec.now()
        while next_arrival < n and arrival[order[next_arrival]] <= now:
            rp.arrive(order[next_arrival])
            next_arrival += 1
        free = clients - len(running)
        ready = rp.ready() if free else 0
        just_prefilled = bool(rec.kind) and rec.kind[-1] == PREFILL
        decision = DECODE_UNTIL_EVENT
        if ready and running and planned <= 0:
            view.now, view.active, view.free, view.ready = now, len(running), free, ready
            view.iteration_time = float(cost.decode_iteration_time(len(running)))
            view.iterations_to_finish = min(output[r] - decoded[r] for r in running.values())
            view.stage_iterations = 0 if just_prefilled else rec.iters[-1]
            view.just_prefilled = just_prefilled
            view.unstarted = n - started
            decision = _check_decision(ip.decide(cast(Any, view)), ip)
            planned = decision if decision > 0 else 0
        if ready and (not running or (decision == PREFILL_NOW and not just_prefilled)):
            pairs = rp.take(capacity)
            if not pairs:
                raise RuntimeError(
                    f"request policy {type(rp).__name__} reported ready requests but took none"
                )
            rec.prefill(pairs, prompts)
            for request, client in pairs:
                running[client] = request
            started += len(pairs)
            planned = 0
            continue
        if not running:
            if next_arrival >= n:
                raise RuntimeError("no request can run, yet some are unfinished")
            wait = arrival[order[next_arrival]] - rec.now()
            if wait > 0:
                time.sleep(wait)
            continue
        rec.decode(running)
        planned -= 1
        for client, request in list(running.items()):
            decoded[request] += 1
            if decoded[request] == output[request]:
                del running[client]
                engine.release(client)
                rp.release(client)
                finished += 1
                planned = 0  # a finish is a decision point
        if free and next_arrival < n and arrival[order[next_arrival]] <= rec.now():
            planned = 0  # so is an arrival while a client is free
    names = (getattr(rp, "name", type(rp).__name__), getattr(ip, "name", type(ip).__name__))
    measured = rec.schedule({"executed": True, "request_policy": names[0], "iteration_policy": names[1]})
    return Execution(measured, rec.tokens, predicted, time.perf_counter() - start_wall)


@dataclass(frozen=True)
class InsertionResult:
    """What one insertion mode did: tokens, time, and wasted token computations."""

    mode: str
    tokens: list[list[int]]
    seconds: float
    forward_tokens: int  # token positions run through the layers
    padded_tokens: int  # pads among them
    idle_tokens: int  # computations for requests already finished (static batching)
    output_tokens: int

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds if self.seconds > 0 else math.inf

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "seconds": self.seconds,
            "tokens_per_s": self.tokens_per_s,
            "forward_tokens": self.forward_tokens,
            "padded_tokens": self.padded_tokens,
            "idle_tokens": self.idle_tokens,
            "output_tokens": self.output_tokens,
        }


def static_cache_need(workload: Workload, slots: int) -> int:
    """Cache positions a slot needs under static batching: a finished request keeps decoding
    until the longest output of its batch (of ``slots`` requests in arrival order) ends."""
    order = np.argsort(workload.arrival, kind="stable")
    prompt, output = workload.prompt_tokens[order], workload.output_tokens[order]
    need = 0
    for b in range(0, len(order), slots):
        need = max(need, int(prompt[b : b + slots].max() + output[b : b + slots].max()))
    return need


def run_insertion(
    engine: Engine,
    workload: Workload,
    mode: Literal["static", "padded", "apart"],
    prompts: Sequence[Sequence[int]] | None = None,
    seed: int = 0,
) -> InsertionResult:
    """Serve an offline batch (every request waiting at time 0) in one insertion mode, on
    all of the engine's slots, in request order.

    ``static``: batches of J prompts padded to the longest, decoded until the longest output
    ends (finished requests keep computing: idle tokens). ``padded``: when slots free up,
    the waiting prompts join in one step, padded against each other and against the
    running requests' next tokens. ``apart``: they are prefilled together, unpadded, and
    decoding goes on.
    """
    if mode not in ("static", "padded", "apart"):
        raise ValueError(f"mode must be 'static', 'padded' or 'apart', got {mode!r}")
    if np.any(workload.arrival > 0):
        raise ValueError("run_insertion serves an offline batch; this workload has arrivals after 0")
    if prompts is None:
        prompts = make_prompts(workload, engine.config.vocab_size, seed)
    _check_fit(engine, workload, prompts)
    n, slots = len(workload), engine.slots
    if mode == "static" and static_cache_need(workload, slots) > engine.max_len:
        raise ValueError(
            f"static batching needs {static_cache_need(workload, slots)} cache positions per slot "
            f"(finished requests keep decoding to the end of their batch); max_len is {engine.max_len}"
        )
    output = workload.output_tokens.tolist()
    tokens: list[list[int]] = [[] for _ in range(n)]
    engine.reset()
    idle = 0
    start = engine.clock()
    if mode == "static":
        for b in range(0, n, slots):
            batch = list(range(b, min(b + slots, n)))
            engine.padded_step([(s, prompts[r]) for s, r in enumerate(batch)])
            for _ in range(max(output[r] for r in batch)):
                fed = engine.decode(list(range(len(batch))))
                for s, r in enumerate(batch):
                    if len(tokens[r]) < output[r]:
                        tokens[r].append(fed[s])
                    else:
                        idle += 1  # finished, still computing
            for s in range(len(batch)):
                engine.release(s)
    else:
        running: dict[int, int] = {}
        waiting = list(range(n - 1, -1, -1))  # pop() takes the next request
        free = list(range(slots - 1, -1, -1))

        def finish(slots_done: Sequence[int]) -> None:
            for s in slots_done:
                if len(tokens[running[s]]) == output[running[s]]:
                    del running[s]
                    engine.release(s)
                    free.append(s)

        while running or waiting:
            if free and waiting:
                pairs = [(free.pop(), waiting.pop()) for _ in range(min(len(free), len(waiting)))]
                if mode == "apart":
                    engine.prefill([prompts[r] for _, r in pairs], [s for s, _ in pairs])
                    running.update(pairs)
                else:  # the new prompts and the running requests' next tokens, padded together
                    others = list(running)
                    engine.padded_step([*((s, prompts[r]) for s, r in pairs), *((o, []) for o in others)])
                    for o in others:
                        tokens[running[o]].append(engine.last_fed[o])
                    running.update(pairs)
                    finish(others)
                continue
            current = list(running)
            fed = engine.decode(current)
            for s, token in zip(current, fed, strict=True):
                tokens[running[s]].append(token)
            finish(current)
    seconds = engine.clock() - start
    counters = engine.counters
    return InsertionResult(
        mode,
        tokens,
        seconds,
        counters.forward_tokens,
        counters.padded_tokens,
        idle,
        int(sum(output)),
    )
