"""Cost models: the paper's values, prefill levels, the MIP's semantics, least-squares fits."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched import LevelCostModel, LinearCostModel, PrefillLevel
from llmsched.cost import CostModel, cost_model_error


def test_paper_values() -> None:
    """The paper's model: 200 clients decode an iteration in 71 ms; 5,000 tokens prefill in 675 ms."""
    cost = LinearCostModel.paper()
    assert cost.decode_iteration_time(200) == pytest.approx(0.071)
    assert cost.prefill_time(5000) == pytest.approx(0.675)
    assert cost.prefill_capacity == 5000
    # The paper's 13 s prefill bound: 19 full stages.
    assert 19 * cost.prefill_time(5000) == pytest.approx(12.825)
    assert isinstance(cost, CostModel)


def test_stage_functions_are_vectorised() -> None:
    """prefill_time and decode_iteration_time accept arrays."""
    cost = LinearCostModel.paper()
    assert np.allclose(cost.decode_iteration_time(np.array([1, 200])), [0.02921, 0.071])
    assert np.allclose(cost.prefill_time(np.array([0, 1000])), [0.025, 0.155])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prefill_base": -1.0}, "prefill_base must be finite and >= 0"),
        ({"decode_per_client": float("nan")}, "decode_per_client"),
        ({"prefill_capacity": 0}, "prefill_capacity must be a positive integer"),
        ({"prefill_capacity": 2.5}, "prefill_capacity"),
        ({"prefill_base": 0.0, "prefill_per_token": 0.0}, "prefill stage must take some time"),
        ({"decode_base": 0.0, "decode_per_client": 0.0}, "decode iteration must take some time"),
    ],
)
def test_linear_model_rejects_bad_parameters(kwargs: dict, message: str) -> None:
    """Negative, NaN or degenerate coefficients are refused with the parameter named."""
    base = {
        "prefill_base": 0.025,
        "prefill_per_token": 1.3e-4,
        "decode_base": 0.029,
        "decode_per_client": 2.1e-4,
        "prefill_capacity": 5000,
    }
    base.update(kwargs)
    with pytest.raises(ValueError, match=message):
        LinearCostModel(**base)


def test_levels_derived_from_the_linear_model() -> None:
    """Five levels of 1,000 ... 5,000 tokens, each taking the linear model's time when full."""
    levels = LinearCostModel.paper().levels(5)
    assert [lv.capacity for lv in levels] == [1000, 2000, 3000, 4000, 5000]
    assert [lv.time for lv in levels] == pytest.approx([0.155, 0.285, 0.415, 0.545, 0.675])
    with pytest.raises(ValueError, match="count must be at least 1"):
        LinearCostModel.paper().levels(0)
    with pytest.raises(TypeError, match="count must be an integer"):
        LinearCostModel.paper().levels(True)


def test_level_model_has_the_mip_semantics() -> None:
    """A stage takes its smallest holding level's time; decode iterations cost T^d whatever the batch."""
    mip = LinearCostModel.paper().to_levels(clients=200, levels=5)
    assert mip.decode_token_time == pytest.approx(0.071)
    assert mip.prefill_time(1) == pytest.approx(0.155)
    assert mip.prefill_time(1000) == pytest.approx(0.155)
    assert mip.prefill_time(1001) == pytest.approx(0.285)
    assert np.allclose(mip.prefill_time(np.array([4999, 5000])), 0.675)
    assert np.allclose(mip.decode_iteration_time(np.array([1, 200])), 0.071)
    assert mip.prefill_capacity == 5000
    with pytest.raises(ValueError, match="exceeds the largest level"):
        mip.prefill_time(5001)


@pytest.mark.parametrize(
    ("levels", "message"),
    [
        ([], "at least one"),
        ([(10, 1.0), (10, 2.0)], "strictly increasing"),
        ([(10, 2.0), (20, 1.0)], "non-decreasing"),
        ([(10, 0.0)], "positive"),
        ([(0, 1.0)], "positive"),
        ([100], "a level must be a \\(capacity, time\\) pair"),
        ([(100.7, 1.0)], "capacity must be a positive integer"),
        ([("a", 1.0)], "capacity must be a positive integer"),
        ([(100, "x")], "time must be a number"),
    ],
)
def test_level_model_rejects_bad_levels(levels: list, message: str) -> None:
    """Levels must have increasing capacities and positive non-decreasing times."""
    with pytest.raises(ValueError, match=message):
        LevelCostModel(levels, 0.1)


def test_level_model_rejects_bad_decode_time() -> None:
    """T^d must be positive."""
    with pytest.raises(ValueError, match="decode_token_time"):
        LevelCostModel([PrefillLevel(10, 1.0)], 0.0)


def test_min_times_are_lower_bounds_of_stage_sums() -> None:
    """min_prefill_time and min_decode_time never exceed the cost of an actual split."""
    cost = LinearCostModel.paper()
    # 12,000 tokens in three stages of 4,000 costs more than the bound.
    assert cost.min_prefill_time(12000) <= 3 * cost.prefill_time(4000) + 1e-12
    assert cost.min_prefill_time(12000) == pytest.approx(3 * 0.025 + 12000 * 1.3e-4)
    assert cost.min_prefill_time(12000, stages=5) == pytest.approx(5 * 0.025 + 12000 * 1.3e-4)
    # 10 iterations with active counts summing to 1,000.
    actual = sum(cost.decode_iteration_time(a) for a in [100] * 10)
    assert cost.min_decode_time(1000, 10) == pytest.approx(actual)
    levels = LevelCostModel([(100, 1.0), (300, 2.0)], 0.5)
    # The best rate is 2 s per 300 tokens: 250 tokens need at least 250 * 2/300 s.
    assert levels.min_prefill_time(250) == pytest.approx(250 * 2.0 / 300)
    assert levels.min_prefill_time(250) <= levels.prefill_time(250)
    # 1,000 tokens need at least 4 stages of at least 1 s each.
    assert levels.min_prefill_time(1000) == pytest.approx(max(4 * 1.0, 1000 * 2.0 / 300))
    assert levels.min_decode_time(1000, 7) == pytest.approx(3.5)


def test_fit_recovers_the_generating_model() -> None:
    """A least-squares fit on noiseless samples recovers the coefficients; with 2% noise it is close."""
    truth = LinearCostModel.paper()
    tokens = np.arange(100, 5001, 100)
    active = np.arange(1, 201)
    exact = LinearCostModel.fit(
        tokens, truth.prefill_time(tokens), active, truth.decode_iteration_time(active), 5000
    )
    assert exact.prefill_base == pytest.approx(0.025)
    assert exact.prefill_per_token == pytest.approx(1.3e-4)
    assert exact.decode_base == pytest.approx(0.029)
    assert exact.decode_per_client == pytest.approx(2.1e-4)
    rng = np.random.default_rng(0)
    noisy_p = truth.prefill_time(tokens) * rng.normal(1, 0.02, tokens.size)
    noisy_d = truth.decode_iteration_time(active) * rng.normal(1, 0.02, active.size)
    fitted = LinearCostModel.fit(tokens, noisy_p, active, noisy_d, 5000)
    err = cost_model_error(
        fitted, tokens, truth.prefill_time(tokens), active, truth.decode_iteration_time(active)
    )
    assert err["prefill_mape"] < 0.01 and err["decode_mape"] < 0.01


def test_fit_rejects_unusable_samples() -> None:
    """Fitting needs two distinct sizes and positive times."""
    with pytest.raises(ValueError, match="two or more distinct sizes"):
        LinearCostModel.fit([5, 5], [1.0, 1.0], [1, 2], [1.0, 2.0], 10)
    with pytest.raises(ValueError, match="positive"):
        LinearCostModel.fit([5, 6], [1.0, -1.0], [1, 2], [1.0, 2.0], 10)
    flat = LinearCostModel.fit([1, 2, 3], [1.0, 0.9, 0.8], [1, 2], [1.0, 2.0], 10)
    assert flat.prefill_per_token == 0.0 and 0.8 < flat.prefill_base < 1.0
