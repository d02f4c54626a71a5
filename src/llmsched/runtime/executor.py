"""Run policies and schedules on the torch engine, through the one decision loop.

* :class:`EngineExecutor` is the loop's executor on a real engine: it runs every prefill
  stage and decode iteration the loop decides on, and times each on the device clock
  (synchronized);
* :func:`run_policies` drives a request policy and an iteration policy live, the same
  objects :func:`llmsched.simulate` asks, through :func:`llmsched.engines.loop.run_loop`;
* :func:`execute_schedule` runs a :class:`~llmsched.Schedule`'s decisions again on the
  engine (:func:`llmsched.engines.loop.replay_policies`) and returns the measured schedule beside
  the predicted one;
* :func:`run_alone` gives each request's tokens when it runs by itself, the reference of
  the token check.

Measured schedules pass every rule of :func:`llmsched.validate` but ``stage_time``, which
compares times with the cost model. The insertion-mode experiments are
:mod:`llmsched.runtime.insertion`.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmsched.core.checks import positive_int
from llmsched.core.cost import CostModel
from llmsched.core.instance import check_instance
from llmsched.core.memory import KVMemory
from llmsched.core.workload import Workload
from llmsched.engines.clock import Chunk
from llmsched.engines.competition.rule import CompetitionRule
from llmsched.engines.competition.schedule import Schedule
from llmsched.engines.loop import DecodeRun, admits, replay_policies, run_loop, simulate_policies
from llmsched.online.registry import make_iteration_policy, make_request_policy
from llmsched.policies import IterationPolicy, RequestPolicy
from llmsched.runtime.engine import Engine

__all__ = [
    "EngineExecutor",
    "Execution",
    "engine_memory",
    "execute_schedule",
    "make_prompts",
    "run_alone",
    "run_batching",
    "run_policies",
]


def make_prompts(workload: Workload, vocab_size: int, seed: int = 0) -> list[list[int]]:
    """Token ids for each request's prompt (its length from the workload), seeded."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab_size, size=int(n)).tolist() for n in workload.prompt_tokens]


def check_fit(engine: Engine, workload: Workload, prompts: Sequence[Sequence[int]]) -> None:
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
    check_fit(engine, workload, prompts)
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

    measured: Any  # a Schedule, or a FusedSchedule from run_batching
    tokens: list[list[int]]
    predicted: Any = None
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


class EngineExecutor:
    """The decision loop's executor on a torch :class:`~llmsched.runtime.engine.Engine`.

    Every decode iteration runs on the device and is timed (one decode run per iteration);
    the loop's arrivals are honoured on the same clock (it sleeps until one is due when
    nothing can run). The greedy tokens of each request are kept in ``tokens``.

    A request's slot is freed when it decodes its last token. Its prompt's blocks and its
    first token's are reserved when it is taken (:meth:`Engine.reserve`, as vLLM allocates
    them at admission), so a paged engine holds what the loop's memory model counts. Under
    KV-cache memory the loop preempts by recompute (:meth:`preempt`): the request's slot is
    freed and its continuation's prompt is its prompt and the tokens it has made, prefilled
    anew when taken again; ``preemptions`` and ``recomputed_tokens`` count them.

    Parameters
    ----------
    engine
        The engine; its slots are the clients.
    prompts
        Token ids of each request's prompt.
    probe, probe_every
        A measurement of the machine beside the work (:class:`~llmsched.runtime.protocol.Probe`),
        called after every ``probe_every`` prefill stages and iterations; the time it takes is
        left out of the run's clock (the run's times are as if it had not run), or None.
    """

    measured = True

    def __init__(
        self,
        engine: Engine,
        prompts: Sequence[Sequence[int]],
        probe: Callable[[], object] | None = None,
        probe_every: int = 10,
    ):
        self.engine = engine
        self.prompts = prompts
        self.probe = probe
        self.probe_every = positive_int("probe_every", probe_every)
        self._since_probe = 0
        self.tokens: list[list[int]] = []
        self.preemptions = 0
        self.recomputed_tokens = 0
        self._outputs: list[int] = []
        self._owner: dict[int, int] = {}  # a continuation -> the request it continues
        self._continued: dict[int, list[int]] = {}  # a continuation -> its prompt
        self._t0 = 0.0
        self._decoded_until: float | None = None  # end of the last iteration of an open decode stage

    def start(self, workload: Workload, cost: CostModel, clients: int) -> None:
        self.tokens = [[] for _ in range(len(workload))]
        self._outputs = [int(n) for n in workload.output_tokens]
        self._owner, self._continued = {}, {}
        self.preemptions = self.recomputed_tokens = 0
        self._decoded_until = None
        self._t0 = self.engine.clock()

    def now(self) -> float:
        return self.engine.clock() - self._t0

    def _step(self) -> None:
        """Count a stage or iteration; every ``probe_every``, run the probe off the clock."""
        if self.probe is None:
            return
        self._since_probe += 1
        if self._since_probe >= self.probe_every:
            self._since_probe = 0
            begin = self.engine.clock()
            self.probe()
            self._t0 += self.engine.clock() - begin  # the probe's time is not the run's

    def wait_until(self, time_s: float) -> float:
        wait = time_s - self.now()
        if wait > 0:
            time.sleep(wait)
            self._decoded_until = None  # the engine idled: the next run starts now
        return self.now()

    def _prompt(self, request: int) -> Sequence[int]:
        """A request's prompt, or a continuation's (its request's prompt and tokens so far)."""
        return self._continued[request] if request in self._owner else self.prompts[request]

    def _take(self, request: int, client: int) -> Sequence[int]:
        """Free ``client``'s slot for ``request`` and reserve its prompt's blocks and its first
        token's; return its prompt."""
        prompt = self._prompt(request)
        self.engine.release(client)
        self.engine.reserve(client, len(prompt) + 1)
        return prompt

    def _record(self, running: Mapping[int, int], fed: Sequence[int]) -> None:
        """Give each running request the token it fed; free the slots of those now finished."""
        for client, token in zip(running, fed, strict=True):
            owner = self._owner.get(running[client], running[client])
            made = self.tokens[owner]
            made.append(token)
            if len(made) == self._outputs[owner]:
                self.engine.release(client)

    def prefill(self, pairs: Sequence[tuple[int, int]], tokens: int) -> tuple[float, float]:
        clients = [c for _, c in pairs]
        prompts = [self._take(r, c) for r, c in pairs]
        start = self.now()
        self.engine.prefill(prompts, clients)
        self._decoded_until = None
        end = self.now()
        self._step()
        return start, end

    def decode(
        self, running: Mapping[int, int], iterations: int, due: float, context: int = 0
    ) -> list[DecodeRun]:
        clients = list(running)
        owners = [self._owner.get(running[c], running[c]) for c in clients]
        requests = [self.tokens[owner] for owner in owners]
        runs: list[DecodeRun] = []
        # An iteration starts where the one before it in its decode stage ended: the loop's
        # bookkeeping between them is part of the engine's time, and the runs tile the stage.
        start = self.now() if self._decoded_until is None else self._decoded_until
        for _ in range(iterations):
            fed = self.engine.decode(clients)
            end = self.now()
            for tokens, token in zip(requests, fed, strict=True):
                tokens.append(token)
            runs.append((start, 1, end - start, 0.0))
            start = self._decoded_until = end
            self._step()
            if admits(end, due):
                break
        # No request finishes inside a run of iterations: the slots of those done are freed now.
        for client, owner in zip(clients, owners, strict=True):
            if len(self.tokens[owner]) == self._outputs[owner]:
                self.engine.release(client)
        return runs

    def mixed(
        self, running: Mapping[int, int], chunks: Sequence[Chunk], tokens: int, squares: int, context: int
    ) -> DecodeRun:
        """One mixed iteration on the engine (:meth:`~llmsched.runtime.engine.Engine.mixed_step`):
        every request in ``running`` decodes a token and each chunk ``(request, client, start,
        size)`` writes that piece of its prompt into its client's slot; timed like a decode
        iteration (the runs tile the engine's busy time)."""
        pieces = []
        for request, client, start, size in chunks:
            prompt = self._take(request, client) if start == 0 else self._prompt(request)
            pieces.append((client, prompt[start : start + size], start + size == len(prompt)))
        begin = self.now() if self._decoded_until is None else self._decoded_until
        fed = self.engine.mixed_step(list(running), pieces)
        end = self._decoded_until = self.now()
        self._record(running, fed)
        self._step()
        return begin, 1, end - begin, 0.0

    def padded(self, running: Mapping[int, int], chunks: Sequence[Chunk], context: int) -> DecodeRun:
        """One padded iteration on the engine (:meth:`~llmsched.runtime.engine.Engine.padded_step`):
        the whole prompts of ``chunks`` and every running request's next token, each row
        padded to the longest prompt; timed like :meth:`mixed`."""
        rows: list[tuple[int, Sequence[int]]] = [
            (client, self._take(request, client)) for request, client, _, _ in chunks
        ]
        rows += [(client, []) for client in running]
        begin = self.now() if self._decoded_until is None else self._decoded_until
        self.engine.padded_step(rows)
        end = self._decoded_until = self.now()
        self._record(running, [self.engine.last_fed[client] for client in running])
        self._step()
        return begin, 1, end - begin, 0.0

    def preempt(self, victims: Sequence[tuple[int, int, int]]) -> None:
        """Preempt by recompute (the loop's call under KV-cache memory): free each victim's
        slot; its continuation's prompt is its prompt and the tokens it has made.

        Raises
        ------
        RuntimeError
            On a paged engine whose pool could still run the next iteration: the loop's
            memory and the engine's disagree (they must be the same blocks).
        """
        if self.engine.paged and self.engine.blocks_short() <= 0:
            raise RuntimeError(
                f"the loop preempted {len(victims)} request(s) while the engine's pool had room for "
                f"the next iteration ({self.engine.blocks - self.engine.blocks_in_use} blocks free): "
                "the loop's KV-cache memory must be the engine's"
            )
        for client, request, continuation in victims:
            owner = self._owner.get(request, request)
            self.engine.release(client)
            self._owner[continuation] = owner
            self._continued[continuation] = [*self.prompts[owner], *self.tokens[owner]]
            self.preemptions += 1
            self.recomputed_tokens += len(self._continued[continuation])

    def info(self) -> dict[str, Any]:
        return {"executed": True, "device": str(self.engine.device)}


def execute_schedule(
    schedule: Schedule, engine: Engine, prompts: Sequence[Sequence[int]] | None = None, seed: int = 0
) -> Execution:
    """Run ``schedule``'s decisions on ``engine``: its prefill stages in order (same
    requests on the same clients) and decode stages of the same lengths; time every stage.

    ``prompts`` are the token ids (default: :func:`make_prompts` with ``seed``). The measured
    schedule has the same stages, clients and iterations, with the clock's times; where the
    device runs ahead of the schedule's times, a stage whose requests have not arrived yet
    waits for them by decoding on (see :func:`llmsched.engines.loop.replay_policies`).
    """
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule must be a llmsched.Schedule, got {type(schedule).__name__}")
    workload = schedule.workload
    if schedule.clients > engine.slots:
        raise ValueError(f"the schedule uses {schedule.clients} clients; the engine has {engine.slots} slots")
    if prompts is None:
        prompts = make_prompts(workload, engine.config.vocab_size, seed)
    check_fit(engine, workload, prompts)
    requests, iterations = replay_policies(schedule)
    engine.reset()
    start_wall = time.perf_counter()
    executor = EngineExecutor(engine, prompts)
    measured = run_loop(workload, schedule.cost, schedule.clients, requests, iterations, executor)
    return Execution(measured, executor.tokens, schedule, time.perf_counter() - start_wall)


def _prepared(
    workload: Workload,
    engine: Engine,
    cost: CostModel,
    clients: int,
    prompts: Sequence[Sequence[int]] | None,
    seed: int,
) -> Sequence[Sequence[int]]:
    """Check a live run's instance against the engine before any work; return its prompts
    (made from ``seed`` when not given)."""
    check_instance(workload, cost, clients)
    if clients > engine.slots:
        raise ValueError(
            f"clients must be an integer in 1..{engine.slots} (the engine's slots), got {clients!r}"
        )
    if prompts is None:
        prompts = make_prompts(workload, engine.config.vocab_size, seed)
    check_fit(engine, workload, prompts)
    return prompts


def engine_memory(engine: Engine, memory: KVMemory | None = None) -> KVMemory | None:
    """The KV-cache memory a live run on ``engine`` schedules with: ``memory`` (which must be a
    paged engine's pool, block for block), or a paged engine's own pool (vLLM's 1% watermark),
    or None for an unpaged engine.

    Raises
    ------
    ValueError
        When ``memory`` is given for an unpaged engine or differs from its pool.
    """
    if memory is None:
        if not engine.paged:
            return None
        assert engine.block_size is not None
        return KVMemory(engine.blocks, engine.block_size)
    if not isinstance(memory, KVMemory):
        raise TypeError(f"memory must be a llmsched.KVMemory or None, got {type(memory).__name__}")
    if (engine.blocks, engine.block_size) != (memory.blocks, memory.block_size):
        held = f"{engine.blocks} blocks of {engine.block_size}" if engine.paged else "no block pool"
        raise ValueError(
            f"memory of {memory.blocks} blocks of {memory.block_size} tokens needs an engine with that "
            f"pool (Engine(..., block_size={memory.block_size}, blocks={memory.blocks})); the engine "
            f"has {held}"
        )
    return memory


def _run_live(
    workload: Workload,
    engine: Engine,
    cost: CostModel,
    clients: int,
    prompts: Sequence[Sequence[int]],
    probe: Callable[[], object] | None,
    request_policy: str | RequestPolicy,
    iteration_policy: IterationPolicy | None,
    rule: Any,
    predicted: Any,
) -> Execution:
    """The loop run live on ``engine`` (reset first) with a fresh copy of the request policy and
    ``iteration_policy`` (competition's default rule) or ``rule``; the measured schedule beside
    ``predicted``, with the executor's counts in ``info``."""
    engine.reset()
    start_wall = time.perf_counter()
    executor = EngineExecutor(engine, prompts, probe)
    requests = _fresh(request_policy, make_request_policy)
    measured = run_loop(workload, cost, clients, requests, iteration_policy, executor, False, rule)
    info = {
        "preemptions": executor.preemptions,
        "recomputed_tokens": executor.recomputed_tokens,
        "peak_blocks": engine.peak_blocks if engine.paged else None,
    }
    return Execution(measured, executor.tokens, predicted, time.perf_counter() - start_wall, info)


def _fresh(policy: Any, make: Any) -> Any:
    """The policy ``make`` gives for ``policy``, copied when the caller passed an object: two
    runs (the prediction and the execution) must not share a policy's state."""
    made = make(policy)
    return copy.deepcopy(made) if made is policy else made


def run_batching(
    workload: Workload,
    engine: Engine,
    cost: CostModel,
    clients: int,
    batching: str = "sarathi",
    request_policy: str | RequestPolicy = "fcfs",
    max_num_batched_tokens: int = 512,
    prompts: Sequence[Sequence[int]] | None = None,
    seed: int = 0,
    memory: KVMemory | None = None,
    probe: Callable[[], object] | None = None,
) -> Execution:
    """Run an engine's batching rule (:func:`llmsched.engines.batching.batching_rule`:
    ``vllm``, ``sarathi``, ``orca`` or ``padded``) live on the torch engine, through the loop
    :func:`llmsched.simulate_batching` runs on the cost model; its mixed iterations run as one
    packed pass (:meth:`~llmsched.runtime.engine.Engine.mixed_step`), its padded ones padded
    (:meth:`~llmsched.runtime.engine.Engine.padded_step`).

    ``cost`` is what the rule and the policy may consult and what the measured schedule names;
    the times are the clock's, so the measured schedule passes every rule of its validator but
    ``stage_time``. The prediction beside it is the same rule on ``cost``'s clock.

    On a paged engine (``Engine(block_size=..., blocks=...)``) the rule admits by the engine's
    free blocks and preempts by recompute when they run out (:func:`engine_memory`; ``memory``,
    when given, must be that pool): the preempted requests' slots are freed and their prompts
    and tokens so far prefilled anew. ``info`` counts ``preemptions``, ``recomputed_tokens`` and
    the engine's ``peak_blocks``. ``probe``: see :class:`EngineExecutor`.
    """
    from llmsched.engines.batching import batching_rule
    from llmsched.online.simulate import simulate_batching

    memory = engine_memory(engine, memory)
    prompts = _prepared(workload, engine, cost, clients, prompts, seed)
    predicted = simulate_batching(
        workload,
        cost,
        clients,
        batching,
        _fresh(request_policy, make_request_policy),
        max_num_batched_tokens,
        memory=memory,
    )
    rule = batching_rule(batching, max_num_batched_tokens, memory=memory)
    return _run_live(workload, engine, cost, clients, prompts, probe, request_policy, None, rule, predicted)


def run_policies(
    workload: Workload,
    engine: Engine,
    cost: CostModel,
    clients: int,
    request_policy: str | RequestPolicy = "fcfs",
    iteration_policy: str | IterationPolicy = "prefill-first",
    prompts: Sequence[Sequence[int]] | None = None,
    seed: int = 0,
    memory: KVMemory | None = None,
    probe: Callable[[], object] | None = None,
) -> Execution:
    """Drive the policies live on the engine, through the loop :func:`llmsched.simulate`
    runs on the cost model: the same decision points, the engine's clock and state.

    ``cost`` is what the policies may consult (a fitted model) and what the measured
    schedule names; the times are the clock's. Arrivals are honoured on the clock. The
    prediction returned beside the measurement is the same policies (fresh copies) on
    ``cost``'s clock. On a paged engine, KV-cache memory as for :func:`run_batching`;
    ``probe``: see :class:`EngineExecutor`.
    """
    memory = engine_memory(engine, memory)
    prompts = _prepared(workload, engine, cost, clients, prompts, seed)
    predicted = simulate_policies(
        workload,
        cost,
        clients,
        _fresh(request_policy, make_request_policy),
        _fresh(iteration_policy, make_iteration_policy),
        memory=memory,
    )
    iterations = _fresh(iteration_policy, make_iteration_policy)
    if memory is not None:  # the competition rule with memory holds the iteration policy
        rule, iterations = CompetitionRule(iterations, memory), None
    else:
        rule = None
    return _run_live(
        workload, engine, cost, clients, prompts, probe, request_policy, iterations, rule, predicted
    )
