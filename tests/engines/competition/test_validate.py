"""Tests of ``llmsched.validate``: a valid schedule passes, and each rule catches its own breakage.

The base schedule is simulated with a one-level ``LevelCostModel`` (every prefill stage takes
1.0 s whatever its tokens, every decode iteration 0.5 s whatever the batch), so a test can break
one rule of the system model without breaking another. Its layout (checked by
``test_base_schedule_layout``) is:

====== ======= ============ ============ ======================================
stage  kind    time         iterations   requests (client)
====== ======= ============ ============ ======================================
0      prefill 0.0 - 1.0                 0 (c0, 10 tok), 1 (c1, 20 tok)
1      decode  1.0 - 2.0    0, 1         0, 1 (1 finishes)
2      prefill 2.0 - 3.0                 2 (c1, 40 tok)
3      decode  3.0 - 3.5    2            0, 2 (0 finishes)
4      prefill 3.5 - 4.5                 3 (c0, 15 tok)
5      decode  4.5 - 5.5    3, 4         2, 3 (3 finishes)
6      prefill 5.5 - 6.5                 4 (c0, 25 tok)
7      decode  6.5 - 8.0    5, 6, 7      2, 4 (2 finishes after 5, 4 after 7)
====== ======= ============ ============ ======================================
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import llmsched.engines.competition.validate as competition_validate
from llmsched import LevelCostModel, LinearCostModel, Schedule, Violation, Workload, simulate, validate
from llmsched.core.schedule import DECODE, PREFILL, runs_from_iteration_end
from llmsched.engines.competition.validate import RULES

PREFILL_TIME = 1.0
DECODE_TIME = 0.5
CAPACITY = 100


def _cost(
    capacity: int = CAPACITY, prefill: float = PREFILL_TIME, decode: float = DECODE_TIME
) -> LevelCostModel:
    return LevelCostModel([(capacity, prefill)], decode)


@pytest.fixture(scope="module")
def schedule() -> Schedule:
    workload = Workload(prompt_tokens=[10, 20, 40, 15, 25], output_tokens=[3, 2, 4, 2, 3])
    return simulate(workload, _cost(), clients=2)


def _rules(violations: list[Violation]) -> set[str]:
    return {v.rule for v in violations}


def _assert_only(violations: list[Violation], rule: str, *fragments: str) -> None:
    """Every violation is of ``rule``, there is at least one, and some message holds each fragment."""
    assert violations, f"expected a {rule} violation, got none"
    assert _rules(violations) == {rule}, [str(v) for v in violations]
    for fragment in fragments:
        assert any(fragment in v.message for v in violations), (fragment, [v.message for v in violations])


def _set(array: np.ndarray, index: int | slice, value: object) -> np.ndarray:
    out = np.array(array, copy=True)
    out[index] = value
    return out


def _with_iteration_end(s: Schedule, iteration_end: object, **changes: object) -> Schedule:
    """``s`` with ``changes`` and one decode run per iteration, ending at ``iteration_end``."""
    stages = {
        name: changes.get(name, getattr(s, name))
        for name in ("stage_kind", "stage_start", "stage_first_iteration", "stage_iterations")
    }
    start, iterations, time = runs_from_iteration_end(iteration_end=iteration_end, **stages)
    return replace(s, run_start=start, run_iterations=iterations, run_iteration_time=time, **changes)


def _prepend_idle_bin(s: Schedule, iterations: int) -> Schedule:
    """``s`` after an empty prefill stage and a decode stage of ``iterations`` idle iterations."""
    shift = PREFILL_TIME + DECODE_TIME * iterations
    decode = s.stage_kind == DECODE
    first = np.where(decode, s.stage_first_iteration + iterations, s.stage_first_iteration)
    idle_iteration_end = PREFILL_TIME + DECODE_TIME * np.arange(1, iterations + 1)
    return _with_iteration_end(
        s,
        np.concatenate([idle_iteration_end, s.iteration_end + shift]),
        stage_kind=np.concatenate([[PREFILL, DECODE], s.stage_kind]),
        stage_start=np.concatenate([[0.0, PREFILL_TIME], s.stage_start + shift]),
        stage_end=np.concatenate([[PREFILL_TIME, shift], s.stage_end + shift]),
        stage_first_iteration=np.concatenate([[0, 0], first]),
        stage_iterations=np.concatenate([[0, iterations], s.stage_iterations]),
        request_prefill_stage=s.request_prefill_stage + 2,
        request_decode_start=s.request_decode_start + iterations,
        request_decode_end=s.request_decode_end + iterations,
        makespan=s.makespan + shift,
    )


# ------------------------------------------------------------------ valid schedules
def test_base_schedule_layout(schedule: Schedule) -> None:
    """The simulated base schedule has the layout the mutations below rely on."""
    np.testing.assert_array_equal(schedule.stage_kind, [0, 1, 0, 1, 0, 1, 0, 1])
    np.testing.assert_allclose(schedule.stage_start, [0, 1, 2, 3, 3.5, 4.5, 5.5, 6.5])
    np.testing.assert_allclose(schedule.stage_end, [1, 2, 3, 3.5, 4.5, 5.5, 6.5, 8])
    np.testing.assert_array_equal(schedule.stage_first_iteration, [0, 0, 2, 2, 3, 3, 5, 5])
    np.testing.assert_array_equal(schedule.stage_iterations, [0, 2, 0, 1, 0, 2, 0, 3])
    np.testing.assert_allclose(schedule.iteration_end, [1.5, 2, 3.5, 5, 5.5, 7, 7.5, 8])
    np.testing.assert_array_equal(schedule.request_client, [0, 1, 1, 0, 0])
    np.testing.assert_array_equal(schedule.request_prefill_stage, [0, 0, 2, 4, 6])
    np.testing.assert_array_equal(schedule.request_decode_start, [0, 0, 2, 3, 5])
    np.testing.assert_array_equal(schedule.request_decode_end, [3, 2, 6, 5, 8])
    assert schedule.makespan == 8.0


def test_simulated_schedule_is_valid(schedule: Schedule) -> None:
    """A schedule produced by the simulator breaks no rule."""
    assert validate(schedule) == []


def test_arrival_at_stage_start_is_valid(schedule: Schedule) -> None:
    """A request arriving exactly when its prefill stage starts is on time."""
    workload = schedule.workload.replace(arrival=[0.0, 0.0, 2.0, 3.5, 5.5])
    assert validate(replace(schedule, workload=workload)) == []


def test_times_within_tolerance_are_valid(schedule: Schedule) -> None:
    """Time errors far below ``rtol`` (float rounding) are not violations."""
    nudged = _with_iteration_end(
        schedule,
        schedule.iteration_end + 1e-13,
        stage_end=schedule.stage_end + 1e-13,
        makespan=schedule.makespan + 1e-13,
    )
    assert validate(nudged) == []


def test_online_simulation_is_valid() -> None:
    """A simulated schedule with staggered arrivals and idle gaps validates."""
    workload = Workload(
        prompt_tokens=[10, 20, 40, 15, 25, 30],
        output_tokens=[3, 2, 4, 2, 3, 5],
        arrival=[0, 0, 0.7, 9, 9.2, 20],
    )
    s = simulate(workload, _cost(), clients=2)
    assert validate(s) == []


# ------------------------------------------------------------------ prefill_once
def test_prefill_once_request_never_prefilled(schedule: Schedule) -> None:
    """A request with no prefill stage is reported as never prefilled."""
    broken = replace(schedule, request_prefill_stage=_set(schedule.request_prefill_stage, 1, -1))
    _assert_only(validate(broken), "prefill_once", "request 1 is never prefilled")


def test_prefill_once_prefilled_in_decode_stage(schedule: Schedule) -> None:
    """A request whose prefill stage is a decode stage is reported with that stage."""
    broken = replace(schedule, request_prefill_stage=_set(schedule.request_prefill_stage, 1, 1))
    _assert_only(validate(broken), "prefill_once", "request 1", "stage 1", "decode stage")


def test_prefill_once_client_out_of_range(schedule: Schedule) -> None:
    """A request placed on a client that does not exist is reported with the client."""
    broken = replace(schedule, request_client=_set(schedule.request_client, 1, 2))
    _assert_only(validate(broken), "prefill_once", "request 1 is placed on client 2", "0..1")


# ------------------------------------------------------------------ capacity
def test_capacity_exceeded(schedule: Schedule) -> None:
    """A prefill stage holding more prompt tokens than the capacity is reported with its tokens."""
    broken = replace(schedule, cost=_cost(capacity=35))
    violations = validate(broken)
    _assert_only(violations, "capacity", "prefill stage 2 holds 40 prompt tokens", "capacity of 35")
    assert len(violations) == 1


# ------------------------------------------------------------------ stage_time
def test_stage_time_decode_iterations(schedule: Schedule) -> None:
    """Decode iterations that do not last the cost model's time are reported, capped at five plus a count."""
    per_iteration = _with_iteration_end(schedule, schedule.iteration_end, cost=_cost(decode=0.6))
    violations = validate(per_iteration)
    _assert_only(violations, "stage_time", "decode iteration 0 with 2 active clients lasts 0.5s", "0.6s")
    assert len(violations) == 6
    assert violations[-1].message == "... and 3 more of the same rule"


def test_stage_time_decode_runs(schedule: Schedule) -> None:
    """A run of wrong iteration time is reported once, naming its iterations, not once per iteration."""
    violations = validate(replace(schedule, cost=_cost(decode=0.6)))
    _assert_only(
        violations, "stage_time", "decode iterations 0-1 with 2 active clients last 0.5s each", "gives 0.6s"
    )
    # Five runs: 0-1, 2, 3-4, 5 and 6-7 (the simulator cuts a run where a request finishes).
    assert len(violations) == 5


def test_stage_time_prefill_stages(schedule: Schedule) -> None:
    """Prefill stages that do not last the cost model's time are reported with their tokens."""
    violations = validate(replace(schedule, cost=_cost(prefill=1.5)))
    _assert_only(violations, "stage_time", "prefill stage 0 (30 tokens) lasts 1s", "prefill stage 6")
    assert len(violations) == 4


def test_stage_time_decode_stage_end(schedule: Schedule) -> None:
    """A decode stage that ends before its last iteration is reported."""
    broken = replace(schedule, stage_end=_set(schedule.stage_end, 1, 1.9))
    violations = validate(broken)
    _assert_only(violations, "stage_time", "decode stage 1 ends at 1.9s but its last iteration ends at 2s")
    assert len(violations) == 1


def test_stage_time_run_of_wrong_active_count() -> None:
    """A run that keeps the two-client iteration time after a request finishes is reported for the
    iterations after the finish, where one client decodes."""
    cost = LinearCostModel(1.0, 0.1, 0.5, 0.25, prefill_capacity=100)
    s = simulate(Workload([10, 20, 30], [2, 1, 3]), cost, 2)
    # The last decode stage: one iteration of 2 clients (1 s), then two of 1 client (0.75 s).
    assert s.run_iterations.tolist() == [1, 1, 2] and s.run_iteration_time.tolist() == [1.0, 1.0, 0.75]
    merged = replace(
        s,
        run_start=s.run_start[:2],
        run_iterations=[1, 3],
        run_iteration_time=[1.0, 1.0],
        stage_end=_set(s.stage_end, 3, 12.0),
        makespan=12.0,
    )
    violations = validate(merged)
    _assert_only(
        violations,
        "stage_time",
        "decode iterations 2-3 with 1 active clients last 1s each but the cost model gives 0.75s",
    )
    assert len(violations) == 1


def test_request_finishing_inside_a_run_is_valid(schedule: Schedule) -> None:
    """Under a constant decode time, one run may span a request's finish: the rule is per iteration."""
    # Runs 3 (iteration 5) and 4 (iterations 6-7) of stage 7 merged: request 2 finishes inside.
    merged = replace(
        schedule,
        run_start=schedule.run_start[:4],
        run_iterations=[2, 1, 2, 3],
        run_iteration_time=schedule.run_iteration_time[:4],
    )
    assert validate(merged) == []
    assert merged.finish.tolist() == schedule.finish.tolist()


def test_stage_time_run_starts_off_its_place(schedule: Schedule) -> None:
    """A run that does not start with its stage, or where the run before it ends, is reported."""
    broken = replace(schedule, run_start=_set(schedule.run_start, 3, 6.6))
    violations = validate(broken)
    _assert_only(
        violations,
        "stage_time",
        "decode run 3 (decode iteration 5) starts at 6.6s but its decode stage 7 starts at 6.5s",
        "decode run 4 (decode iterations 6-7) starts at 7s but the run before it ends at 7.1s",
    )
    assert len(violations) == 2


def test_stage_time_runs_leave_an_idle_gap(schedule: Schedule) -> None:
    """A gap between two runs of one decode stage is reported, even when the stage's end covers it."""
    broken = replace(
        schedule,
        run_start=_set(schedule.run_start, 4, 7.25),
        stage_end=_set(schedule.stage_end, 7, 8.25),
        makespan=8.25,
    )
    violations = validate(broken)
    _assert_only(
        violations,
        "stage_time",
        "decode run 4 (decode iterations 6-7) starts at 7.25s but the run before it ends at 7s",
    )
    assert len(violations) == 1


# ------------------------------------------------------------------ alternation
def test_alternation_overlapping_stages(schedule: Schedule) -> None:
    """A decode stage starting before the prefill stage before it ends is reported."""
    shift = 0.25
    broken = _with_iteration_end(
        schedule,
        _set(schedule.iteration_end, slice(5, 8), schedule.iteration_end[5:8] - shift),
        stage_start=_set(schedule.stage_start, 7, schedule.stage_start[7] - shift),
        stage_end=_set(schedule.stage_end, 7, schedule.stage_end[7] - shift),
        makespan=schedule.makespan - shift,
    )
    violations = validate(broken)
    _assert_only(violations, "alternation", "stage 7 starts at 6.25s, before stage 6 ends at 6.5s")
    assert len(violations) == 1


def test_alternation_two_decode_stages_in_a_row(schedule: Schedule) -> None:
    """A decode stage split into two consecutive decode stages is reported."""
    broken = replace(
        schedule,
        stage_kind=np.append(schedule.stage_kind, DECODE),
        stage_start=np.append(schedule.stage_start, 7.0),
        stage_end=np.append(_set(schedule.stage_end, 7, 7.0), 8.0),
        stage_first_iteration=np.append(schedule.stage_first_iteration, 6),
        stage_iterations=np.append(_set(schedule.stage_iterations, 7, 1), 2),
    )
    violations = validate(broken)
    _assert_only(violations, "alternation", "stages 7 and 8 are both decode stages")
    assert len(violations) == 1


def test_alternation_stage_ends_before_it_starts(schedule: Schedule) -> None:
    """A stage whose end precedes its start is reported (stage_time skipped: its length is wrong too)."""
    broken = replace(schedule, stage_end=_set(schedule.stage_end, 6, 5.0))
    violations = validate(broken, skip=("stage_time",))
    _assert_only(violations, "alternation", "stage 6 ends (5s) before it starts (5.5s)")


# ------------------------------------------------------------------ decode_continuity
def test_decode_continuity_late_start(schedule: Schedule) -> None:
    """A request that starts decoding one iteration after the first one following its prefill is reported."""
    broken = replace(
        schedule,
        request_decode_start=_set(schedule.request_decode_start, 2, 3),
        request_decode_end=_set(schedule.request_decode_end, 2, 7),
    )
    violations = validate(broken)
    _assert_only(
        violations,
        "decode_continuity",
        "request 2 starts decoding at iteration 3, not at iteration 2, the first after its prefill stage 2",
    )
    assert len(violations) == 1


# ------------------------------------------------------------------ no_idle_work
def test_no_idle_work_empty_prefill_and_idle_iteration(schedule: Schedule) -> None:
    """An empty prefill stage and a decode iteration with nobody decoding are both reported."""
    broken = _prepend_idle_bin(schedule, iterations=1)
    violations = validate(broken)
    _assert_only(
        violations,
        "no_idle_work",
        "prefill stage 0 prefills no request",
        "decode iteration 0 runs with no client decoding",
    )
    assert len(violations) == 2


def test_no_idle_work_decode_stage_without_iterations(schedule: Schedule) -> None:
    """A decode stage that runs no iteration is reported, as is the empty prefill stage before it."""
    broken = _prepend_idle_bin(schedule, iterations=0)
    violations = validate(broken)
    _assert_only(
        violations, "no_idle_work", "prefill stage 0 prefills no request", "decode stage 1 runs no iteration"
    )
    assert len(violations) == 2


# ------------------------------------------------------------------ one_per_client
def test_one_per_client_busy_client(schedule: Schedule) -> None:
    """A request placed on a client that still holds another request is reported with both requests."""
    broken = replace(schedule, request_client=_set(schedule.request_client, 3, 1))
    violations = validate(broken)
    _assert_only(
        violations,
        "one_per_client",
        "client 1 takes request 3 at 3.5s while request 2 holds it until 7s",
    )
    assert len(violations) == 1


# ------------------------------------------------------------------ arrival
def test_arrival_after_prefill_start(schedule: Schedule) -> None:
    """A request prefilled in a stage that starts before it arrives is reported."""
    workload = schedule.workload.replace(arrival=[0.0, 0.0, 0.0, 4.0, 0.0])
    violations = validate(replace(schedule, workload=workload))
    _assert_only(
        violations, "arrival", "request 3 arrives at 4s but is prefilled in stage 4, which starts at 3.5s"
    )
    assert len(violations) == 1


# ------------------------------------------------------------------ tokens
def test_tokens_wrong_count(schedule: Schedule) -> None:
    """A request that decodes fewer tokens than its output has is reported."""
    workload = schedule.workload.replace(output_tokens=[3, 2, 5, 2, 3])
    violations = validate(replace(schedule, workload=workload))
    _assert_only(violations, "tokens", "request 2 decodes 4 tokens but its output has 5")
    assert len(violations) == 1


def test_tokens_range_beyond_last_iteration(schedule: Schedule) -> None:
    """A decode range running past the schedule's last iteration is reported, not indexed out of bounds."""
    workload = schedule.workload.replace(output_tokens=[3, 2, 4, 2, 4])
    broken = replace(schedule, workload=workload, request_decode_end=_set(schedule.request_decode_end, 4, 9))
    violations = validate(broken)
    tokens = [v for v in violations if v.rule == "tokens"]
    assert [v.message for v in tokens] == ["request 4 would decode until iteration 8, but the schedule has 8"]
    # The iterations the request does reach still count it as active: nothing else is reported.
    assert _rules(violations) == {"tokens"}


# ------------------------------------------------------------------ makespan
def test_makespan_misreported(schedule: Schedule) -> None:
    """A reported makespan other than the end of the last stage is reported with both values."""
    violations = validate(replace(schedule, makespan=9.0))
    _assert_only(violations, "makespan", "the makespan is 9s but the last stage ends at 8s")
    assert len(violations) == 1


# ------------------------------------------------------------------ memory
def _preempted() -> Schedule:
    """vLLM's rule under a KV-cache memory small enough that requests are preempted."""
    from llmsched.core.memory import KVMemory
    from llmsched.engines.batching import batching_rule
    from llmsched.engines.loop import CostClock, run_loop
    from llmsched.online import FCFS

    memory = KVMemory(24, block_size=8, watermark=0.0)
    schedule = run_loop(
        Workload([20] * 4, [60] * 4),
        LinearCostModel.paper(),
        4,
        FCFS(),
        None,
        CostClock(),
        False,
        batching_rule("vllm", 512, memory=memory),
    )
    assert isinstance(schedule, Schedule) and schedule.request_parent is not None
    return schedule


def test_memory_is_caught_alone_when_the_memory_shrinks() -> None:
    """The same schedule against a memory of fewer blocks breaks the memory rule alone."""
    from llmsched.core.memory import KVMemory

    schedule = _preempted()
    assert validate(schedule) == []
    smaller = replace(schedule, memory=KVMemory(16, block_size=8, watermark=0.0))
    _assert_only(validate(smaller), "memory", "KV blocks")


# ------------------------------------------------------------------ pieces
def test_pieces_are_caught_alone_when_a_continuation_is_claimed_by_another_request() -> None:
    """A continuation said to belong to another request (whose prompt and decoded tokens it
    does not recompute) breaks the pieces rule alone."""
    schedule = _preempted()
    later = int(schedule.request_parent.size - 1)
    parent = schedule.request_parent.copy()
    parent[later] = (parent[later] + 1) % 4
    _assert_only(validate(replace(schedule, request_parent=parent)), "pieces", f"piece {later}")


# ------------------------------------------------------------------ structure
@pytest.mark.parametrize(
    ("field", "fragment"),
    [
        ("request_client", "request_client has shape (4,), expected (5,)"),
        ("request_decode_end", "request_decode_end has shape (4,), expected (5,)"),
        ("stage_start", "stage_start has shape (7,), expected (8,)"),
        ("stage_iterations", "stage_iterations has shape (7,), expected (8,)"),
        ("run_iteration_time", "run_iteration_time has shape (4,), expected (5,) (one per run)"),
        ("run_iterations", "run_iterations has shape (4,), expected (5,) (one per run)"),
    ],
)
def test_structure_wrong_length(schedule: Schedule, field: str, fragment: str) -> None:
    """An array of the wrong length gives only structure violations, without crashing."""
    broken = replace(schedule, **{field: getattr(schedule, field)[:-1]})
    _assert_only(validate(broken), "structure", fragment)


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"stage_kind": [0, 1, 0, 1, 0, 1, 0, 2]}, "stage_kind holds values other than"),
        (
            {"request_prefill_stage": [0, 0, 2, 4, 8]},
            "request_prefill_stage refers to a stage that does not exist",
        ),
        ({"run_iterations": [2, 1, 2, 1, 1]}, "decode stages have 8 iterations but the runs cover 7"),
        ({"run_iterations": [2, 1, 2, 1, 3]}, "decode stages have 8 iterations but the runs cover 9"),
        ({"run_iterations": [2, 1, 3, -1, 3]}, "run_iterations must be >= 1"),
        ({"run_iterations": [2, 0, 3, 1, 2]}, "run_iterations must be >= 1"),
        ({"run_start": [1.0, 3.0, 4.5, 6.5, np.nan]}, "run times must be finite"),
        ({"run_iteration_time": [0.5, 0.5, np.inf, 0.5, 0.5]}, "run times must be finite"),
        (
            {
                "run_start": [1.0, 3.0, 6.5, 7.0],
                "run_iterations": [2, 3, 1, 2],
                "run_iteration_time": [0.5] * 4,
            },
            "a run crosses into decode stage 5: its first iteration 3 does not start a run",
        ),
        ({"stage_end": [1, 2, 3, 3.5, 4.5, 5.5, 6.5, np.inf]}, "stage times must be finite"),
        ({"stage_first_iteration": [0, 0, 2, 3, 5, 3, 0, 5]}, "number their iterations consecutively"),
        ({"stage_iterations": [1, 2, 0, 1, 0, 2, 0, 3]}, "0 for prefill stages"),
        ({"request_decode_end": [3, 2, 6, 5, 4]}, "decode range ends before it starts"),
        ({"clients": 0}, "clients is 0"),
    ],
)
def test_structure_bad_values(schedule: Schedule, changes: dict[str, object], fragment: str) -> None:
    """Out-of-range indices and values give only structure violations, without crashing."""
    _assert_only(validate(replace(schedule, **changes)), "structure", fragment)


# ------------------------------------------------------------------ options and API
def test_every_rule_is_tested() -> None:
    """RULES lists exactly the rules the validator documents, in its order, structure first,
    and this module has a section of tests for each."""
    assert tuple(re.findall(r"^``(\w+)``$", competition_validate.__doc__ or "", re.M)) == RULES
    assert RULES[0] == "structure"
    sections = re.findall(r"^# -+ (\w+)$", Path(__file__).read_text(encoding="utf-8"), re.M)
    assert set(RULES) <= set(sections)


def test_skip_suppresses_rule(schedule: Schedule) -> None:
    """Skipping stage_time hides stage-time violations and leaves other rules checked."""
    broken = replace(schedule, cost=_cost(decode=0.6))
    assert _rules(validate(broken)) == {"stage_time"}
    assert validate(broken, skip=("stage_time",)) == []
    both = replace(broken, makespan=9.0)
    assert _rules(validate(both, skip=("stage_time",))) == {"makespan"}


def test_skip_unknown_rule_raises(schedule: Schedule) -> None:
    """An unknown rule name in skip raises ValueError naming it."""
    with pytest.raises(ValueError, match="no_such_rule"):
        validate(schedule, skip=("stage_time", "no_such_rule"))


def test_non_schedule_raises_type_error() -> None:
    """Validating something that is not a Schedule raises TypeError."""
    with pytest.raises(TypeError, match="Schedule"):
        validate("not a schedule")  # type: ignore[arg-type]


def test_violation_str_names_rule() -> None:
    """A violation prints as its rule in brackets followed by its message."""
    assert str(Violation("tokens", "request 0 decodes 1 tokens")) == "[tokens] request 0 decodes 1 tokens"


# ------------------------------------------------------------------ degenerate schedules
def test_schedule_without_stages_reports_unprefilled_request() -> None:
    """A schedule with no stage at all reports its request as never prefilled instead of crashing."""
    s = Schedule(Workload([10], [1]), _cost(), 1, [], [], [], [], [], [], [], [], [0], [-1], [0], [0], 0.0)
    assert "prefill_once" in _rules(validate(s))


def test_schedule_without_decode_iterations_reports_missing_decode() -> None:
    """A schedule with a prefill stage but no decode iteration reports its missing decode, not a crash."""
    s = Schedule(
        Workload([10], [1]), _cost(), 1, [0], [0.0], [1.0], [0], [0], [], [], [], [0], [0], [0], [0], 1.0
    )
    assert _rules(validate(s)) >= {"decode_continuity", "tokens"}


def test_structure_cannot_be_skipped(schedule: Schedule) -> None:
    """Asking to skip the structure rule is refused: no other rule can run without it."""
    with pytest.raises(ValueError, match="cannot be skipped"):
        validate(schedule, skip=("structure",))


def test_one_per_client_reports_every_overlapping_request(schedule: Schedule) -> None:
    """With every request on client 0, each request that starts while another holds the client is named."""
    violations = validate(replace(schedule, request_client=np.zeros(5, dtype=np.int64)))
    _assert_only(violations, "one_per_client", "client 0 takes request 1")
    # Requests 1 and 2 overlap request 0, 3 overlaps 2, 4 overlaps 2: four clashes, not two.
    assert len(violations) == 4


def test_large_absolute_times_keep_a_tight_tolerance(schedule: Schedule) -> None:
    """Shifted to 1e6 s, a schedule still validates, and a 1 ms error in one iteration is caught."""
    shift = 1e6
    moved = _with_iteration_end(
        schedule,
        schedule.iteration_end + shift,
        stage_start=schedule.stage_start + shift,
        stage_end=schedule.stage_end + shift,
        makespan=schedule.makespan + shift,
        workload=schedule.workload.replace(arrival=np.full(5, shift)),
    )
    assert validate(moved) == []
    late = _set(moved.iteration_end, slice(3, None), moved.iteration_end[3:] + 1e-3)
    stage_end = moved.stage_end.copy()
    stage_end[5:] += 1e-3
    broken = _with_iteration_end(
        moved,
        late,
        stage_start=_set(moved.stage_start, slice(6, None), moved.stage_start[6:] + 1e-3),
        stage_end=stage_end,
        makespan=moved.makespan + 1e-3,
    )
    assert _rules(validate(broken)) == {"stage_time"}


def test_tolerances_and_skip_arguments_are_checked(schedule: Schedule) -> None:
    """A NaN or negative tolerance is refused; a single rule name may be passed as a string."""
    for bad in (float("nan"), -1.0, float("inf")):
        with pytest.raises(ValueError, match="rtol"):
            validate(schedule, rtol=bad)
        with pytest.raises(ValueError, match="atol"):
            validate(schedule, atol=bad)
    broken = replace(schedule, cost=_cost(decode=0.6))
    assert validate(broken, skip="stage_time") == []


def test_schedule_refuses_lossy_arrays(schedule: Schedule) -> None:
    """Array values that the schedule's integer fields cannot hold exactly are refused."""
    with pytest.raises(ValueError, match="stage_kind"):
        replace(schedule, stage_kind=np.array([257] * schedule.num_stages))
    with pytest.raises(ValueError, match="request_client"):
        replace(schedule, request_client=np.array([0.5, 1, 1, 0, 0]))
