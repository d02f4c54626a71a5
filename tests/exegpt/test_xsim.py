"""XSimulator (RRA, WAA, the fixed-batch baseline) and the length distributions it reads."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsched import ContextCostModel, LinearCostModel
from llmsched.core.cost import request_context
from llmsched.exegpt import LayerCostModel, LengthDistribution, XSimulator, optimize
from llmsched.exegpt.xsim import MAX_BATCH, MAX_GPUS, MAX_ITERATIONS, MAX_LENGTH
from llmsched.workloads import EXEGPT_TASKS, truncated_normal_lengths

SIM_S = XSimulator.for_task("opt-13b", "S")


def _one_engine(weights: str = "population") -> XSimulator:
    return XSimulator.one_engine(LinearCostModel.paper(), "S", weights=weights)  # type: ignore[arg-type]


@pytest.mark.parametrize("task", sorted(EXEGPT_TASKS))
def test_truncated_normal_matches_the_sampler(task: str) -> None:
    """The distribution is the law the workload generator samples: means and 99th
    percentiles of 200k draws agree."""
    for spec in EXEGPT_TASKS[task]:
        dist = LengthDistribution.truncated_normal(spec.mean, spec.sd, spec.max)
        draws = truncated_normal_lengths(spec, 200_000, seed=1)
        assert dist.mean == pytest.approx(draws.mean(), rel=0.01)
        assert abs(dist.quantile(0.99) - np.quantile(draws, 0.99)) <= 1
        assert dist.max == spec.max


def test_length_distribution_rejects_bad_input() -> None:
    """Unsorted lengths, probabilities off 1 and empty samples are refused."""
    with pytest.raises(ValueError, match="strictly increasing"):
        LengthDistribution(np.array([3, 2]), np.array([0.5, 0.5]))
    with pytest.raises(ValueError, match="sum to 1"):
        LengthDistribution(np.array([1, 2]), np.array([0.5, 0.4]))
    with pytest.raises(ValueError, match="non-empty"):
        LengthDistribution.from_samples([])
    with pytest.raises(ValueError, match="q must be"):
        LengthDistribution.from_samples([1, 2]).quantile(0)


def test_length_distribution_owns_read_only_arrays() -> None:
    """The distribution keeps its own read-only copies: the caller's later writes do not reach
    it (its probs used to be the caller's array) and its own arrays refuse writes."""
    lengths, probs = np.array([1, 2]), np.array([0.5, 0.5])
    dist = LengthDistribution(lengths, probs)
    probs[0], lengths[0] = 0.9, 7
    assert dist.probs.tolist() == [0.5, 0.5] and dist.lengths.tolist() == [1, 2]
    assert not dist.probs.flags.writeable and not dist.lengths.flags.writeable


def test_population_decode_batch_follows_littles_law() -> None:
    """RRA's decode batch is B_E * E[ceil(S / N_D)]; the paper's mixture gives B_E / E[1/ceil]."""
    for weights in ("population", "paper"):
        sim = _one_engine(weights)
        s, p = sim.outputs.lengths, sim.outputs.probs
        for n_d in (1, 4, 7, 30, 80):
            phases = -(-s // n_d)
            expected = 10 * float(phases @ p) if weights == "population" else 10 / float((1 / phases) @ p)
            assert sim.rra(10, n_d).decode_batch == pytest.approx(expected)


def test_rra_on_one_engine_is_the_sum_of_its_items() -> None:
    """With one stage, a cycle is one encoding plus N_D decode iterations at the expected
    batch sizes, and the latency of the 99th-percentile sequence adds up its items."""
    sim = _one_engine()
    b_e, n_d = 16, 8
    est = sim.rra(b_e, n_d)
    ratio, active = sim._phase(n_d)
    batch = b_e * ratio * active
    decode = 0.029 * (1 - np.exp(-batch)) + 0.21e-3 * batch
    encode = 0.025 + 0.13e-3 * b_e * sim.mean_input
    cycle = encode + decode.sum()
    assert est.throughput == pytest.approx(b_e / cycle)
    s = sim.quantile_length
    phases = -(-s // n_d)
    last = 1 + (s - 1) % n_d
    assert est.latency == pytest.approx(phases * encode + (phases - 1) * decode.sum() + decode[:last].sum())
    assert est.stages == 1 and est.fits


@pytest.mark.parametrize("task", sorted(EXEGPT_TASKS))
def test_mean_context_is_the_library_convention(task: str) -> None:
    """A decoding sequence holds p + j tokens of context (j decoded before the iteration),
    as in llmsched.core.cost: XSimulator's mean context is the expected request_context over the
    expected output length, E[p] + E[s(s-1)] / (2 E[s]), and memory holds one token more."""
    sim = XSimulator.for_task("opt-13b", task)
    p, s = sim.inputs, sim.outputs
    per_request = request_context(p.lengths[:, None], s.lengths[None, :])  # every (p, s) pair
    expected = float(p.probs @ per_request @ s.probs) / s.mean
    assert sim.mean_context == pytest.approx(expected, rel=1e-12)
    assert sim.mean_context == pytest.approx(p.mean + s.expect(s.lengths * (s.lengths - 1.0)) / (2 * s.mean))
    assert sim.mean_cached == sim.mean_context + 1


def test_one_engine_takes_a_context_model() -> None:
    """A ContextCostModel without context terms gives the linear model's estimates bit for
    bit, in RRA and in its mean context; with decode_per_context > 0 every decode iteration of
    a batch b costs c_d * b * mean_context more, and the engine round-trips through
    LayerCostModel.engine_cost."""
    linear = LinearCostModel.paper()
    for weights in ("population", "paper"):
        plain = XSimulator.one_engine(linear, "S", weights=weights)  # type: ignore[arg-type]
        same = XSimulator.one_engine(ContextCostModel.from_linear(linear), "S", weights=weights)  # type: ignore[arg-type]
        assert same.cost == plain.cost and same.mean_context == plain.mean_context
        for b_e, n_d in ((1, 1), (16, 8), (49, 7), (128, 10), (4, 64)):
            assert same.rra(b_e, n_d) == plain.rra(b_e, n_d)
    context = ContextCostModel.from_linear(linear, 0.0, 2e-7)
    sim = XSimulator.one_engine(context, "S")
    assert sim.cost.engine_cost(1, prefill_capacity=context.prefill_capacity) == context
    b_e, n_d = 16, 8
    ratio, active = sim._phase(n_d)
    batch = b_e * ratio * active
    decode = 0.029 * (1 - np.exp(-batch)) + 0.21e-3 * batch + 2e-7 * batch * sim.mean_context
    encode = 0.025 + 0.13e-3 * b_e * sim.mean_input
    assert sim.rra(b_e, n_d).throughput == pytest.approx(b_e / (encode + decode.sum()), rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    st.floats(1e-4, 0.1),
    st.floats(0, 1e-3),
    st.floats(1e-4, 0.05),
    st.floats(0, 1e-3),
    st.integers(1, 128),
    st.integers(1, 80),
)
def test_one_engine_context_model_without_context_is_the_linear_model(
    a_p: float, b_p: float, a_d: float, b_d: float, b_e: int, n_d: int
) -> None:
    """For any linear coefficients, the context model with c_p = c_d = 0 gives the same RRA
    estimate as the linear model, bit for bit."""
    linear = LinearCostModel(a_p, b_p, a_d, b_d)
    context = ContextCostModel.from_linear(linear)
    assert XSimulator.one_engine(context, "C1").rra(b_e, n_d) == XSimulator.one_engine(linear, "C1").rra(
        b_e, n_d
    )


def test_an_engine_of_layers_is_its_engine_cost() -> None:
    """XSimulator of L layers on one GPU gives the estimates of one engine timed by
    LayerCostModel.engine_cost(L): the two models price encoding and context alike."""
    layer = LayerCostModel.from_specs("opt-13b", "a40")
    whole = XSimulator.one_engine(layer.engine_cost(40), "S")
    layered = XSimulator(layer, whole.inputs, whole.outputs, gpus=1, layers=40)
    for b_e, n_d in ((4, 64), (16, 8), (100, 20)):
        ours, theirs = layered.rra(b_e, n_d), whole.rra(b_e, n_d)
        assert ours.throughput == pytest.approx(theirs.throughput, rel=1e-12)
        assert ours.latency == pytest.approx(theirs.latency, rel=1e-12)


@pytest.mark.parametrize(
    ("cost", "error", "message"),
    [
        (
            ContextCostModel.from_linear(LinearCostModel.paper(), 1e-9, 2e-7),
            ValueError,
            r"prefill_per_square=1e-09 > 0, but the layer model's encoding is linear in tokens",
        ),
        (
            LayerCostModel(1e-4, 2e-6, 3e-4, 5e-6, 1e-8),
            TypeError,
            "cost must be a LinearCostModel or a Context",
        ),
        (None, TypeError, "cost must be a LinearCostModel or a ContextCostModel, got NoneType"),
    ],
)
def test_one_engine_refuses_what_the_layer_model_cannot_carry(cost, error, message) -> None:
    """A context model that prices prompts by their squares, a layer model (use engine_cost)
    or no model at all is refused, saying why."""
    with pytest.raises(error, match=message):
        XSimulator.one_engine(cost, "S")


@pytest.mark.parametrize(("stages", "n_d"), [(2, 1), (3, 4), (4, 7), (5, 2)])
def test_rra_pipeline_timeline_against_a_tick_by_tick_replay(stages: int, n_d: int) -> None:
    """With constant item times (E to encode, D to decode, one layer per stage), throughput
    and latency equal a replay of the synchronous pipeline tick by tick: stage j works on
    mini-batch (t - j) mod S, item (t - j) div S; a tick lasts as long as its longest item."""
    enc, dec = 0.7, 0.2
    cost = LayerCostModel(enc, 0.0, dec, 0.0, 0.0)
    spec_in, spec_out = EXEGPT_TASKS["S"]
    sim = XSimulator(
        cost,
        LengthDistribution.truncated_normal(spec_in.mean, spec_in.sd, spec_in.max),
        LengthDistribution.truncated_normal(spec_out.mean, spec_out.sd, spec_out.max),
        gpus=stages,
        layers=stages,
    )
    est = sim.rra(100, n_d)  # batches large enough that no decode iteration is ever empty
    period = n_d + 1

    def item(t: int, j: int) -> float:
        q = ((t - j) // stages) % period
        return enc if q == 0 else dec

    s = sim.quantile_length
    items = 1 + s + (-(-s // n_d) - 1)
    warm = 50 * period * stages  # far into the steady state
    horizon = warm + (items + period + 1) * stages
    ticks = [max(item(t, j) for j in range(stages)) for t in range(horizon)]
    cycle = sum(ticks[warm : warm + period * stages])
    assert est.throughput == pytest.approx(stages * 100 / cycle)
    start = warm  # a cycle boundary: every mini-batch m starts its encoding at tick start + m
    latency = max(sum(ticks[start + m : start + m + items * stages]) for m in range(stages))
    assert est.latency == pytest.approx(latency)


def test_partial_tensor_parallelism_shortens_the_pipeline() -> None:
    """Tensor parallelism on more GPUs means fewer stages and a lower latency."""
    latencies = []
    for degree, count in ((1, 0), (2, 2), (2, 4), (4, 4)):
        est = SIM_S.rra(16, 16, degree, count)
        assert est.stages == 4 - count + count // degree
        latencies.append(est.latency)
    assert latencies == sorted(latencies, reverse=True)


def test_memory_overflow_makes_latency_infinite() -> None:
    """A decode batch whose keys and values do not fit has latency inf, and says so."""
    small = SIM_S.rra(8, 16)
    huge = SIM_S.rra(128, 1)
    assert small.fits and math.isfinite(small.latency) and 0 < small.memory_gb <= 48
    assert not huge.fits and huge.latency == math.inf and huge.memory_gb > 48 * 0.9
    assert huge.throughput > 0


def test_waa_allocations() -> None:
    """WAA-C leaves at least one GPU to each side; WAA-M minimises the busiest GPU's memory."""
    for b_e in (1, 4, 16, 64):
        n_c = SIM_S.encoder_gpus(b_e, "C")
        assert 1 <= n_c <= SIM_S.gpus - 1
        brute = min(
            max(
                SIM_S._gpu_bytes(SIM_S.enc_layers / n, b_e * SIM_S.mean_input),
                SIM_S._gpu_bytes(
                    SIM_S.dec_layers / (SIM_S.gpus - n), b_e * SIM_S.mean_output * SIM_S.mean_cached
                ),
            )
            for n in range(1, SIM_S.gpus)
        )
        assert SIM_S.waa(b_e, 1, allocation="M").memory_gb * 1e9 == pytest.approx(brute)
        est = SIM_S.waa(b_e, 2, allocation="C")
        assert est.encoder_gpus == n_c and est.schedule == "WAA-C"
        assert est.decode_batch == pytest.approx(b_e * SIM_S.mean_output)


def test_models_are_sized_by_their_parameters() -> None:
    """Weights per layer come from Table 1's parameter counts (T5-11B's wide layers too), so
    its weights fill about 22 GB and its throughput is of the order of OPT-13B's."""
    for name in ("t5-11b", "opt-13b", "gpt3-175b"):
        sim = XSimulator.for_task(name, "S")
        assert sim.model is not None
        total = sim.model.weight_bytes_per_layer * sim.layers
        assert total == pytest.approx(2 * sim.model.params_billion * 1e9)
    t5 = optimize(XSimulator.for_task("t5-11b", "S"), math.inf, batch_max=32, iterations_max=16)
    opt = optimize(XSimulator.for_task("opt-13b", "S"), math.inf, batch_max=32, iterations_max=16)
    assert 0.2 < t5.throughput / opt.throughput < 5


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(sorted(EXEGPT_TASKS)),
    st.integers(1, 128),
    st.integers(1, 80),
    st.sampled_from([(1, 0), (2, 2), (2, 4), (4, 4)]),
    st.integers(1, 8),
)
def test_estimates_are_physical(task: str, b_e: int, n_d: int, tp: tuple[int, int], b_m: int) -> None:
    """Every estimate has a positive throughput; a latency (when it fits) of at least the
    quantile sequence's own decode iterations at batch one; and larger B_E means a larger
    decode batch."""
    sim = XSimulator.for_task("opt-13b", task)
    floor = sim.quantile_length * sim.dec_layers * sim.cost.decode_time(1, 1, 4) / 4
    estimates = [sim.rra(b_e, n_d, *tp)]
    for allocation in ("C", "M"):
        decoder = sim.gpus - sim.encoder_gpus(b_e, allocation)  # type: ignore[arg-type]
        if tp[1] > decoder:
            with pytest.raises(ValueError, match="does not fit"):
                sim.waa(b_e, b_m, *tp, allocation=allocation)  # type: ignore[arg-type]
        else:
            estimates.append(sim.waa(b_e, b_m, *tp, allocation=allocation))  # type: ignore[arg-type]
    for est in estimates:
        assert est.throughput > 0
        assert est.latency == math.inf or est.latency >= floor
        assert est.fits == math.isfinite(est.latency)
    assert sim.rra(b_e + 1, n_d, *tp).decode_batch > sim.rra(b_e, n_d, *tp).decode_batch


def test_latency_bounds_come_from_the_fixed_batch_sweep() -> None:
    """Bounds are increasing percentiles of the sweep's latencies, then inf."""
    bounds = SIM_S.latency_bounds()
    sweep = [e.latency for e in SIM_S.fixed_batch_sweep()]
    assert bounds[:3] == sorted(bounds[:3]) and bounds[3] == math.inf
    assert min(sweep) <= bounds[0] and bounds[2] <= max(sweep)
    assert bounds[1] == pytest.approx(float(np.percentile(sweep, 30)))


def test_bad_arguments_raise_value_errors() -> None:
    """Nonsense configurations are refused with a message naming the argument."""
    with pytest.raises(ValueError, match="batch"):
        SIM_S.rra(0, 4)
    with pytest.raises(ValueError, match="tp_degree must be a power of two"):
        SIM_S.rra(4, 4, 3, 3)
    with pytest.raises(ValueError, match="tp_gpus must be a multiple"):
        SIM_S.rra(4, 4, 2, 3)
    with pytest.raises(ValueError, match="allocation"):
        SIM_S.waa(4, 1, allocation="X")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least two GPUs"):
        XSimulator.for_task("opt-13b", "S", gpus=1).waa(4)
    with pytest.raises(ValueError, match="unknown model"):
        XSimulator.for_task("llama-7b", "S")
    with pytest.raises(ValueError, match="unknown ExeGPT task"):
        XSimulator.for_task("opt-13b", "Q")
    with pytest.raises(ValueError, match="model and gpu_memory_gb"):
        XSimulator(SIM_S.cost, SIM_S.inputs, SIM_S.outputs, 2, 4, gpu_memory_gb=48)
    with pytest.raises(ValueError, match="gpu_memory_gb must be a finite number > 0, got -1"):
        XSimulator(SIM_S.cost, SIM_S.inputs, SIM_S.outputs, 2, 4, model=SIM_S.model, gpu_memory_gb=-1)
    with pytest.raises(ValueError, match="does not fit"):
        SIM_S.waa(4, 1, 2, 4)  # four tensor-parallel GPUs, but the decoder has fewer
    with pytest.raises(ValueError, match="more than the model's 40 layers"):
        XSimulator.for_task("opt-13b", "S", gpus=48).rra(4, 4)
    with pytest.raises(TypeError, match="gpu must be a name"):
        XSimulator.for_task("opt-13b", "S", gpu=5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (
            lambda: LengthDistribution([1, 2], [0.5, np.nan]),
            ValueError,
            r"probs\[1\] is nan; values must be finite",
        ),
        (lambda: LengthDistribution([1, 2], ["a", "b"]), ValueError, "probs must hold real numbers"),
        (
            lambda: LengthDistribution(["a", "b"], [0.5, 0.5]),
            ValueError,
            "lengths must be integers >= 1, got dtype <U1",
        ),
        (lambda: LengthDistribution([0, 1], [0.5, 0.5]), ValueError, "lengths must be integers >= 1, got 0"),
        (
            lambda: LengthDistribution.from_samples([1.5, 2]),
            ValueError,
            r"samples\[0\] is 1.5; token counts must be whole",
        ),
        (lambda: LengthDistribution.from_samples([1, np.nan]), ValueError, r"samples\[1\] is nan"),
        (
            lambda: LengthDistribution.from_samples(None),
            TypeError,
            "samples must be an array of token counts",
        ),
        (
            lambda: LengthDistribution.truncated_normal(10, 10, 10**12),
            ValueError,
            f"maximum must be at most {MAX_LENGTH:,}",
        ),
        (
            lambda: LengthDistribution.truncated_normal(10, 10, 5),
            ValueError,
            r"mean must be a number in \[1, 5\], got 10",
        ),
        (
            lambda: LengthDistribution.truncated_normal(10, np.inf, 50),
            ValueError,
            "sd must be a finite number > 0, got inf",
        ),
        (lambda: LengthDistribution.truncated_normal("10", 5, 50), TypeError, "mean must be .* got str '10'"),
        (
            lambda: LengthDistribution.from_samples([1, 2]).quantile(True),
            TypeError,
            r"q must be a number in \(0, 1\], got bool",
        ),
        (
            lambda: LengthDistribution.from_samples([1, 2]).expect([1, 2, 3]),
            ValueError,
            r"values has 3 entries; it needs one per length \(2\)",
        ),
    ],
)
def test_length_distributions_check_their_input(make, error, message) -> None:
    """Distributions name a bad length, probability, sample, moment or quantile; a huge maximum too."""
    with pytest.raises(error, match=message):
        make()


def test_length_distributions_take_numpy_and_whole_floats() -> None:
    """numpy integer maxima and whole-number float samples are good input."""
    assert LengthDistribution.truncated_normal(10, 10, np.uint16(100)).max == 100
    assert LengthDistribution.from_samples(np.array([2.0, 4.0])).lengths.tolist() == [2, 4]
    assert LengthDistribution.from_samples([1, 2]).quantile(np.float32(0.5)) == 1


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"gpus": 10**6}, ValueError, f"gpus must be at most {MAX_GPUS:,}, got 1,000,000"),
        ({"gpus": 2.0}, TypeError, "gpus must be an integer, got float 2.0"),
        ({"encoder_decoder": "yes"}, TypeError, "encoder_decoder must be True or False, got str 'yes'"),
        ({"memory_fraction": np.nan}, ValueError, r"memory_fraction must be a number in \(0, 1\], got nan"),
        ({"quantile": "0.99"}, TypeError, r"quantile must be a number in \(0, 1\], got str"),
        ({"name": None}, TypeError, "name must be a str, got NoneType"),
        ({"model": SIM_S.model, "gpu_memory_gb": True}, TypeError, "gpu_memory_gb must be .* got bool True"),
    ],
)
def test_simulator_constructor_checks_its_arguments(kwargs, error, message) -> None:
    """XSimulator names a bad GPU count (with its limit), flag, fraction, quantile, name or memory."""
    args = {"cost": SIM_S.cost, "inputs": SIM_S.inputs, "outputs": SIM_S.outputs, "gpus": 2, "layers": 4}
    with pytest.raises(error, match=message):
        XSimulator(**{**args, **kwargs})


def test_simulator_takes_numpy_sizes() -> None:
    """numpy integers and floats are good GPU counts, memories and batch sizes."""
    sim = XSimulator(
        SIM_S.cost,
        SIM_S.inputs,
        SIM_S.outputs,
        np.int64(4),
        40,
        model=SIM_S.model,
        gpu_memory_gb=np.float32(48),
    )
    assert sim.rra(np.int32(8), np.uint8(4)) == SIM_S.rra(8, 4)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: XSimulator.for_task("opt-13b", "S", gpus=10**6),
            ValueError,
            f"gpus must be at most {MAX_GPUS:,}",
        ),
        (
            lambda: XSimulator.for_task("opt-13b", "S", cost=LinearCostModel.paper()),
            TypeError,
            "cost must be a LayerCostModel",
        ),
        (lambda: SIM_S.tp_degrees(0), ValueError, "gpus must be at least 1, got 0"),
        (lambda: SIM_S.rra(4, 10**12), ValueError, f"iterations must be at most {MAX_ITERATIONS:,}"),
        (lambda: SIM_S.fixed_batch_sweep(4, 10**12), ValueError, f"limit must be at most {MAX_BATCH:,}"),
        (lambda: SIM_S.fixed_batch_sweep(8, 4), ValueError, "limit must be at least 8, got 4"),
        (lambda: SIM_S.fixed_batch_sweep(4, "64"), TypeError, "limit must be an integer, got str '64'"),
        (
            lambda: SIM_S.latency_bounds((50, 150)),
            ValueError,
            r"percentiles\[1\] must be a number in \[0, 100\], got 150",
        ),
        (
            lambda: SIM_S.latency_bounds((np.nan,)),
            ValueError,
            r"percentiles\[0\] must be a number in \[0, 100\], got nan",
        ),
        (lambda: SIM_S.latency_bounds(50), TypeError, "percentiles must be a sequence of numbers in"),
    ],
)
def test_simulator_methods_refuse_bad_sizes(call, error, message) -> None:
    """Methods name a bad size, and refuse the absurd ones (a MemoryError or hang before) with the limit."""
    with pytest.raises(error, match=message):
        call()
