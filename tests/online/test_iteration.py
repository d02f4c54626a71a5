"""The Lagrangian and threshold iteration rules."""

from __future__ import annotations

import pytest

from llmsched import LinearCostModel, simulate, validate, workloads
from llmsched.online import Lagrangian, Threshold, threshold_k
from llmsched.online.iteration import stage_overhead


def test_threshold_k_closed_form_on_the_paper_model() -> None:
    """k* = J sqrt(2 o_p / (a_d mean_output)) on the paper's costs, clipped to [1, J]."""
    cost = LinearCostModel.paper()
    w = workloads.gsm8k(0)
    k = threshold_k(cost, 200, float(w.output_tokens.mean()), float(w.prompt_tokens.mean()))
    # 200 * sqrt(2 * 0.025 * (1 - 68/5000) / (0.029 * 345)) = 13.9
    assert k == 14
    assert threshold_k(cost, 200, 4 * float(w.output_tokens.mean())) < k  # longer outputs: smaller batches
    # With no fixed decode cost, idle clients cost nothing: wait for all.
    assert threshold_k(LinearCostModel(0.025, 1e-4, 0.0, 1e-3, 5000), 50, 300.0) == 50


def test_stage_overhead_is_the_fixed_share_of_a_stage() -> None:
    """For the linear model a stage of x tokens costs a_p (1 - x / cap) beyond its share."""
    cost = LinearCostModel.paper()
    assert stage_overhead(cost, 1000) == pytest.approx(0.025 * (1 - 1000 / 5000))
    assert stage_overhead(cost, 5000) == pytest.approx(0.0, abs=1e-15)


def test_batching_prefills_beats_prefill_first_on_gsm8k() -> None:
    """Both rules batch waiting requests into fewer stages and end well before prefill-first."""
    w, cost = workloads.gsm8k(0), LinearCostModel.paper()
    base = simulate(w, cost, 200, "fcfs", "prefill-first").makespan
    for policy in (Lagrangian(), Threshold()):
        s = simulate(w, cost, 200, "fcfs", policy)
        assert validate(s) == []
        assert s.makespan < base - 10  # measured: 184.9 / 185.0 s against 200.4 s


def test_a_given_k_is_capped_at_the_clients() -> None:
    """Threshold(k) with k above J waits for at most J ready requests."""
    policy = Threshold(k=500)
    policy.start(workloads.gsm8k_like(10, seed=0), LinearCostModel.paper(), 8)
    assert policy.k == 8


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Threshold(k=-1), "k must be"),
        (lambda: Threshold(k=0), "k must be"),
        (lambda: Threshold(k=True), "k must be"),
        (lambda: threshold_k(LinearCostModel.paper(), 0, 300.0), "clients must be"),
        (lambda: threshold_k(LinearCostModel.paper(), 10, 0.0), "mean_output must be"),
    ],
)
def test_bad_parameters_are_refused(make, message) -> None:
    """Bad arguments raise a ValueError naming the parameter."""
    with pytest.raises(ValueError, match=message):
        make()
