"""Lower bounds: the paper's (Eqs. 31-32) and the strong one."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched import LevelCostModel, LinearCostModel, Workload, lower_bounds, simulate, workloads
from llmsched.engines.competition.bounds import trivial_decode_tokens_makespan


def test_paper_formula_under_the_mips_semantics() -> None:
    """With one level and constant T^d, the bound is exactly T^p_L ceil(sum N^p / cap) + T^d C*."""
    wl = workloads.gsm8k(0)
    cost = LevelCostModel([(5000, 0.675)], 0.071)
    lb = lower_bounds(wl, cost, 200)
    assert lb.prefill == pytest.approx(19 * 0.675)
    total = wl.total_output_tokens
    assert lb.decode_tokens_makespan == max(-(-total // 200), 512)
    assert lb.decode == pytest.approx(0.071 * lb.decode_tokens_makespan)
    assert lb.paper == pytest.approx(lb.prefill + lb.decode)


def test_gsm8k_bounds_with_the_linear_model() -> None:
    """On gsm8k(0) with the paper's costs: prefill 12.2 s and decode 161.7 s, near the paper's 13 + 167 s."""
    lb = lower_bounds(workloads.gsm8k(0), LinearCostModel.paper(), 200)
    assert lb.prefill == pytest.approx(19 * 0.025 + 90258 * 1.3e-4)
    assert 155 < lb.decode < 167
    assert lb.paper <= lb.strong


def test_single_request_bound_dominates_with_spare_clients() -> None:
    """One long request on many clients: the bound is at least that request alone at batch size one."""
    cost = LinearCostModel.paper()
    wl = Workload([100, 10], [500, 5], arrival=[0.0, 1.0])
    lb = lower_bounds(wl, cost, 200)
    alone = cost.prefill_time(100) + 500 * cost.decode_iteration_time(1)
    assert lb.single_request == pytest.approx(alone)
    assert lb.strong == pytest.approx(max(alone, lb.paper)) and lb.strong >= alone
    assert simulate(wl, cost, 200).makespan >= lb.strong - 1e-9


def test_indivisible_long_prompts_raise_the_strong_bound() -> None:
    """Prompts longer than half the capacity need a stage each."""
    cost = LinearCostModel(1.0, 0.0, 0.01, 0.0, prefill_capacity=100)
    wl = Workload([60, 60, 60], [1, 1, 1])
    lb = lower_bounds(wl, cost, 3)
    assert lb.prefill == pytest.approx(2.0)  # ceil(180 / 100) stages
    assert lb.strong >= 3.0  # three stages of 1 s
    assert simulate(wl, cost, 3).makespan >= lb.strong


def test_exact_decode_makespan_is_used_and_checked() -> None:
    """A supplied bin-packing makespan raises t_d; one below the trivial bound is refused."""
    wl = Workload([10, 10, 10], [5, 5, 5])
    cost = LevelCostModel([(100, 1.0)], 0.5)
    assert lower_bounds(wl, cost, 2).decode_tokens_makespan == 8
    assert lower_bounds(wl, cost, 2, decode_tokens_makespan=10).decode == pytest.approx(5.0)
    with pytest.raises(ValueError, match="below the trivial bound"):
        lower_bounds(wl, cost, 2, decode_tokens_makespan=7)


def test_paper_literal_arithmetic_is_not_a_bound() -> None:
    """The paper's arithmetic (full stages, full batches) exceeds a real makespan when batches are small."""
    cost = LinearCostModel.paper()
    wl = Workload([100], [500])
    lb = lower_bounds(wl, cost, 200)
    assert lb.paper_literal == pytest.approx(0.675 + 500 * 0.071)
    makespan = simulate(wl, cost, 200).makespan
    assert lb.paper_literal > makespan >= lb.strong


def test_release_dates_raise_the_strong_bound() -> None:
    """Late arrivals: the strong bound counts the work that can only start after them."""
    cost = LevelCostModel([(100, 1.0)], 0.5)
    wl = Workload([10, 10, 10], [2, 2, 10], arrival=[0.0, 0.0, 20.0])
    lb = lower_bounds(wl, cost, 3)
    # The last request cannot start before 20 s: one prefill stage and 10 iterations.
    assert lb.strong == pytest.approx(20.0 + 1.0 + 10 * 0.5)
    assert simulate(wl, cost, 3).makespan >= lb.strong - 1e-9


def test_bounds_need_a_cost_model_that_can_bound() -> None:
    """A cost model without min_prefill_time/min_decode_time simulates but cannot be bounded."""

    class Plain:
        prefill_capacity = 10

        def prefill_time(self, tokens):
            return 0.1 + 0 * tokens

        def decode_iteration_time(self, active):
            return 0.01 + 0 * active

    wl = Workload([5], [3])
    assert simulate(wl, Plain(), 1).makespan == pytest.approx(0.13)
    with pytest.raises(TypeError, match="min_prefill_time"):
        lower_bounds(wl, Plain(), 1)


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (float("nan"), TypeError, "decode_tokens_makespan must be an integer, got float nan"),
        (float("inf"), TypeError, "decode_tokens_makespan must be an integer, got float inf"),
        (10.5, TypeError, "decode_tokens_makespan must be an integer, got float 10.5"),
        ("10", TypeError, "decode_tokens_makespan must be an integer, got str '10'"),
        (True, TypeError, "decode_tokens_makespan must be an integer, got bool True"),
        (-1, ValueError, "decode_tokens_makespan must be at least 1, got -1"),
        (7, ValueError, "decode_tokens_makespan=7 is below the trivial bound 8"),
    ],
)
def test_decode_tokens_makespan_is_checked(value, error, message) -> None:
    """A supplied bin-packing makespan must be an integer at least the trivial bound (NaN is not cast)."""
    wl = Workload([10, 10, 10], [5, 5, 5])
    with pytest.raises(error, match=message):
        lower_bounds(wl, LevelCostModel([(100, 1.0)], 0.5), 2, decode_tokens_makespan=value)


def test_numpy_integers_are_good_counts() -> None:
    """numpy integer clients and makespans give the bounds of Python ints (a uint16 does not overflow)."""
    wl = Workload([10, 10, 10], [5, 5, 5])
    cost = LevelCostModel([(100, 1.0)], 0.5)
    assert lower_bounds(wl, cost, np.uint16(2), np.int64(9)) == lower_bounds(wl, cost, 2, 9)
    assert trivial_decode_tokens_makespan(np.array([5, 5, 5]), np.uint16(2)) == 8


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        (([], 2), ValueError, "output_tokens is empty"),
        (([5, 0], 2), ValueError, r"output_tokens\[1\] is 0; token counts must be in \[1, "),
        ((None, 2), TypeError, "output_tokens must be an array of token counts, got NoneType"),
        (([5, 5], 0), ValueError, "clients must be at least 1, got 0"),
        (([5, 5], 2.0), TypeError, "clients must be an integer, got float 2.0"),
    ],
)
def test_trivial_bound_checks_its_arguments(args, error, message) -> None:
    """The trivial bin-packing bound names a bad output array or client count (no ZeroDivisionError)."""
    with pytest.raises(error, match=message):
        trivial_decode_tokens_makespan(*args)
