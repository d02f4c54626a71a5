"""XSimulator: throughput and latency of RRA and WAA schedules from length distributions.

ExeGPT (Sec. 6) estimates a schedule's throughput and latency from the distributions of
input and output lengths, not from a trace. This module does the same for its two schedules:

RRA (round-robin allocation)
    Every GPU holds an equal share of the layers; the pipeline has ``S`` stages (fewer when
    a subset of the GPUs runs tensor-parallel) and ``S`` mini-batches in flight. Each
    mini-batch repeats one encoding of ``B_E`` new prompts and ``N_D`` decode iterations.
    A query of output length ``s`` finishes in its ``ceil(s / N_D)``-th decoding phase, at
    iteration ``U = 1 + (s - 1) mod N_D`` of that phase (``U = s`` when ``s <= N_D``), the
    paper's ``P_D(U|S)``. The steady decode batch ``B_D`` holds every query that has not
    finished; by Little's law it is ``B_E * E[ceil(S / N_D)]``, and the batch shrinks
    through the phase as ``P_D(U)`` says. The paper mixes ``P_D(U|S)`` with ``P_D(S)``,
    which gives ``B_D = B_E / E[1 / ceil(S / N_D)]`` instead; ``weights="paper"`` keeps
    that reading. The timeline is a synchronous pipeline: in each tick every stage works on
    one mini-batch's item (an encoding or a decode iteration) and the tick lasts as long as
    the slowest stage's item, so a stage decoding waits for a neighbour encoding (the
    bubbles of the paper's Fig. 4a).

WAA (workload-aware allocation)
    ``N_E`` GPUs encode and the other ``N - N_E`` decode, each side a pipeline of its own.
    The encoder turns out one batch of ``B_E`` prompts per encoder tick; the decoder keeps
    ``B_D = B_E * E[S]`` sequences, split into ``B_m`` micro-batches that flow through its
    stages, and merges a new encoded batch after every round (one token for every
    sequence). WAA-C splits the GPUs in proportion to encode and decode time, WAA-M so that
    the busiest GPU's memory is smallest. For a decoder-only model both sides hold a copy
    of the weights.

Partial tensor parallelism: a degree ``t`` applied to ``k`` GPUs (a multiple of ``t``) turns
them into ``k / t`` stages, so the pipeline is shallower (lower latency); the layers are
split so that every stage takes the same time on a decode iteration, which gives a
tensor-parallel stage about ``t`` times the layers of a single-GPU stage, less what its
all-reduces cost. In WAA it applies to the decoder GPUs, and must fit in them.

WAA's decoder round follows the accounting of the paper's Fig. 4(b, c): the round ends when
its last micro-batch leaves the last stage, and the next round (with the newly encoded
batch merged in) starts after it, so a round takes ``pass + (B_m - 1) * tick``; a pipeline
that never drains would be faster by up to a third for many micro-batches.

Context: a decode iteration reads, for each sequence, the ``p + j`` tokens in its cache when
the iteration starts (prompt ``p``, ``j`` tokens decoded before), the convention of
:mod:`llmsched.core.cost` and of :class:`~llmsched.exegpt.layers.LayerCostModel`. Averaged over
the decode tokens of a sequence of output length ``s`` (``j = 0 .. s-1``) and over the
lengths, a decoding sequence holds ``mean_context = E[p] + E[s (s-1)] / (2 E[s])`` tokens; a
batch of ``B`` is charged ``decode_time(B, B * mean_context)``. Over an RRA cycle (population
weights, below) the batches sum to ``B_E E[s]`` decode tokens, so the charged context is the
expected context of the ``B_E`` requests, :func:`llmsched.core.cost.request_context` of each: the
context the event simulator prices. Memory counts one token more per sequence
(``mean_cached``): the iteration writes the key and value of the token it decodes.

Latency is the time to generate a sequence of the 99th-percentile output length, from the
start of its encoding (RRA: the worst of the ``S`` mini-batches; WAA: including the wait
for the next merge into the decoder). Throughput is in sequences per second. A
configuration whose keys and values do not fit in GPU memory gets latency ``inf``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from llmsched.core.checks import choice, flag, instance, positive_int, real, real_array, text, token_counts
from llmsched.core.cost import ContextCostModel, LinearCostModel
from llmsched.exegpt.layers import GPUSpec, LayerCostModel, ModelSpec, gpu_spec, model_spec

__all__ = [
    "DEFAULT_GPUS",
    "MAX_BATCH",
    "MAX_GPUS",
    "MAX_ITERATIONS",
    "MAX_LENGTH",
    "MAX_MICRO_BATCHES",
    "Estimate",
    "LengthDistribution",
    "XSimulator",
]

# Sizes beyond these are refused up front. XSimulator holds arrays over the output lengths
# and over the decode iterations of a phase times the pipeline stages, and the search loops
# over GPU counts and batch sizes; past these bounds that exhausts memory or time, far
# beyond any deployment ExeGPT studies (48 GPUs, batches of 128, outputs of 640 tokens).
MAX_GPUS = 1024
MAX_LENGTH = 10_000_000  # longest length a truncated-normal distribution spans
MAX_ITERATIONS = 10_000  # N_D, decode iterations between encodings
MAX_BATCH = 4096  # B_E searched by the configuration search
MAX_MICRO_BATCHES = 64  # B_m searched by the configuration search

# ExeGPT's Table 2: the GPUs each model was deployed on (A40 cluster unless noted).
DEFAULT_GPUS = {
    "t5-11b": ("a40", 8),
    "opt-13b": ("a40", 4),
    "gpt3-39b": ("a40", 16),
    "gpt3-101b": ("a100", 16),
    "gpt3-175b": ("a40", 32),
    "gpt3-341b": ("a40", 48),
}


@dataclass(frozen=True, eq=False)
class LengthDistribution:
    """A distribution over integer token lengths: ``lengths`` ascending, ``probs`` summing to 1."""

    lengths: np.ndarray
    probs: np.ndarray

    def __post_init__(self) -> None:
        lengths = np.asarray(self.lengths)
        probs = real_array("probs", self.probs, ndim=np.ndim(self.probs))
        if lengths.ndim != 1 or lengths.shape != probs.shape or len(lengths) == 0:
            raise ValueError(
                f"lengths and probs must be non-empty 1-d arrays of one length, got shapes "
                f"{lengths.shape} and {probs.shape}"
            )
        if not np.issubdtype(lengths.dtype, np.integer):
            raise ValueError(f"lengths must be integers >= 1, got dtype {lengths.dtype}")
        if lengths.min() < 1:
            raise ValueError(f"lengths must be integers >= 1, got {lengths.min().item()!r}")
        if np.any(np.diff(lengths) <= 0):
            raise ValueError("lengths must be strictly increasing")
        if np.any(probs < 0) or not math.isclose(float(probs.sum()), 1.0, rel_tol=1e-9):
            raise ValueError(f"probs must be non-negative and sum to 1, got sum {float(probs.sum())!r}")
        lengths = lengths.astype(np.int64)  # a copy: the caller's array stays the caller's
        probs = np.array(probs, dtype=np.float64)
        lengths.setflags(write=False)
        probs.setflags(write=False)
        object.__setattr__(self, "lengths", lengths)
        object.__setattr__(self, "probs", probs)

    @classmethod
    def truncated_normal(cls, mean: float, sd: float, maximum: int) -> LengthDistribution:
        """The law :func:`llmsched.workloads.truncated_normal_lengths` draws from: a normal
        truncated to [0.5, max + 0.5] and rounded to the nearest integer."""
        from scipy.stats import norm

        from llmsched.workloads import LengthSpec

        positive_int("maximum", maximum, maximum=MAX_LENGTH)
        real("mean", mean, low=1.0, high=float(maximum))
        real("sd", sd, low=0.0, low_open=True)
        spec = LengthSpec(mean, sd, maximum)
        edges = np.arange(spec.max + 1, dtype=np.float64) + 0.5
        cdf = norm.cdf(edges, loc=spec.mean, scale=spec.sd)
        mass = np.diff(cdf)
        return cls(np.arange(1, spec.max + 1), mass / mass.sum())

    @classmethod
    def from_samples(cls, samples: Any) -> LengthDistribution:
        """The empirical distribution of observed lengths (whole token counts >= 1)."""
        values = token_counts("samples", samples)
        if len(values) == 0:
            raise ValueError("samples must be a non-empty 1-d array of lengths")
        lengths, counts = np.unique(values, return_counts=True)
        return cls(lengths, counts / counts.sum())

    @property
    def mean(self) -> float:
        return float(self.lengths @ self.probs)

    @property
    def max(self) -> int:
        return int(self.lengths[-1])

    def quantile(self, q: float) -> int:
        """The smallest length whose cumulative probability reaches ``q``."""
        q = real("q", q, low=0.0, high=1.0, low_open=True)
        index = int(np.searchsorted(np.cumsum(self.probs), q - 1e-12))
        return int(self.lengths[min(index, len(self.lengths) - 1)])

    def expect(self, values: Any) -> float:
        """The expectation of ``values`` (one per length) under this distribution."""
        arr = real_array("values", values)
        if arr.shape != self.probs.shape:
            raise ValueError(f"values has {arr.size} entries; it needs one per length ({self.probs.size})")
        return float(arr @ self.probs)


@dataclass(frozen=True)
class Estimate:
    """XSimulator's figures for one configuration.

    ``fits`` is False when the keys and values do not fit in memory (``latency`` is then
    ``inf``; ``throughput`` is what the schedule would reach with the memory).
    """

    schedule: str
    throughput: float  # sequences per second
    latency: float  # seconds, for the quantile-length sequence
    encode_batch: float
    decode_batch: float
    stages: int
    encoder_gpus: int
    memory_gb: float  # on the busiest GPU
    fits: bool


def _balanced_shares(singles: int, groups: int, single_time: float, group_time: float) -> tuple[float, float]:
    """Shares of the layers for one single-GPU stage and one tensor-parallel stage, chosen so
    that every stage takes the same time when a layer takes ``single_time`` on one GPU and
    ``group_time`` on a tensor-parallel group."""
    if groups == 0:
        return 1.0 / singles, 0.0
    if singles == 0:
        return 0.0, 1.0 / groups
    stage = 1.0 / (singles / single_time + groups / group_time)
    return stage / single_time, stage / group_time


def _tp_stages(gpus: int, degree: int, tp_gpus: int) -> tuple[int, int]:
    """(single-GPU stages, tensor-parallel stages) of ``gpus`` GPUs."""
    if degree == 1 or tp_gpus == 0:
        return gpus, 0
    usable = min(tp_gpus, gpus - gpus % degree)
    return gpus - usable, usable // degree


class XSimulator:
    """Throughput and latency of RRA and WAA configurations for one model, GPU set and task.

    Parameters
    ----------
    cost
        Seconds per layer (:class:`~llmsched.exegpt.layers.LayerCostModel`); context as in
        the module docstring (``p + j`` per sequence).
    inputs, outputs
        Distributions of input (prompt) and output lengths, taken as independent.
    gpus
        GPUs the model runs on.
    layers
        Transformer layers. For an encoder-decoder model (``encoder_decoder=True``) half of
        them encode and half decode; otherwise every layer does both.
    model
        The model's sizes, for memory (with ``gpu_memory_gb``): fp16 weights per layer and
        keys and values per token. Leave either as None to ignore memory.
    gpu_memory_gb
        Memory of one GPU; ``memory_fraction`` of it may hold weights and keys/values.
    gpus_per_node
        Largest tensor-parallel degree (TP does not cross machines).
    quantile
        Latency is for a sequence of this quantile of the output length.
    weights
        ``"population"`` (default) or ``"paper"``: how ``P_D(U|S)`` is mixed (module docs).
    """

    def __init__(
        self,
        cost: LayerCostModel,
        inputs: LengthDistribution,
        outputs: LengthDistribution,
        gpus: int,
        layers: int,
        *,
        encoder_decoder: bool = False,
        model: ModelSpec | None = None,
        gpu_memory_gb: float | None = None,
        memory_fraction: float = 0.9,
        gpus_per_node: int = 8,
        quantile: float = 0.99,
        weights: Literal["population", "paper"] = "population",
        name: str = "",
    ):
        if not isinstance(cost, LayerCostModel):
            raise TypeError(f"cost must be a LayerCostModel, got {type(cost).__name__}")
        for label, dist in (("inputs", inputs), ("outputs", outputs)):
            if not isinstance(dist, LengthDistribution):
                raise TypeError(f"{label} must be a LengthDistribution, got {type(dist).__name__}")
        self.gpus = positive_int("gpus", gpus, maximum=MAX_GPUS)
        self.layers = positive_int("layers", layers)
        flag("encoder_decoder", encoder_decoder)
        if encoder_decoder and layers % 2:
            raise ValueError(f"an encoder-decoder model needs an even layer count, got {layers}")
        self.gpus_per_node = positive_int("gpus_per_node", gpus_per_node)
        memory_fraction = real("memory_fraction", memory_fraction, low=0.0, high=1.0, low_open=True)
        quantile = real("quantile", quantile, low=0.0, high=1.0, low_open=True)
        choice("weights", weights, ("population", "paper"))
        text("name", name)
        if (model is None) != (gpu_memory_gb is None):
            raise ValueError("give both model and gpu_memory_gb to model memory, or neither")
        if model is not None and not isinstance(model, ModelSpec):
            raise TypeError(f"model must be a ModelSpec, got {type(model).__name__}")
        if gpu_memory_gb is not None:
            gpu_memory_gb = real("gpu_memory_gb", gpu_memory_gb, low=0.0, low_open=True)
        self.cost = cost
        self.inputs = inputs
        self.outputs = outputs
        self.encoder_decoder = bool(encoder_decoder)
        self.model = model
        self.memory_bytes = (
            None if gpu_memory_gb is None else float(gpu_memory_gb) * 1e9 * float(memory_fraction)
        )
        self.quantile_length = outputs.quantile(quantile)
        self.weights = weights
        self.name = name
        self.enc_layers = layers // 2 if encoder_decoder else layers
        self.dec_layers = layers // 2 if encoder_decoder else layers
        s = outputs.lengths.astype(np.float64)
        self.mean_input = inputs.mean
        self.mean_output = outputs.mean
        # Mean context of a decoding sequence, weighted by the iterations it is decoding: the
        # p + j tokens in its cache as an iteration starts, j = 0 .. s-1 (module docstring).
        self.mean_context = self.mean_input + outputs.expect(s * (s - 1)) / (2 * self.mean_output)
        # Keys and values held per decoding sequence once the iteration has written its token.
        self.mean_cached = self.mean_context + 1.0
        self._phase_cache: dict[int, tuple[float, np.ndarray]] = {}

    # ------------------------------------------------------------------ construction
    @classmethod
    def for_task(
        cls,
        model: str | ModelSpec = "opt-13b",
        task: str = "S",
        gpu: str | GPUSpec | None = None,
        gpus: int | None = None,
        cost: LayerCostModel | None = None,
        **kwargs: Any,
    ) -> XSimulator:
        """A model of Table 1 on its Table 2 GPUs, for a task of Table 3.

        The cost model defaults to :meth:`LayerCostModel.from_specs` of the model and GPU.
        """
        from llmsched.workloads import EXEGPT_TASKS

        spec = model_spec(model)
        key = model.lower() if isinstance(model, str) else ""
        default_gpu, default_count = DEFAULT_GPUS.get(key, ("a40", 4))
        card = gpu_spec(default_gpu if gpu is None else gpu)
        if gpus is not None:
            gpus = positive_int("gpus", gpus, maximum=MAX_GPUS)
        if cost is not None:
            instance("cost", cost, LayerCostModel, "a LayerCostModel or None")
        tkey = task.upper() if isinstance(task, str) else task
        if not isinstance(tkey, str) or tkey not in EXEGPT_TASKS:
            raise ValueError(f"unknown ExeGPT task {task!r}; choose one of {sorted(EXEGPT_TASKS)}")
        spec_in, spec_out = EXEGPT_TASKS[tkey]
        return cls(
            cost if cost is not None else LayerCostModel.from_specs(spec, card),
            LengthDistribution.truncated_normal(spec_in.mean, spec_in.sd, spec_in.max),
            LengthDistribution.truncated_normal(spec_out.mean, spec_out.sd, spec_out.max),
            default_count if gpus is None else gpus,
            spec.layers,
            encoder_decoder=spec.encoder_decoder,
            model=spec,
            gpu_memory_gb=card.memory_gb,
            name=f"{spec.name} on {default_count if gpus is None else gpus}x{card.name}, task {tkey}",
            **kwargs,
        )

    @classmethod
    def one_engine(
        cls,
        cost: LinearCostModel | ContextCostModel,
        task: str = "S",
        weights: Literal["population", "paper"] = "population",
    ) -> XSimulator:
        """One GPU, one layer, no memory limit, timed by a :class:`~llmsched.LinearCostModel`
        or a :class:`~llmsched.ContextCostModel`: the setting in which XSimulator and the
        event simulator describe the same engine.

        Prefill is the encoding (``prefill_base``, ``prefill_per_token``); a decode iteration
        charges ``decode_base``, ``decode_per_client`` per sequence and, for a context model,
        ``decode_per_context`` per context token (``p + j`` per sequence in both models). A
        linear model reads no context (``decode_per_context`` 0), so a context model with
        ``decode_per_context = 0`` gives the very estimates of its
        :meth:`~llmsched.ContextCostModel.linear` model.
        :meth:`~llmsched.exegpt.layers.LayerCostModel.engine_cost` is the converse.

        Raises
        ------
        TypeError
            If ``cost`` is neither a ``LinearCostModel`` nor a ``ContextCostModel``.
        ValueError
            If a context model prices prompts by their squares (``prefill_per_square`` > 0):
            the layer model's encoding is linear in tokens and cannot carry that term; if it
            has a batch table (``decode_by_batch``); or if ``task`` is not an ExeGPT task.
        """
        from llmsched.workloads import EXEGPT_TASKS

        if isinstance(cost, LinearCostModel):
            per_context = 0.0
        elif isinstance(cost, ContextCostModel):
            if cost.prefill_per_square > 0:
                raise ValueError(
                    f"cost has prefill_per_square={cost.prefill_per_square!r} > 0, but the layer "
                    "model's encoding is linear in tokens (no term for a prompt's square); "
                    "XSimulator takes a ContextCostModel with prefill_per_square=0"
                )
            if cost.decode_by_batch is not None:
                raise ValueError(
                    "cost has a batch table (decode_by_batch), but the layer model's decode time "
                    "is linear in the batch; XSimulator takes a ContextCostModel without one"
                )
            per_context = cost.decode_per_context
        else:
            raise TypeError(
                f"cost must be a LinearCostModel or a ContextCostModel, got {type(cost).__name__}"
            )
        key = task.upper() if isinstance(task, str) else task
        if key not in EXEGPT_TASKS:
            raise ValueError(f"unknown ExeGPT task {task!r}; choose one of {sorted(EXEGPT_TASKS)}")
        spec_in, spec_out = EXEGPT_TASKS[key]
        layer = LayerCostModel(
            cost.prefill_base, cost.prefill_per_token, cost.decode_base, cost.decode_per_client, per_context
        )
        return cls(
            layer,
            LengthDistribution.truncated_normal(spec_in.mean, spec_in.sd, spec_in.max),
            LengthDistribution.truncated_normal(spec_out.mean, spec_out.sd, spec_out.max),
            gpus=1,
            layers=1,
            weights=weights,
            name=f"one engine, task {key}",
        )

    # ------------------------------------------------------------------ helpers
    def tp_degrees(self, gpus: int | None = None) -> list[int]:
        """Tensor-parallel degrees that fit in a node and in ``gpus`` (default: all)."""
        limit = min(self.gpus if gpus is None else positive_int("gpus", gpus), self.gpus_per_node)
        return [d for d in (1, 2, 4, 8, 16) if d <= limit]

    def _check_tp(self, degree: int, tp_gpus: int, gpus: int) -> None:
        positive_int("tp_degree", degree)
        positive_int("tp_gpus", tp_gpus, minimum=0)
        if degree > self.gpus_per_node or degree & (degree - 1):
            raise ValueError(
                f"tp_degree must be a power of two up to {self.gpus_per_node} (a node), got {degree}"
            )
        if degree > gpus:
            raise ValueError(f"tp_degree {degree} is more than the {gpus} GPUs it would run on")
        if tp_gpus % degree or tp_gpus > self.gpus:
            raise ValueError(
                f"tp_gpus must be a multiple of tp_degree={degree} up to {self.gpus}, got {tp_gpus}"
            )

    def _gpu_bytes(self, layers: float, tokens: float) -> float:
        """Bytes on a GPU holding ``layers`` layers and ``tokens`` tokens' keys and values."""
        assert self.model is not None
        return layers * (self.model.weight_bytes_per_layer + self.model.kv_bytes_per_token * tokens)

    def _fits(self, *per_gpu_bytes: float) -> tuple[bool, float]:
        if self.memory_bytes is None:
            return True, 0.0
        peak = max(per_gpu_bytes)
        return peak <= self.memory_bytes, peak / 1e9

    def _phase(self, iterations: int) -> tuple[float, np.ndarray]:
        """(B_D / B_E, active share of B_D at each iteration 1..N_D of a decoding phase)."""
        cached = self._phase_cache.get(iterations)
        if cached is not None:
            return cached
        s = self.outputs.lengths
        p = self.outputs.probs
        phases = -(-s // iterations)  # ceil(S / N_D): decoding phases a query stays
        finish = np.where(s <= iterations, s, 1 + (s - 1) % iterations)  # P_D(U|S)'s U
        if self.weights == "population":
            ratio = float(phases @ p)  # B_D / B_E by Little's law
            p_u: np.ndarray = np.bincount(finish - 1, weights=p, minlength=iterations) / ratio
        else:  # the paper's mixture sum_S P_D(U|S) P_D(S)
            p_u = np.bincount(finish - 1, weights=p / phases, minlength=iterations)
            ratio = 1.0 / float(p_u.sum())
        done_before = np.concatenate(([0.0], np.cumsum(p_u)[:-1]))
        active = np.clip(1.0 - done_before, 0.0, 1.0)
        self._phase_cache[iterations] = (ratio, active)
        return ratio, active

    # ------------------------------------------------------------------ RRA
    def rra(self, batch: int, iterations: int, tp_degree: int = 1, tp_gpus: int = 0) -> Estimate:
        """RRA with encoder batch ``B_E = batch`` and ``N_D = iterations`` decode iterations
        between encodings; ``tp_gpus`` GPUs run tensor-parallel of degree ``tp_degree``."""
        b_e = positive_int("batch", batch)
        n_d = positive_int("iterations", iterations, maximum=MAX_ITERATIONS)
        self._check_tp(tp_degree, tp_gpus, self.gpus)
        singles, groups = _tp_stages(self.gpus, tp_degree, tp_gpus)
        stages = singles + groups
        if stages > self.enc_layers:
            raise ValueError(
                f"RRA on {self.gpus} GPUs with tp_gpus={tp_gpus} of degree {tp_degree} has {stages} "
                f"pipeline stages, more than the model's {self.enc_layers} layers"
            )
        ratio, active = self._phase(n_d)
        b_d = b_e * ratio
        enc_tokens = b_e * self.mean_input
        dec_batch = b_d * active
        c = self.cost
        t = tp_degree
        # Layers per stage balance the decode iteration of the mean batch across the stages.
        mean_batch = float(dec_batch.mean())
        single_share, group_share = _balanced_shares(
            singles,
            groups,
            c.decode_time(mean_batch, mean_batch * self.mean_context),
            c.decode_time(mean_batch, mean_batch * self.mean_context, t),
        )
        # Item durations on each kind of stage (the slowest sets the tick). An iteration that
        # finds no sequence left is skipped: with the active count taken as Poisson, the
        # expected time is d(b) - exp(-b) d(0) for a cost d linear in the count.
        empty = np.exp(-dec_batch)
        durations = np.zeros(n_d + 1)
        if singles:
            durations[0] = single_share * self.enc_layers * c.encode_time(enc_tokens)
            durations[1:] = (
                single_share
                * self.dec_layers
                * (c.decode_time(dec_batch, dec_batch * self.mean_context) - empty * c.decode_time(0, 0))
            )
        if groups:
            enc_tp = group_share * self.enc_layers * c.encode_time(enc_tokens, t)
            dec_tp = (
                group_share
                * self.dec_layers
                * (
                    c.decode_time(dec_batch, dec_batch * self.mean_context, t)
                    - empty * c.decode_time(0, 0, t)
                )
            )
            durations[0] = max(durations[0], enc_tp)
            durations[1:] = np.maximum(durations[1:], dec_tp)
        # Tick tau (r = tau mod S, q = tau div S): stages up to r run item q, the rest item q-1.
        previous = np.roll(durations, 1)
        ticks = np.repeat(np.maximum(durations, previous), stages)
        ticks[stages - 1 :: stages] = durations
        cycle = float(ticks.sum())
        throughput = stages * b_e / cycle
        # The quantile sequence: its encoding, then s decode iterations, sitting through the
        # encodings of the later phases; each item takes S ticks. Worst mini-batch.
        s = self.quantile_length
        items = 1 + s + (-(-s // n_d) - 1)
        span = items * stages
        period = len(ticks)
        whole, rest = divmod(span, period)
        prefix = np.concatenate(([0.0], np.cumsum(np.concatenate((ticks, ticks)))))
        starts = np.arange(stages)  # mini-batch m starts its encoding at tick m
        partial = prefix[starts + rest] - prefix[starts]
        latency = whole * cycle + float(partial.max())
        fits, memory = True, 0.0
        if self.model is not None:
            layers = self.enc_layers + (self.dec_layers if self.encoder_decoder else 0)
            tokens = stages * b_d * self.mean_cached
            fits, memory = self._fits(
                self._gpu_bytes(single_share * layers, tokens),
                self._gpu_bytes(group_share * layers / t, tokens),
            )
        return Estimate(
            "RRA",
            throughput,
            latency if fits else math.inf,
            float(b_e),
            float(b_d),
            stages,
            0,
            memory,
            fits,
        )

    # ------------------------------------------------------------------ WAA
    def encoder_gpus(self, batch: int, allocation: Literal["C", "M"]) -> int:
        """GPUs WAA gives the encoder for encoder batch ``batch`` (WAA-C or WAA-M)."""
        b_e = positive_int("batch", batch)
        choice("allocation", allocation, ("C", "M"))
        if self.gpus < 2:
            raise ValueError("WAA needs at least two GPUs (one to encode, one to decode)")
        b_d = b_e * self.mean_output
        if allocation == "C":
            enc = self.enc_layers * self.cost.encode_time(b_e * self.mean_input)
            dec = self.dec_layers * self.cost.decode_time(b_d, b_d * self.mean_context)
            return min(max(int(self.gpus * enc / (enc + dec)), 1), self.gpus - 1)
        if self.model is None:
            raise ValueError("WAA-M needs a memory model (model and gpu_memory_gb)")
        best, best_peak = 1, math.inf
        for n_e in range(1, self.gpus):
            peak = max(
                self._gpu_bytes(self.enc_layers / n_e, b_e * self.mean_input),
                self._gpu_bytes(self.dec_layers / (self.gpus - n_e), b_d * self.mean_cached),
            )
            if peak < best_peak:
                best, best_peak = n_e, peak
        return best

    def waa(
        self,
        batch: int,
        micro_batches: int = 1,
        tp_degree: int = 1,
        tp_gpus: int = 0,
        allocation: Literal["C", "M"] = "C",
    ) -> Estimate:
        """WAA-C or WAA-M with encoder batch ``B_E = batch``, ``B_m = micro_batches`` decoder
        micro-batches, and ``tp_gpus`` decoder GPUs tensor-parallel of degree ``tp_degree``
        (fewer if the decoder has fewer GPUs)."""
        b_e = positive_int("batch", batch)
        b_m = positive_int("micro_batches", micro_batches)
        n_e = self.encoder_gpus(b_e, allocation)
        n_dec = self.gpus - n_e
        self._check_tp(tp_degree, tp_gpus, self.gpus)
        if tp_gpus > n_dec:
            raise ValueError(
                f"WAA-{allocation} with B_E={b_e} decodes on {n_dec} GPU(s); tp_gpus={tp_gpus} does not fit"
            )
        singles, groups = _tp_stages(n_dec, tp_degree, tp_gpus)
        if n_e > self.enc_layers or singles + groups > self.dec_layers:
            raise ValueError(
                f"WAA-{allocation} with B_E={b_e} has {n_e} encoder and {singles + groups} decoder "
                f"stages; the model has {self.enc_layers} layers"
            )
        c = self.cost
        enc_tokens = b_e * self.mean_input
        enc_pass = self.enc_layers * c.encode_time(enc_tokens)
        enc_tick = enc_pass / n_e
        b_d = b_e * self.mean_output
        micro = b_d / b_m
        per_layer = c.decode_time(micro, micro * self.mean_context)
        per_layer_tp = c.decode_time(micro, micro * self.mean_context, tp_degree)
        single_share, group_share = _balanced_shares(singles, groups, per_layer, per_layer_tp)
        ticks = [single_share * self.dec_layers * per_layer] if singles else []
        if groups:
            ticks.append(group_share * self.dec_layers * per_layer_tp)
        passes = self.dec_layers * (singles * single_share * per_layer + groups * group_share * per_layer_tp)
        round_time = passes + (b_m - 1) * max(ticks)
        step = max(round_time, enc_tick)  # the decoder merges one encoded batch per round
        throughput = b_e / step
        latency = enc_pass + step + self.quantile_length * step
        fits, memory = True, 0.0
        if self.model is not None:
            fits, memory = self._fits(
                self._gpu_bytes(self.enc_layers / n_e, enc_tokens),
                self._gpu_bytes(single_share * self.dec_layers, b_d * self.mean_cached),
                self._gpu_bytes(group_share * self.dec_layers / tp_degree, b_d * self.mean_cached),
            )
        return Estimate(
            f"WAA-{allocation}",
            throughput,
            latency if fits else math.inf,
            float(b_e),
            float(b_d),
            n_e + singles + groups,
            n_e,
            memory,
            fits,
        )

    # ------------------------------------------------------------------ baseline
    def fixed_batch(self, batch: int) -> Estimate:
        """A FasterTransformer-like static batch: tensor parallelism within a node, pipeline
        across nodes, ``batch`` sequences encoded together and decoded to the quantile length
        without early exits (the sweep the paper draws its latency bounds from)."""
        b = positive_int("batch", batch)
        t = min(self.gpus, self.gpus_per_node)
        t = 1 << (t.bit_length() - 1)  # a power of two
        stages = self.gpus // t
        layers_per_stage_enc = self.enc_layers / stages
        layers_per_stage_dec = self.dec_layers / stages
        c = self.cost
        s = self.quantile_length
        enc = stages * layers_per_stage_enc * c.encode_time(b * self.mean_input, t)
        decoded = np.arange(s)  # tokens decoded before each iteration: context p + j
        dec = stages * layers_per_stage_dec * c.decode_time(b, b * (self.mean_input + decoded), t)
        latency = float(enc + np.sum(dec))
        fits, memory = True, 0.0
        if self.model is not None:
            used = stages * t  # GPUs the baseline runs on (a whole number of TP groups)
            layers = (self.enc_layers + (self.dec_layers if self.encoder_decoder else 0)) / used
            fits, memory = self._fits(self._gpu_bytes(layers, b * (self.mean_input + s)))
        return Estimate(
            "fixed", b / latency, latency if fits else math.inf, float(b), float(b), stages, 0, memory, fits
        )

    def fixed_batch_sweep(self, step: int = 4, limit: int = 4096) -> list[Estimate]:
        """:meth:`fixed_batch` for batch sizes ``step, 2 step, ...`` while they fit in memory."""
        step = positive_int("step", step, maximum=MAX_BATCH)
        limit = positive_int("limit", limit, minimum=step, maximum=MAX_BATCH)
        out = []
        for b in range(step, limit + 1, step):
            est = self.fixed_batch(b)
            if not est.fits:
                break
            out.append(est)
        if not out:
            raise ValueError(
                f"no fixed batch of {step} or more fits in memory on {self.name or 'this setup'}"
            )
        return out

    def latency_bounds(self, percentiles: tuple[float, ...] = (10, 30, 70)) -> list[float]:
        """The paper's latency bounds: percentiles of the fixed-batch sweep's latencies, then inf."""
        if isinstance(percentiles, (str, bytes)) or not isinstance(percentiles, Iterable):
            raise TypeError(f"percentiles must be a sequence of numbers in [0, 100], got {percentiles!r}")
        percentiles = tuple(
            real(f"percentiles[{i}]", q, low=0.0, high=100.0) for i, q in enumerate(percentiles)
        )
        latencies = [e.latency for e in self.fixed_batch_sweep()]
        return [float(np.percentile(latencies, q)) for q in percentiles] + [math.inf]
