"""Orca's batching rule: mixed iterations of whole prompts first, then decoding requests.

Orca's iteration-level scheduling, as SplitwiseSim's baseline machines run it: each
iteration takes the waiting prompts first, first come first served and each whole, while
they fit ``max_batch_tokens`` (the first prompt always runs, even beyond the cap, alone);
then the decoding requests, one token each, fill what is left of the cap. Those past it sit
the iteration out: they keep their clients and caches and decode no token in it. The
requests that sat out the iteration before go first, in the order they sat out, then the
others in the order they joined the batch (a request that comes back from sitting out joins
it anew, last), as SplitwiseSim keeps its batch. An iteration without prompts decodes every
decoding request: a prompt joins only while the decoding requests and the prompts number
fewer than the cap. An iteration that holds prompts is a mixed iteration, priced by the cost model's
:func:`~llmsched.engines.fusion.iteration.fused_iteration_time` for the requests that decode in
it (a measured table prices it from its prompt curve, as SplitwiseSim does).

The schedule is a :class:`~llmsched.engines.fusion.schedule.FusedSchedule` with
``whole_prompts`` and the iterations each request sat out (``skip_request``, ``skip_run``):
the fused validator checks it, allowing an iteration of one whole prompt beyond the cap.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from llmsched.core.cost import CostModel
from llmsched.core.instance import check_stage_time
from llmsched.core.memory import KVMemory
from llmsched.core.workload import Workload
from llmsched.engines.fusion.iteration import fused_iteration_time
from llmsched.engines.fusion.rule import FusionRule
from llmsched.engines.rule import TAKE, MixedBatch, MixedBatchSitting, RuleStart
from llmsched.engines.vllm.rule import DEFAULT_MAX_NUM_BATCHED_TOKENS
from llmsched.policies import DECODE_UNTIL_EVENT

__all__ = ["OrcaRule", "most_iteration_tokens"]


def most_iteration_tokens(max_batch_tokens: int, workload: Workload) -> int:
    """The most tokens one of Orca's iterations carries on ``workload``: within the cap, or a
    whole prompt past it, alone (every decoding request sitting it out). The budget a fused
    lower bound (:func:`~llmsched.engines.fusion.bounds.fused_lower_bounds`) must assume: with
    the cap alone it would count more iterations than a long prompt needs, and exceed what
    Orca achieves."""
    return max(int(max_batch_tokens), int(workload.prompt_tokens.max()))


class OrcaRule(FusionRule):
    """Whole prompts first, then decoding requests, up to ``max_batch_tokens`` an iteration
    (the first prompt always runs); decoding requests past the cap sit the iteration out.

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
        self._running: Mapping[int, int] = {}
        # The decoding requests in batch order (a dict as an ordered set), and those that sat
        # out the last mixed iteration, in the order they sat out (not in the batch order).
        self._batch: dict[int, None] = {}
        self._sat_out: list[int] = []
        self._last_mixed = -2  # the last mixed iteration's number
        self._iteration = 0  # the iteration a plan is for (kept for ``taken``)

    def start(self, engine: RuleStart) -> None:
        super().start(engine)
        self._running = engine.running
        self._batch = {}
        self._sat_out = []
        self._last_mixed = -2
        self._iteration = 0
        self.admit_below = math.inf

    def check(self, workload: Workload, cost: CostModel, clients: int) -> None:
        super().check(workload, cost, clients)
        # A whole prompt may run beyond the cap (alone; a shorter one with decoding requests
        # filling the cap): its price must be finite (a measured table prices the prompt and
        # decoding tokens together).
        longest = int(workload.prompt_tokens.max())
        decoding = max(0, min(min(int(clients), len(workload)) - 1, self.token_budget - longest))
        seconds = fused_iteration_time(cost, decoding, 0, longest, longest * longest)
        why = f"a {longest}-token prompt beside {decoding} decoding requests (Orca runs prompts whole)"
        check_stage_time(cost, f"fused_iteration_time({decoding}, 0, {longest})", seconds, why)

    def plan(self, ready: int, active: int, iteration: int) -> int | MixedBatch | MixedBatchSitting:
        self._iteration = iteration
        if ready:
            return TAKE
        under_way = self.under_way
        if not under_way:
            return DECODE_UNTIL_EVENT
        budget = self.token_budget
        prompt = self._prompt
        chunks: list[tuple[int, int, int, int]] = []
        tokens = squares = 0
        while under_way and active + len(chunks) < budget:
            # (Each prompt decodes from the next iteration on, where every decoding request
            # decodes: their number stays within the cap.)
            request, client, _ = under_way[0]
            size = prompt[request]
            if chunks and tokens + size > budget:
                break  # first come first served: a later, smaller prompt does not pass it
            under_way.popleft()
            squares += size * size
            tokens += size
            chunks.append((request, client, 0, size))
        if not chunks:
            return DECODE_UNTIL_EVENT  # the decoding requests fill the cap: until one finishes
        done: Sequence[tuple[int, int]] = [(request, client) for request, client, _, _ in chunks]
        self._pending -= tokens
        self.admit_below = math.inf if self._pending < budget else 0
        sitting = self._sitting(max(0, budget - tokens), active, iteration)
        self._last_mixed = iteration
        if sitting:
            return chunks, tokens, squares, done, sitting
        return chunks, tokens, squares, done

    def _sitting(self, room: int, active: int, iteration: int) -> list[int]:
        """The decoding requests past ``room`` in this mixed iteration, which sit it out; the
        batch order and the requests sat out brought up to date."""
        batch, sat_out = self._batch, self._sat_out
        if not active:
            batch.clear()
            sat_out.clear()
            return []
        if sat_out and iteration > self._last_mixed + 1:
            # Decode iterations ran since: those that sat out decoded in them, rejoining the batch.
            for request in sat_out:
                batch[request] = None
            sat_out.clear()
        if active <= room and not sat_out:
            # Everyone decodes: the batch keeps its order, less the requests that left, plus
            # those that joined (in the order they joined), as the next sit-out finds it.
            return []
        decoding = self._running.values()
        present = set(decoding)
        sat_out[:] = [request for request in sat_out if request in present]  # not finished or preempted
        for request in [request for request in batch if request not in present]:
            del batch[request]
        if len(batch) + len(sat_out) != len(present):
            waiting = set(sat_out)
            for request in decoding:  # joined since, in the order they joined
                if request not in batch and request not in waiting:
                    batch[request] = None
        back = sat_out[:room]  # sat out before: first
        still_out = sat_out[len(back) :]
        keep = room - len(back)
        out = [request for position, request in enumerate(batch) if position >= keep]
        for request in out:
            del batch[request]
        for request in back:  # back in the batch, at its end
            batch[request] = None
        self._sat_out = still_out + out
        return self._sat_out[:]

    def taken(self, pairs: list[tuple[int, int]], active: int) -> int | MixedBatch | MixedBatchSitting:
        self._queue(pairs)
        return self.plan(0, active, self._iteration)

    def info(self, facts: dict[str, Any]) -> dict[str, Any]:
        return {
            **super().info(facts),
            "batching": self.batching,
            "max_batch_tokens": self.token_budget,
        }
