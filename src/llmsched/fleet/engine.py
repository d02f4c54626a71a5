"""One engine of a fleet (its cost model, clients, mode, policies and price), and backoff between
engines (Mico's pulling of waiting requests by dry engines)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from llmsched.core.checks import choice, flag, positive_int, real
from llmsched.core.cost import CostModel
from llmsched.core.instance import check_instance
from llmsched.core.memory import KVMemory
from llmsched.core.workload import Workload
from llmsched.engines.batching import BATCHING, batching_rule, check_chunked_prefill
from llmsched.engines.competition.rule import CompetitionRule
from llmsched.engines.fusion.iteration import check_fused_instance, check_token_budget
from llmsched.engines.fusion.rule import FusionRule
from llmsched.engines.vllm.rule import DEFAULT_MAX_NUM_BATCHED_TOKENS
from llmsched.online.registry import make_iteration_policy

if TYPE_CHECKING:
    pass

__all__ = ["ENGINE_MODES", "Backoff", "Engine"]


#: The engine modes a fleet runs: the paper's two, and the batching rules of vLLM, Sarathi-Serve
#: and Orca (:mod:`llmsched.engines.batching`).
ENGINE_MODES = ("competition", "fusion", *BATCHING)


@dataclass(frozen=True)
class Engine:
    """One engine of a fleet: its cost model, clients, price, policies and mode.

    Parameters
    ----------
    cost
        The engine's cost model (its machine's speed).
    clients
        Its clients (batch slots).
    price
        What it costs an hour, in any currency (the fleet's figures per cost use it).
    request_policy, iteration_policy
        Registered policy names (:func:`llmsched.online.request_policy_names`); each engine
        gets policies of its own. A fleet needs a request policy that is ``open_ended``
        (fcfs, batch-wise, shortest-first, longest-first): the others plan over the whole
        workload up front.
    name
        A label for tables; ``engine K`` when empty.
    mode
        ``competition`` (a prefill stage pauses decoding; the iteration policy decides when)
        or ``fusion`` (chunked prefill, :mod:`llmsched.engines.fusion.rule`: every iteration carries the
        decoding requests and prompt chunks up to ``token_budget`` tokens; no iteration
        policy), or a real engine's batching rule, ``vllm``, ``sarathi`` or ``orca``
        (:mod:`llmsched.engines.batching`, with ``max_num_batched_tokens`` and
        ``chunked_prefill``; no iteration policy).
    token_budget
        A fused engine's tokens per iteration: an integer in ``[2, 2**31]``. A competition
        engine does not use it, but it is checked in either mode, so that a bad value is
        refused rather than carried along (and a :func:`dataclasses.replace` of the mode
        does not meet it later).
    max_num_batched_tokens, chunked_prefill
        The knobs of ``vllm``, ``sarathi`` and ``orca`` (checked in every mode, as
        ``token_budget`` is).
    memory
        The engine's KV-cache memory (:class:`~llmsched.core.memory.KVMemory`; a measured
        machine's is ``llmsched.preset(name).memory()``), in every mode: requests are admitted
        by its free blocks and preempted by recompute when decoding runs out (the engine's
        schedule then holds pieces). None: the clients alone bound the batch.
    """

    cost: CostModel
    clients: int
    price: float = 1.0
    request_policy: str = "fcfs"
    iteration_policy: str = "prefill-first"
    name: str = ""
    mode: str = "competition"
    token_budget: int = 512
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS
    chunked_prefill: bool = False
    memory: KVMemory | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.cost, CostModel):
            raise TypeError(
                "an engine's cost must be a cost model with prefill_capacity, prefill_time and "
                f"decode_iteration_time, got {type(self.cost).__name__}"
            )
        object.__setattr__(self, "clients", positive_int("clients", self.clients))
        object.__setattr__(self, "price", real("price", self.price, low=0.0))
        for what in ("request_policy", "iteration_policy", "name"):
            if not isinstance(getattr(self, what), str):
                raise TypeError(f"an engine's {what} must be a str, got {getattr(self, what)!r}")
        object.__setattr__(self, "mode", choice("mode", self.mode, ENGINE_MODES))
        object.__setattr__(self, "token_budget", check_token_budget(self.token_budget))
        # Its times for one token and one client must be finite (what check_instance asks);
        # the workload's own largest stages are checked when a fleet runs it (check_fleet).
        cap = positive_int("max_num_batched_tokens", self.max_num_batched_tokens, minimum=2, maximum=1 << 31)
        object.__setattr__(self, "max_num_batched_tokens", cap)
        object.__setattr__(self, "chunked_prefill", flag("chunked_prefill", self.chunked_prefill))
        check_chunked_prefill(self.mode, self.chunked_prefill)
        if self.memory is not None and not isinstance(self.memory, KVMemory):
            raise TypeError(f"an engine's memory must be a llmsched.KVMemory or None, got {self.memory!r}")
        if self.mode == "fusion":
            check_fused_instance(Workload([1], [1]), self.cost, self.clients, self.token_budget)
        elif self.mode in BATCHING:
            self.rule().check(Workload([1], [1]), self.cost, self.clients)
        else:
            check_instance(Workload([1], [1]), self.cost, self.clients)

    def rule(self) -> Any:
        """A fresh batching rule of the engine, with its memory: competition's with a fresh
        iteration policy, fusion's, or that of ``vllm``, ``sarathi`` or ``orca``."""
        if self.mode == "competition":
            return CompetitionRule(make_iteration_policy(self.iteration_policy), self.memory)
        if self.mode == "fusion":
            return FusionRule(self.token_budget, self.memory)
        chunked = self.chunked_prefill and self.mode == "vllm"
        return batching_rule(self.mode, self.max_num_batched_tokens, chunked, self.memory)

    @property
    def fused_budget(self) -> int | None:
        """Its iterations' token budget, when they mix prompts and decoding (fusion, sarathi,
        orca, padded, vllm with chunked prefill), else None. Orca runs a whole prompt past it,
        alone: the most one of its iterations carries is
        :func:`~llmsched.engines.orca.rule.most_iteration_tokens`; padded insertion caps its
        prompts' tokens (the first always joins), its rows padded beyond."""
        if self.mode == "fusion":
            return self.token_budget
        if self.mode in ("sarathi", "orca", "padded") or (self.mode == "vllm" and self.chunked_prefill):
            return self.max_num_batched_tokens
        return None

    @cached_property
    def tokens_per_s(self) -> float:
        """Output tokens a second with every client decoding (its speed, for routers that
        weigh engines): ``clients / decode_iteration_time(clients)``."""
        seconds = float(self.cost.decode_iteration_time(self.clients))
        return self.clients / seconds if seconds > 0 else math.inf

    @cached_property
    def seconds_per_token(self) -> tuple[float, float]:
        """What a prompt token and an output token cost this engine, in seconds, when it is
        busy: the prefill's mean marginal time per token over a full stage, and a decode
        iteration of every client shared among them (``least-work`` routing weighs work so)."""
        capacity = int(self.cost.prefill_capacity)
        prefill = (float(self.cost.prefill_time(capacity)) - float(self.cost.prefill_time(0))) / capacity
        decode = float(self.cost.decode_iteration_time(self.clients)) / self.clients
        return max(prefill, 0.0), decode

    def label(self, index: int) -> str:
        return self.name or f"engine {index}"


@dataclass(frozen=True)
class Backoff:
    """Mico's backoff: an engine that runs dry (a client free and nothing waiting) pulls
    waiting requests from the engine with the most of them.

    Parameters
    ----------
    delay
        Seconds a pulled request takes to reach the engine that pulled it (the transfer).
    threshold
        The loaded engine must hold at least this many waiting requests to give any.
    share
        At most this fraction of its waiting requests (rounded up) is pulled at once, and
        never more than the dry engine's free clients.
    """

    delay: float = 0.02
    threshold: int = 1
    share: float = 0.5

    def __post_init__(self) -> None:
        object.__setattr__(self, "delay", real("delay", self.delay, low=0.0))
        object.__setattr__(self, "threshold", positive_int("threshold", self.threshold))
        object.__setattr__(self, "share", real("share", self.share, low=0.0, low_open=True, high=1.0))
