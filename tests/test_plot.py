"""The occupancy grid and the Gantt chart drawn from it."""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.figure import Figure

from llmsched import LinearCostModel, Workload, simulate
from llmsched.plot import DECODING, IDLE, PREFILLING, gantt, occupancy_grid, save_gantt

COST = LinearCostModel(1.0, 0.1, 0.5, 0.25, prefill_capacity=100)

# The tiny schedule in half-second bins (23 of them over its 11.5 s): both clients prefill
# (requests 0 and 1) in [0, 4] and decode in [4, 5]; client 1 prefills request 2 in [5, 9]
# while client 0 waits; both decode in [9, 10], then client 1 alone until 11.5.
HALF_SECOND_GRID = [
    [1] * 8 + [2] * 2 + [0] * 8 + [2] * 2 + [0] * 3,
    [1] * 8 + [2] * 2 + [1] * 8 + [2] * 5,
]


@pytest.fixture
def schedule():
    return simulate(Workload([10, 20, 30], [2, 1, 3]), COST, 2)


@pytest.fixture
def svg_backend():
    """The svg backend (not the Agg the charts would pick) for the test, the previous one after."""
    previous = matplotlib.get_backend()
    matplotlib.use("svg")
    yield "svg"
    matplotlib.use(previous)


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


def test_occupancy_grid_of_the_tiny_schedule_cell_by_cell(schedule) -> None:
    """In half-second bins every cell of both clients is the state the schedule gives it, and
    the sampled instants are the bins' centres."""
    grid, times = occupancy_grid(schedule, bins=23)
    assert grid.dtype == np.int8 and grid.tolist() == HALF_SECOND_GRID
    assert times.tolist() == [0.25 + 0.5 * k for k in range(23)]


def test_gantt_returns_a_figure_and_writes_png(schedule, tmp_path) -> None:
    """gantt() returns a matplotlib Figure with utilization and total time in the title."""
    matplotlib.use("Agg")
    fig = schedule.plot(title="tiny")
    title = fig.axes[0].get_title()
    assert "Utilization rate: 76.09%" in title and "11.50 seconds" in title
    path = tmp_path / "g.png"
    fig.savefig(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="bins"):
        occupancy_grid(schedule, bins=0)
    plt.close(fig)


def test_gantt_draws_on_the_callers_axes_in_milliseconds(schedule, svg_backend) -> None:
    """Given an axes, gantt draws the occupancy grid into it alone, returns its figure (no new
    one), spans the makespan in ms, and leaves the caller's backend as it was."""
    fig, axes = plt.subplots(1, 2)
    figures = plt.get_fignums()
    drawn = gantt(schedule, ax=axes[1], bins=23, time_unit="ms")
    assert isinstance(drawn, Figure) and drawn is fig and plt.get_fignums() == figures
    assert len(fig.axes) == 2 and axes[0].get_images() == []
    (image,) = axes[1].get_images()
    assert np.asarray(image.get_array()).tolist() == HALF_SECOND_GRID
    assert image.get_extent() == [0.0, 11500.0, -0.5, 1.5]
    assert axes[1].get_xlabel() == "Time (ms)" and axes[1].get_ylabel() == "Client"
    assert axes[1].get_title().startswith("Total inference time\n")
    assert matplotlib.get_backend() == svg_backend
    plt.close(fig)


def test_gantt_refuses_an_unknown_time_unit(schedule) -> None:
    """Seconds or milliseconds only; anything else is refused, naming what was given."""
    with pytest.raises(ValueError, match="time_unit must be 's' or 'ms', got 'min'"):
        gantt(schedule, time_unit="min")


@pytest.mark.parametrize(("suffix", "magic"), [(".svg", b"<?xml"), (".pdf", b"%PDF"), (".png", b"\x89PNG")])
def test_save_gantt_writes_by_extension_and_closes_its_figure(
    schedule, tmp_path, svg_backend, suffix, magic
) -> None:
    """save_gantt writes the format its file name asks for, leaves no figure open, and leaves
    the caller's matplotlib backend unchanged."""
    figures = plt.get_fignums()
    path = tmp_path / f"g{suffix}"
    save_gantt(schedule, path, title="tiny", bins=23)
    assert path.read_bytes().startswith(magic)
    assert plt.get_fignums() == figures
    assert matplotlib.get_backend() == svg_backend


@pytest.mark.parametrize(("bins", "error"), [(1.5, TypeError), ("200", TypeError), (True, TypeError)])
def test_occupancy_grid_bins_must_be_an_integer(schedule, bins, error) -> None:
    """bins is a whole number (1.5 gave numpy's message, "200" a failed comparison)."""
    with pytest.raises(error, match="bins must be an integer"):
        occupancy_grid(schedule, bins=bins)


def test_a_chart_too_large_says_what_would_fit() -> None:
    """Too many clients for any number of bins is said so; otherwise the bins that fit are named
    (it used to ask for fewer bins even where one bin was too many)."""
    many = simulate(Workload([5, 6], [3, 2]), COST, 10**9)
    with pytest.raises(ValueError, match="1,000,000,000 clients, one row each"):
        occupancy_grid(many, bins=1)
    wide = simulate(Workload([5, 6], [3, 2]), COST, 10**6)
    with pytest.raises(ValueError, match="pass at most 50 bins"):
        occupancy_grid(wide, bins=51)
