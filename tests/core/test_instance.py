"""Instance checks: what the loop, the bounds and the solvers refuse before any work."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmsched import LinearCostModel, Workload
from llmsched.core.instance import check_instance, check_stage_time

SMALL_COST = LinearCostModel(1.0, 0.1, 0.5, 0.25, prefill_capacity=100)


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((Workload([5], [1]), SMALL_COST, 0), ValueError, "clients must be at least 1"),
        ((Workload([5], [1]), SMALL_COST, -3), ValueError, "clients must be at least 1"),
        ((Workload([5], [1]), SMALL_COST, 2.5), TypeError, "clients must be an integer"),
        ((Workload([5], [1]), SMALL_COST, True), TypeError, "clients must be an integer"),
        ((Workload([500], [1]), SMALL_COST, 1), ValueError, "request 0 has a prompt of 500 tokens"),
        ((Workload([], []), SMALL_COST, 1), ValueError, "no requests"),
        ((Workload([5], [1]), "paper", 1), TypeError, "cost must be a cost model"),
        (([5], SMALL_COST, 1), TypeError, "workload must be a llmsched.Workload"),
    ],
)
def test_bad_instances_are_refused(args, error, message) -> None:
    """Each kind of invalid instance raises an error naming the field and the value."""
    with pytest.raises(error, match=message):
        check_instance(*args)


def test_a_prompt_above_the_capacity_is_refused_with_the_fixes() -> None:
    """The error counts the prompts that are too long and names both fixes: clipping them
    (max_prompt=, --max-prompt) or a cost model with a larger capacity (--cost linear:...)."""
    with pytest.raises(ValueError) as info:
        check_instance(Workload([50, 500, 120, 7], [1, 1, 1, 1]), SMALL_COST, 1)
    message = str(info.value)
    assert "request 1 has a prompt of 500 tokens, more than the prefill capacity of 100 tokens" in message
    assert "(2 of the 4 prompts are longer than 100)" in message
    assert "max_prompt=100" in message and "--max-prompt 100" in message
    assert "prefill capacity of at least 500 (--cost linear:A_P,B_P,A_D,B_D,500)" in message


def test_a_valid_instance_passes() -> None:
    """A workload whose longest prompt fills a stage exactly is valid."""
    check_instance(Workload([100, 3], [1, 2], arrival=[0.0, 7.5]), SMALL_COST, 1)


def test_arrivals_too_large_for_float_precision_are_refused() -> None:
    """Epoch-style arrival times cannot time 29 ms iterations in float64: a clear error says so."""
    wl = Workload([5, 6], [3, 4], arrival=[1.7e9, 1.7e9])
    with pytest.raises(ValueError, match="subtract the first arrival"):
        check_instance(wl, LinearCostModel.paper(), 2)


class _Constant:
    """A cost model whose every stage takes ``seconds``."""

    prefill_capacity = 100

    def __init__(self, seconds: float):
        self.seconds = seconds

    def prefill_time(self, tokens):
        return self.seconds + 0 * np.asarray(tokens, dtype=float)

    def decode_iteration_time(self, active):
        return self.seconds + 0 * np.asarray(active, dtype=float)


@pytest.mark.parametrize(("seconds", "shown"), [(math.nan, "nan"), (-0.01, "-0.01"), (math.inf, "inf")])
def test_cost_models_with_impossible_times_are_refused(seconds: float, shown: str) -> None:
    """A cost model timing one token or one client as NaN, infinite or negative is named,
    with its value, instead of a misleading message about arrival times."""
    with pytest.raises(ValueError, match=rf"cost model _Constant gave decode_iteration_time\(1\) = {shown}"):
        check_instance(Workload([5], [1], arrival=[3.0]), _Constant(seconds), 1)


@pytest.mark.parametrize(
    ("capacity", "error"),
    [
        (math.inf, TypeError),
        (math.nan, TypeError),
        (100.5, TypeError),
        ("100", TypeError),
        (None, TypeError),
        (True, TypeError),
        (0, ValueError),
        (-1, ValueError),
    ],
)
def test_a_prefill_capacity_that_is_not_a_positive_integer_is_refused(capacity, error) -> None:
    """The capacity is named with the cost model (inf raised OverflowError, "100" numpy's
    ufunc error, 100.5 was cut to 100, 0 blamed the prompts)."""
    cost = _Constant(0.1)
    cost.prefill_capacity = capacity
    with pytest.raises(
        error, match=r"cost model _Constant has prefill_capacity = .*; it must be an integer >= 1"
    ):
        check_instance(Workload([5], [1]), cost, 1)


def test_stages_of_no_time_need_no_precision() -> None:
    """A cost model whose stages take no time is valid, even with late arrivals."""
    check_instance(Workload([5], [1], arrival=[1.7e9]), _Constant(0.0), 1)


def test_check_stage_time_returns_the_float_or_names_the_model() -> None:
    """A finite time >= 0 comes back as a float; a str is not a time."""
    assert check_stage_time(SMALL_COST, "prefill_time(1)", np.float32(0.5)) == 0.5
    with pytest.raises(ValueError, match=r"LinearCostModel gave prefill_time\(3\) = 'fast'"):
        check_stage_time(SMALL_COST, "prefill_time(3)", "fast")


def test_under_fusion_a_table_is_bounded_per_prompt_token() -> None:
    """A model that is not affine: under fusion each iteration with chunks holds a prompt token
    at least, so the prefill work is at most the prompt tokens times the longest such iteration
    (under SplitwiseSim's factor, a full budget's tokens, a decoding request among them)."""
    from llmsched import TableCostModel
    from llmsched.core.instance import WorkloadTotals, prefill_work_bound

    table = TableCostModel((100, 1000), (0.02, 0.2), (1, 8), (0.01, 0.02), mixed_factor=1.1)
    totals = WorkloadTotals.of(Workload([300, 500], [4, 4]))
    competition = prefill_work_bound(totals, table)
    assert competition.seconds == pytest.approx(2 * table.prefill_time(800))
    fused = prefill_work_bound(totals, table, token_budget=256, clients=2)
    assert fused.longest == pytest.approx(1.1 * table.prefill_time(256))
    assert fused.seconds == pytest.approx(800 * fused.longest)
    assert "mixed_iteration_time(1, 0, 255, 0)" in fused.stage
