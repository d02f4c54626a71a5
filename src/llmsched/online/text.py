"""An output-length predictor learned from the prompt's text.

:class:`TextRidge` reads what a request asks, not only how long it is: each prompt becomes a
sparse vector of hashed words and word pairs (numbers folded into a token of their digit count,
counts damped by a logarithm, each vector scaled to unit length) beside a few dense counts (the
prompt's characters, words, numbers and sentences, on a log scale), and a ridge regression
learns the logarithm of the output length from them. The regularisation is chosen on the
training requests alone, by the exact leave-one-out error of every candidate (one
eigendecomposition of the training kernel serves them all), and the prediction is the length
whose logarithm the model predicts: a median, which is what the mean absolute error asks for.

It needs numpy and scipy only, trains in well under a second on a thousand prompts, reads no
file and downloads nothing; the words are hashed by CRC-32, so the same texts give the same
predictions on any machine and in any process.

:func:`cross_fit_text` predicts every request from a model that never saw it, as
:func:`~llmsched.online.predictors.cross_fit` does for the predictors that read lengths only,
and with the same folds for the same ``seed``.
"""

from __future__ import annotations

import math
import re
import zlib
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from llmsched.core.checks import MAX_TOKENS, positive_int, real_array
from llmsched.core.checks import seed as check_seed

if TYPE_CHECKING:
    import scipy.sparse as sp

__all__ = ["TextRidge", "cross_fit_text", "text_features"]

#: The regularisation strengths :class:`TextRidge` chooses among by leave-one-out error.
ALPHAS = (0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0)

_TOKEN = re.compile(r"[a-z]+(?:'[a-z]+)?|\d+(?:[.,]\d+)*|[$%]")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_SENTENCE = re.compile(r"[.?!](?:\s|$)")


def _texts(name: str, texts: Any) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, (Sequence, np.ndarray)):
        raise TypeError(
            f"{name} must be a sequence of str (one prompt per request), got {type(texts).__name__}"
        )
    out = list(texts)
    bad = [i for i, t in enumerate(out) if not isinstance(t, str)]
    if bad:
        raise TypeError(f"{name}[{bad[0]}] is {type(out[bad[0]]).__name__}; every prompt must be a str")
    if not out:
        raise ValueError(f"{name} is empty; give at least one prompt")
    return out


def _words(text: str) -> list[str]:
    """The prompt's words, lower-cased; a number becomes ``<num:k>``, k its digits (1 to 6+)."""
    words = []
    for word in _TOKEN.findall(text.lower()):
        if word[0].isdigit():
            digits = sum(c.isdigit() for c in word)
            words.append(f"<num:{min(digits, 6)}>")
        else:
            words.append(word)
    return words


def _dense(text: str) -> list[float]:
    """Log counts of the prompt's characters, words, numbers and sentences."""
    return [
        math.log1p(len(text)),
        math.log1p(len(text.split())),
        math.log1p(len(_NUMBER.findall(text))),
        math.log1p(len(_SENTENCE.findall(text))),
    ]


def text_features(texts: Sequence[str], features: int = 1 << 14, ngrams: int = 2) -> sp.csr_matrix:
    """The hashed bag of words and word n-grams of each text (rows of unit length).

    A term's column is its CRC-32 modulo ``features`` and its sign another bit of the same
    hash, so that terms colliding in a column tend to cancel; a term counted c times weighs
    ``1 + log(c)``.

    Raises
    ------
    TypeError, ValueError
        ``texts`` not a non-empty sequence of str; ``features`` or ``ngrams`` not a positive
        integer (``features`` at most 2**24).
    """
    import scipy.sparse as sp  # loaded when first needed: importing llmsched loads no scipy

    texts = _texts("texts", texts)
    features = positive_int("features", features, maximum=1 << 24)
    ngrams = positive_int("ngrams", ngrams, maximum=5)
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    for row, text in enumerate(texts):
        words = _words(text)
        terms: Counter[str] = Counter()
        for n in range(1, ngrams + 1):
            terms.update(" ".join(words[i : i + n]) for i in range(len(words) - n + 1))
        weights: dict[int, float] = {}
        for term, count in terms.items():
            code = zlib.crc32(term.encode())
            column = code % features
            sign = 1.0 if (code >> 31) & 1 else -1.0
            weights[column] = weights.get(column, 0.0) + sign * (1.0 + math.log(count))
        norm = math.sqrt(sum(v * v for v in weights.values())) or 1.0
        for column, value in weights.items():
            rows.append(row)
            cols.append(column)
            vals.append(value / norm)
    return sp.csr_matrix((vals, (rows, cols)), shape=(len(texts), features), dtype=np.float64)


class TextRidge:
    """Output lengths predicted from the prompts' text by ridge regression on log length.

    :meth:`fit` and :meth:`predict` read prompts (lists of str), not a workload: a workload
    holds lengths only. :meth:`predict` returns whole token counts from 1 to ``MAX_TOKENS``,
    ready for :func:`~llmsched.online.predictors.with_predictions`.

    Parameters
    ----------
    features
        Columns of the hashed bag of words (:func:`text_features`).
    ngrams
        Longest word n-gram counted (2: words and word pairs).
    alphas
        Regularisation strengths to choose among by leave-one-out error on the training
        requests (:data:`ALPHAS` by default).
    """

    name = "text"

    def __init__(self, features: int = 1 << 14, ngrams: int = 2, alphas: Sequence[float] = ALPHAS):
        self.features = positive_int("features", features, maximum=1 << 24)
        self.ngrams = positive_int("ngrams", ngrams, maximum=5)
        if isinstance(alphas, (str, bytes)) or not isinstance(alphas, (Sequence, np.ndarray)):
            raise TypeError(f"alphas must be a sequence of numbers > 0, got {type(alphas).__name__}")
        values = real_array("alphas", list(alphas), low=0.0, low_open=True, nonempty=True)
        self.alphas = tuple(float(a) for a in values)
        self._fitted = False

    def _matrix(self, texts: list[str]) -> sp.csr_matrix:
        import scipy.sparse as sp

        words = text_features(texts, self.features, self.ngrams)
        dense = np.array([_dense(t) for t in texts])
        if not self._fitted:
            self._dense_mean = dense.mean(axis=0)
            spread = dense.std(axis=0)
            self._dense_scale = np.where(spread > 0, spread, 1.0) * math.sqrt(dense.shape[1])
        scaled = (dense - self._dense_mean) / self._dense_scale
        return sp.hstack([words, sp.csr_matrix(scaled)], format="csr")

    def fit(self, texts: Sequence[str], output_tokens: Any) -> TextRidge:
        """Learn from the prompts ``texts`` and the output lengths they produced.

        Raises
        ------
        TypeError, ValueError
            Prompts that are not str, lengths that are not one positive number per prompt,
            fewer than three prompts (leave-one-out needs two to fit on).
        """
        texts = _texts("texts", texts)
        lengths = real_array("output_tokens", output_tokens, low=0.0, low_open=True, nonempty=True)
        if lengths.size != len(texts):
            raise ValueError(f"{len(texts)} prompts but {lengths.size} output lengths; give one per prompt")
        if len(texts) < 3:
            raise ValueError(f"TextRidge needs at least 3 training prompts, got {len(texts)}")
        self._fitted = False
        x = self._matrix(texts)
        self._fitted = True
        y = np.log(lengths)
        self._y_mean = float(y.mean())
        kernel = (x @ x.T).toarray()
        row_mean = kernel.mean(axis=1)
        total = float(kernel.mean())
        centred = kernel - row_mean[:, None] - row_mean[None, :] + total
        values, vectors = np.linalg.eigh(centred)
        values = np.clip(values, 0.0, None)
        target = vectors.T @ (y - self._y_mean)
        best = (math.inf, self.alphas[0])
        for alpha in self.alphas:
            shrink = values / (values + alpha)
            fitted = vectors @ (shrink * target)
            leverage = np.einsum("ij,j,ij->i", vectors, shrink, vectors)
            loo = (y - self._y_mean - fitted) / np.maximum(1.0 - leverage - 1.0 / len(y), 1e-9)
            error = float(np.mean(loo**2))
            if error < best[0]:
                best = (error, alpha)
        self.alpha_ = best[1]
        self._dual = vectors @ (target / (values + self.alpha_))
        self._train = x
        self._row_mean = row_mean
        self._total = total
        return self

    def predict_log(self, texts: Sequence[str]) -> np.ndarray:
        """The predicted logarithm of each prompt's output length."""
        if not self._fitted:
            raise ValueError("TextRidge must be fitted before it predicts")
        x = self._matrix(_texts("texts", texts))
        kernel = (x @ self._train.T).toarray()
        centred = kernel - kernel.mean(axis=1, keepdims=True) - self._row_mean[None, :] + self._total
        return np.asarray(self._y_mean + centred @ self._dual)

    def predict(self, texts: Sequence[str]) -> np.ndarray:
        """Each prompt's predicted output length: whole tokens in ``[1, MAX_TOKENS]``."""
        return np.clip(np.rint(np.exp(self.predict_log(texts))), 1, MAX_TOKENS).astype(np.int64)


def cross_fit_text(
    texts: Sequence[str],
    output_tokens: Any,
    folds: int = 5,
    seed: int = 0,
    predictor: TextRidge | None = None,
) -> np.ndarray:
    """Every prompt's predicted length from a :class:`TextRidge` fitted on the other folds.

    The folds are those of :func:`~llmsched.online.predictors.cross_fit` for the same number of
    requests, ``folds`` and ``seed``, so that predictors of both kinds can be scored on the same
    held-out requests. ``predictor`` sets the model's parameters (a fresh default one if None).

    Raises
    ------
    TypeError, ValueError
        As :meth:`TextRidge.fit`, or fewer than 2 ``folds``, or folds too small to fit on.
    """
    texts = _texts("texts", texts)
    lengths = real_array("output_tokens", output_tokens, low=0.0, low_open=True, nonempty=True)
    if lengths.size != len(texts):
        raise ValueError(f"{len(texts)} prompts but {lengths.size} output lengths; give one per prompt")
    folds = positive_int("folds", folds, minimum=2)
    seed = check_seed("seed", seed)
    model = predictor if predictor is not None else TextRidge()
    if not isinstance(model, TextRidge):
        raise TypeError(f"predictor must be a TextRidge or None, got {type(model).__name__}")
    n = len(texts)
    fold = np.random.default_rng(seed).permutation(n) % folds
    out = np.empty(n, dtype=np.int64)
    for f in range(min(folds, n)):
        test = np.flatnonzero(fold == f)
        train = np.flatnonzero(fold != f)
        if test.size == 0:
            continue
        model.fit([texts[i] for i in train], lengths[train])
        out[test] = model.predict([texts[i] for i in test])
    return out
