"""Measured hardware as named presets: a model on a machine at a tensor-parallel degree, with its
memory, price and power, and a cost model fitted to its measured times.

The measurements are SplitwiseSim's, the simulator of the Splitwise paper (Patel et al.,
"Splitwise: Efficient generative LLM inference using phase splitting", ISCA 2024), published at
github.com/Mutinifni/splitwise-sim (commit 8f99e7d, ``data/perf_model.csv``) under the MIT
License, Copyright (c) 2024 Pratyush Patel. The file ships unchanged as package data
(``llmsched/data/splitwise_perf_model.csv``) with its license
(``llmsched/data/SPLITWISE_LICENSE``): 1,260 rows, Llama-2-70B at tensor parallelism 2, 4 and 8
and BLOOM-176B at 8, on DGX-A100, DGX-H100 and a power-capped DGX-H100, five repeats of each of
21 points (prompt tokens, batch size, output tokens).

The facts beside the times are SplitwiseSim's configuration and the paper's Table V: each
machine holds eight GPUs of 80 GiB; a DGX-A100 is rated 6,500 W and a DGX-H100 10,200 W
(7,140 W power-capped, in SplitwiseSim's configuration); relative to a DGX-A100, a DGX-H100
costs 2.35x as a prompt machine and 2.5x as a token machine (Table V), draws 1.75x the power,
and 1.23x when power-capped.
"""

from __future__ import annotations

import csv
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from types import MappingProxyType
from typing import Any

import numpy as np

from llmsched.core.checks import positive_int, real, text
from llmsched.core.memory import DEFAULT_BLOCK_SIZE, KVMemory
from llmsched.core.table import TableCostModel, medians

__all__ = [
    "GPU_MEMORY_BYTES",
    "MIXED_FACTOR",
    "Preset",
    "measurements",
    "preset",
    "presets",
]

#: Bytes of one 80 GiB GPU (A100-80GB and H100-80GB alike).
GPU_MEMORY_BYTES = 80 * 2**30
#: SplitwiseSim prices a mixed iteration at 1.1x the prompt curve at its tokens.
MIXED_FACTOR = 1.1
# GPUs in one DGX machine: a preset's engine uses ``tensor_parallel`` of them.
MACHINE_GPUS = 8

# (layers, hidden size, bytes of fp16 weights) per model, as SplitwiseSim configures them.
_MODELS = {"llama2-70b": (80, 8192, 135_000_000_000), "bloom-176b": (70, 14336, 329_000_000_000)}

# Per machine, relative to a DGX-A100: (short name, machine, price, power, rated watts). A
# DGX-H100 costs 2.35x as a prompt machine and 2.5x as a token machine in Table V; a preset
# is either, so it takes the higher figure, which does not flatter the H100 in a comparison
# of cost, and is the one Table V gives the power-capped H100 (the same machine).
_HARDWARE = {
    "a100-80gb": ("a100", "DGX-A100", 1.0, 1.0, 6500.0),
    "h100-80gb": ("h100", "DGX-H100", 2.5, 1.75, 10200.0),
    "h100-80gb-pcap": ("h100-pcap", "DGX-H100, power-capped", 2.5, 1.23, 7140.0),
}

# SplitwiseSim's rows at batch 64 under tensor parallelism 2 contradict the rest of its table:
# a prefill of 64 prompts of 512 tokens is recorded 6.6-8.4x faster than one of 32 (794 ms
# against 6,633 ms on A100), and a decode iteration of 64 requests faster than one of 32, on every
# GPU. They are not measurements of the batch they name (the keys and values of 64 requests of
# 640 tokens, 107 GB, cannot fit beside Llama-2-70B's weights on two GPUs), so the presets at
# that degree leave them out and price batches of up to 32 requests (16,384 prefill tokens).
_LARGEST_BATCH = {2: 32}


@functools.cache
def measurements() -> Mapping[tuple[str, str, int], Mapping[str, np.ndarray]]:
    """SplitwiseSim's measurements, by (model, hardware, tensor parallel degree): per column
    (``prompt_size``, ``batch_size``, ``token_size``, ``prompt_time``, ``token_time`` in ms,
    ``peak_power``, ``average_power``, ``e2e_time``) the rows' values, in file order, read-only."""
    text_ = resources.files("llmsched").joinpath("data/splitwise_perf_model.csv").read_text(encoding="utf-8")
    groups: dict[tuple[str, str, int], dict[str, list[float]]] = {}
    for row in csv.DictReader(text_.splitlines()):
        key = (row["model"], row["hardware"], int(row["tensor_parallel"]))
        columns = groups.setdefault(key, {})
        for name, value in row.items():
            if name not in ("model", "hardware", "tensor_parallel"):
                columns.setdefault(name, []).append(float(value))
    return MappingProxyType(
        {
            key: MappingProxyType({name: _read_only(np.array(values)) for name, values in columns.items()})
            for key, columns in sorted(groups.items())
        }
    )


def _read_only(values: np.ndarray) -> np.ndarray:
    values.setflags(write=False)
    return values


@dataclass(frozen=True)
class Preset:
    """A model served on a machine at a tensor-parallel degree, as measured.

    Parameters
    ----------
    name
        ``MODEL/HARDWARE/tpN``, as ``llama2-70b/h100/tp8``.
    model, hardware, tensor_parallel
        As the measurements name them (``llama2-70b``, ``h100-80gb``, 8).
    gpus
        GPUs the engine uses (its tensor-parallel degree).
    gpu_memory_bytes
        Memory of each GPU.
    weights_bytes
        The model's fp16 weights.
    layers, hidden_size
        The model's shape, which sizes its keys and values.
    machine
        The machine measured (``DGX-H100``), of eight GPUs.
    machine_price, machine_power
        A machine's price and provisioned power relative to a DGX-A100 (Table V of the paper).
    machine_rated_watts
        A machine's rated power (SplitwiseSim's configuration).
    """

    name: str
    model: str
    hardware: str
    tensor_parallel: int
    gpus: int
    gpu_memory_bytes: int
    weights_bytes: int
    layers: int
    hidden_size: int
    machine: str
    machine_price: float
    machine_power: float
    machine_rated_watts: float

    def __post_init__(self) -> None:
        for name in ("name", "model", "hardware", "machine"):
            text(name, getattr(self, name))
        for name in ("tensor_parallel", "gpus", "gpu_memory_bytes", "weights_bytes", "layers", "hidden_size"):
            positive_int(name, getattr(self, name))
        for name in ("machine_price", "machine_power", "machine_rated_watts"):
            real(name, getattr(self, name), low=0.0, low_open=True)
        if self.gpus > MACHINE_GPUS:
            raise ValueError(f"gpus must be at most the {MACHINE_GPUS} of a machine, got {self.gpus}")

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of keys and values one token holds: ``2 * hidden * layers * 2`` (a key and a
        value per layer, fp16). SplitwiseSim sizes them so, with no reduction for grouped-query
        attention (Llama-2-70B shares each key and value head among eight query heads, so its
        engines hold an eighth of this)."""
        return 2 * self.hidden_size * self.layers * 2

    @property
    def kv_memory_bytes(self) -> int:
        """Memory left for keys and values: the engine's GPUs less the weights."""
        return self.gpus * self.gpu_memory_bytes - self.weights_bytes

    def kv_tokens(self, block_size: int = 16) -> int:
        """Tokens whose keys and values fit in :attr:`kv_memory_bytes`, in whole blocks of
        ``block_size`` tokens (0 when the weights leave no room)."""
        size = positive_int("block_size", block_size)
        return max(0, self.kv_memory_bytes // (size * self.kv_bytes_per_token)) * size

    def memory(self, block_size: int = DEFAULT_BLOCK_SIZE, watermark: float = 0.01) -> KVMemory:
        """The engine's KV-cache memory (:class:`~llmsched.core.memory.KVMemory`): its
        :attr:`kv_memory_bytes` in blocks of ``block_size`` tokens.

        Raises
        ------
        ValueError
            When the weights leave no room for a block.
        """
        return KVMemory.of_bytes(self.kv_memory_bytes, self.kv_bytes_per_token, block_size, watermark)

    @property
    def price(self) -> float:
        """The engine's price relative to a DGX-A100: its share of the machine's GPUs."""
        return self.machine_price * self.gpus / MACHINE_GPUS

    @property
    def rated_watts(self) -> float:
        """The engine's share of its machine's rated power."""
        return self.machine_rated_watts * self.gpus / MACHINE_GPUS

    def rows(self) -> dict[str, np.ndarray]:
        """The measurements the cost model is fitted to, by column (times in ms)."""
        rows = measurements()[(self.model, self.hardware, self.tensor_parallel)]
        largest = _LARGEST_BATCH.get(self.tensor_parallel)
        if largest is None:
            return dict(rows)
        keep = rows["batch_size"] <= largest
        return {name: _read_only(values[keep]) for name, values in rows.items()}

    def cost(self, prompt_count: bool = True) -> TableCostModel:
        """The :class:`~llmsched.core.table.TableCostModel` fitted to :meth:`rows`
        (:meth:`TableCostModel.fit <llmsched.core.table.TableCostModel.fit>` with SplitwiseSim's
        columns), mixed iterations at SplitwiseSim's 1.1x, batches priced up to twice the
        largest measured (the decode table's last slope carried on).

        ``prompt_count``: prefill keyed by the batch's tokens and its prompt count (the
        measured batches of 512-token prompts beside the single prompts; the default), or,
        False, by its tokens alone, as SplitwiseSim reads the same measurements."""
        if not isinstance(prompt_count, bool):
            raise TypeError(f"prompt_count must be True or False, got {prompt_count!r}")
        return _fitted(self, prompt_count)

    def splitwisesim_cost(self) -> TableCostModel:
        """The measurements as SplitwiseSim's simulator reads them (its
        ``DatabasePerformanceModel``), for a comparison of the two simulators' engines on one
        cost model: every time keyed by the batch's tokens (prompt tokens times batch size),
        the median of each key's rows; a prefill by its tokens; a decode iteration of ``k``
        requests by the token-time medians read at ``k`` *tokens* (SplitwiseSim counts a
        decoding request as one token of the batch), so that a batch of fewer than 128 requests
        takes about the token time measured at 128 prompt tokens: below that first key the
        table follows SplitwiseSim's linear extrapolation of its first segment (a knot at one
        request; on H100 at TP 8, 31.5 ms there against 29.9 ms at 128); no price per context
        token; a mixed iteration 1.1 times the prefill of all its tokens. The prefill medians
        are made non-decreasing (a prefill table may not fall), where SplitwiseSim reads them
        as they are and extrapolates below its first key (on H100 at TP 8 it reads 51.7 and
        53.9 ms at 256 and 512 tokens, this table 58.2 ms, the time at 128; and 64.7 ms at one
        token, this table 58.2 ms). Not a model of the hardware: the preset's
        :meth:`cost` is (a decode iteration of 64 requests of 1,024 tokens takes 55 ms on H100 at TP 8 as
        measured, 30 ms as SplitwiseSim reads it)."""
        return _as_splitwisesim_reads(self)


@functools.cache
def _as_splitwisesim_reads(preset: Preset) -> TableCostModel:
    rows = preset.rows()
    keys = (rows["prompt_size"] * rows["batch_size"]).astype(np.int64)
    knots, prompt, _ = medians(keys, rows["prompt_time"] / 1e3)
    _, token, _ = medians(keys, rows["token_time"] / 1e3)
    batches: list[int] = knots.tolist()
    times: list[float] = token.tolist()
    if batches[0] > 1 and len(batches) > 1:
        # SplitwiseSim extrapolates below its first key along its first segment: a knot at 1.
        slope = (times[1] - times[0]) / (batches[1] - batches[0])
        batches, times = [1, *batches], [times[0] + slope * (1 - batches[0]), *times]
    return TableCostModel(
        knots.tolist(),
        np.maximum.accumulate(prompt).tolist(),
        batches,
        times,
        0.0,
        max_batch=int(knots[-1]),
        mixed_factor=MIXED_FACTOR,
        name=f"{preset.name} (as SplitwiseSim reads it)",
    )


@functools.cache
def _fitted(preset: Preset, prompt_count: bool) -> TableCostModel:
    # Batches up to twice the largest measured (the most a table extrapolates): serving
    # engines hold more requests than the 64 measured (vLLM's max_num_seqs is 256).
    rows = preset.rows()
    largest = 2 * int(rows["batch_size"].max())
    return TableCostModel.fit(
        rows,
        time_unit="ms",
        max_batch=largest,
        mixed_factor=MIXED_FACTOR,
        name=preset.name,
        prompt_count=prompt_count,
    )


@functools.cache
def presets() -> tuple[Preset, ...]:
    """Every preset: each (model, hardware, degree) SplitwiseSim measured, models in the order
    Llama-2-70B, BLOOM-176B, then hardware A100, H100, power-capped H100, then degree."""
    found = []
    for model, hardware, degree in measurements():
        layers, hidden, weights = _MODELS[model]
        short, machine, price, power, watts = _HARDWARE[hardware]
        found.append(
            Preset(
                f"{model}/{short}/tp{degree}",
                model,
                hardware,
                degree,
                degree,
                GPU_MEMORY_BYTES,
                weights,
                layers,
                hidden,
                machine,
                price,
                power,
                watts,
            )
        )
    order = {name: i for i, name in enumerate(_MODELS)}
    machines = {name: i for i, name in enumerate(_HARDWARE)}
    return tuple(sorted(found, key=lambda p: (order[p.model], machines[p.hardware], p.tensor_parallel)))


def preset(name: Any) -> Preset:
    """The preset called ``name`` (as ``llama2-70b/h100/tp8``).

    Raises
    ------
    TypeError, ValueError
        When ``name`` is not a str, or names no preset (the message lists them).
    """
    text("name", name)
    for found in presets():
        if found.name == name:
            return found
    raise ValueError(f"no preset {name!r}; the presets are {', '.join(p.name for p in presets())}")
