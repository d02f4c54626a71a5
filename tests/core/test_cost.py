"""Cost models: the paper's values, prefill levels, the MIP's semantics, least-squares fits."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched import LevelCostModel, LinearCostModel, PrefillLevel
from llmsched.core.cost import CostModel, cost_model_error


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


PAPER = {
    "prefill_base": 0.025,
    "prefill_per_token": 1.3e-4,
    "decode_base": 0.029,
    "decode_per_client": 2.1e-4,
    "prefill_capacity": 5000,
}


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"prefill_base": -1.0}, ValueError, "prefill_base must be a finite number >= 0, got -1.0"),
        (
            {"decode_per_client": float("nan")},
            ValueError,
            "decode_per_client must be a finite number >= 0, got nan",
        ),
        ({"decode_base": float("inf")}, ValueError, "decode_base must be a finite number >= 0, got inf"),
        (
            {"prefill_per_token": "0.1"},
            TypeError,
            "prefill_per_token must be a finite number >= 0, got str '0.1'",
        ),
        ({"prefill_base": None}, TypeError, "prefill_base must be .* got NoneType None"),
        ({"prefill_base": True}, TypeError, "prefill_base must be .* got bool True"),
        ({"prefill_capacity": 0}, ValueError, "prefill_capacity must be at least 1, got 0"),
        ({"prefill_capacity": 2.5}, TypeError, "prefill_capacity must be an integer, got float 2.5"),
        ({"prefill_base": 0.0, "prefill_per_token": 0.0}, ValueError, "prefill stage must take some time"),
        ({"decode_base": 0.0, "decode_per_client": 0.0}, ValueError, "decode iteration must take some time"),
    ],
)
def test_linear_model_rejects_bad_parameters(kwargs: dict, error: type, message: str) -> None:
    """Negative, NaN, infinite, non-numeric or degenerate coefficients are refused, the parameter named."""
    with pytest.raises(error, match=message):
        LinearCostModel(**{**PAPER, **kwargs})


def test_linear_model_takes_numpy_scalars() -> None:
    """numpy floats and integers are good parameters; an unsigned capacity is kept as a Python int."""
    cost = LinearCostModel(np.float32(0.025), np.float64(1.3e-4), 0.029, 2.1e-4, np.uint16(5000))
    assert type(cost.prefill_capacity) is int
    assert cost.min_prefill_time(12000) == pytest.approx(3 * 0.025 + 12000 * 1.3e-4, rel=1e-6)
    assert [lv.capacity for lv in cost.levels(np.uint8(5))] == [1000, 2000, 3000, 4000, 5000]


@pytest.mark.parametrize("model", [LinearCostModel.paper(), LinearCostModel.paper().to_levels(200)])
@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda m: m.prefill_time(-1), ValueError, "tokens must be a finite number >= 0, got -1"),
        (lambda m: m.prefill_time(float("nan")), ValueError, "tokens must be a finite number >= 0, got nan"),
        (
            lambda m: m.prefill_time("5"),
            TypeError,
            "tokens must be a number >= 0 or an array of them, got str",
        ),
        (lambda m: m.prefill_time(np.array([1, -2])), ValueError, "tokens must hold numbers >= 0, got -2"),
        (lambda m: m.decode_iteration_time(None), TypeError, "active must be a number >= 0 .* got NoneType"),
        (lambda m: m.decode_iteration_time([1.0, np.inf]), ValueError, r"active\[1\] is inf"),
        (lambda m: m.min_prefill_time(-5), ValueError, "total_tokens must be at least 0, got -5"),
        (lambda m: m.min_prefill_time(10, 1.5), TypeError, "stages must be an integer, got float 1.5"),
        (
            lambda m: m.min_decode_time(10, float("nan")),
            TypeError,
            "iterations must be an integer, got float nan",
        ),
        (lambda m: m.min_decode_time(-1, 3), ValueError, "total_tokens must be at least 0, got -1"),
    ],
)
def test_stage_functions_refuse_bad_sizes(model, call, error, message) -> None:
    """Stage times and their lower bounds refuse negative, NaN and non-numeric sizes, naming them."""
    with pytest.raises(error, match=message):
        call(model)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda c: c.levels(0), ValueError, "count must be at least 1"),
        (lambda c: c.levels(True), TypeError, "count must be an integer"),
        (lambda c: c.levels(10**12), ValueError, "count must be at most 10,000, got 1,000,000,000,000"),
        (lambda c: c.to_levels(0), ValueError, "clients must be at least 1, got 0"),
        (lambda c: c.to_levels(200, 2.5), TypeError, "levels must be an integer, got float 2.5"),
        (lambda c: c.to_levels(200, 10**9), ValueError, "levels must be at most 10,000"),
    ],
)
def test_level_counts_are_checked(call, error, message) -> None:
    """Level counts are positive integers with a limit, so a huge count is refused instead of hanging."""
    with pytest.raises(error, match=message):
        call(LinearCostModel.paper())


def test_levels_derived_from_the_linear_model() -> None:
    """Five levels of 1,000 ... 5,000 tokens, each taking the linear model's time when full."""
    levels = LinearCostModel.paper().levels(5)
    assert [lv.capacity for lv in levels] == [1000, 2000, 3000, 4000, 5000]
    assert [lv.time for lv in levels] == pytest.approx([0.155, 0.285, 0.415, 0.545, 0.675])


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
    ("levels", "error", "message"),
    [
        ([], ValueError, "at least one"),
        ([(10, 1.0), (10, 2.0)], ValueError, "strictly increasing"),
        ([(10, 2.0), (20, 1.0)], ValueError, "non-decreasing"),
        ([(10, 0.0)], ValueError, r"levels\[0\] time \(seconds\) must be a finite number > 0, got 0.0"),
        ([(10, 1.0), (20, float("nan"))], ValueError, r"levels\[1\] time \(seconds\) must be .* got nan"),
        ([(10, float("inf"))], ValueError, r"levels\[0\] time \(seconds\) must be .* got inf"),
        ([(0, 1.0)], ValueError, r"levels\[0\] capacity must be at least 1, got 0"),
        ([100], ValueError, r"levels\[0\]: a level must be a \(capacity, time\) pair, got 100"),
        ([(1, 2, 3)], ValueError, r"levels\[0\]: a level must be a \(capacity, time\) pair"),
        ([(100.7, 1.0)], TypeError, r"levels\[0\] capacity must be an integer, got float 100.7"),
        ([("a", 1.0)], TypeError, r"levels\[0\] capacity must be an integer, got str 'a'"),
        ([(100, "x")], TypeError, r"levels\[0\] time \(seconds\) must be a finite number > 0, got str 'x'"),
        (None, TypeError, "levels must be a sequence of .* got NoneType"),
        (5, TypeError, "levels must be a sequence of .* got int 5"),
        ("100=1", TypeError, "levels must be a sequence of .* got str"),
    ],
)
def test_level_model_rejects_bad_levels(levels: list, error: type, message: str) -> None:
    """Levels must be (capacity, time) pairs with increasing capacities and positive non-decreasing times."""
    with pytest.raises(error, match=message):
        LevelCostModel(levels, 0.1)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (0.0, ValueError),
        (-0.1, ValueError),
        (float("nan"), ValueError),
        (float("inf"), ValueError),
        ("1", TypeError),
    ],
)
def test_level_model_rejects_bad_decode_time(value, error) -> None:
    """T^d must be a finite number of seconds > 0."""
    with pytest.raises(error, match="decode_token_time must be a finite number > 0"):
        LevelCostModel([PrefillLevel(10, 1.0)], value)


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((0, 1.0), ValueError, "capacity must be at least 1, got 0"),
        ((10.0, 1.0), TypeError, "capacity must be an integer, got float 10.0"),
        ((10, -1.0), ValueError, "time must be a finite number > 0, got -1.0"),
        ((10, float("nan")), ValueError, "time must be a finite number > 0, got nan"),
        ((10, None), TypeError, "time must be a finite number > 0, got NoneType None"),
    ],
)
def test_prefill_level_checks_itself(args, error, message) -> None:
    """A PrefillLevel built directly is checked like one given to LevelCostModel."""
    with pytest.raises(error, match=message):
        PrefillLevel(*args)
    assert PrefillLevel(np.int64(10), np.float32(0.5)).capacity == 10


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
    with pytest.raises(ValueError, match="prefill_tokens: need samples at two or more distinct sizes"):
        LinearCostModel.fit([5, 5], [1.0, 1.0], [1, 2], [1.0, 2.0], 10)
    with pytest.raises(ValueError, match=r"prefill_times\[1\] is -1.0; values must be > 0"):
        LinearCostModel.fit([5, 6], [1.0, -1.0], [1, 2], [1.0, 2.0], 10)
    flat = LinearCostModel.fit([1, 2, 3], [1.0, 0.9, 0.8], [1, 2], [1.0, 2.0], 10)
    assert flat.prefill_per_token == 0.0 and 0.8 < flat.prefill_base < 1.0


GOOD_SAMPLES = {
    "prefill_tokens": [10, 100, 1000],
    "prefill_times": [0.03, 0.04, 0.15],
    "decode_active": [1, 10, 100],
    "decode_times": [0.03, 0.031, 0.05],
}


@pytest.mark.parametrize(
    ("field", "value", "error", "message"),
    [
        (
            "prefill_tokens",
            [10, float("nan"), 1000],
            ValueError,
            r"prefill_tokens\[1\] is nan; values must be finite",
        ),
        ("prefill_tokens", [10, -100, 1000], ValueError, r"prefill_tokens\[1\] is -100; values must be >= 0"),
        ("prefill_tokens", [10, 100], ValueError, "prefill_tokens has 2 samples but prefill_times has 3"),
        ("prefill_tokens", None, TypeError, "prefill_tokens must be an array of numbers, got NoneType"),
        ("prefill_times", [0.03, float("inf"), 0.15], ValueError, r"prefill_times\[1\] is inf"),
        ("prefill_times", ["a", "b", "c"], ValueError, "prefill_times must hold real numbers"),
        ("decode_active", [[1, 10, 100]], ValueError, "decode_active must be a 1-dimensional array"),
        ("decode_times", [0.03, 0.0, 0.05], ValueError, r"decode_times\[1\] is 0.0; values must be > 0"),
    ],
)
def test_fitting_and_errors_check_their_samples(field, value, error, message) -> None:
    """LinearCostModel.fit and cost_model_error name the bad sample array and entry."""
    samples = {**GOOD_SAMPLES, field: value}
    with pytest.raises(error, match=message):
        LinearCostModel.fit(**samples, prefill_capacity=5000)
    with pytest.raises(error, match=message):
        cost_model_error(LinearCostModel.paper(), **samples)


def test_fit_and_errors_check_the_rest() -> None:
    """The fitted capacity and the model whose error is measured are checked too."""
    with pytest.raises(TypeError, match="prefill_capacity must be an integer, got float nan"):
        LinearCostModel.fit(**GOOD_SAMPLES, prefill_capacity=float("nan"))
    with pytest.raises(TypeError, match=r"model must be a cost model .* got str"):
        cost_model_error("paper", [1], [0.1])
    err = cost_model_error(LinearCostModel.paper(), np.array([100], dtype=np.int32), np.float32([0.038]))
    assert err["prefill_mape"] == pytest.approx(0.0, abs=1e-6) and np.isnan(err["decode_mape"])
