"""Schedule metrics, DataFrames and the Gantt chart."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched import LinearCostModel, Workload, simulate
from llmsched.plot import DECODING, IDLE, PREFILLING, occupancy_grid

COST = LinearCostModel(1.0, 0.1, 0.5, 0.25, prefill_capacity=100)


@pytest.fixture
def schedule():
    return simulate(Workload([10, 20, 30], [2, 1, 3]), COST, 2)


def test_to_frame_has_one_row_per_stage_and_client_segment(schedule) -> None:
    """Prefill rows per request and decode rows per (request, decode stage), with exact times."""
    frame = schedule.to_frame()
    assert list(frame.columns) == ["stage", "kind", "request", "client", "start", "end", "tokens"]
    # 3 prefill rows; decode: request 0 in stages 1 and 3, request 1 in 1, request 2 in 3.
    assert (frame["kind"] == "prefill").sum() == 3
    decode = frame[frame["kind"] == "decode"].sort_values(["request", "stage"])
    assert decode[["request", "stage", "tokens"]].values.tolist() == [
        [0, 1, 1],
        [0, 3, 1],
        [1, 1, 1],
        [2, 3, 3],
    ]
    r2 = decode[decode["request"] == 2].iloc[0]
    assert (r2["start"], r2["end"]) == (9.0, 11.5)
    r0 = decode[(decode["request"] == 0) & (decode["stage"] == 3)].iloc[0]
    assert (r0["start"], r0["end"]) == (9.0, 10.0)


def test_request_and_stage_frames(schedule) -> None:
    """Per-request and per-stage tables carry the schedule's figures."""
    requests = schedule.request_frame()
    assert requests["finish"].tolist() == [10.0, 5.0, 11.5]
    assert requests["latency"].tolist() == [10.0, 5.0, 11.5]
    stages = schedule.stage_frame()
    assert stages["kind"].tolist() == ["prefill", "decode", "prefill", "decode"]
    assert stages["prompt_tokens"].tolist() == [30, 0, 30, 0]
    assert stages["duration"].tolist() == [4.0, 1.0, 4.0, 2.5]


def test_summary_figures(schedule) -> None:
    """summary() reports makespan, utilization, throughput and latency percentiles."""
    summary = schedule.summary()
    assert summary["makespan_s"] == 11.5
    assert summary["utilization"] == pytest.approx(17.5 / 23)
    assert summary["prefill_time_s"] == 8.0 and summary["decode_time_s"] == 3.5
    assert summary["ttft_p50_s"] == 4.0
    assert summary["latency_mean_s"] == pytest.approx((10 + 5 + 11.5) / 3)
    assert "makespan=11.500s" in repr(schedule)


def test_occupancy_grid_matches_the_schedule(schedule) -> None:
    """The Gantt raster shows prefill, decode and idle where the schedule has them."""
    grid, times = occupancy_grid(schedule, bins=230)  # 0.05 s per bin
    at = lambda t: int(np.searchsorted(times, t))  # noqa: E731
    assert grid[0, at(2.0)] == PREFILLING and grid[1, at(2.0)] == PREFILLING
    assert grid[1, at(4.5)] == DECODING
    assert grid[0, at(7.0)] == IDLE  # client 0 paused while client 1 prefills request 2
    assert grid[1, at(7.0)] == PREFILLING
    assert grid[0, at(11.0)] == IDLE and grid[1, at(11.0)] == DECODING
    busy_share = (grid != IDLE).mean()
    assert busy_share == pytest.approx(schedule.utilization, abs=0.02)


def test_gantt_returns_a_figure_and_writes_png(schedule, tmp_path) -> None:
    """gantt() returns a matplotlib Figure with utilization and total time in the title."""
    import matplotlib

    matplotlib.use("Agg")
    fig = schedule.plot(title="tiny")
    title = fig.axes[0].get_title()
    assert "Utilization rate: 76.09%" in title and "11.50 seconds" in title
    path = tmp_path / "g.png"
    fig.savefig(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="bins"):
        occupancy_grid(schedule, bins=0)
