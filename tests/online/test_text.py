"""The output-length predictor learned from the prompt's text."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmsched import Workload
from llmsched.online import cross_fit
from llmsched.online.predictors import accuracy
from llmsched.online.text import TextRidge, cross_fit_text, text_features
from llmsched.workloads import gsm8k_lengths, gsm8k_questions

_TOPICS = ["apples", "trains", "percent", "wages", "marbles", "recipes", "tickets", "gardens"]


def _synthetic(n: int, seed: int) -> tuple[list[str], np.ndarray]:
    """Prompts whose answers grow with the steps they ask for (each step a sentence with a
    number), with filler topics that say nothing of the length."""
    rng = np.random.default_rng(seed)
    texts, lengths = [], []
    for _ in range(n):
        steps = int(rng.integers(1, 8))
        topic = _TOPICS[int(rng.integers(len(_TOPICS)))]
        sentences = [f"The {topic} cost {int(rng.integers(2, 90))} each." for _ in range(steps)]
        texts.append(" ".join(sentences) + f" How many {topic} in all?")
        lengths.append(max(1, int(20 * steps * np.exp(rng.normal(0, 0.15)))))
    return texts, np.array(lengths)


def test_features_are_hashed_words_and_pairs_by_crc32() -> None:
    """A term's column and sign come from its CRC-32 (not Python's salted hash, so any process
    gives the same columns); numbers fold into a digit-count token; rows have unit length."""
    x = text_features(["Ann has 12 apples."], features=1 << 20, ngrams=2)
    terms = ["ann", "has", "<num:2>", "apples", "ann has", "has <num:2>", "<num:2> apples"]
    expected = {}
    for term in terms:
        code = zlib.crc32(term.encode())
        expected[code % (1 << 20)] = 1.0 if (code >> 31) & 1 else -1.0
    row = x.getrow(0).toarray().ravel()
    assert set(np.flatnonzero(row)) == set(expected)
    for column, sign in expected.items():
        assert row[column] == pytest.approx(sign / np.sqrt(len(terms)))
    assert np.linalg.norm(row) == pytest.approx(1.0)


def test_it_learns_what_the_text_says_and_beats_the_mean_on_held_out_prompts() -> None:
    """Trained on one set of prompts and scored on another, the model ranks the held-out
    answers by the steps their questions ask for, and its error is far below the mean's."""
    train_texts, train_y = _synthetic(300, seed=1)
    test_texts, test_y = _synthetic(200, seed=2)
    model = TextRidge().fit(train_texts, train_y)
    predicted = model.predict(test_texts)
    assert predicted.dtype == np.int64 and predicted.min() >= 1
    mine = accuracy(test_y, predicted)
    mean = accuracy(test_y, np.full(test_y.size, train_y.mean()))
    assert mine["spearman"] > 0.9
    assert mine["mae"] < 0.5 * mean["mae"]
    assert model.alpha_ in model.alphas


def test_cross_fitting_never_reads_a_request_s_own_length() -> None:
    """A held-out prediction comes from a model that never saw that request: changing one
    request's length changes the predictions of the other folds only, never its own."""
    texts, y = _synthetic(60, seed=3)
    base = cross_fit_text(texts, y, folds=3, seed=5)
    changed = y.copy()
    changed[7] = 10_000
    again = cross_fit_text(texts, changed, folds=3, seed=5)
    assert again[7] == base[7]
    fold = np.random.default_rng(5).permutation(60) % 3
    same_fold = fold == fold[7]
    assert np.array_equal(again[same_fold], base[same_fold])
    assert not np.array_equal(again[~same_fold], base[~same_fold])


@given(st.integers(0, 2**32 - 1))
def test_cross_fitting_uses_the_folds_of_cross_fit(seed: int) -> None:
    """The text model's folds are those of cross_fit for the same seed: the mean predictor run
    through both predicts each request by the mean of the same other folds."""
    _, y = _synthetic(12, seed=4)
    workload = Workload(np.full(12, 10), y)
    by_lengths = cross_fit("mean", workload, folds=3, seed=seed)
    fold = np.random.default_rng(seed).permutation(12) % 3
    for f in range(3):
        rest = y[fold != f]
        assert np.all(by_lengths[fold == f] == np.rint(rest.mean()))


def test_the_same_texts_give_the_same_predictions() -> None:
    texts, y = _synthetic(80, seed=6)
    assert np.array_equal(cross_fit_text(texts, y, seed=1), cross_fit_text(texts, y, seed=1))


def test_bad_input_is_refused_before_work() -> None:
    texts, y = _synthetic(10, seed=7)
    with pytest.raises(TypeError, match="sequence of str"):
        TextRidge().fit("one prompt", [3])
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        TextRidge().fit(["a", 2, "c"], [1, 2, 3])
    with pytest.raises(ValueError, match="one per prompt"):
        TextRidge().fit(texts, y[:-1])
    with pytest.raises(ValueError, match="at least 3"):
        TextRidge().fit(texts[:2], y[:2])
    with pytest.raises(ValueError):
        TextRidge().fit(texts, np.where(np.arange(10) == 0, 0, y))  # a length of 0
    with pytest.raises(ValueError, match="fitted"):
        TextRidge().predict(texts)
    with pytest.raises(ValueError):
        TextRidge(alphas=[])
    with pytest.raises(ValueError):
        TextRidge(alphas=[-1.0])
    with pytest.raises(TypeError, match="alphas"):
        TextRidge(alphas=0.3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="folds"):
        cross_fit_text(texts, y, folds=1)


def test_gsm8k_questions_refuses_a_folder_without_the_split(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match=r"test\.jsonl"):
        gsm8k_questions(tmp_path)
    (tmp_path / "test.jsonl").write_text('{"question": "How many?"}\n')
    with pytest.raises(ValueError, match=r"1,?319"):
        gsm8k_questions(tmp_path)
    (tmp_path / "test.jsonl").write_text('{"answer": "4"}\n')
    with pytest.raises(ValueError, match="question"):
        gsm8k_questions(tmp_path)


def test_on_gsm8k_it_beats_the_mean_and_the_prompt_length_classes(shared_gsm8k) -> None:
    """Cross-fitted on the GSM8K test split (five folds, the answers' lengths as the truth), the
    text model beats the mean and the bucket predictor (output classes by prompt length) on
    both MAE and Spearman."""
    questions = gsm8k_questions(shared_gsm8k)
    prompt, answer = gsm8k_lengths()
    workload = Workload(prompt, answer)
    text = accuracy(answer, cross_fit_text(questions, answer, folds=5))
    for name in ("mean", "bucket"):
        other = accuracy(answer, cross_fit(name, workload, folds=5))
        assert text["mae"] < other["mae"] and text["spearman"] > other["spearman"], name
