"""vLLM's batching rules: prefill-first continuous batching, and chunked prefill.

vLLM (its v0 scheduler, the one most published measurements ran) has two rules, chosen by
``enable_chunked_prefill``:

* without chunking (:class:`VLLMRule`), an iteration either prefills waiting prompts, first
  come first served, as many as ``max_num_batched_tokens`` tokens and the free sequence
  slots (``max_num_seqs``, the engine's clients) hold, or decodes every running request;
  waiting prompts go first. That is PD competition under the prefill-first iteration policy,
  with the prompt batch capped apart from the cost model's prefill capacity. The
  competition model makes stages alternate, so between two prefill stages the running
  requests decode one iteration, where vLLM would run the second prefill at once;
* with chunking (:class:`VLLMChunkedRule`), every iteration carries every running request
  and prompt chunks up to ``max_num_batched_tokens`` tokens in all, decode first: PD fusion
  (:mod:`llmsched.engines.fusion.rule`) with that budget.

Both run on the one decision loop and build that mode's schedule; the schedule's ``info``
names the engine (``batching``) and its knobs.
"""

from __future__ import annotations

from typing import Any

from llmsched.core.checks import positive_int
from llmsched.core.cost import CostModel
from llmsched.core.memory import KVMemory
from llmsched.core.workload import Workload
from llmsched.engines.competition.rule import CompetitionRule
from llmsched.engines.fusion.rule import FusionRule
from llmsched.policies import PREFILL_NOW, EngineView, KnownRequests

__all__ = ["DEFAULT_MAX_NUM_BATCHED_TOKENS", "VLLMChunkedRule", "VLLMRule"]

#: vLLM's default ``max_num_batched_tokens`` for a model of 2,048 positions or more without
#: chunking, and SplitwiseSim's token cap of a batch.
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048


class _PrefillFirst:
    """Prefill whenever a prompt waits (the loop decodes one iteration between stages)."""

    name = "prefill-first"

    def start(self, known: KnownRequests, cost: CostModel, clients: int) -> None:
        pass

    def decide(self, engine: EngineView) -> int:
        return PREFILL_NOW


class VLLMRule(CompetitionRule):
    """vLLM without chunked prefill: waiting prompts first, up to ``max_num_batched_tokens``
    tokens a prefill iteration; else every running request decodes.

    Parameters
    ----------
    max_num_batched_tokens
        The most prompt tokens one prefill iteration holds (apart from the cost model's
        prefill capacity; the smaller of the two applies). A prompt longer than it cannot
        run without chunking: ``check`` refuses it, as vLLM refuses the request.

    Raises
    ------
    TypeError, ValueError
        When ``max_num_batched_tokens`` is not a positive integer.
    """

    batching = "vllm"

    def __init__(
        self, max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS, memory: KVMemory | None = None
    ):
        super().__init__(_PrefillFirst(), memory)
        self.token_cap = positive_int("max_num_batched_tokens", max_num_batched_tokens, maximum=1 << 31)

    def check(self, workload: Workload, cost: CostModel, clients: int) -> None:
        super().check(workload, cost, clients)
        longest = int(workload.prompt_tokens.max())
        if longest > self.token_cap:
            raise ValueError(
                f"a prompt of {longest} tokens is longer than max_num_batched_tokens={self.token_cap}: "
                "vLLM without chunked prefill cannot run it; raise max_num_batched_tokens, clip the "
                "prompts, or use chunked prefill"
            )

    def info(self, facts: dict[str, Any]) -> dict[str, Any]:
        return {
            **super().info(facts),
            "batching": self.batching,
            "chunked_prefill": False,
            "max_num_batched_tokens": self.token_cap,
        }


class VLLMChunkedRule(FusionRule):
    """vLLM with chunked prefill: every running request plus prompt chunks, decode first,
    up to ``max_num_batched_tokens`` tokens an iteration (the fused rule with that budget).

    Raises
    ------
    TypeError, ValueError
        When ``max_num_batched_tokens`` is not an integer in ``[2, 2**31]``.
    """

    batching = "vllm"

    def __init__(
        self, max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS, memory: KVMemory | None = None
    ):
        super().__init__(max_num_batched_tokens, memory)

    def info(self, facts: dict[str, Any]) -> dict[str, Any]:
        return {
            **super().info(facts),
            "batching": self.batching,
            "chunked_prefill": True,
            "max_num_batched_tokens": self.token_budget,
        }
