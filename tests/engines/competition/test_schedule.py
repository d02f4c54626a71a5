"""Schedule metrics, DataFrames and the decode runs behind them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmsched import LinearCostModel, Schedule, Workload, simulate, validate
from llmsched.core.cost import is_context_aware
from llmsched.core.schedule import DECODE, run_holding
from tests.strategies import instances, per_iteration_twin

COST = LinearCostModel(1.0, 0.1, 0.5, 0.25, prefill_capacity=100)


@pytest.fixture
def schedule():
    return simulate(Workload([10, 20, 30], [2, 1, 3]), COST, 2)


def test_to_frame_has_one_row_per_stage_and_client_segment(schedule) -> None:
    """Prefill rows per request and decode rows per (request, decode stage), with exact times."""
    frame = schedule.to_frame()
    assert list(frame.columns) == ["stage", "kind", "request", "client", "start", "end", "tokens"]
    # 3 prefill rows; decode: request 0 in stages 1 and 3, request 1 in 1, request 2 in 3.
    assert (frame["kind"] == "prefill").sum() == 3
    decode = frame[frame["kind"] == "decode"].sort_values(["request", "stage"])
    assert decode[["request", "stage", "tokens"]].values.tolist() == [
        [0, 1, 1],
        [0, 3, 1],
        [1, 1, 1],
        [2, 3, 3],
    ]
    r2 = decode[decode["request"] == 2].iloc[0]
    assert (r2["start"], r2["end"]) == (9.0, 11.5)
    r0 = decode[(decode["request"] == 0) & (decode["stage"] == 3)].iloc[0]
    assert (r0["start"], r0["end"]) == (9.0, 10.0)


def test_request_and_stage_frames(schedule) -> None:
    """Per-request and per-stage tables carry the schedule's figures."""
    requests = schedule.request_frame()
    assert requests["finish"].tolist() == [10.0, 5.0, 11.5]
    assert requests["latency"].tolist() == [10.0, 5.0, 11.5]
    stages = schedule.stage_frame()
    assert stages["kind"].tolist() == ["prefill", "decode", "prefill", "decode"]
    assert stages["prompt_tokens"].tolist() == [30, 0, 30, 0]
    assert stages["duration"].tolist() == [4.0, 1.0, 4.0, 2.5]


def test_summary_figures(schedule) -> None:
    """summary() reports makespan, utilization, throughput and latency percentiles."""
    summary = schedule.summary()
    assert summary["makespan_s"] == 11.5
    assert summary["utilization"] == pytest.approx(17.5 / 23)
    assert summary["prefill_time_s"] == 8.0 and summary["decode_time_s"] == 3.5
    assert summary["ttft_p50_s"] == 4.0
    assert summary["latency_mean_s"] == pytest.approx((10 + 5 + 11.5) / 3)
    assert "makespan=11.500s" in repr(schedule)


# ------------------------------------------------------------------ decode runs
def test_schedule_stores_runs_not_iterations(schedule) -> None:
    """The small schedule keeps three runs; the per-iteration view is derived from them."""
    assert schedule.run_start.tolist() == [4.0, 9.0, 10.0]
    assert schedule.run_iterations.tolist() == [1, 1, 2]
    assert schedule.run_iteration_time.tolist() == [1.0, 1.0, 0.75]
    assert schedule.num_runs == 3 and schedule.num_iterations == 4
    assert schedule.iteration_end.tolist() == [5.0, 10.0, 10.75, 11.5]
    assert schedule.iteration_start.tolist() == [4.0, 9.0, 10.0, 10.75]
    assert schedule.iteration_end_at([3, 0, 4, -1]).tolist()[:2] == [11.5, 5.0]
    assert np.isnan(schedule.iteration_end_at([4, -1])).all()


def test_every_array_a_schedule_hands_out_is_read_only(schedule) -> None:
    """Fields and cached metrics alike refuse writes: a write to ``ttft`` used to change the
    cached array that ``summary`` and ``request_frame`` read."""
    names = [name for name in dir(schedule) if not name.startswith("__")]
    arrays = {name: getattr(schedule, name) for name in names}
    arrays = {name: value for name, value in arrays.items() if isinstance(value, np.ndarray)}
    assert {"prefill_end", "ttft", "latency", "finish", "run_start", "iteration_end"} <= set(arrays)
    assert [name for name, value in arrays.items() if value.flags.writeable] == []


def test_arrays_are_read_only_and_replace_rebuilds(schedule) -> None:
    """Run arrays refuse writes; dataclasses.replace makes a new schedule whose metrics follow its runs."""
    with pytest.raises(ValueError, match="read-only"):
        schedule.run_start[0] = 0.0
    assert schedule.finish.tolist() == [10.0, 5.0, 11.5]  # caches the metric on the original
    slower = replace(
        schedule, run_iteration_time=[1.0, 1.0, 1.0], stage_end=[4.0, 5.0, 9.0, 12.0], makespan=12.0
    )
    assert slower.finish.tolist() == [10.0, 5.0, 12.0]
    assert not slower.run_iteration_time.flags.writeable
    assert np.array_equal(slower.run_start, schedule.run_start)
    assert schedule.finish.tolist() == [10.0, 5.0, 11.5]
    violations = validate(slower)
    assert [v.rule for v in violations] == ["stage_time"]
    assert "decode iterations 2-3 with 1 active clients last 1s each" in violations[0].message


def test_from_iteration_end_gives_one_run_per_iteration(schedule) -> None:
    """A producer with per-iteration end times gets one run per iteration, and the same schedule."""
    measured = per_iteration_twin(schedule)
    assert measured.run_iterations.tolist() == [1, 1, 1, 1]
    assert measured.run_start.tolist() == [4.0, 9.0, 10.0, 10.75]
    assert measured.iteration_end.tolist() == schedule.iteration_end.tolist()
    assert measured.measured and measured.info == {}
    assert validate(measured) == []
    assert measured.utilization == pytest.approx(schedule.utilization, rel=1e-12)


def _huge_output_checks(schedule, max_runs: int) -> None:
    assert validate(schedule) == []
    assert schedule.run_start.size <= max_runs
    schedule.summary()
    frame = schedule.to_frame()
    decoded = frame[frame["kind"] == "decode"].groupby("request")["tokens"].sum()
    assert decoded.tolist() == schedule.workload.output_tokens.tolist()
    # Neither validate nor any metric materialised the per-iteration arrays.
    assert not {"iteration_end", "iteration_start", "iteration_time"} & set(vars(schedule))


def test_two_billion_iterations_stay_small() -> None:
    """One request of 2**31 - 1 output tokens: a two-stage, one-run schedule, validated in closed form."""
    cost = LinearCostModel.paper()
    out = 2**31 - 1
    schedule = simulate(Workload([10], [out]), cost, 2)
    assert schedule.num_iterations == out
    assert schedule.num_stages == 2 and schedule.run_iterations.tolist() == [out]
    expected = cost.prefill_time(10) + out * cost.decode_iteration_time(1)
    assert schedule.makespan == pytest.approx(expected, rel=1e-12)
    assert schedule.finish.tolist() == [schedule.makespan]
    assert schedule.utilization == pytest.approx(0.5, rel=1e-12)  # one of two clients, all the time
    _huge_output_checks(schedule, max_runs=1)


def test_huge_outputs_on_many_requests_stay_small() -> None:
    """Sixty requests of 2**28 to 2**31 tokens each on seven clients: runs grow with requests only."""
    rng = np.random.default_rng(7)
    outputs = rng.integers(2**28, 2**31, size=60)
    workload = Workload(rng.integers(1, 500, size=60), outputs, arrival=np.sort(rng.uniform(0, 5, size=60)))
    schedule = simulate(workload, LinearCostModel.paper(), 7)
    assert schedule.num_iterations >= outputs.sum() // 7
    # A run ends only at a prefill, a finish or an arrival: a few per request.
    _huge_output_checks(schedule, max_runs=4 * len(workload))


def _per_iteration(schedule: Schedule) -> dict[str, np.ndarray]:
    """Iteration times, ends, active counts and contexts computed one iteration at a time, from
    the stages, the requests and the cost model alone (no runs)."""
    dstart, dend = schedule.request_decode_start, schedule.request_decode_end
    prompt = schedule.workload.prompt_tokens
    cost = schedule.cost
    starts, ends, active, context = [], [], [], []
    for k in np.flatnonzero(schedule.stage_kind == DECODE).tolist():
        t = float(schedule.stage_start[k])
        first = int(schedule.stage_first_iteration[k])
        for g in range(first, first + int(schedule.stage_iterations[k])):
            inside = (dstart <= g) & (g < dend)
            decoding = int(np.count_nonzero(inside))
            read = int(sum(int(prompt[r]) + g - int(dstart[r]) for r in np.flatnonzero(inside)))
            starts.append(t)
            if is_context_aware(cost):
                t += float(cost.decode_iteration_time(decoding, read))
            else:
                t += float(cost.decode_iteration_time(decoding))
            ends.append(t)
            active.append(decoding)
            context.append(read)
    return {
        "start": np.array(starts),
        "end": np.array(ends),
        "active": np.array(active, dtype=np.int64),
        "context": np.array(context, dtype=np.int64),
    }


def _merge_equal_runs(schedule: Schedule) -> Schedule:
    """The same schedule with neighbouring runs of one stage and one constant iteration time
    merged (runs whose iterations lengthen are left as they are)."""
    first = schedule.run_first_iteration
    stage_first = schedule.stage_first_iteration[schedule.stage_kind == DECODE]
    tau = schedule.run_iteration_time
    step = schedule.run_iteration_step
    flat = np.ones(schedule.num_runs, dtype=bool) if step is None else step == 0
    joins = np.ones(schedule.num_runs, dtype=bool)
    joins[0] = False
    joins[1:] = (tau[1:] == tau[:-1]) & flat[1:] & flat[:-1] & ~np.isin(first[1:], stage_first)
    keep = np.flatnonzero(~joins)
    return replace(
        schedule,
        run_start=schedule.run_start[keep],
        run_iterations=np.add.reduceat(schedule.run_iterations, keep),
        run_iteration_time=tau[keep],
        run_iteration_step=None if step is None else step[keep],
    )


@given(instances(), st.sampled_from(["fcfs", "static"]))
def test_runs_agree_with_the_per_iteration_computation(instance, request_policy) -> None:
    """Materialised iteration times, finishes, busy time and active counts from runs equal the
    iteration-by-iteration computation; merging runs of equal time (across request finishes,
    as a constant-decode-time model allows) changes neither validity nor any metric."""
    workload, cost, clients = instance
    schedule = simulate(workload, cost, clients, request_policy)
    ref = _per_iteration(schedule)
    everything = np.arange(schedule.num_iterations)
    np.testing.assert_allclose(schedule.iteration_end, ref["end"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(schedule.iteration_start, ref["start"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(schedule.iteration_time, ref["end"] - ref["start"], rtol=1e-9, atol=1e-12)
    assert np.array_equal(schedule.iteration_end_at(everything), schedule.iteration_end)
    assert np.array_equal(schedule.iteration_start_at(everything), schedule.iteration_start)
    assert np.array_equal(schedule.context_at(everything), ref["context"])
    np.testing.assert_allclose(schedule.finish, ref["end"][schedule.request_decode_end - 1], rtol=1e-12)

    stage_len = schedule.stage_end - schedule.stage_start
    busy = (
        stage_len[schedule.request_prefill_stage].sum() + (ref["active"] * (ref["end"] - ref["start"])).sum()
    )
    assert schedule.busy_time == pytest.approx(busy, rel=1e-9)
    pieces = schedule.active_runs()
    assert np.repeat(pieces["active"], pieces["iterations"]).tolist() == ref["active"].tolist()

    merged = _merge_equal_runs(schedule)
    assert merged.num_runs <= schedule.num_runs
    assert validate(merged) == []
    np.testing.assert_allclose(merged.finish, schedule.finish, rtol=1e-12)
    assert merged.utilization == pytest.approx(schedule.utilization, rel=1e-12)
    assert np.repeat(merged.active_runs()["active"], merged.active_runs()["iterations"]).tolist() == (
        ref["active"].tolist()
    )


@given(st.lists(st.integers(1, 1000), min_size=1, max_size=20), st.data())
def test_run_lookup_matches_the_expanded_runs(lengths, data) -> None:
    """Whether it searches or builds a table, the run found for an iteration is the one covering it."""
    run_len = np.array(lengths, dtype=np.int64)
    total = int(run_len.sum())
    keys = np.array(data.draw(st.lists(st.integers(0, total), max_size=50)), dtype=np.int64)
    covering = np.append(np.repeat(np.arange(run_len.size), run_len), run_len.size - 1)
    assert run_holding(np.cumsum(run_len) - run_len, run_len, keys).tolist() == covering[keys].tolist()


# ------------------------------------------------------------ serving metrics
def _per_token_gaps(schedule: Schedule) -> list[np.ndarray]:
    """Each request's gaps between consecutive tokens, one entry per token, from the
    materialised iteration ends: its prefill's end, then the end of each decode iteration."""
    ends = schedule.iteration_end
    return [
        np.diff(np.concatenate([[schedule.prefill_end[i]], ends[lo:hi]]))
        for i, (lo, hi) in enumerate(
            zip(schedule.request_decode_start.tolist(), schedule.request_decode_end.tolist(), strict=True)
        )
    ]


def test_serving_metrics_by_hand(schedule) -> None:
    """The fixture's token times: request 0 at 5 and 10 (prefill ended at 4; the second
    prefill stage, 5-9, pauses it), request 1 at 5, request 2 at 10, 10.75 and 11.5 (prefill
    ended at 9). Gaps: [1, 5], [1], [1, 0.75, 0.75]."""
    assert schedule.tbt_mean.tolist() == [3.0, 1.0, pytest.approx(2.5 / 3)]
    assert schedule.tbt_max.tolist() == [5.0, 1.0, 1.0]
    assert schedule.e2e.tolist() == schedule.latency.tolist() == [10.0, 5.0, 11.5]
    assert schedule.normalized_latency.tolist() == [5.0, 5.0, pytest.approx(11.5 / 3)]
    values, counts = schedule.tbt_distribution()
    assert sorted(np.repeat(values, counts).tolist()) == [0.75, 0.75, 1.0, 1.0, 1.0, 5.0]
    summary = schedule.summary(slo_ttft=5, slo_tbt=2.0)
    assert summary["tbt_p50_s"] == 1.0 and summary["tbt_p90_s"] == 3.0
    assert summary["tbt_p99_s"] == pytest.approx(4.8)
    assert summary["tbt_mean_s"] == pytest.approx(9.5 / 6)  # over gaps, not over requests
    assert summary["e2e_p50_s"] == summary["latency_p50_s"] == 10.0
    assert summary["normalized_latency_p50_s"] == 5.0
    assert summary["requests_per_s"] == pytest.approx(3 / 11.5)
    # TTFTs 4, 4, 9 against 5 s; mean gaps 3, 1, 0.83 against 2 s: only request 1 meets both.
    assert schedule.meets_slo(5, 2.0).tolist() == [False, True, False]
    assert summary["goodput_rps"] == pytest.approx(1 / 11.5)
    assert summary["slo_attainment"] == pytest.approx(1 / 3)
    assert (summary["slo_ttft_s"], summary["slo_tbt_s"]) == (5.0, 2.0)


def test_summary_without_targets_counts_every_request(schedule) -> None:
    """Without targets every request counts as good; the targets echo as None; the keys
    summary() had before are all still there."""
    summary = schedule.summary()
    assert summary["goodput_rps"] == summary["requests_per_s"] and summary["slo_attainment"] == 1.0
    assert summary["slo_ttft_s"] is None and summary["slo_tbt_s"] is None
    assert schedule.summary(slo_ttft=np.inf)["slo_attainment"] == 1.0
    assert schedule.summary(slo_tbt=1.0)["slo_attainment"] == pytest.approx(2 / 3)
    before = ["requests", "clients", "makespan_s", "utilization", "tokens_per_s", "prefill_stages"]
    before += ["decode_iterations", "prefill_time_s", "decode_time_s"]
    before += [f"{m}_{s}_s" for m in ("ttft", "latency") for s in ("mean", "p50", "p90", "p99")]
    assert list(summary)[: len(before)] == before


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"slo_ttft": 0}, ValueError, r"slo_ttft must be a number > 0 \(inf allowed\), got 0"),
        ({"slo_ttft": -1.0}, ValueError, "slo_ttft must be a number > 0"),
        ({"slo_tbt": float("nan")}, ValueError, "slo_tbt must be a number > 0"),
        ({"slo_tbt": -np.inf}, ValueError, "slo_tbt must be a number > 0"),
        ({"slo_tbt": "0.1"}, TypeError, "slo_tbt must be a number > 0"),
        ({"slo_ttft": True}, TypeError, "slo_ttft must be a number > 0"),
    ],
)
def test_bad_latency_targets_are_refused(schedule, kwargs, error, message) -> None:
    """summary, request_frame and meets_slo refuse a target that is not a positive number."""
    for method in (schedule.summary, schedule.request_frame, schedule.meets_slo):
        with pytest.raises(error, match=message):
            method(**kwargs)


def test_request_frame_has_the_serving_columns(schedule) -> None:
    """request_frame adds TBT mean and max, e2e, normalized latency and whether each request
    meets the targets."""
    frame = schedule.request_frame(slo_ttft=5.0)
    assert list(frame.columns)[-5:] == ["tbt_mean", "tbt_max", "e2e", "normalized_latency", "meets_slo"]
    assert frame["meets_slo"].tolist() == [True, True, False]
    assert frame["meets_slo"].dtype == bool
    assert frame["tbt_max"].tolist() == [5.0, 1.0, 1.0]
    assert schedule.request_frame()["meets_slo"].all()


def _check_serving_metrics(schedule: Schedule, exact: bool) -> None:
    """Every TBT metric against the per-token computation. With ``exact`` (times that add
    without rounding) the gaps, and so the percentiles, must be the very same floats."""
    per_token = _per_token_gaps(schedule)
    gaps = np.concatenate(per_token)
    assert gaps.size == schedule.workload.total_output_tokens
    values, counts = schedule.tbt_distribution()
    assert (counts > 0).all() and counts.sum() == gaps.size
    # One value per request and two per run; a run whose iterations lengthen (a context-aware
    # model) adds one per iteration after its first.
    step = schedule.run_iteration_step
    growing = 0 if step is None else int((schedule.run_iterations[step != 0] - 1).sum())
    assert values.size <= len(schedule.workload) + 2 * schedule.num_runs + growing
    tol = {"rtol": 0, "atol": 0} if exact else {"rtol": 1e-9, "atol": 1e-9}
    np.testing.assert_allclose(np.sort(np.repeat(values, counts)), np.sort(gaps), **tol)
    summary = schedule.summary()
    expected = np.percentile(gaps, [50, 90, 99])
    got = [summary["tbt_p50_s"], summary["tbt_p90_s"], summary["tbt_p99_s"]]
    if exact:
        assert got == expected.tolist()
    else:
        np.testing.assert_allclose(got, expected, **tol)
    assert summary["tbt_mean_s"] == pytest.approx(gaps.mean(), rel=1e-9, abs=1e-12)
    np.testing.assert_allclose(schedule.tbt_max, [g.max() for g in per_token], **tol)
    np.testing.assert_allclose(schedule.tbt_mean, [g.mean() for g in per_token], rtol=1e-9, atol=1e-12)
    output = schedule.workload.output_tokens
    np.testing.assert_allclose(schedule.normalized_latency, schedule.latency / output, rtol=1e-15)
    assert summary["normalized_latency_p99_s"] == pytest.approx(
        float(np.percentile(schedule.latency / output, 99)), rel=1e-12
    )


@given(
    instances(),
    st.sampled_from(["fcfs", "static", "shortest-first-oracle", "hybrid-oracle", "offline-oracle"]),
    st.sampled_from(["prefill-first", "lagrangian"]),
    st.booleans(),
)
def test_tbt_metrics_match_the_per_token_computation(
    instance, request_policy, iteration_policy, measured
) -> None:
    """Gaps with counts, their percentiles and mean, and each request's mean and largest gap
    equal the token-by-token computation, on simulated schedules and on their per-iteration
    twins (one run per iteration, as a measured schedule stores them)."""
    workload, cost, clients = instance
    schedule = simulate(workload, cost, clients, request_policy, iteration_policy)
    if measured:
        schedule = per_iteration_twin(schedule)
    _check_serving_metrics(schedule, exact=False)


@st.composite
def dyadic_instances(draw: st.DrawFn) -> tuple[Workload, LinearCostModel, int]:
    """Instances whose every time is a multiple of 1/256 s: sums and products of them are
    exact in floating point, so gaps computed two ways are the same floats."""
    cost = LinearCostModel(
        draw(st.integers(1, 64)) / 64,
        draw(st.integers(0, 16)) / 256,
        draw(st.integers(1, 32)) / 64,
        draw(st.integers(0, 16)) / 256,
        prefill_capacity=100,
    )
    n = draw(st.integers(1, 25))
    prompt = draw(st.lists(st.integers(1, 100), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))
    arrival = draw(st.lists(st.integers(0, 20).map(lambda k: k / 4), min_size=n, max_size=n))
    return Workload(prompt, output, arrival=arrival), cost, draw(st.integers(1, n + 3))


@given(
    dyadic_instances(),
    st.sampled_from(["fcfs", "shortest-first-oracle"]),
    st.sampled_from(["prefill-first", "lagrangian"]),
)
def test_tbt_percentiles_are_numpys_exactly_when_times_are_exact(instance, requests, iterations) -> None:
    """Where no time is rounded, the TBT percentiles are bit for bit numpy's over one entry
    per token, and so is each request's largest gap."""
    workload, cost, clients = instance
    schedule = simulate(workload, cost, clients, requests, iterations)
    _check_serving_metrics(schedule, exact=True)


# ------------------------------------------------------- pieces: a request preempted by recompute
def _preempted() -> Schedule:
    """Request 0 (prompt 10, 5 tokens) preempted after 2 tokens and recomputed (its second
    piece prefills 10 + 2 tokens, then decodes 3) around request 1 (prompt 4, 1 token, arriving
    at 0.5 s), on one client: simulated as three requests, then made pieces of two."""
    cost = LinearCostModel(1.0, 0.125, 0.5, 0.25, prefill_capacity=100)
    # The continuation arrives when the first piece ends, so that it runs after it.
    plain = simulate(Workload([10, 4, 12], [2, 1, 3], arrival=[0.0, 0.5, 3.75]), cost, 1)
    return replace(plain, workload=plain.workload.replace(arrival=[0.0, 0.5, 0.0]), request_parent=[0, 1, 0])


def test_a_preempted_request_has_the_hand_computed_figures() -> None:
    """Piece 0 prefills 10 tokens in [0, 2.25] and decodes at 3.0 and 3.75; request 1
    prefills in [3.75, 5.25] and decodes at 6.0; piece 2 recomputes 12 tokens in [6.0, 8.5]
    and decodes at 9.25, 10.0 and 10.75. Request 0's gaps are 0.75, 0.75, then 9.25 - 3.75 =
    5.5 across its preemption, then 0.75 twice: five gaps for five tokens."""
    s = _preempted()
    assert s.validate() == []
    assert (s.prefill_end.tolist(), s.finish.tolist()) == ([2.25, 5.25, 8.5], [3.75, 6.0, 10.75])
    assert s.requests.prompt_tokens.tolist() == [10, 4] and s.requests.output_tokens.tolist() == [5, 1]
    assert s.requests.arrival.tolist() == [0.0, 0.5]
    assert (s.first_piece.tolist(), s.last_piece.tolist(), s.previous_piece.tolist()) == (
        [0, 1],
        [2, 1],
        [-1, -1, 0],
    )
    assert s.ttft.tolist() == [2.25, 4.75] and s.latency.tolist() == s.e2e.tolist() == [10.75, 5.5]
    assert s.normalized_latency.tolist() == [10.75 / 5, 5.5]
    assert s.tbt_mean.tolist() == [(10.75 - 2.25) / 5, 0.75] and s.tbt_max.tolist() == [5.5, 0.75]
    assert (s.preemptions.tolist(), s.recomputed_tokens.tolist()) == ([1, 0], [12, 0])
    values, counts = s.tbt_distribution()
    assert (values.tolist(), counts.tolist()) == ([0.75, 5.5], [5, 1])
    assert s.meets_slo(slo_tbt=1.0).tolist() == [False, True]
    summary = s.summary(slo_tbt=1.0)
    assert (summary["requests"], summary["preemptions"], summary["recomputed_tokens"]) == (2, 1, 12)
    assert summary["tbt_mean_s"] == pytest.approx((5 * 0.75 + 5.5) / 6)
    assert summary["ttft_mean_s"] == 3.5 and summary["slo_attainment"] == 0.5
    assert summary["tokens_per_s"] == 6 / 10.75 and summary["utilization"] == 1.0
    assert repr(s).startswith("Schedule(requests=2, pieces=3, clients=1,")


def test_frames_of_a_preempted_request() -> None:
    """request_frame has a row per user request (placement of its first piece, finish of its
    last, its preemptions); piece_frame a row per piece with its parent and its own figures."""
    s = _preempted()
    frame = s.request_frame(slo_tbt=1.0)
    assert frame.index.name == "request" and len(frame) == 2
    placed = ["prompt_tokens", "output_tokens", "prefill_stage", "prefill_end", "finish"]
    assert frame[placed].values.tolist() == [[10, 5, 0, 2.25, 10.75], [4, 1, 2, 5.25, 6.0]]
    assert frame["tbt_max"].tolist() == [5.5, 0.75] and frame["meets_slo"].tolist() == [False, True]
    assert list(frame.columns)[-3:] == ["preemptions", "recomputed_tokens", "meets_slo"]
    assert frame["recomputed_tokens"].tolist() == [12, 0]
    pieces = s.piece_frame(slo_tbt=1.0)
    assert pieces.index.name == "piece" and pieces["parent"].tolist() == [0, 1, 0]
    assert pieces["prompt_tokens"].tolist() == [10, 4, 12] and pieces["prefill_stage"].tolist() == [0, 2, 4]
    assert pieces["ttft"].tolist() == [2.25, 4.75, 8.5] and pieces["tbt_max"].tolist() == [0.75] * 3
    assert pieces["meets_slo"].tolist() == [True] * 3  # each piece alone decodes at 0.75 s a token
    text = s.write_requests_csv()
    assert text is not None and text.splitlines()[0].startswith("request,prompt_tokens")
    assert len(text.splitlines()) == 3


def test_a_trace_names_pieces_by_their_request() -> None:
    """The trace shows each of a preempted request's pieces under the request's name, and
    each request's arrival once."""
    trace = _preempted().chrome_trace()
    slices = [e["name"] for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] != "stage"]
    assert slices == ["prefill r0", "decode r0", "prefill r1", "decode r1", "prefill r0", "decode r0"]
    assert [e["name"] for e in trace["traceEvents"] if e["ph"] == "i"] == ["arrive r0", "arrive r1"]
    assert trace["otherData"]["requests"] == 2
