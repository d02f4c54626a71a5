"""Chrome traces and CSVs of fused schedules: the written trace, loaded back, against the schedule."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import llmsched.engines.fusion.export as export
from llmsched import ContextCostModel, FusedSchedule, LinearCostModel, Workload, simulate_fusion, workloads
from llmsched.core.export import ENGINE_TID, PID, client_tid
from tests import traces

COST = LinearCostModel(1.0, 0.1, 0.5, 0.25, prefill_capacity=100)
PAPER = LinearCostModel.paper()
CONTEXT = ContextCostModel(0.004, 6e-5, 2e-8, 0.003, 2e-4, 1.5e-6, 1000)


def _iteration_start(s: FusedSchedule, g: np.ndarray) -> np.ndarray:
    """When global iteration ``g`` started: its run's start plus the iterations before it in
    the run (the first lasting ``run_first_time``, each next ``run_step`` longer)."""
    first = np.concatenate([[0], np.cumsum(s.run_iterations)[:-1]])
    run = np.searchsorted(first, g, side="right") - 1
    return s.run_start[run] + _elapsed(s, run, g - first[run])


def _elapsed(s: FusedSchedule, run: Any, k: Any) -> np.ndarray:
    """Seconds of the first ``k`` iterations of ``run``: an arithmetic series (summed in the
    schedule's order of operations, so that times agree to the last bit)."""
    k = np.asarray(k, dtype=np.float64)
    return k * s.run_first_time[run] + s.run_step[run] * (k * (k - 1) / 2)


def _workload(n: int = 30, seed: int = 0) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(
        rng.integers(5, 900, n), rng.integers(1, 60, n), arrival=np.sort(rng.uniform(0, 6, n)).round(3)
    )


def check_trace(s: FusedSchedule, trace: dict[str, Any]) -> None:
    """Every event of ``trace`` against ``s``: one engine slice per run with its kind, times
    and sizes; on each request's client track one slice per chunk (in its run) and one for its
    decode (first decode iteration's start to its last token), nothing else; each arrival its
    instant; tracks named; no two slices of a track overlap."""
    events = trace["traceEvents"]
    assert trace["displayTimeUnit"] == "ms" and trace["otherData"]["mode"] == "fusion"
    assert {e["ph"] for e in events} <= {"M", "X", "i"}
    assert all(e["pid"] == PID for e in events)
    slices = [e for e in events if e["ph"] == "X"]
    assert all(isinstance(e["ts"], int) and isinstance(e["dur"], int) and e["dur"] >= 0 for e in slices)

    # The engine track: the runs in order, each with its kind and its end to the microsecond.
    k = s.run_iterations
    run_end = s.run_start + _elapsed(s, np.arange(s.num_runs), k)
    chunks_in = np.bincount(s.chunk_run, minlength=s.num_runs)
    on_engine = [e for e in slices if e["tid"] == ENGINE_TID]
    assert [e["args"]["stage"] for e in on_engine] == list(range(s.num_runs))
    for r, e in enumerate(on_engine):
        chunked, decoding = s.run_chunk_tokens[r] > 0, s.run_decoding[r] > 0
        assert e["name"] == ("fused" if chunked and decoding else "prefill" if chunked else "decode")
        assert (e["cat"], e["ts"], e["ts"] + e["dur"]) == (
            "stage",
            traces.us(s.run_start[r]),
            traces.us(run_end[r]),
        )
        assert e["args"]["iterations"] == k[r] and e["args"]["decoding"] == s.run_decoding[r]
        assert e["args"]["tokens"] == s.run_chunk_tokens[r] + s.run_decoding[r] * k[r]
        assert e["args"]["requests"] == s.run_decoding[r] + chunks_in[r]

    # The clients' tracks: every chunk and every decode, once, and nothing else.
    expected = Counter(
        (
            client_tid(s.request_client[i]),
            f"prefill r{i}",
            "prefill",
            traces.us(s.run_start[r]),
            traces.us(run_end[r]),
            int(r),
            int(t),
        )
        for i, r, t in zip(
            s.chunk_request.tolist(), s.chunk_run.tolist(), s.chunk_tokens.tolist(), strict=True
        )
    )
    decode_start = _iteration_start(s, s.request_decode_start)
    for i in range(len(s.workload)):
        expected[
            (
                client_tid(s.request_client[i]),
                f"decode r{i}",
                "decode",
                traces.us(decode_start[i]),
                traces.us(s.finish[i]),
                int(s.request_decode_start[i]),
                int(s.workload.output_tokens[i]),
            )
        ] += 1
    found = Counter(
        (
            e["tid"],
            e["name"],
            e["cat"],
            e["ts"],
            e["ts"] + e["dur"],
            e["args"]["stage"] if e["cat"] == "prefill" else e["args"]["first_iteration"],
            e["args"]["tokens"],
        )
        for e in slices
        if e["tid"] != ENGINE_TID
    )
    assert found == expected
    # A request decodes from its first token on: its decode slice starts where its prefill ended.
    assert np.all(np.abs(traces.us(decode_start) - traces.us(s.prefill_end)) <= 1)

    # Arrivals: one instant per request on the engine track when the workload has arrivals.
    instants = sorted((e["args"]["request"], e["ts"], e["tid"]) for e in events if e["ph"] == "i")
    arrival = s.workload.arrival
    want = [(i, int(t), ENGINE_TID) for i, t in enumerate(traces.us(arrival))] if (arrival > 0).any() else []
    assert instants == want

    # Track names, and no overlap on any track.
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    clients = sorted(set(s.request_client.tolist()))
    assert names == {ENGINE_TID: "engine", **{client_tid(j): f"client {j}" for j in clients}}
    traces.assert_tracks_do_not_overlap(slices)


def test_a_small_fused_trace_by_hand() -> None:
    """Two requests, a budget of 16 tokens: request 0's 10-token prompt alone (2 s), then two
    fused iterations carrying its decode and request 1's prompt in chunks of 15 and 5 tokens
    (2.75 s and 1.75 s, the shared 0.5 s counted once), then request 1's decode (0.75 s)."""
    s = simulate_fusion(Workload([10, 20], [2, 1], arrival=[0.0, 0.5]), COST, 2, "fcfs", token_budget=16)
    trace = s.chrome_trace()
    slices = [(e["name"], e["tid"], e["ts"], e["dur"]) for e in trace["traceEvents"] if e["ph"] == "X"]
    assert slices == [
        ("prefill", 1, 0, 2_000_000),
        ("fused", 1, 2_000_000, 2_750_000),
        ("fused", 1, 4_750_000, 1_750_000),
        ("decode", 1, 6_500_000, 750_000),
        ("prefill r0", 2, 0, 2_000_000),
        ("decode r0", 2, 2_000_000, 4_500_000),
        ("prefill r1", 3, 2_000_000, 2_750_000),
        ("prefill r1", 3, 4_750_000, 1_750_000),
        ("decode r1", 3, 6_500_000, 750_000),
    ]
    chunks = [e["args"]["tokens"] for e in trace["traceEvents"] if e["name"] == "prefill r1"]
    assert chunks == [15, 5]
    assert [e["ts"] for e in trace["traceEvents"] if e["ph"] == "i"] == [0, 500_000]
    check_trace(s, trace)


def test_the_trace_file_reads_back_and_matches_the_schedule(tmp_path) -> None:
    """A run with long prompts split into chunks, written to a file, loaded with json.load:
    every slice is the schedule's."""
    s = simulate_fusion(_workload(), PAPER, 8, "fcfs", token_budget=128)
    assert s.validate() == [] and (np.bincount(s.chunk_request) > 1).any()
    trace = traces.trace_read_back(s, tmp_path / "fused.json")
    assert trace == export.chrome_trace(s)
    check_trace(s, trace)
    assert trace["otherData"]["token_budget"] == 128 and trace["otherData"]["stages"] == s.num_runs


@settings(max_examples=25, deadline=None)
@given(
    st.builds(_workload, st.integers(1, 12), st.integers(0, 10_000)),
    st.integers(2, 300),
    st.integers(1, 6),
    st.booleans(),
    st.booleans(),
)
def test_every_slice_matches_any_fused_schedule(work, budget, clients, context, arrivals) -> None:
    """Over random workloads, budgets, clients, cost models with and without a context term,
    closed batches and arrivals, the trace holds exactly the schedule's runs, chunks and
    decodes."""
    if not arrivals:
        work = work.replace(arrival=np.zeros(len(work)))
    s = simulate_fusion(work, CONTEXT if context else PAPER, clients, "fcfs", token_budget=budget)
    check_trace(s, s.chrome_trace())


def test_the_gsm8k_fused_trace_stays_small() -> None:
    """GSM8K on a fused engine of 200 clients: one slice per run, chunk and request, a few
    thousand events, not one per (request, run)."""
    s = simulate_fusion(workloads.gsm8k(0), PAPER, 200, "fcfs", token_budget=2048)
    trace = s.chrome_trace()
    slices = sum(e["ph"] == "X" for e in trace["traceEvents"])
    assert slices == s.num_runs + s.chunk_run.size + len(s.workload)
    check_trace(s, trace)


@pytest.fixture
def schedule() -> FusedSchedule:
    return simulate_fusion(_workload(12, 3), PAPER, 4, "fcfs", token_budget=96)


def test_requests_csv_reads_back_as_the_request_frame(schedule, tmp_path) -> None:
    """The request CSV is request_frame (meets_slo against the targets), read back equal."""
    back = traces.requests_csv_read_back(schedule, tmp_path / "requests.csv", slo_ttft=0.2, slo_tbt=0.031)
    assert back["finish"].tolist() == schedule.finish.tolist()


def test_stages_csv_reads_back_as_the_stage_frame(schedule, tmp_path) -> None:
    """The stage CSV is stage_frame, one row per run, read back equal; its times are the runs'."""
    path = tmp_path / "stages.csv"
    back = traces.stages_csv_read_back(schedule, path)
    assert len(back) == schedule.num_runs and back["end"].tolist() == schedule.run_end.tolist()
    header = path.read_text().splitlines()[0]
    assert header.startswith("stage,machine,kind,start,end,duration,tokens,requests,iterations")


def test_a_trace_with_times_that_are_not_finite_is_refused(schedule) -> None:
    """A run that starts at NaN cannot be a microsecond: a ValueError, not a corrupt file."""
    from dataclasses import replace

    broken = replace(schedule, run_start=np.full(schedule.num_runs, np.nan))
    with pytest.raises(ValueError, match="run time is not finite"):
        broken.chrome_trace()
