"""Output-length predictors: accuracy, the simulated Mico classifier, and bad parameters."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched import workloads
from llmsched.online import (
    BucketClassifier,
    MicoClassifier,
    NoisyOracle,
    accuracy,
    cross_fit,
    length_classes,
    make_predictor,
)


def test_predictors_accuracy() -> None:
    """The oracle is exact, noise costs accuracy, and the bucket classifier beats the mean held out."""
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
        (lambda: NoisyOracle(sigma=-0.1), "sigma"),
        (lambda: make_predictor("psychic"), "unknown predictor"),
        (lambda: BucketClassifier(buckets=0), "buckets"),
        (lambda: MicoClassifier(accuracy=1.2), "accuracy"),
        (lambda: MicoClassifier(max_tokens=0), "max_tokens"),
        (lambda: cross_fit("mean", workloads.gsm8k(0), folds=1), "folds"),
    ],
)
def test_bad_parameters_are_refused(make, message) -> None:
    """Bad predictor arguments raise a ValueError naming the parameter."""
    with pytest.raises(ValueError, match=message):
        make()
