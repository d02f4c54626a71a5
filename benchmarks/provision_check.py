"""Provisioning: the branch-and-bound against the exhaustive search on 20 small grids.

Ten fleet grids: two engine kinds of the paper's speed that differ in clients (16, 32 or 64)
and price (0.4-1.0 an hour), 0-15 engines of each (256 fleets), under a gsm8k-like load of
2,000 Poisson requests at 6-30 a second, jsq routing. Ten Splitwise grids: 0-15 prompt and
0-15 token machines (256 clusters; the paper's coefficients, capacity 16,384, LLaMA-65B's keys
and values over 5-50 GB/s), token machines at 0.5-1.0 of a prompt machine's price, loads of
gsm8k-like requests with prompts 1 or 8 times as long and outputs 1 or 1/4 as long at 10-40 a
second. Targets on p99 TTFT and p99 TBT are drawn per grid. For each grid: the fleet each
search chooses, its tokens per unit of cost, and the branch-and-bound's evaluations against
the grid's (target: the same optimum with at most a quarter of them). The exhaustive search
runs through joblib on ``--jobs`` workers.

Then, for information, four fleet grids whose second kind is half as fast: a slower engine
taking work can raise the fleet's p99 TBT, so the counts are not monotone and the
branch-and-bound is a heuristic there.

    python benchmarks/provision_check.py [--jobs 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np

from instances import PAPER_16K
from llmsched import DisaggregatedCluster, Engine, LinearCostModel, Workload
from llmsched.engines.disaggregation.cluster import kv_bytes_per_token
from llmsched.fleet.provision import ProvisionResult, provision, provision_disaggregated
from llmsched.workloads import gsm8k_like, poisson_arrivals

PAPER = LinearCostModel.paper()
HALF_SPEED = LinearCostModel(0.05, 0.00026, 0.058, 0.00042, 5000)
TOP = 15


def _load(case: int, rng: np.random.Generator, longer: bool) -> Workload:
    n = 2000
    g = gsm8k_like(n, seed=case)
    if longer:
        prompt = g.prompt_tokens * int(rng.choice([1, 8]))
        output = g.output_tokens // int(rng.choice([1, 4])) + 1
        rate = float(rng.uniform(10, 40))
    else:
        prompt, output, rate = g.prompt_tokens, g.output_tokens, float(rng.uniform(6, 30))
    return Workload(
        prompt, output, arrival=poisson_arrivals(n, rate, seed=case), name=f"load {case} ({rate:.1f}/s)"
    )


def _pair(
    jobs: int, search: Any, *args: Any, **kwargs: Any
) -> tuple[ProvisionResult, ProvisionResult, float, float]:
    start = time.perf_counter()
    found = search(*args, method="bnb", **kwargs)
    mid = time.perf_counter()
    every = search(*args, method="exhaustive", n_jobs=jobs, **kwargs)
    return found, every, mid - start, time.perf_counter() - mid


def _row(kind: str, case: int, workload: Workload, slo: tuple[float, float], pair: Any) -> dict[str, Any]:
    found, every, t_bnb, t_all = pair
    same = found.feasible == every.feasible and (
        not every.feasible or found.tokens_per_cost == every.tokens_per_cost
    )
    return {
        "grid": kind,
        "case": case,
        "load": workload.name,
        "slo_ttft_s": slo[0],
        "slo_tbt_s": slo[1],
        "bnb": found.counts,
        "exhaustive": every.counts,
        "tokens_per_cost": every.tokens_per_cost,
        "same_optimum": same,
        "evaluations": found.evaluations,
        "grid_size": every.grid,
        "share": found.evaluations / every.grid,
        "bnb_s": t_bnb,
        "exhaustive_s": t_all,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = []
    print(
        f"{'grid':<15}{'case':>4}  {'load':<18}{'targets (s)':<14}{'chosen':<24}{'same':<6}"
        f"{'evals':>10}  time (bnb / all)"
    )

    def show(row: dict[str, Any]) -> None:
        chosen = ", ".join(f"{k}={v}" for k, v in (row["bnb"] or {}).items()) or "none"
        print(
            f"{row['grid']:<15}{row['case']:>4}  {row['load']:<18}"
            f"{row['slo_ttft_s']:.2f}/{row['slo_tbt_s']:.3f}    "
            f"{chosen:<24}{row['same_optimum']!s:<6}{row['evaluations']:>4}/{row['grid_size']} "
            f"({row['share']:.0%})  {row['bnb_s']:.1f} / {row['exhaustive_s']:.1f} s"
        )

    for case in range(10):
        rng = np.random.default_rng(100 + case)
        workload = _load(case, rng, longer=False)
        kinds = [
            Engine(PAPER, int(rng.choice([16, 32, 64])), price=float(rng.uniform(0.4, 1.0)), name=f"k{k}")
            for k in range(2)
        ]
        slo = (float(rng.uniform(0.5, 3.0)), float(rng.uniform(0.08, 0.15)))
        pair = _pair(args.jobs, provision, workload, kinds, TOP, slo_ttft=slo[0], slo_tbt=slo[1])
        rows.append(_row("fleet", case, workload, slo, pair))
        show(rows[-1])
    for case in range(10):
        rng = np.random.default_rng(200 + case)
        workload = _load(case, rng, longer=True)
        cluster = DisaggregatedCluster(
            1,
            1,
            PAPER_16K,
            PAPER_16K,
            int(rng.choice([32, 64])),
            kv_bytes_per_token(80, 64, 128),
            float(rng.uniform(5, 50)),
        )
        slo = (float(rng.uniform(0.3, 3.0)), float(rng.uniform(0.05, 0.1)))
        token_price = float(rng.uniform(0.5, 1.0))
        pair = _pair(
            args.jobs,
            provision_disaggregated,
            workload,
            cluster,
            TOP,
            TOP,
            token_price=token_price,
            slo_ttft=slo[0],
            slo_tbt=slo[1],
        )
        rows.append(_row("splitwise", case, workload, slo, pair))
        show(rows[-1])
    checked = rows[:]
    same = sum(r["same_optimum"] for r in checked)
    quarter = sum(r["share"] <= 0.25 for r in checked)
    shares = [r["share"] for r in checked]
    print(
        f"\n{same} of {len(checked)} grids: the branch-and-bound's optimum equals the exhaustive search's; "
        f"{quarter} of {len(checked)} within a quarter of the evaluations "
        f"(share {min(shares):.0%}-{max(shares):.0%}, "
        f"mean {np.mean(shares):.0%})"
    )
    print("\nheterogeneous speeds (information: not monotone):")
    for case in range(4):
        rng = np.random.default_rng(300 + case)
        workload = _load(case, rng, longer=False)
        kinds = [
            Engine(PAPER, int(rng.choice([32, 64])), price=1.0, name="fast"),
            Engine(HALF_SPEED, int(rng.choice([32, 64])), price=float(rng.uniform(0.3, 0.5)), name="slow"),
        ]
        slo = (float(rng.uniform(0.5, 3.0)), float(rng.uniform(0.1, 0.2)))
        pair = _pair(args.jobs, provision, workload, kinds, TOP, slo_ttft=slo[0], slo_tbt=slo[1])
        rows.append(_row("two speeds", case, workload, slo, pair))
        show(rows[-1])
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=2)
    return 0 if same == len(checked) and quarter == len(checked) else 1


if __name__ == "__main__":
    sys.exit(main())
