"""Lower bounds on a fused engine's makespan: the strong bound is the larger of its parts and
no fused schedule beats it."""

from __future__ import annotations

import llmsched
from llmsched import LinearCostModel, Workload, workloads
from llmsched.engines.fusion.bounds import fused_lower_bounds

PAPER = LinearCostModel.paper()


def test_the_strong_bound_is_the_larger_part_and_holds() -> None:
    """On 60 GSM8K-shaped requests the work bound dominates; the simulated makespan is above it."""
    workload = workloads.gsm8k_like(60, seed=1)
    bounds = fused_lower_bounds(workload, PAPER, 8, 512)
    assert bounds.strong == max(bounds.work, bounds.single_request) == bounds.work
    assert bounds.single_request < bounds.work <= llmsched.simulate_fusion(workload, PAPER, 8).makespan


def test_a_lone_request_needs_an_iteration_per_output_token_at_least() -> None:
    """One request of 5 output tokens needs at least 5 iterations; its bound is its lone run's time."""
    lone = Workload([100], [5])
    bounds = fused_lower_bounds(lone, PAPER, 4, 512)
    assert bounds.iterations >= 5
    assert bounds.strong == bounds.single_request <= llmsched.simulate_fusion(lone, PAPER, 4).makespan
