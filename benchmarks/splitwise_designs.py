"""Splitwise's cluster designs at equal power or cost on an Azure trace (Fig. 16, Fig. 18).

Every design of Table V (Baseline-A100, Baseline-H100, Splitwise-AA, -HH, -HHcap, -HA) provisioned
at the power of ``--budget`` DGX-H100s (the paper: 40; by default 8, a fifth of the paper's
cluster, to run in minutes), each Splitwise design at the split of prompt and token machines
that serves the highest load under all nine SLOs of Table VI
(:func:`llmsched.experiments.splitwise.splitwise_summary`), with its highest load, cost and
power relative to Baseline-A100's, and the splits the paper provisions for the code trace.

``--by cost`` provisions them at the cost of that many Baseline-H100 machines instead (Fig. 18b);
``--trace conversation`` runs the conversation trace (Fig. 18's) instead of the code trace.

    python benchmarks/splitwise_designs.py [--budget 8] [--requests 3000] [--by power|cost]
        [--trace code|conversation] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

from llmsched.experiments.splitwise import splitwise_summary, trace_sizes

#: The splits the paper provisions at 40 DGX-H100s' power (Sec. VI-B, Fig. 16's legends), by trace.
PAPER_SPLITS = {
    "code": {"splitwise-aa": (55, 15), "splitwise-hh": (35, 5)},
    "conversation": {"splitwise-hh": (25, 15)},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=float, default=8, help="power, in DGX-H100s (default 8)")
    parser.add_argument("--requests", type=int, default=3000, help="requests a run (default 3000)")
    parser.add_argument(
        "--by", choices=("power", "cost"), default="power", help="provision at equal power (default) or cost"
    )
    parser.add_argument(
        "--trace", choices=("code", "conversation"), default="code", help="the Azure trace (default code)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    start = time.perf_counter()
    sizes = trace_sizes(args.trace)
    report = splitwise_summary(sizes, args.budget, requests=args.requests, progress=True, by=args.by)
    seconds = time.perf_counter() - start
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(
        f"iso-{args.by} at {args.budget:g} DGX-H100s ({report['budget']:g} DGX-A100s of {args.by}), "
        f"the Azure {args.trace} trace, {args.requests} requests a run"
    )
    print(f"{'design':16s} {'machines':>10s} {'load (/s)':>9s} {'x A100':>7s} {'cost':>6s} {'x':>5s} "
          f"{'power':>6s} {'x':>5s} | paper's split (scaled)")  # fmt: skip
    for row in report["rows"]:
        machines = f"{row['prompt']}" if row["token"] == 0 else f"{row['prompt']}P, {row['token']}T"
        # The paper's splits are iso-power ones.
        paper = PAPER_SPLITS[args.trace].get(row["design"]) if args.by == "power" else None
        scaled = "" if paper is None else f"{paper[0]}P, {paper[1]}T ({paper[0] * args.budget / 40:g}P, "
        scaled += "" if paper is None else f"{paper[1] * args.budget / 40:g}T)"
        print(
            f"{row['design']:16s} {machines:>10s} {row['rate']:9.2f} {row['rate_vs_a100']:7.2f} "
            f"{row['cost']:6.2f} {row['cost_vs_a100']:5.2f} {row['power']:6.2f} "
            f"{row['power_vs_a100']:5.2f} | {scaled}"
        )
    print(f"\n{seconds:.0f} s")


if __name__ == "__main__":
    main()
