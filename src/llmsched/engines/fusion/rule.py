"""PD fusion's batching rule (chunked prefill), and the fused engine's entry points.

Each iteration carries every decoding request and prompt chunks up to the token budget (see
:mod:`llmsched.engines.fusion.schedule` for the model). The request policy decides which
waiting requests free clients take, through the same contract as under competition
(:class:`~llmsched.policies.RequestPolicy`): when clients are free and the budget has room
beyond the chunks already under way, the loop asks it for a group (``take`` with the cost
model's prefill capacity); their prompts are then chunked, first come first served, into the
room each iteration leaves after its decoding requests (decode first, as vLLM and Sarathi-
Serve schedule). With no prompt under way the iterations are pure decoding, which the loop
jumps over in closed form, to the next finish or to the first iteration end after an arrival
that a free client could take.

The loop is the one decision loop (:mod:`llmsched.engines.loop`), which also checks the
policy's answers; :class:`FusionRule` only says what each iteration holds.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from llmsched.core.cost import CostModel
from llmsched.core.memory import KVMemory
from llmsched.core.schedule import decoding_at
from llmsched.core.workload import Workload
from llmsched.engines.fusion.iteration import check_fused_instance, check_token_budget
from llmsched.engines.fusion.schedule import FusedSchedule, sit_out_corrections
from llmsched.engines.loop import CostClock, EngineStream, open_engine, run_loop, stream_schedule
from llmsched.engines.memory import check_memory
from llmsched.engines.rule import (
    PREFILL_ONLY,
    TAKE,
    LoopView,
    MixedBatch,
    MixedBatchSitting,
    RuleStart,
    RunRecord,
)
from llmsched.policies import DECODE_UNTIL_EVENT, RequestPolicy

__all__ = [
    "DEFAULT_TOKEN_BUDGET",
    "FusionRule",
    "fused_stream_schedule",
    "open_fused_engine",
    "simulate_fusion_policies",
]

#: Sarathi-Serve's and vLLM's usual chunk budget (tokens per iteration).
DEFAULT_TOKEN_BUDGET = 512

# The arrays of a FusedSchedule, in the order FusionRule.schedule gives them (one string: a
# list of fourteen names would stand one a line).
_ARRAYS = (  # noqa: SIM905
    "run_start run_iterations run_first_time run_step run_decoding run_context run_chunk_tokens "
    "run_chunk_squares chunk_request chunk_run chunk_tokens request_client request_decode_start "
    "request_decode_end"
).split()


class FusionRule:
    """Every decoding request plus prompt chunks, first come first served, up to
    ``token_budget`` tokens an iteration.

    Raises
    ------
    TypeError, ValueError
        When ``token_budget`` is not an integer in ``[2, 2**31]``.
    """

    mode = "fusion"
    view: LoopView | None = None  # no iteration policy: decoding never pauses
    first_cut = None  # every arrival may cut a decode run, while a client is free
    whole_prompts = False  # prompts are chunked to fill the budget
    padded = False  # a mixed iteration is priced as chunks beside decoding, unpadded

    def __init__(self, token_budget: int = DEFAULT_TOKEN_BUDGET, memory: KVMemory | None = None):
        self.token_budget = check_token_budget(token_budget)
        self.memory = memory  # the engine's KV-cache memory, or None
        self._prompt: list[int] = []
        # Prompts taken and not yet all chunked: [request, client, tokens done], in order taken.
        self.under_way: deque[list[int]] = deque()
        self._pending = 0  # prompt tokens under way not yet in a chunk
        # A group is taken only while the budget has room beyond the chunks under way.
        self.admit_below: float = self.token_budget

    def check(self, workload: Workload, cost: CostModel, clients: int) -> None:
        check_fused_instance(workload, cost, clients, self.token_budget)
        if self.memory is not None:
            check_memory(workload, self.memory, clients, cost.prefill_capacity)

    def start(self, engine: RuleStart) -> None:
        self._prompt = engine.prompt
        self.under_way = deque()
        self._pending = 0
        self.admit_below = self.token_budget

    def plan(self, ready: int, active: int, iteration: int) -> int | MixedBatch | MixedBatchSitting:
        if ready:
            return TAKE
        # One iteration's chunks in the room the decoding requests leave.
        room = self.token_budget - active
        under_way = self.under_way
        if not under_way or room <= 0:
            return DECODE_UNTIL_EVENT
        prompt = self._prompt
        chunks: list[tuple[int, int, int, int]] = []
        tokens = squares = completed = 0
        for entry in under_way:
            if room <= 0:
                break
            request, client, offset = entry
            size = min(prompt[request] - offset, room)
            squares += size * (2 * offset + size)  # (offset + size)^2 - offset^2
            tokens += size
            room -= size
            entry[2] = offset + size
            chunks.append((request, client, offset, size))
            completed += entry[2] == prompt[request]
        done: Sequence[tuple[int, int]] = ()  # mostly none: no list to allocate
        if completed:  # only the first prompts under way can be complete
            gone = [under_way.popleft() for _ in range(completed)]
            done = [(request, client) for request, client, _ in gone]
        self._pending -= tokens
        self.admit_below = self.token_budget - self._pending
        return chunks, tokens, squares, done

    def _queue(self, pairs: list[tuple[int, int]]) -> None:
        """Put taken ``(request, client)`` pairs under way, their prompts pending."""
        prompt, under_way = self._prompt, self.under_way
        for request, client in pairs:
            under_way.append([request, client, 0])
            self._pending += prompt[request]

    def taken(self, pairs: list[tuple[int, int]], active: int) -> int | MixedBatch | MixedBatchSitting:
        self._queue(pairs)
        self.admit_below = self.token_budget - self._pending
        return self.plan(0, active, 0)

    def info(self, facts: dict[str, Any]) -> dict[str, Any]:
        return {
            "mode": "fusion",
            "request_policy": facts["request_policy"],
            "token_budget": self.token_budget,
            **facts,
        }

    def schedule(
        self, workload: Workload, cost: CostModel, clients: int, record: RunRecord, measured: bool
    ) -> FusedSchedule:
        """The :class:`~llmsched.engines.fusion.schedule.FusedSchedule` of a run: every run
        is a run of the schedule (a mixed iteration, or decode iterations)."""
        runs = len(record.run_start)
        iterations = np.asarray(record.run_iterations, dtype=np.int64)
        first = np.cumsum(iterations) - iterations  # each run's first iteration
        decode_start = np.asarray(record.request_decode_start, dtype=np.int64)
        phase = None if record.request_phase is None else np.asarray(record.request_phase, dtype=np.int64)
        decoded = (
            workload.output_tokens if phase is None else workload.output_tokens * (phase != PREFILL_ONLY)
        )
        decode_end = np.where(decode_start >= 0, decode_start + decoded, -1)
        skip_request = np.asarray(record.skip_request, dtype=np.int64)
        skip_run = np.asarray(record.skip_run, dtype=np.int64)
        if skip_request.size:
            # The loop moved a request's decode start on by one per iteration it sat out: its
            # range starts where it first decoded, and its end stays.
            decode_start = decode_start - np.bincount(skip_request, minlength=len(workload))
        decoding, context = decoding_at(first, decode_start, decode_end, workload.prompt_tokens)
        if skip_request.size:
            fewer, tokens_fewer = sit_out_corrections(
                first, workload.prompt_tokens, decode_start, decode_end, skip_request, skip_run
            )
            decoding, context = decoding - fewer, context - tokens_fewer
        chunk_tokens, chunk_squares = np.zeros(runs, dtype=np.int64), np.zeros(runs, dtype=np.int64)
        chunk_tokens[record.mixed_run] = record.mixed_tokens
        chunk_squares[record.mixed_run] = record.mixed_squares
        columns = (
            *(record.run_start, iterations, record.run_time, record.run_step),
            *(decoding, context, chunk_tokens, chunk_squares),
            *(record.chunk_request, record.chunk_run, record.chunk_tokens),
            *(record.request_client, decode_start, decode_end),
        )
        # FusedSchedule makes each column an array of its own dtype.
        arrays: dict[str, Any] = dict(zip(_ARRAYS, columns, strict=True))
        makespan = record.now if runs else 0.0
        budget = self.token_budget
        return FusedSchedule(
            workload,
            cost,
            clients,
            budget,
            **arrays,
            makespan=makespan,
            info=record.info,
            whole_prompts=self.whole_prompts,
            padded=self.padded,
            request_parent=None if record.request_parent is None else np.asarray(record.request_parent),
            memory=self.memory,
            skip_request=skip_request,
            skip_run=skip_run,
            request_phase=phase,
        )


def simulate_fusion_policies(
    workload: Workload,
    cost: CostModel,
    clients: int,
    request_policy: RequestPolicy,
    token_budget: int = DEFAULT_TOKEN_BUDGET,
    clairvoyant: bool | np.bool_ = False,
    memory: KVMemory | None = None,
) -> FusedSchedule:
    """Simulate a fused engine under a request-policy object; return its schedule.

    Parameters
    ----------
    workload, cost, clients
        The instance; ``cost`` a :class:`~llmsched.LinearCostModel` or
        :class:`~llmsched.ContextCostModel` (a chunk is priced by its tokens).
    request_policy
        Which waiting requests free clients take (an object; names are resolved by
        :func:`llmsched.simulate_fusion`).
    token_budget
        Decoding requests plus chunk tokens per iteration (Sarathi-Serve's chunk size).
    clairvoyant
        Reveal every request to the policy before the run starts.
    memory
        The engine's KV-cache memory (:class:`FusionRule`), or None.

    Raises
    ------
    TypeError, ValueError
        On an invalid instance or budget, before any work; on a policy answer that breaks
        its contract (:mod:`llmsched.engines.answers`).
    """
    rule = FusionRule(token_budget, memory)
    schedule = run_loop(workload, cost, clients, request_policy, None, CostClock(), clairvoyant, rule)
    assert isinstance(schedule, FusedSchedule)  # what FusionRule builds
    return schedule


def open_fused_engine(
    cost: CostModel,
    clients: int,
    request_policy: RequestPolicy,
    token_budget: int,
    stream: EngineStream,
    predictions: bool,
    name: str = "stream",
    most_requests: int | None = None,
) -> Any:
    """The loop of one fused engine whose requests arrive through ``stream``, as a generator
    driven as :func:`llmsched.engines.loop.open_engine`'s is; its result goes to
    :func:`fused_stream_schedule`."""
    rule = FusionRule(token_budget)
    rule.check(Workload([1], [1]), cost, clients)
    return open_engine(cost, clients, request_policy, None, stream, predictions, name, most_requests, rule)


def fused_stream_schedule(
    workload: Workload,
    cost: CostModel,
    clients: int,
    token_budget: int,
    stream: EngineStream,
    kept: Sequence[int],
    result: Any,
) -> FusedSchedule:
    """The schedule of an engine run by :func:`open_fused_engine`: ``workload`` holds the
    requests it kept, whose indices in the stream are ``kept``, in order."""
    schedule: FusedSchedule = stream_schedule(workload, cost, clients, stream, kept, result)
    return schedule
