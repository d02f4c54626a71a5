"""A disaggregated cluster's :class:`~llmsched.DisaggregatedSchedule` as a Chrome trace.

The conventions every mode keeps are in :mod:`llmsched.core.export`; a cluster's trace is:

* a process per machine ``m`` (pid ``m + 1``), ``llmsched: <workload name>: prompt machine m``
  or ``... token machine m`` (numbered as the cluster numbers them, prompt machines first);
* on each machine's ``engine`` track (tid 1), one complete event (category ``stage``) per
  prefill stage it ran (``prefill``; ``args``: ``stage``, the prompt ``tokens`` and
  ``requests``) and per decode run (``decode``; ``args``: ``stage`` = its row in
  :meth:`~llmsched.DisaggregatedSchedule.stage_frame`, ``run``, ``iterations``,
  ``first_iteration``, ``active`` requests and the ``tokens`` decoded);
* a prefill stage batches several requests on a machine that has no client for them, so each
  request's prefill (``prefill r123``; ``args``: ``request``, ``stage``, ``tokens``) is on a
  track ``prefill slot K`` of the machine that ran it, ``K`` its place among the stage's
  requests (tid ``token_clients + 2 + K``);
* each request's decode (``decode r123``; ``args``: ``request``, ``first_iteration``,
  ``tokens``), from the start of its first decode iteration to its last token, on the track
  ``client J`` (tid ``J + 2``) of its token machine: a token machine's runs follow one
  another while a request decodes, so its decode is one stretch;
* each request's KV transfer as a flow ``KV transfer`` (id: the request) from its prefill
  slice to its decode slice, ``args`` holding the ``request`` and the transfer's ``seconds``
  (from the prefill's end to the keys' and values' arrival; 0 on the machine that prefilled);
* each request's arrival as an instant ``arrive r123`` on the engine track of the machine
  that prefilled it, when the workload has arrivals;
* ``otherData``: ``mode`` (``disaggregated``), the workload, ``requests``, the pools,
  ``token_clients``, ``stages`` (prefill stages), ``runs`` and ``makespan_s``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from llmsched.core.export import (
    ENGINE_TID,
    arrival_events,
    client_tid,
    complete_event,
    engine_tracks,
    flow_events,
    microseconds,
    mode_figures,
    process_events,
    thread_events,
    trace_object,
)

if TYPE_CHECKING:
    from llmsched.engines.disaggregation.schedule import DisaggregatedSchedule

__all__ = ["chrome_trace", "machine_pid", "prefill_slots", "slot_tid"]


def machine_pid(machine: Any) -> Any:
    """The trace's process id of a machine (``machine + 1``: pid 0 is avoided)."""
    return machine + 1


def slot_tid(schedule: DisaggregatedSchedule, slot: Any) -> Any:
    """The trace's thread id of prefill slot ``slot`` on any machine: after the clients'."""
    return client_tid(schedule.cluster.token_clients) + slot


def prefill_slots(schedule: DisaggregatedSchedule) -> np.ndarray:
    """Each request's place among the requests of its prefill stage (0, 1, ... in request order)."""
    stage = schedule.request_stage
    order = np.argsort(stage, kind="stable")
    first = np.searchsorted(stage[order], stage[order], side="left")
    slots = np.empty(stage.size, dtype=np.int64)
    slots[order] = np.arange(stage.size) - first
    return slots


def chrome_trace(schedule: DisaggregatedSchedule) -> dict[str, Any]:
    """The schedule as a Trace Event Format object (see the module docstring).

    Returns
    -------
    dict
        ``traceEvents`` (each machine's metadata, the stages and runs, the prefills, the
        decodes, the transfers' flows, the arrivals), ``displayTimeUnit`` and ``otherData``;
        ``json.dump`` writes it as it is.

    Raises
    ------
    ValueError
        If a time is not finite.
    """
    s, c = schedule, schedule.cluster
    n, stages = len(s.workload), s.stage_start.size
    name = s.workload.name
    requests = np.arange(n)
    prompt = s.workload.prompt_tokens

    # Where each request's two slices are: its prefill on its stage's machine, its decode on
    # its token machine.
    prefill_machine = s.stage_machine[s.request_stage]
    slot = prefill_slots(s)
    stage_ts = microseconds(s.stage_start, "stage")
    stage_dur = microseconds(s.stage_end, "stage") - stage_ts
    run_ts = microseconds(s.run_start, "run")
    run_dur = microseconds(s.run_end, "run") - run_ts
    decode_ts = microseconds(s.decode_begin, "decode")
    decode_dur = microseconds(s.finish, "decode") - decode_ts

    events: list[dict[str, Any]] = []
    for m in range(c.machines):
        pool = "prompt" if m < c.prompt_machines else "token"
        pid = machine_pid(m)
        events += process_events(pid, f"llmsched: {name}: {pool} machine {m}", m)
        events += engine_tracks(pid, s.request_client[s.request_machine == m])
        for k in np.unique(slot[prefill_machine == m]).tolist():
            events += thread_events(pid, slot_tid(s, k), f"prefill slot {k}", c.token_clients + 1 + k)

    # The machines' own tracks: stages and runs, each machine's in time order.
    stage_tokens = np.zeros(stages, dtype=np.int64)
    np.add.at(stage_tokens, s.request_stage, prompt)
    stage_requests = np.bincount(s.request_stage, minlength=stages)[:stages]
    for k in np.lexsort((stage_ts, s.stage_machine)).tolist():
        args = {"stage": k, "tokens": int(stage_tokens[k]), "requests": int(stage_requests[k])}
        pid = machine_pid(int(s.stage_machine[k]))
        events.append(
            complete_event("prefill", "stage", int(stage_ts[k]), int(stage_dur[k]), pid, ENGINE_TID, args)
        )
    for r in np.lexsort((run_ts, s.run_machine)).tolist():
        args = {
            "stage": stages + r,
            "run": r,
            "iterations": int(s.run_iterations[r]),
            "first_iteration": int(s.run_first_iteration[r]),
            "active": int(s.run_active[r]),
            "tokens": int(s.run_active[r] * s.run_iterations[r]),
        }
        pid = machine_pid(int(s.run_machine[r]))
        events.append(
            complete_event("decode", "stage", int(run_ts[r]), int(run_dur[r]), pid, ENGINE_TID, args)
        )

    # Each request's prefill on its slot, then its decode on its client.
    prefill_ts = stage_ts[s.request_stage]
    prefill_tid = slot_tid(s, slot)
    for i in np.lexsort((prefill_ts, slot, prefill_machine)).tolist():
        args = {"request": i, "stage": int(s.request_stage[i]), "tokens": int(prompt[i])}
        events.append(
            complete_event(
                f"prefill r{i}",
                "prefill",
                int(prefill_ts[i]),
                int(stage_dur[s.request_stage[i]]),
                int(machine_pid(prefill_machine[i])),
                int(prefill_tid[i]),
                args,
            )
        )
    decoded = s.request_decode_end - s.request_decode_start
    for i in np.lexsort((decode_ts, s.request_client, s.request_machine)).tolist():
        args = {"request": i, "first_iteration": int(s.request_decode_start[i]), "tokens": int(decoded[i])}
        events.append(
            complete_event(
                f"decode r{i}",
                "decode",
                int(decode_ts[i]),
                int(decode_dur[i]),
                int(machine_pid(s.request_machine[i])),
                client_tid(int(s.request_client[i])),
                args,
            )
        )

    # Each transfer: from the prefill slice to the decode slice.
    for i, seconds in zip(requests.tolist(), s.transfer_time.tolist(), strict=True):
        source = (int(machine_pid(prefill_machine[i])), int(prefill_tid[i]), int(prefill_ts[i]))
        target = (
            int(machine_pid(s.request_machine[i])),
            client_tid(int(s.request_client[i])),
            int(decode_ts[i]),
        )
        events += flow_events("KV transfer", i, source, target, {"request": i, "seconds": seconds})

    events += arrival_events(s.workload.arrival, machine_pid(prefill_machine))
    return trace_object(
        events,
        mode_figures(
            s,
            prompt_machines=c.prompt_machines,
            token_machines=c.token_machines,
            token_clients=c.token_clients,
            stages=int(stages),
            runs=int(s.run_start.size),
        ),
    )
