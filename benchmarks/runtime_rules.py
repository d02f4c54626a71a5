"""Every batching rule on the CPU runtime under the drift-aware protocol
(:mod:`llmsched.runtime.protocol`): tokens, validity (memory rule included), predicted against
measured makespan with the machine's drift beside every run, TTFT and TBT, memory peaks, the
preemption scenario and the disaggregated KV copy.

On the ``small`` preset (one thread) with 32 GSM8K-shaped requests waiting at time 0 on 16
clients, on a paged engine (blocks of 16 tokens): ``competition`` (FCFS, prefill first),
``sarathi``, ``vllm`` and ``orca`` at a 256-token budget, and ``disaggregated`` (a prompt engine
and a token engine, each request's keys and values copied between them), each ``--runs`` times,
the rules taking turns. What ``llmsched runtime validate --rule all --model small`` prints, and
then the verdict per rule: held-out stage error at most 5%, and the makespan within 5% in every
steady run (a run whose reference iteration stayed within 2% of the speed the models were
fitted at), with at least two steady runs of three.

    python benchmarks/runtime_rules.py [--runs 3] [--model small] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import time

from llmsched.cli.runtime import print_rules
from llmsched.runtime.protocol import validate_rules


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each rule (default 3)")
    parser.add_argument("--model", default="small")
    parser.add_argument("--json", help="write every figure to this file")
    args = parser.parse_args()
    start = time.perf_counter()
    report = validate_rules(args.model, runs=args.runs, progress=True)
    print_rules(report)
    fit = report["fit_error"]["context"]
    held = max(fit["prefill_mape"], fit["decode_mape"])
    print(f"\nverdict (context-aware model; held-out stage error {held:.1%} at worst, target 5%):")
    for rule, row in report["rules"].items():
        steady = [r for r in row["runs"] if r["steady"]]
        errors = ", ".join(f"{r['error']['context']:+.1%}" for r in steady) or "none"
        drifts = ", ".join(f"{r['drift']:.1%}" for r in row["runs"])
        within = row["within_5pct_when_steady"]["context"]
        print(
            f"  {rule:13s} tokens {'exact' if row['tokens_exact'] else 'DIFFER'}, "
            f"{'valid' if row['valid'] else 'INVALID'}; steady {len(steady)}/{len(row['runs'])} "
            f"(drift {drifts}); steady errors {errors}: "
            + ("no steady run" if within is None else ("within 5%" if within else "NOT within 5%"))
        )
    print(f"{time.perf_counter() - start:.0f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2, default=float)


if __name__ == "__main__":
    main()
