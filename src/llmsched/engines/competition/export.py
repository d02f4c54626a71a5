"""A competition engine's :class:`~llmsched.Schedule` as a Chrome trace; the CSV writers.

The conventions every mode keeps are in :mod:`llmsched.core.export`; a competition trace is:

* one process, ``llmsched: <workload name>`` (pid 1), holding one track (thread) per client
  that did work, named ``client J`` (tid ``J + 2``), and an ``engine`` track (tid 1) above them;
* on the engine track, one complete event (``"ph": "X"``) per stage, named ``prefill`` or
  ``decode``; its ``args`` hold the ``stage`` index and, for a prefill stage, its prompt
  ``tokens`` and ``requests``, for a decode stage its ``iterations``, ``first_iteration``
  and the output ``tokens`` decoded in it;
* on a client's track, one complete event per segment of :meth:`Schedule.segments`: its
  prefill (``prefill r123``) and its share of each decode stage it decoded in
  (``decode r123``), with ``args`` holding ``request``, ``stage`` and ``tokens``; the pieces
  of a request preempted by recompute (``Schedule.request_parent``) are named by their user
  request, whose arrival is shown once;
* ``ts`` and ``dur`` in integer microseconds (:func:`llmsched.core.export.microseconds`);
* each request's arrival as an instant ``arrive r123`` on the engine track, when the workload
  has arrivals (none for a closed batch);
* process and thread names and the order of the tracks as metadata events
  (``"ph": "M"``), and the run's headline figures under ``otherData``.

CSVs: :func:`write_requests_csv` writes :meth:`Schedule.request_frame` (one row per request)
and :func:`write_stages_csv` :meth:`Schedule.stage_frame` (one row per stage); see
:mod:`llmsched.core.export`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from llmsched.core.export import (
    ENGINE_TID,
    PID,
    check_output_path,
    client_tid,
    complete_event,
    engine_tracks,
    microseconds,
    one_engine_trace,
    write_chrome_trace,
    write_requests_csv,
    write_stages_csv,
)
from llmsched.core.schedule import DECODE, PREFILL

if TYPE_CHECKING:
    from llmsched.engines.competition.schedule import Schedule

__all__ = [
    "ENGINE_TID",
    "PID",
    "check_output_path",
    "chrome_trace",
    "client_tid",
    "engine_events",
    "request_slices",
    "write_chrome_trace",
    "write_requests_csv",
    "write_stages_csv",
]


def engine_events(
    schedule: Schedule, pid: int = PID, requests: np.ndarray | None = None
) -> list[dict[str, Any]]:
    """The engine's tracks as process ``pid``: their metadata, the engine's stages in time
    order, then each client's segments in time order (the module docstring's layout, without
    the process name and the arrivals).

    Parameters
    ----------
    schedule
        The engine's schedule.
    pid
        The process the engine is.
    requests
        The name of each of the schedule's requests in the trace (``requests[j]`` for its
        request ``j``; a fleet names them by their index in its workload); None: ``j``.

    Raises
    ------
    ValueError
        If a stage or segment time is not finite.
    """
    n_stages = schedule.num_stages
    seg = schedule.segments()
    stage_ts = microseconds(schedule.stage_start, "stage")
    stage_dur = microseconds(schedule.stage_end, "stage") - stage_ts
    seg_ts = microseconds(seg["start"], "segment")
    seg_dur = microseconds(seg["end"], "segment") - seg_ts
    # Per stage: tokens (prompt tokens of a prefill, decoded tokens of a decode) and requests.
    stage_tokens = np.bincount(seg["stage"], weights=seg["tokens"], minlength=n_stages).astype(np.int64)
    stage_requests = np.bincount(seg["stage"], minlength=n_stages)

    events = engine_tracks(pid, seg["client"])

    kinds = schedule.stage_kind.tolist()
    firsts = schedule.stage_first_iteration.tolist()
    iterations = schedule.stage_iterations.tolist()
    for stage, (kind, ts, dur, tokens, count) in enumerate(
        zip(
            kinds,
            stage_ts.tolist(),
            stage_dur.tolist(),
            stage_tokens.tolist(),
            stage_requests.tolist(),
            strict=True,
        )
    ):
        if kind == PREFILL:
            name, args = "prefill", {"stage": stage, "tokens": tokens, "requests": count}
        else:
            name = "decode" if kind == DECODE else f"stage kind {kind}"
            args = {
                "stage": stage,
                "iterations": iterations[stage],
                "first_iteration": firsts[stage],
                "tokens": tokens,
            }
        events.append(complete_event(name, "stage", ts, dur, pid, ENGINE_TID, args))

    order = np.lexsort((seg_ts, seg["client"]))
    kind_names = np.where(seg["kind"][order] == PREFILL, "prefill", "decode").tolist()
    named = seg["request"][order] if requests is None else np.asarray(requests)[seg["request"][order]]
    columns = zip(
        kind_names,
        named.tolist(),
        seg["client"][order].tolist(),
        seg["stage"][order].tolist(),
        seg["tokens"][order].tolist(),
        seg_ts[order].tolist(),
        seg_dur[order].tolist(),
        strict=True,
    )
    events.extend(
        complete_event(
            f"{kind} r{request}",
            kind,
            ts,
            dur,
            pid,
            client_tid(client),
            {"request": request, "stage": stage, "tokens": tokens},
        )
        for kind, request, client, stage, tokens, ts, dur in columns
    )
    return events


def request_slices(schedule: Schedule) -> tuple[np.ndarray, np.ndarray]:
    """Where each request's first slice is: the track (tid) and start (µs) of its prefill."""
    start = schedule.stage_start[schedule.request_prefill_stage]
    return schedule.request_client + client_tid(0), microseconds(start, "stage")


def chrome_trace(schedule: Schedule) -> dict[str, Any]:
    """The schedule as a Trace Event Format object (see the module docstring).

    Returns
    -------
    dict
        ``traceEvents`` (metadata events first, then the engine's stages in time order,
        then each client's segments in time order, then the arrivals), ``displayTimeUnit``
        and ``otherData``; ``json.dump`` writes it as it is.

    Raises
    ------
    ValueError
        If a stage or segment time is not finite.
    """
    # A preempted request's pieces are named by their user request, which arrives once.
    return one_engine_trace(
        schedule.requests,
        engine_events(schedule, requests=schedule.request_parent),
        {
            "workload": schedule.workload.name,
            "requests": len(schedule.requests),
            "clients": schedule.clients,
            "stages": schedule.num_stages,
            "makespan_s": schedule.makespan,
            "measured": schedule.measured,
        },
    )
