"""The solvers' trace helpers: SCIP's event handler and CP-SAT's solution callback."""

from __future__ import annotations

import math

import pytest

from llmsched.core.result import Tracer
from llmsched.mip.traces import attach_scip_trace, run_cpsat

# Eight jobs on three machines, optimum 36 / 3 = 12 (7+5, 6+4+2, 5+4+3): both solvers find
# a few worse packings before it, so that their traces have several points.
TIMES = [7, 6, 5, 5, 4, 4, 3, 2]
MACHINES = 3
OPTIMUM = 12


def _scip_model():
    scip = pytest.importorskip("pyscipopt")
    model = scip.Model("tiny-pcmax")
    model.hideOutput()
    jobs, machines = range(len(TIMES)), range(MACHINES)
    x = {(i, j): model.addVar(vtype="B", name=f"x({i},{j})") for i in jobs for j in machines}
    makespan = model.addVar(lb=0, name="t_max")
    for i in range(len(TIMES)):
        model.addCons(scip.quicksum(x[i, j] for j in range(MACHINES)) == 1, name=f"assign({i})")
    for j in range(MACHINES):
        load = scip.quicksum(TIMES[i] * x[i, j] for i in range(len(TIMES)))
        model.addCons(load <= makespan, name=f"load({j})")
    model.setObjective(makespan, "minimize")
    return model


def _cpsat_model():
    cp_model = pytest.importorskip("ortools.sat.python.cp_model")
    model = cp_model.CpModel()
    x = {(i, j): model.new_bool_var(f"x({i},{j})") for i in range(len(TIMES)) for j in range(MACHINES)}
    makespan = model.new_int_var(0, sum(TIMES), "t_max")
    for i in range(len(TIMES)):
        model.add_exactly_one(x[i, j] for j in range(MACHINES))
    for j in range(MACHINES):
        model.add(sum(TIMES[i] * x[i, j] for i in range(len(TIMES))) <= makespan)
    model.minimize(makespan)
    return model


def _solve_scip() -> tuple[object, Tracer]:
    model = _scip_model()
    tracer = Tracer(10.0)
    attach_scip_trace(model, tracer)
    model.optimize()
    return model, tracer


def test_scip_trace_never_puts_a_bound_above_an_incumbent() -> None:
    """Every point of SCIP's trace is named 'scip', holds a bound no higher than its incumbent
    and than the optimum and an incumbent no lower than the optimum, incumbents only fall,
    bounds only rise, and the final bound is SCIP's proof of the optimum."""
    model, tracer = _solve_scip()
    assert model.getStatus() == "optimal" and model.getPrimalbound() == OPTIMUM
    points = tracer.points
    assert len(points) >= 3 and {point.source for point in points} == {"scip"}
    assert all(point.lower_bound <= OPTIMUM <= point.upper_bound for point in points)
    incumbents, bounds = [point.upper_bound for point in points], [point.lower_bound for point in points]
    assert incumbents == sorted(incumbents, reverse=True) and bounds == sorted(bounds)
    assert points[-1].lower_bound == model.getDualbound() == OPTIMUM


def test_scip_trace_ends_at_scips_objective() -> None:
    """The trace's last incumbent is the objective SCIP returns."""
    model, tracer = _solve_scip()
    assert tracer.points[-1].upper_bound == model.getPrimalbound() == OPTIMUM


def test_scip_trace_records_only_solutions_scip_found() -> None:
    """No point of the trace holds SCIP's infinity (1e20) as an incumbent."""
    model, tracer = _solve_scip()
    assert all(point.upper_bound < model.infinity() for point in tracer.points)


@pytest.mark.parametrize("scale", [1, 2])
def test_cpsat_trace_ends_at_the_solvers_objective_and_bound(scale: int) -> None:
    """Every point is named 'cp-sat' with its bound no higher than its incumbent, and the last
    is CP-SAT's objective and bound, both in objective units over ``scale``."""
    cp_model = pytest.importorskip("ortools.sat.python.cp_model")
    tracer = Tracer(10.0)
    solver, status = run_cpsat(_cpsat_model(), tracer, workers=1, display=False, scale=scale)
    assert status == cp_model.OPTIMAL and solver.objective_value == OPTIMUM
    points = tracer.points
    assert len(points) >= 2 and {point.source for point in points} == {"cp-sat"}
    assert all(point.lower_bound <= OPTIMUM / scale <= point.upper_bound for point in points)
    last = points[-1]
    assert last.upper_bound == solver.objective_value / scale == OPTIMUM / scale
    assert last.lower_bound == solver.best_objective_bound / scale == OPTIMUM / scale


@pytest.mark.parametrize(
    ("time_limit", "workers", "seconds", "threads"), [(5.0, 0, 5.0, 1), (0.0, 3, 0.01, 3)]
)
def test_cpsat_runs_within_the_tracers_time_and_workers(time_limit, workers, seconds, threads) -> None:
    """CP-SAT gets what is left of the tracer's time (at least 0.01 s, so that a spent clock
    still returns a status) and at least one worker."""
    pytest.importorskip("ortools.sat.python.cp_model")
    tracer = Tracer(time_limit)
    solver, _ = run_cpsat(_cpsat_model(), tracer, workers=workers, display=False)
    assert solver.parameters.max_time_in_seconds == pytest.approx(seconds, abs=0.01)
    assert solver.parameters.max_time_in_seconds <= max(time_limit, 0.01)
    assert solver.parameters.num_workers == threads
    assert not solver.parameters.log_search_progress
    assert all(math.isfinite(point.upper_bound) for point in tracer.points)
