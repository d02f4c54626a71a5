"""The 100-case study (Figs. 10-11): strategies on 100 random GSM8K-shaped cases.

Prints per-strategy means, the hybrid's gains over the baseline beside the paper's, the
number of cases the hybrid wins, and the wall time of the whole study.

    python benchmarks/study_100.py [--cases 100] [--predictor oracle] [--plot study.png]
"""

from __future__ import annotations

import argparse
import json
import time

from llmsched.experiments.study import format_study, plot_study, run_study, study_summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--predictor", default="oracle")
    parser.add_argument("--jobs", type=int, default=-1, help="joblib workers (-1: every core)")
    parser.add_argument("--plot", help="write the per-case figure to this file")
    parser.add_argument("--json", help="also write the summary to this JSON file")
    args = parser.parse_args()
    start = time.perf_counter()
    frame = run_study(args.cases, predictor=args.predictor, n_jobs=args.jobs)
    wall = time.perf_counter() - start
    summary = study_summary(frame)
    print(f"\n{summary['cases']} cases, predictor {args.predictor}, wall time {wall:.1f} s")
    print(format_study(frame, summary))
    if args.plot:
        plot_study(frame, args.plot)
        print(f"figure written to {args.plot}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({**summary, "wall_s": wall, "predictor": args.predictor}, fh, indent=2)


if __name__ == "__main__":
    main()
