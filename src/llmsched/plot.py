"""Charts of schedules: Gantt charts like Figs. 6-9 of Pang et al., latency distributions, and
optimality gaps.

Every chart is drawn on a ``matplotlib.figure.Figure`` made directly (or on the caller's axes)
and returned: nothing is registered with pyplot, so no figure is left open, and the caller's
matplotlib backend is never changed (a notebook's inline plots keep working). A returned
figure shows itself as a notebook cell's value and saves with ``fig.savefig(path)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from llmsched.core.checks import choice, flag, instance, positive_int, real, real_array, text
from llmsched.core.schedule import DECODE, PREFILL
from llmsched.engines.competition.schedule import Schedule

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["LATENCY_METRICS", "gantt", "latency_cdf", "occupancy_grid", "optimality_gaps", "save_gantt"]

IDLE, PREFILLING, DECODING = 0, 1, 2
MAX_CELLS = 50_000_000  # clients x bins of the occupancy grid (int8 cells, and int32 sums of them)
COLORS = ("#ffffff", "#f28e2b", "#4e79a7")  # idle, prefill, decode


def figure_axes(
    ax: Axes | None, size: tuple[float, float], layout: Literal["constrained", "tight"]
) -> tuple[Figure, Axes]:
    """``ax`` and its figure, or new axes on a new ``Figure`` of ``size`` inches (made
    directly, not through pyplot, so no backend is touched and nothing is left open)."""
    from matplotlib.figure import Figure as NewFigure

    if ax is not None:
        return ax.figure, ax  # type: ignore[return-value]
    fig = NewFigure(figsize=size, dpi=120, layout=layout)
    return fig, fig.add_subplot()


def occupancy_grid(schedule: Schedule, bins: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """What each client does over time, sampled at ``bins`` evenly spaced instants.

    Returns
    -------
    grid
        ``(clients, bins)`` array of IDLE (0), PREFILLING (1) or DECODING (2).
    times
        The sampled instants (bin centres, seconds).
    """
    bins = positive_int("bins", bins)
    if schedule.clients > MAX_CELLS:
        raise ValueError(
            f"a chart of {schedule.clients:,} clients, one row each, is too large a picture "
            f"(at most {MAX_CELLS:,} rows)"
        )
    if schedule.clients * bins > MAX_CELLS:
        raise ValueError(
            f"{schedule.clients:,} clients x {bins:,} bins is too large a picture (at most "
            f"{MAX_CELLS:,} cells); pass at most {MAX_CELLS // schedule.clients:,} bins"
        )
    span = schedule.makespan
    times = (np.arange(bins) + 0.5) * (span / bins) if span > 0 else np.zeros(bins)
    stage = np.searchsorted(schedule.stage_start, times, side="right") - 1
    stage = np.clip(stage, 0, max(schedule.num_stages - 1, 0))
    in_stage = (times >= schedule.stage_start[stage]) & (times < schedule.stage_end[stage])
    engine_decoding = in_stage & (schedule.stage_kind[stage] == DECODE)
    engine_prefilling = in_stage & (schedule.stage_kind[stage] == PREFILL)

    def bin_range(t0: np.ndarray, t1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lo = np.searchsorted(times, t0, side="left")
        hi = np.searchsorted(times, t1, side="left")
        return lo, hi

    clients = schedule.clients
    grid = np.zeros((clients, bins), dtype=np.int8)
    for state, t0, t1, mask in (
        (
            PREFILLING,
            schedule.stage_start[schedule.request_prefill_stage],
            schedule.prefill_end,
            engine_prefilling,
        ),
        (DECODING, schedule.prefill_end, schedule.finish, engine_decoding),
    ):
        lo, hi = bin_range(t0, t1)
        diff = np.zeros((clients, bins + 1), dtype=np.int32)
        np.add.at(diff, (schedule.request_client, lo), 1)
        np.add.at(diff, (schedule.request_client, hi), -1)
        covered = np.cumsum(diff[:, :bins], axis=1) > 0
        grid[covered & mask[None, :]] = state
    return grid, times


def gantt(
    schedule: Schedule,
    ax: Axes | None = None,
    title: str | None = None,
    bins: int = 2000,
    time_unit: str = "s",
) -> Figure:
    """Clients (rows) over time, prefill and decode in two colours, idle left white.

    The title gives the utilization and the total time, as the paper's figures do.

    Parameters
    ----------
    schedule
        The schedule to draw.
    ax
        Axes to draw on; by default a new ``matplotlib.figure.Figure`` (not registered with
        pyplot; the matplotlib backend is left alone).
    title
        The first line of the title (default "Total inference time").
    bins
        The time resolution: the chart is drawn as an image of ``bins`` columns, so it stays
        fast for schedules with hundreds of thousands of segments.
    time_unit
        ``"s"`` or ``"ms"`` on the time axis.

    Returns
    -------
    matplotlib.figure.Figure
        The figure drawn on (``ax``'s when given).
    """
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    if time_unit not in ("s", "ms"):
        raise ValueError(f"time_unit must be 's' or 'ms', got {time_unit!r}")
    scale = 1000.0 if time_unit == "ms" else 1.0
    grid, _ = occupancy_grid(schedule, bins)
    # Tight layout makes room for the legend beside the axes; a caller's figure keeps its own.
    fig, ax = figure_axes(ax, (10, 5.5), "tight")
    ax.imshow(
        grid,
        aspect="auto",
        interpolation="nearest",
        origin="lower",
        cmap=ListedColormap(COLORS),
        vmin=0,
        vmax=2,
        extent=(0.0, schedule.makespan * scale, -0.5, schedule.clients - 0.5),
    )
    ax.set_xlabel(f"Time ({time_unit})")
    ax.set_ylabel("Client")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # clients are whole rows
    heading = title if title is not None else "Total inference time"
    ax.set_title(
        f"{heading}\nUtilization rate: {schedule.utilization:.2%}. "
        f"Total inference time: {schedule.makespan:.2f} seconds."
    )
    ax.legend(
        handles=[Patch(color=COLORS[1], label="prefill"), Patch(color=COLORS[2], label="decode")],
        loc="upper left",
        bbox_to_anchor=(1.0, 1.0),
        frameon=False,
    )
    return fig


def save_gantt(schedule: Schedule, path: Any, **kwargs: Any) -> Figure:
    """Write :func:`gantt` to ``path`` (PNG, SVG, PDF: by extension) and return its figure.

    ``**kwargs`` are those of :func:`gantt`. The figure is not registered with pyplot, so
    nothing is left open.
    """
    fig = gantt(schedule, **kwargs)
    fig.savefig(path)
    return fig


#: Per-request latencies latency_cdf draws (attributes of Schedule), and their axis labels.
#:
#: :meta hide-value:
LATENCY_METRICS = {
    "ttft": "time to first token (s)",
    "e2e": "end-to-end latency (s)",
    "tbt_mean": "mean time between tokens (s)",
    "tbt_max": "longest time between tokens (s)",
    "normalized_latency": "latency per output token (s)",
}


def latency_cdf(
    schedules: Schedule | Mapping[str, Schedule],
    metric: str = "ttft",
    ax: Axes | None = None,
    title: str | None = None,
    target: float | None = None,
    log_x: bool = False,
) -> Figure:
    """The distribution of a per-request latency: one empirical CDF per schedule.

    Parameters
    ----------
    schedules
        A schedule, or schedules by label (``{"fcfs / prefill-first": schedule, ...}``); the
        legend gives each label with its median and 99th percentile.
    metric
        One of :data:`LATENCY_METRICS`: ``"ttft"``, ``"e2e"``, ``"tbt_mean"``, ``"tbt_max"``,
        ``"normalized_latency"``. Requests without a value (no gap between tokens for a
        one-token output) are left out.
    ax
        Axes to draw on; by default a new ``matplotlib.figure.Figure`` (not registered with
        pyplot; the matplotlib backend is left alone).
    title
        The title (default: the metric's label).
    target
        A latency target in seconds (> 0), drawn as a dashed vertical line; None: none.
    log_x
        A logarithmic latency axis (a queue near saturation spreads latencies over decades).

    Returns
    -------
    matplotlib.figure.Figure
        The figure drawn on (``ax``'s when given).

    Raises
    ------
    TypeError, ValueError
        No schedule, something other than a schedule, an unknown metric, a target that is
        not > 0, or a schedule with no request that has the metric.
    """

    if isinstance(schedules, Schedule):
        schedules = {"schedule": schedules}
    if not isinstance(schedules, Mapping) or not schedules:
        raise ValueError(
            f"schedules must be a Schedule or a non-empty mapping of labels to schedules, got {schedules!r}"
        )
    metric = choice("metric", metric, LATENCY_METRICS)
    target = None if target is None else real("target", target, low=0.0, low_open=True)
    log_x = flag("log_x", log_x)
    if title is not None:
        text("title", title)
    samples = {}
    for label, schedule in schedules.items():
        instance(f"schedules[{label!r}]", schedule, Schedule, "a Schedule")
        values = np.asarray(getattr(schedule, metric), dtype=float)
        values = values[np.isfinite(values)]
        if values.size == 0:
            raise ValueError(f"schedules[{label!r}] has no request with a {metric}")
        samples[str(label)] = values

    fig, ax = figure_axes(ax, (7, 4.5), "constrained")
    for label, values in samples.items():
        p50, p99 = np.percentile(values, [50, 99])
        ax.ecdf(values, label=f"{label}: p50 {p50:.3g} s, p99 {p99:.3g} s")
    if target is not None:
        ax.axvline(target, color="grey", linestyle="--", linewidth=1, label=f"target {target:g} s")
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel(LATENCY_METRICS[metric])
    ax.set_ylabel("share of requests")
    ax.set_ylim(0.0, 1.02)
    ax.set_title(title if title is not None else f"Distribution of the {LATENCY_METRICS[metric][:-4]}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return fig


def _named_columns(name: str, columns: Any, n: int) -> dict[str, np.ndarray]:
    """``columns`` (a dict or a DataFrame of name -> values) as arrays of ``n`` numbers >= 0."""
    if not hasattr(columns, "keys") or isinstance(columns, (str, bytes)):
        raise TypeError(
            f"{name} must map names to arrays (a dict or a DataFrame), got {type(columns).__name__}"
        )
    arrays = {}
    for key in columns.keys():  # noqa: SIM118 (a DataFrame iterates over its columns by keys())
        values = real_array(f"{name}[{key!r}]", columns[key], low=0.0)
        if values.size != n:
            raise ValueError(f"{name}[{key!r}] holds {values.size} values for the {n} optima")
        arrays[str(key)] = values
    return arrays


def optimality_gaps(optimum: Any, makespans: Any, bounds: Any = None) -> Figure:
    """How far heuristics are above a proven optimum, and lower bounds below it.

    Parameters
    ----------
    optimum
        The proven optimal makespan of each instance (seconds, > 0).
    makespans
        Each strategy's makespan per instance: a dict of name -> array, or a DataFrame with
        one column per strategy, in the order of ``optimum``. Drawn as one box per strategy
        of the makespan above the optimum, in percent.
    bounds
        Lower bounds per instance, as ``makespans`` (or None): drawn in a second panel against
        the optimum, with the diagonal a bound cannot cross.

    Returns
    -------
    matplotlib.figure.Figure
        A new figure (not registered with pyplot; the matplotlib backend is left alone).

    Raises
    ------
    TypeError, ValueError
        An empty or non-positive ``optimum``, no strategy, or a column whose length differs
        from ``optimum``'s or that holds a value that is not a finite number >= 0.
    """
    from matplotlib.figure import Figure

    optimum = real_array("optimum", optimum, low=0.0, low_open=True, nonempty=True)
    strategies = _named_columns("makespans", makespans, optimum.size)
    if not strategies:
        raise ValueError("makespans holds no strategy; give at least one column of makespans")
    lower = {} if bounds is None else _named_columns("bounds", bounds, optimum.size)

    fig = Figure(figsize=(12, 4) if lower else (6.5, 4), dpi=100, layout="constrained")
    axes = fig.subplots(1, 2 if lower else 1, squeeze=False)[0]
    gaps = [100.0 * (values / optimum - 1.0) for values in strategies.values()]
    axes[0].boxplot(gaps)
    axes[0].set_xticks(range(1, len(gaps) + 1), list(strategies), rotation=30, ha="right")
    axes[0].axhline(0.0, color="grey", linewidth=0.8)
    axes[0].set(ylabel="makespan above the optimum (%)", title="Heuristics against the optimum")
    axes[0].grid(alpha=0.3, axis="y")
    if lower:
        markers = "o", "x", "+", "^", "s", "v"
        for k, (label, values) in enumerate(lower.items()):
            axes[1].scatter(optimum, values, s=15, marker=markers[k % len(markers)], label=label)
        span = [0.0, float(optimum.max()) * 1.05]
        axes[1].plot(span, span, "k--", linewidth=0.8, label="optimum")
        axes[1].set(xlabel="optimum (s)", ylabel="lower bound (s)", title="Lower bounds against the optimum")
        axes[1].grid(alpha=0.3)
        axes[1].legend(fontsize=8)
    return fig
