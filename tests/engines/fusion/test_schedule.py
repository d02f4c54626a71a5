"""The fused mode's core (:mod:`llmsched.engines.fusion.schedule`): the helpers the validator's
tests build on, and the schedule contract (:class:`~llmsched.core.schedule.ScheduleLike`) as
a fused schedule meets it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from llmsched.core.schedule import ScheduleLike
from llmsched.engines.fusion.schedule import FusedSchedule
from llmsched.engines.fusion.validate import validate_fused
from llmsched.online.simulate import simulate_fusion
from tests.engines.fusion.test_rule import PAPER, _workload


def _valid() -> FusedSchedule:
    s = simulate_fusion(_workload(30, 2), PAPER, 6, "fcfs", token_budget=200)
    assert validate_fused(s) == []
    return s


def _rules(s: FusedSchedule) -> set[str]:
    return {v.rule for v in validate_fused(s)}


def _decode_run(s: FusedSchedule, multi: bool = False) -> int:
    """A run in the middle with decoding only (and several iterations when ``multi``)."""
    runs = np.flatnonzero(
        (s.run_decoding > 0) & (s.run_chunk_tokens == 0) & (~multi | (s.run_iterations > 1))
    )
    return int(runs[len(runs) // 2])


def _set(arr: np.ndarray, index: int, value: object) -> np.ndarray:
    out = arr.copy()
    out[index] = value
    return out


# ------------------------------------------------------------ the contract every schedule meets
def test_a_fused_schedule_is_schedule_like() -> None:
    """One engine (machine 0) whose runs are its stages: the contract's members, and the
    competition schedule's names for the runs' times."""
    s = _valid()
    assert isinstance(s, ScheduleLike) and s.mode == "fusion" and s.validate() == []
    assert s.machines == 1 and s.request_machine.tolist() == [0] * len(s.workload)
    assert s.run_iteration_time is s.run_first_time and s.run_iteration_step is s.run_step
    assert s.prefill_stages == 0
    assert (
        s.decode_iterations
        == int(s.run_iterations[s.run_decoding > 0].sum())
        == s.summary()["decode_iterations"]
    )


def test_validate_takes_the_validators_arguments() -> None:
    """validate(skip=...) is validate_fused(skip=...): a slower run breaks stage_time alone."""
    s = _valid()
    last = _decode_run(s)
    slow = replace(s, run_first_time=_set(s.run_first_time, last, s.run_first_time[last] * 1.5))
    assert {v.rule for v in slow.validate()} >= {"stage_time"}
    assert slow.validate(skip=["stage_time", "timeline", "makespan"]) == validate_fused(
        slow, skip=["stage_time", "timeline", "makespan"]
    )


def test_iterations_start_where_the_one_before_ends() -> None:
    """Within a run each iteration starts where the one before ended and lasts the run's first
    iteration time plus its step per iteration before it; a request's first decode iteration
    starts when its last chunk's ends (its first token); outside the schedule: NaN."""
    s = _valid()
    g = np.arange(s.num_iterations)
    starts, ends = s.iteration_start_at(g), s.iteration_end_at(g)
    run = np.repeat(np.arange(s.num_runs), s.run_iterations)
    inside = run[1:] == run[:-1]
    assert inside.any()
    np.testing.assert_allclose(starts[1:][inside], ends[:-1][inside], rtol=1e-12)
    offset = g - s.run_first_iteration[run]
    np.testing.assert_allclose(ends - starts, s.run_first_time[run] + s.run_step[run] * offset, rtol=1e-9)
    np.testing.assert_allclose(s.iteration_start_at(s.request_decode_start), s.prefill_end, rtol=1e-12)
    assert np.isnan(s.iteration_start_at([-1, s.num_iterations])).all()


def test_the_stage_frame_is_the_runs() -> None:
    """One row per run: its kind from what it carries, its tokens the chunks' plus one per
    decoding request and iteration, its requests the decoding ones and the chunks'."""
    s = _valid()
    frame = s.stage_frame()
    assert len(frame) == s.num_runs and frame["end"].tolist() == s.run_end.tolist()
    chunks = np.bincount(s.chunk_run, minlength=s.num_runs)
    kinds = np.where(
        (s.run_chunk_tokens > 0) & (s.run_decoding > 0),
        "fused",
        np.where(s.run_chunk_tokens > 0, "prefill", "decode"),
    )
    assert frame["kind"].tolist() == kinds.tolist() and {"fused", "prefill", "decode"} <= set(kinds)
    assert frame["tokens"].tolist() == (s.run_chunk_tokens + s.run_decoding * s.run_iterations).tolist()
    assert frame["requests"].tolist() == (s.run_decoding + chunks).tolist()
    assert frame["tokens"].sum() == s.workload.total_prompt_tokens + s.workload.total_output_tokens


def test_request_frame_and_summary_judge_the_targets_alike() -> None:
    """meets_slo (TTFT and mean gap within the targets) is request_frame's column, and the
    summary's goodput counts it; the targets echo as numbers."""
    s = _valid()
    meets = (s.ttft <= 0.3) & (s.tbt_mean <= 0.035)
    assert 0 < meets.sum() < len(s.workload)
    assert s.meets_slo(0.3, 0.035).tolist() == meets.tolist()
    assert s.request_frame(slo_ttft=0.3, slo_tbt=0.035)["meets_slo"].tolist() == meets.tolist()
    summary = s.summary(slo_ttft=0.3, slo_tbt=0.035)
    assert summary["goodput_rps"] == meets.sum() / s.makespan
    assert (summary["slo_ttft_s"], summary["slo_tbt_s"]) == (0.3, 0.035)
    assert s.summary(slo_ttft=1)["slo_ttft_s"] == 1.0 and isinstance(
        s.summary(slo_ttft=1)["slo_ttft_s"], float
    )


# ------------------------------------------------------- pieces: a request preempted by recompute
def test_a_preempted_request_has_the_hand_computed_figures() -> None:
    """Request 0 (prompt 10, 5 tokens) preempted after 2 tokens and recomputed around request 1
    (prompt 4, 1 token, arriving at 0.5 s) on one client, simulated as three requests then
    made pieces of two. Each prompt is one chunk iteration (1 + 0.125 per token s), each
    decode iteration 0.75 s: piece 0's first token at 2.25, its last at 3.75; request 1's at
    5.25 and 6.0; piece 2 recomputes 12 tokens to 8.5 and decodes to 10.75. Request 0's gaps
    are 0.75, 0.75, then 9.25 - 3.75 = 5.5 across its preemption, then 0.75 twice."""
    from llmsched import LinearCostModel, Workload

    cost = LinearCostModel(1.0, 0.125, 0.5, 0.25, prefill_capacity=100)
    plain = simulate_fusion(Workload([10, 4, 12], [2, 1, 3], arrival=[0.0, 0.5, 3.75]), cost, 1, "fcfs", 64)
    s = replace(plain, workload=plain.workload.replace(arrival=[0.0, 0.5, 0.0]), request_parent=[0, 1, 0])
    assert s.validate() == []
    assert (s.prefill_end.tolist(), s.finish.tolist()) == ([2.25, 5.25, 8.5], [3.75, 6.0, 10.75])
    assert s.requests.output_tokens.tolist() == [5, 1] and s.requests.arrival.tolist() == [0.0, 0.5]
    assert s.ttft.tolist() == [2.25, 4.75] and s.latency.tolist() == [10.75, 5.5]
    assert s.tbt_mean.tolist() == [(10.75 - 2.25) / 5, 0.75]
    assert (s.preemptions.tolist(), s.recomputed_tokens.tolist()) == ([1, 0], [12, 0])
    values, counts = s.tbt_distribution()
    assert (values.tolist(), counts.tolist()) == ([0.75, 5.5], [5, 1])
    # Without pieces the same runs hold six gaps of 0.75 s: piece 2's first gap is its own.
    plain_values, plain_counts = plain.tbt_distribution()
    assert set(plain_values.tolist()) == {0.75} and plain_counts.sum() == 6
    summary = s.summary(slo_ttft=3.0)
    assert (summary["requests"], summary["preemptions"], summary["recomputed_tokens"]) == (2, 1, 12)
    assert summary["slo_attainment"] == 0.5 and s.meets_slo(slo_ttft=3.0).tolist() == [True, False]
    frame = s.request_frame()
    assert frame["finish"].tolist() == [10.75, 6.0] and frame["preemptions"].tolist() == [1, 0]
    assert s.piece_frame()["parent"].tolist() == [0, 1, 0]
    assert repr(s).startswith("FusedSchedule(requests=2, pieces=3, clients=1,")
    trace = s.chrome_trace()
    slices = [e["name"] for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] != "stage"]
    assert slices == ["prefill r0", "decode r0", "prefill r1", "decode r1", "prefill r0", "decode r0"]
    assert [e["name"] for e in trace["traceEvents"] if e["ph"] == "i"] == ["arrive r0", "arrive r1"]
