"""The hardware presets: which SplitwiseSim measured, their memory, price and power, and the tables
fitted to their rows."""

from __future__ import annotations

from importlib import resources

import numpy as np
import pytest

from llmsched import Preset, TableCostModel, preset, presets
from llmsched.core.hardware import GPU_MEMORY_BYTES, measurements

NAMES = [
    "llama2-70b/a100/tp2",
    "llama2-70b/a100/tp4",
    "llama2-70b/a100/tp8",
    "llama2-70b/h100/tp2",
    "llama2-70b/h100/tp4",
    "llama2-70b/h100/tp8",
    "llama2-70b/h100-pcap/tp2",
    "llama2-70b/h100-pcap/tp4",
    "llama2-70b/h100-pcap/tp8",
    "bloom-176b/a100/tp8",
    "bloom-176b/h100/tp8",
    "bloom-176b/h100-pcap/tp8",
]


def test_there_is_a_preset_for_each_combination_measured() -> None:
    """Twelve: Llama-2-70B at TP 2, 4 and 8 and BLOOM-176B at 8, on each of three machines, each
    with SplitwiseSim's 105 rows (21 points, 5 repeats)."""
    assert [p.name for p in presets()] == NAMES
    assert len(measurements()) == 12
    assert all(len(rows["prompt_size"]) == 105 for rows in measurements().values())
    assert preset("bloom-176b/h100/tp8").hardware == "h100-80gb"


def test_the_data_ships_with_its_license() -> None:
    data = resources.files("llmsched").joinpath("data")
    assert "MIT License" in data.joinpath("SPLITWISE_LICENSE").read_text()
    assert data.joinpath("splitwise_perf_model.csv").read_text().startswith("model,hardware,prompt_size")


def test_memory_for_keys_and_values() -> None:
    """80 GiB GPUs; 2 x hidden x layers x 2 bytes a token (no grouped-query reduction); what the
    weights leave, in whole blocks."""
    llama = preset("llama2-70b/h100/tp8")
    assert llama.gpu_memory_bytes == GPU_MEMORY_BYTES == 85_899_345_920
    assert llama.kv_bytes_per_token == 2 * 8192 * 80 * 2 == 2_621_440
    assert llama.kv_memory_bytes == 8 * 85_899_345_920 - 135_000_000_000
    assert llama.kv_tokens() == llama.kv_memory_bytes // (16 * 2_621_440) * 16 == 210_640
    assert llama.kv_tokens(1) == 210_645 and llama.kv_tokens(16) % 16 == 0
    bloom = preset("bloom-176b/a100/tp8")
    assert bloom.kv_bytes_per_token == 2 * 14336 * 70 * 2 == 4_014_080
    assert bloom.kv_memory_bytes == 8 * 85_899_345_920 - 329_000_000_000
    small = preset("llama2-70b/a100/tp2")
    assert small.gpus == small.tensor_parallel == 2 and small.kv_tokens() == 14_032
    with pytest.raises(ValueError, match="block_size must be at least 1"):
        small.kv_tokens(0)


def test_price_and_power_follow_table_v_and_the_rated_watts() -> None:
    """Per machine, relative to a DGX-A100: H100 2.5x the price (Table V's token machine), 1.75x
    the power, 1.23x capped; an engine takes its share of the eight GPUs."""
    a100, h100, capped = (preset(f"llama2-70b/{h}/tp8") for h in ("a100", "h100", "h100-pcap"))
    assert (a100.machine_price, a100.machine_power, a100.machine_rated_watts) == (1.0, 1.0, 6500.0)
    assert (h100.machine_price, h100.machine_power, h100.machine_rated_watts) == (2.5, 1.75, 10200.0)
    assert (capped.machine_price, capped.machine_power, capped.machine_rated_watts) == (2.5, 1.23, 7140.0)
    half = preset("llama2-70b/h100/tp4")
    assert half.price == pytest.approx(1.25) and half.rated_watts == pytest.approx(5100.0)


def test_a_preset_cost_is_the_table_fitted_to_its_rows() -> None:
    """SplitwiseSim's mixed factor, the preset's name; a knot at a batch's tokens is the median
    of its rows (by its prompt count too, by default: 32 prompts of 512 tokens, or one of
    8,192); the power cap slows the prompt phase and leaves the token phase as it is."""
    found = preset("llama2-70b/h100/tp8")
    cost = found.cost()
    assert isinstance(cost, TableCostModel) and cost.mixed_factor == 1.1 and cost.name == found.name
    assert cost is found.cost()  # fitted once
    rows = found.rows()
    prompt, batch, seconds = rows["prompt_size"], rows["batch_size"], rows["prompt_time"] / 1e3
    assert cost.prefill_time(16384, 32 * 512**2) == pytest.approx(np.median(seconds[batch == 32]))
    assert cost.prefill_time(8192, 8192**2) == pytest.approx(np.median(seconds[prompt == 8192]))
    tokens_only = found.cost(prompt_count=False)
    assert tokens_only.batched_prompt is None and cost.batched_prompt == 512
    at = prompt * batch == 16384
    assert tokens_only.prefill_time(16384) == pytest.approx(np.median(seconds[at]))
    with pytest.raises(TypeError, match="prompt_count must be True or False"):
        found.cost(prompt_count=None)  # type: ignore[arg-type]
    assert (cost.prefill_capacity, cost.max_batch) == (32768, 128)  # twice the largest batch measured
    capped = preset("llama2-70b/h100-pcap/tp8").cost()
    assert capped.decode_times == cost.decode_times and capped.decode_per_context == cost.decode_per_context
    assert capped.prefill_time(8192) > 1.2 * cost.prefill_time(8192)


def test_tp2_presets_leave_out_the_rows_of_batch_64() -> None:
    """At TP 2 the rows of batch 64 contradict the rest (a prefill of 32,768 tokens faster than
    one of 16,384); the presets measure up to 32 requests and 16,384 tokens (and price up to
    twice as many requests)."""
    for hardware in ("a100", "h100", "h100-pcap"):
        found = preset(f"llama2-70b/{hardware}/tp2")
        raw = measurements()[(found.model, found.hardware, 2)]
        big = raw["batch_size"] == 64
        assert np.median(raw["prompt_time"][big]) < np.median(raw["prompt_time"][raw["batch_size"] == 32]) / 6
        assert len(found.rows()["batch_size"]) == 100 and found.rows()["batch_size"].max() == 32
        assert (found.cost().prefill_capacity, found.cost().max_batch) == (16384, 64)  # 2 x 32


def test_an_unknown_name_lists_the_presets() -> None:
    with pytest.raises(
        ValueError, match=r"no preset 'llama2-70b/h200/tp8'; the presets are llama2-70b/a100/tp2, "
    ):
        preset("llama2-70b/h200/tp8")
    with pytest.raises(TypeError, match="name must be a str"):
        preset(8)


def test_a_preset_checks_itself() -> None:
    base = preset("llama2-70b/a100/tp8")
    fields = {name: getattr(base, name) for name in Preset.__dataclass_fields__}
    with pytest.raises(ValueError, match="gpus must be at most the 8 of a machine"):
        Preset(**{**fields, "gpus": 16})
    with pytest.raises(ValueError, match="machine_price must be"):
        Preset(**{**fields, "machine_price": 0.0})


def test_a_presets_memory_is_its_kv_bytes_in_blocks() -> None:
    """Llama-2-70B on eight H100s: 8 x 80 GiB less 135 GB of weights, at 2,621,440 bytes a
    token, is 13,165 blocks of 16 tokens (210,640 tokens, what kv_tokens says)."""
    import llmsched

    target = llmsched.preset("llama2-70b/h100/tp8")
    memory = target.memory()
    assert memory.blocks == 13_165 and memory.tokens == target.kv_tokens() == 210_640
    assert target.memory(block_size=1).tokens == (8 * 85_899_345_920 - 135 * 10**9) // 2_621_440


def test_splitwisesim_cost_reads_the_file_as_splitwisesim_does() -> None:
    """Every time keyed by the batch's tokens (medians): a decode iteration of k requests is the
    token time at k tokens (below the first key, 128, the first segment extended, as scipy's
    interp1d extrapolates it), a prefill the prompt time at its tokens; no context term;
    SplitwiseSim's 1.1 mixed factor."""
    found = preset("llama2-70b/h100/tp8")
    cost = found.splitwisesim_cost()
    rows = found.rows()
    keys = rows["prompt_size"] * rows["batch_size"]
    at128, at256 = (np.median(rows["token_time"][keys == k]) / 1e3 for k in (128, 256))
    assert cost.decode_iteration_time(128) == pytest.approx(at128)
    for k in (1, 64):
        assert cost.decode_iteration_time(k) == pytest.approx(at128 + (at256 - at128) * (k - 128) / 128)
    assert cost.decode_iteration_time(1) > 1.05 * at128  # 31.5 ms against 29.9
    assert cost.decode_iteration_time(64) < 0.6 * found.cost().decode_iteration_time(64, 64 * 1024)
    assert cost.prefill_time(2048) == pytest.approx(np.median(rows["prompt_time"][keys == 2048]) / 1e3)
    assert cost.decode_per_context == 0.0 and cost.mixed_factor == 1.1 and cost is found.splitwisesim_cost()
