"""The pipeline's deterministic work budgets, scaled by ``solve_pcmax(effort=...)``, end its search."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmsched.mip import Status, solve_pcmax

# benchmarks/pcmax_bench.py's open class: U(1, 10000), 100 jobs on 25 machines. The trivial
# bound (sum / m = 20,317) stays open at these efforts, and more effort buys better packings.
OPEN = np.random.default_rng(1).integers(1, 10001, size=100)
MACHINES = 25
EFFORTS = (0.002, 0.01, 0.04)

# 22 jobs of U(1, 10000) on 6 machines: the searches leave a gap that the exact step takes to
# SCIP's arc-flow model, whose presolve and root LP grow with its graph (which the budget caps).
ARCFLOW_GAP = np.concatenate(
    [
        [9611, 2869, 1144, 6032, 6676, 7776, 6427, 7161, 9153, 9154, 9266, 8604, 7211, 9183, 131],
        [266, 7977, 4373, 7482, 4850, 9018, 652],
    ]
)


@pytest.fixture(scope="module")
def by_effort() -> dict[float, object]:
    return {effort: solve_pcmax(OPEN, MACHINES, time_limit=60, effort=effort) for effort in EFFORTS}


def _answer(result) -> tuple:
    """Everything a result says except the wall-clock times."""
    trace = [(point.lower_bound, point.upper_bound, point.source) for point in result.trace]
    figures = (result.makespan, result.lower_bound, result.status, result.closed_by)
    return (*figures, result.assignment.tolist(), trace)


def test_a_tiny_effort_ends_on_its_budgets_not_the_clock(by_effort) -> None:
    """At a five-hundredth of the default effort the open instance stops on its budgets well
    inside a 60 s limit: status 'feasible' (never 'time_limit') with a gap; with no clock at
    all it gives the same answer again, trace included."""
    tiny = by_effort[EFFORTS[0]]
    assert tiny.status is Status.FEASIBLE and tiny.gap > 0 and tiny.runtime < 5
    assert tiny.lower_bound == -(-int(OPEN.sum()) // MACHINES) == 20317
    again = solve_pcmax(OPEN, MACHINES, time_limit=math.inf, effort=EFFORTS[0])
    assert _answer(again) == _answer(tiny)


def test_more_effort_is_never_worse(by_effort) -> None:
    """Along growing efforts no makespan rises and no bound falls, each run still ends on its
    budgets, and the largest effort finds a strictly better packing than the smallest."""
    results = [by_effort[effort] for effort in EFFORTS]
    makespans = [result.makespan for result in results]
    bounds = [result.lower_bound for result in results]
    assert makespans == sorted(makespans, reverse=True) and makespans[-1] < makespans[0]
    assert bounds == sorted(bounds)
    assert all(result.status is Status.FEASIBLE for result in results)


def test_low_effort_stops_on_its_budget_deterministically() -> None:
    """With a twentieth of the default effort a hard instance stops on its work budgets, not
    the clock: status 'feasible' with a gap, and a second run gives the same answer exactly."""
    rng = np.random.default_rng(0)
    times = rng.integers(1, 10001, size=50)
    low = solve_pcmax(times, 10, time_limit=60, effort=0.05, exact=False)
    again = solve_pcmax(times, 10, time_limit=60, effort=0.05, exact=False)
    assert low.status is Status.FEASIBLE and low.gap > 0
    assert (again.makespan, again.lower_bound, again.status) == (low.makespan, low.lower_bound, low.status)
    assert np.array_equal(again.assignment, low.assignment)


def test_the_exact_steps_arcflow_model_stays_within_the_budgets() -> None:
    """At a tiny effort even the exact step ends on its budgets inside a 1 s limit."""
    pytest.importorskip("pyscipopt")
    result = solve_pcmax(ARCFLOW_GAP, 6, time_limit=1.0, effort=0.002)
    assert result.status is not Status.TIME_LIMIT


def test_the_default_has_no_clock_and_a_limit_loads_the_solvers_before_it_starts() -> None:
    """Without a time limit nothing reads the clock's verdict and no solver package is loaded
    that the instance does not need; with one, scipy's HiGHS and OR-Tools are loaded before
    its clock starts (they took 0.4-0.8 s of a 0.5 s limit when the steps loaded them)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from llmsched.mip import solve_pcmax\n"
        "r = solve_pcmax([3, 3, 2, 2, 2], 2{limit})\n"
        "print(r.status, 'scipy.optimize' in sys.modules, 'ortools.sat.python.cp_model' in sys.modules)\n"
    )
    free = subprocess.run(
        [sys.executable, "-c", code.format(limit="")], capture_output=True, text=True, check=True
    )
    limited = subprocess.run(
        [sys.executable, "-c", code.format(limit=", time_limit=5")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert free.stdout.split() == ["optimal", "False", "False"]
    assert limited.stdout.split() == ["optimal", "True", "True"]


def test_scip_gets_the_arc_flow_graphs_of_few_sizes_only() -> None:
    """The arc-flow budget admits Mico-shaped graphs (29 sizes, 6,234 arcs, which it closes)
    and not a GSM8K-shaped one of 44,792 arcs, whose root alone ran for 120 s in SCIP."""
    from llmsched.mip.pcmax.budgets import ARCFLOW_ARCS
    from llmsched.mip.pcmax.exact import arcflow_fits
    from llmsched.workloads import gsm8k_like, mico_like

    mico = np.sort(mico_like(30, seed=188).output_tokens)[::-1]
    gsm8k = np.sort(gsm8k_like(200, seed=2).output_tokens)[::-1]
    assert arcflow_fits(mico, 1108, ARCFLOW_ARCS)
    assert not arcflow_fits(gsm8k, 1182, ARCFLOW_ARCS)
    assert arcflow_fits(gsm8k, 1182, 100_000)  # the old budget let it through
