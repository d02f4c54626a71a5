"""Gantt charts of schedules, like Figs. 6-9 of Pang et al."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from llmsched._checks import positive_int
from llmsched.schedule import DECODE, PREFILL, Schedule

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["gantt", "occupancy_grid", "save_gantt"]

IDLE, PREFILLING, DECODING = 0, 1, 2
MAX_CELLS = 50_000_000  # clients x bins of the occupancy grid (int8 cells, and int32 sums of them)
COLORS = ("#ffffff", "#f28e2b", "#4e79a7")  # idle, prefill, decode


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
    ``bins`` sets the time resolution (the chart is drawn as an image, so it stays fast
    for schedules with hundreds of thousands of segments).
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    if time_unit not in ("s", "ms"):
        raise ValueError(f"time_unit must be 's' or 'ms', got {time_unit!r}")
    scale = 1000.0 if time_unit == "ms" else 1.0
    grid, _ = occupancy_grid(schedule, bins)
    if ax is None:
        fig, ax = plt.subplots(figsize=(10, 5.5), dpi=120)
    else:
        fig = ax.figure  # type: ignore[assignment]
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
    fig.tight_layout()
    return fig


def save_gantt(schedule: Schedule, path: Any, **kwargs: Any) -> None:
    """Write :func:`gantt` to ``path`` (PNG, SVG, PDF: by extension) and close the figure."""
    import matplotlib.pyplot as plt

    fig = gantt(schedule, **kwargs)
    fig.savefig(path)
    plt.close(fig)
