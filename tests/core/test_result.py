"""The result vocabulary: the tracer refuses contradictions, gaps and frames read right."""

from __future__ import annotations

import math

import pytest

from llmsched.core.result import Result, Status, Tracer, relative_gap


def test_a_bound_above_the_incumbent_is_refused() -> None:
    """A packing at C proves the optimum is at most C, never at least: a bound above a
    solution in hand is a bug, and the tracer says so instead of reporting optimal."""
    tracer = Tracer(10.0)
    tracer.incumbent(2433.0, "heuristic")
    with pytest.raises(RuntimeError, match="above the incumbent"):
        tracer.bound(2439.0, "arc-flow")
    assert tracer.lower_bound == -math.inf and not tracer.closed()


def test_an_incumbent_below_the_bound_is_refused() -> None:
    """The same contradiction the other way round: a solution below a proven bound."""
    tracer = Tracer(10.0)
    tracer.bound(100.0, "lower bounds")
    with pytest.raises(RuntimeError, match="below the proven lower bound"):
        tracer.incumbent(99.0, "heuristic")
    assert tracer.upper_bound == math.inf


def test_solver_rounding_within_the_tolerance_closes_the_gap() -> None:
    """A bound a hair above the incumbent (solver tolerance) closes it without raising."""
    tracer = Tracer(10.0, tolerance=1e-6)
    tracer.incumbent(3.0, "scip")
    tracer.bound(3.0 + 1e-7, "scip")
    assert tracer.closed()
    assert [p.source for p in tracer.points] == ["scip", "scip"]


def test_trace_records_only_improvements_in_order() -> None:
    """Each point is an improvement of the bound or the incumbent, the bound never above it."""
    tracer = Tracer(10.0)
    tracer.bound(5.0, "a")
    tracer.bound(4.0, "b")  # not higher: no point
    assert tracer.incumbent(9.0, "c")
    assert not tracer.incumbent(9.5, "d")
    tracer.bound(7.0, "e")
    assert [(p.lower_bound, p.upper_bound, p.source) for p in tracer.points] == [
        (5.0, math.inf, "a"),
        (5.0, 9.0, "c"),
        (7.0, 9.0, "e"),
    ]
    assert all(p.lower_bound <= p.upper_bound for p in tracer.points)


@pytest.mark.parametrize(
    ("upper", "lower", "gap"),
    [(10.0, 8.0, 0.2), (10.0, 10.0, 0.0), (math.inf, 3.0, math.inf), (0.0, 0.0, 0.0)],
)
def test_relative_gap(upper: float, lower: float, gap: float) -> None:
    assert relative_gap(upper, lower) == pytest.approx(gap)


def test_result_trace_frame_has_its_columns_even_when_empty() -> None:
    result = Result(
        status=Status.UNKNOWN, objective=math.inf, lower_bound=-math.inf, gap=math.inf, runtime=0.0
    )
    assert list(result.trace_frame().columns) == ["time", "lower_bound", "upper_bound", "source"]
    assert str(Status.TIME_LIMIT) == "time_limit"


def test_figures_are_a_result_s_fields_of_the_solve_so_far() -> None:
    """A tracer's figures are the objective and bound given, their gap, the time and the trace."""
    tracer = Tracer(10.0)
    tracer.bound(8.0, "a")
    figures = tracer.figures(10.0, 8.0)
    assert figures["gap"] == pytest.approx(0.2) and figures["trace"] == tuple(tracer.points)
    result = Result(status=Status.FEASIBLE, **figures)
    assert (result.objective, result.lower_bound) == (10.0, 8.0) and 0 <= result.runtime < 10
