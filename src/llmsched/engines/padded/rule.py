"""Padded insertion, Mico's and Baton's continuous batching without separate prefill.

When clients free up, the waiting prompts the request policy takes join the running batch in
one iteration: the new prompts, whole, and every decoding request's next token run through
the model together, each row padded to the longest new prompt (the token vector, attention
mask and cache aligned by padding, as Mico's Sec. 3.3 and Baton's Sec. 4 describe it). Every
padded position costs what a prompt token does: the decoding requests pay for the new
prompts' width (Baton's "redundant prefilling"), which prefilling apart
(:class:`~llmsched.engines.competition.rule.CompetitionRule`, Baton-PD) or Orca's selective
batching (:class:`~llmsched.engines.orca.rule.OrcaRule`) avoids. Without prompts to insert
the iterations are pure decoding.

Prompts join first come first served while their tokens fit ``max_batch_tokens`` (the first
always joins); the rest join in the next iteration. With KV-cache memory an engine holds the
real tokens only: pads are computed, not cached (as the runtime's padded step runs them), so
a preempted request's continuation rejoins as a whole prompt of its prompt and what it had
decoded. The schedule is a
:class:`~llmsched.engines.fusion.schedule.FusedSchedule` with ``whole_prompts`` and
``padded``: the fused validator prices its iterations with prompts by
:func:`~llmsched.engines.fusion.iteration.padded_iteration_time`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from llmsched.core.cost import CostModel
from llmsched.core.instance import WorkBound, WorkloadTotals, check_stage_time
from llmsched.core.memory import KVMemory
from llmsched.core.workload import Workload
from llmsched.engines.fusion.iteration import MAX_TOKEN_BUDGET, padded_iteration_time
from llmsched.engines.fusion.rule import FusionRule
from llmsched.engines.rule import TAKE, MixedBatch, MixedBatchSitting
from llmsched.policies import DECODE_UNTIL_EVENT

__all__ = ["PaddedRule", "padded_work_bound"]


class PaddedRule(FusionRule):
    """New whole prompts and every decoding request in one padded iteration; prompts join
    while their tokens fit ``max_batch_tokens`` (by default no cap; the first always joins).

    Raises
    ------
    TypeError, ValueError
        When ``max_batch_tokens`` is not an integer in ``[2, 2**31]``.
    """

    batching = "padded"
    whole_prompts = True
    padded = True

    def __init__(self, max_batch_tokens: int = MAX_TOKEN_BUDGET, memory: KVMemory | None = None):
        super().__init__(max_batch_tokens, memory)
        self.admit_below = math.inf

    def start(self, engine: Any) -> None:
        super().start(engine)
        self.admit_below = math.inf  # free clients always take prompts: they join padded

    def check(self, workload: Workload, cost: CostModel, clients: int) -> None:
        super().check(workload, cost, clients)
        # The widest iteration: every client a row as wide as the longest prompt.
        longest = int(workload.prompt_tokens.max())
        rows = min(int(clients), len(workload))
        seconds = padded_iteration_time(cost, rows, longest, 0)
        why = f"{rows} rows padded to a {longest}-token prompt"
        check_stage_time(cost, f"padded_iteration_time({rows}, {longest}, 0)", seconds, why)

    def plan(self, ready: int, active: int, iteration: int) -> int | MixedBatch | MixedBatchSitting:
        if ready:
            return TAKE
        under_way = self.under_way
        if not under_way:
            return DECODE_UNTIL_EVENT
        budget, prompt = self.token_budget, self._prompt
        chunks: list[tuple[int, int, int, int]] = []
        tokens = squares = 0
        while under_way:
            request, client, _ = under_way[0]
            size = prompt[request]
            if chunks and tokens + size > budget:
                break  # first come first served: the rest join in the next iteration
            under_way.popleft()
            tokens += size
            squares += size * size
            chunks.append((request, client, 0, size))
        self._pending -= tokens
        done: Sequence[tuple[int, int]] = [(request, client) for request, client, _, _ in chunks]
        return chunks, tokens, squares, done

    def taken(self, pairs: list[tuple[int, int]], active: int) -> int | MixedBatch | MixedBatchSitting:
        self._queue(pairs)
        return self.plan(0, active, 0)

    def info(self, facts: dict[str, Any]) -> dict[str, Any]:
        return {**super().info(facts), "batching": self.batching, "max_batch_tokens": self.token_budget}


def padded_work_bound(totals: WorkloadTotals, cost: CostModel, clients: int) -> WorkBound:
    """Seconds of padded iterations with prompts an engine of ``cost`` with ``clients``
    clients spends, at most, on a workload of ``totals``: each inserts a request at least, and
    none is dearer than every client a row as wide as the longest context (a prompt, or a
    preempted request's continuation: its prompt and what it had decoded), each reading the
    longest context (:func:`~llmsched.engines.fusion.iteration.padded_iteration_time`). Like
    the other modes' horizon bounds it counts each request's insertion once.

    Raises
    ------
    ValueError
        When that iteration's price is not a finite number of seconds >= 0.
    """
    rows = max(1, min(int(clients), totals.requests))
    width = totals.longest_context
    context = rows * totals.longest_context
    seconds = padded_iteration_time(cost, rows, width, context)
    call = f"padded_iteration_time({rows}, {width}, {context})"
    largest = check_stage_time(cost, call, seconds, f"{rows} rows padded to a {width}-token prompt")
    stage = f"cost model {type(cost).__name__} gives {call} = {largest:.6g} s"
    return WorkBound(totals.requests * largest, largest, stage)
