"""A fused engine's :class:`~llmsched.FusedSchedule` as a Chrome trace.

The conventions every mode keeps are in :mod:`llmsched.core.export`; a fused trace is laid out
as a competition one (:mod:`llmsched.engines.competition.export`), with runs for stages:

* one process, ``llmsched: <workload name>`` (pid 1): an ``engine`` track (tid 1) and a
  ``client J`` track (tid ``J + 2``) per client that did work;
* on the engine track, one complete event per run of iterations, named by its kind
  (``prefill``: chunks alone, ``decode``: decoding alone, ``fused``: both), category
  ``stage``, its ``args`` holding the ``stage`` (the run's index), ``iterations``,
  ``first_iteration``, ``decoding`` (requests), ``chunk_tokens``, ``tokens`` (chunk tokens
  plus decoded tokens) and ``requests``;
* on a client's track, one complete event per chunk of a request's prompt
  (``prefill r123``: ``request``, ``stage`` = the run holding it, ``tokens`` = the chunk's),
  then one for its whole decode (``decode r123``: from the start of its first decode
  iteration to its last token; ``request``, ``first_iteration``, ``tokens`` decoded). A
  request decodes in every iteration from its first token on, so its decode is one stretch;
  cutting it at every run would grow the trace with requests times runs; the pieces of a
  request preempted by recompute (``FusedSchedule.request_parent``) are named by their user
  request, whose arrival is shown once;
* each request's arrival as an instant ``arrive r123`` on the engine track, when the workload
  has arrivals;
* ``otherData``: ``mode`` (``fusion``), the workload, ``requests``, ``clients``,
  ``token_budget``, ``stages`` (runs) and ``makespan_s``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from llmsched.core.export import (
    ENGINE_TID,
    PID,
    client_tid,
    complete_event,
    engine_tracks,
    microseconds,
    mode_figures,
    one_engine_trace,
)

if TYPE_CHECKING:
    from llmsched.engines.fusion.schedule import FusedSchedule

__all__ = ["chrome_trace", "engine_events", "request_slices"]


def engine_events(
    schedule: FusedSchedule, pid: int = PID, requests: np.ndarray | None = None
) -> list[dict[str, Any]]:
    """The engine's tracks as process ``pid``: their metadata, the runs in time order on
    the engine track, then each client's chunks and decodes in time order (the module
    docstring's layout, without the process name and the arrivals).

    ``requests`` names the schedule's requests in the trace (``requests[j]`` for request
    ``j``; None: ``j``), as a fleet names them by their index in its workload.

    Raises
    ------
    ValueError
        If a run, chunk or decode time is not finite.
    """
    s = schedule
    names = np.arange(len(s.workload)) if requests is None else np.asarray(requests)
    run_ts = microseconds(s.run_start, "run")
    run_dur = microseconds(s.run_end, "run") - run_ts
    decode_lo, decode_hi = s.request_decode_start, s.request_decode_end
    # A request that decodes nothing here reads as decoding in its last chunk's iteration.
    decoded = decode_hi > decode_lo
    decode_ts = microseconds(s.iteration_start_at(np.where(decoded, decode_lo, decode_lo - 1)), "decode")
    decode_dur = microseconds(s.finish, "decode") - decode_ts

    events = engine_tracks(pid, s.request_client)

    columns = zip(
        s.run_kind.tolist(),
        run_ts.tolist(),
        run_dur.tolist(),
        s.run_iterations.tolist(),
        s.run_first_iteration.tolist(),
        s.run_decoding.tolist(),
        s.run_chunk_tokens.tolist(),
        (s.run_chunk_tokens + s.run_decoding * s.run_iterations).tolist(),
        (s.run_decoding + s.run_chunks).tolist(),
        strict=True,
    )
    for run, (kind, ts, dur, iterations, first, decoding, chunk_tokens, tokens, count) in enumerate(columns):
        args = {
            "stage": run,
            "iterations": iterations,
            "first_iteration": first,
            "decoding": decoding,
            "chunk_tokens": chunk_tokens,
            "tokens": tokens,
            "requests": count,
        }
        events.append(complete_event(kind, "stage", ts, dur, pid, ENGINE_TID, args))

    # Every chunk, then every decode, as one table sorted by client and start (a request that
    # decodes nothing here, its prompt's keys and values leaving for another machine, has none).
    k = s.chunk_run.size
    decoding = np.flatnonzero(decode_hi > decode_lo)
    request = np.concatenate([s.chunk_request, decoding])
    client = s.request_client[request]
    ts = np.concatenate([run_ts[s.chunk_run], decode_ts[decoding]])
    dur = np.concatenate([run_dur[s.chunk_run], decode_dur[decoding]])
    at = np.concatenate([s.chunk_run, decode_lo[decoding]])  # a chunk's run, a decode's first iteration
    tokens = np.concatenate([s.chunk_tokens, (decode_hi - decode_lo - s.request_sat_out)[decoding]])
    order = np.lexsort((ts, client))
    for is_chunk, who, on, start, length, where, count in zip(
        (order < k).tolist(),
        names[request[order]].tolist(),
        client[order].tolist(),
        ts[order].tolist(),
        dur[order].tolist(),
        at[order].tolist(),
        tokens[order].tolist(),
        strict=True,
    ):
        if is_chunk:
            kind, args = "prefill", {"request": who, "stage": where, "tokens": count}
        else:
            kind, args = "decode", {"request": who, "first_iteration": where, "tokens": count}
        events.append(complete_event(f"{kind} r{who}", kind, start, length, pid, client_tid(on), args))
    return events


def request_slices(schedule: FusedSchedule) -> tuple[np.ndarray, np.ndarray]:
    """Where each request's first slice is: the track (tid) and start (µs) of its first chunk,
    or of its decode for a request prefilled elsewhere (it has no chunk here)."""
    s = schedule
    first = np.full(len(s.workload), s.num_runs, dtype=np.int64)
    np.minimum.at(first, s.chunk_request, s.chunk_run)
    start = np.where(first < s.num_runs, s.run_start[np.minimum(first, max(s.num_runs - 1, 0))], np.nan)
    unchunked = (first >= s.num_runs) & (s.request_decode_end > s.request_decode_start)
    if unchunked.any():
        start[unchunked] = s.iteration_start_at(s.request_decode_start[unchunked])
    return s.request_client + client_tid(0), microseconds(start, "chunk")


def chrome_trace(schedule: FusedSchedule) -> dict[str, Any]:
    """The schedule as a Trace Event Format object (see the module docstring).

    Returns
    -------
    dict
        ``traceEvents`` (metadata, the runs, each client's slices, the arrivals),
        ``displayTimeUnit`` and ``otherData``; ``json.dump`` writes it as it is.

    Raises
    ------
    ValueError
        If a time is not finite.
    """
    # A preempted request's pieces are named by their user request, which arrives once.
    return one_engine_trace(
        schedule.requests,
        engine_events(schedule, requests=schedule.request_parent),
        mode_figures(
            schedule, clients=schedule.clients, token_budget=schedule.token_budget, stages=schedule.num_runs
        ),
    )
