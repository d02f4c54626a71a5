"""The modelling layer over scipy's HiGHS: expressions, rows, statuses, limits and bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmsched.mip.milp import HIGHS_MODEL_STATUS, LinExpr, MilpModel, Row, highs_model_status, linear_sum


def test_expressions_combine_like_a_solvers_modelling_api() -> None:
    """Sums, differences, numbers on either side (numpy scalars too) and comparisons give the
    rows a solver's API would: ``lower <= terms <= upper`` with the constants moved right."""
    model = MilpModel()
    x, y = model.variable(0, 1, True, "x"), model.variable(0, 5, False, "y")
    expr = 3 - (np.int64(2) * x - y * 0.5) + 1
    assert expr.terms == {0: -2.0, 1: 0.5} and expr.constant == 4.0
    assert expr.value(np.array([1.0, 4.0])) == 4.0
    assert (x + y <= 3) == Row({0: 1.0, 1: 1.0}, -math.inf, 3.0)
    assert (1 <= x - y) == Row(  # noqa: SIM300 (a number on the left is the point)
        {0: 1.0, 1: -1.0}, 1.0, math.inf
    )
    assert (x == 2 * y - 1) == Row({0: 1.0, 1: -2.0}, -1.0, -1.0)
    total = linear_sum([x, y, x, 2])
    assert total.terms == {0: 2.0, 1: 1.0} and total.constant == 2.0
    assert x.terms == {0: 1.0}, "a sum must not change its terms"
    with pytest.raises(TypeError, match="not linear"):
        x * y
    with pytest.raises(TypeError, match="numbers and expressions"):
        x + "y"
    with pytest.raises(TypeError, match="not a comparison"):
        model.add(x + y, "no row")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unhashable"):
        hash(x)


def test_a_small_milp_is_solved_to_a_proven_optimum() -> None:
    """min 2x + y, x + y >= 2.5, x integer in [0, 3], y in [0, 1]: x = 2, y = 0.5, objective
    4.5 (the LP optimum, 3.5 at y = 1 x = 1.5, is not integral), proven: the dual bound is it."""
    model = MilpModel()
    x, y = model.variable(0, 3, True, "x"), model.variable(0, 1, False, "y")
    model.add(x + y >= 2.5, "cover")
    model.minimize(2 * x + y + 10)
    outcome = model.solve(math.inf)
    assert outcome.status == "optimal"
    assert outcome.x is not None and not outcome.x.flags.writeable
    assert outcome.x == pytest.approx([2.0, 0.5])
    assert outcome.objective == pytest.approx(14.5) and outcome.dual_bound == pytest.approx(14.5)


def test_an_infeasible_model_says_so_without_a_solution_or_bound() -> None:
    """x + y >= 3 over two binaries: HiGHS's status is read from scipy's message, and scipy
    gives neither a solution nor a bound."""
    model = MilpModel()
    x, y = model.variable(0, 1, True, "x"), model.variable(0, 1, True, "y")
    model.add(x + y >= 3, "too much")
    model.minimize(x)
    outcome = model.solve(10.0)
    assert outcome.status in ("infeasible", "unbounded_or_infeasible")
    assert outcome.x is None and outcome.objective == math.inf and outcome.dual_bound == -math.inf


def _market_split() -> MilpModel:
    """Two random equations over 20 binaries, each at half its row sum, with their deviations
    minimised: HiGHS needs 27 nodes to prove that both hold exactly."""
    rng = np.random.default_rng(0)
    weights = rng.integers(0, 100, (2, 20))
    model = MilpModel()
    xs = [model.variable(0, 1, True, f"x{i}") for i in range(20)]
    deviations = []
    for r, row in enumerate(weights):
        over = model.variable(0, math.inf, False, f"over{r}")
        under = model.variable(0, math.inf, False, f"under{r}")
        deviations += [over, under]
        load = linear_sum(int(w) * x for w, x in zip(row, xs, strict=True))
        model.add(load + over - under == int(row.sum()) // 2, f"split({r})")
    model.minimize(linear_sum(deviations))
    return model


def test_a_node_limit_is_a_deterministic_stop_not_the_clock() -> None:
    """A node limit ends in HiGHS's 'solution_limit' (not 'time_limit'), with a solution and a
    bound below it, the same twice; without it the optimum 0 is proven."""
    first, second = (_market_split().solve(math.inf, node_limit=1) for _ in range(2))
    assert first.status == "solution_limit"
    assert first.x is not None and first.dual_bound < first.objective - 0.5
    assert [(o.objective, o.dual_bound, o.nodes) for o in (first, second)] == [
        (first.objective, first.dual_bound, first.nodes)
    ] * 2
    full = _market_split().solve(math.inf)
    assert full.status == "optimal" and full.objective == pytest.approx(0, abs=1e-9) and full.nodes > 1


def test_the_status_is_read_from_scipys_message() -> None:
    """scipy folds HiGHS's statuses into five; its message keeps HiGHS's number, which wins;
    without one scipy's status is used."""
    assert highs_model_status(4, "The HiGHS status code was not recognized. (HiGHS Status 16: x)") == (
        "solution_limit"
    )
    infeasible = "(HiGHS Status 9: Primal infeasible or unbounded)"
    assert highs_model_status(4, infeasible) == "unbounded_or_infeasible"
    assert highs_model_status(1, "Time limit reached.") == "time_limit"
    assert highs_model_status(4, "(HiGHS Status 77: new)") == "status 77"


def test_the_status_numbers_are_highs_own() -> None:
    """Every number of HIGHS_MODEL_STATUS names the same status as HiGHS's enum in scipy."""
    core = pytest.importorskip("scipy.optimize._highspy._core")
    theirs = {int(value): name for name, value in core.HighsModelStatus.__members__.items()}
    for number, name in HIGHS_MODEL_STATUS.items():
        assert theirs[number].lower() == "k" + name.replace("_", ""), number


def test_linexpr_of_wraps_numbers() -> None:
    """A number becomes a constant expression; an expression is itself."""
    assert LinExpr.of(2).constant == 2.0 and LinExpr.of(2).terms == {}
    x = MilpModel().variable(0, 1, True, "x")
    assert LinExpr.of(x) is x
