"""Solver-side helpers of the result vocabulary: SCIP and CP-SAT traces.

The vocabulary itself (:class:`~llmsched.core.result.Status`, :class:`~llmsched.core.result.Result`,
:class:`~llmsched.core.result.Tracer`) lives in the core, :mod:`llmsched.core.result`.
"""

from __future__ import annotations

from typing import Any

from llmsched.core.result import Status, TracePoint, Tracer, relative_gap

__all__ = ["Status", "TracePoint", "Tracer", "attach_scip_trace", "relative_gap", "run_cpsat"]


def attach_scip_trace(model: Any, tracer: Tracer) -> None:
    """Record SCIP's incumbent and dual bound in ``tracer`` at every new best solution and node."""
    from pyscipopt import SCIP_EVENTTYPE, Eventhdlr

    class Trace(Eventhdlr):
        def eventinit(self) -> None:
            self.model.catchEvent(SCIP_EVENTTYPE.BESTSOLFOUND, self)
            self.model.catchEvent(SCIP_EVENTTYPE.NODESOLVED, self)

        def eventexec(self, event: Any) -> None:
            if self.model.getNSols() > 0:
                # At BESTSOLFOUND getPrimalbound() still holds the previous best (SCIP's
                # infinity at the first): the new best solution's own value is the incumbent.
                tracer.incumbent(self.model.getSolObjVal(self.model.getBestSol()), "scip")
            # SCIP closes within its own tolerances: a dual bound a hair above the primal
            # one means closed, not a bound above the solution in hand.
            tracer.bound(min(self.model.getDualbound(), tracer.upper_bound), "scip")

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
