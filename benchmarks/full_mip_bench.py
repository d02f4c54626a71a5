"""The full MIP (Eqs. 1-25): tiny instances solved to optimality, and the paper's toy case.

    python benchmarks/full_mip_bench.py [--instances 30] [--limit 60] [--parts tiny,toy,limits]
                                        [--toy-limit 600] [--limits 1,5,10] [--json out.json]
                                        [--backends highs,scip] [--formulation strong]
                                        [--reference optima.json]

tiny: ``tiny_instance(seed)`` (``benchmarks/instances.py``) for seeds 0..N-1 (2-8 requests,
1-3 clients, outputs 1-20, the paper's cost model at its levels), each solved by the strong
and the literal formulation in SCIP and by the strong one in CP-SAT, warm-started from the
heuristic schedules. For each it checks that the schedule validates and
that lower bound <= optimum <= every heuristic, and prints the times side by side and the
median speed-up of strong over literal (target: >= 5x).

toy: the paper's toy case, 100 GSM8K-shaped requests on 20 clients (gsm8k_like(100, seed=0)),
strong formulation, against the paper's report (Gurobi, 3,600 s, gap not closed).

backends (``--backends highs,scip``, which runs this part alone unless ``--parts`` names
others): the same tiny instances solved by each backend named (one formulation,
``--formulation``, warm-started from the heuristics), objectives, statuses and runtimes side
by side, and whether the proven optima agree (within 1e-6 s). ``--reference`` takes the JSON
of an earlier run (``--json``; its ``backends`` rows) and compares every backend's objective
with the optimum proven there: how a core-only install (``--backends highs``, no solvers
extra) checks HiGHS against SCIP's optima computed elsewhere.

limits: the literal model of gsm8k_like(40) on 8 clients and of gsm8k_like(100) on 20, and the
strong one of the latter, under time limits of 1, 5 and 10 s on both backends: the elapsed time
of solve_full (model building included) against the limit.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from typing import Any

from instances import tiny_instance
from llmsched import LinearCostModel, lower_bounds, validate, workloads
from llmsched.mip import FullResult, Status, solve_full
from llmsched.online.warm_starts import heuristic_schedules

RUNS = (("scip", "strong"), ("scip", "literal"), ("cpsat", "strong"))


def solve_by_the_clock(workload: Any, cost: Any, clients: int, limit: float, **options: Any) -> FullResult:
    """``solve_full`` stopped by the clock alone (no work limit): within ``limit`` seconds it
    proves what optima it can, and its time is what the toy and limits parts measure."""
    return solve_full(workload, cost, clients, time_limit=limit, work_limit=math.inf, **options)


def tiny_part(instances: int, limit: float) -> list[dict]:
    print(f"Tiny instances, {limit:.0f} s limit per solve")
    head = f"{'seed':>4} {'n':>2} {'J':>2} {'K':>3} {'optimum':>8} {'bound':>8} {'best heur':>9}"
    print(head + "".join(f" {b + '/' + f:>15}" for b, f in RUNS))
    rows = []
    for seed in range(instances):
        workload, cost, clients = tiny_instance(seed)
        heuristics = heuristic_schedules(workload, cost, clients)
        best_heuristic = min(s.makespan for s in heuristics.values())
        bound = lower_bounds(workload, cost, clients).strong
        results = {
            run: solve_by_the_clock(
                workload, cost, clients, limit, backend=run[0], formulation=run[1], warm_starts=heuristics
            )
            for run in RUNS
        }
        optimum = (
            min(r.objective for r in results.values() if r.status is Status.OPTIMAL)
            if any(r.status is Status.OPTIMAL for r in results.values())
            else float("nan")
        )
        for run, r in results.items():
            assert r.schedule is not None and validate(r.schedule) == [], (seed, run)
            assert bound <= r.objective + 1e-9 and r.objective <= best_heuristic + 1e-9, (seed, run)
            if r.status is Status.OPTIMAL:
                assert abs(r.objective - optimum) <= 1e-6, (seed, run, r.objective, optimum)
        strong = results["scip", "strong"]
        cells = "".join(
            f" {results[run].runtime:>9.2f}s {'opt' if results[run].status is Status.OPTIMAL else 'lim':>4}"
            for run in RUNS
        )
        print(
            f"{seed:>4} {len(workload):>2} {clients:>2} {strong.bins:>3} {optimum:>8.4f} {bound:>8.4f} "
            f"{best_heuristic:>9.4f}{cells}"
        )
        sys.stdout.flush()
        rows.append(
            {
                "seed": seed,
                "requests": len(workload),
                "clients": clients,
                "optimum": optimum,
                "lower_bound": bound,
                "best_heuristic": best_heuristic,
                **{
                    f"{b}_{f}": {"status": str(r.status), "runtime": r.runtime, "objective": r.objective}
                    for (b, f), r in results.items()
                },
            }
        )
    proven = {run: sum(row[f"{run[0]}_{run[1]}"]["status"] == "optimal" for row in rows) for run in RUNS}
    ratios = [row["scip_literal"]["runtime"] / row["scip_strong"]["runtime"] for row in rows]
    solved = [r for r in rows if r["lower_bound"] < r["best_heuristic"] - 1e-9]
    solved_ratios = [r["scip_literal"]["runtime"] / r["scip_strong"]["runtime"] for r in solved]
    gaps = [row["best_heuristic"] / row["optimum"] - 1 for row in rows]
    print("proven optimal: " + ", ".join(f"{b}/{f} {proven[b, f]}/{len(rows)}" for b, f in RUNS))
    print(
        "median time: "
        + ", ".join(
            f"{b}/{f} {statistics.median(row[f'{b}_{f}']['runtime'] for row in rows):.3f} s" for b, f in RUNS
        )
    )
    print(
        f"strong over literal (SCIP): median speed-up {statistics.median(ratios):.1f}x "
        f"(min {min(ratios):.1f}x, max {max(ratios):.1f}x; "
        "a literal run stopped by the limit counts at the limit)"
    )
    if solved:
        print(
            f"  on the {len(solved)} instances the lower bound does not close (the strong solver runs): "
            f"median {statistics.median(solved_ratios):.1f}x"
        )
    print(
        f"best heuristic above the optimum: mean {statistics.mean(gaps):.2%}, max {max(gaps):.2%}, "
        f"{sum(g > 1e-9 for g in gaps)}/{len(gaps)} instances"
    )
    return rows


def toy_part(limit: float, backend: str) -> dict:
    workload = workloads.gsm8k_like(100, seed=0)
    clients = 20
    print(
        f"\nThe paper's toy case: 100 GSM8K-shaped requests, 20 clients, strong/{backend}, "
        f"{limit:.0f} s limit"
    )
    start = time.perf_counter()
    # The warm starts' offline assignments get 2% of the limit (at most 1 s): they are a start.
    warm = heuristic_schedules(
        workload, LinearCostModel.paper(), clients, assignment_time_limit=max(0.01, min(1.0, 0.02 * limit))
    )
    r = solve_by_the_clock(
        workload, LinearCostModel.paper(), clients, limit, backend=backend, warm_starts=warm
    )
    wall = time.perf_counter() - start
    assert r.schedule is not None and validate(r.schedule) == []
    print(
        f"status {r.status}, incumbent {r.objective:.3f} s, bound {r.bound:.3f} s, gap {r.gap:.2%}, "
        f"bins {r.bins}, warm start {r.warm_start[0] if r.warm_start else '-'} "
        f"{r.warm_start[1] if r.warm_start else float('nan'):.3f} s, wall {wall:.0f} s"
    )
    print("paper: Gurobi ran over 3,600 s to a near-optimal solution without closing the gap")
    return {
        "status": str(r.status),
        "objective": r.objective,
        "bound": r.bound,
        "gap": r.gap,
        "bins": r.bins,
        "warm_start": r.warm_start,
        "runtime": r.runtime,
        "trace": r.trace_frame().to_dict(orient="records"),
    }


def backends_part(
    instances: int, limit: float, backends: list[str], formulation: str, reference: dict[int, float] | None
) -> list[dict]:
    """Each backend on the tiny instances, side by side; the optima must agree."""
    print(f"Tiny instances by backend ({formulation} formulation), {limit:.0f} s limit per solve")
    head = f"{'seed':>4} {'n':>2} {'J':>2}" + "".join(
        f" {b + ' objective':>16} {'status':>10} {'time':>7}" for b in backends
    )
    print(head + (f" {'reference':>10}" if reference else "") + "  agree  closed by")
    rows = []
    for seed in range(instances):
        workload, cost, clients = tiny_instance(seed)
        heuristics = heuristic_schedules(workload, cost, clients)
        # Where the lower bound meets the best heuristic the strong formulation builds no model.
        search = (
            lower_bounds(workload, cost, clients).strong < min(s.makespan for s in heuristics.values()) - 1e-9
        )
        results = {
            b: solve_by_the_clock(
                workload, cost, clients, limit, backend=b, formulation=formulation, warm_starts=heuristics
            )
            for b in backends
        }
        for b, r in results.items():
            assert r.backend == b and r.schedule is not None and validate(r.schedule) == [], (seed, b)
        optima = [r.objective for r in results.values() if r.status is Status.OPTIMAL]
        if reference is not None:
            optima.append(reference[seed])
        # None where nothing was proven (nothing to compare), else whether the proofs agree.
        agree = max(optima) - min(optima) <= 1e-6 if optima else None
        cells = "".join(f" {r.objective:>16.6f} {r.status:>10} {r.runtime:>6.2f}s" for r in results.values())
        ref = f" {reference[seed]:>10.6f}" if reference is not None else ""
        print(
            f"{seed:>4} {len(workload):>2} {clients:>2}{cells}{ref}  "
            f"{'-' if agree is None else 'yes' if agree else 'NO':>5}  "
            f"{'search' if search else 'bounds'}"
        )
        sys.stdout.flush()
        rows.append(
            {
                "seed": seed,
                "requests": len(workload),
                "clients": clients,
                "agree": agree,
                "search": search,
                **({"reference": reference[seed]} if reference is not None else {}),
                **{
                    b: {
                        "status": str(r.status),
                        "objective": r.objective,
                        "bound": r.bound,
                        "runtime": r.runtime,
                    }
                    for b, r in results.items()
                },
            }
        )
    for b in backends:
        times = [row[b]["runtime"] for row in rows]
        proven = sum(row[b]["status"] == "optimal" for row in rows)
        print(
            f"{b}: proven optimal {proven}/{len(rows)}, median {statistics.median(times):.3f} s, "
            f"max {max(times):.2f} s, total {sum(times):.1f} s"
        )
    compared = [row for row in rows if row["agree"] is not None]
    print(
        f"optima agree on {sum(bool(row['agree']) for row in compared)} of the {len(compared)} instances "
        f"with a proven optimum ({len(rows) - len(compared)} without one; "
        f"{sum(row['search'] for row in rows)} of {len(rows)} needed a search: the bounds did not close them)"
    )
    return rows


def reference_optima(path: str) -> dict[int, float]:
    """Seed -> optimum proven in an earlier run's JSON (its ``backends`` rows; the smallest
    objective proven optimal by any backend there)."""
    with open(path) as fh:
        rows = json.load(fh)["backends"]
    out = {}
    for row in rows:
        proven = [
            v["objective"] for v in row.values() if isinstance(v, dict) and v.get("status") == "optimal"
        ]
        if proven:
            out[int(row["seed"])] = min(proven)
    return out


LIMIT_CASES = ((40, 8, "literal"), (100, 20, "literal"), (100, 20, "strong"))


def limits_part(limits: list[float]) -> list[dict]:
    """Whether solve_full keeps its time limit (model building included) on instances whose
    literal model takes longer to build than the limit: elapsed within 10% + 0.5 s."""
    print("\nTime limits: gsm8k_like(n) on J clients, warm-started from the heuristics (made beforehand)")
    print(f"{'n':>4} {'J':>3} {'formulation':>11} {'backend':>7} {'limit':>6} {'elapsed':>8} {'status':>11}")
    rows = []
    for n, clients, formulation in LIMIT_CASES:
        workload = workloads.gsm8k_like(n)
        warm = heuristic_schedules(workload, LinearCostModel.paper(), clients, assignment_time_limit=1.0)
        for limit in limits:
            for backend in ("scip", "cpsat"):
                start = time.perf_counter()
                r = solve_by_the_clock(
                    workload,
                    LinearCostModel.paper(),
                    clients,
                    limit,
                    backend=backend,
                    formulation=formulation,
                    warm_starts=warm,
                )
                elapsed = time.perf_counter() - start
                kept = elapsed <= 1.1 * limit + 0.5
                print(
                    f"{n:>4} {clients:>3} {formulation:>11} {backend:>7} {limit:>6.1f} {elapsed:>7.2f}s "
                    f"{r.status:>11}{'' if kept else '  OVER'}"
                )
                sys.stdout.flush()
                rows.append(
                    {
                        "requests": n,
                        "clients": clients,
                        "formulation": formulation,
                        "backend": backend,
                        "limit": limit,
                        "elapsed": elapsed,
                        "status": str(r.status),
                        "objective": r.objective,
                        "bound": r.bound,
                        "kept": kept,
                    }
                )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=30)
    parser.add_argument("--limit", type=float, default=60.0)
    parser.add_argument("--toy-limit", type=float, default=600.0)
    parser.add_argument("--toy-backend", default="scip")
    parser.add_argument(
        "--parts",
        help="tiny, toy, limits, backends (comma-separated; default tiny,toy, or backends "
        "when --backends is given)",
    )
    parser.add_argument("--backends", help="backends of the backends part, e.g. highs,scip")
    parser.add_argument("--formulation", default="strong", help="formulation of the backends part")
    parser.add_argument("--reference", help="JSON of an earlier run whose backends rows hold optima")
    parser.add_argument("--limits", default="1,5,10", help="time limits of the limits part (seconds)")
    parser.add_argument("--json")
    args = parser.parse_args()
    parts = set((args.parts or ("backends" if args.backends else "tiny,toy")).split(","))
    out: dict = {}
    if "backends" in parts:
        backends = (args.backends or "highs,scip").split(",")
        reference = reference_optima(args.reference) if args.reference else None
        out["backends"] = backends_part(args.instances, args.limit, backends, args.formulation, reference)
    if "tiny" in parts:
        out["tiny"] = tiny_part(args.instances, args.limit)
    if "toy" in parts:
        out["toy"] = toy_part(args.toy_limit, args.toy_backend)
    if "limits" in parts:
        out["limits"] = limits_part([float(x) for x in args.limits.split(",")])
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2, default=str)


if __name__ == "__main__":
    main()
