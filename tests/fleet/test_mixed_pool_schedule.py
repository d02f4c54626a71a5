"""The mixed pool's schedule (:mod:`llmsched.fleet.mixed_pool_schedule`): the schedule contract
every mode meets, and each cluster rule of its validator broken alone."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from llmsched import Workload
from llmsched.fleet.mixed_pool import simulate_mixed_pool
from tests.fleet.test_mixed_pool import cluster


def test_the_validator_catches_a_transfer_a_piece_or_an_arrival_out_of_place() -> None:
    """Each cluster rule broken alone: a transfer shorter than its bytes take (``transfer``), a
    request's two phases said to run on one machine as two pieces (``pieces``), a request that
    arrives later than it reached its prompt machine (``reach``); and the rules can be skipped."""
    schedule = simulate_mixed_pool(Workload([100, 80], [5, 4], arrival=[0.0, 0.01]), cluster())
    assert schedule.validate() == [] and schedule.split.all()

    def broken(**changes: Any) -> set[str]:
        return {v.rule for v in dataclasses.replace(schedule, **changes).validate()}

    short = schedule.transfer_end.copy()
    short[0] -= 0.05
    assert broken(transfer_end=short) == {"transfer"}
    unknown = np.full(2, np.nan)  # a split request's transfer without its times
    assert broken(transfer_start=unknown, transfer_end=unknown) == {"transfer"}
    moved = schedule.token_machine.copy()
    moved[0] = schedule.prompt_machine[0]
    assert "pieces" in broken(token_machine=moved)
    late = schedule.workload.replace(arrival=np.array([0.0, 0.02]))
    assert broken(workload=late) == {"reach"}
    assert dataclasses.replace(schedule, workload=late).validate(skip="reach") == []
    with pytest.raises(ValueError, match="unknown rule"):
        schedule.validate(skip="nonsense")


def test_the_schedule_is_schedule_like(tmp_path: Any) -> None:
    """The contract every mode's schedule meets: the summary's keys, the frames' columns, the
    writers; the gaps between tokens add up, request by request, to the time from each
    prompt's end to the last token (a split request's first gap spans its transfer)."""
    from llmsched.core.schedule import REQUEST_COLUMNS, STAGE_COLUMNS, SUMMARY_KEYS, ScheduleLike

    workload = Workload(
        [150] * 6 + [40, 300], [3, 5, 2, 7, 1, 4, 9, 6], arrival=[0, 0, 0, 0.01, 0.02, 0.03, 0.2, 0.25]
    )
    schedule = simulate_mixed_pool(workload, cluster(prompt_backlog=200, clients=3))
    assert isinstance(schedule, ScheduleLike) and schedule.validate() == []
    assert schedule.split.any() and not schedule.split.all()
    summary = schedule.summary(slo_ttft=1.0, slo_tbt=0.5)
    assert set(SUMMARY_KEYS) <= set(summary) and summary["mode"] == "mixed-pool"
    assert summary["requests"] == 8 and summary["clients"] == 2 * 3
    frame = schedule.request_frame()
    assert set(REQUEST_COLUMNS) <= set(frame.columns) and len(frame) == 8
    stages = schedule.stage_frame()
    assert list(stages.columns[: len(STAGE_COLUMNS)]) == list(STAGE_COLUMNS)
    assert (stages["kind"] == "transfer").sum() == schedule.split.sum()
    gaps, counts = schedule.tbt_distribution()
    assert counts.sum() == workload.total_output_tokens
    assert float(gaps @ counts) == pytest.approx(float((schedule.finish - schedule.prefill_end).sum()))
    assert (gaps > 0).all()
    trace = schedule.write_chrome_trace(tmp_path / "trace.json")
    flows = [e for e in trace["traceEvents"] if e.get("cat") == "transfer" and e.get("ph") == "s"]
    assert len(flows) == schedule.split.sum()
    assert all(e.get("dur", 0) >= 0 for e in trace["traceEvents"])
    assert schedule.write_requests_csv() is not None
    assert schedule.validate(skip="transfer") == []
