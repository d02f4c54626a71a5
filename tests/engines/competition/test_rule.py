"""PD competition's batching rule: what it answers at a decision point, and the schedule it
builds from the loop's record (stages alternate; take k is prefilled in stage 2k)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmsched import LinearCostModel, Workload, validate
from llmsched.core.schedule import DECODE, PREFILL
from llmsched.engines.competition.rule import CompetitionRule
from llmsched.engines.rule import PREFILL_STAGE, RuleStart, RunRecord
from llmsched.online import PrefillFirst
from llmsched.policies import DECODE_UNTIL_EVENT, PREFILL_NOW, KnownRequests

COST = LinearCostModel(1.0, 0.1, 0.5, 0.25, prefill_capacity=100)


class _Says:
    """An iteration policy that answers from a list and records what it saw."""

    def __init__(self, *answers: int) -> None:
        self.answers, self.seen = list(answers), []

    def start(self, known, cost, clients) -> None:
        self.known = known

    def decide(self, engine) -> int:
        self.seen.append((engine.just_prefilled, engine.stage_iterations))
        return self.answers.pop(0)


def _started(policy) -> CompetitionRule:
    rule = CompetitionRule(policy)
    known = KnownRequests(4, False, False)
    rule.start(RuleStart(COST, 2, [5, 5, 5, 5], {}, [-1] * 4, known, lambda lengths: known))
    return rule


def test_it_prefills_when_nothing_decodes_and_decodes_when_nothing_is_ready() -> None:
    """Ready requests with nothing decoding are prefilled at once; nothing ready: decode on."""
    rule = _started(_Says())
    assert rule.plan(0, 3, 10) == DECODE_UNTIL_EVENT
    assert rule.plan(2, 0, 10) == PREFILL_STAGE
    assert rule.admit_below == math.inf and rule.view is not None


def test_the_iteration_policy_decides_and_stages_alternate() -> None:
    """With a choice, the policy decides; right after a prefill stage PREFILL_NOW still
    decodes one iteration, and the view says how long the current decode stage is."""
    policy = _Says(PREFILL_NOW, 5, PREFILL_NOW)
    rule = _started(policy)
    assert rule.plan(1, 0, 7) == PREFILL_STAGE  # nothing decodes: prefilled at iteration 7
    assert rule.plan(1, 2, 7) == 1  # just prefilled: decode first
    assert rule.plan(1, 2, 9) == 5
    assert rule.plan(1, 2, 14) == PREFILL_STAGE
    assert policy.seen == [(True, 0), (False, 2), (False, 7)]


@pytest.mark.parametrize(("answer", "error"), [(-1, ValueError), (2.0, TypeError)])
def test_a_broken_decision_is_refused(answer, error) -> None:
    rule = _started(_Says(answer))
    rule.plan(1, 0, 0)
    with pytest.raises(error, match=r"iteration policy _Says\.decide returned"):
        rule.plan(1, 1, 0)


def test_a_class_is_not_an_iteration_policy() -> None:
    with pytest.raises(TypeError, match="iteration_policy must be an object with start and decide"):
        CompetitionRule(PrefillFirst)  # type: ignore[arg-type]


def _record() -> RunRecord:
    """Two bins: prefill [0, 2] (take 0), decode runs of 2 and 1 iterations, prefill [5, 6]
    (take 1), a decode run of 3 iterations."""
    record = RunRecord()
    record.prefill_start += [0.0, 5.0]
    record.prefill_end += [2.0, 6.0]
    record.prefill_run += [0, 2]
    record.run_start += [2.0, 4.0, 6.0]
    record.run_end += [4.0, 5.0, 9.0]
    record.run_iterations += [2, 1, 3]
    record.run_time += [1.0, 1.0, 1.0]
    record.run_step += [0.0, 0.0, 0.0]
    record.request_client, record.request_take, record.request_decode_start = [0, 1, 0], [0, 0, 1], [0, 0, 3]
    record.info = {"request_policy": "fcfs"}
    return record


def test_the_schedule_alternates_prefill_and_decode_stages() -> None:
    """Each prefill stage is followed by the decode stage of the runs before the next one."""
    workload = Workload([5, 5, 5], [2, 3, 3])
    schedule = CompetitionRule(PrefillFirst()).schedule(workload, COST, 2, _record(), False)
    assert schedule.stage_kind.tolist() == [PREFILL, DECODE, PREFILL, DECODE]
    assert schedule.stage_start.tolist() == [0.0, 2.0, 5.0, 6.0]
    assert schedule.stage_end.tolist() == [2.0, 5.0, 6.0, 9.0]
    assert schedule.stage_first_iteration.tolist() == [0, 0, 3, 3]
    assert schedule.stage_iterations.tolist() == [0, 3, 0, 3]
    assert schedule.request_prefill_stage.tolist() == [0, 0, 2]
    assert schedule.request_decode_end.tolist() == [2, 3, 6]
    assert schedule.run_iteration_step is None and schedule.makespan == 9.0
    assert schedule.info == {"request_policy": "fcfs"}


def test_a_prefill_with_no_decode_after_it_is_refused() -> None:
    """Stages must alternate: a prefill stage followed by no decode run is the loop's bug."""
    record = _record()
    record.prefill_run[1] = 3
    with pytest.raises(RuntimeError, match="followed by no decode iteration"):
        CompetitionRule(PrefillFirst()).schedule(Workload([5, 5, 5], [2, 3, 3]), COST, 2, record, False)


def test_an_empty_run_gives_an_empty_schedule() -> None:
    """Nothing ran (a fleet's engine that got no request): no stage, makespan 0."""
    schedule = CompetitionRule(PrefillFirst()).schedule(
        Workload([5], [1]).subset([]), COST, 1, RunRecord(), False
    )
    assert schedule.num_stages == 0 and schedule.makespan == 0.0


def test_info_names_both_policies_in_the_order_schedules_always_had() -> None:
    info = CompetitionRule(PrefillFirst()).info({"request_policy": "fcfs", "clairvoyant": False, "x": 1})
    assert list(info) == ["request_policy", "iteration_policy", "clairvoyant", "x"]
    assert info["iteration_policy"] == "prefill-first"


def test_a_context_aware_run_keeps_its_steps() -> None:
    """Runs whose iterations lengthen keep their step in the schedule, which validates."""
    from llmsched import ContextCostModel, simulate

    cost = ContextCostModel(0.004, 6e-5, 2e-8, 0.003, 2e-4, 1.5e-6, 1000)
    schedule = simulate(Workload([50, 80, 20], [30, 10, 20], arrival=[0.0, 0.1, 0.2]), cost, 2)
    assert schedule.run_iteration_step is not None and np.all(schedule.run_iteration_step > 0)
    assert validate(schedule) == []
