"""PD fusion (chunked prefill): the fused iteration's price, the loop, the validator rule by
rule, the lower bound, and non-anticipation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsched import ContextCostModel, LevelCostModel, LinearCostModel, Workload
from llmsched.engines.fusion.bounds import fused_lower_bounds
from llmsched.engines.fusion.validate import validate_fused
from llmsched.online import request_policy_names
from llmsched.online.simulate import simulate_fusion
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
