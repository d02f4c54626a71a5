"""The batching rules of the engines people run, by name, with their knobs.

=============== ============================================= ======================
name            what an iteration holds                       schedule
=============== ============================================= ======================
``vllm``        prefill-first continuous batching (vLLM       ``Schedule``
                without chunked prefill)
``vllm`` with   every running request and prompt chunks up    ``FusedSchedule``
chunking        to ``max_num_batched_tokens`` (decode first)
``sarathi``     the same, Sarathi-Serve's chunked prefill     ``FusedSchedule``
                (its budget ``max_num_batched_tokens``)
``orca``        whole prompts first, then every decoding      ``FusedSchedule``
                request, up to ``max_num_batched_tokens``      (``whole_prompts``)
``padded``      new whole prompts (up to                      ``FusedSchedule``
                ``max_num_batched_tokens``) and every          (``padded``)
                decoding request, each row padded to the
                longest prompt (Mico's and Baton's insertion)
=============== ============================================= ======================

The paper's PD competition, under any iteration policy, is
:class:`~llmsched.engines.competition.rule.CompetitionRule`; an engine's clients are its
batch slots (vLLM's ``max_num_seqs``, Orca's and SplitwiseSim's maximum batch size).
"""

from __future__ import annotations

from typing import Any

from llmsched.core.memory import KVMemory
from llmsched.engines.fusion.rule import FusionRule
from llmsched.engines.orca.rule import OrcaRule
from llmsched.engines.padded.rule import PaddedRule
from llmsched.engines.vllm.rule import DEFAULT_MAX_NUM_BATCHED_TOKENS, VLLMChunkedRule, VLLMRule

__all__ = ["BATCHING", "SarathiRule", "batching_rule", "check_chunked_prefill"]

#: The named batching rules.
BATCHING = ("vllm", "sarathi", "orca", "padded")


def check_chunked_prefill(mode: str, chunked_prefill: bool) -> None:
    """Refuse (ValueError) ``chunked_prefill`` for an engine mode that would ignore it: it
    applies to ``vllm`` (``sarathi`` always chunks)."""
    if chunked_prefill and mode not in ("vllm", "sarathi"):
        raise ValueError(
            f"chunked_prefill applies to vllm (sarathi always chunks); mode {mode} would ignore it"
        )


class SarathiRule(FusionRule):
    """Sarathi-Serve's chunked prefill: the fused rule (:class:`FusionRule`), its schedule's
    ``info`` naming the engine."""

    batching = "sarathi"

    def info(self, facts: dict[str, Any]) -> dict[str, Any]:
        return {**super().info(facts), "batching": self.batching}


def batching_rule(
    name: str,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    chunked_prefill: bool = False,
    memory: KVMemory | None = None,
) -> Any:
    """A fresh batching rule of engine ``name`` (see the module's table).

    ``memory`` is the engine's KV-cache memory (:class:`~llmsched.core.memory.KVMemory`), or
    None for an engine whose clients alone bound what it holds.

    Raises
    ------
    ValueError
        On an unknown name, a bad token count, or ``chunked_prefill`` asked of ``orca`` or
        ``padded``, which never chunk (``sarathi`` always does, with or without it).
    """
    if not isinstance(chunked_prefill, bool):
        raise TypeError(f"chunked_prefill must be True or False, got {chunked_prefill!r}")
    if name == "vllm":
        rule: Any = VLLMChunkedRule if chunked_prefill else VLLMRule
        return rule(max_num_batched_tokens, memory)
    if name == "sarathi":
        return SarathiRule(max_num_batched_tokens, memory)
    if name == "orca":
        if chunked_prefill:
            raise ValueError("orca runs whole prompts: chunked_prefill applies to vllm")
        return OrcaRule(max_num_batched_tokens, memory)
    if name == "padded":
        if chunked_prefill:
            raise ValueError("padded insertion runs whole prompts: chunked_prefill applies to vllm")
        return PaddedRule(max_num_batched_tokens, memory)
    raise ValueError(f"unknown batching rule {name!r}; expected one of {', '.join(BATCHING)}")
