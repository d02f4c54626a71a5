"""What the export tests of every mode check alike: the trace's rounding, tracks whose slices do
not overlap, and files that read back as what was built."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Hashable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "assert_tracks_do_not_overlap",
    "requests_csv_read_back",
    "stages_csv_read_back",
    "trace_read_back",
    "us",
]


def us(seconds: Any) -> np.ndarray:
    """The trace's rounding: the nearest integer microsecond."""
    return np.rint(np.asarray(seconds, dtype=np.float64) * 1e6).astype(np.int64)


def assert_tracks_do_not_overlap(
    slices: Iterable[dict[str, Any]], track: Callable[[dict[str, Any]], Hashable] = lambda e: e["tid"]
) -> set[Hashable]:
    """Assert that no two of ``slices`` (complete events) on one track overlap; return the
    tracks that hold one (``track`` names an event's: its tid, or its pid and tid)."""
    by_track: dict[Hashable, list[tuple[int, int]]] = {}
    for e in slices:
        by_track.setdefault(track(e), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_track.values():
        spans.sort()
        assert all(prev_end <= start for (_, prev_end), (start, _) in itertools.pairwise(spans))
    return set(by_track)


def trace_read_back(schedule: Any, path: Path) -> dict[str, Any]:
    """The trace ``schedule.write_chrome_trace`` writes to ``path``, as ``json.load`` reads
    it, asserted equal to the one the writer returned."""
    returned = schedule.write_chrome_trace(path)
    with open(path, encoding="utf-8") as file:
        trace = json.load(file)
    assert trace == returned
    return trace


def requests_csv_read_back(schedule: Any, path: Path, **targets: float) -> pd.DataFrame:
    """The request CSV ``schedule`` writes to ``path`` as pandas reads it, asserted to be its
    ``request_frame`` (``meets_slo`` against ``targets``, which some requests meet and some
    miss) to the last bit, and the text the writer returns without a path."""
    assert schedule.write_requests_csv(path, **targets) is None
    back = pd.read_csv(path, index_col="request")
    pd.testing.assert_frame_equal(back, schedule.request_frame(**targets), check_exact=True)
    assert back["meets_slo"].any() and not back["meets_slo"].all()
    assert path.read_text() == schedule.write_requests_csv(**targets)
    return back


def stages_csv_read_back(schedule: Any, path: Path) -> pd.DataFrame:
    """The stage CSV ``schedule`` writes to ``path`` as pandas reads it, asserted to be its
    ``stage_frame`` to the last bit."""
    schedule.write_stages_csv(path)
    back = pd.read_csv(path, index_col="stage")
    pd.testing.assert_frame_equal(back, schedule.stage_frame(), check_exact=True)
    return back
