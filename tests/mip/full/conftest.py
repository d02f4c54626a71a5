"""Shared checks of the full-MIP tests (every solve runs on each backend via ``solver``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from llmsched import Workload, lower_bounds, validate
from llmsched.core.cost import LevelCostModel
from llmsched.mip import FullResult
from llmsched.mip.full import min_decode_iterations
from llmsched.mip.full.model import FullData
from llmsched.online.warm_starts import heuristic_schedules

# The instance the backends' own tests build their models of: four identical requests, which
# the strong formulation prefills in index order, and a longer one.
COST = LevelCostModel([(256, 0.03), (512, 0.05), (1024, 0.09)], 0.01)
WORKLOAD = Workload(prompt_tokens=[50, 50, 50, 50, 60], output_tokens=[3, 3, 3, 3, 9])


def full_data(bins: int, upper: float) -> FullData:
    """The MIP's data of :data:`WORKLOAD` on 2 clients in ``bins`` bins, with makespan
    bounds ``upper`` and the lower bounds' strongest."""
    return FullData(
        WORKLOAD,
        COST,
        2,
        bins,
        upper,
        lower_bounds(WORKLOAD, COST, 2).strong,
        min_decode_iterations(WORKLOAD, 2),
    )


def _check(result: FullResult) -> None:
    """The result's schedule validates, its makespan is the objective, and the objective lies
    between every lower bound and every heuristic schedule."""
    assert result.schedule is not None
    assert validate(result.schedule) == []
    assert result.objective == pytest.approx(result.schedule.makespan)
    assert result.bound == result.lower_bound <= result.objective + 1e-9
    workload, clients = result.schedule.workload, result.schedule.clients
    assert lower_bounds(workload, result.cost, clients).strong <= result.objective + 1e-9
    for name, schedule in heuristic_schedules(workload, result.cost, clients).items():
        assert result.objective <= schedule.makespan + 1e-9, name


@pytest.fixture
def check() -> Callable[[FullResult], None]:
    """A function that checks a solve_full result against the validator, bounds and heuristics."""
    return _check
