"""The occupancy grid and the Gantt chart drawn from it."""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.figure import Figure

from llmsched import LinearCostModel, Workload, simulate
from llmsched.plot import (
    DECODING,
    IDLE,
    PREFILLING,
    gantt,
    latency_cdf,
    occupancy_grid,
    optimality_gaps,
    save_gantt,
)

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


def _stream() -> Workload:
    """Six requests arriving over 2.5 s, for the plots of serving metrics."""
    return Workload([10, 20, 30, 15, 25, 5], [2, 1, 3, 4, 2, 3], arrival=[0.0, 0.5, 1.0, 1.5, 2.0, 2.5])


def _plot_study(schedule, tmp_path):
    from llmsched.experiments.study import plot_study, run_study

    frame = run_study(cases=2, requests=30, clients=6, n_jobs=1, progress=False)
    return plot_study(frame, tmp_path / "study.png")


def _plot_sweep(schedule, tmp_path):
    from llmsched.experiments.sweep import plot_sweep, sweep

    frame = sweep(_stream(), COST, 2, ["fcfs/prefill-first", "fcfs/lagrangian"], [1, 2], progress=False)
    return plot_sweep(frame)


def _latency_cdf(schedule, tmp_path):
    stream = _stream()
    return latency_cdf(
        {
            "prefill-first": simulate(stream, COST, 2),
            "lagrangian": simulate(stream, COST, 2, iteration_policy="lagrangian"),
        }
    )


def _optimality_gaps(schedule, tmp_path):
    return optimality_gaps(
        [10.0, 12.0], {"fcfs": [11.0, 12.5], "hybrid": [10.0, 12.0]}, {"bound": [9.0, 11.0]}
    )


# Every plot function of the library, called as a user would; each returns its figure.
PLOTS = {
    "gantt": lambda schedule, tmp_path: gantt(schedule),
    "Schedule.plot": lambda schedule, tmp_path: schedule.plot(title="tiny"),
    "save_gantt": lambda schedule, tmp_path: save_gantt(schedule, tmp_path / "g.png"),
    "plot_study": _plot_study,
    "plot_sweep": _plot_sweep,
    "latency_cdf": _latency_cdf,
    "optimality_gaps": _optimality_gaps,
}


@pytest.mark.parametrize("name", list(PLOTS))
def test_every_plot_returns_its_figure_and_leaves_pyplot_alone(schedule, tmp_path, svg_backend, name) -> None:
    """Each plot function returns a Figure, keeps the caller's matplotlib backend (a notebook's
    inline plots keep working) and leaves no figure open in pyplot; one that saves writes its file."""
    figures = plt.get_fignums()
    fig = PLOTS[name](schedule, tmp_path)
    assert isinstance(fig, Figure) and fig.axes
    assert matplotlib.get_backend() == svg_backend
    assert plt.get_fignums() == figures
    for written in tmp_path.iterdir():
        assert written.read_bytes()[:4] == b"\x89PNG"


def test_latency_cdf_draws_one_distribution_per_schedule() -> None:
    """One empirical CDF per labelled schedule, over its requests' TTFTs, with the median and
    99th percentile in the legend and the target as a vertical line."""
    stream = _stream()
    first = simulate(stream, COST, 2)
    fig = latency_cdf({"a": first, "b": simulate(stream, COST, 3)}, target=2.0, log_x=True)
    (ax,) = fig.axes
    curves, target = ax.lines[:2], ax.lines[2]
    p50, p99 = np.percentile(first.ttft, [50, 99])
    assert curves[0].get_label() == f"a: p50 {p50:.3g} s, p99 {p99:.3g} s"
    steps = np.asarray(curves[0].get_xdata(), dtype=float)
    assert set(np.unique(steps[np.isfinite(steps)])) == set(np.unique(first.ttft))
    assert ax.get_xscale() == "log" and ax.get_xlabel() == "time to first token (s)"
    assert target.get_label() == "target 2 s" and list(target.get_xdata()) == [2.0, 2.0]


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        ((), {"metric": "tpot"}, ValueError, "metric must be one of"),
        ((), {"target": 0}, ValueError, "target must be"),
        ((), {"log_x": 1}, TypeError, "log_x must be True or False"),
    ],
)
def test_latency_cdf_refuses_bad_arguments(schedule, args, kwargs, error, message) -> None:
    """An unknown metric, a target that is not > 0 and a flag that is not a bool are refused by name."""
    with pytest.raises(error, match=message):
        latency_cdf(schedule, *args, **kwargs)


def test_latency_cdf_wants_schedules() -> None:
    """An empty mapping or something other than a schedule is refused before drawing."""
    with pytest.raises(ValueError, match="non-empty mapping"):
        latency_cdf({})
    with pytest.raises(TypeError, match=r"schedules\['x'\] must be a Schedule"):
        latency_cdf({"x": [1.0, 2.0]})  # type: ignore[dict-item]


def test_optimality_gaps_draws_gaps_in_percent_and_bounds_below_the_diagonal() -> None:
    """A box per strategy of its makespan above the optimum in percent; each bound against the
    optimum beside the diagonal."""
    fig = optimality_gaps([10.0, 20.0], {"fcfs": [11.0, 22.0], "best": [10.0, 20.0]}, {"lb": [9.0, 18.0]})
    boxes, bounds = fig.axes
    assert [t.get_text() for t in boxes.get_xticklabels()] == ["fcfs", "best"]
    medians = [
        line
        for line in boxes.lines
        if len(line.get_ydata()) == 2 and line.get_ydata()[0] == line.get_ydata()[1]
    ]
    assert any(np.allclose(line.get_ydata(), 10.0) for line in medians)  # fcfs: 10% above on both
    (points,) = bounds.collections
    assert np.asarray(points.get_offsets()).tolist() == [[10.0, 9.0], [20.0, 18.0]]
    assert len(optimality_gaps([10.0], {"fcfs": [11.0]}).axes) == 1  # no bounds: one panel


def test_optimality_gaps_refuses_mismatched_columns() -> None:
    """Columns must hold one value per optimum; the optimum must be > 0."""
    with pytest.raises(ValueError, match=r"makespans\['fcfs'\] holds 1 values for the 2 optima"):
        optimality_gaps([10.0, 20.0], {"fcfs": [11.0]})
    with pytest.raises(ValueError, match="optimum"):
        optimality_gaps([0.0], {"fcfs": [1.0]})
    with pytest.raises(TypeError, match="must map names to arrays"):
        optimality_gaps([1.0], [1.0])
    with pytest.raises(ValueError, match="no strategy"):
        optimality_gaps([1.0], {})
