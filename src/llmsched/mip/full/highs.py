"""The full MIP in HiGHS (``scipy.optimize.milp``): the backend that needs no extra.

Both formulations are built on :class:`~llmsched.mip.milp.MilpModel` and solved by scipy's
HiGHS, a core dependency. What differs from the SCIP backend, because scipy's ``milp``
offers no more:

* **No MIP start.** HiGHS cannot be handed the warm start through scipy; it searches from
  nothing. :func:`~llmsched.mip.solve_full` still uses the warm start as its incumbent and
  fallback: when HiGHS finds nothing better (or nothing at all) the start is the schedule
  returned, and its makespan an upper bound, never a lower one.
* **No trace of the search.** The trace holds HiGHS's final incumbent and bound only.
* **A bound only with a solution.** scipy returns HiGHS's dual bound only when HiGHS holds
  a solution; stopped without one, the bound is that of the lower-bound formulas.

``optimal`` is HiGHS's proof with both gaps set to 0; it holds up to HiGHS's feasibility
tolerance (1e-6: it prunes a node whose bound is within that of the incumbent), as SCIP's
holds up to its own. The bound reported is HiGHS's dual bound, never above the replayed
schedule's makespan.

Determinism: HiGHS's branch and bound is deterministic (scipy's ``milp`` documents it so),
so the same model gives the same search on any machine. The wall-clock limit is only a
safety net (its firing is the status ``time_limit``); ``work_limit`` bounds the search in
branch-and-bound nodes (HiGHS's ``mip_max_nodes``, scipy's ``node_limit``), which gives the
same answer under any load (status ``feasible``). scipy exposes no other limit (no
iteration or leaf limit, no thread count) without passing HiGHS options verbatim.
"""

from __future__ import annotations

import math
from typing import Any

from llmsched.core.result import Status
from llmsched.mip.full.model import Plan, SolveJob
from llmsched.mip.milp import MilpModel, linear_sum

__all__ = ["STATUS", "HighsBackend", "solve"]

# HiGHS's model status (by name, see llmsched.mip.milp) -> ours. FEASIBLE means "stopped
# before a proof, not by the clock"; it becomes UNKNOWN when HiGHS holds no solution. Every
# variable is bounded and the objective is a sum of non-negative times, so the model cannot
# be unbounded: "unbounded or infeasible" is infeasible, and "unbounded" (like HiGHS's
# errors) is missing, so that it raises.
STATUS: dict[str, Status] = {
    "optimal": Status.OPTIMAL,
    "infeasible": Status.INFEASIBLE,
    "unbounded_or_infeasible": Status.INFEASIBLE,
    "time_limit": Status.TIME_LIMIT,
    # Deterministic limits (work_limit sets the node limit, which HiGHS reports as its
    # solution limit) and HiGHS's other stops.
    "solution_limit": Status.FEASIBLE,
    "iteration_limit": Status.FEASIBLE,
    "objective_bound": Status.FEASIBLE,
    "objective_target": Status.FEASIBLE,
    "memory_limit": Status.FEASIBLE,
    "interrupt": Status.FEASIBLE,
    "highs_interrupt": Status.FEASIBLE,
    "unknown": Status.UNKNOWN,
}


class HighsBackend:
    """:class:`~llmsched.mip.full.model.Backend` on a :class:`MilpModel` (times in seconds)."""

    def __init__(self, model: MilpModel):
        self.model = model

    def binary(self, name: str) -> Any:
        return self.model.variable(0, 1, True, name)

    def integer(self, lb: int, ub: int, name: str) -> Any:
        return self.model.variable(lb, ub, True, name)

    def continuous(self, lb: float, ub: float, name: str) -> Any:
        return self.model.variable(lb, ub, False, name)

    def add(self, constraint: Any, name: str) -> None:
        self.model.add(constraint, name)

    def minimize(self, expr: Any) -> None:
        self.model.minimize(expr)

    def sum(self, terms: Any) -> Any:
        return linear_sum(terms)

    def time(self, seconds: float) -> float:
        return float(seconds)


def solve(job: SolveJob) -> tuple[Status, Plan | None]:
    """Build the job's formulation for HiGHS and solve it within the tracer's time.

    The start is not passed to HiGHS (scipy's ``milp`` takes no MIP start; the caller keeps
    it as its incumbent); the work limit is a number of branch-and-bound nodes; the workers
    must be 1. Returns the status (from :data:`STATUS`) and the plan of HiGHS's best
    solution (None without one); its makespan and the bound go to the tracer.
    """
    from llmsched.mip.full.replay import schedule_from_plan

    data, tracer = job.data, job.tracer
    model = MilpModel()
    built = job.build(HighsBackend(model))
    if built is None:
        return Status.TIME_LIMIT, None

    outcome = model.solve(
        tracer.remaining() if math.isfinite(tracer.time_limit) else math.inf,
        None if job.work_limit is None else int(job.work_limit),
        job.display,
    )
    if outcome.status not in STATUS:
        raise RuntimeError(
            f"HiGHS ended with status {outcome.status!r}, which this model cannot reach: {outcome.message}"
        )
    status = STATUS[outcome.status]
    solved = None
    if outcome.x is not None:
        x = outcome.x
        solved = built.plan_from(lambda var: var.value(x))
        # HiGHS's objective is that of values within its tolerances (a binary at 1e-7, say);
        # the replayed schedule's makespan is exact, and it is what a bound must not pass.
        makespan = schedule_from_plan(solved, data.workload, data.cost, data.clients).makespan
        tracer.incumbent(makespan, "highs")
    elif status is Status.FEASIBLE:
        status = Status.UNKNOWN
    if status is not Status.INFEASIBLE and math.isfinite(outcome.dual_bound):
        # HiGHS closes within its tolerances: a dual bound a hair above the incumbent
        # means closed, not a bound above the solution in hand.
        tracer.bound(min(outcome.dual_bound, tracer.upper_bound), "highs")
    return status, solved
