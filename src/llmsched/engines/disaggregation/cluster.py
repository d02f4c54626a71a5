"""A Splitwise cluster: prompt and token machine pools, their cost models, and the KV-cache transfer
between them (bytes per token, link bandwidth, per-layer overlap)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from llmsched.core.checks import MAX_TOKENS, flag, nonnegative_int, positive_int, real
from llmsched.core.cost import (
    ContextCostModel,
    CostModel,
    LinearCostModel,
)
from llmsched.core.instance import (
    WorkloadTotals,
    check_cost_model,
    check_horizon,
    decode_work_bound,
    prefill_work_bound,
)
from llmsched.core.memory import KVMemory
from llmsched.core.table import TableCostModel
from llmsched.core.workload import Workload

if TYPE_CHECKING:
    pass

__all__ = ["DisaggregatedCluster", "kv_bytes_per_token", "transfer_seconds"]


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: int = 2) -> int:
    """Bytes of keys and values one token holds: ``2 * layers * kv_heads * head_dim * bytes``
    (LLaMA-65B in float16: 2 x 80 x 64 x 128 x 2 = 2.6 MB)."""
    values = [
        positive_int(n, v) for n, v in (("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim))
    ]
    return 2 * values[0] * values[1] * values[2] * positive_int("dtype_bytes", dtype_bytes)


def transfer_seconds(
    prompt_tokens: Any,
    stage_seconds: Any,
    bytes_per_token: float,
    bandwidth_gbs: float,
    layers: int,
    overlap: bool,
    latency_s: float = 0.0,
) -> Any:
    """Seconds from a prefill stage's end until a prompt's keys and values have arrived.

    ``x = prompt_tokens * bytes_per_token / (bandwidth_gbs * 1e9)``; without ``overlap``,
    ``x``; with it, ``max(x / layers, x - stage_seconds * (layers - 1) / layers)`` (each
    layer sent once computed, the stage's time spread evenly over its layers); plus
    ``latency_s``, what a transfer costs whatever its size (0 by default).

    Raises
    ------
    ValueError
        If ``bytes_per_token`` is not >= 0, ``bandwidth_gbs`` not > 0, or ``layers`` not a
        positive integer.
    """
    bytes_per_token = real("bytes_per_token", bytes_per_token, low=0.0)
    bandwidth_gbs = real("bandwidth_gbs", bandwidth_gbs, low=0.0, low_open=True)
    layers = positive_int("layers", layers)
    overlap = flag("overlap", overlap)
    x = np.asarray(prompt_tokens, dtype=np.float64) * bytes_per_token / (bandwidth_gbs * 1e9)
    if overlap:
        x = np.maximum(x / layers, x - np.asarray(stage_seconds, dtype=np.float64) * (layers - 1) / layers)
    x = x + real("latency_s", latency_s, low=0.0)
    return float(x) if x.ndim == 0 else x


def _per_token_cost(name: str, cost: Any) -> CostModel:
    if not isinstance(cost, (LinearCostModel, ContextCostModel, TableCostModel)):
        raise TypeError(
            f"{name} must be a LinearCostModel, a ContextCostModel or a TableCostModel, "
            f"got {type(cost).__name__}"
        )
    return cost


@dataclass(frozen=True)
class DisaggregatedCluster:
    """A Splitwise cluster: ``prompt_machines`` and ``token_machines``, each an engine.

    Parameters
    ----------
    prompt_machines, token_machines
        Machines in each pool (at least one each).
    prompt_cost, token_cost
        The cost model of each pool's machines (a prompt machine's prefill stages; a token
        machine's decode iterations, and its prefill stages when lent).
    token_clients
        Requests one token machine decodes at once (its KV-cache slots).
    kv_bytes_per_token
        Bytes of keys and values per prompt token (:func:`kv_bytes_per_token`).
    kv_bandwidth
        GB/s of the link a transfer uses.
    layers
        Layers of the model (for the per-layer overlap).
    overlap
        Send each layer's keys and values as soon as it is computed (Splitwise's overlap).
    mixed
        Lend idle token machines to the prompt pool under load (see the module docstring).
    prompt_batch_tokens
        The most prompt tokens a stage of several prompts holds (SplitwiseSim's 2,048: the
        measured prefill is cheapest per token near there); a longer prompt is prefilled
        alone. None: a stage holds up to the cost model's prefill capacity.
    lend_busy_above
        With the mixed pool, a token machine that decodes is lent a stage as well, pausing its
        decoding for it, whenever every prompt machine holds more than this many prompt tokens
        queued or in its stage (SplitwiseSim's mixed pool moves a token machine into the
        prompt pool past 8,192). None: only an idle token machine is lent a stage.
    token_memory
        Each token machine's KV-cache memory (:class:`~llmsched.core.memory.KVMemory`), or
        None (its clients alone bound its batch). A request's keys and values move to its
        token machine only once that machine has room for them and for ``max_output_tokens``
        more (the most any request may make, as a server's ``max_tokens``): the blocks are
        reserved when the transfer starts, with its stage when there is room then, else when
        a request on the machine finishes and frees enough (first come first served), and
        freed when the request finishes. A transfer that starts after its stage has begun
        sends no layer during the stage. With ``mixed``, every machine that decodes has it (a
        prompt machine lent to the token pool too), and a token machine is lent a stage only
        while no transfer waits for its memory and it has room for the most any stage it
        could be given would reserve (its requests' blocks, reserved when it is lent and
        counted from the stage's start). Needs ``max_output_tokens``.
    max_output_tokens
        The most output tokens a request may make, reserved for each (with ``token_memory``).
    kv_latency
        Seconds every transfer takes whatever its size (0 by default; a link's per-transfer
        overhead, as fitted by :func:`llmsched.runtime.disaggregated.fit_link`).
    """

    prompt_machines: int
    token_machines: int
    prompt_cost: CostModel
    token_cost: CostModel
    token_clients: int
    kv_bytes_per_token: float
    kv_bandwidth: float
    layers: int = 80
    overlap: bool = True
    mixed: bool = False
    prompt_batch_tokens: int | None = None
    lend_busy_above: int | None = None
    token_memory: KVMemory | None = None
    max_output_tokens: int | None = None
    kv_latency: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "prompt_machines", positive_int("prompt_machines", self.prompt_machines))
        object.__setattr__(self, "token_machines", positive_int("token_machines", self.token_machines))
        _per_token_cost("prompt_cost", self.prompt_cost)
        _per_token_cost("token_cost", self.token_cost)
        object.__setattr__(self, "token_clients", positive_int("token_clients", self.token_clients))
        object.__setattr__(
            self, "kv_bytes_per_token", real("kv_bytes_per_token", self.kv_bytes_per_token, low=0.0)
        )
        object.__setattr__(
            self, "kv_bandwidth", real("kv_bandwidth", self.kv_bandwidth, low=0.0, low_open=True)
        )
        object.__setattr__(self, "kv_latency", real("kv_latency", self.kv_latency, low=0.0))
        object.__setattr__(self, "layers", positive_int("layers", self.layers))
        object.__setattr__(self, "overlap", flag("overlap", self.overlap))
        object.__setattr__(self, "mixed", flag("mixed", self.mixed))
        if self.prompt_batch_tokens is not None:
            cap = positive_int("prompt_batch_tokens", self.prompt_batch_tokens, maximum=1 << 31)
            object.__setattr__(self, "prompt_batch_tokens", cap)
        if self.lend_busy_above is not None:
            above = nonnegative_int("lend_busy_above", self.lend_busy_above, maximum=1 << 40)
            object.__setattr__(self, "lend_busy_above", above)
            if not self.mixed:
                raise ValueError(
                    "lend_busy_above lends busy token machines to the prompt pool: it needs mixed=True"
                )
        if self.max_output_tokens is not None:
            most = positive_int("max_output_tokens", self.max_output_tokens, maximum=MAX_TOKENS)
            object.__setattr__(self, "max_output_tokens", most)
        if self.token_memory is not None:
            if not isinstance(self.token_memory, KVMemory):
                raise TypeError(
                    f"token_memory must be a llmsched.KVMemory or None, got {self.token_memory!r}"
                )
            if self.max_output_tokens is None:
                raise ValueError(
                    "token_memory reserves each request's keys and values for its prompt and the most "
                    "output tokens it may make: give max_output_tokens"
                )

    @property
    def machines(self) -> int:
        return self.prompt_machines + self.token_machines

    def is_prompt(self, machine: Any) -> Any:
        """Whether machine indices are prompt machines (``0 .. prompt_machines - 1``); the
        token machines follow."""
        return np.asarray(machine) < self.prompt_machines

    def cost_of(self, machine: int) -> CostModel:
        return self.prompt_cost if machine < self.prompt_machines else self.token_cost

    def transfer(self, prompt_tokens: Any, stage_seconds: Any) -> Any:
        """:func:`transfer_seconds` on this cluster's link."""
        return transfer_seconds(
            prompt_tokens,
            stage_seconds,
            self.kv_bytes_per_token,
            self.kv_bandwidth,
            self.layers,
            self.overlap,
            self.kv_latency,
        )

    def reserved_blocks(self, prompt_tokens: Any) -> Any:
        """Blocks a request of ``prompt_tokens`` holds on its token machine under
        ``token_memory``: its prompt and ``max_output_tokens`` (scalars or arrays)."""
        memory = self.token_memory
        assert memory is not None and self.max_output_tokens is not None
        tokens = np.asarray(prompt_tokens, dtype=np.int64) + self.max_output_tokens
        blocks = -(-tokens // memory.block_size)
        return int(blocks) if blocks.ndim == 0 else blocks

    def check(self, workload: Workload) -> None:
        """Raise ValueError unless ``workload`` can run on this cluster, before any work.

        Every prompt must fit a prompt machine's stage (and a token machine's, when it may
        be lent); both cost models must give finite times >= 0 for one token and one client,
        for the largest stage the workload can ask of each pool (a full prefill stage of the
        longest prompts; every client decoding at the largest context), and the KV transfer
        of the longest prompt must be finite. Every time the run can reach (the latest
        arrival, plus every transfer, plus a bound on each pool's stages) must leave float64
        enough precision to time the shortest stage (:func:`~llmsched.core.instance.check_horizon`).
        """
        if self.token_memory is not None:
            assert self.max_output_tokens is not None
            over = np.flatnonzero(workload.output_tokens > self.max_output_tokens)
            if over.size:
                i = int(over[0])
                raise ValueError(
                    f"request {i} makes {int(workload.output_tokens[i])} output tokens, more than "
                    f"max_output_tokens={self.max_output_tokens} that token_memory reserves for each"
                )
            need = np.asarray(self.reserved_blocks(workload.prompt_tokens))
            worst = int(np.argmax(need))
            if int(need[worst]) > self.token_memory.blocks:
                raise ValueError(
                    f"request {worst} needs {int(need[worst])} blocks of {self.token_memory.block_size} "
                    f"tokens (its prompt and max_output_tokens={self.max_output_tokens}), more than a "
                    f"token machine's token_memory of {self.token_memory.blocks}"
                )
        prefills = [self.prompt_cost, self.token_cost] if self.mixed else [self.prompt_cost]
        decodes = [self.prompt_cost, self.token_cost] if self.mixed else [self.token_cost]
        shortest = [check_cost_model(workload, cost, 1) for cost in prefills]
        # Token machines never prefill unless lent: their capacity does not matter.
        shortest += [check_cost_model(Workload([1], [1]), cost, self.token_clients) for cost in decodes]
        totals = WorkloadTotals.of(workload)
        # Each pool's work bounded as if one machine did it all.
        prefill = [prefill_work_bound(totals, cost) for cost in prefills]
        decode = [decode_work_bound(totals, cost, self.token_clients) for cost in decodes]
        work = max(bound.seconds for bound in prefill) + max(bound.seconds for bound in decode)
        # A transfer takes at most x = bytes / bandwidth (the overlap only shortens it).
        longest = totals.longest_prompt
        link = self.kv_bandwidth * 1e9
        slowest = longest * self.kv_bytes_per_token / link
        if not slowest < math.inf:
            raise ValueError(
                f"the KV transfer of a {longest}-token prompt takes {slowest!r} s at "
                f"kv_bytes_per_token={self.kv_bytes_per_token:g} over kv_bandwidth={self.kv_bandwidth:g} "
                "GB/s; transfer times must be finite: raise kv_bandwidth or lower kv_bytes_per_token"
            )
        transfers = totals.prompt_tokens * self.kv_bytes_per_token / link
        positive = [t for t in shortest if t > 0]
        check_horizon(
            totals,
            min(positive, default=0.0),
            work,
            transfers,
            "KV transfers",
            (*prefill, *decode),
            "a larger kv_bandwidth or a smaller kv_bytes_per_token",
        )
