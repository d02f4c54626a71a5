"""What every schedule offers: the latency and goodput figures from per-request times, the
contract (ScheduleLike) that a schedule of every mode and a fleet meet alike, and the user
requests' figures of a schedule over pieces (requests preempted by recompute)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsched import LevelCostModel, Workload, simulate, simulate_fusion
from llmsched.core.schedule import (
    REQUEST_COLUMNS,
    STAGE_COLUMNS,
    SUMMARY_KEYS,
    ScheduleLike,
    goodput_figures,
    latency_figures,
    percentiles,
    replace_gaps,
)
from tests.strategies import cost_models, instances


def test_latency_figures_are_the_means_and_percentiles_of_each_series() -> None:
    """TTFT and latency figures are their means and p50/p90/p99; TBT is weighted by counts."""
    ttft = np.array([1.0, 2.0, 3.0, 4.0])
    latency = np.array([10.0, 20.0, 30.0, 40.0])
    figures = latency_figures(ttft, latency, np.array([0.1, 0.3]), np.array([3, 1]))
    assert figures["ttft_mean_s"] == 2.5 and figures["latency_mean_s"] == 25.0
    assert figures["e2e_p50_s"] == figures["latency_p50_s"] == pytest.approx(np.percentile(latency, 50))
    assert [figures[f"ttft_p{q}_s"] for q in (50, 90, 99)] == percentiles(ttft)
    assert figures["tbt_mean_s"] == pytest.approx(0.15)
    assert figures["tbt_p50_s"] == pytest.approx(0.1)


def test_latency_figures_without_gaps_report_zero_tbt() -> None:
    """A run in which no request decodes a second token has no gaps: TBT figures are 0."""
    figures = latency_figures(np.array([1.0]), np.array([1.0]), np.array([]), np.array([], dtype=np.int64))
    assert figures["tbt_mean_s"] == figures["tbt_p99_s"] == 0.0


def test_goodput_counts_requests_meeting_the_targets_per_second() -> None:
    """Three of four requests meeting their targets over 2 s is 1.5 good requests a second."""
    figures = goodput_figures(np.array([True, True, False, True]), 2.0, 0.5, None)
    assert figures == {
        "requests_per_s": 2.0,
        "goodput_rps": 1.5,
        "slo_attainment": 0.75,
        "slo_ttft_s": 0.5,
        "slo_tbt_s": None,
    }
    assert goodput_figures(np.array([True]), 0.0, None, None)["goodput_rps"] == 0.0


# ---------------------------------------------------------------- the contract every mode meets
def _one_of_each() -> dict[str, Any]:
    """A schedule of each mode and a fleet, all of one workload with arrivals."""
    from llmsched import (
        Backoff,
        DisaggregatedCluster,
        Engine,
        LinearCostModel,
        Workload,
        simulate,
        simulate_disaggregated,
        simulate_fleet,
        simulate_fusion,
    )

    paper = LinearCostModel.paper()
    rng = np.random.default_rng(5)
    work = Workload(rng.integers(5, 900, 40), rng.integers(1, 80, 40), arrival=np.sort(rng.uniform(0, 4, 40)))
    return {
        "competition": simulate(work, paper, 6, "fcfs", "lagrangian"),
        "fusion": simulate_fusion(work, paper, 6, "fcfs", token_budget=256),
        "disaggregated": simulate_disaggregated(
            work, DisaggregatedCluster(1, 2, paper, paper, 4, 2.6e6, 25.0)
        ),
        "fleet": simulate_fleet(work, [Engine(paper, 4), Engine(paper, 3, mode="fusion")], "jsq", Backoff()),
    }


@pytest.fixture(scope="module")
def every_mode() -> dict[str, Any]:
    return _one_of_each()


def test_every_schedule_class_meets_the_contract(every_mode) -> None:
    """A schedule of each mode and a fleet are ScheduleLike and say which mode they are; a
    workload is not a schedule."""
    from llmsched import Workload

    for mode, schedule in every_mode.items():
        assert isinstance(schedule, ScheduleLike), mode
        assert schedule.mode == mode and schedule.validate() == []
    assert not isinstance(Workload([1], [1]), ScheduleLike)


def test_summaries_have_the_same_keys_with_one_meaning(every_mode) -> None:
    """Every summary holds every key of SUMMARY_KEYS, and those keys are the schedule's own
    figures: the latency and goodput figures, the machines and clients, the makespan."""
    for mode, s in every_mode.items():
        summary = s.summary(slo_ttft=0.5, slo_tbt=0.05)
        assert set(SUMMARY_KEYS) <= set(summary), (mode, set(SUMMARY_KEYS) - set(summary))
        assert summary["mode"] == mode and summary["requests"] == len(s.workload)
        assert (summary["machines"], summary["clients"]) == (s.machines, s.clients)
        assert (summary["makespan_s"], summary["utilization"], summary["tokens_per_s"]) == (
            s.makespan,
            s.utilization,
            s.tokens_per_s,
        )
        assert 0 < summary["utilization"] <= 1
        assert s.latency_figures().items() <= summary.items()
        assert s.goodput_figures(0.5, 0.05).items() <= summary.items()
        meets = s.meets_slo(0.5, 0.05)
        assert summary["slo_attainment"] == np.count_nonzero(meets) / len(s.workload)
        assert summary["normalized_latency_p50_s"] == pytest.approx(np.percentile(s.normalized_latency, 50))
    machines = {mode: s.summary()["machines"] for mode, s in every_mode.items()}
    assert machines == {"competition": 1, "fusion": 1, "disaggregated": 3, "fleet": 2}


def test_request_frames_share_their_columns(every_mode) -> None:
    """Every request frame has the workload's columns, then REQUEST_COLUMNS in that order among
    the mode's own, each holding the schedule's arrays."""
    for mode, s in every_mode.items():
        frame = s.request_frame(slo_ttft=0.5)
        columns = list(frame.columns)
        assert columns[:3] == ["prompt_tokens", "output_tokens", "arrival"], mode
        assert [c for c in columns if c in REQUEST_COLUMNS] == list(REQUEST_COLUMNS), mode
        assert frame.index.name == "request" and columns[-1] == "meets_slo"
        assert frame["machine"].tolist() == s.request_machine.tolist()
        assert frame["client"].tolist() == s.request_client.tolist()
        assert frame["meets_slo"].tolist() == s.meets_slo(slo_ttft=0.5).tolist()
        np.testing.assert_array_equal(frame["ttft"], s.prefill_end - s.workload.arrival)
        np.testing.assert_array_equal(frame["e2e"], s.finish - s.workload.arrival)
        assert ((s.request_machine >= 0) & (s.request_machine < s.machines)).all()


def test_stage_frames_lead_with_the_same_columns(every_mode) -> None:
    """Every stage frame starts with STAGE_COLUMNS; its prefill, decode and fused rows carry
    every prompt and output token once; its machines exist and its durations are end - start."""
    for mode, s in every_mode.items():
        frame = s.stage_frame()
        assert tuple(frame.columns[: len(STAGE_COLUMNS)]) == STAGE_COLUMNS, mode
        assert frame.index.name == "stage" and frame.index.tolist() == list(range(len(frame)))
        assert set(frame["kind"]) <= {"prefill", "decode", "fused", "transfer", "pull"}
        np.testing.assert_array_equal(frame["duration"], frame["end"] - frame["start"])
        assert frame["machine"].between(0, s.machines - 1).all()
        work = frame[frame["kind"].isin(["prefill", "decode", "fused"])]
        assert work["tokens"].sum() == s.workload.total_prompt_tokens + s.workload.total_output_tokens
        assert work["end"].max() == pytest.approx(s.makespan)


def test_the_run_tables_agree_on_when_runs_end(every_mode) -> None:
    """In each engine mode a run's last iteration ends at its ``run_end``, the first iteration
    time has one value under both names, and an iteration outside the schedule has no time;
    a single engine runs every request on machine 0."""
    for mode in ("competition", "fusion", "disaggregated"):
        s = every_mode[mode]
        assert s.num_runs == s.run_start.size > 0, mode
        np.testing.assert_array_equal(s.run_iteration_time, s.run_first_time)
        last = s.run_first_iteration + s.run_iterations - 1
        if mode == "disaggregated":
            np.testing.assert_allclose(s.iteration_end_on(s.run_machine, last), s.run_end, rtol=1e-12)
        else:
            np.testing.assert_allclose(s.iteration_end_at(last), s.run_end, rtol=1e-12)
            assert np.isnan(s.iteration_start_at([-1, s.num_iterations])).all()
            assert s.machines == 1 and not s.request_machine.any()


def test_every_mode_refuses_a_bad_target_alike(every_mode) -> None:
    """summary, request_frame and meets_slo refuse a target that is not a number > 0, with
    the same message in every mode."""
    for s in every_mode.values():
        for method in (s.summary, s.request_frame, s.meets_slo):
            with pytest.raises(ValueError, match=r"slo_ttft must be a number > 0 \(inf allowed\), got 0"):
                method(slo_ttft=0)
            with pytest.raises(TypeError, match="slo_tbt must be a number > 0"):
                method(slo_tbt="0.1")


def test_validate_is_the_mode_validator(every_mode) -> None:
    """A schedule's validate() reports what its mode's validator reports, for a broken one too."""
    from dataclasses import replace

    from llmsched import validate, validate_disaggregated, validate_fleet, validate_fused

    validators = {
        "competition": validate,
        "fusion": validate_fused,
        "disaggregated": validate_disaggregated,
        "fleet": validate_fleet,
    }
    for mode, s in every_mode.items():
        broken = replace(s, workload=s.workload.replace(output_tokens=s.workload.output_tokens + 1))
        if mode == "fleet":
            broken = replace(s, request_reached=s.request_reached - 1.0)
        assert broken.validate() == validators[mode](broken) != [], mode


# ------------------------------------------------------- pieces: requests preempted by recompute
# A schedule over pieces is built here by simulating the pieces as requests of their own, each
# round of continuations arriving long after the round before has finished (so that a request's
# pieces run one after the other, as preemption makes them), then giving every piece its user
# request's arrival and naming its user request in ``request_parent``.
ROUND_GAP = 1e4  # seconds: beyond any makespan of the small instances drawn below


@st.composite
def pieces_instances(draw: st.DrawFn) -> tuple[Workload, np.ndarray, Any, int, str]:
    """A pieces workload, each piece's user request, a cost model, clients and a mode."""
    mode = draw(st.sampled_from(["competition", "fusion"]))
    # Room for a prompt and its recomputed tokens in a prefill; fusion prices chunks by tokens.
    fits = cost_models().filter(lambda c: c.prefill_capacity >= 100)
    cost = draw(fits if mode == "competition" else fits.filter(lambda c: not isinstance(c, LevelCostModel)))
    users = draw(st.integers(1, 6))
    prompt, parts, arrival = [], [], []
    for _ in range(users):
        prompt.append(draw(st.integers(1, 40)))
        # The output split among 1 to 3 pieces of at least one token each.
        pieces = draw(st.lists(st.integers(1, 15), min_size=1, max_size=3))
        parts.append(pieces)
        arrival.append(draw(st.sampled_from([0.0, 0.25, 2.0])))
    rows: list[tuple[int, int, int, float, int]] = []  # prompt, output, user, arrival, round
    for r in range(3):
        for u in range(users):
            if r < len(parts[u]):
                recomputed = sum(parts[u][:r])
                rows.append((prompt[u] + recomputed, parts[u][r], u, arrival[u] + r * ROUND_GAP, r))
    work = Workload([row[0] for row in rows], [row[1] for row in rows], arrival=[row[3] for row in rows])
    parent = np.array([row[2] for row in rows], dtype=np.int64)
    return work, parent, cost, draw(st.integers(1, 4)), mode


def _pieces_schedule(work: Workload, parent: np.ndarray, cost: Any, clients: int, mode: str) -> Any:
    """The simulated schedule of the pieces, with the user requests' arrivals and parents."""
    if mode == "fusion":
        plain = simulate_fusion(work, cost, clients, "fcfs", token_budget=64)
    else:
        plain = simulate(work, cost, clients, "fcfs")
    first = np.array([np.flatnonzero(parent == u)[0] for u in parent], dtype=np.int64)
    users_arrival = work.replace(arrival=work.arrival[first])
    return replace(plain, workload=users_arrival, request_parent=parent)


def _token_times(s: Any, piece: int) -> np.ndarray:
    """When each token of a piece came: its prefill's end, then each decode iteration's end."""
    iterations = np.arange(s.request_decode_start[piece], s.request_decode_end[piece])
    return np.concatenate([[s.prefill_end[piece]], s.iteration_end_at(iterations)])


@settings(max_examples=40)
@given(pieces_instances())
def test_user_figures_of_a_schedule_with_pieces_are_the_hand_computed_ones(case) -> None:
    """Over pieces, each user request's TTFT runs to its first piece's prefill end, its
    latency to its last piece's finish; its gaps are its pieces' tokens one after the other
    (a later piece's recompute makes no token), as many as its output tokens; preemptions
    and recomputed tokens count its later pieces and their prompts; the summary is over
    user requests."""
    work, parent, cost, clients, mode = case
    s = _pieces_schedule(work, parent, cost, clients, mode)
    assert s.validate() == []
    users = int(parent.max()) + 1
    pieces_of = [np.flatnonzero(parent == u) for u in range(users)]
    first = np.array([p[0] for p in pieces_of])
    last = np.array([p[-1] for p in pieces_of])
    output = np.array([work.output_tokens[p].sum() for p in pieces_of])
    arrival = work.arrival[first]

    assert s.first_piece.tolist() == first.tolist() and s.last_piece.tolist() == last.tolist()
    assert s.requests.prompt_tokens.tolist() == work.prompt_tokens[first].tolist()
    assert s.requests.output_tokens.tolist() == output.tolist()
    assert s.preemptions.tolist() == [p.size - 1 for p in pieces_of]
    assert s.recomputed_tokens.tolist() == [int(work.prompt_tokens[p[1:]].sum()) for p in pieces_of]
    np.testing.assert_array_equal(s.ttft, s.prefill_end[first] - arrival)
    np.testing.assert_array_equal(s.latency, s.finish[last] - arrival)
    np.testing.assert_array_equal(s.normalized_latency, (s.finish[last] - arrival) / output)
    spans = s.finish[last] - s.prefill_end[first]
    np.testing.assert_allclose(s.tbt_mean, spans / output, rtol=1e-12)

    # Every gap, token by token: each user request's token times in piece order, less the
    # first token of each later piece (its recompute's end, which is no token).
    gaps = []
    for pieces in pieces_of:
        times = np.concatenate([_token_times(s, p)[int(k > 0) :] for k, p in enumerate(pieces)])
        assert times.size == work.output_tokens[pieces].sum() + 1
        gaps.append(np.diff(times))
    values, counts = s.tbt_distribution()
    assert counts.sum() == work.total_output_tokens == s.requests.total_output_tokens
    assert (counts > 0).all()
    every_gap = np.sort(np.repeat(values, counts))
    np.testing.assert_allclose(every_gap, np.sort(np.concatenate(gaps)), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose((values * counts).sum(), spans.sum(), rtol=1e-9)
    if mode == "competition":
        np.testing.assert_allclose(s.tbt_max, [g.max() for g in gaps], rtol=1e-9, atol=1e-9)

    summary = s.summary()
    assert summary["requests"] == users and summary["tokens_per_s"] == s.tokens_per_s
    assert (summary["preemptions"], summary["recomputed_tokens"]) == (
        int(s.preemptions.sum()),
        int(s.recomputed_tokens.sum()),
    )
    assert summary["ttft_p50_s"] == percentiles(s.ttft)[0]
    assert summary["slo_attainment"] == 1.0 and s.meets_slo(slo_ttft=np.inf).size == users
    frame = s.request_frame()
    assert len(frame) == users and frame["finish"].tolist() == s.finish[last].tolist()
    assert frame["client"].tolist() == s.request_client[first].tolist()
    assert frame["preemptions"].tolist() == s.preemptions.tolist()
    pieces = s.piece_frame()
    assert pieces.index.name == "piece" and pieces["parent"].tolist() == parent.tolist()
    np.testing.assert_array_equal(pieces["finish"], s.finish)


@settings(max_examples=25)
@given(instances(), st.sampled_from(["competition", "fusion"]))
def test_one_piece_per_request_changes_nothing(case, mode) -> None:
    """A schedule whose every piece is its own user request (``request_parent`` the identity)
    has every figure of the same schedule without ``request_parent``, bit for bit; its
    piece frame is its request frame with a ``parent`` column."""
    work, cost, clients = case
    if mode == "fusion":
        if isinstance(cost, LevelCostModel):
            return
        plain = simulate_fusion(work, cost, clients, "fcfs", token_budget=64)
    else:
        plain = simulate(work, cost, clients, "fcfs")
    same = replace(plain, request_parent=np.arange(len(work)))
    assert plain.requests is plain.workload and same.requests.total_output_tokens == work.total_output_tokens
    figures = ("ttft", "latency", "e2e", "normalized_latency", "tbt_mean", "preemptions", "recomputed_tokens")
    for name in figures:
        np.testing.assert_array_equal(getattr(same, name), getattr(plain, name), err_msg=name)
    for got, want in zip(same.tbt_distribution(), plain.tbt_distribution(), strict=True):
        np.testing.assert_array_equal(got, want)
    assert same.summary(slo_ttft=1.0) == pytest.approx(plain.summary(slo_ttft=1.0), nan_ok=True)
    assert plain.summary()["preemptions"] == plain.summary()["recomputed_tokens"] == 0
    frame = plain.request_frame(slo_tbt=0.05)
    assert "preemptions" not in frame  # a schedule without pieces keeps the columns it had
    with_pieces = same.request_frame(slo_tbt=0.05)
    pd.testing.assert_frame_equal(with_pieces.drop(columns=["preemptions", "recomputed_tokens"]), frame)
    piece_frame = plain.piece_frame(slo_tbt=0.05)
    assert piece_frame["parent"].tolist() == list(range(len(work)))
    pd.testing.assert_frame_equal(piece_frame.drop(columns="parent").rename_axis("request"), frame)


def test_piece_parents_are_checked_for_their_shape() -> None:
    """request_parent holds one non-negative integer per piece, and numbers the user requests
    0 .. U-1 with a piece each; it is kept read-only as int64; memory is a KVMemory."""
    from llmsched import LinearCostModel
    from llmsched.core.memory import KVMemory

    s = simulate(Workload([4, 5, 6], [2, 2, 2]), LinearCostModel.paper(), 2)
    parent = replace(s, request_parent=[1, 0, 1]).request_parent
    assert parent.dtype == np.int64 and not parent.flags.writeable
    assert replace(s, memory=KVMemory(64)).memory == KVMemory(64)
    cases = [
        ([0.0, 1.0, 1.0], TypeError, "must hold integers"),
        ([[0, 1, 2]], ValueError, "one-dimensional"),
        ([0, 1], ValueError, "2 entries for 3 pieces"),
        ([0, -1, 1], ValueError, "holds -1"),
        ([0, 3, 1], ValueError, "3 pieces make at most 3 user requests"),
        ([0, 2, 2], ValueError, "skips user request 1"),
    ]
    for values, error, message in cases:
        with pytest.raises(error, match=message):
            replace(s, request_parent=values)
    with pytest.raises(TypeError, match="must be a KVMemory or None, got int"):
        replace(s, memory=64)


def test_replace_gaps_moves_one_count_per_gap() -> None:
    """Taking away one count of an old gap and adding a new one keeps every other count, merges
    a new gap into an equal value, and drops a value whose count falls to 0."""
    values, counts = np.array([0.5, 0.75, 2.0]), np.array([3, 1, 2])
    got_values, got_counts = replace_gaps(values, counts, np.array([0.75, 0.5]), np.array([2.0, 9.0]))
    assert got_values.tolist() == [0.5, 2.0, 9.0] and got_counts.tolist() == [2, 3, 1]
    assert not got_values.flags.writeable and not got_counts.flags.writeable
