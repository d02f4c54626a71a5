"""PcmaxResult: a frozen Result with a read-only assignment, its loads and its trace."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from llmsched.core.result import Result
from llmsched.mip import PcmaxResult, Status, solve_pcmax

NINE = np.array([9, 8, 7, 6, 5, 5, 4, 3, 2])  # on 3 machines: optimum 17, closed by LPT
# On 4 machines (optimum 164, two above sum / 4 = 162) the bound and the incumbent each move
# several times before they meet.
TWELVE = np.array([47, 51, 75, 95, 4, 15, 82, 94, 25, 31, 87, 42])


def test_result_is_the_shared_vocabulary() -> None:
    """PcmaxResult is a frozen Result: objective is the makespan, arrays are read-only, the
    trace is a tuple, and dataclasses.replace makes a changed copy."""
    result = solve_pcmax(NINE, 3)
    assert isinstance(result, Result)
    assert result.objective == result.makespan == 17
    assert isinstance(result.trace, tuple) and result.backend == "pipeline" and result.closed_by
    with pytest.raises(ValueError, match="read-only"):
        result.assignment[0] = 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.objective = 1.0  # type: ignore[misc]
    changed = dataclasses.replace(result, lower_bound=0.0, status=Status.FEASIBLE)
    assert changed.lower_bound == 0.0 and changed.status is Status.FEASIBLE
    assert changed.makespan == 17 and np.array_equal(changed.assignment, result.assignment)
    assert not changed.assignment.flags.writeable and result.lower_bound == 17
    assert changed != result and dataclasses.replace(result) == result
    mine = np.array(result.assignment)
    copy = dataclasses.replace(result, assignment=mine)
    mine[0] = 99  # the result keeps its own copy
    assert copy.assignment[0] == result.assignment[0]


def test_equality_compares_assignments_and_nothing_else_is_equal() -> None:
    """Two results are equal only field by field, the assignment element by element; a plain
    Result with the same figures is not equal, and a result (holding an array) has no hash."""
    result = solve_pcmax(NINE, 3)
    swapped = np.where(result.assignment == 0, 1, np.where(result.assignment == 1, 0, result.assignment))
    assert dataclasses.replace(result, assignment=swapped) != result  # the same loads, permuted
    assert dataclasses.replace(result, assignment=list(result.assignment)) == result
    plain = Result(
        status=result.status,
        objective=result.objective,
        lower_bound=result.lower_bound,
        gap=result.gap,
        runtime=result.runtime,
        trace=result.trace,
    )
    assert result != plain and plain != result
    with pytest.raises(TypeError, match="unhashable"):
        hash(result)


def test_loads_sum_each_machines_jobs() -> None:
    """loads() gives every machine the sum of its jobs' times (zero for unused machines), the
    largest being the makespan, the total being all the work."""
    result = solve_pcmax(TWELVE, 4)
    loads = result.loads(TWELVE, 6)
    assert loads.tolist() == [np.sum(TWELVE[result.assignment == j]) for j in range(6)]
    assert loads[4:].tolist() == [0.0, 0.0] and loads.max() == result.makespan == 164
    assert loads.sum() == TWELVE.sum()
    hand_made = PcmaxResult(
        status=Status.FEASIBLE, objective=9.0, lower_bound=5.0, gap=4 / 9, runtime=0.0, assignment=[2, 0, 2]
    )
    assert hand_made.loads([4, 5, 5], 3).tolist() == [5.0, 0.0, 9.0]


def test_trace_frame_is_the_trace_row_by_row() -> None:
    """trace_frame() has a row per trace point in order, with the sources named; along it the
    incumbent only falls, the bound only rises, and the last row is the result's figures."""
    result = solve_pcmax(TWELVE, 4)
    frame = result.trace_frame()
    assert list(frame.columns) == ["time", "lower_bound", "upper_bound", "source"]
    assert frame.to_dict("records") == [dataclasses.asdict(point) for point in result.trace]
    assert len(frame) >= 5 and frame["source"].iloc[0] == "trivial bound"
    assert frame["source"].iloc[-1] == result.closed_by
    assert frame["upper_bound"].is_monotonic_decreasing and frame["lower_bound"].is_monotonic_increasing
    assert frame["time"].is_monotonic_increasing
    last = frame.iloc[-1]
    assert (last["lower_bound"], last["upper_bound"]) == (result.lower_bound, result.makespan) == (164, 164)
