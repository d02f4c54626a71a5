"""Result objects shared by the solvers: status, objective, bound, gap, runtime, trace."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

__all__ = ["Status", "TracePoint", "Tracer", "attach_scip_trace", "run_cpsat"]


class Status(StrEnum):
    """How a solve ended. ``OPTIMAL`` only when the bound proves the incumbent optimal."""

    OPTIMAL = "optimal"
    FEASIBLE = "feasible"  # a solution, not proven optimal, and the solver stopped on its own
    TIME_LIMIT = "time_limit"  # stopped by the time limit, with the best solution and bound
    INFEASIBLE = "infeasible"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class TracePoint:
    """Incumbent and bound at a moment of the solve, and what produced the change."""

    time: float
    lower_bound: float
    upper_bound: float
    source: str


@dataclass
class Tracer:
    """Collects the trace of bound and incumbent over a solve and keeps the deadline."""

    time_limit: float
    start: float = field(default_factory=time.perf_counter)
    lower_bound: float = -np.inf
    upper_bound: float = np.inf
    points: list[TracePoint] = field(default_factory=list)

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def remaining(self) -> float:
        return max(0.0, self.time_limit - self.elapsed())

    def expired(self) -> bool:
        return self.elapsed() >= self.time_limit

    def bound(self, value: float, source: str) -> None:
        if value > self.lower_bound:
            self.lower_bound = float(value)
            self._record(source)

    def incumbent(self, value: float, source: str) -> bool:
        if value < self.upper_bound:
            self.upper_bound = float(value)
            self._record(source)
            return True
        return False

    def closed(self) -> bool:
        return self.lower_bound >= self.upper_bound

    def _record(self, source: str) -> None:
        self.points.append(TracePoint(self.elapsed(), self.lower_bound, self.upper_bound, source))

    def frame(self) -> Any:
        import pandas as pd

        return pd.DataFrame([p.__dict__ for p in self.points])


def relative_gap(upper: float, lower: float) -> float:
    """(upper - lower) / upper, 0 when closed, inf when there is no solution."""
    if not np.isfinite(upper):
        return float("inf")
    if upper <= 0:
        return 0.0
    return max(0.0, (upper - lower) / upper)


def attach_scip_trace(model: Any, tracer: Tracer) -> None:
    """Record SCIP's incumbent and dual bound in ``tracer`` at every new best solution and node."""
    from pyscipopt import SCIP_EVENTTYPE, Eventhdlr

    class Trace(Eventhdlr):
        def eventinit(self) -> None:
            self.model.catchEvent(SCIP_EVENTTYPE.BESTSOLFOUND, self)
            self.model.catchEvent(SCIP_EVENTTYPE.NODESOLVED, self)

        def eventexec(self, event: Any) -> None:
            if self.model.getNSols() > 0:
                tracer.incumbent(self.model.getPrimalbound(), "scip")
            tracer.bound(self.model.getDualbound(), "scip")

    model.includeEventhdlr(Trace(), "trace", "primal and dual bound over time")


def run_cpsat(model: Any, tracer: Tracer, workers: int, display: bool, scale: int = 1) -> tuple[Any, Any]:
    """Solve a CP-SAT model within the tracer's remaining time, recording every incumbent and
    bound (objective units over ``scale``); returns (solver, status)."""
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(tracer.remaining(), 0.01)
    solver.parameters.num_workers = max(1, workers)
    solver.parameters.log_search_progress = display

    class Trace(cp_model.CpSolverSolutionCallback):
        def on_solution_callback(self) -> None:
            tracer.incumbent(self.objective_value / scale, "cp-sat")
            tracer.bound(self.best_objective_bound / scale, "cp-sat")

    return solver, solver.solve(model, Trace())
