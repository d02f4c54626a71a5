"""PD fusion's rule (chunked prefill): what it chunks, the fused engine run by the one loop
(validated, bounded, non-anticipative), and schedules that stay what they were, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsched import ContextCostModel, LevelCostModel, LinearCostModel, Workload
from llmsched.engines.fusion.bounds import fused_lower_bounds
from llmsched.engines.fusion.rule import DEFAULT_TOKEN_BUDGET, FusionRule
from llmsched.engines.fusion.validate import validate_fused
from llmsched.engines.rule import TAKE, RuleStart
from llmsched.online import request_policy_names
from llmsched.online.simulate import simulate_fusion
from llmsched.policies import DECODE_UNTIL_EVENT, KnownRequests
from tests.engines.test_loop import COSTS, fingerprint, seeded_workload
from tests.strategies import cost_models, predicted_instances

CONTEXT = ContextCostModel(0.004, 6e-5, 2e-8, 0.003, 2e-4, 1.5e-6, 1000)
PAPER = LinearCostModel.paper()


def _workload(n: int = 40, seed: int = 0) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(
        rng.integers(5, 900, n), rng.integers(1, 120, n), arrival=np.sort(rng.uniform(0, 8, n)).round(3)
    )


def test_long_prompts_span_iterations_within_the_budget() -> None:
    """A prompt longer than the room left by the decoding requests is split over iterations,
    each within the budget; the request decodes from the iteration after its last chunk."""
    work = _workload()
    s = simulate_fusion(work, PAPER, 8, "fcfs", token_budget=128)
    assert validate_fused(s) == []
    assert (s.run_decoding + s.run_chunk_tokens <= 128).all()
    per_request = np.bincount(s.chunk_request, minlength=len(work))
    assert (per_request[work.prompt_tokens > 128] >= 2).all()
    # The first token comes at the end of the iteration holding the last chunk.
    last = np.zeros(len(work), dtype=np.int64)
    np.maximum.at(last, s.chunk_request, s.chunk_run)
    np.testing.assert_allclose(s.prefill_end, s.run_end[last])
    assert (s.ttft >= 0).all() and (s.finish > s.prefill_end).all()
    # Pure decoding is jumped over: far fewer runs than iterations.
    assert s.num_runs < s.num_iterations


@settings(max_examples=60, deadline=None)
@given(
    predicted_instances(),
    st.sampled_from(request_policy_names()),
    st.integers(2, 400),
)
def test_every_fused_schedule_validates_and_respects_the_bound(instance, policy, budget) -> None:
    """Every registered request policy on a fused engine, over random workloads, arrivals,
    cost models and budgets: the schedule validates and no makespan is below the bound."""
    workload, cost, clients = instance
    if isinstance(cost, LevelCostModel):
        cost = PAPER
    s = simulate_fusion(workload, cost, clients, policy, token_budget=budget)
    assert validate_fused(s) == []
    bounds = fused_lower_bounds(workload, cost, clients, budget)
    assert s.makespan >= bounds.strong * (1 - 1e-9) - 1e-12
    assert s.num_iterations >= bounds.iterations
    summary = s.summary()
    assert summary["mode"] == "fusion" and summary["requests"] == len(workload)


@settings(max_examples=40, deadline=None)
@given(cost_models(), st.integers(2, 300), st.floats(0.1, 20), st.data())
def test_fusion_is_non_anticipative(cost, budget, cut, data) -> None:
    """Requests arriving after a time T change nothing that ends before T."""
    if isinstance(cost, LevelCostModel):
        cost = PAPER
    n = data.draw(st.integers(2, 25))
    cap = cost.prefill_capacity
    prompt = data.draw(st.lists(st.integers(1, cap), min_size=n, max_size=n))
    output = data.draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))
    arrival = data.draw(st.lists(st.floats(0, 25, allow_nan=False), min_size=n, max_size=n))
    clients = data.draw(st.integers(1, 6))
    full = Workload(prompt, output, arrival=arrival)
    early = np.flatnonzero(full.arrival <= cut)
    if early.size == 0:
        return
    part = Workload(full.prompt_tokens[early], full.output_tokens[early], arrival=full.arrival[early])
    a = simulate_fusion(full, cost, clients, "fcfs", budget)
    b = simulate_fusion(part, cost, clients, "fcfs", budget)
    before_a = a.run_end < cut
    before_b = b.run_end < cut
    k = int(before_a.sum())
    assert k == int(before_b.sum())
    for name in ("run_start", "run_iterations", "run_first_time", "run_decoding", "run_chunk_tokens"):
        np.testing.assert_array_equal(getattr(a, name)[:k], getattr(b, name)[:k])


def test_bad_input_is_refused_before_work() -> None:
    work = _workload(5)
    with pytest.raises(TypeError, match="LevelCostModel prices whole prefill levels"):
        simulate_fusion(work, PAPER.to_levels(4), 4)
    with pytest.raises(ValueError, match="token_budget must be at least 2"):
        simulate_fusion(work, PAPER, 4, token_budget=1)
    with pytest.raises(ValueError, match="token_budget"):
        simulate_fusion(work, PAPER, 4, token_budget=0)
    with pytest.raises(ValueError, match="unknown"):
        simulate_fusion(work, PAPER, 4, "fastest")


# ------------------------------------------------------------------ the rule on its own
def _rule(budget: int, prompts: list[int]) -> FusionRule:
    rule = FusionRule(budget)
    known = KnownRequests(len(prompts), False, False)
    rule.start(RuleStart(PAPER, 4, prompts, {}, [-1] * len(prompts), known, lambda lengths: known))
    return rule


def test_prompts_are_chunked_first_come_first_served_in_the_room_left() -> None:
    """Taken prompts fill the budget left by the decoding requests, in the order taken; a
    prompt completes in the iteration holding its last chunk; takes wait while the chunks
    under way fill the budget."""
    rule = _rule(10, [6, 5, 3])
    assert rule.admit_below == 10 and rule.plan(0, 2, 0) == DECODE_UNTIL_EVENT
    assert rule.plan(3, 2, 0) == TAKE
    chunks, tokens, squares, done = rule.taken([(0, 1), (1, 3)], 2)
    assert chunks == [(0, 1, 0, 6), (1, 3, 0, 2)] and (tokens, squares) == (8, 36 + 4)
    assert list(done) == [(0, 1)] and rule.admit_below == 10 - 3
    chunks, tokens, squares, done = rule.plan(0, 3, 1)
    assert chunks == [(1, 3, 2, 3)] and (tokens, squares) == (3, 25 - 4) and list(done) == [(1, 3)]
    assert rule.admit_below == 10 and rule.plan(0, 4, 2) == DECODE_UNTIL_EVENT
    assert rule.plan(0, 10, 2) == DECODE_UNTIL_EVENT  # no room at all


def test_a_budget_is_checked_when_the_rule_is_made() -> None:
    with pytest.raises(ValueError, match="token_budget must be at least 2"):
        FusionRule(1)
    assert FusionRule().token_budget == DEFAULT_TOKEN_BUDGET


# ------------------------------------------------------------------ schedules that stay what they were
@pytest.mark.parametrize(
    ("case", "digest"),
    [
        ((0, 60, 6.0, "linear", 8, "fcfs", 128, False), "203179c2aac69ec3"),
        ((1, 60, 0.0, "linear", 200, "fcfs", 2048, False), "74677842c1cd8223"),
        ((2, 80, 10.0, "context", 6, "shortest-first", 64, False), "bff0b4e4afe7f774"),
        ((3, 80, 3.0, "context", 16, "sorted-preemptive", 512, True), "bd6ee241e2280689"),
        ((4, 50, 5.0, "table", 4, "hybrid", 16, False), "2e672f10be07c378"),
        ((5, 120, 20.0, "table", 12, "longest-first-oracle", 300, False), "c05cacf004086a28"),
        ((6, 40, 1.0, "linear", 3, "batch-wise", 2, False), "1f64e7b09c1276db"),
    ],
)
def test_fused_schedules_are_what_the_fused_loop_built(case, digest) -> None:
    """Every array of a fused schedule, its makespan and info are bit for bit what the fused
    engine's own loop built before the one loop ran it (digests recorded then), over linear,
    context-aware and batch-table cost models, budgets from 2 up, online and clairvoyant."""
    seed, n, horizon, cost, clients, policy, budget, clairvoyant = case
    schedule = simulate_fusion(
        seeded_workload(seed, n, horizon), COSTS[cost], clients, policy, budget, clairvoyant
    )
    assert validate_fused(schedule) == []
    assert fingerprint(schedule) == digest


# A fleet's engines: (mode, request policy, token budget, clients).
TWO_FUSED = (("fusion", "fcfs", 64, 4), ("fusion", "fcfs", 512, 8))
MIXED_PAIR = (("fusion", "shortest-first", 128, 6), ("competition", "fcfs", 2, 6))
THREE = (("fusion", "fcfs", 32, 3), ("fusion", "batch-wise", 256, 5), ("competition", "longest-first", 2, 4))
TIGHT = (("fusion", "fcfs", 2, 10), ("fusion", "fcfs", 100, 2))


@pytest.mark.parametrize(
    ("case", "digests"),
    [
        ((0, 90, 8.0, "linear", "round-robin", False, TWO_FUSED), ("8a6536763ed0cf2d", "67788476eff816e8")),
        ((1, 90, 4.0, "context", "least-work", True, MIXED_PAIR), ("b0ac9a82c0bfb221", "05a49bea09232aec")),
        (
            (2, 120, 6.0, "table", "jsq", True, THREE),
            ("b5191c1bfca1c505", "7f45c0da84e614a6", "29865318c74c1099"),
        ),
        ((3, 120, 2.0, "linear", "power-of-two", False, TIGHT), ("cdc967a053629af8", "e9a2ff9f050cd7e2")),
    ],
)
def test_fleets_fused_engines_are_what_they_were(case, digests) -> None:
    """The engines of fleets (fused ones, beside competition ones; with backoff pulling
    requests away) run on streams through the one loop, and their schedules are bit for bit
    what they were."""
    from llmsched.fleet.engine import Backoff, Engine
    from llmsched.fleet.simulate import simulate_fleet

    seed, n, horizon, cost, router, backoff, engines = case
    fleet = [Engine(COSTS[cost], c, request_policy=p, mode=m, token_budget=b) for m, p, b, c in engines]
    workload = seeded_workload(seed, n, horizon)
    result = simulate_fleet(workload, fleet, router, Backoff() if backoff else None, seed)
    assert tuple(fingerprint(schedule) for schedule in result.schedules) == digests
