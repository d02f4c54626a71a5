"""A fleet's :class:`~llmsched.FleetSchedule` as a Chrome trace.

The conventions every mode keeps are in :mod:`llmsched.core.export`; a fleet's trace is:

* a process per engine ``k`` (pid ``k + 1``), ``llmsched: <workload name>: <engine label>``,
  laid out as that engine's own trace (:mod:`llmsched.engines.competition.export`,
  :mod:`llmsched.engines.fusion.export`): an ``engine`` track with its stages or runs, a
  ``client J`` track per client with each request's slices; requests are named by their
  index in the fleet's workload (``prefill r123`` is request 123 of the fleet, whichever
  engine ran it);
* each backoff pull as a flow ``pull`` (id: the request) from the engine track of the engine
  the request arrived at, at its arrival, to the request's first slice on the engine that
  pulled it; ``args`` hold the ``request``, the engines (``from``, ``to``) and ``reached``
  (when it reached the engine that pulled it, in seconds);
* each request's arrival as an instant ``arrive r123`` on the engine track of the engine it
  was routed to (the one it was later pulled from, if it was), when the workload has
  arrivals;
* ``otherData``: ``mode`` (``fleet``), the workload, ``requests``, ``engines``, ``router``,
  ``pulled`` and ``makespan_s``.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from llmsched.core.export import (
    ENGINE_TID,
    arrival_events,
    flow_events,
    microseconds,
    mode_figures,
    process_events,
    trace_object,
)
from llmsched.engines.competition import export as competition_export
from llmsched.engines.competition.schedule import Schedule
from llmsched.engines.fusion import export as fusion_export
from llmsched.engines.fusion.schedule import FusedSchedule

if TYPE_CHECKING:
    from llmsched.fleet.schedule import FleetSchedule

__all__ = ["chrome_trace", "engine_pid"]

# The module that lays out each kind of engine's tracks (its engine_events and request_slices).
_ENGINE_EXPORTS: tuple[tuple[type, ModuleType], ...] = (
    (Schedule, competition_export),
    (FusedSchedule, fusion_export),
)


def engine_pid(engine: Any) -> Any:
    """The trace's process id of engine ``engine`` (``engine + 1``: pid 0 is avoided)."""
    return engine + 1


def _layout(schedule: Any, k: int) -> ModuleType:
    for kind, module in _ENGINE_EXPORTS:
        if isinstance(schedule, kind):
            return module
    raise TypeError(
        f"engine {k}'s schedule is a {type(schedule).__name__}: a fleet's trace shows only "
        "Schedule and FusedSchedule engines"
    )


def chrome_trace(fleet: FleetSchedule) -> dict[str, Any]:
    """The fleet's run as a Trace Event Format object (see the module docstring).

    Returns
    -------
    dict
        ``traceEvents`` (each engine's process, the pulls' flows, the arrivals),
        ``displayTimeUnit`` and ``otherData``; ``json.dump`` writes it as it is.

    Raises
    ------
    TypeError
        If an engine's schedule is of a kind a fleet does not run.
    ValueError
        If a time is not finite.
    """
    n, name = len(fleet.workload), fleet.workload.name
    engine, index = fleet.request_engine, fleet.request_index
    # Where each request's first slice is on the engine that ran it.
    first_tid = np.zeros(n, dtype=np.int64)
    first_ts = np.zeros(n, dtype=np.int64)
    events: list[dict[str, Any]] = []
    for k, (spec, schedule) in enumerate(zip(fleet.engines, fleet.schedules, strict=True)):
        layout = _layout(schedule, k)
        mine = np.flatnonzero(engine == k)
        requests = np.empty(len(schedule.requests), dtype=np.int64)
        requests[index[mine]] = mine  # the fleet's index of each of the engine's requests
        first = index[mine]
        if schedule.request_parent is not None:  # pieces: each named by its request
            requests, first = requests[schedule.request_parent], schedule.first_piece[first]
        pid = engine_pid(k)
        events += process_events(pid, f"llmsched: {name}: {spec.label(k)}", k)
        events += layout.engine_events(schedule, pid, requests)
        tid, ts = layout.request_slices(schedule)
        first_tid[mine], first_ts[mine] = tid[first], ts[first]

    arrived = np.where(fleet.request_pulled_from >= 0, fleet.request_pulled_from, engine)
    arrival_ts = microseconds(fleet.workload.arrival, "arrival")
    for i in np.flatnonzero(fleet.request_pulled_from >= 0).tolist():
        source = (int(engine_pid(arrived[i])), ENGINE_TID, int(arrival_ts[i]))
        target = (int(engine_pid(engine[i])), int(first_tid[i]), int(first_ts[i]))
        args = {
            "request": i,
            "from": int(arrived[i]),
            "to": int(engine[i]),
            "reached": float(fleet.request_reached[i]),
        }
        events += flow_events("pull", i, source, target, args)
    # A request the fleet's admission turned away reached no engine: it has no track to arrive on.
    served = np.flatnonzero(~fleet.rejected)
    events += arrival_events(fleet.workload.arrival[served], engine_pid(arrived[served]), served)
    figures = {"engines": len(fleet.engines), "router": fleet.router, "pulled": fleet.pulled}
    return trace_object(events, mode_figures(fleet, **figures, rejected=int(fleet.rejected.sum())))
