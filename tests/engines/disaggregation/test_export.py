"""Chrome traces and CSVs of disaggregated schedules: the written trace, loaded back, against the
schedule (a process per machine, every request's prefill and decode, every transfer a flow)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import llmsched.engines.disaggregation.export as export
from llmsched import DisaggregatedSchedule, LinearCostModel, Workload, simulate_disaggregated, workloads
from llmsched.core.export import ENGINE_TID, client_tid
from tests import traces
from tests.engines.disaggregation.test_schedule import _valid
from tests.fleet.test_disaggregated import _cluster

PAPER = LinearCostModel.paper()


def _elapsed(s: DisaggregatedSchedule, run: Any, k: Any) -> np.ndarray:
    """Seconds of the first ``k`` iterations of ``run`` (an arithmetic series, summed in the
    schedule's order of operations, so that times agree to the last bit)."""
    k = np.asarray(k, dtype=np.float64)
    return k * s.run_first_time[run] + s.run_step[run] * (k * (k - 1) / 2)


def _decode_start(s: DisaggregatedSchedule) -> np.ndarray:
    """When each request's first decode iteration started: its token machine's runs, in
    order, number that machine's iterations 0, 1, ..."""
    out = np.full(len(s.workload), np.nan)
    for m in set(s.request_machine.tolist()):
        runs = np.flatnonzero(s.run_machine == m)
        first = np.concatenate([[0], np.cumsum(s.run_iterations[runs])[:-1]])
        mine = np.flatnonzero(s.request_machine == m)
        g = s.request_decode_start[mine]
        at = np.searchsorted(first, g, side="right") - 1
        out[mine] = s.run_start[runs[at]] + _elapsed(s, runs[at], g - first[at])
    return out


def _slots(s: DisaggregatedSchedule) -> dict[int, int]:
    """Each request's place among its stage's requests, in request order."""
    slots: dict[int, int] = {}
    for stage in set(s.request_stage.tolist()):
        for place, i in enumerate(np.flatnonzero(s.request_stage == stage).tolist()):
            slots[i] = place
    return slots


def check_trace(s: DisaggregatedSchedule, trace: dict[str, Any]) -> None:
    """Every event of ``trace`` against ``s``: a named process per machine; on each machine's
    engine track one slice per prefill stage and per decode run it ran; each request's prefill
    on its slot of its stage's machine and its decode on its client of its token machine, once
    each and nothing else; a flow per request from the one to the other; an instant per
    arrival; named tracks that never overlap."""
    c, n, stages = s.cluster, len(s.workload), s.stage_start.size
    events = trace["traceEvents"]
    assert trace["displayTimeUnit"] == "ms" and trace["otherData"]["mode"] == "disaggregated"
    assert {e["ph"] for e in events} <= {"M", "X", "i", "s", "f"}
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    pool = ["prompt" if m < c.prompt_machines else "token" for m in range(c.machines)]
    assert names == {m + 1: f"llmsched: {s.workload.name}: {pool[m]} machine {m}" for m in range(c.machines)}
    slices = [e for e in events if e["ph"] == "X"]
    assert all(isinstance(e["ts"], int) and isinstance(e["dur"], int) and e["dur"] >= 0 for e in slices)

    # The engine tracks: every stage and run on its machine.
    prompt = s.workload.prompt_tokens
    run_end = s.run_start + _elapsed(s, np.arange(s.run_start.size), s.run_iterations)
    expected = Counter(
        (
            int(s.stage_machine[k]) + 1,
            "prefill",
            int(traces.us(s.stage_start[k])),
            int(traces.us(s.stage_end[k])),
            (k, int(prompt[s.request_stage == k].sum()), int(np.count_nonzero(s.request_stage == k))),
        )
        for k in range(stages)
    )
    expected.update(
        (
            int(s.run_machine[r]) + 1,
            "decode",
            int(traces.us(s.run_start[r])),
            int(traces.us(run_end[r])),
            (stages + r, r, int(s.run_iterations[r]), int(s.run_active[r] * s.run_iterations[r])),
        )
        for r in range(s.run_start.size)
    )
    on_engine = Counter(
        (
            e["pid"],
            e["name"],
            e["ts"],
            e["ts"] + e["dur"],
            (e["args"]["stage"], e["args"]["tokens"], e["args"]["requests"])
            if e["name"] == "prefill"
            else (e["args"]["stage"], e["args"]["run"], e["args"]["iterations"], e["args"]["tokens"]),
        )
        for e in slices
        if e["tid"] == ENGINE_TID
    )
    assert on_engine == expected

    # Each request's prefill and decode, once each, where they ran.
    slots, decode_start = _slots(s), _decode_start(s)
    prefill_at: dict[int, tuple[int, int, int]] = {}
    decode_at: dict[int, tuple[int, int, int]] = {}
    want = Counter()
    for i in range(n):
        stage = int(s.request_stage[i])
        prefill_at[i] = (
            int(s.stage_machine[stage]) + 1,
            c.token_clients + 2 + slots[i],
            int(traces.us(s.stage_start[stage])),
        )
        decode_at[i] = (
            int(s.request_machine[i]) + 1,
            client_tid(s.request_client[i]),
            int(traces.us(decode_start[i])),
        )
        want[(*prefill_at[i], int(traces.us(s.stage_end[stage])), f"prefill r{i}", int(prompt[i]))] += 1
        want[
            (*decode_at[i], int(traces.us(s.finish[i])), f"decode r{i}", int(s.workload.output_tokens[i]))
        ] += 1
    found = Counter(
        (e["pid"], e["tid"], e["ts"], e["ts"] + e["dur"], e["name"], e["args"]["tokens"])
        for e in slices
        if e["tid"] != ENGINE_TID
    )
    assert found == want
    # No decode starts before its keys and values arrived.
    assert (traces.us(decode_start) >= traces.us(s.request_transfer_end)).all()

    # A flow per request, from the start of its prefill slice to the start of its decode slice.
    flows: dict[int, dict[str, dict[str, Any]]] = {}
    for e in events:
        if e["ph"] in "sf":
            assert (e["name"], e["cat"]) == ("KV transfer", "transfer")
            assert e["ph"] not in flows.setdefault(e["id"], {})
            flows[e["id"]][e["ph"]] = e
    assert sorted(flows) == list(range(n))
    for i, pair in flows.items():
        assert (pair["s"]["pid"], pair["s"]["tid"], pair["s"]["ts"]) == prefill_at[i]
        assert (pair["f"]["pid"], pair["f"]["tid"], pair["f"]["ts"], pair["f"]["bp"]) == (*decode_at[i], "e")
        assert pair["s"]["args"] == pair["f"]["args"] == {"request": i, "seconds": float(s.transfer_time[i])}

    # Arrivals: on the engine track of the machine that prefilled each request.
    arrival = s.workload.arrival
    instants = sorted((e["args"]["request"], e["pid"], e["tid"], e["ts"]) for e in events if e["ph"] == "i")
    if (arrival > 0).any():
        assert instants == [(i, prefill_at[i][0], ENGINE_TID, int(traces.us(arrival[i]))) for i in range(n)]
    else:
        assert instants == []

    # Track names, and no overlap on any track.
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    for pid, tid, _ in prefill_at.values():
        assert tracks[(pid, tid)] == f"prefill slot {tid - c.token_clients - 2}"
    for pid, tid, _ in decode_at.values():
        assert tracks[(pid, tid)] == f"client {tid - 2}"
    assert all(tracks[(m + 1, ENGINE_TID)] == "engine" for m in range(c.machines))
    assert traces.assert_tracks_do_not_overlap(slices, lambda e: (e["pid"], e["tid"])) <= set(tracks)


def test_a_mixed_cluster_trace_reads_back_and_matches_the_schedule(tmp_path) -> None:
    """Stages on the prompt machine and on lent token machines, transfers, runs under a
    context-aware model: the file json.load reads holds every slice and flow."""
    s = _valid()
    trace = traces.trace_read_back(s, tmp_path / "cluster.json")
    assert trace == export.chrome_trace(s)
    check_trace(s, trace)
    # A request prefilled by a lent token machine decodes there: its flow stays in one process.
    lent = np.flatnonzero(~s.cluster.is_prompt(s.stage_machine[s.request_stage]))
    flows = {e["id"]: e for e in trace["traceEvents"] if e["ph"] == "f"}
    assert lent.size and all(
        flows[i]["pid"] == s.stage_machine[s.request_stage[i]] + 1 for i in lent.tolist()
    )


def test_a_small_trace_by_hand() -> None:
    """Two requests arriving together on one prompt machine and one token machine: one
    prefill stage of both (slots 0 and 1), one transfer each, then their decodes on clients
    0 and 1 of machine 1."""
    s = simulate_disaggregated(Workload([100, 300], [2, 2]), _cluster(token_machines=1))
    trace = s.chrome_trace()
    prefills = [(e["pid"], e["tid"], e["ts"]) for e in trace["traceEvents"] if e.get("cat") == "prefill"]
    stage_us = int(traces.us(s.stage_start[0]))
    assert s.stage_start.size == 1 and prefills == [(1, 10, stage_us), (1, 11, stage_us)]
    decodes = [(e["name"], e["pid"], e["tid"]) for e in trace["traceEvents"] if e.get("cat") == "decode"]
    assert sorted(decodes) == [("decode r0", 2, 2), ("decode r1", 2, 3)]
    assert (
        sum(e["ph"] == "s" for e in trace["traceEvents"])
        == 2
        == sum(e["ph"] == "f" for e in trace["traceEvents"])
    )
    assert not any(e["ph"] == "i" for e in trace["traceEvents"])
    check_trace(s, trace)


@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 14),
    st.integers(0, 10_000),
    st.booleans(),
    st.builds(
        _cluster,
        prompt_machines=st.integers(1, 2),
        token_machines=st.integers(1, 3),
        token_clients=st.integers(1, 5),
        mixed=st.booleans(),
        overlap=st.booleans(),
    ),
)
def test_every_slice_and_flow_matches_any_cluster(n, seed, arrivals, cluster) -> None:
    """Over random workloads and clusters (pools, clients, the mixed pool, the transfer's
    overlap, closed batches and arrivals), the trace holds exactly the schedule."""
    rng = np.random.default_rng(seed)
    arrival = np.sort(rng.uniform(0, 3, n)).round(3) if arrivals else np.zeros(n)
    work = Workload(rng.integers(5, 3000, n), rng.integers(1, 30, n), arrival=arrival)
    s = simulate_disaggregated(work, cluster)
    check_trace(s, s.chrome_trace())


def test_the_gsm8k_cluster_trace_stays_small() -> None:
    """GSM8K on 1 prompt and 3 token machines: a slice per stage, run, prefill and decode and
    a flow per request, not a slice per (request, run)."""
    s = simulate_disaggregated(workloads.gsm8k(0), _cluster(token_machines=3, token_clients=64, mixed=True))
    trace = s.chrome_trace()
    phases = Counter(e["ph"] for e in trace["traceEvents"])
    n = len(s.workload)
    assert phases["X"] == s.stage_start.size + s.run_start.size + 2 * n and phases["s"] == phases["f"] == n
    check_trace(s, trace)


@pytest.fixture(scope="module")
def schedule() -> DisaggregatedSchedule:
    return _valid()


def test_requests_csv_reads_back_as_the_request_frame(schedule, tmp_path) -> None:
    """The request CSV is request_frame (transfers and serving metrics), read back equal."""
    back = traces.requests_csv_read_back(schedule, tmp_path / "requests.csv", slo_ttft=1.0)
    assert back["transfer_s"].tolist() == schedule.transfer_time.tolist()


def test_stages_csv_reads_back_as_the_stage_frame(schedule, tmp_path) -> None:
    """The stage CSV is stage_frame: the stages, the runs, then the transfers, read back equal."""
    back = traces.stages_csv_read_back(schedule, tmp_path / "stages.csv")
    counts = back["kind"].value_counts().to_dict()
    n = len(schedule.workload)
    assert counts == {"prefill": schedule.stage_start.size, "decode": schedule.run_start.size, "transfer": n}
    assert back["start"].tolist()[: schedule.stage_start.size] == schedule.stage_start.tolist()


def test_a_trace_with_times_that_are_not_finite_is_refused(schedule) -> None:
    broken = replace(schedule, stage_end=np.full(schedule.stage_start.size, np.nan))
    with pytest.raises(ValueError, match="stage time is not finite"):
        broken.chrome_trace()
