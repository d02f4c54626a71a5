"""The CP-SAT backend: hints that satisfy the model, and times rounded to its integer units."""

from __future__ import annotations

import math

import pytest

from llmsched import Workload, lower_bounds, validate
from llmsched.core.cost import LevelCostModel
from llmsched.mip import Status, solve_full
from llmsched.mip.full import plan_from_schedule
from llmsched.mip.full.model import build_model, time_scale
from llmsched.online.warm_starts import heuristic_schedules
from tests.mip.full.conftest import COST, WORKLOAD, full_data

cp_model = pytest.importorskip("ortools.sat.python.cp_model")
cpsat = pytest.importorskip("llmsched.mip.full.cpsat")


@pytest.mark.parametrize("formulation", ["strong", "literal"])
def test_every_heuristic_plan_satisfies_the_model_as_hints(formulation: str) -> None:
    """Fixing every variable to its hint leaves a feasible model whose objective is the plan's
    makespan in CP-SAT's units: the hints are a solution, not just a guess."""
    scale, exact = time_scale([lv.time for lv in COST.levels] + [COST.decode_token_time])
    assert exact
    for name, schedule in heuristic_schedules(WORKLOAD, COST, 2).items():
        plan, client = plan_from_schedule(schedule)
        data = full_data(plan.bins + 1, schedule.makespan)
        model = cp_model.CpModel()
        built = build_model(data, formulation, cpsat.CpSatBackend(model, scale))
        for var, value in built.values_from_plan(plan, client):
            model.add(var == round(value))
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        assert solver.solve(model) == cp_model.OPTIMAL, name
        assert solver.objective_value == pytest.approx(schedule.makespan * scale), name


def test_rounded_times_prove_no_optimum() -> None:
    """With a level of 1/3 s no power of ten makes the times whole: CP-SAT's optimum of the
    rounded-down model is a bound, so the status is 'feasible', the bound a hair below (the
    lower bounds, 0.9067 s, are far below the optimum 0.9467 s, so they prove nothing here)."""
    cost = LevelCostModel([(256, 1 / 3)], 0.01)
    workload = Workload(prompt_tokens=[50, 60, 70, 80], output_tokens=[3, 17, 8, 20])
    assert lower_bounds(workload, cost, 2).strong == pytest.approx(0.90667, abs=1e-5)
    result = solve_full(workload, cost, 2, time_limit=math.inf, backend="cpsat")
    assert result.status is Status.FEASIBLE
    assert validate(result.schedule) == []
    assert result.objective == pytest.approx(0.94667, abs=1e-5)
    assert 0 < result.objective - result.bound < 1e-8
    assert cpsat.STATUS[cp_model.OPTIMAL] is Status.OPTIMAL
