"""The disaggregated validator: each rule caught alone; broken runs and times are violations."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from llmsched import Workload
from llmsched.engines.disaggregation.schedule import DisaggregatedSchedule
from llmsched.engines.disaggregation.validate import DISAGGREGATED_RULES, validate_disaggregated
from llmsched.fleet.disaggregated import simulate_disaggregated
from tests.engines.disaggregation.test_schedule import _rules, _set, _valid
from tests.fleet.test_disaggregated import PAPER, _cluster


def test_each_rule_is_caught_alone() -> None:
    s = _valid()
    wl = s.workload
    last_run = int(np.argmax(s.run_end))
    slower = replace(s, run_first_time=_set(s.run_first_time, last_run, s.run_first_time[last_run] * 1.5))
    mid = int(np.flatnonzero(s.run_iterations >= 1)[len(s.run_start) // 2])
    busiest = int(np.argmax(s.run_active))
    late = int(np.argmax(s.workload.arrival))
    lone = int(np.argmin(s.request_decode_start))
    longest = int(np.argmax(s.transfer_time))
    assert s.transfer_time[longest] > 0
    sent = s.stage_end[s.request_stage[longest]]
    broken = {
        "pools": replace(s, cluster=replace(s.cluster, mixed=False))
        if (~s.cluster.is_prompt(s.stage_machine)).any()
        else None,
        "capacity": replace(
            s,
            cluster=replace(
                s.cluster,
                prompt_cost=replace(PAPER, prefill_capacity=int(wl.prompt_tokens.max())),
                token_cost=replace(s.cluster.token_cost, prefill_capacity=int(wl.prompt_tokens.max())),
            ),
        ),
        "stage_time": replace(slower, makespan=float(slower.run_end.max()))
        if slower.run_end.max() >= s.stage_end.max()
        else None,
        "decoding": replace(s, run_active=_set(s.run_active, busiest, s.run_active[busiest] + 1)),
        "context": replace(s, run_context=_set(s.run_context, mid, s.run_context[mid] + 1)),
        # Sooner than the link allows, though after the stage: the transfer's time alone.
        "transfer_time": replace(
            s,
            request_transfer_end=_set(
                s.request_transfer_end, longest, (sent + s.request_transfer_end[longest]) / 2
            ),
        ),
        # Before the stage ends (checked with transfer_time skipped: that arrival is off the model too).
        "transfer": replace(
            s, request_transfer_end=_set(s.request_transfer_end, lone, s.prefill_end[lone] - 1e-4)
        ),
        "arrival": replace(
            s,
            workload=Workload(
                wl.prompt_tokens,
                wl.output_tokens,
                arrival=_set(wl.arrival, late, s.stage_start[s.request_stage[late]] + 1e-3),
            ),
        ),
        "makespan": replace(s, makespan=s.makespan + 1.0),
        "tokens": replace(
            s, workload=Workload(wl.prompt_tokens, _set(wl.output_tokens, 0, 500), arrival=wl.arrival)
        ),
    }
    # Two requests decoding at once on one machine put on one client.
    m = s.request_machine
    pairs = [
        (i, j)
        for i in range(len(wl))
        for j in range(len(wl))
        if i != j
        and m[i] == m[j]
        and s.request_decode_start[i] <= s.request_decode_start[j] < s.request_decode_end[i]
    ]
    i, j = pairs[0]
    broken["one_per_client"] = replace(s, request_client=_set(s.request_client, j, s.request_client[i]))
    # Overlapping work on one machine: a stage moved onto a busy token machine's run.
    run = int(np.flatnonzero(~s.cluster.is_prompt(s.run_machine))[0])
    stage = int(np.flatnonzero(s.cluster.is_prompt(s.stage_machine))[0])
    broken["timeline"] = None  # checked below with a hand-built case
    broken["memory"] = None  # token memory: tests/fleet/test_disaggregated.py breaks it alone
    for rule, schedule in broken.items():
        if rule in ("timeline", "memory"):
            continue
        assert schedule is not None, rule
        if rule == "transfer":
            assert _rules(schedule) == {"transfer", "transfer_time"}
            assert {v.rule for v in validate_disaggregated(schedule, skip="transfer_time")} == {rule}
            continue
        assert _rules(schedule) == {rule}, (rule, validate_disaggregated(schedule)[:4])
    assert run >= 0 and stage >= 0
    assert set(broken) | {"structure"} == set(DISAGGREGATED_RULES)


def test_overlapping_work_on_a_machine_is_a_timeline_violation_alone() -> None:
    """Two prefill stages on one prompt machine at once (hand-built, everything else right)."""
    work = Workload([10, 10], [1, 1])
    cluster = _cluster(token_machines=2, kv_bytes_per_token=0.0)
    t = PAPER.prefill_time(10)
    d = PAPER.decode_iteration_time(1)

    def build(second_start: float) -> DisaggregatedSchedule:
        return DisaggregatedSchedule(
            work,
            cluster,
            [0, 0],
            [0.0, second_start],
            [t, second_start + t],
            [1, 2],
            [t, second_start + t],
            [1, 1],
            [d, d],
            [0.0, 0.0],
            [1, 1],
            [10, 10],
            [0, 1],
            [1, 2],
            [0, 0],
            [t, second_start + t],
            [0, 0],
            [1, 1],
            second_start + t + d,
        )

    assert validate_disaggregated(build(t)) == []
    assert _rules(build(t / 2)) == {"timeline"}


def test_the_structure_rule_stops_the_rest() -> None:
    s = _valid()
    assert _rules(replace(s, run_step=s.run_step[:-1])) == {"structure"}
    with pytest.raises(ValueError, match="cannot be skipped"):
        validate_disaggregated(s, skip="structure")


def test_runs_out_of_order_nan_times_and_empty_stages_are_caught() -> None:
    """A run listed before an earlier one of its machine, or starting before time 0, is a
    timeline violation; a time that is not finite is a structure violation; a stage holding
    no request breaks capacity."""
    work = Workload([10, 10], [2, 2], arrival=[0.0, 0.0])
    s = simulate_disaggregated(work, _cluster(token_machines=1, kv_bytes_per_token=0.0, token_clients=2))
    assert validate_disaggregated(s) == []
    early = _set(s.run_start, len(s.run_start) - 1, -1.0)
    assert "timeline" in _rules(replace(s, run_start=early))
    assert _rules(replace(s, makespan=float("nan"))) == {"structure"}
    assert _rules(replace(s, request_transfer_end=np.full(2, np.nan))) == {"structure"}
    extra = replace(
        s,
        stage_machine=np.append(s.stage_machine, 0),
        stage_start=np.append(s.stage_start, s.stage_end[-1]),
        stage_end=np.append(s.stage_end, s.stage_end[-1] + PAPER.prefill_time(0)),
    )
    assert "capacity" in _rules(extra)


def test_requests_arriving_together_share_a_stage_and_token_capacity_is_not_checked_unlent() -> None:
    """Eight requests at one instant go in one prefill stage; a token pool of a smaller
    prefill capacity than the prompts is fine when it is never lent."""
    s = simulate_disaggregated(Workload([10] * 8, [3] * 8), _cluster(token_machines=1, token_clients=8))
    assert np.bincount(s.request_stage).tolist() == [8]
    small = replace(PAPER, prefill_capacity=100)
    run = simulate_disaggregated(Workload([200], [3]), _cluster(token_cost=small))
    assert validate_disaggregated(run) == []
    with pytest.raises(ValueError, match="capacity"):
        _cluster(token_cost=small, mixed=True).check(Workload([200], [3]))
