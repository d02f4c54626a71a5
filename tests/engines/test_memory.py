"""KV-cache memory in the loop and the schedules: admission by free blocks, preemption by
recompute into pieces, the memory and pieces rules of the validators, and the invariants
over all instances (every schedule validates, no request is lost, every preempted request
finishes with all its tokens, no makespan below its bound)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import llmsched
from llmsched import LinearCostModel, TableCostModel, Workload
from llmsched.core.memory import KVMemory
from llmsched.engines.batching import batching_rule
from llmsched.engines.competition.bounds import lower_bounds
from llmsched.engines.competition.rule import CompetitionRule
from llmsched.engines.fusion.bounds import fused_lower_bounds
from llmsched.engines.fusion.schedule import FusedSchedule
from llmsched.engines.fusion.validate import validate_fused
from llmsched.engines.loop import CostClock, run_loop
from llmsched.engines.memory import check_memory, memory_by_run
from llmsched.engines.orca.rule import most_iteration_tokens
from llmsched.online import FCFS, make_iteration_policy, make_request_policy, request_policy_names

COST = LinearCostModel(0.02, 1e-4, 0.03, 2e-4, prefill_capacity=4000)
# A measured table that prices the prompts' squares (prefill by tokens and prompt count) and
# mixed iterations at SplitwiseSim's 1.1: the clock reads every continuation's prompt.
TABLE = TableCostModel(
    (16, 64, 256, 1024, 2048),
    (0.02, 0.025, 0.04, 0.1, 0.2),
    (1, 4, 16),
    (0.03, 0.032, 0.04),
    1e-6,
    prefill_capacity=4000,
    max_batch=32,
    mixed_factor=1.1,
    batched_prompt=64,
    batched_tokens=(64, 256, 1024, 2048),
    batched_times=(0.025, 0.035, 0.09, 0.18),
)


def run(
    workload: Workload,
    rule: Any,
    clients: int = 8,
    policy: Any = None,
    clairvoyant: bool = False,
    cost: Any = COST,
) -> Any:
    return run_loop(workload, cost, clients, policy or FCFS(), None, CostClock(), clairvoyant, rule)


def check(schedule: Any) -> list[Any]:
    return validate_fused(schedule) if isinstance(schedule, FusedSchedule) else llmsched.validate(schedule)


def test_memory_by_run_counts_blocks_by_hand() -> None:
    """Two pieces of prompts 15 and 3 (blocks of 4) decoding over runs [0, 2) and [2, 5):
    in iteration 1 the first holds ceil((15 + 2) / 4) = 5 blocks and the second 1; in
    iteration 4 the first (decode range [0, 5)) holds ceil(20 / 4) = 5, the second
    (range [1, 5)) ceil((3 + 4) / 4) = 2."""
    memory = KVMemory(10, block_size=4, watermark=0.0)
    used = memory_by_run(
        memory,
        prompt=np.array([15, 3]),
        decode_start=np.array([0, 1]),
        decode_end=np.array([5, 5]),
        run_first_iteration=np.array([0, 2]),
        run_iterations=np.array([2, 3]),
    )
    assert used.tolist() == [5 + 1, 5 + 2]
    # Taken in iteration 1, the second holds its prompt's block until it decodes from run 1
    # (iteration 2) on: ceil((3 + 4 - 2 + 1) / 4) = 2 blocks in iteration 4.
    waiting = memory_by_run(
        memory,
        np.array([15, 3]),
        np.array([0, 2]),
        np.array([5, 5]),
        np.array([0, 2]),
        np.array([2, 3]),
        taken_iteration=np.array([-1, 1]),
    )
    assert waiting.tolist() == [5 + 1, 5 + 2]


def test_preemption_splits_a_request_into_pieces_and_loses_no_token() -> None:
    """Four requests of 20-token prompts and 60-token outputs, all at once, in 16 blocks of
    8 tokens: they are admitted together, outgrow the memory, and the last taken is
    preempted and recomputed; every request still decodes all its tokens."""
    workload = Workload([20] * 4, [60] * 4)
    memory = KVMemory(24, block_size=8, watermark=0.0)
    schedule = run(workload, batching_rule("vllm", 512, memory=memory), clients=4)
    assert check(schedule) == []
    parent = schedule.request_parent
    assert parent is not None and parent.size > 4
    requests = schedule.requests
    assert requests.output_tokens.tolist() == [60] * 4 and requests.prompt_tokens.tolist() == [20] * 4
    assert int(schedule.preemptions.sum()) == parent.size - 4 > 0
    # A continuation recomputes its request's prompt and the tokens decoded before it.
    continuation = np.flatnonzero(np.r_[False, parent[1:] <= parent[:-1]] | (np.arange(parent.size) >= 4))
    assert np.all(schedule.workload.prompt_tokens[continuation] > 20)


def test_admission_waits_for_memory_first_come_first_served() -> None:
    """A 200-token prompt takes 13 of 20 blocks of 16; a 100-token prompt arriving next
    needs 7 with its first token, one more than admission may promise a request (a block
    for rounding): it waits until the first finishes, though a client is free."""
    memory = KVMemory(20, block_size=16, watermark=0.0)
    workload = Workload([200, 100], [50, 10], arrival=[0.0, 0.01])
    with pytest.raises(ValueError, match="more than the"):
        check_memory(workload, KVMemory(15, block_size=16, watermark=0.0), clients=2)
    schedule = run(workload, CompetitionRule(make_iteration_policy("prefill-first"), memory), clients=2)
    assert check(schedule) == []
    assert schedule.request_parent is None  # admission kept it from ever running out
    assert schedule.prefill_end[1] >= schedule.finish[0]


def test_the_memory_rule_alone_breaks_when_the_memory_shrinks() -> None:
    """A valid schedule checked against a smaller memory breaks the memory rule and no other."""
    workload = Workload([30] * 6, [40] * 6, arrival=[0, 0, 0.1, 0.2, 0.2, 0.5])
    memory = KVMemory(40, block_size=8, watermark=0.0)
    for rule in (batching_rule("vllm", 512, memory=memory), batching_rule("orca", 512, memory=memory)):
        schedule = run(workload, rule, clients=6)
        assert check(schedule) == []
        smaller = dataclasses.replace(schedule, memory=KVMemory(12, block_size=8, watermark=0.0))
        assert {v.rule for v in check(smaller)} == {"memory"}


def test_the_pieces_rule_breaks_when_a_continuation_recomputes_the_wrong_tokens() -> None:
    workload = Workload([20] * 4, [60] * 4)
    memory = KVMemory(24, block_size=8, watermark=0.0)
    schedule = run(workload, batching_rule("vllm", 512, memory=memory), clients=4)
    parent = schedule.request_parent.copy()
    later = int(np.flatnonzero(np.arange(parent.size) >= 4)[0])
    parent[later] = (parent[later] + 1) % 4  # claimed by another request
    broken = dataclasses.replace(schedule, request_parent=parent)
    assert "pieces" in {v.rule for v in check(broken)}


class _Planned(FCFS):
    planned_ahead = True


OPEN_ENDED = [name for name in request_policy_names() if getattr(make_request_policy(name), "open_ended", 0)]


@pytest.mark.parametrize("policy", [_Planned(), make_request_policy("hybrid")], ids=["planned", "hybrid"])
def test_a_policy_that_plans_up_front_is_refused_with_memory(policy: Any) -> None:
    """A preempted request continues as a new request: a policy planned over the workload
    up front cannot take it."""
    workload = Workload([10, 10], [5, 5])
    with pytest.raises(TypeError, match="plans over the whole workload up front"):
        run(workload, batching_rule("vllm", 512, memory=KVMemory(100, 4)), clients=2, policy=policy)
    # By name, the refusal names the policy as it was given ('hybrid' is a sorted-preemptive one).
    for entry in (llmsched.simulate, llmsched.simulate_fusion):
        with pytest.raises(TypeError, match="request policy 'hybrid' plans over the whole workload"):
            entry(workload, COST, 2, "hybrid", memory=KVMemory(100, 4))


RULES = [
    ("vllm", False),
    ("vllm", True),
    ("sarathi", False),
    ("orca", False),
    ("padded", False),
    ("competition", False),
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    which=st.sampled_from(RULES),
    policy=st.sampled_from(OPEN_ENDED),
    clients=st.integers(1, 8),
    block_size=st.sampled_from([1, 4, 16]),
    clairvoyant=st.booleans(),
    cost=st.sampled_from([COST, TABLE]),
)
def test_with_memory_every_schedule_validates_and_every_request_finishes_whole(
    data: st.DataObject,
    which: tuple[str, bool],
    policy: str,
    clients: int,
    block_size: int,
    clairvoyant: bool,
    cost: Any,
) -> None:
    n = data.draw(st.integers(1, 14))
    prompt = data.draw(st.lists(st.integers(1, 120), min_size=n, max_size=n))
    output = data.draw(st.lists(st.integers(1, 80), min_size=n, max_size=n))
    arrival = data.draw(st.lists(st.sampled_from([0.0, 0.05, 0.3, 1.0]), min_size=n, max_size=n))
    predicted = data.draw(st.lists(st.integers(1, 80), min_size=n, max_size=n))
    workload = Workload(prompt, output, predicted, arrival)
    longest = max(p + o for p, o in zip(prompt, output, strict=True))
    # Just enough for the longest request, or up to three times that: tight memories preempt.
    blocks = -(-longest // block_size) + min(clients, n) + 1
    blocks = data.draw(st.integers(blocks, 3 * blocks))
    memory = KVMemory(blocks, block_size=block_size, watermark=data.draw(st.sampled_from([0.0, 0.01])))
    try:
        check_memory(workload, memory, clients)
    except ValueError:
        return  # the watermark takes the block the longest request needed
    name, chunked = which
    if name == "competition":
        rule: Any = CompetitionRule(make_iteration_policy("lagrangian"), memory)
    else:
        rule = batching_rule(name, 256, chunked, memory)
    schedule = run(workload, rule, clients, make_request_policy(policy), clairvoyant, cost)
    assert check(schedule) == [] and schedule.info["clairvoyant"] == clairvoyant
    # Nothing lost: the requests the schedule speaks of are the workload's.
    requests = schedule.requests
    assert requests.prompt_tokens.tolist() == prompt and requests.output_tokens.tolist() == output
    assert requests.arrival.tolist() == arrival
    assert np.all(np.isfinite(schedule.latency)) and schedule.latency.size == n
    if name == "padded":
        return  # padded insertion reports no bound: none is proven for its padded prices
    if isinstance(schedule, FusedSchedule):
        budget = schedule.token_budget
        if name == "orca":  # Orca may carry one whole prompt past its cap
            budget = most_iteration_tokens(budget, workload)
        bound = fused_lower_bounds(workload, cost, clients, budget).strong
    else:
        bound = lower_bounds(workload, cost, clients).strong
    assert schedule.makespan >= bound * (1 - 1e-9)


class _Spy:
    """The Lagrangian rule, recording the fewest waiting requests the loop showed it."""

    name = "spy"

    def __init__(self) -> None:
        self.inner = make_iteration_policy("lagrangian")
        self.fewest = 10**9

    def start(self, known: Any, cost: Any, clients: int) -> None:
        self.inner.start(known, cost, clients)

    def decide(self, view: Any) -> int:
        self.fewest = min(self.fewest, view.unstarted)
        return int(self.inner.decide(view))


def test_an_iteration_policy_sees_continuations_among_the_waiting() -> None:
    """The loop asks the iteration policy only with requests ready, so it shows at least one
    waiting; preempted requests' continuations count among them (taken, they do not make the
    count fall below what arrived)."""
    rng = np.random.default_rng(1)
    preempted = 0
    for _ in range(30):
        n = 20
        arrival = np.sort(rng.choice([0.0, 0.05, 0.3], n))
        workload = Workload(rng.integers(5, 80, n), rng.integers(20, 80, n), arrival=arrival)
        spy = _Spy()
        rule = CompetitionRule(spy, KVMemory(50, block_size=4, watermark=0.0))  # type: ignore[arg-type]
        schedule = run(workload, rule, clients=6)
        assert check(schedule) == [] and spy.fewest >= 1
        preempted += int(schedule.preemptions.sum())
    assert preempted > 0


@pytest.mark.parametrize("which", RULES, ids=["-".join(map(str, r)) for r in RULES])
def test_a_continuation_that_could_not_be_taken_is_refused_before_work(which: tuple[str, bool]) -> None:
    """A request preempted late comes back with a prompt of up to p + o - 1 tokens: where that
    passes what one take may hold (the prefill capacity, vLLM's cap without chunking), the
    engine refuses the workload up front, naming the request; with memory for every request
    the engine may hold at once nothing is preempted, and the same workload runs."""
    mode, chunked = which
    cost = LinearCostModel(0.02, 1e-4, 0.03, 2e-4, prefill_capacity=100)
    workload = Workload([10, 10], [230, 230])
    tight, ample = KVMemory(62, 4, watermark=0.0), KVMemory(120, 4, watermark=0.0)

    def rule(memory: KVMemory) -> Any:
        if mode == "competition":
            return CompetitionRule(make_iteration_policy("prefill-first"), memory)
        return batching_rule(mode, 60 if mode == "vllm" else 64, chunked, memory)

    # What one take holds: vLLM's cap without chunking (below the capacity), else the capacity.
    cap = 60 if which == ("vllm", False) else 100
    refused = rf"request 0 may be preempted .* prompt of 239 tokens, more than the {cap} one take"
    with pytest.raises(ValueError, match=refused):
        rule(tight).check(workload, cost, 2)
    rule(ample).check(workload, cost, 2)
    schedule = run(workload, rule(ample), clients=2, cost=cost)
    assert check(schedule) == [] and int(schedule.preemptions.sum()) == 0


def test_the_slo_policy_runs_under_memory_when_only_continuations_wait() -> None:
    """A continuation waits with its request's arrival: the view's oldest arrival is that of
    the oldest request waiting, continuations included, so a TTFT-aware policy has a finite
    slack to reason about (it used to be shown no arrival at all, and failed)."""
    cost = LinearCostModel(0.02, 1e-4, 0.03, 2e-4, prefill_capacity=300)
    workload = Workload([4, 4], [20, 20])
    for name in ("slo", "lagrangian"):
        policy = make_iteration_policy(name) if name == "slo" else make_iteration_policy(name, slo_ttft=1.0)
        schedule = run(workload, CompetitionRule(policy, KVMemory(8, 4, watermark=0.0)), clients=2, cost=cost)
        assert check(schedule) == [] and int(schedule.preemptions.sum()) > 0
