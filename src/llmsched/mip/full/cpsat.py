"""The full MIP in OR-Tools CP-SAT: the formulations' backend, the solve, and CP-SAT's statuses.

CP-SAT works in integers, so times are whole units of ``1/scale`` seconds, the smallest
power of ten that makes every level time and the decode time exact (rounded down past
10^9, and then an optimum is only a bound: see :func:`~llmsched.mip.full.model.time_scale`).

Determinism: one search worker and a fixed random seed give the same search on any
machine. The wall-clock limit is only a safety net (its firing is the status
``time_limit``); ``work_limit`` bounds the search in CP-SAT's deterministic time
(``max_deterministic_time``) instead. More than one worker is faster but not deterministic.
"""

from __future__ import annotations

import math
from typing import Any

from ortools.sat.python import cp_model

from llmsched.core.result import Status, Tracer
from llmsched.mip.full.model import Plan, SolveJob, floor_units, time_scale

__all__ = ["RANDOM_SEED", "STATUS", "CpSatBackend", "solve"]

#: CP-SAT's status -> ours. FEASIBLE and UNKNOWN become TIME_LIMIT when the clock, not the
#: work limit, stopped the search; OPTIMAL becomes FEASIBLE when the times were rounded (the
#: model's optimum is then a bound, not a proof). MODEL_INVALID is a bug in the model and raises.
#:
#: :meta hide-value:
STATUS: dict[Any, Status] = {
    cp_model.OPTIMAL: Status.OPTIMAL,
    cp_model.FEASIBLE: Status.FEASIBLE,
    cp_model.INFEASIBLE: Status.INFEASIBLE,
    cp_model.UNKNOWN: Status.UNKNOWN,
}

RANDOM_SEED = 0
# A limit no solve reaches, in place of an infinite one (kept well inside what CP-SAT's
# duration arithmetic holds).
_NO_TIME_LIMIT = 1e9


class CpSatBackend:
    """:class:`~llmsched.mip.full.model.Backend` on a CP-SAT model (times in ``1/scale`` s)."""

    def __init__(self, model: cp_model.CpModel, scale: int):
        self.model = model
        self.scale = scale

    def binary(self, name: str) -> Any:
        return self.model.new_bool_var(name)

    def integer(self, lb: int, ub: int, name: str) -> Any:
        return self.model.new_int_var(lb, ub, name)

    def continuous(self, lb: float, ub: float, name: str) -> Any:
        return self.model.new_int_var(floor_units(lb, self.scale), math.ceil(ub * self.scale) + 1, name)

    def add(self, constraint: Any, name: str) -> None:
        self.model.add(constraint).with_name(name)

    def minimize(self, expr: Any) -> None:
        self.model.minimize(expr)

    def sum(self, terms: Any) -> Any:
        return cp_model.LinearExpr.sum(list(terms))

    def time(self, seconds: float) -> int:
        return floor_units(seconds, self.scale)


def solve(job: SolveJob) -> tuple[Status, Plan | None]:
    """Build the job's formulation in CP-SAT and solve it within the tracer's time.

    The start is a warm start (a plan and each request's client), given as hints; the work
    limit is CP-SAT's deterministic time. Returns the status (from :data:`STATUS`) and the
    plan of the best solution (None without one); the bound goes to the tracer.
    """
    tracer, work_limit = job.tracer, job.work_limit
    cost = job.data.cost
    scale, exact = time_scale([lv.time for lv in cost.levels] + [cost.decode_token_time])
    model = cp_model.CpModel()
    built = job.build(CpSatBackend(model, scale))
    if built is None:
        return Status.TIME_LIMIT, None
    if job.start is not None:
        for var, value in built.values_from_plan(*job.start):
            model.add_hint(var, round(value))

    solver = cp_model.CpSolver()
    params = solver.parameters
    params.max_time_in_seconds = min(max(tracer.remaining(), 0.01), _NO_TIME_LIMIT)
    params.num_workers = job.workers
    params.random_seed = RANDOM_SEED
    if work_limit is not None:
        params.max_deterministic_time = float(work_limit)
    params.log_search_progress = job.display
    raw = solver.solve(model, _Trace(tracer, scale, exact))
    if raw == cp_model.MODEL_INVALID:
        raise RuntimeError(f"CP-SAT rejected the model: {model.validate()}")
    status = STATUS[raw]
    solved = None
    if raw in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        solved = built.plan_from(solver.value)
    if status is not Status.INFEASIBLE and math.isfinite(solver.best_objective_bound):
        # Times are rounded down, so the model's bound is a bound on the true makespan.
        tracer.bound(solver.best_objective_bound / scale, "cp-sat")
    if status is Status.OPTIMAL and not exact:
        status = Status.FEASIBLE
    elif status in (Status.FEASIBLE, Status.UNKNOWN) and not _stopped_by_work(solver, work_limit):
        # The search stops before a proof only at a limit; it was not the work limit, so the clock.
        status = Status.TIME_LIMIT
    return status, solved


def _stopped_by_work(solver: cp_model.CpSolver, work_limit: float | None) -> bool:
    """Whether the search used up ``work_limit`` (CP-SAT does not say which limit stopped it;
    its deterministic time checks are coarse, so 1% short counts as used up)."""
    return work_limit is not None and solver.deterministic_time >= 0.99 * work_limit


class _Trace(cp_model.CpSolverSolutionCallback):
    """Records CP-SAT's incumbents (when its times are exact) and bounds in the tracer."""

    def __init__(self, tracer: Tracer, scale: int, exact: bool):
        super().__init__()
        self.tracer = tracer
        self.scale = scale
        self.exact = exact

    def on_solution_callback(self) -> None:
        if self.exact:  # with rounded times the model's objective is not a schedule's makespan
            self.tracer.incumbent(self.objective_value / self.scale, "cp-sat")
        self.tracer.bound(self.best_objective_bound / self.scale, "cp-sat")
