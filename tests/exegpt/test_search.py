"""ExeGPT's branch-and-bound: the exhaustive optimum with far fewer evaluations."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsched.exegpt import Variable, branch_and_bound, exhaustive, grid_size


def pipeline_like(config: dict[str, int]) -> tuple[float, float]:
    """A monotone stand-in for a simulator: each variable raises throughput and latency."""
    b, n, m = config["batch"], config["iters"], config["stages"]
    latency = 0.02 * n + 0.001 * b + 0.05 * math.log1p(b) + 0.03 * m
    throughput = b * n / (0.5 + 0.01 * b + 0.02 * n) * (1 + 0.1 * m)
    return throughput, latency


VARIABLES = [
    Variable("batch", list(range(1, 257))),
    Variable("iters", list(range(1, 65))),
    Variable("stages", [1, 2, 3, 4]),
]


@pytest.mark.parametrize("bound", [0.5, 1.0, 2.0, math.inf])
def test_branch_and_bound_finds_the_exhaustive_optimum_with_few_evaluations(bound: float) -> None:
    """On a monotone function the search returns the grid's optimum using <= 10% of the grid."""
    exact = exhaustive(pipeline_like, VARIABLES, bound)
    found = branch_and_bound(pipeline_like, VARIABLES, bound, eps_throughput=0.0, eps_latency=0.0)
    assert exact.evaluations == grid_size(VARIABLES) == 256 * 64 * 4
    assert found.feasible and found.latency <= bound
    assert found.throughput == pytest.approx(exact.throughput)
    assert found.evaluations <= 0.1 * exact.evaluations


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 12), min_size=1, max_size=3),
    st.floats(0.5, 40.0),
    st.integers(0, 10_000),
)
def test_never_returns_an_infeasible_or_worse_configuration(
    sizes: list[int], bound: float, salt: int
) -> None:
    """For random monotone functions over random grids, the search matches the exhaustive optimum."""
    variables = [Variable(f"x{d}", list(range(1, s + 1))) for d, s in enumerate(sizes)]
    weights = [(salt % (7 + d)) + 1 for d in range(len(sizes))]

    def perf(config: dict[str, int]) -> tuple[float, float]:
        xs = [config[f"x{d}"] for d in range(len(sizes))]
        return sum(w * x * x for w, x in zip(weights, xs, strict=True)), sum(
            x * (d + 1) for d, x in enumerate(xs)
        )

    exact = exhaustive(perf, variables, bound)
    found = branch_and_bound(perf, variables, bound, eps_throughput=0.0, eps_latency=0.0)
    assert found.feasible == exact.feasible
    if exact.feasible:
        assert found.latency <= bound
        assert found.throughput == pytest.approx(exact.throughput)


def test_no_configuration_meets_the_bound() -> None:
    """An impossible bound gives a result saying so, not an exception."""
    result = branch_and_bound(pipeline_like, VARIABLES, 1e-6)
    assert not result.feasible and result.config is None
    assert "no configuration meets the latency bound" in result.message
    assert result.evaluations == 1  # the fastest corner already breaks it


def test_tolerance_keeps_the_optimum_of_a_slightly_non_monotone_function() -> None:
    """A 1% wiggle in latency breaks monotonicity; with eps_latency 2% the optimum is still found
    (x = 50 and 51 break the bound of 50, x = 49 meets it)."""

    def wiggly(config: dict[str, int]) -> tuple[float, float]:
        x = config["x"]
        return float(x), x * (1 + 0.01 * ((-1) ** x))

    variables = [Variable("x", list(range(1, 101)))]
    exact = exhaustive(wiggly, variables, 50.0)
    found = branch_and_bound(wiggly, variables, 50.0, eps_throughput=0.0, eps_latency=0.02)
    assert found.throughput == exact.throughput == 49.0


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: Variable("b", []), "no values"),
        (lambda: Variable("b", [1, 1]), "repeats"),
        (lambda: Variable("b", [1.5]), "integer"),
        (lambda: branch_and_bound(pipeline_like, VARIABLES, -1.0), "latency_bound"),
        (lambda: branch_and_bound(pipeline_like, VARIABLES, 1.0, eps_throughput=1.5), "tolerances"),
        (lambda: branch_and_bound(pipeline_like, [], 1.0), "at least one"),
        (lambda: exhaustive(pipeline_like, [Variable("a", [1]), Variable("a", [2])], 1.0), "repeat"),
    ],
)
def test_bad_arguments_are_refused(call, message) -> None:
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: Variable("b", range(10**12)), ValueError, "variable 'b' has 1000000000000 values; at most"),
        (lambda: Variable("b", "123"), TypeError, "variable 'b' takes a sequence of integers, got str"),
        (lambda: branch_and_bound(None, VARIABLES, 1.0), TypeError, "perf must be a function"),
        (lambda: exhaustive(3, VARIABLES, 1.0), TypeError, "perf must be a function"),
    ],
)
def test_huge_grids_and_missing_functions_are_refused_up_front(call, error, message) -> None:
    """A grid too large to hold and a perf that is no function are refused before any evaluation."""
    with pytest.raises(error, match=message):
        call()
