"""ExeGPT's per-layer cost model: analytic from Table 1 and 2, or fitted."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched.exegpt import GPUS, MODELS, LayerCostModel, ModelSpec


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
    """All six models of Table 1 are there; nonsense is refused with a ValueError."""
    assert [m.hidden for m in MODELS.values()] == [1024, 5120, 8192, 10240, 12288, 15360]
    assert set(GPUS) == {"a40", "a100"}
    with pytest.raises(ValueError, match="multiple"):
        ModelSpec("odd", 1, 2, 100, 3)
    with pytest.raises(ValueError, match="finite"):
        LayerCostModel(-1.0, 0, 0, 0, 0)
    with pytest.raises(ValueError, match="compute_efficiency"):
        LayerCostModel.from_specs("opt-13b", "a40", compute_efficiency=0)
    with pytest.raises(ValueError, match="encode_samples"):
        LayerCostModel.fit([[1, 1.0]], [[1, 1, 1.0]] * 3)
