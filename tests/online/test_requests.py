"""Online request/iteration policies and length predictors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsched import LinearCostModel, Workload, lower_bounds, simulate, validate, workloads
from llmsched.online import (
    BucketClassifier,
    Lagrangian,
    MicoClassifier,
    NoisyOracle,
    SortedPreemptive,
    Threshold,
    TunedThreshold,
    accuracy,
    cross_fit,
    length_classes,
    make_predictor,
    threshold_k,
    with_predictions,
)
from llmsched.policies import make_request_policy
from tests.strategies import instances

REQUEST = [
    "sorted-preemptive",
    "sorted-preemptive-rr",
    "sorted-preemptive-oracle",
    "hybrid",
    "hybrid-oracle",
    "shortest-first",
    "longest-first-oracle",
]
ITERATION = ["lagrangian", "threshold", "prefill-first"]


@settings(max_examples=60, deadline=None)
@given(instances(), st.sampled_from(REQUEST), st.sampled_from(ITERATION), st.integers(0, 1000))
def test_online_policies_always_produce_valid_schedules(instance, rp, ip, seed) -> None:
    workload, cost, clients = instance
    noisy = NoisyOracle(sigma=0.7, seed=seed).predict(workload)
    workload = with_predictions(workload, noisy)
    schedule = simulate(workload, cost, clients, rp, ip)
    assert validate(schedule) == []
    assert schedule.makespan >= lower_bounds(workload, cost, clients).strong * (1 - 1e-9)


def test_algorithm1_idle_client_takes_the_longest_from_the_busiest() -> None:
    # Client 0 holds one short request; client 1 holds three. Round-robin with 2 clients puts
    # requests 0, 2, 4 on client 0, so make those short and give client 1 the long ones.
    prompt = [10] * 6
    output = [1, 100, 1, 50, 1, 30]
    w = Workload(prompt, output, predicted_output=output)
    cost = LinearCostModel(0.01, 1e-4, 0.01, 1e-4, 10_000)
    s = simulate(w, cost, 2, SortedPreemptive(initial="round-robin"), "prefill-first")
    assert validate(s) == []
    # Client 1's queue is 1, 3, 5 (longest first); once client 0 empties its own queue it
    # steals from client 1, which holds the most remaining tokens: request 5 is the only one
    # left on client 1's queue by then, so client 0 runs it.
    assert s.request_client[5] == 0
    assert s.request_client[1] == 1


def test_threshold_k_closed_form_on_the_paper_model() -> None:
    cost = LinearCostModel.paper()
    w = workloads.gsm8k(0)
    k = threshold_k(cost, 200, float(w.output_tokens.mean()), float(w.prompt_tokens.mean()))
    # 200 * sqrt(2 * 0.025 * (1 - 68/5000) / (0.029 * 345)) = 13.9
    assert k == 14
    assert threshold_k(cost, 200, 4 * float(w.output_tokens.mean())) < k  # longer outputs: smaller batches
    # With no fixed decode cost, idle clients cost nothing: wait for all.
    assert threshold_k(LinearCostModel(0.025, 1e-4, 0.0, 1e-3, 5000), 50, 300.0) == 50


def test_batching_prefills_beats_prefill_first_on_gsm8k() -> None:
    w, cost = workloads.gsm8k(0), LinearCostModel.paper()
    base = simulate(w, cost, 200, "fcfs", "prefill-first").makespan
    for policy in (Lagrangian(), Threshold()):
        s = simulate(w, cost, 200, "fcfs", policy)
        assert validate(s) == []
        assert s.makespan < base - 10  # measured: 184.9 / 185.0 s against 200.4 s


def test_tuned_threshold_tries_a_grid_and_keeps_the_best() -> None:
    w = workloads.gsm8k_like(300, seed=1)
    w = with_predictions(w, w.output_tokens)
    cost = LinearCostModel.paper()
    policy = TunedThreshold("fcfs", candidates=[1, 8, 30])
    s = simulate(w, cost, 50, "fcfs", policy)
    assert validate(s) == []
    assert set(policy.trials) == {1, 8, 30}
    assert policy.k == min(policy.trials, key=policy.trials.get)


def test_predictors_accuracy() -> None:
    w = workloads.gsm8k(0)
    truth = w.output_tokens
    assert accuracy(truth, make_predictor("oracle").predict(w))["mae"] == 0
    assert np.array_equal(NoisyOracle(sigma=0.0).predict(w), truth)
    noisy = accuracy(truth, NoisyOracle(sigma=0.5).predict(w))
    assert 0 < noisy["relative_mae"] < 0.6 and noisy["spearman"] > 0.6
    # Held-out (2-fold): where output length follows the prompt (the reference answers,
    # correlation 0.5), the bucket classifier learns it and beats the constant mean.
    answers = workloads.gsm8k(outputs="answers")
    bucket = accuracy(answers.output_tokens, cross_fit(BucketClassifier(), answers))
    mean = accuracy(answers.output_tokens, cross_fit("mean", answers))
    assert bucket["spearman"] > 0.4 > abs(mean["spearman"])
    assert bucket["mae"] < 0.95 * mean["mae"]  # measured: 38.4 against 44.6 tokens


def test_mico_classifier_has_its_published_accuracy_and_errs_by_one_class() -> None:
    """The simulated Mico classifier hits the true class at its accuracy, else a neighbour."""
    w = workloads.gsm8k_like(20_000, seed=3)
    model = MicoClassifier(accuracy=0.8069, seed=1)
    true = np.minimum(w.output_tokens * 10 // 512, 9)
    got = model.predict_class(w)
    assert np.mean(got == true) == pytest.approx(0.8069, abs=0.01)
    assert np.abs(got - true).max() == 1 and got.min() >= 0 and got.max() <= 9
    assert np.array_equal(model.predict(w), MicoClassifier(seed=1).predict(w))  # seeded
    assert set(np.unique(model.predict(w)).tolist()) <= {round((c + 0.5) * 51.2) for c in range(10)}
    acc = accuracy(w.output_tokens, model.predict(w), max_tokens=512)
    assert acc["bucket_accuracy"] == pytest.approx(np.mean(got == true))
    assert np.array_equal(MicoClassifier(accuracy=1.0).predict_class(w), true)
    # Float lengths are classed by floor(l * N / L), not by their floor first.
    assert length_classes(np.array([51.6, 51.0, 512.0]), 10, 512).tolist() == [1, 0, 9]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Threshold(k=-1), "k must be"),
        (lambda: Threshold(k=0), "k must be"),
        (lambda: NoisyOracle(sigma=-0.1), "sigma"),
        (lambda: make_predictor("psychic"), "unknown predictor"),
        (lambda: SortedPreemptive(initial="random"), "initial"),
        (lambda: SortedPreemptive(sizes="truth"), "sizes"),
        (lambda: SortedPreemptive(overhead=-5), "overhead"),
        (lambda: SortedPreemptive(overhead=2.5), "overhead"),
        (lambda: BucketClassifier(buckets=0), "buckets"),
        (lambda: MicoClassifier(accuracy=1.2), "accuracy"),
        (lambda: MicoClassifier(max_tokens=0), "max_tokens"),
        (lambda: make_request_policy("nope"), "unknown request policy"),
        (lambda: TunedThreshold(candidates=[0]), "candidates"),
        (lambda: cross_fit("mean", workloads.gsm8k(0), folds=1), "folds"),
    ],
)
def test_bad_parameters_are_refused(make, message) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def test_predicted_policies_need_predictions() -> None:
    w = workloads.gsm8k_like(20, seed=0)
    with pytest.raises(ValueError, match="predicted_output"):
        simulate(w, LinearCostModel.paper(), 4, "shortest-first")


def test_overhead_balances_request_counts_as_well_as_tokens() -> None:
    """A per-request overhead in the offline balance evens out the number of requests per client."""
    from llmsched.mip.offline import offline_queues

    w = workloads.gsm8k(0)
    plain, _ = offline_queues(w, 200, "oracle", overhead=0)
    padded, result = offline_queues(w, 200, "oracle", overhead=40)
    assert sorted(i for q in padded for i in q) == list(range(len(w)))
    spread = [max(map(len, qs)) - min(map(len, qs)) for qs in (plain, padded)]
    assert spread[1] < spread[0]
    loads = np.bincount(result.assignment, weights=w.output_tokens + 40, minlength=200)
    assert loads.max() == result.makespan


def test_study_rows_summary_and_bad_input(tmp_path) -> None:
    """The study runs every strategy per case (validated), summarises gains, and refuses bad input."""
    from llmsched.study import plot_study, run_study, study_summary

    frame = run_study(cases=3, requests=200, clients=16, n_jobs=1, progress=False)
    assert len(frame) == 12 and set(frame["method"]) == {"baseline", "offline", "online", "hybrid"}
    summary = study_summary(frame)
    assert summary["cases"] == 3 and 0 <= summary["wins"] <= 3
    wide = frame.pivot(index="case", columns="method", values="utilization")
    assert summary["utilization_gain_points"] == pytest.approx(
        100 * (wide["hybrid"] - wide["baseline"]).mean()
    )
    plot_study(frame, tmp_path / "study.png")
    assert (tmp_path / "study.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="cases"):
        run_study(cases=0)
    with pytest.raises(ValueError, match="unknown predictor"):
        run_study(cases=2, predictor="psychic")
