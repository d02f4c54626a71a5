"""The paper's offline model (Eqs. 26-30) as written, in SCIP, CP-SAT or HiGHS.

::

    min  t_max
    s.t. sum_j x_ij = 1                   for every request i         (27)
         sum_i x_ij T_i <= t_j <= t_max   for every client j          (28)
         x_ij in {0, 1}                                               (29)
         t_j, t_max >= 0                                              (30)

One binary per job and machine, no symmetry breaking: this is the model Pang et al. solved
with SCIP in about 20 minutes, kept literal so its cost can be compared with the pipeline.
(With speeds, constraint 28 divides machine j's load by its speed.)

The solvers run until they prove the optimum or the time limit stops them (then the status
is ``time_limit``), as the paper ran SCIP; with one worker and a fixed seed a run that
finishes gives the same answer every time. HiGHS (``scipy.optimize.milp``, no extra needed)
gets the same model as arrays; scipy gives it no callback, so its trace holds only its final
incumbent and bound, and its bound only when it holds a solution.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from llmsched.mip.pcmax.result import PcmaxResult
from llmsched.mip.traces import Status, Tracer, attach_scip_trace, run_cpsat

__all__ = ["solve_paper_model"]

# SCIP's largest time limit (its "infinity"); a larger one is refused.
SCIP_MAX_SECONDS = 1e20


def solve_paper_model(
    p: np.ndarray,
    m: int,
    speeds: np.ndarray | None,
    tracer: Tracer,
    backend: str,
    workers: int,
    display: bool,
) -> Any:
    """Solve the model above for job times ``p`` on ``m`` machines with ``backend`` (``"scip"``
    or ``"cpsat"``), recording incumbents and bounds in ``tracer``; returns a
    :class:`~llmsched.mip.pcmax.result.PcmaxResult`. :func:`~llmsched.mip.pcmax.solve.solve_pcmax`
    calls it for ``backend="scip"`` or ``"cpsat"``."""
    tracer.bound(0.0, "non-negative times")
    if backend == "scip":
        assignment, status = _scip(p, m, speeds, tracer, workers, display)
    elif backend == "highs":
        assignment, status = _highs(p, m, speeds, tracer, display)
    else:
        assignment, status = _cpsat(p, m, speeds, tracer, workers, display)

    if assignment is None:  # no solution within the limit
        assignment = np.full(p.size, -1, dtype=np.int64)
        makespan = math.inf
    else:
        loads = np.bincount(assignment, weights=p, minlength=m)
        makespan = float((loads if speeds is None else loads / speeds).max())
    lower = min(tracer.lower_bound, makespan)
    if status is Status.OPTIMAL and lower < makespan:
        # The solver closed the gap within its tolerances, but the makespan of the rounded
        # assignment is what is reported: optimal only when the bound proves that value.
        status = Status.FEASIBLE
    return PcmaxResult(
        status=status,
        **tracer.figures(makespan, lower),
        assignment=assignment,
        backend=backend,
        closed_by=backend if status is Status.OPTIMAL else "",
    )


def _scip(
    p: np.ndarray, m: int, speeds: np.ndarray | None, tracer: Tracer, workers: int, display: bool
) -> tuple[np.ndarray | None, Status]:
    from pyscipopt import Model, quicksum

    n = p.size
    model = Model("paper-offline-eqs-26-30")
    if not display:
        model.hideOutput()
    x: dict[tuple[int, int], Any] = {}
    for i in range(n):
        if tracer.expired():  # building a large model can outlast the limit by itself
            return None, Status.TIME_LIMIT
        for j in range(m):
            x[i, j] = model.addVar(vtype="B", name=f"x({i},{j})")
    t = {j: model.addVar(lb=0, name=f"t({j})") for j in range(m)}
    tmax = model.addVar(lb=0, name="t_max")
    for i in range(n):
        model.addCons(quicksum(x[i, j] for j in range(m)) == 1, name=f"assign({i})")  # Eq. 27
    for j in range(m):
        if tracer.expired():
            return None, Status.TIME_LIMIT
        speed = 1.0 if speeds is None else float(speeds[j])
        model.addCons(quicksum(float(p[i]) / speed * x[i, j] for i in range(n)) <= t[j], name=f"load({j})")
        model.addCons(t[j] <= tmax, name=f"makespan({j})")  # Eq. 28
    model.setObjective(tmax, "minimize")  # Eq. 26

    attach_scip_trace(model, tracer)
    # Building the model counts too; SCIP takes no infinite limit, its largest value means none.
    model.setParam("limits/time", min(max(tracer.remaining(), 0.01), SCIP_MAX_SECONDS))
    model.setParam("parallel/maxnthreads", max(1, workers))
    # SCIP's symmetry detection does not look at the clock: on the GSM8K instance (263,800
    # binaries, all 200 clients interchangeable) it ran 50 s past a 60 s limit. Without it the
    # limit holds; the model itself is unchanged.
    model.setParam("misc/usesymmetry", 0)
    model.optimize()
    raw = model.getStatus()
    solution = None
    # The trace holds SCIP's own objective values, which may sit a rounding error below the
    # exact makespan of the rounded assignment; the proven bound is capped by the latter.
    cap = tracer.upper_bound
    if model.getNSols() > 0:
        best = model.getBestSol()
        values = np.array([[model.getSolVal(best, x[i, j]) for j in range(m)] for i in range(n)])
        solution = values.argmax(axis=1).astype(np.int64)
        cap = _makespan(p, solution, m, speeds)
        tracer.incumbent(cap, "scip")
    tracer.bound(_proven(model.getDualbound(), p, speeds, cap), "scip")
    status = {
        "optimal": Status.OPTIMAL,
        "timelimit": Status.TIME_LIMIT,
        "infeasible": Status.INFEASIBLE,
    }.get(raw, Status.FEASIBLE if solution is not None else Status.UNKNOWN)
    return solution, status


def _cpsat(
    p: np.ndarray, m: int, speeds: np.ndarray | None, tracer: Tracer, workers: int, display: bool
) -> tuple[np.ndarray | None, Status]:
    from ortools.sat.python import cp_model

    n = p.size
    scale = 1
    weights = [1] * m
    if speeds is not None:
        if not np.all(speeds == np.round(speeds)):
            raise ValueError("the CP-SAT backend needs integer speeds")
        scale = math.lcm(*speeds.astype(np.int64).tolist())
        weights = [scale // int(v) for v in speeds.tolist()]
    model = cp_model.CpModel()
    horizon = int(p.sum()) * scale
    x = {(i, j): model.new_bool_var(f"x({i},{j})") for i in range(n) for j in range(m)}
    t = [model.new_int_var(0, horizon, f"t({j})") for j in range(m)]
    tmax = model.new_int_var(0, horizon, "t_max")
    for i in range(n):
        model.add_exactly_one(x[i, j] for j in range(m))  # Eq. 27
    for j in range(m):
        model.add(sum(int(p[i]) * weights[j] * x[i, j] for i in range(n)) <= t[j])  # Eq. 28
        model.add(t[j] <= tmax)
    model.minimize(tmax)  # Eq. 26
    solver, raw = run_cpsat(model, tracer, workers, display, scale)
    solution = None
    if raw in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        solution = np.array(
            [next(j for j in range(m) if solver.value(x[i, j])) for i in range(n)], dtype=np.int64
        )
        tracer.incumbent(_makespan(p, solution, m, speeds), "cp-sat")
    if raw in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.UNKNOWN):
        # CP-SAT works in integers (loads scaled by lcm(speeds)): its bound is exact.
        tracer.bound(min(solver.best_objective_bound / scale, tracer.upper_bound), "cp-sat")
    if raw == cp_model.OPTIMAL:
        return solution, Status.OPTIMAL
    if raw == cp_model.INFEASIBLE:
        return None, Status.INFEASIBLE
    return solution, Status.TIME_LIMIT  # stopped by the time limit, the only limit set


def _highs(
    p: np.ndarray, m: int, speeds: np.ndarray | None, tracer: Tracer, display: bool
) -> tuple[np.ndarray | None, Status]:
    """Eqs. 26-30 as arrays for scipy's HiGHS: columns x (job-major, n*m), t (m), t_max."""
    from scipy.sparse import coo_array

    from llmsched.mip.milp import solve_milp

    n = p.size
    x_cols = np.arange(n * m).reshape(n, m)
    t_cols = n * m + np.arange(m)
    tmax = n * m + m
    columns = tmax + 1
    inverse_speed = np.ones(m) if speeds is None else 1.0 / speeds
    # Eq. 27 (rows 0..n-1): sum_j x_ij = 1. Eq. 28 (rows n..n+m-1): sum_i p_i / s_j x_ij - t_j <= 0;
    # (rows n+m..n+2m-1): t_j - t_max <= 0.
    load_rows = n + np.arange(m)
    cap_rows = n + m + np.arange(m)
    rows = np.concatenate([np.repeat(np.arange(n), m), np.tile(load_rows, n), load_rows, cap_rows, cap_rows])
    cols = np.concatenate([x_cols.ravel(), x_cols.ravel(), t_cols, t_cols, np.full(m, tmax)])
    values = np.concatenate(
        [
            np.ones(n * m),
            (p.astype(np.float64)[:, None] * inverse_speed[None, :]).ravel(),
            -np.ones(m),
            np.ones(m),
            -np.ones(m),
        ]
    )
    matrix = coo_array((values, (rows, cols)), shape=(n + 2 * m, columns)).tocsr()
    row_lower = np.concatenate([np.ones(n), np.full(2 * m, -np.inf)])
    row_upper = np.concatenate([np.ones(n), np.zeros(2 * m)])
    c = np.zeros(columns)
    c[tmax] = 1.0  # Eq. 26
    integral = np.zeros(columns, dtype=bool)
    integral[: n * m] = True
    upper = np.concatenate([np.ones(n * m), np.full(m + 1, np.inf)])
    if tracer.expired():
        return None, Status.TIME_LIMIT
    outcome = solve_milp(
        c, integral, np.zeros(columns), upper, matrix, row_lower, row_upper, tracer.remaining(), None, display
    )
    solution = None
    cap = tracer.upper_bound
    if outcome.x is not None:
        solution = outcome.x[: n * m].reshape(n, m).argmax(axis=1).astype(np.int64)
        cap = _makespan(p, solution, m, speeds)
        tracer.incumbent(cap, "highs")
    if outcome.status != "infeasible" and np.isfinite(outcome.dual_bound):
        tracer.bound(_proven(outcome.dual_bound, p, speeds, cap), "highs")
    status = {
        "optimal": Status.OPTIMAL,
        "time_limit": Status.TIME_LIMIT,
        "infeasible": Status.INFEASIBLE,
    }.get(outcome.status, Status.FEASIBLE if solution is not None else Status.UNKNOWN)
    return solution, status


def _makespan(p: np.ndarray, assignment: np.ndarray, m: int, speeds: np.ndarray | None) -> float:
    loads = np.bincount(assignment, weights=p, minlength=m)
    return float((loads if speeds is None else loads / speeds).max())


def _proven(dual: float, p: np.ndarray, speeds: np.ndarray | None, upper: float) -> float:
    """SCIP's or HiGHS's dual bound as a proven bound on the makespan.

    SCIP and HiGHS prove within their tolerances (about 1e-6): a dual bound a hair above a
    value may still allow it. With integer job times and integer speeds the optimum times
    lcm(speeds) is a whole number, so the bound rounds up to the next such value only
    beyond that tolerance; with other speeds it is lowered by the tolerance (no proof of
    optimality then). Never above the incumbent.
    """
    tolerance = 1e-6 * max(1.0, abs(dual))
    if speeds is None or np.all(speeds == np.round(speeds)):
        scale = 1 if speeds is None else math.lcm(*speeds.astype(np.int64).tolist())
        proven = math.ceil((dual - tolerance) * scale) / scale
    else:
        proven = dual - tolerance
    return float(min(proven, upper))
