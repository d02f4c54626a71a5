"""Fleet scale: 1,000 engines serving 1,000,000 requests (targets: at most 60 s, at most 4 GiB).

An hour of Poisson arrivals with the Azure code trace's lengths (``instances.hour_stream``,
gsm8k-like lengths without the trace) on 1,000 engines of 16 clients, the paper's coefficients
with capacity 16,384, FCFS and prefill-first on every engine. Each router runs in a fresh
process, so that its peak resident memory (``ru_maxrss``) is its own: building the workload,
the fleet run, the fleet's summary and (``--validate``) the validation of all 1,000 schedules.

    python benchmarks/fleet_scale.py [--requests 1000000] [--engines 1000]
        [--routers power-of-two,jsq,round-robin] [--validate]
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import sys
import time
from typing import Any


def _run(requests: int, engines: int, clients: int, router: str, validate: bool) -> dict[str, Any]:
    from instances import PAPER_16K, hour_stream
    from llmsched import Engine, simulate_fleet, validate_fleet

    start = time.perf_counter()
    workload = hour_stream(requests, 3600.0, seed=0)
    built = time.perf_counter() - start
    start = time.perf_counter()
    fleet = simulate_fleet(workload, [Engine(PAPER_16K, clients)] * engines, router, seed=0)
    simulated = time.perf_counter() - start
    start = time.perf_counter()
    summary = fleet.summary()
    summarized = time.perf_counter() - start
    checked, valid = None, None
    if validate:
        start = time.perf_counter()
        valid = not validate_fleet(fleet)
        checked = time.perf_counter() - start
    return {
        "router": router,
        "workload": workload.name,
        "build_s": built,
        "simulate_s": simulated,
        "summary_s": summarized,
        "validate_s": checked,
        "valid": valid,
        "peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "ttft_p99_s": summary["ttft_p99_s"],
        "tbt_p99_s": summary["tbt_p99_s"],
        "tokens_per_s": summary["tokens_per_s"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--engines", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--routers", default="power-of-two,jsq,round-robin")
    parser.add_argument("--validate", action="store_true", help="also validate every engine's schedule")
    args = parser.parse_args()
    print(f"{args.requests:,} requests over an hour on {args.engines:,} engines of {args.clients} clients")
    ok = True
    context = multiprocessing.get_context("spawn")
    for router in args.routers.split(","):
        with context.Pool(1) as pool:
            row = pool.apply(_run, (args.requests, args.engines, args.clients, router, args.validate))
        meets = row["simulate_s"] <= 60 and row["peak_gib"] <= 4
        ok &= meets and row["valid"] is not False
        extra = f", validate {row['validate_s']:.1f} s (valid {row['valid']})" if args.validate else ""
        print(
            f"  {router:<13} simulate {row['simulate_s']:.1f} s, summary {row['summary_s']:.1f} s{extra}; "
            f"peak {row['peak_gib']:.2f} GiB (targets <= 60 s, <= 4 GiB: {'met' if meets else 'NOT met'}); "
            f"TTFT p99 {row['ttft_p99_s']:.3f} s, TBT p99 {row['tbt_p99_s']:.3f} s, "
            f"{row['tokens_per_s']:.0f} tokens/s; workload {row['workload']} built in {row['build_s']:.1f} s"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
