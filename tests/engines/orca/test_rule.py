"""Orca's rule: whole prompts first come first served, then decoding requests, within the
token cap but for a first prompt that is longer (the decoding requests past the cap sit the
iteration out); its schedules are fused schedules with whole prompts, which the fused
validator checks."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmsched import LinearCostModel, Workload
from llmsched.engines.fusion.bounds import fused_lower_bounds
from llmsched.engines.fusion.rule import FusionRule
from llmsched.engines.fusion.schedule import FusedSchedule
from llmsched.engines.fusion.validate import validate_fused
from llmsched.engines.loop import CostClock, run_loop
from llmsched.engines.orca.rule import OrcaRule, most_iteration_tokens
from llmsched.online import FCFS

COST = LinearCostModel(0.02, 1e-4, 0.03, 2e-4, prefill_capacity=5000)


def run(workload: Workload, rule: object, clients: int = 8) -> FusedSchedule:
    schedule = run_loop(workload, COST, clients, FCFS(), None, CostClock(), False, rule)  # type: ignore[arg-type]
    assert isinstance(schedule, FusedSchedule)
    return schedule


def test_prompts_run_whole_and_a_long_one_runs_past_the_cap() -> None:
    """A 900-token prompt under a 256-token cap runs whole in one iteration; two 100-token
    prompts share one; each request has one chunk, its whole prompt."""
    workload = Workload([900, 100, 100], [4, 4, 4])
    schedule = run(workload, OrcaRule(256), clients=3)
    assert validate_fused(schedule) == []
    assert schedule.whole_prompts and schedule.info["batching"] == "orca"
    assert schedule.chunk_tokens.tolist() == [900, 100, 100]
    assert schedule.chunk_run.tolist() == [0, 1, 1]


def test_first_come_first_served_a_smaller_later_prompt_does_not_pass() -> None:
    """With 250 tokens of room, a 300-token prompt waits for the next iteration, and the
    50-token prompt behind it waits too."""
    workload = Workload([150, 300, 50], [10, 10, 10])
    schedule = run(workload, OrcaRule(400), clients=3)
    assert validate_fused(schedule) == []
    runs = dict(zip(schedule.chunk_request.tolist(), schedule.chunk_run.tolist(), strict=True))
    assert runs[0] < runs[1] <= runs[2]
    assert runs[1] == runs[2]  # they go together once the room is there


def test_the_validator_holds_a_split_prompt_and_two_prompts_over_the_cap_against_orca() -> None:
    """Marked whole_prompts, a chunked schedule (its chunks within the budget) breaks only the
    prompt rule; a run of two whole prompts over the cap breaks only the budget rule."""
    chunked = run(Workload([300, 20], [6, 6]), FusionRule(128), clients=2)
    assert validate_fused(chunked) == []
    rules = {v.rule for v in validate_fused(dataclasses.replace(chunked, whole_prompts=True))}
    assert rules == {"prompt"}
    orca = run(Workload([100, 100], [3, 3]), OrcaRule(256), clients=2)
    tight = dataclasses.replace(orca, token_budget=150)
    assert {v.rule for v in validate_fused(tight)} == {"budget"}


def test_the_validator_holds_decoding_beside_a_prompt_over_the_cap_and_an_idle_sit_out() -> None:
    """A whole prompt passes the cap only alone: beside decoding requests over the cap it
    breaks the budget rule alone. And requests decoding across a run they all sit out may not
    wait before it: an idle gap there breaks the timeline rule alone."""
    late = Workload([1] * 8 + [60], [50] * 8 + [5], arrival=[0.0] * 8 + [0.5])
    wide = run(late, OrcaRule(1000), clients=9)
    assert validate_fused(wide) == []
    for cap in (64, 20):  # 8 decoding + a 60-token prompt: over the cap, and the prompt alone over it
        assert {v.rule for v in validate_fused(dataclasses.replace(wide, token_budget=cap))} == {"budget"}
    alone = run(Workload([4, 4, 300], [30, 30, 5], arrival=[0.0, 0.0, 0.2]), OrcaRule(64), clients=3)
    assert validate_fused(alone) == [] and alone.skip_run.size == 2
    sat = int(alone.skip_run[0])
    assert int(alone.run_decoding[sat]) == 0  # both decoding requests sit the long prompt out
    start = alone.run_start.copy()
    start[sat:] += 5.0
    idle = dataclasses.replace(alone, run_start=start, makespan=alone.makespan + 5.0)
    assert {v.rule for v in validate_fused(idle)} == {"timeline"}


@st.composite
def orca_cases(draw: st.DrawFn, longest: int) -> tuple[Workload, int, int]:
    """Up to 25 requests of prompts up to ``longest`` tokens arriving in bursts, a cap and
    the clients."""
    prompts = draw(st.lists(st.integers(1, longest), min_size=1, max_size=25))
    n = len(prompts)
    output = draw(st.lists(st.integers(1, 30), min_size=n, max_size=n))
    arrival = draw(st.lists(st.sampled_from([0.0, 0.1, 0.7, 2.0]), min_size=n, max_size=n))
    return Workload(prompts, output, arrival=arrival), draw(st.integers(2, 600)), draw(st.integers(1, 12))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(orca_cases(500))
def test_every_orca_schedule_validates(case: tuple[Workload, int, int]) -> None:
    """Every schedule validates; each prompt is one chunk; an iteration with two or more
    prompts keeps within the cap with its decoding requests."""
    workload, cap, clients = case
    n = len(workload)
    schedule = run(workload, OrcaRule(cap), clients)
    assert validate_fused(schedule) == []
    assert np.bincount(schedule.chunk_request).tolist() == [1] * n
    per_run = np.bincount(schedule.chunk_run, minlength=schedule.num_runs)
    shared = per_run >= 2
    assert np.all(schedule.run_decoding[shared] + schedule.run_chunk_tokens[shared] <= cap)
    # No makespan below the fused bound at the most tokens an Orca iteration carries.
    most = most_iteration_tokens(cap, schedule.workload)
    assert int((schedule.run_decoding + schedule.run_chunk_tokens).max()) <= most
    bound = fused_lower_bounds(schedule.workload, COST, clients, most).strong
    assert schedule.makespan >= bound * (1 - 1e-9)


def test_a_whole_prompt_beside_decoding_beyond_a_tables_range_is_refused_before_any_work() -> None:
    """A measured table prices a mixed iteration from its prompt curve at the prompt's and the
    decoding requests' tokens: a longest prompt at the table's edge, beside the decoding
    requests that fill the cap with it, is past it, and the check says so before the run;
    past the cap it runs alone, within the table."""
    import pytest

    from llmsched import TableCostModel

    table = TableCostModel([100, 1000], [0.05, 0.2], [1, 8], [0.03, 0.04], mixed_factor=1.1)
    with pytest.raises(ValueError, match=r"TableCostModel gave .* = inf"):
        run_loop(Workload([1000, 10], [5, 5]), table, 8, FCFS(), None, CostClock(), False, OrcaRule(1200))
    for cap in (512, 1000):
        schedule = run_loop(
            Workload([1000, 10], [5, 5]), table, 8, FCFS(), None, CostClock(), False, OrcaRule(cap)
        )
        assert validate_fused(schedule) == []


def test_decoding_requests_past_the_cap_sit_out_the_last_joined_first() -> None:
    """Three requests decode when a 254-token prompt arrives under a 256-token cap: two
    decode beside it, the last to join sits out and finishes an iteration later; when a
    second long prompt arrives at once, the one that sat out decodes first, and the rest
    (the first long prompt's request, now decoding, among them) sit out."""
    workload = Workload([10, 10, 10, 254, 255], [30, 30, 30, 5, 5], arrival=[0, 0, 0, 0.5, 0.5])
    schedule = run(workload, OrcaRule(256), clients=5)
    assert validate_fused(schedule) == []
    assert schedule.skip_request.size
    first_out = schedule.skip_run.argmin()
    out_run = int(schedule.skip_run[first_out])
    # The 254-token prompt's iteration: room for two, the third request sits out.
    assert schedule.chunk_run[schedule.chunk_request == 3].tolist() == [out_run]
    assert schedule.run_decoding[out_run] == 2
    assert schedule.skip_request[schedule.skip_run == out_run].tolist() == [2]
    # Next, the 255-token prompt alone with one decoding request: the one that sat out.
    next_run = int(schedule.chunk_run[schedule.chunk_request == 4][0])
    assert next_run == out_run + 1 and schedule.run_decoding[next_run] == 1
    assert schedule.skip_request[schedule.skip_run == next_run].tolist() == [0, 1, 3]  # batch order
    # Each decodes its output tokens: a range longer by the iterations it sat out.
    lengths = schedule.request_decode_end - schedule.request_decode_start
    assert (lengths - schedule.request_sat_out).tolist() == workload.output_tokens.tolist()
    assert schedule.request_sat_out.tolist() == [1, 1, 1, 1, 0]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(orca_cases(700))
def test_sit_outs_fill_the_cap_and_the_gaps_add_up(case: tuple[Workload, int, int]) -> None:
    """A request sits out only an iteration whose prompts and decoding requests fill the cap
    (or whose one prompt passes it alone); each decodes its output; the gaps between tokens
    number the tokens and add up to each request's decode time."""
    workload, cap, clients = case
    schedule = run(workload, OrcaRule(cap), clients)
    assert validate_fused(schedule) == []
    full = schedule.run_decoding + schedule.run_chunk_tokens >= cap
    alone = (schedule.run_decoding == 0) & (schedule.run_chunk_tokens > 0)
    assert np.all((full | alone)[schedule.skip_run])
    values, counts = schedule.tbt_distribution()
    assert counts.sum() == schedule.workload.output_tokens.sum()
    decode_time = schedule.finish - schedule.prefill_end
    assert np.isclose((values * counts).sum(), decode_time.sum(), rtol=1e-9)
    assert np.allclose(schedule.tbt_mean * schedule.workload.output_tokens, decode_time, rtol=1e-9)


def test_a_request_preempted_right_after_sitting_out_ends_with_its_last_token() -> None:
    """Request 1 decodes, sits an iteration out, and is preempted for memory: its first piece
    ends with its last token (the iteration it sat out is not its), and the schedule validates."""
    from llmsched.core.memory import KVMemory
    from llmsched.engines.batching import batching_rule

    workload = Workload([2, 1, 2], [4, 4, 1], arrival=[0, 0, 0.03])
    rule = batching_rule("orca", 3, memory=KVMemory(10, block_size=1, watermark=0.0))
    schedule = run(workload, rule, clients=4)
    assert validate_fused(schedule) == []
    assert schedule.request_parent is not None and schedule.request_parent.tolist().count(1) == 2
    ends = schedule.iteration_end_at(np.arange(schedule.num_iterations))
    last = schedule.request_decode_end[1] - 1
    assert last not in schedule.run_first_iteration[schedule.skip_run[schedule.skip_request == 1]]
    assert schedule.finish[1] == ends[last]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prompts=st.lists(st.integers(1, 12), min_size=2, max_size=20),
    outputs=st.data(),
    cap=st.integers(2, 16),
    clients=st.integers(1, 8),
    blocks=st.integers(0, 30),
)
def test_sit_outs_under_tight_memory_validate_and_lose_no_token(
    prompts: list[int], outputs: st.DataObject, cap: int, clients: int, blocks: int
) -> None:
    """Tight KV-cache memory (blocks of one token) preempts requests that sit iterations out:
    every schedule validates, each user request makes all its tokens, and its gaps add up to
    its decode time."""
    from llmsched.core.memory import KVMemory
    from llmsched.engines.batching import batching_rule

    n = len(prompts)
    output = outputs.draw(st.lists(st.integers(1, 20), min_size=n, max_size=n))
    arrival = outputs.draw(st.lists(st.sampled_from([0.0, 0.03, 0.1]), min_size=n, max_size=n))
    workload = Workload(prompts, output, arrival=arrival)
    most = min(clients, n)
    memory = KVMemory(
        max(prompts[i] + output[i] for i in range(n)) + most + blocks, block_size=1, watermark=0.0
    )
    schedule = run(workload, batching_rule("orca", cap, memory=memory), clients)
    assert validate_fused(schedule) == []
    users = schedule.requests
    assert users.output_tokens.tolist() == output
    values, counts = schedule.tbt_distribution()
    assert counts.sum() == sum(output)
    first = schedule.first_piece
    last = schedule.last_piece
    decode_time = schedule.finish[last] - schedule.prefill_end[first]
    assert np.isclose((values * counts).sum(), decode_time.sum(), rtol=1e-9)
