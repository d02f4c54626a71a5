"""Schedules to files other tools read: what every mode's exports share.

Each mode builds its trace's events beside its schedule (``engines/<mode>/export.py``,
``fleet/export.py``); this module holds the conventions they keep and the writers.

Chrome trace (Trace Event Format JSON, opened by https://ui.perfetto.dev and chrome://tracing):

* a process (``pid``) per machine: the one engine of a competition or fused schedule, each
  prompt and token machine of a cluster, each engine of a fleet; named by ``process_name``
  metadata, ordered by ``process_sort_index``;
* in a process, an ``engine`` track (tid :data:`ENGINE_TID`) with one complete event
  (``"ph": "X"``, category ``stage``) per stage or run the machine ran, then a track per
  client that worked, ``client J`` (tid :func:`client_tid`), with one complete event per piece
  of a request's work there (``prefill r123``, ``decode r123``), each carrying the
  ``request`` in its ``args``; a request preempted and recomputed (an engine with KV-cache
  memory) is named by its user request on each of its pieces' slices; names and order of
  the tracks as ``thread_name`` and ``thread_sort_index`` metadata (``"ph": "M"``);
* ``ts`` and ``dur`` in integer microseconds: ``ts = round(start * 1e6)`` and
  ``dur = round(end * 1e6) - ts`` (:func:`microseconds`), so each end is within 0.5 µs of the
  schedule's and slices that abut in the schedule abut in the trace; ``displayTimeUnit`` is
  ``"ms"``;
* a request's move from one machine to another (a cluster's KV transfer, a fleet's backoff
  pull) as a flow (:func:`flow_events`): an ``"s"`` event at the start of the slice it leaves
  from and an ``"f"`` event (``"bp": "e"``) at the start of the slice it arrives in, so that
  viewers that bind a flow to the slice enclosing its event draw the arrow between the two;
  the times of the move itself are in their ``args``;
* each (user) request's arrival as an instant event (``"ph": "i"``, thread scope) named
  ``arrive r123`` on the engine track of the machine it arrived at, when the workload has
  arrivals (some request arriving after 0: in a closed batch they would all stack at 0 and
  say nothing the slices do not);
* the run's headline figures under ``otherData``.

CSVs: :func:`write_requests_csv` writes a schedule's ``request_frame`` (one row per request,
serving metrics included) and :func:`write_stages_csv` its ``stage_frame`` (one row per
stage, run or transfer), each with its index (``request``, ``stage``) as the first column,
floats in Python's shortest round-trip form and NaN as an empty field (what
``pandas.read_csv`` reads back as NaN).

Every writer checks its path before any work: a path that is a folder, whose folder does not
exist, or that cannot be written is a ``ValueError`` naming it.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from llmsched.core.checks import path_arg

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "ENGINE_TID",
    "PID",
    "Exportable",
    "arrival_events",
    "check_output_path",
    "client_tid",
    "complete_event",
    "csv_text",
    "engine_tracks",
    "flow_events",
    "has_arrivals",
    "instant_event",
    "microseconds",
    "mode_figures",
    "one_engine_trace",
    "process_events",
    "thread_events",
    "trace_object",
    "write_chrome_trace",
    "write_requests_csv",
    "write_stages_csv",
    "write_text",
]


class Exportable(Protocol):
    """What the writers read from a schedule; every :class:`~llmsched.core.schedule.ScheduleLike`
    offers it."""

    def chrome_trace(self) -> dict[str, Any]:
        """The trace's object."""
        ...

    def request_frame(self, slo_ttft: float | None = None, slo_tbt: float | None = None) -> pd.DataFrame:
        """One row per request, its index named ``request``."""
        ...

    def stage_frame(self) -> pd.DataFrame:
        """One row per stage, its index named ``stage``."""
        ...


# Where a trace puts things: the first (or only) machine's process; its engine's track
# first, then client J's.
PID = 1
ENGINE_TID = 1


def client_tid(client: int) -> int:
    """The trace's thread id of client ``client`` (``client + 2``: tid 0 is avoided, 1 is the engine)."""
    return int(client) + 2


def check_output_path(path: Any, name: str = "path", example: str = "out.json") -> Path:
    """``path`` as a ``Path`` if a file can be written there; ``name`` and ``example`` go
    into the messages (``--trace``, ``trace.json``).

    Raises
    ------
    TypeError
        If ``path`` is not a str or os.PathLike.
    ValueError
        If ``path`` is a folder, its folder does not exist, or it (or its folder) is not
        writable; the message names the path.
    """
    target = Path(path_arg(name, path))
    if target.is_dir():
        raise ValueError(f"{name} {str(target)!r} is a folder; give a file such as {example}")
    folder = target.parent
    if not folder.is_dir():
        raise ValueError(f"{name} {str(target)!r}: folder {str(folder)!r} does not exist")
    writable = os.access(target, os.W_OK) if target.exists() else os.access(folder, os.W_OK | os.X_OK)
    if not writable:
        raise ValueError(f"{name} {str(target)!r}: not writable")
    return target


def write_text(target: Path, name: str, text: str) -> None:
    """Write ``text`` to ``target``; an OSError becomes a ValueError naming the path."""
    try:
        with open(target, "w", encoding="utf-8", newline="") as out:
            out.write(text)
    except OSError as exc:
        raise ValueError(f"{name} {str(target)!r}: cannot write ({exc.strerror or exc})") from None


def microseconds(seconds: Any, what: str) -> np.ndarray:
    """``seconds`` as integer microseconds, rounded to the nearest (int64).

    Raises
    ------
    ValueError
        If a time is not finite (``what`` names it: ``cannot export a trace: a stage time is
        not finite``).
    """
    values = np.asarray(seconds, dtype=np.float64)
    if values.size and not np.isfinite(values).all():
        raise ValueError(f"cannot export a trace: a {what} time is not finite")
    return np.rint(values * 1e6).astype(np.int64)


def has_arrivals(arrival: np.ndarray) -> bool:
    """Whether a trace shows arrivals: some request arrives after time 0."""
    return bool(np.any(arrival > 0))


def arrival_events(arrival: Any, pid: Any, requests: Any = None) -> list[dict[str, Any]]:
    """An instant ``arrive r123`` (category ``arrival``, ``args`` holding the ``request``)
    per request at its arrival, on the engine track of process ``pid`` (one for all, or one
    per request), when the workload has arrivals (:func:`has_arrivals`); none otherwise.

    ``requests`` names the requests (None: 0, 1, ...).

    Raises
    ------
    ValueError
        If an arrival time is not finite.
    """
    times = np.asarray(arrival, dtype=np.float64)
    if not has_arrivals(times):
        return []
    ts = microseconds(times, "arrival").tolist()
    pids = np.broadcast_to(np.asarray(pid, dtype=np.int64), times.shape).tolist()
    names = range(times.size) if requests is None else np.asarray(requests).tolist()
    return [
        instant_event(f"arrive r{i}", "arrival", t, p, ENGINE_TID, {"request": i})
        for i, t, p in zip(names, ts, pids, strict=True)
    ]


def process_events(pid: int, name: str, sort_index: int | None = None) -> list[dict[str, Any]]:
    """Metadata naming process ``pid`` (and placing it at ``sort_index`` when given)."""
    events: list[dict[str, Any]] = [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}}]
    if sort_index is not None:
        events.append(
            {"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": sort_index}}
        )
    return events


def thread_events(pid: int, tid: int, name: str, sort_index: int) -> list[dict[str, Any]]:
    """Metadata naming track ``tid`` of process ``pid`` and placing it at ``sort_index``."""
    return [
        {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}},
        {"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": sort_index}},
    ]


def engine_tracks(pid: int, clients: Any) -> list[dict[str, Any]]:
    """Metadata of an engine's tracks in process ``pid``: its ``engine`` track first, then a
    ``client J`` track for each distinct client of ``clients`` (the clients that did work)."""
    events = thread_events(pid, ENGINE_TID, "engine", 0)
    for client in np.unique(clients).tolist():
        events += thread_events(pid, client_tid(client), f"client {client}", client + 1)
    return events


def complete_event(
    name: str, cat: str, ts: int, dur: int, pid: int, tid: int, args: dict[str, Any]
) -> dict[str, Any]:
    """A slice (``"ph": "X"``) from ``ts`` lasting ``dur`` microseconds on track ``tid`` of ``pid``."""
    return {"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": args}


def instant_event(name: str, cat: str, ts: int, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    """An instant (``"ph": "i"``, drawn on its track) at ``ts`` on track ``tid`` of ``pid``."""
    return {"name": name, "cat": cat, "ph": "i", "s": "t", "ts": ts, "pid": pid, "tid": tid, "args": args}


def flow_events(
    name: str,
    flow_id: int,
    source: tuple[int, int, int],
    target: tuple[int, int, int],
    args: dict[str, Any],
    cat: str = "transfer",
) -> list[dict[str, Any]]:
    """A flow (an arrow) from the slice starting at ``source = (pid, tid, ts)`` to the one
    starting at ``target``: an ``"s"`` and an ``"f"`` event with one ``id`` (unique among the
    flows of one ``name`` and ``cat``); the ``"f"`` binds to its enclosing slice (``"bp": "e"``)."""
    (from_pid, from_tid, from_ts), (to_pid, to_tid, to_ts) = source, target
    return [
        {
            "name": name,
            "cat": cat,
            "ph": "s",
            "id": flow_id,
            "ts": from_ts,
            "pid": from_pid,
            "tid": from_tid,
            "args": args,
        },
        {
            "name": name,
            "cat": cat,
            "ph": "f",
            "bp": "e",
            "id": flow_id,
            "ts": to_ts,
            "pid": to_pid,
            "tid": to_tid,
            "args": args,
        },
    ]


def trace_object(events: list[dict[str, Any]], other: dict[str, Any]) -> dict[str, Any]:
    """The trace file's object: ``traceEvents``, ``displayTimeUnit`` and ``otherData``
    (``other`` after ``"producer": "llmsched"``, then the time unit)."""
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"producer": "llmsched", **other, "time_unit": "microseconds, rounded to the nearest"},
    }


def one_engine_trace(workload: Any, events: list[dict[str, Any]], other: dict[str, Any]) -> dict[str, Any]:
    """The trace of one engine's schedule of ``workload``: process :data:`PID`, named
    ``llmsched: <workload name>``, holding ``events`` (the engine's tracks), then the
    arrivals (:func:`arrival_events`); ``other`` under ``otherData``.

    Raises
    ------
    ValueError
        If an arrival time is not finite.
    """
    events = [*process_events(PID, f"llmsched: {workload.name}"), *events]
    events += arrival_events(workload.arrival, PID)
    return trace_object(events, other)


def mode_figures(schedule: Any, **figures: Any) -> dict[str, Any]:
    """A trace's ``otherData`` of ``schedule``: its ``mode``, ``workload`` (name) and
    ``requests`` (user requests: a preempted request's pieces count once), then ``figures``,
    then ``makespan_s``."""
    workload = schedule.workload
    return {
        "mode": schedule.mode,
        "workload": workload.name,
        # A schedule's user requests (every schedule class has them); a bare run its workload's.
        "requests": len(getattr(schedule, "requests", workload)),
        **figures,
        "makespan_s": schedule.makespan,
    }


def write_chrome_trace(schedule: Exportable, path: Any) -> dict[str, Any]:
    """Write ``schedule.chrome_trace()`` to ``path`` as JSON and return it.

    Raises
    ------
    TypeError, ValueError
        A path that cannot be written (see :func:`check_output_path`), checked before the
        trace is built; a time that is not finite.
    """
    target = check_output_path(path, "trace path", "trace.json")
    trace = schedule.chrome_trace()
    write_text(target, "trace path", json.dumps(trace, separators=(",", ":"), allow_nan=False))
    return trace


def csv_text(frame: pd.DataFrame) -> str:
    """``frame`` with its index as the first column; floats as Python writes them, NaN empty."""
    index_name = frame.index.name or "index"
    columns = [[index_name, *frame.index.tolist()]]
    for name in frame.columns:
        values = frame[name].tolist()
        if frame[name].dtype.kind == "f":
            values = ["" if math.isnan(v) else v for v in values]
        columns.append([name, *values])
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(zip(*columns, strict=True))
    return out.getvalue()


def write_requests_csv(
    schedule: Exportable, path: Any = None, slo_ttft: float | None = None, slo_tbt: float | None = None
) -> str | None:
    """Write ``schedule.request_frame`` as CSV to ``path``; without a path, return the text.

    The first column is ``request`` (the workload's index); ``meets_slo`` is judged against
    ``slo_ttft`` and ``slo_tbt`` (seconds; None: no target).

    Raises
    ------
    TypeError, ValueError
        A path that cannot be written (checked before any work), or a bad target.
    """
    target = None if path is None else check_output_path(path, "requests CSV path", "requests.csv")
    text = csv_text(schedule.request_frame(slo_ttft=slo_ttft, slo_tbt=slo_tbt))
    if target is None:
        return text
    write_text(target, "requests CSV path", text)
    return None


def write_stages_csv(schedule: Exportable, path: Any = None) -> str | None:
    """Write ``schedule.stage_frame()`` as CSV to ``path``; without a path, return the text.

    The first column is ``stage`` (the row's index).

    Raises
    ------
    TypeError, ValueError
        A path that cannot be written, checked before any work.
    """
    target = None if path is None else check_output_path(path, "stages CSV path", "stages.csv")
    text = csv_text(schedule.stage_frame())
    if target is None:
        return text
    write_text(target, "stages CSV path", text)
    return None
