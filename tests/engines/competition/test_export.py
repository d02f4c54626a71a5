"""Chrome traces and CSVs of competition schedules: every slice against the schedule, CSVs read back."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import llmsched.core.export as core_export
import llmsched.engines.competition.export as export
from llmsched import LinearCostModel, Schedule, Workload, simulate, workloads
from llmsched.core.schedule import DECODE, PREFILL
from tests import traces
from tests.strategies import instances, per_iteration_twin

COST = LinearCostModel(1.0, 0.1, 0.5, 0.25, prefill_capacity=100)


def check_trace(schedule: Schedule, trace: dict[str, Any]) -> None:
    """Every slice of ``trace`` against ``schedule``: each segment of ``segments()`` has
    exactly one X event on its client's track, with ts and dur to the rounded microsecond,
    and no other event is there; each stage has its one slice on the engine track; every
    request appears; the tracks are named; slices on one track never overlap; each request
    has its arrival instant on the engine track when the workload has arrivals, and none
    is there for a closed batch."""
    events = trace["traceEvents"]
    assert trace["displayTimeUnit"] == "ms"
    slices = [e for e in events if e["ph"] == "X"]
    meta = [e for e in events if e["ph"] == "M"]
    instants = [e for e in events if e["ph"] == "i"]
    assert len(slices) + len(meta) + len(instants) == len(events)
    arrival = schedule.workload.arrival
    if (arrival > 0).any():
        assert sorted((e["args"]["request"], e["ts"]) for e in instants) == list(
            enumerate(traces.us(arrival).tolist())
        )
        assert all(
            (e["name"], e["cat"], e["s"], e["pid"], e["tid"])
            == (f"arrive r{e['args']['request']}", "arrival", "t", export.PID, export.ENGINE_TID)
            for e in instants
        )
    else:
        assert instants == []
    assert all(e["pid"] == export.PID and isinstance(e["ts"], int) and e["dur"] >= 0 for e in slices)

    # Client tracks: the multiset of slices equals the multiset of segments, one to one.
    seg = schedule.segments()
    expected = Counter(
        (
            export.client_tid(client),
            f"{'prefill' if kind == PREFILL else 'decode'} r{request}",
            int(start_us),
            int(end_us - start_us),
            request,
            stage,
            tokens,
        )
        for kind, request, client, stage, tokens, start_us, end_us in zip(
            seg["kind"].tolist(),
            seg["request"].tolist(),
            seg["client"].tolist(),
            seg["stage"].tolist(),
            seg["tokens"].tolist(),
            traces.us(seg["start"]),
            traces.us(seg["end"]),
            strict=True,
        )
    )
    on_clients = [e for e in slices if e["tid"] != export.ENGINE_TID]
    found = Counter(
        (e["tid"], e["name"], e["ts"], e["dur"], *(e["args"][key] for key in ("request", "stage", "tokens")))
        for e in on_clients
    )
    assert found == expected
    assert all(count == 1 for count in found.values())
    assert {e["cat"] for e in on_clients} <= {"prefill", "decode"}
    # Every request has its prefill slice.
    prefills = [e["args"]["request"] for e in on_clients if e["cat"] == "prefill"]
    assert sorted(prefills) == list(range(len(schedule.workload)))

    # Engine track: one slice per stage, in order, with its kind, times and sizes.
    on_engine = [e for e in slices if e["tid"] == export.ENGINE_TID]
    assert [e["args"]["stage"] for e in on_engine] == list(range(schedule.num_stages))
    prompt = np.zeros(schedule.num_stages, dtype=np.int64)
    np.add.at(prompt, schedule.request_prefill_stage, schedule.workload.prompt_tokens)
    starts, stops = traces.us(schedule.stage_start), traces.us(schedule.stage_end)
    for k, e in enumerate(on_engine):
        assert (e["ts"], e["ts"] + e["dur"]) == (starts[k], stops[k])
        if schedule.stage_kind[k] == PREFILL:
            assert e["name"] == "prefill" and e["args"]["tokens"] == prompt[k]
            assert e["args"]["requests"] == np.count_nonzero(schedule.request_prefill_stage == k)
        else:
            assert schedule.stage_kind[k] == DECODE and e["name"] == "decode"
            assert e["args"]["iterations"] == schedule.stage_iterations[k]
            assert e["args"]["first_iteration"] == schedule.stage_first_iteration[k]
            assert e["args"]["tokens"] == seg["tokens"][(seg["stage"] == k) & (seg["kind"] == DECODE)].sum()

    # Track names: the engine, and "client J" for each client that worked, no other.
    names = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    worked = sorted(set(schedule.request_client.tolist()))
    assert names == {export.ENGINE_TID: "engine", **{export.client_tid(j): f"client {j}" for j in worked}}
    assert any(e["name"] == "process_name" for e in meta)

    # Slices on one track follow each other without overlapping (the rounding keeps order).
    traces.assert_tracks_do_not_overlap(slices)


@given(
    instances(),
    st.sampled_from(["fcfs", "static", "shortest-first-oracle"]),
    st.sampled_from(["prefill-first", "lagrangian", "threshold"]),
    st.booleans(),
)
def test_every_slice_matches_the_schedule(instance, request_policy, iteration_policy, measured) -> None:
    """Over random instances and policies (and their per-iteration twins), the written trace
    holds exactly the schedule's segments and stages, to the rounded microsecond."""
    workload, cost, clients = instance
    schedule = simulate(workload, cost, clients, request_policy, iteration_policy)
    if measured:
        schedule = per_iteration_twin(schedule)
    trace = schedule.to_chrome_trace()
    # What json.load reads back is what was built.
    assert json.loads(json.dumps(trace)) == trace
    check_trace(schedule, trace)


def test_gsm8k_hybrid_trace_written_and_read_back(tmp_path) -> None:
    """The GSM8K hybrid run (200 clients, hybrid-oracle / lagrangian): the file json.load reads
    holds every slice; it is the README's 2.2 MB and 16,157 events, written in well under a
    few seconds."""
    schedule = simulate(workloads.gsm8k(0), LinearCostModel.paper(), 200, "hybrid-oracle", "lagrangian")
    path = tmp_path / "gsm8k.json"
    began = time.perf_counter()
    returned = schedule.write_chrome_trace(path)
    elapsed = time.perf_counter() - began
    with open(path, encoding="utf-8") as file:
        trace = json.load(file)
    assert trace == returned
    check_trace(schedule, trace)
    assert len({e["args"]["request"] for e in trace["traceEvents"] if e.get("cat") == "prefill"}) == 1319
    assert trace["otherData"]["clients"] == 200 and trace["otherData"]["makespan_s"] == schedule.makespan
    assert len(trace["traceEvents"]) == 16_157 and round(path.stat().st_size / 1e6, 1) == 2.2
    assert elapsed < 5.0


def test_trace_of_a_small_schedule_by_hand() -> None:
    """Three requests on two clients: the slices' names, times and sizes, written out."""
    schedule = simulate(Workload([10, 20, 30], [2, 1, 3]), COST, 2)
    events = [e for e in schedule.to_chrome_trace()["traceEvents"] if e["ph"] == "X"]
    engine = [(e["name"], e["ts"], e["dur"]) for e in events if e["tid"] == export.ENGINE_TID]
    assert engine[:2] == [("prefill", 0, 4_000_000), ("decode", 4_000_000, 1_000_000)]
    r2 = [e for e in events if e["name"] == "decode r2"]
    assert len(r2) == 1 and (r2[0]["ts"], r2[0]["dur"]) == (9_000_000, 2_500_000)
    assert r2[0]["args"] == {"request": 2, "stage": 3, "tokens": 3}


def test_a_closed_batch_trace_has_only_slices_and_metadata() -> None:
    """The GSM8K-shaped closed batch (every request at 0) shows no arrivals: its trace is the
    metadata, the stages and the segments, as before arrivals were shown."""
    schedule = simulate(Workload([10, 20, 30], [2, 1, 3]), COST, 2)
    phases = Counter(e["ph"] for e in schedule.chrome_trace()["traceEvents"])
    assert set(phases) == {"M", "X"} and phases["X"] == schedule.num_stages + len(
        schedule.segments()["stage"]
    )


def test_arrivals_are_instants_on_the_engine_track() -> None:
    """Requests arriving at 0, 0.5 and 1 s: three instants at 0, 500,000 and 1,000,000 µs."""
    schedule = simulate(Workload([10, 20, 30], [2, 1, 3], arrival=[0.0, 0.5, 1.0]), COST, 2)
    instants = [e for e in schedule.chrome_trace()["traceEvents"] if e["ph"] == "i"]
    assert [(e["name"], e["ts"], e["tid"]) for e in instants] == [
        ("arrive r0", 0, export.ENGINE_TID),
        ("arrive r1", 500_000, export.ENGINE_TID),
        ("arrive r2", 1_000_000, export.ENGINE_TID),
    ]


def test_the_schedule_methods_and_the_module_functions_agree(tmp_path) -> None:
    """write_chrome_trace, the to_* names and the module's functions give one trace and one
    text each."""
    schedule = simulate(Workload([10, 20, 30], [2, 1, 3], arrival=[0.0, 0.5, 1.0]), COST, 2)
    trace = schedule.write_chrome_trace(tmp_path / "a.json")
    assert trace == schedule.to_chrome_trace() == export.chrome_trace(schedule) == schedule.chrome_trace()
    assert schedule.to_chrome_trace(tmp_path / "b.json") == trace
    assert (tmp_path / "a.json").read_text() == (tmp_path / "b.json").read_text()
    assert schedule.write_requests_csv() == schedule.to_requests_csv() == export.write_requests_csv(schedule)
    assert schedule.write_stages_csv() == schedule.to_stages_csv() == export.write_stages_csv(schedule)


@pytest.fixture
def schedule() -> Schedule:
    return simulate(Workload([10, 20, 30], [2, 1, 3], arrival=[0.0, 0.5, 1.0]), COST, 2)


@pytest.mark.parametrize(
    "method",
    [
        "write_chrome_trace",
        "write_requests_csv",
        "write_stages_csv",
        "to_chrome_trace",
        "to_requests_csv",
        "to_stages_csv",
    ],
)
def test_unwritable_paths_are_refused_before_any_work(schedule, tmp_path, monkeypatch, method) -> None:
    """A folder, a missing folder or a path without permission: a ValueError naming the path,
    raised before the trace or the frame is built; a path of the wrong type is a TypeError."""

    def no_work(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("work started before the path was checked")

    monkeypatch.setattr(Schedule, "chrome_trace", no_work)
    monkeypatch.setattr(Schedule, "request_frame", no_work)
    monkeypatch.setattr(Schedule, "stage_frame", no_work)
    write = getattr(schedule, method)
    with pytest.raises(ValueError, match=re.escape(f"'{tmp_path}' is a folder; give a file such as")):
        write(tmp_path)
    missing = tmp_path / "nowhere" / "out.json"
    with pytest.raises(ValueError, match=re.escape(f"'{missing}': folder '{missing.parent}' does not exist")):
        write(missing)
    monkeypatch.setattr(core_export.os, "access", lambda *args: False)
    with pytest.raises(ValueError, match=re.escape(f"'{tmp_path / 'out.json'}': not writable")):
        write(tmp_path / "out.json")
    with pytest.raises(TypeError, match="must be a file path"):
        write(3)


def test_a_failed_write_names_the_path(schedule, tmp_path, monkeypatch) -> None:
    """An OSError while writing comes back as a ValueError naming the path."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("builtins.open", refuse)
    with pytest.raises(ValueError, match=r"'.*out.json': cannot write \(Permission denied\)"):
        schedule.write_chrome_trace(tmp_path / "out.json")


def test_requests_csv_reads_back_as_the_request_frame(schedule, tmp_path) -> None:
    """write_requests_csv writes request_frame (serving metrics and meets_slo included) with the
    request index first; pandas reads it back equal, floats to the last bit."""
    path = tmp_path / "requests.csv"
    back = traces.requests_csv_read_back(schedule, path, slo_ttft=3.0)
    assert {"ttft", "tbt_mean", "tbt_max", "e2e", "normalized_latency", "meets_slo"} <= set(back.columns)
    assert path.read_text().splitlines()[0].startswith("request,prompt_tokens,output_tokens")


def test_stages_csv_reads_back_as_the_stage_frame(schedule, tmp_path) -> None:
    """write_stages_csv writes stage_frame with the stage index first; it reads back equal."""
    path = tmp_path / "stages.csv"
    traces.stages_csv_read_back(schedule, path)
    header = "stage,machine,kind,start,end,duration,tokens,requests,prompt_tokens,prompt_squares"
    assert path.read_text().splitlines()[0] == header + ",iterations,decoded_tokens,context_tokens"


def test_nan_is_an_empty_field(schedule) -> None:
    """A request that decodes nothing (an invalid schedule) has NaN metrics: empty fields."""
    broken = replace(schedule, request_decode_end=schedule.request_decode_start)
    text = broken.write_requests_csv()
    assert text is not None
    row = text.splitlines()[1].split(",")
    header = text.splitlines()[0].split(",")
    assert row[header.index("finish")] == "" and row[header.index("tbt_max")] == ""


def test_a_trace_with_times_that_are_not_finite_is_refused(schedule) -> None:
    """A stage time of NaN cannot be a microsecond: a ValueError, not a corrupt file."""
    broken = replace(schedule, stage_end=np.full(schedule.num_stages, np.nan))
    with pytest.raises(ValueError, match="stage time is not finite"):
        broken.chrome_trace()
