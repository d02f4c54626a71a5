"""Routers on the Azure code trace: four equal engines behind each router, with and without
Mico's backoff.

Every engine has the paper's coefficients (capacity 16,384), an FCFS queue and prefill-first
iterations; the trace (8,819 requests over 57 minutes) arrives at its own rate. ``least-work``
routes by Mico-style predictions (ten length classes at Mico's 85.37% accuracy over the trace's
longest output); backoff pulls waiting requests after 20 ms. For each router: TTFT p50, p90
and p99, TBT p99, requests pulled, and whether every engine's schedule validates; then the
line the issue asks for: least-work with backoff against round robin, by p99 TTFT.

    python benchmarks/fleet_routers.py [--clients 200,16,8] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from instances import PAPER_16K, azure_code
from llmsched import Backoff, Engine, simulate_fleet, validate_fleet
from llmsched.online import with_predictions
from llmsched.online.predictors import MicoClassifier

ROUTERS = ("round-robin", "random", "jsq", "power-of-two", "least-work")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="200,16,8", help="clients of each engine, comma-separated")
    parser.add_argument("--engines", type=int, default=4)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    trace = azure_code()
    if trace is None:
        print("the Azure code trace is not here (../shared/data/azure-llm-2023); nothing to run")
        return 0
    classifier = MicoClassifier(accuracy=0.8537, max_tokens=int(trace.output_tokens.max()), seed=0)
    workload = with_predictions(trace, classifier.predict(trace))
    rows = []
    for clients in (int(c) for c in args.clients.split(",")):
        engines = [Engine(PAPER_16K, clients)] * args.engines
        print(
            f"\n{args.engines} engines of {clients} clients, {len(workload)} requests of the Azure code trace"
        )
        print(
            f"  {'router':<14}{'backoff':<9}{'ttft p50':>9}{'p90':>8}{'p99':>8}"
            f"{'tbt p99':>9}{'pulled':>8}  valid  time"
        )
        for router in ROUTERS:
            for backoff in (None, Backoff(delay=0.02)):
                start = time.perf_counter()
                fleet = simulate_fleet(workload, engines, router, backoff, seed=0)
                seconds = time.perf_counter() - start
                valid = not validate_fleet(fleet)
                s = fleet.summary()
                row = {
                    "clients": clients,
                    "router": router,
                    "backoff": backoff is not None,
                    "ttft_p50_s": s["ttft_p50_s"],
                    "ttft_p90_s": s["ttft_p90_s"],
                    "ttft_p99_s": s["ttft_p99_s"],
                    "tbt_p99_s": s["tbt_p99_s"],
                    "tokens_per_s": s["tokens_per_s"],
                    "pulled": s["pulled"],
                    "valid": valid,
                    "seconds": seconds,
                }
                rows.append(row)
                print(
                    f"  {router:<14}{'on' if backoff else 'off':<9}{s['ttft_p50_s']:>9.3f}"
                    f"{s['ttft_p90_s']:>8.3f}{s['ttft_p99_s']:>8.3f}{s['tbt_p99_s']:>9.3f}"
                    f"{s['pulled']:>8}  {valid!s:<6} {seconds:.2f} s"
                )
        by = {(r["router"], r["backoff"]): r for r in rows if r["clients"] == clients}
        lw, rr = by["least-work", True]["ttft_p99_s"], by["round-robin", False]["ttft_p99_s"]
        print(
            f"  least-work with backoff, p99 TTFT {lw:.3f} s against round robin's {rr:.3f} s: "
            f"{'lower' if lw < rr else 'NOT lower'} ({(lw / rr - 1) * 100:+.1f}%)"
        )
    print(f"\nevery fleet valid: {all(r['valid'] for r in rows)}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=2)
    return 0 if all(r["valid"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
