"""heuristic_schedules: the strategies run under the MIP's semantics, as solve_full's warm starts."""

from __future__ import annotations

import pytest

from llmsched import LinearCostModel, Workload, validate
from llmsched.online.warm_starts import HEURISTICS, heuristic_schedules


def test_every_strategy_runs_under_the_mips_levels() -> None:
    """One valid schedule per strategy, in order, each under the levels of the linear model."""
    workload = Workload(prompt_tokens=[120, 80, 300, 45, 60], output_tokens=[7, 2, 12, 5, 9])
    linear = LinearCostModel.paper()
    schedules = heuristic_schedules(workload, linear, 2)
    assert list(schedules) == [name for name, _, _ in HEURISTICS]
    for name, schedule in schedules.items():
        assert schedule.cost == linear.to_levels(2), name
        assert validate(schedule) == [], name


def test_bad_arguments_are_refused() -> None:
    """A negative assignment limit and a cost model without levels are refused, by name."""
    workload = Workload(prompt_tokens=[10], output_tokens=[2])
    with pytest.raises(ValueError, match="assignment_time_limit must be a number of seconds >= 0, got -1"):
        heuristic_schedules(workload, LinearCostModel.paper(), 1, assignment_time_limit=-1)
    with pytest.raises(TypeError, match="cost must be a LevelCostModel or LinearCostModel"):
        heuristic_schedules(workload, "paper", 1)  # type: ignore[arg-type]
