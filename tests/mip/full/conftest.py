"""Shared checks of the full-MIP tests (every solve runs on each backend via ``solver``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from llmsched import lower_bounds, validate
from llmsched.mip import FullResult
from llmsched.online.warm_starts import heuristic_schedules


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
