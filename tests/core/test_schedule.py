"""What every schedule offers: the latency and goodput figures from per-request times, and the
contract (ScheduleLike) that a schedule of every mode and a fleet meet alike."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from llmsched.core.schedule import (
    REQUEST_COLUMNS,
    STAGE_COLUMNS,
    SUMMARY_KEYS,
    ScheduleLike,
    goodput_figures,
    latency_figures,
    percentiles,
)


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
