"""The Lagrangian and threshold iteration rules."""

from __future__ import annotations

import math

import pytest

from llmsched import LinearCostModel, simulate, validate, workloads
from llmsched.online import Lagrangian, LagrangianAsWritten, Threshold, threshold_k
from llmsched.online.iteration import stage_overhead
from llmsched.policies import PREFILL_NOW


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


class _Known:
    """What the rules read of the known requests: the mean prompt."""

    def mean_prompt(self) -> float:
        return 68.0


class _View:
    """An engine view with the fields the rules read."""

    def __init__(self, active: int, ready: int, stage_iterations: int, just_prefilled: bool = False):
        self.active, self.ready, self.free, self.unstarted = active, ready, ready, ready + 5
        self.stage_iterations, self.just_prefilled = stage_iterations, just_prefilled
        self.now, self.iteration_time, self.oldest_arrival = 0.0, 0.07, 0.0


def test_the_rule_as_written_weighs_the_stage_against_the_decode_tokens_of_the_stage() -> None:
    """Eqs. 41-43 read literally on the paper's costs: C_p is the whole stage (25 ms + 0.13 ms
    a token), C_d 0.21 ms for each token decoded since the last prefill stage."""
    known = _Known()
    mean_prompt = known.mean_prompt()
    policy = LagrangianAsWritten()
    policy.start(known, LinearCostModel.paper(), 200)
    c_p = 0.025 + 0.13e-3 * 2 * mean_prompt  # two ready prompts
    # Right after a stage nothing was decoded: decode until 0.21 ms x 10 active reaches C_p.
    wait = policy.decide(_View(active=10, ready=2, stage_iterations=0, just_prefilled=True))
    assert wait == math.ceil(c_p / (0.21e-3 * 10)) > 1
    # After wait - 1 of those iterations C_d is still short; after wait, it reaches C_p.
    assert policy.decide(_View(active=10, ready=2, stage_iterations=wait - 1)) == 1
    assert policy.decide(_View(active=10, ready=2, stage_iterations=wait)) == PREFILL_NOW
    # The decode tokens count the active clients of each iteration: one iteration of 200 (42 ms)
    # outweighs a stage of one prompt (33.84 ms), not one of two (42.68 ms).
    policy.start(known, LinearCostModel.paper(), 200)
    assert policy.decide(_View(active=200, ready=1, stage_iterations=0, just_prefilled=True)) == 1
    assert policy.decide(_View(active=200, ready=1, stage_iterations=1)) == PREFILL_NOW
    policy.start(known, LinearCostModel.paper(), 200)
    assert policy.decide(_View(active=200, ready=2, stage_iterations=0, just_prefilled=True)) == 2
    # Unlike llmsched's rule it does not prefill because every waiting request is ready.
    policy.start(known, LinearCostModel.paper(), 200)
    view = _View(active=10, ready=2, stage_iterations=0, just_prefilled=True)
    view.unstarted = 2
    assert policy.decide(view) > 1


def test_the_rule_as_written_loses_to_llmsched_s_on_gsm8k() -> None:
    """On the paper's experiment with one FCFS queue, the rule as written batches a little
    (195.93 s against prefill-first's 200.42 s) and llmsched's reading much more (184.86 s)."""
    w, cost = workloads.gsm8k(0), LinearCostModel.paper()
    base = simulate(w, cost, 200, "fcfs", "prefill-first")
    written = simulate(w, cost, 200, "fcfs", "lagrangian-as-written")
    ours = simulate(w, cost, 200, "fcfs", "lagrangian")
    assert validate(written) == []
    assert written.makespan == pytest.approx(195.93, abs=0.005)
    assert ours.makespan < written.makespan < base.makespan
    assert written.prefill_stages < base.prefill_stages
