"""Chrome traces and CSVs of fleets: the written trace, loaded back, against the fleet (each
engine as its own trace shows it, every pull a flow, every arrival an instant)."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import llmsched.fleet.export as export
from llmsched import FleetSchedule, LinearCostModel, Workload
from llmsched.core.export import ENGINE_TID
from llmsched.fleet.engine import Backoff, Engine
from llmsched.fleet.simulate import simulate_fleet
from tests import traces
from tests.fleet.test_simulate import fleets

PAPER = LinearCostModel.paper()


def _fleet(loaded: int = 0, backoff: bool = True) -> FleetSchedule:
    """Round robin over a competition engine (0) and a fused one (1), every long request to
    engine ``loaded``: with backoff the other pulls some of them."""
    n = 40
    output = [300 if i % 2 == loaded else 5 for i in range(n)]
    workload = Workload([50 + 7 * i for i in range(n)], output, arrival=np.arange(n) * 0.01)
    engines = [Engine(PAPER, 4, name="big"), Engine(PAPER, 4, mode="fusion", token_budget=256)]
    return simulate_fleet(workload, engines, "round-robin", Backoff(delay=0.1) if backoff else None)


def _renamed(event: dict[str, Any], pid: int, names: np.ndarray) -> tuple[Any, ...]:
    """A slice of an engine's own trace as the fleet's trace shows it: in the engine's process,
    its request named by the fleet's index."""
    args = dict(event["args"])
    name = event["name"]
    if "request" in args:
        args["request"] = int(names[args["request"]])
        name = re.sub(r"r\d+$", f"r{args['request']}", name)
    return (pid, event["tid"], name, event["cat"], event["ts"], event["dur"], tuple(sorted(args.items())))


def check_trace(fleet: FleetSchedule, trace: dict[str, Any]) -> None:
    """Every event of ``trace`` against ``fleet``: a named process per engine holding exactly
    the slices and tracks of that engine's own trace, its requests renamed to the fleet's; a
    flow per pull from the engine the request arrived at to its first slice on the engine that
    pulled it; an instant per arrival; no overlap on any track."""
    events = trace["traceEvents"]
    n = len(fleet.workload)
    assert trace["displayTimeUnit"] == "ms" and trace["otherData"]["mode"] == "fleet"
    assert {e["ph"] for e in events} <= {"M", "X", "i", "s", "f"}
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    labels = [e.label(k) for k, e in enumerate(fleet.engines)]
    assert processes == {k + 1: f"llmsched: {fleet.workload.name}: {label}" for k, label in enumerate(labels)}
    slices = [e for e in events if e["ph"] == "X"]
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}

    # Each engine: its own trace's slices and tracks, in its process, with the fleet's names.
    for k, s in enumerate(fleet.schedules):
        names = np.empty(len(s.workload), dtype=np.int64)
        mine = np.flatnonzero(fleet.request_engine == k)
        names[fleet.request_index[mine]] = mine
        own = s.chrome_trace()["traceEvents"]
        expected = Counter(_renamed(e, k + 1, names) for e in own if e["ph"] == "X")
        found = Counter(_renamed(e, k + 1, np.arange(n)) for e in slices if e["pid"] == k + 1)
        assert found == expected
        own_tracks = {e["tid"]: e["args"]["name"] for e in own if e["name"] == "thread_name"}
        assert {tid: name for (pid, tid), name in tracks.items() if pid == k + 1} == own_tracks
    # Every request's slices are in its engine's process.
    for e in slices:
        if "request" in e["args"]:
            assert e["pid"] == fleet.request_engine[e["args"]["request"]] + 1

    # A flow per pull: from the engine track of the engine it arrived at, at its arrival, to
    # the first slice of the request on the engine that pulled it.
    first: dict[int, tuple[int, int, int]] = {}
    for e in sorted(slices, key=lambda e: e["ts"]):
        if "request" in e["args"]:
            first.setdefault(e["args"]["request"], (e["pid"], e["tid"], e["ts"]))
    arrival = traces.us(fleet.workload.arrival)
    pulled = np.flatnonzero(fleet.request_pulled_from >= 0).tolist()
    flows: dict[int, dict[str, dict[str, Any]]] = {}
    for e in events:
        if e["ph"] in "sf":
            assert (e["name"], e["cat"]) == ("pull", "transfer") and e["ph"] not in flows.setdefault(
                e["id"], {}
            )
            flows[e["id"]][e["ph"]] = e
    assert sorted(flows) == pulled
    for i in pulled:
        start, end = flows[i]["s"], flows[i]["f"]
        donor = int(fleet.request_pulled_from[i])
        assert (start["pid"], start["tid"], start["ts"]) == (donor + 1, ENGINE_TID, arrival[i])
        assert (end["pid"], end["tid"], end["ts"], end["bp"]) == (*first[i], "e")
        assert (
            start["args"]
            == end["args"]
            == {
                "request": i,
                "from": donor,
                "to": int(fleet.request_engine[i]),
                "reached": float(fleet.request_reached[i]),
            }
        )
        # The request starts on the engine that pulled it no earlier than it reached it.
        assert end["ts"] >= traces.us(fleet.request_reached[i])

    # Arrivals: at the engine each request was routed to.
    arrived = np.where(fleet.request_pulled_from >= 0, fleet.request_pulled_from, fleet.request_engine)
    instants = sorted((e["args"]["request"], e["pid"], e["tid"], e["ts"]) for e in events if e["ph"] == "i")
    if (fleet.workload.arrival > 0).any():
        assert instants == [(i, int(arrived[i]) + 1, ENGINE_TID, int(arrival[i])) for i in range(n)]
    else:
        assert instants == []

    traces.assert_tracks_do_not_overlap(slices, lambda e: (e["pid"], e["tid"]))


@pytest.mark.parametrize("loaded", [0, 1])
def test_a_fleet_trace_with_pulls_reads_back_and_matches_the_fleet(tmp_path, loaded) -> None:
    """Backoff pulls into the fused engine (its first slice a chunk) and into the competition
    engine (a prefill): the file json.load reads holds every engine's slices and every pull."""
    fleet = _fleet(loaded)
    assert fleet.pulled > 0 and fleet.validate() == []
    assert set(fleet.request_engine[fleet.request_pulled_from >= 0].tolist()) == {1 - loaded}
    trace = traces.trace_read_back(fleet, tmp_path / "fleet.json")
    assert trace == export.chrome_trace(fleet)
    check_trace(fleet, trace)
    assert trace["otherData"]["pulled"] == fleet.pulled and trace["otherData"]["engines"] == 2


def test_a_fleet_without_pulls_has_no_flows() -> None:
    fleet = _fleet(backoff=False)
    trace = fleet.chrome_trace()
    assert not any(e["ph"] in "sf" for e in trace["traceEvents"])
    check_trace(fleet, trace)


def test_an_engine_that_got_nothing_is_an_empty_process() -> None:
    """One request on a competition and a fused engine: the fused engine's process has its
    engine track and no slice, and no row in the stage frame."""
    engines = [Engine(PAPER, 1), Engine(PAPER, 1, mode="fusion")]
    fleet = simulate_fleet(Workload([10], [3]), engines, "round-robin")
    assert len(fleet.schedules[1].workload) == 0
    trace = fleet.chrome_trace()
    assert not any(e["ph"] == "X" and e["pid"] == 2 for e in trace["traceEvents"])
    check_trace(fleet, trace)
    assert fleet.write_stages_csv() is not None and len(fleet.stage_frame()) == fleet.schedules[0].num_stages


@settings(max_examples=20, deadline=None)
@given(fleets(), st.sampled_from(["round-robin", "jsq", "least-work"]), st.booleans())
def test_every_slice_flow_and_arrival_matches_any_fleet(case, router, backoff) -> None:
    """Over random fleets (engines of both modes, their own policies and speeds), routers and
    backoff, the trace is every engine's own trace plus the fleet's pulls and arrivals."""
    workload, engines = case
    fleet = simulate_fleet(workload, engines, router, Backoff(0.05) if backoff else None)
    check_trace(fleet, fleet.chrome_trace())


@pytest.fixture(scope="module")
def fleet() -> FleetSchedule:
    return _fleet(0)


def test_requests_csv_reads_back_as_the_request_frame(fleet, tmp_path) -> None:
    back = traces.requests_csv_read_back(fleet, tmp_path / "requests.csv", slo_ttft=0.5)
    assert back["pulled_from"].tolist() == fleet.request_pulled_from.tolist()


def test_stages_csv_reads_back_as_the_stage_frame(fleet, tmp_path) -> None:
    """The stage CSV is stage_frame: each engine's stages, then the pulls, read back equal."""
    back = traces.stages_csv_read_back(fleet, tmp_path / "stages.csv")
    sizes = [len(s.stage_frame()) for s in fleet.schedules]
    stages = back[back["kind"] != "pull"]
    assert stages["machine"].value_counts().sort_index().tolist() == sizes
    assert (back["kind"] == "pull").sum() == fleet.pulled and len(back) == sum(sizes) + fleet.pulled
