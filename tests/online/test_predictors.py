"""Length predictors: their accuracy, the simulated Mico classifier, their arguments, training
data, predictions and accuracy report."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched import Workload, workloads
from llmsched.online import (
    BucketClassifier,
    ConstantMean,
    MicoClassifier,
    NoisyOracle,
    Oracle,
    accuracy,
    cross_fit,
    length_classes,
    make_predictor,
    with_predictions,
)
from llmsched.online.predictors import MAX_BUCKETS

WL = Workload([3, 4, 5, 6], [6, 7, 8, 9])


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


def test_spearman_is_scipys_with_ties_and_zero_without_a_ranking() -> None:
    """accuracy's Spearman correlation is scipy.stats.spearmanr's (average ranks over ties) on
    random lengths full of ties; where either side is constant (a constant-mean predictor, a
    single request) there is no ranking to compare and it is 0.0, not scipy's NaN."""
    from scipy.stats import spearmanr

    rng = np.random.default_rng(7)
    compared = 0
    for size in (2, 3, 5, 10, 50, 400):
        for _ in range(5):
            truth = rng.integers(1, 6, size)
            predicted = rng.integers(0, 6, size) + rng.choice([0.0, 0.5], size)
            if np.ptp(truth) == 0 or np.ptp(predicted) == 0:
                continue
            expected = spearmanr(truth, predicted).statistic
            assert accuracy(truth, predicted)["spearman"] == pytest.approx(expected, abs=1e-12)
            compared += 1
    assert compared >= 25
    assert accuracy([3, 3, 3], [1, 2, 3])["spearman"] == 0.0
    assert accuracy([1, 2, 3], [5, 5, 5])["spearman"] == 0.0
    assert accuracy([4], [4])["spearman"] == 0.0
    assert accuracy([1, 2, 2, 3], [1, 2, 2, 3])["spearman"] == 1.0


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
    ("predictions", "error", "message"),
    [
        (
            [0, -5, 3, 4],
            ValueError,
            r"predictions\[0\] is 0.0; a predicted length must round to a token count",
        ),
        ([1, -5, 3, 4], ValueError, r"predictions\[1\] is -5.0"),
        ([1, 0.4, 3, 4], ValueError, r"predictions\[1\] is 0.4"),
        ([1, 2, 1e30, 4], ValueError, r"predictions\[2\] is 1e\+30"),
        ([1, np.nan, 3, 4], ValueError, r"predictions\[1\] is nan; values must be finite"),
        ([1, np.inf, 3, 4], ValueError, r"predictions\[1\] is inf; values must be finite"),
        ([1, 2, 3], ValueError, "predictions has 3 entries but the workload has 4 requests"),
        ([[1, 2, 3, 4]], ValueError, "predictions must be a 1-dimensional array"),
        (["a", "b", "c", "d"], ValueError, "predictions must hold real numbers"),
        (None, TypeError, "predictions must be an array of numbers, got NoneType"),
    ],
)
def test_with_predictions_refuses_what_it_used_to_clip(predictions, error, message) -> None:
    """Zero, negative, huge or non-finite predictions are refused by index, not clipped to [1, MAX]."""
    with pytest.raises(error, match=message):
        with_predictions(WL, predictions)


def test_with_predictions_rounds_good_lengths() -> None:
    """Fractional lengths round to the nearest token; numpy dtypes are good input."""
    out = with_predictions(WL, np.array([1.4, 2.6, 3, 4], dtype=np.float32))
    assert out.predicted_output is not None and out.predicted_output.tolist() == [1, 3, 3, 4]
    assert with_predictions(WL, np.arange(1, 5, dtype=np.uint8)).predicted_output.tolist() == [1, 2, 3, 4]
    with pytest.raises(TypeError, match=r"workload must be a llmsched\.Workload, got list"):
        with_predictions([1, 2], [1, 2])


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: NoisyOracle(sigma="0.5"), TypeError, "sigma must be a finite number >= 0, got str '0.5'"),
        (lambda: NoisyOracle(sigma=np.inf), ValueError, "sigma must be a finite number >= 0, got inf"),
        (lambda: NoisyOracle(seed=-1), ValueError, r"seed must be an integer >= 0 \(a seed\), got -1"),
        (lambda: NoisyOracle(seed=1.5), TypeError, r"seed must be an integer >= 0 \(a seed\), got float 1.5"),
        (
            lambda: MicoClassifier(accuracy=True),
            TypeError,
            r"accuracy must be a number in \[0, 1\], got bool",
        ),
        (
            lambda: MicoClassifier(accuracy=np.nan),
            ValueError,
            r"accuracy must be a number in \[0, 1\], got nan",
        ),
        (lambda: MicoClassifier(seed="0"), TypeError, "seed must be an integer >= 0"),
        (lambda: MicoClassifier(max_tokens=2**40), ValueError, "max_tokens must be at most 2,147,483,647"),
        (lambda: MicoClassifier(buckets=10**9), ValueError, f"buckets must be at most {MAX_BUCKETS:,}"),
        (lambda: BucketClassifier(prompt_bins=10**9), ValueError, "prompt_bins must be at most"),
        (lambda: BucketClassifier(buckets=2.0), TypeError, "buckets must be an integer, got float 2.0"),
        (
            lambda: make_predictor("noisy", sigmaa=1),
            ValueError,
            r"unknown parameter\(s\) \['sigmaa'\].*takes",
        ),
        (lambda: make_predictor(None), ValueError, "unknown predictor None"),
    ],
)
def test_predictor_parameters_are_checked_at_construction(make, error, message) -> None:
    """Bad parameters fail when the predictor is made, not later inside numpy when it predicts."""
    with pytest.raises(error, match=message):
        make()


def test_numpy_parameters_are_good() -> None:
    """numpy scalars are accepted as seeds, sigmas, accuracies and class counts, with the same results."""
    assert np.array_equal(
        NoisyOracle(np.float32(0.5), np.int64(3)).predict(WL), NoisyOracle(0.5, 3).predict(WL)
    )
    mico = MicoClassifier(np.float64(0.8), np.int32(10), np.uint16(512), np.uint8(1))
    assert np.array_equal(mico.predict(WL), MicoClassifier(0.8, 10, 512, 1).predict(WL))


@pytest.mark.parametrize("predictor", [ConstantMean(), BucketClassifier()])
@pytest.mark.parametrize(
    ("prompt", "output", "error", "message"),
    [
        ([1, -1, 2], [1, 2, 3], ValueError, r"prompt_tokens\[1\] is -1; token counts must be in \[1, "),
        (
            [1.5, 2, 3],
            [1, 2, 3],
            ValueError,
            r"prompt_tokens\[0\] is 1.5; token counts must be whole numbers",
        ),
        ([1, 2, 3], [0, 2, 3], ValueError, r"output_tokens\[0\] is 0"),
        ([1, 2, 3], [1, np.inf, 3], ValueError, r"output_tokens\[1\] is inf; token counts must be finite"),
        ([1, 2], [1, 2, 3], ValueError, "prompt_tokens has 2 entries but output_tokens has 3"),
        ([], [], ValueError, "prompt_tokens is empty; a predictor needs at least one training example"),
        (None, [1], TypeError, "prompt_tokens must be an array of token counts, got NoneType"),
    ],
)
def test_training_data_are_token_counts(predictor, prompt, output, error, message) -> None:
    """fit() names the bad training array and entry (NaN was a numpy cast error, 1.5 silently truncated)."""
    with pytest.raises(error, match=message):
        predictor.fit(prompt, output)


@pytest.mark.parametrize(
    "predictor", [Oracle(), NoisyOracle(), ConstantMean().fit([1], [2]), MicoClassifier()]
)
def test_predict_needs_a_workload(predictor) -> None:
    """predict() of something that is not a Workload is a TypeError naming the workload."""
    with pytest.raises(TypeError, match=r"workload must be a llmsched\.Workload, got list"):
        predictor.predict([1, 2, 3])


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"predictor": None},
            TypeError,
            "predictor must be a predictor name or an object with name, fit and predict",
        ),
        ({"predictor": "psychic"}, ValueError, "unknown predictor 'psychic'"),
        ({"workload": [1, 2]}, TypeError, "workload must be a llmsched.Workload, got list"),
        ({"training": [1, 2]}, TypeError, "training must be a llmsched.Workload or None, got list"),
        ({"training": Workload([1], [1])}, ValueError, "training has 1 requests but workload has 4"),
        ({"folds": 1}, ValueError, "folds must be at least 2, got 1"),
        ({"folds": 2.0}, TypeError, "folds must be an integer, got float 2.0"),
        ({"seed": -1}, ValueError, r"seed must be an integer >= 0 \(a seed\), got -1"),
        ({"seed": True}, TypeError, "seed must be an integer >= 0"),
    ],
)
def test_cross_fit_checks_its_arguments(kwargs, error, message) -> None:
    """cross_fit names a bad predictor, workload, training set, fold count or seed before fitting."""
    args = {"predictor": "mean", "workload": WL, **kwargs}
    with pytest.raises(error, match=message):
        cross_fit(**args)


def test_cross_fit_with_more_folds_than_requests_is_leave_one_out() -> None:
    """Folds beyond the number of requests are empty: a huge count is leave-one-out, at once."""
    assert np.array_equal(cross_fit("mean", WL, folds=10**12), cross_fit("mean", WL, folds=len(WL)))
    # Leave-one-out mean of the other three outputs.
    assert cross_fit("mean", WL, folds=4).tolist() == [8, 8, 7, 7]


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: length_classes([1.0, np.nan], 10, 512),
            ValueError,
            r"lengths\[1\] is nan; values must be finite",
        ),
        (lambda: length_classes([-5], 10, 512), ValueError, r"lengths\[0\] is -5; values must be >= 0"),
        (lambda: length_classes(None, 10, 512), TypeError, "lengths must be an array of numbers"),
        (lambda: length_classes([1], 0, 512), ValueError, "buckets must be at least 1, got 0"),
        (lambda: length_classes([1], 10, 512.0), TypeError, "max_tokens must be an integer, got float 512.0"),
        (lambda: accuracy([1, 2, 0], [1, 2, 3]), ValueError, r"truth\[2\] is 0; values must be > 0"),
        (lambda: accuracy([], []), ValueError, "truth is empty"),
        (lambda: accuracy([1, 2, 3], [1, np.inf, 3]), ValueError, r"predicted\[1\] is inf"),
        (lambda: accuracy([1, 2, 3], [1, 2]), ValueError, "truth has 3 lengths but predicted has 2"),
        (lambda: accuracy([1, 2], [1, 2], buckets=-1), ValueError, "buckets must be at least 1, got -1"),
        (lambda: accuracy([1, 2], [1, 2], max_tokens="512"), TypeError, "max_tokens must be an integer"),
    ],
)
def test_classes_and_accuracy_check_their_arguments(call, error, message) -> None:
    """length_classes and accuracy refuse NaN, negative or empty lengths and bad class counts by name."""
    with pytest.raises(error, match=message):
        call()


def test_length_classes_of_huge_integer_lengths_do_not_overflow() -> None:
    """Integer lengths far past max_tokens land in the last class (the product once overflowed int64)."""
    lengths = np.array([0, 51, 512, 2**62], dtype=np.int64)
    assert length_classes(lengths, MAX_BUCKETS, 512).tolist() == [0, 996, MAX_BUCKETS - 1, MAX_BUCKETS - 1]
