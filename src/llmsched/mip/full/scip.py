"""The full MIP in SCIP (PySCIPOpt): the formulations' backend, the solve, and SCIP's statuses.

SCIP solves on one thread with its default settings, which are deterministic: the same
model gives the same search, node for node, on any machine. The wall-clock limit is only a
safety net (its firing is the status ``time_limit``); ``work_limit`` bounds the search in
branch-and-bound nodes instead, which gives the same answer under any load.
"""

from __future__ import annotations

from typing import Any

from pyscipopt import Model, quicksum

from llmsched.core.result import Status
from llmsched.mip.full.model import Plan, SolveJob
from llmsched.mip.traces import attach_scip_trace

__all__ = ["STATUS", "ScipBackend", "solve"]

#: SCIP's getStatus() -> our status. FEASIBLE means "stopped before a proof, not by the
#: clock"; it becomes UNKNOWN when SCIP holds no solution.
#:
#: :meta hide-value:
STATUS: dict[str, Status] = {
    "optimal": Status.OPTIMAL,
    "infeasible": Status.INFEASIBLE,
    # Every variable is bounded and the objective is a sum of non-negative times, so the
    # model cannot be unbounded: "infeasible or unbounded" is infeasible.
    "inforunbd": Status.INFEASIBLE,
    "timelimit": Status.TIME_LIMIT,
    # Deterministic limits (work_limit sets limits/nodes) and SCIP's other stops.
    "nodelimit": Status.FEASIBLE,
    "totalnodelimit": Status.FEASIBLE,
    "stallnodelimit": Status.FEASIBLE,
    "gaplimit": Status.FEASIBLE,
    "sollimit": Status.FEASIBLE,
    "bestsollimit": Status.FEASIBLE,
    "restartlimit": Status.FEASIBLE,
    "primallimit": Status.FEASIBLE,
    "duallimit": Status.FEASIBLE,
    "memlimit": Status.FEASIBLE,
    "userinterrupt": Status.FEASIBLE,
    "unknown": Status.UNKNOWN,
}

# SCIP refuses an infinite limits/time; 1e20 is its own "no limit".
_NO_TIME_LIMIT = 1e20


class ScipBackend:
    """:class:`~llmsched.mip.full.model.Backend` on a PySCIPOpt model (times in seconds)."""

    def __init__(self, model: Model):
        self.model = model

    def binary(self, name: str) -> Any:
        return self.model.addVar(vtype="B", name=name)

    def integer(self, lb: int, ub: int, name: str) -> Any:
        return self.model.addVar(vtype="I", lb=lb, ub=ub, name=name)

    def continuous(self, lb: float, ub: float, name: str) -> Any:
        return self.model.addVar(vtype="C", lb=lb, ub=ub, name=name)

    def add(self, constraint: Any, name: str) -> None:
        self.model.addCons(constraint, name=name)

    def minimize(self, expr: Any) -> None:
        self.model.setObjective(expr, "minimize")

    def sum(self, terms: Any) -> Any:
        return quicksum(terms)

    def time(self, seconds: float) -> float:
        return float(seconds)


def solve(job: SolveJob) -> tuple[Status, Plan | None]:
    """Build the job's formulation in SCIP and solve it within the tracer's time.

    The start is a warm start (a plan and each request's client); the work limit a number of
    branch-and-bound nodes; the workers must be 1 (SCIP solves on one thread). Returns the
    status (from :data:`STATUS`) and the plan of SCIP's best solution (None without one);
    the bound goes to the tracer.
    """
    tracer = job.tracer
    scip = Model(f"full-mip-{job.formulation}")
    if not job.display:
        scip.hideOutput()
    model = job.build(ScipBackend(scip))
    if model is None:
        return Status.TIME_LIMIT, None

    attach_scip_trace(scip, tracer)
    if job.start is not None:
        sol = scip.createSol()
        for var, value in model.values_from_plan(*job.start):
            scip.setSolVal(sol, var, value)
        scip.addSol(sol, free=True)
    scip.setParam("limits/time", min(max(tracer.remaining(), 0.01), _NO_TIME_LIMIT))
    if job.work_limit is not None:
        scip.setParam("limits/nodes", int(job.work_limit))
    scip.optimize()
    raw = scip.getStatus()
    if raw not in STATUS:
        raise RuntimeError(f"SCIP ended with status {raw!r}, which this model cannot reach")
    status = STATUS[raw]
    solved = None
    if scip.getNSols() > 0:
        best = scip.getBestSol()
        solved = model.plan_from(lambda var: scip.getSolVal(best, var))
    elif status is Status.FEASIBLE:
        status = Status.UNKNOWN
    dual = scip.getDualbound()
    if status is not Status.INFEASIBLE and dual < scip.infinity():
        # SCIP closes within its own tolerances: a dual bound a hair above the incumbent
        # means closed, not a bound above the solution in hand.
        tracer.bound(min(dual, tracer.upper_bound), "scip")
    return status, solved
