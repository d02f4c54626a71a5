"""Orca's batching rule: mixed iterations of whole prompts and every decoding request.

Orca's iteration-level scheduling, as SplitwiseSim's baseline machines run it: each
iteration takes the waiting prompts first, first come first served and each whole, while
they and the decoding requests (one token each) fit ``max_batch_tokens``; the first prompt
always runs, even beyond the cap, unless the decoding requests alone fill it. Every decoding
request decodes in every iteration (so they never number more than the cap).
An iteration that holds prompts is a mixed iteration, priced by the cost model's
:func:`~llmsched.engines.fusion.iteration.fused_iteration_time` (a measured table prices it
from its prompt curve, as SplitwiseSim does).

The schedule is a :class:`~llmsched.engines.fusion.schedule.FusedSchedule` with
``whole_prompts``: the fused validator checks it, allowing an iteration of one whole prompt
beyond the cap. SplitwiseSim instead leaves decoding requests beyond the cap out of such an
iteration (they keep their cache and wait); here they decode in it, a token each.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmsched.core.cost import CostModel
from llmsched.core.instance import check_stage_time
from llmsched.core.memory import KVMemory
from llmsched.core.workload import Workload
from llmsched.engines.fusion.iteration import fused_iteration_time
from llmsched.engines.fusion.rule import FusionRule
from llmsched.engines.rule import TAKE, MixedBatch
from llmsched.engines.vllm.rule import DEFAULT_MAX_NUM_BATCHED_TOKENS
from llmsched.policies import DECODE_UNTIL_EVENT

__all__ = ["OrcaRule", "most_iteration_tokens"]


def most_iteration_tokens(max_batch_tokens: int, workload: Workload) -> int:
    """The most tokens one of Orca's iterations carries on ``workload``: within the cap, or a
    whole prompt past it beside fewer decoding requests than the cap. The budget a fused
    lower bound (:func:`~llmsched.engines.fusion.bounds.fused_lower_bounds`) must assume: with
    the cap alone it would count more iterations than a long prompt needs, and exceed what
    Orca achieves."""
    return int(max_batch_tokens) + int(workload.prompt_tokens.max())


class OrcaRule(FusionRule):
    """Whole prompts first, then every decoding request, up to ``max_batch_tokens`` an
    iteration (the first prompt always runs).

    Raises
    ------
    TypeError, ValueError
        When ``max_batch_tokens`` is not an integer in ``[2, 2**31]``.
    """

    batching = "orca"
    whole_prompts = True

    def __init__(
        self, max_batch_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS, memory: KVMemory | None = None
    ):
        super().__init__(max_batch_tokens, memory)

    def check(self, workload: Workload, cost: CostModel, clients: int) -> None:
        super().check(workload, cost, clients)
        # A whole prompt may run beyond the cap beside every decoding request: its price must
        # be finite (a measured table prices the prompt and decoding tokens together).
        longest = int(workload.prompt_tokens.max())
        decoding = min(int(clients), len(workload)) - 1
        seconds = fused_iteration_time(cost, decoding, 0, longest, longest * longest)
        why = f"a {longest}-token prompt beside {decoding} decoding requests (Orca runs prompts whole)"
        check_stage_time(cost, f"fused_iteration_time({decoding}, 0, {longest})", seconds, why)

    def plan(self, ready: int, active: int, iteration: int) -> int | MixedBatch:
        if ready:
            return TAKE
        under_way = self.under_way
        if not under_way:
            return DECODE_UNTIL_EVENT
        room = self.token_budget - active
        if room <= 0:
            return DECODE_UNTIL_EVENT  # the decoding requests fill the cap: no prompt joins them
        prompt = self._prompt
        chunks: list[tuple[int, int, int, int]] = []
        tokens = squares = 0
        while under_way:
            request, client, _ = under_way[0]
            size = prompt[request]
            if chunks and size > room:
                break  # first come first served: a later, smaller prompt does not pass it
            under_way.popleft()
            squares += size * size
            tokens += size
            room -= size
            chunks.append((request, client, 0, size))
        done: Sequence[tuple[int, int]] = [(request, client) for request, client, _, _ in chunks]
        self._pending -= tokens
        self.admit_below = self.token_budget - self._pending
        return chunks, tokens, squares, done

    def info(self, facts: dict[str, Any]) -> dict[str, Any]:
        return {
            **super().info(facts),
            "batching": self.batching,
            "max_batch_tokens": self.token_budget,
        }
