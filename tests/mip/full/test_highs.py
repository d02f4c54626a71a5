"""The HiGHS backend (scipy's milp): heuristic plans satisfy its model, its statuses map to ours,
and its optima are SCIP's."""

from __future__ import annotations

import math

import pytest
from benchmarks.instances import tiny_instance

from llmsched import validate
from llmsched.mip import Status, solve_full
from llmsched.mip.backends import installed
from llmsched.mip.full import highs, plan_from_schedule
from llmsched.mip.full.model import build_model
from llmsched.mip.milp import HIGHS_MODEL_STATUS, MilpModel, MilpOutcome
from llmsched.online.warm_starts import heuristic_schedules
from tests.mip.full.conftest import COST, WORKLOAD, full_data

# SCIP's proven optima of tiny_instance(seed) (benchmarks/full_mip_bench.py --backends
# highs,scip): instances where the optimum lies above the lower bound, and for 6 and 16
# below every heuristic, so the solver has work to do.
SCIP_OPTIMA = {6: 1.31818, 9: 1.11001, 16: 0.99456}


@pytest.mark.parametrize("formulation", ["strong", "literal"])
def test_every_heuristic_plan_is_a_point_of_the_highs_model(formulation: str) -> None:
    """Fixing every variable to a heuristic plan's value leaves a feasible model whose objective
    is the plan's makespan: the values a warm start would give are a solution of this model
    (HiGHS cannot take them as a start, but the model must admit them)."""
    for name, schedule in heuristic_schedules(WORKLOAD, COST, 2).items():
        plan, client = plan_from_schedule(schedule)
        model = MilpModel()
        built = build_model(
            full_data(plan.bins + 1, schedule.makespan), formulation, highs.HighsBackend(model)
        )
        for var, value in built.values_from_plan(plan, client):
            (column,) = var.terms
            model.lower[column] = model.upper[column] = value
        outcome = model.solve(30.0)
        assert outcome.status == "optimal", name
        assert outcome.objective == pytest.approx(schedule.makespan, abs=1e-9), name


@pytest.mark.parametrize("seed", sorted(SCIP_OPTIMA))
def test_highs_proves_scips_optima(seed: int) -> None:
    """On tiny instances HiGHS proves the optimum SCIP proves (and, where SCIP is installed,
    the two agree here and now); the schedule validates and the warm start is reported."""
    workload, cost, clients = tiny_instance(seed)
    warm = heuristic_schedules(workload, cost, clients)
    result = solve_full(workload, cost, clients, time_limit=60, backend="highs", warm_starts=warm)
    assert result.backend == "highs" and result.status is Status.OPTIMAL
    assert result.objective == pytest.approx(SCIP_OPTIMA[seed], abs=1e-9)
    assert result.bound == result.objective and validate(result.schedule) == []
    assert result.warm_start is not None and result.objective <= result.warm_start[1] + 1e-9
    if installed("scip"):
        scip = solve_full(workload, cost, clients, time_limit=60, backend="scip", warm_starts=warm)
        assert scip.status is Status.OPTIMAL
        assert result.objective == pytest.approx(scip.objective, abs=1e-9)


def test_every_status_highs_can_report_is_mapped_or_raises() -> None:
    """HiGHS's statuses all have a meaning here but 'unbounded' (every variable is bounded and
    the objective is a sum of non-negative times) and its errors, which raise."""
    errors = {"notset", "load_error", "model_error", "presolve_error", "solve_error", "postsolve_error"}
    assert set(highs.STATUS) == set(HIGHS_MODEL_STATUS.values()) - errors - {"model_empty", "unbounded"}
    assert highs.STATUS["time_limit"] is Status.TIME_LIMIT
    assert highs.STATUS["solution_limit"] is Status.FEASIBLE  # what a node limit ends in
    assert highs.STATUS["unbounded_or_infeasible"] is Status.INFEASIBLE


def test_a_status_this_model_cannot_reach_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """An 'unbounded' answer would be a bug in the model: it raises instead of a result."""

    def unbounded(self: MilpModel, *args: object, **kwargs: object) -> MilpOutcome:
        return MilpOutcome("unbounded", "(HiGHS Status 10: Unbounded)", None, math.inf, -math.inf, 0)

    monkeypatch.setattr(MilpModel, "solve", unbounded)
    with pytest.raises(RuntimeError, match="HiGHS ended with status 'unbounded'"):
        solve_full(WORKLOAD, COST, 2, time_limit=10, backend="highs", formulation="literal")
