"""Output-length predictors on held-out GSM8K questions: the one learned from the text beside
the ones that read lengths only, the noisy oracle and Mico's simulated classifier.

The truth is each question's reference answer length in LLaMA tokens (GSM8K's test split,
1,319 questions; ``../shared/data/gsm8k`` beside the repository, or ``--data``). Every
predictor is cross-fitted on the same folds (``--folds``, five by default): a question is
predicted by a model fitted on the other folds only.

* ``text``: :class:`llmsched.online.TextRidge` on the question's text;
* ``bucket``: output classes learned from the prompt's token count;
* ``mean``: the training mean;
* ``noisy``: the truth times a log-normal error (sigma 0.5): an oracle with noise;
* ``mico``: Mico's ten equal-width classes at its reported 80.69% accuracy, simulated from the
  truth (the class midpoint as the length).

Prints MAE, relative MAE, Spearman's rank correlation (what ordering needs) and class accuracy
(Mico's ten classes over 0-512 tokens), and the text model's time to fit and predict. Figures
depend on the data and ``--seed`` alone, not on the machine (the times aside).

    python benchmarks/predictors_text.py [--folds 5] [--seed 0] [--data DIR]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

from llmsched import Workload
from llmsched.online import cross_fit, cross_fit_text
from llmsched.online.predictors import accuracy
from llmsched.workloads import gsm8k_lengths, gsm8k_questions

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", type=Path, default=DATA, help="the folder holding GSM8K's test.jsonl")
    args = parser.parse_args()
    if not (args.data / "test.jsonl").is_file():
        print(f"GSM8K's text is not at {args.data}: nothing to measure (give --data)")
        return 0
    questions = gsm8k_questions(args.data)
    prompt, answer = gsm8k_lengths()
    workload = Workload(prompt, answer, name="gsm8k-answers")
    rows = []
    start = time.perf_counter()
    predicted = cross_fit_text(questions, answer, folds=args.folds, seed=args.seed)
    seconds = time.perf_counter() - start
    rows.append({"predictor": "text"} | accuracy(answer, predicted, max_tokens=512))
    for name in ("bucket", "mean", "noisy", "mico"):
        predicted = cross_fit(name, workload, folds=args.folds, seed=args.seed)
        rows.append({"predictor": name} | accuracy(answer, predicted, max_tokens=512))
    frame = pd.DataFrame(rows).set_index("predictor")
    print(
        f"{len(questions)} GSM8K questions, reference answers of {answer.mean():.1f} tokens on average; "
        f"{args.folds}-fold cross-fitting, seed {args.seed}"
    )
    print(frame.to_string(float_format=lambda v: f"{v:.3f}"))
    print(f"text: {args.folds} fits and predictions in {seconds:.1f} s")
    text = frame.loc["text"]
    for other in ("mean", "bucket"):
        row = frame.loc[other]
        verdict = "beats" if text.mae < row.mae and text.spearman > row.spearman else "does NOT beat"
        print(f"text {verdict} {other} on MAE and Spearman")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
