"""The export machinery every mode shares: paths checked before work, microseconds, events, CSV text."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

import llmsched.core.export as export


class Tiny:
    """The least a schedule offers the writers: a trace and two frames, each counting its calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def chrome_trace(self) -> dict[str, Any]:
        self.calls.append("trace")
        return export.trace_object(
            [{"name": "x", "ph": "X", "ts": 0, "dur": 1, "pid": 1, "tid": 1}], {"n": 1}
        )

    def request_frame(self, slo_ttft: float | None = None, slo_tbt: float | None = None) -> pd.DataFrame:
        self.calls.append(f"requests {slo_ttft} {slo_tbt}")
        return pd.DataFrame(
            {"finish": [1.5, np.nan, 0.1 + 0.2], "meets_slo": [True, False, True]},
            index=pd.RangeIndex(3, name="request"),
        )

    def stage_frame(self) -> pd.DataFrame:
        self.calls.append("stages")
        return pd.DataFrame({"kind": ["prefill", "decode"], "tokens": [3, 4]}).rename_axis("stage")


def test_microseconds_round_to_the_nearest_and_refuse_what_is_not_finite() -> None:
    """Halves round to even (1.5 and 2.5 µs to 2), the rest to the nearest; NaN and inf are a
    ValueError naming the time."""
    us = export.microseconds([0.0, 0.0000015, 0.0000025, 1.2345674, 2.0], "stage")
    assert us.dtype == np.int64 and us.tolist() == [0, 2, 2, 1_234_567, 2_000_000]
    with pytest.raises(ValueError, match="cannot export a trace: a run time is not finite"):
        export.microseconds([0.0, np.nan], "run")
    with pytest.raises(ValueError, match="a decode time is not finite"):
        export.microseconds([np.inf], "decode")
    assert export.microseconds([], "stage").tolist() == []


@given(st.lists(st.floats(0, 1e5, allow_nan=False), min_size=2, max_size=30))
def test_abutting_slices_stay_abutting_and_ordered(bounds: list[float]) -> None:
    """Slices that end where the next starts, in seconds, still do in microseconds; every end
    is within half a microsecond (and float error) of the schedule's; durations stay >= 0."""
    edges = np.sort(np.asarray(bounds))
    ts = export.microseconds(edges[:-1], "stage")
    dur = export.microseconds(edges[1:], "stage") - ts
    assert (dur >= 0).all()
    assert (ts[1:] == ts[:-1] + dur[:-1]).all()
    assert np.all(np.abs((ts + dur) / 1e6 - edges[1:]) <= 0.5e-6 + 1e-9 * np.maximum(edges[1:], 1))


def test_the_layout_helpers() -> None:
    """Client J is tid J + 2 (0 avoided, 1 the engine); arrivals show only when some request
    arrives after 0."""
    assert (export.PID, export.ENGINE_TID, export.client_tid(0), export.client_tid(7)) == (1, 1, 2, 9)
    assert not export.has_arrivals(np.zeros(4)) and export.has_arrivals(np.array([0.0, 1e-9]))


def test_metadata_slices_instants_and_flows_have_the_trace_event_fields() -> None:
    """Each helper writes the phase and the fields Perfetto and chrome://tracing read."""
    assert export.process_events(3, "engine 2", 2) == [
        {"name": "process_name", "ph": "M", "pid": 3, "args": {"name": "engine 2"}},
        {"name": "process_sort_index", "ph": "M", "pid": 3, "args": {"sort_index": 2}},
    ]
    assert len(export.process_events(1, "p")) == 1
    assert export.thread_events(1, 4, "client 2", 3) == [
        {"name": "thread_name", "ph": "M", "pid": 1, "tid": 4, "args": {"name": "client 2"}},
        {"name": "thread_sort_index", "ph": "M", "pid": 1, "tid": 4, "args": {"sort_index": 3}},
    ]
    assert export.complete_event("decode r1", "decode", 5, 7, 1, 3, {"request": 1}) == {
        "name": "decode r1",
        "cat": "decode",
        "ph": "X",
        "ts": 5,
        "dur": 7,
        "pid": 1,
        "tid": 3,
        "args": {"request": 1},
    }
    instant = export.instant_event("arrive r4", "arrival", 9, 2, 1, {"request": 4})
    assert (instant["ph"], instant["s"], instant["ts"], instant["pid"], instant["tid"]) == ("i", "t", 9, 2, 1)
    start, end = export.flow_events("KV transfer", 6, (1, 5, 100), (3, 2, 250), {"request": 6})
    assert (start["ph"], start["id"], start["pid"], start["tid"], start["ts"]) == ("s", 6, 1, 5, 100)
    assert (end["ph"], end["bp"], end["id"], end["pid"], end["tid"], end["ts"]) == ("f", "e", 6, 3, 2, 250)
    assert start["name"] == end["name"] == "KV transfer" and start["cat"] == end["cat"] == "transfer"


def test_arrival_events_follow_the_pid_of_each_request() -> None:
    """One instant per request at its arrival, on the engine track of its process; none for a
    closed batch."""
    events = export.arrival_events([0.0, 0.25, 1.0], [1, 3, 2], requests=[10, 11, 12])
    assert [(e["name"], e["ts"], e["pid"], e["tid"], e["args"]) for e in events] == [
        ("arrive r10", 0, 1, 1, {"request": 10}),
        ("arrive r11", 250_000, 3, 1, {"request": 11}),
        ("arrive r12", 1_000_000, 2, 1, {"request": 12}),
    ]
    assert [e["pid"] for e in export.arrival_events([0.0, 2.0], 5)] == [5, 5]
    assert export.arrival_events(np.zeros(3), 1) == []


def test_trace_object_names_the_producer_and_the_time_unit() -> None:
    trace = export.trace_object([], {"mode": "fusion"})
    assert trace["displayTimeUnit"] == "ms"
    assert list(trace["otherData"]) == ["producer", "mode", "time_unit"]


def test_one_engine_s_tracks_trace_and_figures() -> None:
    """An engine's tracks are its engine track, then one per client that worked, in order; one
    engine's trace is its named process, those events, then the arrivals; a mode's figures
    lead with the mode, the workload and its requests and end with the makespan."""
    from llmsched import Workload

    tracks = export.engine_tracks(3, [2, 0, 2])
    names = [(e["pid"], e["tid"], e["args"]["name"]) for e in tracks if e["name"] == "thread_name"]
    assert names == [(3, 1, "engine"), (3, 2, "client 0"), (3, 4, "client 2")]
    workload = Workload([5, 6], [1, 2], arrival=[0.0, 0.5], name="w")
    trace = export.one_engine_trace(workload, tracks, {"n": 2})
    events = trace["traceEvents"]
    assert events[0]["args"] == {"name": "llmsched: w"} and events[1 : 1 + len(tracks)] == tracks
    assert [e["name"] for e in events[1 + len(tracks) :]] == ["arrive r0", "arrive r1"]
    assert trace["otherData"]["n"] == 2
    run = SimpleNamespace(mode="fleet", workload=workload, makespan=4.5)
    figures = export.mode_figures(run, engines=2)
    assert figures == {"mode": "fleet", "workload": "w", "requests": 2, "engines": 2, "makespan_s": 4.5}
    assert list(figures)[-2:] == ["engines", "makespan_s"]


def test_writers_check_the_path_before_any_work(tmp_path, monkeypatch) -> None:
    """A folder, a missing folder, no permission: a ValueError naming the path before the
    trace or a frame is built; a path that is not a path: a TypeError."""
    tiny = Tiny()
    writers = [export.write_chrome_trace, export.write_requests_csv, export.write_stages_csv]
    for write in writers:
        with pytest.raises(ValueError, match=re.escape(f"'{tmp_path}' is a folder; give a file such as")):
            write(tiny, tmp_path)
        missing = tmp_path / "nowhere" / "out"
        with pytest.raises(ValueError, match=re.escape(f"folder '{missing.parent}' does not exist")):
            write(tiny, missing)
        with pytest.raises(TypeError, match="must be a file path"):
            write(tiny, 3)
    monkeypatch.setattr(export.os, "access", lambda *args: False)
    for write in writers:
        with pytest.raises(ValueError, match=re.escape(f"'{tmp_path / 'out'}': not writable")):
            write(tiny, tmp_path / "out")
    assert tiny.calls == []


def test_a_failed_write_names_the_path(tmp_path, monkeypatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("builtins.open", refuse)
    with pytest.raises(ValueError, match=r"trace path '.*t.json': cannot write \(Permission denied\)"):
        export.write_chrome_trace(Tiny(), tmp_path / "t.json")


def test_written_files_read_back(tmp_path) -> None:
    """The trace is compact JSON that json.load reads back equal; the CSVs have the index
    first, floats to the last bit and NaN as an empty field; the targets reach the frame."""
    tiny = Tiny()
    trace = export.write_chrome_trace(tiny, tmp_path / "t.json")
    text = (tmp_path / "t.json").read_text()
    assert json.loads(text) == trace and " " not in text.split('"otherData"')[0]
    assert export.write_requests_csv(tiny, tmp_path / "r.csv", slo_ttft=2.0) is None
    assert tiny.calls == ["trace", "requests 2.0 None"]
    back = pd.read_csv(tmp_path / "r.csv", index_col="request")
    pd.testing.assert_frame_equal(back, tiny.request_frame(), check_exact=True)
    assert (tmp_path / "r.csv").read_text().splitlines() == [
        "request,finish,meets_slo",
        "0,1.5,True",
        "1,,False",
        "2,0.30000000000000004,True",
    ]
    assert export.write_stages_csv(tiny) == "stage,kind,tokens\n0,prefill,3\n1,decode,4\n"


def test_csv_text_names_an_unnamed_index() -> None:
    assert export.csv_text(pd.DataFrame({"a": [1]})) == "index,a\n0,1\n"
