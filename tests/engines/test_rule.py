"""The batching-rule protocol: a new rule is one small class the one loop runs; the loop
refuses a rule's answer that names no step; the view and the knowledge a rule's policy gets."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings

from llmsched import LevelCostModel, LinearCostModel, Workload
from llmsched.engines.clock import CostClock
from llmsched.engines.fusion.rule import FusionRule
from llmsched.engines.fusion.validate import validate_fused
from llmsched.engines.loop import run_loop
from llmsched.engines.rule import PREFILL_STAGE, TAKE, LoopView, RuleStart, RunRecord
from llmsched.online import FCFS, PrefillFirst
from llmsched.online.registry import make_request_policy
from llmsched.policies import DECODE_UNTIL_EVENT, KnownRequests
from tests.strategies import predicted_instances

COST = LinearCostModel(1.0, 0.1, 0.5, 0.25, prefill_capacity=100)


class WholePrompts:
    """Orca's iteration-level batching as a rule: every iteration decodes the running
    requests, and the one after a take also prefills the whole prompts taken."""

    mode = "fusion"
    view = None
    admit_below = math.inf
    under_way = ()  # whole prompts run in the iteration right after their take

    def __init__(self, token_budget: int):
        self._fused = FusionRule(token_budget)  # its schedule: runs and chunks alike

    def check(self, workload, cost, clients) -> None:
        self._fused.check(workload, cost, clients)

    def start(self, engine: RuleStart) -> None:
        self._prompt = engine.prompt

    def plan(self, ready, active, iteration):
        return TAKE if ready else DECODE_UNTIL_EVENT

    def taken(self, pairs, active):
        prompt = self._prompt
        chunks = [(request, client, 0, prompt[request]) for request, client in pairs]
        squares = sum(prompt[request] ** 2 for request, _ in pairs)
        return chunks, sum(prompt[request] for request, _ in pairs), squares, pairs

    def info(self, facts):
        return {"mode": "fusion", **facts}

    def schedule(self, workload, cost, clients, record, measured):
        return self._fused.schedule(workload, cost, clients, record, measured)


@settings(max_examples=40, deadline=None)
@given(predicted_instances())
def test_a_rule_in_one_small_class_runs_on_the_one_loop(instance) -> None:
    """A rule written as one class (whole prompts in mixed iterations, as Orca batches) runs
    through run_loop unchanged, and the fused validator accepts what it ran: every prompt
    in one chunk, in the iteration right after its take."""
    workload, cost, clients = instance
    if isinstance(cost, LevelCostModel):
        cost = dataclasses.replace(COST, prefill_capacity=cost.prefill_capacity)
    budget = int(cost.prefill_capacity) + clients
    schedule = run_loop(workload, cost, clients, FCFS(), None, CostClock(), rule=WholePrompts(budget))
    assert validate_fused(schedule) == []
    assert np.array_equal(np.sort(schedule.chunk_request), np.arange(len(workload)))
    assert np.array_equal(schedule.chunk_tokens, workload.prompt_tokens[schedule.chunk_request])
    assert schedule.info["mode"] == "fusion" and schedule.info["request_policy"] == "fcfs"


class _Answers:
    """A rule whose plan answers ``answer``."""

    mode = "competition"
    view = None
    admit_below = math.inf
    under_way = (0,)  # claims a prompt under way: it is asked at every decision point

    def __init__(self, answer):
        self.answer = answer

    def check(self, workload, cost, clients) -> None:
        pass

    def start(self, engine) -> None:
        pass

    def plan(self, ready, active, iteration):
        return self.answer

    def taken(self, pairs, active):
        return TAKE  # not a step after a take


@pytest.mark.parametrize(
    ("answer", "error", "message"),
    [
        (0, ValueError, "answered 0 with 2 request"),
        (-9, ValueError, "answered -9"),
        (None, TypeError, "answered None"),
        (1.5, TypeError, "answered 1.5"),
        (np.int64(3), TypeError, r"answered np.int64\(3\).*or an int n >= 1"),  # a rule's own code
        (TAKE, ValueError, "answered -1 with 2 request"),  # then TAKE again from taken
    ],
)
def test_a_rule_answer_that_names_no_step_is_refused(answer, error, message) -> None:
    """The loop checks the rule's answers as it checks the policies'."""
    with pytest.raises(error, match=r"batching rule _Answers " + message):
        run_loop(Workload([5, 5], [3, 3]), COST, 2, FCFS(), None, CostClock(), rule=_Answers(answer))


def test_taking_with_nothing_ready_is_refused() -> None:
    """PREFILL_STAGE or TAKE while no request is ready would call take() out of contract."""

    class Never(FCFS):
        def ready(self):
            return 0

    for answer in (PREFILL_STAGE, TAKE):
        with pytest.raises(ValueError, match=r"answered -[12] with 0 request\(s\) ready"):
            run_loop(Workload([5], [3]), COST, 1, Never(), None, CostClock(), rule=_Answers(answer))


def test_a_rule_and_an_iteration_policy_do_not_mix() -> None:
    """With a rule, the iteration policy is the rule's to hold: run_loop refuses one beside it."""
    with pytest.raises(TypeError, match="iteration_policy must be None with a batching rule"):
        run_loop(Workload([5], [3]), COST, 1, FCFS(), PrefillFirst(), CostClock(), rule=FusionRule(8))


def test_a_rules_own_policy_gets_the_lengths_it_plans_with() -> None:
    """known_for gives a rule's policy the request policy's knowledge when both are told the
    same, and knowledge of its own (the true lengths) when only it plans with them."""
    made: list[tuple[bool, KnownRequests]] = []
    known = KnownRequests(3, False, False)

    def new_known(lengths: bool) -> KnownRequests:
        other = KnownRequests(3, False, lengths)
        made.append((lengths, other))
        return known if not lengths else other

    engine = RuleStart(COST, 2, [5, 6, 7], {}, [-1, -1, -1], known, new_known)

    class Oracle:
        sizes = "oracle"

    assert engine.known_for(object()) is known
    told = engine.known_for(Oracle())
    assert told is not known and told.output_tokens == [0, 0, 0] and known.output_tokens is None
    assert [lengths for lengths, _ in made] == [False, True] and len(engine.policies) == 2


def test_the_run_record_starts_empty() -> None:
    """A fresh record has no run, chunk or prefill stage, and ends at time 0."""
    record = RunRecord()
    assert record.run_start == record.chunk_request == record.prefill_start == []
    assert record.run_start is not record.run_end and record.now == 0.0


def test_loop_view_reports_decoded_tokens_from_the_iteration_counter() -> None:
    """decoded_tokens is the iterations since the request started decoding."""
    view = LoopView(KnownRequests(2, False, False), COST, 2, {0: 1}, [-1, 3])
    view._iteration = 7
    assert view.decoded_tokens(1) == 4 and view.decoding_requests() == [1]


def test_a_registered_policy_runs_under_a_rule_of_the_tests() -> None:
    """Any registered request policy serves any rule: shortest-first under whole prompts."""
    workload = Workload([30, 5, 12, 8], [4, 9, 2, 6], predicted_output=[4, 9, 2, 6], arrival=[0, 0, 1, 1])
    rule = WholePrompts(200)
    schedule = run_loop(
        workload, COST, 2, make_request_policy("shortest-first"), None, CostClock(), rule=rule
    )
    assert validate_fused(schedule) == [] and schedule.info["request_policy"] == "shortest-first"


def test_a_rule_is_asked_with_nothing_ready_only_while_it_holds_prompts() -> None:
    """With no request ready, the loop asks plan only while the rule holds prompts under
    way (it could only decode on otherwise)."""
    idle_asks: list[int] = []

    class Counting(FusionRule):
        def plan(self, ready, active, iteration):
            if not ready:
                idle_asks.append(len(self.under_way))
            return super().plan(ready, active, iteration)

    workload = Workload([40, 30, 50, 20], [9, 3, 7, 5], arrival=[0.0, 0.0, 2.0, 2.5])
    schedule = run_loop(workload, COST, 2, FCFS(), None, CostClock(), rule=Counting(16))
    assert validate_fused(schedule) == [] and idle_asks and min(idle_asks) >= 1
