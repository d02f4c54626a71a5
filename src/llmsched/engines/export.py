"""Schedules to files other tools read: a Chrome trace, and CSVs of requests and stages.

Chrome trace (Trace Event Format JSON, opened by https://ui.perfetto.dev and chrome://tracing):

* one process, ``llmsched: <workload name>`` (pid 1), holding one track (thread) per client
  that did work, named ``client J`` (tid ``J + 2``), and an ``engine`` track (tid 1) above them;
* on the engine track, one complete event (``"ph": "X"``) per stage, named ``prefill`` or
  ``decode``; its ``args`` hold the ``stage`` index and, for a prefill stage, its prompt
  ``tokens`` and ``requests``, for a decode stage its ``iterations``, ``first_iteration``
  and the output ``tokens`` decoded in it;
* on a client's track, one complete event per segment of :meth:`Schedule.segments`: its
  prefill (``prefill r123``) and its share of each decode stage it decoded in
  (``decode r123``), with ``args`` holding ``request``, ``stage`` and ``tokens``;
* ``ts`` and ``dur`` in integer microseconds: ``ts = round(start * 1e6)`` and
  ``dur = round(end * 1e6) - ts``, so each end is within 0.5 µs of the schedule's and
  slices that abut in the schedule abut in the trace; ``displayTimeUnit`` is ``"ms"``;
* process and thread names and the order of the tracks as metadata events
  (``"ph": "M"``), and the run's headline figures under ``otherData``.

CSVs: :func:`write_requests_csv` writes :meth:`Schedule.request_frame` (one row per request,
serving metrics included) and :func:`write_stages_csv` :meth:`Schedule.stage_frame` (one row
per stage), each with its index (``request``, ``stage``) as the first column, floats in
Python's shortest round-trip form and NaN as an empty field (what ``pandas.read_csv`` reads
back as NaN).

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
from typing import TYPE_CHECKING, Any

import numpy as np

from llmsched.core.checks import path_arg

if TYPE_CHECKING:
    import pandas as pd

    from llmsched.engines.competition.schedule import Schedule

__all__ = [
    "ENGINE_TID",
    "PID",
    "check_output_path",
    "chrome_trace",
    "client_tid",
    "write_chrome_trace",
    "write_requests_csv",
    "write_stages_csv",
]

# Where the trace puts things: one process; the engine's track first, then client J's.
PID = 1
ENGINE_TID = 1

# The stage kinds of llmsched.engines.competition.schedule (PREFILL, DECODE), not imported from there: the
# schedule imports this module to export itself.
_PREFILL = 0
_DECODE = 1


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


def _write_text(target: Path, name: str, text: str) -> None:
    try:
        with open(target, "w", encoding="utf-8", newline="") as out:
            out.write(text)
    except OSError as exc:
        raise ValueError(f"{name} {str(target)!r}: cannot write ({exc.strerror or exc})") from None


def _microseconds(seconds: np.ndarray, what: str) -> np.ndarray:
    if seconds.size and not np.isfinite(seconds).all():
        raise ValueError(f"cannot export a trace: a {what} time is not finite")
    return np.rint(seconds * 1e6).astype(np.int64)


def chrome_trace(schedule: Schedule) -> dict[str, Any]:
    """The schedule as a Trace Event Format object (see the module docstring).

    Returns
    -------
    dict
        ``traceEvents`` (metadata events first, then the engine's stages in time order,
        then each client's segments in time order), ``displayTimeUnit`` and ``otherData``;
        ``json.dump`` writes it as it is.

    Raises
    ------
    ValueError
        If a stage or segment time is not finite.
    """
    n_stages = schedule.num_stages
    seg = schedule.segments()
    stage_ts = _microseconds(schedule.stage_start, "stage")
    stage_dur = _microseconds(schedule.stage_end, "stage") - stage_ts
    seg_ts = _microseconds(seg["start"], "segment")
    seg_dur = _microseconds(seg["end"], "segment") - seg_ts
    # Per stage: tokens (prompt tokens of a prefill, decoded tokens of a decode) and requests.
    stage_tokens = np.bincount(seg["stage"], weights=seg["tokens"], minlength=n_stages).astype(np.int64)
    stage_requests = np.bincount(seg["stage"], minlength=n_stages)

    events: list[dict[str, Any]] = [
        {
            "name": "process_name",
            "ph": "M",
            "pid": PID,
            "args": {"name": f"llmsched: {schedule.workload.name}"},
        },
        {"name": "thread_name", "ph": "M", "pid": PID, "tid": ENGINE_TID, "args": {"name": "engine"}},
        {"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": ENGINE_TID, "args": {"sort_index": 0}},
    ]
    for client in np.unique(seg["client"]).tolist():
        tid = client_tid(client)
        events.append(
            {"name": "thread_name", "ph": "M", "pid": PID, "tid": tid, "args": {"name": f"client {client}"}}
        )
        events.append(
            {
                "name": "thread_sort_index",
                "ph": "M",
                "pid": PID,
                "tid": tid,
                "args": {"sort_index": client + 1},
            }
        )

    kinds = schedule.stage_kind.tolist()
    firsts = schedule.stage_first_iteration.tolist()
    iterations = schedule.stage_iterations.tolist()
    for stage, (kind, ts, dur, tokens, requests) in enumerate(
        zip(
            kinds,
            stage_ts.tolist(),
            stage_dur.tolist(),
            stage_tokens.tolist(),
            stage_requests.tolist(),
            strict=True,
        )
    ):
        if kind == _PREFILL:
            name, args = "prefill", {"stage": stage, "tokens": tokens, "requests": requests}
        else:
            name = "decode" if kind == _DECODE else f"stage kind {kind}"
            args = {
                "stage": stage,
                "iterations": iterations[stage],
                "first_iteration": firsts[stage],
                "tokens": tokens,
            }
        events.append(
            {
                "name": name,
                "cat": "stage",
                "ph": "X",
                "ts": ts,
                "dur": dur,
                "pid": PID,
                "tid": ENGINE_TID,
                "args": args,
            }
        )

    order = np.lexsort((seg_ts, seg["client"]))
    kind_names = np.where(seg["kind"][order] == _PREFILL, "prefill", "decode").tolist()
    columns = zip(
        kind_names,
        seg["request"][order].tolist(),
        seg["client"][order].tolist(),
        seg["stage"][order].tolist(),
        seg["tokens"][order].tolist(),
        seg_ts[order].tolist(),
        seg_dur[order].tolist(),
        strict=True,
    )
    events.extend(
        {
            "name": f"{kind} r{request}",
            "cat": kind,
            "ph": "X",
            "ts": ts,
            "dur": dur,
            "pid": PID,
            "tid": client_tid(client),
            "args": {"request": request, "stage": stage, "tokens": tokens},
        }
        for kind, request, client, stage, tokens, ts, dur in columns
    )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "producer": "llmsched",
            "workload": schedule.workload.name,
            "requests": len(schedule.workload),
            "clients": schedule.clients,
            "stages": n_stages,
            "makespan_s": schedule.makespan,
            "measured": schedule.measured,
            "time_unit": "microseconds, rounded to the nearest",
        },
    }


def write_chrome_trace(schedule: Schedule, path: Any) -> dict[str, Any]:
    """Write :func:`chrome_trace` of ``schedule`` to ``path`` as JSON and return it.

    Raises
    ------
    TypeError, ValueError
        A path that cannot be written (see :func:`check_output_path`), checked before the
        trace is built; a stage or segment time that is not finite.
    """
    target = check_output_path(path, "trace path", "trace.json")
    trace = chrome_trace(schedule)
    _write_text(target, "trace path", json.dumps(trace, separators=(",", ":"), allow_nan=False))
    return trace


def _csv_text(frame: pd.DataFrame) -> str:
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
    schedule: Schedule, path: Any = None, slo_ttft: float | None = None, slo_tbt: float | None = None
) -> str | None:
    """Write :meth:`Schedule.request_frame` as CSV to ``path``; without a path, return the text.

    The first column is ``request`` (the workload's index); ``meets_slo`` is judged against
    ``slo_ttft`` and ``slo_tbt`` (seconds; None: no target).

    Raises
    ------
    TypeError, ValueError
        A path that cannot be written (checked before any work), or a bad target.
    """
    target = None if path is None else check_output_path(path, "requests CSV path", "requests.csv")
    text = _csv_text(schedule.request_frame(slo_ttft=slo_ttft, slo_tbt=slo_tbt))
    if target is None:
        return text
    _write_text(target, "requests CSV path", text)
    return None


def write_stages_csv(schedule: Schedule, path: Any = None) -> str | None:
    """Write :meth:`Schedule.stage_frame` as CSV to ``path``; without a path, return the text.

    The first column is ``stage`` (its index in time order).

    Raises
    ------
    TypeError, ValueError
        A path that cannot be written, checked before any work.
    """
    target = None if path is None else check_output_path(path, "stages CSV path", "stages.csv")
    text = _csv_text(schedule.stage_frame())
    if target is None:
        return text
    _write_text(target, "stages CSV path", text)
    return None
