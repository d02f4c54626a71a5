"""The threshold rule tuned by simulation."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched import LinearCostModel, simulate, validate, workloads
from llmsched.online import FCFS, TunedThreshold, make_request_policy, with_predictions
from llmsched.policies import KnownRequests


def test_tuned_threshold_tries_a_grid_and_keeps_the_best() -> None:
    """Every candidate k is simulated; the one with the shortest makespan is kept."""
    w = workloads.gsm8k_like(300, seed=1)
    w = with_predictions(w, w.output_tokens)
    cost = LinearCostModel.paper()
    policy = TunedThreshold("fcfs", candidates=[1, 8, 30])
    s = simulate(w, cost, 50, "fcfs", policy)
    assert validate(s) == []
    assert set(policy.trials) == {1, 8, 30}
    assert policy.k == min(policy.trials, key=policy.trials.get)


def test_the_request_policy_may_be_a_name_a_factory_or_an_object() -> None:
    """A name, a class, a factory function and an object give the same trials."""
    w = workloads.gsm8k_like(120, seed=3)
    w = with_predictions(w, w.output_tokens)
    cost = LinearCostModel.paper()
    trials = []
    for given in ("fcfs", FCFS, lambda: make_request_policy("fcfs"), FCFS()):
        policy = TunedThreshold(given, candidates=[2, 6])
        policy.start(KnownRequests.everything(w), cost, 20)
        policy.tune()
        trials.append(policy.trials)
    assert all(t == trials[0] for t in trials)
    with pytest.raises(TypeError, match="request_policy must be"):
        bad = TunedThreshold(42)  # type: ignore[arg-type]
        bad.start(KnownRequests.everything(w), cost, 20)
        bad.tune()


def test_tuning_never_plans_with_the_true_lengths() -> None:
    """Without predictions there is nothing to tune on but the truth: refused (it used to
    simulate the true output lengths, a clairvoyant run nobody asked for)."""
    w = workloads.gsm8k_like(50, seed=2)
    with pytest.raises(ValueError, match="no predicted_output"):
        simulate(w, LinearCostModel.paper(), 10, "fcfs", TunedThreshold("fcfs", candidates=[1, 4]))


def test_bad_candidates_are_refused() -> None:
    """Candidates must be positive integers."""
    with pytest.raises(ValueError, match="candidates"):
        TunedThreshold(candidates=[0])


def test_tuning_with_the_runs_own_request_policy_object_leaves_it_alone() -> None:
    """The request-policy object the run uses may be the one tuned with: the trials run on
    copies, so the run's own state survives the tuning at its first decision."""
    w = workloads.gsm8k_like(80, seed=4)
    w = with_predictions(w, w.output_tokens)
    shared = FCFS()
    s = simulate(w, LinearCostModel.paper(), 6, shared, TunedThreshold(shared, candidates=[1, 3]))
    assert validate(s) == []
    fresh = simulate(w, LinearCostModel.paper(), 6, FCFS(), TunedThreshold(FCFS(), candidates=[1, 3]))
    assert np.array_equal(s.stage_end, fresh.stage_end)
