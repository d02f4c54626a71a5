"""Per-layer cost model of a transformer on a GPU, as ExeGPT's XSimulator consumes it.

One layer with P parameters (fp16; P is the model's parameter count over its layers, about
``12 h^2`` for OPT and GPT-3) does ``2 P`` floating-point operations per token and reads
``2 P`` bytes of weights per pass; a decode step also reads the keys and values of every
token in context (``4 w`` bytes each, w the key width). A pass takes the longer of its
compute at the GPU's sustained rate and its memory traffic at the GPU's bandwidth; we keep
the model linear, as the issue asks, by charging

* encoding ``T`` tokens: ``encode_base + encode_per_token * T`` (weights once, compute per
  token);
* a decode iteration of ``B`` sequences with ``C`` context tokens in all:
  ``decode_base + decode_per_sequence * B + decode_per_context * C`` (weights once, compute
  per sequence, KV reads per context token);
* tensor parallelism of degree ``t``: every term above divided by ``t``, plus two all-reduces
  per layer of the activations (``2 h`` bytes per token) over the GPUs' link, ring style:
  ``2 (t-1)/t`` of the bytes at the link rate, plus a fixed latency each.

Context follows the convention of :mod:`llmsched.core.cost`: a sequence with a prompt of ``p``
tokens that has decoded ``j`` tokens contributes ``p + j`` to ``C``, the tokens in its cache
when the iteration starts (the token the iteration writes is not counted; it costs the same
for every sequence, so it lies in ``decode_per_sequence``). An engine of ``L`` such layers at
degree ``t`` is therefore a :class:`~llmsched.core.cost.ContextCostModel`
(:meth:`LayerCostModel.engine_cost`) whose decode iteration takes the same time for the same
``(B, C)``.

:meth:`LayerCostModel.from_specs` builds the coefficients from a model of Table 1 and a GPU of
Table 2; :meth:`LayerCostModel.fit` fits them to measured samples by least squares.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmsched.core.checks import flag, positive_int, real, real_array, sizes, text
from llmsched.core.cost import ContextCostModel

__all__ = [
    "GPUS",
    "MODELS",
    "GPUSpec",
    "LayerCostModel",
    "ModelSpec",
    "calibrate_efficiencies",
    "gpu_spec",
    "model_spec",
]


@dataclass(frozen=True)
class ModelSpec:
    """A transformer of ExeGPT's Table 1.

    ``kv_width`` is the width of the keys (and of the values) per token and layer; it is the
    hidden size except where attention is wider (T5-11B: 128 heads of 128). Weights and
    work per layer come from the parameter count, so wide feed-forward layers (T5-11B's
    65,536) are counted.
    """

    name: str
    params_billion: float
    layers: int
    hidden: int
    heads: int
    encoder_decoder: bool = False
    kv_width: int | None = None

    def __post_init__(self) -> None:
        text("name", self.name)
        positive_int("layers", self.layers)
        positive_int("hidden", self.hidden)
        positive_int("heads", self.heads)
        if self.kv_width is not None:
            positive_int("kv_width", self.kv_width)
        real("params_billion", self.params_billion, low=0.0, low_open=True)
        flag("encoder_decoder", self.encoder_decoder)
        if self.hidden % self.heads:
            raise ValueError(
                f"{self.name}: hidden size {self.hidden} is not a multiple of {self.heads} heads"
            )

    @property
    def params_per_layer(self) -> float:
        return self.params_billion * 1e9 / self.layers

    @property
    def weight_bytes_per_layer(self) -> float:
        """fp16 weights of one layer (the model's parameters spread over its layers)."""
        return 2.0 * self.params_per_layer

    @property
    def kv_bytes_per_token(self) -> float:
        """fp16 key and value of one token in one layer."""
        return 4.0 * (self.kv_width or self.hidden)


@dataclass(frozen=True)
class GPUSpec:
    """A GPU of ExeGPT's Table 2: dense fp16 tensor rate, memory, bandwidths (per direction)."""

    name: str
    fp16_tflops: float
    memory_gb: float
    bandwidth_gbs: float
    link_gbs: float  # GPU-to-GPU within a node

    def __post_init__(self) -> None:
        text("name", self.name)
        for name in ("fp16_tflops", "memory_gb", "bandwidth_gbs", "link_gbs"):
            real(name, getattr(self, name), low=0.0, low_open=True)


#: ExeGPT's Table 1 (T5 is an encoder-decoder; its 48 layers are 24 + 24).
#:
#: :meta hide-value:
MODELS = {
    "t5-11b": ModelSpec("T5-11B", 11, 48, 1024, 128, encoder_decoder=True, kv_width=16384),
    "opt-13b": ModelSpec("OPT-13B", 13, 40, 5120, 40),
    "gpt3-39b": ModelSpec("GPT-3 39B", 39, 48, 8192, 64),
    "gpt3-101b": ModelSpec("GPT-3 101B", 101, 80, 10240, 80),
    "gpt3-175b": ModelSpec("GPT-3 175B", 175, 96, 12288, 96),
    "gpt3-341b": ModelSpec("GPT-3 341B", 341, 120, 15360, 120),
    # Beyond ExeGPT's table: the model Baton serves (Llama-2-7B: 6.74B parameters), and the one
    # Splitwise measures (Llama-2-70B: 68.98B, grouped-query attention of 8 key-value heads).
    "llama2-7b": ModelSpec("Llama-2-7B", 6.74, 32, 4096, 32),
    "llama2-70b": ModelSpec("Llama-2-70B", 68.98, 80, 8192, 64, kv_width=1024),
}

#: Vendor datasheet figures: A40 (PCIe 4.0 x16 between GPUs), A100 80GB SXM (NVLink 3), and
#: the cards Baton measures on, RTX A6000 and GeForce RTX 4090 (dense fp16 tensor rate with
#: fp32 accumulation; PCIe 4.0 x16).
#:
#: :meta hide-value:
GPUS = {
    "a40": GPUSpec("A40", 149.7, 48, 696, 32),
    "a100": GPUSpec("A100-80GB", 312.0, 80, 2039, 300),
    "a6000": GPUSpec("RTX A6000", 154.8, 48, 768, 32),
    "rtx4090": GPUSpec("RTX 4090", 165.2, 24, 1008, 32),
}


def model_spec(model: ModelSpec | str) -> ModelSpec:
    """A :class:`ModelSpec`, or the one of :data:`MODELS` named (any case)."""
    if isinstance(model, ModelSpec):
        return model
    if not isinstance(model, str):
        raise TypeError(f"model must be a name or a ModelSpec, got {type(model).__name__}")
    if model.lower() not in MODELS:
        raise ValueError(f"unknown model {model!r}; choose one of {sorted(MODELS)}")
    return MODELS[model.lower()]


def gpu_spec(gpu: GPUSpec | str) -> GPUSpec:
    """A :class:`GPUSpec`, or the one of :data:`GPUS` named (any case)."""
    if isinstance(gpu, GPUSpec):
        return gpu
    if not isinstance(gpu, str):
        raise TypeError(f"gpu must be a name or a GPUSpec, got {type(gpu).__name__}")
    if gpu.lower() not in GPUS:
        raise ValueError(f"unknown GPU {gpu!r}; choose one of {sorted(GPUS)}")
    return GPUS[gpu.lower()]


@dataclass(frozen=True)
class LayerCostModel:
    """Seconds per transformer layer (see the module docstring for the terms)."""

    encode_base: float
    encode_per_token: float
    decode_base: float
    decode_per_sequence: float
    decode_per_context: float
    sync_latency: float = 0.0  # per all-reduce
    sync_per_token: float = 0.0  # per token per all-reduce, at t = 2 (scaled by 2(t-1)/t)

    def __post_init__(self) -> None:
        for name, value in self.__dict__.items():
            real(name, value, low=0.0)

    def _sync(self, tokens: Any, tp: int) -> Any:
        if tp == 1:
            return 0.0
        return 2 * (self.sync_latency + self.sync_per_token * 2 * (tp - 1) / tp * np.asarray(tokens))

    def encode_time(self, tokens: Any, tp: int = 1) -> Any:
        """One layer encoding ``tokens`` prompt tokens, with tensor parallelism ``tp``."""
        tp = positive_int("tp", tp)
        t = np.asarray(sizes("tokens", tokens), dtype=np.float64)
        out = (self.encode_base + self.encode_per_token * t) / tp + self._sync(t, tp)
        return float(out) if out.ndim == 0 else out

    def decode_time(self, batch: Any, context: Any, tp: int = 1) -> Any:
        """One layer of one decode iteration: ``batch`` sequences, ``context`` tokens in all
        (``p + j`` for a sequence of prompt ``p`` that has decoded ``j``; module docstring)."""
        tp = positive_int("tp", tp)
        b = np.asarray(sizes("batch", batch), dtype=np.float64)
        c = np.asarray(sizes("context", context), dtype=np.float64)
        out = (self.decode_base + self.decode_per_sequence * b + self.decode_per_context * c) / tp
        out = out + self._sync(b, tp)
        return float(out) if np.ndim(out) == 0 else out

    def engine_cost(self, layers: int, tp: int = 1, *, prefill_capacity: int = 5000) -> ContextCostModel:
        """The :class:`~llmsched.core.cost.ContextCostModel` of an engine of ``layers`` such layers
        at tensor-parallel degree ``tp`` (one pipeline stage: every layer runs in turn).

        Its prefill stage is the engine encoding the stage's tokens and its decode iteration
        the engine decoding one token for each active sequence, so for any ``tokens``,
        ``batch`` and ``context`` (same convention as :mod:`llmsched.core.cost`)::

            engine_cost(L, t).prefill_time(tokens) == L * encode_time(tokens, t)
            engine_cost(L, t).decode_iteration_time(batch, context) == L * decode_time(batch, context, t)

        up to rounding. The all-reduces are linear in tokens (prefill) and in the batch
        (decode), so they go into the base and per-token (per-sequence) terms;
        ``decode_per_context`` is ``L * decode_per_context / t``. ``prefill_per_square`` is 0:
        this layer model charges encoding linearly in tokens (compute per token, weights
        once), with no term for attention over a prompt's square.

        ``prefill_capacity`` is the most prompt tokens one prefill stage may hold; the layer
        model does not fix it (it is a matter of memory and of the serving system).
        """
        layers = positive_int("layers", layers)
        tp = positive_int("tp", tp)
        if tp == 1:  # no all-reduce: the terms as they are (exact for one layer)
            sync_base = sync_step = 0.0
        else:
            sync_base = 2 * self.sync_latency
            sync_step = 2 * self.sync_per_token * 2 * (tp - 1) / tp
        return ContextCostModel(
            prefill_base=layers * (self.encode_base / tp + sync_base),
            prefill_per_token=layers * (self.encode_per_token / tp + sync_step),
            prefill_per_square=0.0,
            decode_base=layers * (self.decode_base / tp + sync_base),
            decode_per_client=layers * (self.decode_per_sequence / tp + sync_step),
            decode_per_context=layers * self.decode_per_context / tp,
            prefill_capacity=prefill_capacity,
        )

    @classmethod
    def from_specs(
        cls,
        model: ModelSpec | str,
        gpu: GPUSpec | str,
        compute_efficiency: float = 0.5,
        memory_efficiency: float = 0.8,
        kernel_overhead: float = 40e-6,
        sync_latency: float = 20e-6,
    ) -> LayerCostModel:
        """Coefficients from a model's width and a GPU's rates.

        ``compute_efficiency`` and ``memory_efficiency`` are the shares of peak rates that
        kernels sustain; ``kernel_overhead`` is the fixed launch cost of a layer's kernels.
        """
        spec = model_spec(model)
        card = gpu_spec(gpu)
        compute_efficiency = real("compute_efficiency", compute_efficiency, low=0.0, high=1.0, low_open=True)
        memory_efficiency = real("memory_efficiency", memory_efficiency, low=0.0, high=1.0, low_open=True)
        kernel_overhead = real("kernel_overhead", kernel_overhead, low=0.0)
        sync_latency = real("sync_latency", sync_latency, low=0.0)
        h = spec.hidden
        flops = card.fp16_tflops * 1e12 * compute_efficiency
        bandwidth = card.bandwidth_gbs * 1e9 * memory_efficiency
        weights = spec.weight_bytes_per_layer
        per_token_compute = 2.0 * spec.params_per_layer / flops  # a multiply-add per weight
        return cls(
            encode_base=kernel_overhead + weights / bandwidth,
            encode_per_token=per_token_compute,
            decode_base=kernel_overhead + weights / bandwidth,
            decode_per_sequence=per_token_compute,
            decode_per_context=spec.kv_bytes_per_token / bandwidth,
            sync_latency=sync_latency,
            sync_per_token=2.0 * h / (card.link_gbs * 1e9),
        )

    @classmethod
    def fit(
        cls,
        encode_samples: Any,
        decode_samples: Any,
    ) -> LayerCostModel:
        """Least-squares coefficients from measured single-GPU samples.

        ``encode_samples``: rows ``(tokens, seconds)``; ``decode_samples``: rows
        ``(batch, context, seconds)``. Negative fitted terms are clipped to 0.
        """
        enc = real_array("encode_samples", encode_samples, low=0.0, ndim=np.ndim(encode_samples))
        dec = real_array("decode_samples", decode_samples, low=0.0, ndim=np.ndim(decode_samples))
        if enc.ndim != 2 or enc.shape[1] != 2 or enc.shape[0] < 2:
            raise ValueError("encode_samples must be at least two rows of (tokens, seconds)")
        if dec.ndim != 2 or dec.shape[1] != 3 or dec.shape[0] < 3:
            raise ValueError("decode_samples must be at least three rows of (batch, context, seconds)")
        a_enc = np.column_stack([np.ones(len(enc)), enc[:, 0]])
        e = np.linalg.lstsq(a_enc, enc[:, 1], rcond=None)[0]
        a_dec = np.column_stack([np.ones(len(dec)), dec[:, 0], dec[:, 1]])
        d = np.linalg.lstsq(a_dec, dec[:, 2], rcond=None)[0]
        e, d = np.maximum(e, 0.0), np.maximum(d, 0.0)
        return cls(float(e[0]), float(e[1]), float(d[0]), float(d[1]), float(d[2]))


def calibrate_efficiencies(
    model: ModelSpec | str,
    gpu: GPUSpec | str,
    prompt_samples: Any,
    token_samples: Any,
    step: float = 0.01,
) -> dict[str, float]:
    """The compute and memory efficiencies of :meth:`LayerCostModel.from_specs` that fit measured
    times best: a grid search, in steps of ``step`` over ``(0, 1]``, for the least mean
    absolute relative error over every sample (kernel overhead and all-reduce latency at their
    defaults).

    ``prompt_samples`` are rows ``(tp, tokens, seconds)`` (a prompt batch of ``tokens`` on an
    engine of the whole model at tensor parallelism ``tp``), ``token_samples`` rows ``(tp,
    batch, context, seconds)`` (a decode iteration). Returns ``compute_efficiency``,
    ``memory_efficiency``, ``prompt_mape`` and ``token_mape`` (%, the fitted model's mean
    absolute error on each kind) and ``samples``.

    Raises
    ------
    ValueError
        Samples of the wrong shape, a degree that is not a power of two, or a bad step.
    """
    spec = model_spec(model)
    card = gpu_spec(gpu)
    prompts = real_array("prompt_samples", prompt_samples, low=0.0, ndim=2)
    tokens = real_array("token_samples", token_samples, low=0.0, ndim=2)
    if prompts.shape[1] != 3 or tokens.shape[1] != 4 or not len(prompts) or not len(tokens):
        raise ValueError(
            "prompt_samples must be rows of (tp, tokens, seconds) and token_samples rows of "
            "(tp, batch, context, seconds), at least one each"
        )
    if np.any(prompts[:, 2] <= 0) or np.any(tokens[:, 3] <= 0):
        raise ValueError("every sample's seconds must be > 0")
    step = real("step", step, low=0.0, high=0.5, low_open=True)
    degrees = sorted({int(d) for d in np.concatenate([prompts[:, 0], tokens[:, 0]])})
    for d in degrees:
        if d < 1 or d & (d - 1):
            raise ValueError(f"tensor-parallel degrees must be powers of two, got {d}")
    grid = np.round(np.arange(step, 1.0 + 1e-9, step), 10)
    grid = grid[(grid > 0) & (grid <= 1.0)]

    def errors(compute: float, memory: float) -> tuple[np.ndarray, np.ndarray]:
        layer = LayerCostModel.from_specs(spec, card, compute, memory)
        p_err, t_err = np.empty(len(prompts)), np.empty(len(tokens))
        for d in degrees:
            engine = layer.engine_cost(spec.layers, d)
            on = prompts[:, 0] == d
            p_err[on] = np.asarray(engine.prefill_time(prompts[on, 1])) / prompts[on, 2] - 1.0
            on = tokens[:, 0] == d
            t_err[on] = (
                np.asarray(engine.decode_iteration_time(tokens[on, 1], tokens[on, 2])) / tokens[on, 3] - 1.0
            )
        return p_err, t_err

    best = (math.inf, 1.0, 1.0)
    for compute in grid:
        for memory in grid:
            p_err, t_err = errors(float(compute), float(memory))
            loss = float(np.mean(np.abs(np.concatenate([p_err, t_err]))))
            if loss < best[0]:
                best = (loss, float(compute), float(memory))
    _, compute, memory = best
    p_err, t_err = errors(compute, memory)
    return {
        "compute_efficiency": compute,
        "memory_efficiency": memory,
        "prompt_mape": float(100 * np.mean(np.abs(p_err))),
        "token_mape": float(100 * np.mean(np.abs(t_err))),
        "samples": int(len(prompts) + len(tokens)),
    }
