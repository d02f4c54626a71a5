"""Output-length predictors: what a scheduler sees instead of the true output lengths.

A predictor is fitted on observed requests (prompt lengths and the output lengths they
produced) and predicts an output length for each request of a workload. Schedulers only
ever read ``Workload.predicted_output``; :func:`with_predictions` attaches a predictor's
output to a workload.

* ``oracle``: the true lengths (an upper bound on what prediction can give);
* ``noisy``: the truth times a log-normal error ``exp(N(0, sigma^2))``, rounded and clipped
  to ``[1, max_tokens]``;
* ``bucket``: Mico-style length classes. Outputs are cut into ``buckets`` equally
  populated classes; the classifier learns, per prompt-length class, the distribution of
  output classes (a histogram, with Laplace smoothing); it predicts the expected length
  under that distribution, and ``predict_class`` the most likely class;
* ``mico``: a length classifier with the accuracy Mico reports for its fine-tuned DistilBERT
  predictor (80.69% over ten classes on math word problems), simulated: Mico's equal-width
  classes ``floor(l / (l_max / N))``, the true class with probability ``accuracy`` and
  otherwise a neighbouring one (where Mico finds its errors fall), the class midpoint as the
  length. It stands for a learned predictor of published quality where the prompt features
  such a model reads are not part of the workload;
* ``mean``: the training mean for every request.

:func:`cross_fit` predicts every request of a workload with a model that never saw that
request (k-fold), and :func:`accuracy` reports how good the predictions are.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np

from llmsched.core.checks import (
    MAX_TOKENS,
    instance,
    positive_int,
    probability,
    prompt_and_output,
    real,
    real_array,
)
from llmsched.core.checks import (
    seed as check_seed,
)
from llmsched.core.workload import Workload

__all__ = [
    "BucketClassifier",
    "ConstantMean",
    "MicoClassifier",
    "NoisyOracle",
    "Oracle",
    "Predictor",
    "accuracy",
    "cross_fit",
    "length_classes",
    "make_predictor",
    "predictor_names",
    "with_predictions",
]


# More length classes than this are refused: a class needs training examples to mean anything,
# and the classifiers hold arrays of this size.
MAX_BUCKETS = 10_000


@runtime_checkable
class Predictor(Protocol):
    """An output-length predictor: ``fit`` on the prompt and output lengths of training
    requests (returning itself), then ``predict`` the output lengths of a workload's requests."""

    name: str

    def fit(self, prompt_tokens: np.ndarray, output_tokens: np.ndarray) -> Predictor: ...

    def predict(self, workload: Workload) -> np.ndarray: ...


def _clip(values: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(values), 1, MAX_TOKENS).astype(np.int64)


def _training_pair(prompt_tokens: Any, output_tokens: Any) -> tuple[np.ndarray, np.ndarray]:
    prompt, output = prompt_and_output(prompt_tokens, output_tokens, "training example")
    if prompt.size == 0:
        raise ValueError("prompt_tokens is empty; a predictor needs at least one training example")
    return prompt, output


def _workload(workload: Any) -> Workload:
    return instance("workload", workload, Workload, "a llmsched.Workload")


class Oracle:
    """The true output lengths."""

    name = "oracle"

    def fit(self, prompt_tokens: Any, output_tokens: Any) -> Oracle:
        return self

    def predict(self, workload: Workload) -> np.ndarray:
        return _workload(workload).output_tokens.copy()


class NoisyOracle:
    """The truth times ``exp(N(0, sigma^2))`` (multiplicative log-normal error), seeded."""

    name = "noisy"

    def __init__(self, sigma: float = 0.5, seed: int = 0):
        self.sigma = real("sigma", sigma, low=0.0)
        self.seed = check_seed("seed", seed)

    def fit(self, prompt_tokens: Any, output_tokens: Any) -> NoisyOracle:
        return self

    def predict(self, workload: Workload) -> np.ndarray:
        _workload(workload)
        rng = np.random.default_rng(self.seed)
        noise = np.exp(rng.normal(0.0, self.sigma, size=len(workload)))
        return _clip(workload.output_tokens * noise)


class ConstantMean:
    """The mean training output for every request."""

    name = "mean"

    def __init__(self) -> None:
        self.mean_: float | None = None

    def fit(self, prompt_tokens: Any, output_tokens: Any) -> ConstantMean:
        _, output = _training_pair(prompt_tokens, output_tokens)
        self.mean_ = float(output.mean())
        return self

    def predict(self, workload: Workload) -> np.ndarray:
        _workload(workload)
        if self.mean_ is None:
            raise ValueError("ConstantMean must be fitted before it predicts")
        return _clip(np.full(len(workload), self.mean_))


class BucketClassifier:
    """Output-length classes predicted from the prompt length (Mico uses ten classes).

    Parameters
    ----------
    buckets
        Number of output classes, cut at the training outputs' quantiles.
    prompt_bins
        Number of prompt-length classes (quantiles of the training prompts) the histogram
        conditions on.
    """

    name = "bucket"

    def __init__(self, buckets: int = 10, prompt_bins: int = 8):
        self.buckets = positive_int("buckets", buckets, maximum=MAX_BUCKETS)
        self.prompt_bins = positive_int("prompt_bins", prompt_bins, maximum=MAX_BUCKETS)
        self._fitted = False

    def fit(self, prompt_tokens: Any, output_tokens: Any) -> BucketClassifier:
        prompt, output = _training_pair(prompt_tokens, output_tokens)
        qs = np.linspace(0, 1, self.buckets + 1)[1:-1]
        self.output_edges_ = np.unique(np.quantile(output, qs))
        out_class = np.searchsorted(self.output_edges_, output, side="right")
        classes = self.output_edges_.size + 1
        self.class_mean_ = np.array(
            [output[out_class == c].mean() if np.any(out_class == c) else np.nan for c in range(classes)]
        )
        self.class_mean_ = np.where(np.isnan(self.class_mean_), output.mean(), self.class_mean_)
        ps = np.linspace(0, 1, self.prompt_bins + 1)[1:-1]
        self.prompt_edges_ = np.unique(np.quantile(prompt, ps))
        in_class = np.searchsorted(self.prompt_edges_, prompt, side="right")
        counts = np.ones((self.prompt_edges_.size + 1, classes))  # Laplace smoothing
        np.add.at(counts, (in_class, out_class), 1)
        self.probabilities_ = counts / counts.sum(axis=1, keepdims=True)
        self._fitted = True
        return self

    def _class_probabilities(self, workload: Workload) -> np.ndarray:
        _workload(workload)
        if not self._fitted:
            raise ValueError("BucketClassifier must be fitted before it predicts")
        in_class = np.searchsorted(self.prompt_edges_, workload.prompt_tokens, side="right")
        return np.asarray(self.probabilities_[in_class])

    def predict_class(self, workload: Workload) -> np.ndarray:
        return np.argmax(self._class_probabilities(workload), axis=1)

    def predict(self, workload: Workload) -> np.ndarray:
        """The expected length under the predicted class distribution.

        (The most likely class alone is a poor length: on GSM8K the 512-token runaways are the
        most likely class for every prompt length, which would rank all requests equal.)
        """
        return _clip(self._class_probabilities(workload) @ self.class_mean_)


class MicoClassifier:
    """A ten-class length classifier of given accuracy, as Mico's predictor is reported.

    Parameters
    ----------
    accuracy
        Probability of predicting the true class (Mico: 0.8069 on Math-Word-Problems,
        0.8537 on Alpaca). A wrong prediction is one class up or down, at random (one class
        only, at the ends of the range).
    buckets
        Number of equal-width classes over ``[0, max_tokens]``.
    max_tokens
        The generation cap ``l_max`` (512 in the GSM8K experiment).
    seed
        Seed of the simulated errors.
    """

    name = "mico"

    def __init__(self, accuracy: float = 0.8069, buckets: int = 10, max_tokens: int = 512, seed: int = 0):
        self.accuracy = probability("accuracy", accuracy)
        self.buckets = positive_int("buckets", buckets, maximum=MAX_BUCKETS)
        self.max_tokens = positive_int("max_tokens", max_tokens, maximum=MAX_TOKENS)
        self.seed = check_seed("seed", seed)

    def fit(self, prompt_tokens: Any, output_tokens: Any) -> MicoClassifier:
        return self

    def predict_class(self, workload: Workload) -> np.ndarray:
        true = length_classes(_workload(workload).output_tokens, self.buckets, self.max_tokens)
        rng = np.random.default_rng(self.seed)
        wrong = rng.random(len(workload)) >= self.accuracy
        step = np.where(rng.random(len(workload)) < 0.5, -1, 1)
        step = np.where(true == 0, 1, np.where(true == self.buckets - 1, -1, step))
        return np.clip(true + wrong * step, 0, self.buckets - 1)

    def predict(self, workload: Workload) -> np.ndarray:
        width = self.max_tokens / self.buckets
        return _clip((self.predict_class(workload) + 0.5) * width)


_PREDICTORS: dict[str, Callable[..., Any]] = {
    "oracle": Oracle,
    "noisy": NoisyOracle,
    "bucket": BucketClassifier,
    "mico": MicoClassifier,
    "mean": ConstantMean,
}


def predictor_names() -> list[str]:
    """The names :func:`make_predictor` takes, sorted."""
    return sorted(_PREDICTORS)


def make_predictor(name: str, **params: Any) -> Predictor:
    """A predictor by name (``oracle``, ``noisy``, ``bucket``, ``mico``, ``mean``) with its parameters.

    Raises
    ------
    ValueError
        An unknown name, a parameter the predictor does not take, or a bad parameter value.
    """
    if not isinstance(name, str) or name not in _PREDICTORS:
        raise ValueError(f"unknown predictor {name!r}; choose one of {predictor_names()}")
    factory = _PREDICTORS[name]
    takes = list(inspect.signature(factory).parameters)
    unknown = sorted(set(params) - set(takes))
    if unknown:
        raise ValueError(f"unknown parameter(s) {unknown} for predictor {name!r}; it takes {takes or 'none'}")
    predictor: Predictor = factory(**params)
    return predictor


def with_predictions(workload: Workload, predictions: Any) -> Workload:
    """``workload`` with ``predicted_output`` set (the only lengths schedulers read).

    Predictions are rounded to the nearest whole token.

    Raises
    ------
    TypeError, ValueError
        If ``workload`` is not a Workload, or ``predictions`` is not one finite length per
        request that rounds to a token count in ``[1, MAX_TOKENS]``.
    """
    _workload(workload)
    values = real_array("predictions", predictions)
    if values.size != len(workload):
        raise ValueError(
            f"predictions has {values.size} entries but the workload has {len(workload)} requests"
        )
    rounded = np.rint(values)
    bad = (rounded < 1) | (rounded > MAX_TOKENS)
    if np.any(bad):
        first = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"predictions[{first}] is {values[first].item()!r}; a predicted length must round to a token "
            f"count in [1, {MAX_TOKENS}]"
        )
    return workload.replace(predicted_output=rounded.astype(np.int64))


def cross_fit(
    predictor: Predictor | str,
    workload: Workload,
    training: Workload | None = None,
    folds: int = 2,
    seed: int = 0,
) -> np.ndarray:
    """Predictions for every request from models that never saw that request.

    The requests are split into ``folds`` random folds; fold f is predicted by a model fitted
    on the other folds, using the output lengths of ``training`` (the same requests observed
    in another run, e.g. another seed's generations) or, when omitted, of ``workload``.

    Raises
    ------
    TypeError, ValueError
        An unknown predictor, a ``workload`` or ``training`` that is not a Workload (or
        ``training`` of other requests), fewer than 2 ``folds``, or a bad ``seed``.
    """
    if isinstance(predictor, str):
        predictor = make_predictor(predictor)
    elif not isinstance(predictor, Predictor):
        raise TypeError(
            f"predictor must be a predictor name or an object with name, fit and predict, "
            f"got {type(predictor).__name__}"
        )
    _workload(workload)
    if training is not None:
        instance("training", training, Workload, "a llmsched.Workload or None")
    folds = positive_int("folds", folds, minimum=2)
    seed = check_seed("seed", seed)
    source = workload if training is None else training
    if len(source) != len(workload):
        raise ValueError(
            f"training has {len(source)} requests but workload has {len(workload)}; "
            "training must hold the same requests"
        )
    n = len(workload)
    fold = np.random.default_rng(seed).permutation(n) % folds
    out = np.empty(n, dtype=np.int64)
    for f in range(min(folds, n)):  # folds beyond the n-th are empty
        test = np.flatnonzero(fold == f)
        train = np.flatnonzero(fold != f)
        if test.size == 0:
            continue
        model = predictor.fit(source.prompt_tokens[train], source.output_tokens[train])
        out[test] = model.predict(workload.subset(test))
    return out


def length_classes(lengths: Any, buckets: int, max_tokens: int) -> np.ndarray:
    """Mico's equal-width length classes ``floor(l * buckets / max_tokens)``, the top edge in
    the last class (in integer arithmetic for integer lengths, so exactly).

    Raises
    ------
    TypeError, ValueError
        If ``lengths`` are not finite numbers >= 0, or ``buckets`` (at most ``MAX_BUCKETS``)
        or ``max_tokens`` (at most ``MAX_TOKENS``) is not a positive integer.
    """
    real_array("lengths", lengths, low=0.0, ndim=np.ndim(lengths))
    arr = np.asarray(lengths)
    buckets = positive_int("buckets", buckets, maximum=MAX_BUCKETS)
    max_tokens = positive_int("max_tokens", max_tokens, maximum=MAX_TOKENS)
    if arr.dtype.kind in "iu":
        # Lengths past max_tokens fall in the last class either way; capping them first keeps
        # the product within int64.
        classes = np.minimum(arr.astype(np.int64), max_tokens) * buckets // max_tokens
    else:
        classes = np.floor(arr.astype(np.float64) * buckets / max_tokens).astype(np.int64)
    return np.clip(classes, 0, buckets - 1)


def accuracy(
    truth: Any, predicted: Any, buckets: int = 10, max_tokens: int | None = None
) -> dict[str, float]:
    """How close predictions are: MAE, relative MAE, Spearman rank correlation, class accuracy.

    ``spearman`` is :func:`scipy.stats.spearmanr`'s correlation (ties take their average rank);
    when the truth or the predictions are all one value, so that they rank nothing, it is 0.0
    where scipy would give NaN. Neither input may hold NaN (a ValueError).

    ``bucket_accuracy`` is the share of requests whose predicted length falls in the same
    class as the true one, with Mico's ``buckets`` equal-width classes
    ``floor(l / (max_tokens / buckets))`` over ``[0, max_tokens]`` (by default the longest
    true length; lengths at the top edge belong to the last class).
    """
    true = real_array("truth", truth, low=0.0, low_open=True, nonempty=True)
    pred = real_array("predicted", predicted, low=0.0)
    if true.shape != pred.shape:
        raise ValueError(
            f"truth has {true.size} lengths but predicted has {pred.size}; they must be of one length"
        )
    buckets = positive_int("buckets", buckets, maximum=MAX_BUCKETS)
    top = (
        int(np.ceil(true.max()))
        if max_tokens is None
        else positive_int("max_tokens", max_tokens, maximum=MAX_TOKENS)
    )
    same = length_classes(true, buckets, top) == length_classes(pred, buckets, top)
    # A constant side (a constant-mean predictor, a single request) ranks nothing: scipy says
    # NaN (with a warning); 0.0 here, so that the report stays a number and valid JSON.
    spearman = 0.0
    if np.ptp(true) > 0 and np.ptp(pred) > 0:
        from scipy.stats import spearmanr

        spearman = float(spearmanr(true, pred).statistic)  # average ranks over ties
    return {
        "mae": float(np.abs(true - pred).mean()),
        "relative_mae": float(np.abs(true - pred).sum() / true.sum()),
        "spearman": spearman,
        "bucket_accuracy": float(same.mean()),
    }
