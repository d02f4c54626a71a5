"""Measured rows of a schedule for fitting cost models."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from llmsched import LinearCostModel, Schedule, Workload, simulate
from llmsched.runtime.profiling import schedule_stage_times

COST = LinearCostModel(1.0, 0.1, 0.5, 0.25, prefill_capacity=100)


def _per_iteration(schedule: Schedule) -> Schedule:
    return Schedule.from_iteration_end(
        schedule.workload,
        schedule.cost,
        schedule.clients,
        schedule.stage_kind,
        schedule.stage_start,
        schedule.stage_end,
        schedule.stage_first_iteration,
        schedule.stage_iterations,
        schedule.iteration_end,
        schedule.request_client,
        schedule.request_prefill_stage,
        schedule.request_decode_start,
        schedule.request_decode_end,
        schedule.makespan,
        measured=True,
    )


def test_stage_times_have_one_decode_row_per_run_and_per_iteration_when_measured() -> None:
    """A simulated schedule gives a decode row per run; its per-iteration twin, one per iteration,
    with the same active counts and times once the runs are spread over their iterations."""
    schedule = simulate(Workload([10, 20, 30], [2, 1, 3]), COST, 2)
    rows = schedule_stage_times(schedule)
    assert rows["kind"].tolist() == ["prefill", "prefill", "decode", "decode", "decode"]
    assert rows["size"].tolist() == [30, 30, 2, 2, 1]
    assert rows["seconds"].tolist() == [4.0, 4.0, 1.0, 1.0, 0.75]
    measured = schedule_stage_times(_per_iteration(schedule))
    decode = measured[measured["kind"] == "decode"]
    assert decode["size"].tolist() == [2, 2, 1, 1]
    np.testing.assert_allclose(decode["seconds"], [1.0, 1.0, 0.75, 0.75])
    spread = np.repeat(rows["size"].to_numpy()[2:], schedule.run_iterations)
    assert spread.tolist() == decode["size"].tolist()
