"""ExeGPT's per-layer cost model: analytic from Table 1 and 2, or fitted."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsched import ContextCostModel
from llmsched.exegpt import GPUS, MODELS, GPUSpec, LayerCostModel, ModelSpec


def test_analytic_costs_follow_width_hardware_and_parallelism() -> None:
    """Wider models cost more per layer, the A100 less than the A40, and tensor parallelism
    divides the work but adds synchronisation that grows with the degree."""
    opt_a40 = LayerCostModel.from_specs("opt-13b", "a40")
    gpt_a40 = LayerCostModel.from_specs("gpt3-175b", "a40")
    opt_a100 = LayerCostModel.from_specs("opt-13b", "a100")
    assert gpt_a40.encode_time(512) > opt_a40.encode_time(512) > opt_a100.encode_time(512)
    # OPT-13B on an A40: 13e9 / 40 parameters a layer, 2 FLOP each per token, at half of
    # 149.7 TFLOP/s; within 4% of the 24 h^2 FLOP of the layer's matrices (h = 5,120).
    assert opt_a40.encode_per_token == pytest.approx(2 * 13e9 / 40 / (0.5 * 149.7e12))
    assert opt_a40.encode_per_token == pytest.approx(24 * 5120**2 / (0.5 * 149.7e12), rel=0.04)
    # Keys and values: 4 bytes per unit of key width per token, read at 80% of 696 GB/s.
    assert opt_a40.decode_per_context == pytest.approx(4 * 5120 / (0.8 * 696e9))
    t5 = LayerCostModel.from_specs("T5-11B", "A40")  # names in any case
    assert t5.decode_per_context == pytest.approx(4 * 16384 / (0.8 * 696e9))
    with pytest.raises(ValueError, match="unknown model"):
        LayerCostModel.from_specs("llama-7b", "a40")
    # Decode is dominated by the weight reads at small batches: batch 1 and 8 cost nearly alike.
    assert opt_a40.decode_time(8, 8 * 300) < 1.2 * opt_a40.decode_time(1, 300)
    # Per-layer time falls with tensor parallelism while compute dominates, and sync is paid.
    big = 8192
    assert opt_a40.encode_time(big, tp=2) < opt_a40.encode_time(big)
    assert opt_a40.encode_time(big, tp=2) > opt_a40.encode_time(big) / 2
    times = opt_a40.encode_time(np.array([64, 128, 256]))
    assert np.all(np.diff(times) > 0)


def test_fit_recovers_known_coefficients() -> None:
    """Least squares on noiseless samples returns the coefficients that produced them."""
    truth = LayerCostModel(1e-4, 2e-6, 3e-4, 5e-6, 1e-8)
    tokens = np.array([64, 256, 1024, 4096])
    batch = np.array([1, 4, 16, 64, 8])
    context = np.array([100, 900, 5000, 30000, 2000])
    enc = np.column_stack([tokens, truth.encode_time(tokens)])
    dec = np.column_stack([batch, context, truth.decode_time(batch, context)])
    fitted = LayerCostModel.fit(enc, dec)
    for name in (
        "encode_base",
        "encode_per_token",
        "decode_base",
        "decode_per_sequence",
        "decode_per_context",
    ):
        assert getattr(fitted, name) == pytest.approx(getattr(truth, name), rel=1e-6)


def test_table_one_models_and_bad_input() -> None:
    """All six models of Table 1 are there, Baton's Llama-2-7B with its two cards and
    Splitwise's Llama-2-70B; nonsense is refused with a ValueError."""
    assert [m.hidden for m in MODELS.values()] == [1024, 5120, 8192, 10240, 12288, 15360, 4096, 8192]
    assert set(GPUS) == {"a40", "a100", "a6000", "rtx4090"}
    # Llama-2-7B on a 4090 at the default efficiencies: a decode iteration reads the weights
    # (13.5 GB at 80% of 1,008 GB/s, about 16.7 ms) plus the launches (32 x 40 us).
    cost = LayerCostModel.from_specs("llama2-7b", "rtx4090").engine_cost(32)
    assert cost.decode_base == pytest.approx(2 * 6.74e9 / (0.8 * 1008e9) + 32 * 40e-6, rel=1e-9)
    with pytest.raises(ValueError, match="multiple"):
        ModelSpec("odd", 1, 2, 100, 3)
    with pytest.raises(ValueError, match="finite"):
        LayerCostModel(-1.0, 0, 0, 0, 0)
    with pytest.raises(ValueError, match="compute_efficiency"):
        LayerCostModel.from_specs("opt-13b", "a40", compute_efficiency=0)
    with pytest.raises(ValueError, match="encode_samples"):
        LayerCostModel.fit([[1, 1.0]], [[1, 1, 1.0]] * 3)


SPEC = {"name": "m", "params_billion": 13, "layers": 40, "hidden": 5120, "heads": 40}
GPU = {"name": "g", "fp16_tflops": 100.0, "memory_gb": 40.0, "bandwidth_gbs": 1000.0, "link_gbs": 100.0}


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (
            lambda: ModelSpec(**{**SPEC, "params_billion": float("inf")}),
            ValueError,
            "params_billion must be a finite",
        ),
        (
            lambda: ModelSpec(**{**SPEC, "params_billion": True}),
            TypeError,
            "params_billion must be .* got bool",
        ),
        (lambda: ModelSpec(**{**SPEC, "layers": 0}), ValueError, "layers must be at least 1, got 0"),
        (
            lambda: ModelSpec(**{**SPEC, "hidden": 51.2}),
            TypeError,
            "hidden must be an integer, got float 51.2",
        ),
        (lambda: ModelSpec(**{**SPEC, "name": None}), TypeError, "name must be a str, got NoneType"),
        (
            lambda: ModelSpec(**SPEC, encoder_decoder="yes"),
            TypeError,
            "encoder_decoder must be True or False, got str 'yes'",
        ),
        (
            lambda: GPUSpec(**{**GPU, "memory_gb": 0}),
            ValueError,
            "memory_gb must be a finite number > 0, got 0",
        ),
        (
            lambda: GPUSpec(**{**GPU, "fp16_tflops": "fast"}),
            TypeError,
            "fp16_tflops must be .* got str 'fast'",
        ),
        (lambda: GPUSpec(**{**GPU, "link_gbs": float("nan")}), ValueError, "link_gbs must be .* got nan"),
        (
            lambda: LayerCostModel(0.1, 0.1, 0.1, 0.1, True),
            TypeError,
            "decode_per_context must be .* got bool",
        ),
        (
            lambda: LayerCostModel(0.1, 0.1, 0.1, 0.1, 0, sync_latency=-1e-6),
            ValueError,
            "sync_latency must be",
        ),
    ],
)
def test_specs_and_coefficients_check_themselves(make, error, message) -> None:
    """Model and GPU specs and layer coefficients refuse NaN, inf, non-positive or wrong-kind values."""
    with pytest.raises(error, match=message):
        make()


def test_numpy_scalars_are_good_specs() -> None:
    """numpy scalars are accepted wherever Python numbers are, with the same costs."""
    assert ModelSpec(**{**SPEC, "layers": np.int64(40), "params_billion": np.float32(13)}).layers == 40
    assert GPUSpec(**{**GPU, "memory_gb": np.float32(40)}).memory_gb == 40
    a = LayerCostModel(np.float32(1e-3), np.float64(1e-6), 1e-3, 1e-6, np.int64(0))
    assert a.encode_time(np.int32(10)) == pytest.approx(1e-3 + 1e-5)
    from_np = LayerCostModel.from_specs("opt-13b", "a40", compute_efficiency=np.float32(0.5))
    assert from_np.encode_per_token == pytest.approx(
        LayerCostModel.from_specs("opt-13b", "a40").encode_per_token
    )


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda c: c.encode_time(-5), ValueError, "tokens must be a finite number >= 0, got -5"),
        (lambda c: c.encode_time(None), TypeError, "tokens must be a number >= 0 or an array of them"),
        (lambda c: c.encode_time(10, 0), ValueError, "tp must be at least 1, got 0"),
        (
            lambda c: c.decode_time(float("nan"), 10),
            ValueError,
            "batch must be a finite number >= 0, got nan",
        ),
        (lambda c: c.decode_time(3, "10"), TypeError, "context must be a number >= 0 or an array of them"),
        (lambda c: c.decode_time(3, 10, 2.0), TypeError, "tp must be an integer, got float 2.0"),
    ],
)
def test_layer_times_refuse_bad_sizes(call, error, message) -> None:
    """Encode and decode times name a negative, NaN or non-numeric size (None used to give nan)."""
    with pytest.raises(error, match=message):
        call(LayerCostModel.from_specs("opt-13b", "a40"))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"compute_efficiency": 1.5},
            ValueError,
            r"compute_efficiency must be a number in \(0, 1\], got 1.5",
        ),
        ({"memory_efficiency": "0.8"}, TypeError, r"memory_efficiency must be a number in \(0, 1\], got str"),
        ({"kernel_overhead": -1.0}, ValueError, "kernel_overhead must be a finite number >= 0, got -1.0"),
        ({"sync_latency": None}, TypeError, "sync_latency must be a finite number >= 0, got NoneType"),
    ],
)
def test_from_specs_names_bad_rates(kwargs, error, message) -> None:
    """from_specs names its own argument, not the coefficient it would have turned into."""
    with pytest.raises(error, match=message):
        LayerCostModel.from_specs("opt-13b", "a40", **kwargs)


@pytest.mark.parametrize(
    ("encode", "decode", "message"),
    [
        ([[10, float("nan")], [100, 0.02]], [[1, 10, 0.01]] * 3, r"encode_samples\[0, 1\] is nan"),
        (
            [[10, -0.01], [100, 0.02]],
            [[1, 10, 0.01]] * 3,
            r"encode_samples\[0, 1\] is -0.01; values must be >= 0",
        ),
        ([[10, 0.01], [100, 0.02]], [[1, 10, float("inf")]] * 3, r"decode_samples\[0, 2\] is inf"),
        ([[10, 0.01], [100, 0.02]], [[1, 2]], "decode_samples must be at least three rows"),
    ],
)
def test_fit_names_bad_samples(encode, decode, message) -> None:
    """Measured samples with NaN, inf or negative entries are refused by row and column."""
    with pytest.raises(ValueError, match=message):
        LayerCostModel.fit(encode, decode)


@st.composite
def layer_models(draw: st.DrawFn) -> LayerCostModel:
    """A layer model with every term drawn, some of them 0 (but an encode and a decode term > 0)."""
    coefficient = st.one_of(st.just(0.0), st.floats(1e-9, 1e-2))
    return LayerCostModel(
        encode_base=draw(st.floats(1e-7, 1e-2)),
        encode_per_token=draw(coefficient),
        decode_base=draw(st.floats(1e-7, 1e-2)),
        decode_per_sequence=draw(coefficient),
        decode_per_context=draw(st.one_of(st.just(0.0), st.floats(1e-12, 1e-6))),
        sync_latency=draw(st.one_of(st.just(0.0), st.floats(1e-7, 1e-4))),
        sync_per_token=draw(st.one_of(st.just(0.0), st.floats(1e-10, 1e-6))),
    )


@settings(max_examples=200, deadline=None)
@given(
    layer_models(),
    st.integers(1, 128),
    st.sampled_from([1, 2, 3, 4, 8]),
    st.integers(0, 4096),
    st.integers(0, 10**6),
    st.integers(0, 10**5),
)
def test_engine_cost_is_the_layers_in_turn(
    layer: LayerCostModel, layers: int, tp: int, batch: int, context: int, tokens: int
) -> None:
    """An engine of L layers at degree t prices a decode iteration of (batch, context) as L
    layer decode times and a prefill stage as L layer encodings, all-reduces included;
    context means the same tokens in both (p + j per sequence); and the engine charges
    nothing for the squares of its prompts."""
    engine = layer.engine_cost(layers, tp, prefill_capacity=777)
    assert engine.prefill_capacity == 777 and engine.prefill_per_square == 0
    assert engine.decode_per_context == pytest.approx(layers * layer.decode_per_context / tp, rel=1e-14)
    decode = layers * layer.decode_time(batch, context, tp)
    assert engine.decode_iteration_time(batch, context) == pytest.approx(decode, rel=1e-12, abs=0)
    prefill = layers * layer.encode_time(tokens, tp)
    assert engine.prefill_time(tokens) == pytest.approx(prefill, rel=1e-12, abs=0)
    assert engine.prefill_time(tokens, tokens**2) == engine.prefill_time(tokens)


def test_engine_cost_of_one_layer_without_parallelism_is_the_layer() -> None:
    """One layer at degree 1 has the layer's own coefficients, bit for bit, and the default
    prefill capacity of a ContextCostModel; the A40's OPT-13B at TP 4 reads 40/4 layers' KV."""
    layer = LayerCostModel(1e-4, 2e-6, 3e-4, 5e-6, 1e-8, sync_latency=2e-5, sync_per_token=3e-7)
    engine = layer.engine_cost(1)
    assert (engine.prefill_base, engine.prefill_per_token) == (layer.encode_base, layer.encode_per_token)
    assert (engine.decode_base, engine.decode_per_client, engine.decode_per_context) == (
        layer.decode_base,
        layer.decode_per_sequence,
        layer.decode_per_context,
    )
    assert engine.prefill_capacity == ContextCostModel(1, 0, 0, 1, 0, 0).prefill_capacity
    opt = LayerCostModel.from_specs("opt-13b", "a40")
    assert opt.engine_cost(40, 4).decode_per_context == pytest.approx(10 * 4 * 5120 / (0.8 * 696e9))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"layers": 0}, ValueError, "layers must be at least 1, got 0"),
        ({"layers": 2.5}, TypeError, "layers must be an integer, got float 2.5"),
        ({"layers": 4, "tp": 0}, ValueError, "tp must be at least 1, got 0"),
        ({"layers": 4, "tp": "2"}, TypeError, "tp must be an integer, got str '2'"),
        ({"layers": 4, "prefill_capacity": 0}, ValueError, "prefill_capacity must be at least 1, got 0"),
    ],
)
def test_engine_cost_checks_its_arguments(kwargs, error, message) -> None:
    """A bad layer count, degree or capacity is refused, naming it."""
    with pytest.raises(error, match=message):
        LayerCostModel.from_specs("opt-13b", "a40").engine_cost(**kwargs)


def test_engine_cost_of_a_layer_that_takes_no_time_is_refused() -> None:
    """A layer whose decode costs nothing makes no engine: the cost model says why."""
    with pytest.raises(ValueError, match="a decode iteration must take some time"):
        LayerCostModel(1e-4, 0.0, 0.0, 0.0, 1e-8).engine_cost(2)


def test_calibrate_efficiencies_recovers_the_efficiencies_that_made_the_samples() -> None:
    """Samples priced by the layer model at 60% compute and 70% memory (two degrees) are fitted
    back to those shares with no error; bad samples are refused."""
    from llmsched.exegpt import calibrate_efficiencies

    layer = LayerCostModel.from_specs("llama2-70b", "a100", 0.6, 0.7)
    prompts, tokens = [], []
    for tp in (2, 8):
        engine = layer.engine_cost(80, tp)
        prompts += [(tp, t, engine.prefill_time(t)) for t in (256, 1024, 4096)]
        tokens += [(tp, b, b * 600, engine.decode_iteration_time(b, b * 600)) for b in (1, 8, 32)]
    fit = calibrate_efficiencies("llama2-70b", "a100", prompts, tokens, step=0.05)
    assert fit["compute_efficiency"] == pytest.approx(0.6) and fit["memory_efficiency"] == pytest.approx(0.7)
    assert fit["prompt_mape"] < 1e-9 and fit["token_mape"] < 1e-9 and fit["samples"] == 12
    with pytest.raises(ValueError, match="powers of two"):
        calibrate_efficiencies("llama2-70b", "a100", [(3, 100, 1.0)], tokens, step=0.05)
    with pytest.raises(ValueError, match="rows of"):
        calibrate_efficiencies("llama2-70b", "a100", [(2, 100)], tokens, step=0.05)
