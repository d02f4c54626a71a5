"""The SCIP backend: warm starts SCIP accepts, and its statuses mapped to ours."""

from __future__ import annotations

import math

import pytest

from llmsched.core.result import Status, Tracer
from llmsched.mip.full import plan_from_schedule
from llmsched.mip.full.model import SolveJob, build_model
from llmsched.online.warm_starts import heuristic_schedules
from tests.mip.full.conftest import COST, WORKLOAD, full_data

pyscipopt = pytest.importorskip("pyscipopt")
scip = pytest.importorskip("llmsched.mip.full.scip")


@pytest.mark.parametrize("formulation", ["strong", "literal"])
def test_every_heuristic_plan_is_a_solution_scip_accepts(formulation: str) -> None:
    """Heuristic plans, with identical requests prefilled out of index order, are reordered for
    the symmetry constraints: SCIP checks each start against every constraint and accepts it."""
    for name, schedule in heuristic_schedules(WORKLOAD, COST, 2).items():
        plan, client = plan_from_schedule(schedule)
        model = pyscipopt.Model()
        model.hideOutput()
        built = build_model(full_data(plan.bins + 1, schedule.makespan), formulation, scip.ScipBackend(model))
        sol = model.createSol()
        for var, value in built.values_from_plan(plan, client):
            model.setSolVal(sol, var, value)
        assert model.checkSol(sol, completely=True), name


def test_a_node_limit_stops_scip_deterministically_with_its_start() -> None:
    """One branch-and-bound node ends in SCIP's 'nodelimit', which is our 'feasible': the plan
    in hand comes back and the bound is proven, whatever the clock."""
    schedule = heuristic_schedules(WORKLOAD, COST, 2)["baseline"]
    plan, client = plan_from_schedule(schedule)
    tracer = Tracer(math.inf)
    tracer.incumbent(schedule.makespan, "start")
    status, solved = scip.solve(
        SolveJob(full_data(plan.bins, schedule.makespan), "literal", tracer, (plan, client), work_limit=1)
    )
    assert scip.STATUS["nodelimit"] is Status.FEASIBLE
    assert status in (Status.FEASIBLE, Status.OPTIMAL) and solved is not None
    assert -math.inf < tracer.lower_bound <= schedule.makespan + 1e-9


def test_every_status_scip_can_report_is_mapped() -> None:
    """SCIP's statuses all have a meaning here; only 'unbounded' is missing, because every
    variable is bounded and the objective is a sum of non-negative times."""
    reported = {
        "optimal", "timelimit", "infeasible", "unbounded", "userinterrupt", "inforunbd", "nodelimit",
        "totalnodelimit", "stallnodelimit", "gaplimit", "memlimit", "sollimit", "bestsollimit",
        "restartlimit", "primallimit", "duallimit", "unknown",
    }  # fmt: skip
    assert set(scip.STATUS) == reported - {"unbounded"}
    assert scip.STATUS["timelimit"] is Status.TIME_LIMIT and scip.STATUS["inforunbd"] is Status.INFEASIBLE
