"""ExeGPT: branch-and-bound against exhaustive search, monotonicity, case study, cross-check.

    python benchmarks/exegpt_bench.py [--model opt-13b]
        [--parts scenarios,monotonicity,case,crosscheck,fig6,calibrated] [--eps 0.01,0.05] [--json out.json]

scenarios: the paper's 20 scenarios (tasks S, T, G, C1, C2 x latency bounds at the 10th,
30th and 70th percentile of a fixed-batch sweep's latencies, and inf). For each, the
exhaustive optimum over the whole grid and the branch-and-bound at each ``--eps`` (used for
both eps_throughput and eps_latency), side by side: throughput, evaluations, time. Target:
the branch-and-bound is within eps_T of the exhaustive optimum in >= 19 of 20 scenarios,
with <= 10% of its evaluations.

monotonicity: Table 5, the share of non-monotone points per schedule and variable at 2%,
5% and 10% tolerance (latency tolerance as a share of the 70th-percentile bound), per task.

case: Table 6, OPT-13B on task S at the paper's four bounds (3.1, 5.9, 11.5 s, inf).

fig6: Fig. 6, ExeGPT against FasterTransformer (the best fixed batch under each bound) on
T5-11B, OPT-13B and GPT-3 39B, tasks S, T and C1, four bounds each (about 15 s).

calibrated: the layer model's efficiencies fitted to Splitwise's measurements of Llama-2-70B
on DGX-A100s, then Table 6 again with them.

crosscheck: ten RRA configurations on one engine with the paper's linear cost model: the
XSimulator estimate against the event simulator on sampled task-S workloads (target: within
10%), under both readings of P_D(U) (population-weighted, and the paper's mixture). Then the
same with two context-aware models (population weights), whose decode iterations read the
p + j tokens of context of each request in both simulators: the paper's model with 0.2 us
per context token, and OPT-13B on 4 A40s at tensor parallelism 4 from the layer model
(LayerCostModel.engine_cost); the errors side by side with the linear model's.
"""

from __future__ import annotations

import argparse
import json
import math
import time

from llmsched.core.cost import ContextCostModel, LinearCostModel
from llmsched.exegpt import (
    LayerCostModel,
    XSimulator,
    calibrate_efficiencies,
    crosscheck,
    monotonicity,
    optimize,
)
from llmsched.exegpt.optimize import FIG6_MODELS, FIG6_TASKS, against_fixed_batch
from llmsched.experiments.published import splitwise_samples
from llmsched.workloads import EXEGPT_TASKS

PAPER_TABLE6 = [
    (3.1, "WAA", "B_E=4, T_P=2", 3.01, 22.41),
    (5.9, "WAA", "B_E=10, T_P=2", 4.11, 23.76),
    (11.5, "RRA", "B_E=52, N_D=13, T_P=4", 10.23, 25.23),
    (math.inf, "RRA", "B_E=49, N_D=7, T_P=4", 16.87, 26.15),
]
CROSSCHECK = [(8, 16), (16, 8), (32, 4), (49, 7), (52, 13), (64, 32), (24, 1), (100, 20), (4, 64), (128, 10)]


def _vars(variables: dict | None) -> str:
    if not variables:
        return "-"
    return ",".join(f"{k}={v}" for k, v in variables.items())


def scenarios_part(model: str, eps_list: list[float]) -> list[dict]:
    print(f"20 scenarios, {model}; branch-and-bound at eps {eps_list} against exhaustive search")
    rows = []
    for task in EXEGPT_TASKS:
        sim = XSimulator.for_task(model, task)
        for bound in sim.latency_bounds():
            exh = optimize(sim, bound, method="exhaustive")
            row: dict = {
                "task": task,
                "bound_s": bound,
                "exhaustive": {
                    "schedule": exh.schedule,
                    "variables": exh.variables,
                    "throughput": exh.throughput,
                    "latency": exh.latency,
                    "evaluations": exh.evaluations,
                    "runtime_s": exh.runtime,
                },
            }
            line = (
                f"{task:>2} L_B={bound:7.2f}  exhaustive {exh.schedule} {_vars(exh.variables):40s} "
                f"{exh.throughput:7.3f}/s {exh.evaluations:6d} ev {exh.runtime:5.1f}s"
            )
            for eps in eps_list:
                bnb = optimize(sim, bound, eps_throughput=eps, eps_latency=eps)
                within = (not exh.feasible and not bnb.feasible) or (
                    bnb.feasible and bnb.throughput >= exh.throughput / (1 + eps) - 1e-12
                )
                exact = bnb.feasible == exh.feasible and (
                    not exh.feasible or math.isclose(bnb.throughput, exh.throughput, rel_tol=1e-9)
                )
                share = bnb.evaluations / exh.evaluations
                row[f"bnb_{eps}"] = {
                    "schedule": bnb.schedule,
                    "variables": bnb.variables,
                    "throughput": bnb.throughput,
                    "latency": bnb.latency,
                    "evaluations": bnb.evaluations,
                    "share": share,
                    "runtime_s": bnb.runtime,
                    "within_eps": within,
                    "exact": exact,
                }
                line += (
                    f" | eps {eps}: {bnb.throughput:7.3f}/s {bnb.evaluations:5d} ev ({share:6.2%}) "
                    f"{bnb.runtime:5.2f}s {'=' if exact else ('~' if within else 'MISS')}"
                )
            print(line, flush=True)
            rows.append(row)
    for eps in eps_list:
        key = f"bnb_{eps}"
        within = sum(r[key]["within_eps"] for r in rows)
        exact = sum(r[key]["exact"] for r in rows)
        evals = sum(r[key]["evaluations"] for r in rows)
        total = sum(r["exhaustive"]["evaluations"] for r in rows)
        worst = max(r[key]["share"] for r in rows)
        t_bnb = sum(r[key]["runtime_s"] for r in rows)
        t_exh = sum(r["exhaustive"]["runtime_s"] for r in rows)
        print(
            f"eps {eps}: within eps_T in {within}/{len(rows)}, exact optimum in {exact}/{len(rows)}; "
            f"evaluations {evals} of {total} ({evals / total:.2%}, worst scenario {worst:.2%}); "
            f"time {t_bnb:.1f} s against {t_exh:.1f} s exhaustive ({t_exh / t_bnb:.0f}x)"
        )
    return rows


def monotonicity_part(model: str) -> list[dict]:
    print(f"\nTable 5: non-monotone points (%), {model}, each cell latency/throughput")
    out = []
    for task in EXEGPT_TASKS:
        frame = monotonicity(XSimulator.for_task(model, task))
        frame.insert(0, "task", task)
        out.extend(frame.to_dict(orient="records"))
        cols = list(dict.fromkeys(zip(frame.schedule, frame.variable, strict=True)))
        if task == "S":
            print("task tol  " + " ".join(f"{s + ' ' + v:>17}" for s, v in cols))
        for tol, part in frame.groupby("tolerance"):
            cells = {(r.schedule, r.variable): r for r in part.itertuples()}
            print(
                f"{task:>4} {tol:4.0%} "
                + " ".join(
                    f"{cells[c].latency_pct:8.1f}/{cells[c].throughput_pct:<8.1f}"
                    if c in cells
                    else f"{'-':>17}"
                    for c in cols
                )
            )
    return out


def case_part() -> list[dict]:
    print("\nTable 6: OPT-13B, task S, the paper's four bounds (ours | paper)")
    sim = XSimulator.for_task("opt-13b", "S")
    rows = []
    for bound, p_sched, p_vars, p_lat, p_thr in PAPER_TABLE6:
        r = optimize(sim, bound)
        rows.append(
            {
                **r.to_dict(),
                "paper": {"schedule": p_sched, "variables": p_vars, "latency": p_lat, "throughput": p_thr},
            }
        )
        print(
            f"L_B={bound:5.1f}  {r.schedule or '-':5s} {_vars(r.variables):40s} {r.latency:6.2f} s "
            f"{r.throughput:6.2f} seq/s | {p_sched} {p_vars:22s} {p_lat:6.2f} s {p_thr:6.2f} seq/s"
        )
    best = max(r["throughput"] for r in rows)
    print(
        f"tightest bound reaches {rows[0]['throughput'] / best:.0%} of the unbounded throughput (paper: 80%)"
    )
    return rows


def crosscheck_part() -> list[dict]:
    import pandas as pd

    print("\nCross-check: XSimulator vs the event simulator, RRA on one engine, task S, paper cost model")
    out = []
    errors = {}
    for weights in ("population", "paper"):
        frame = crosscheck(CROSSCHECK, task="S", weights=weights)
        print(f"P_D(U) weights: {weights}")
        print(frame.round(3).to_string(index=False))
        worst = frame.error_pct.abs().max()
        print(
            f"  worst |error| {worst:.2f}%; within 10% in {(frame.error_pct.abs() <= 10).sum()}/{len(frame)}"
        )
        if weights == "population":
            errors["paper linear"] = frame.error_pct.to_numpy()
        frame.insert(0, "weights", weights)
        frame.insert(0, "cost", "paper linear")
        out.extend(frame.to_dict(orient="records"))
    contexts = {
        "paper + 2e-7/ctx": ContextCostModel.from_linear(LinearCostModel.paper(), 0.0, 2e-7),
        "opt-13b 4xA40 TP4": LayerCostModel.from_specs("opt-13b", "a40").engine_cost(40, tp=4),
    }
    print("\nContext-aware cost models (population weights)")
    for name, cost in contexts.items():
        frame = crosscheck(CROSSCHECK, task="S", cost=cost)
        errors[name] = frame.error_pct.to_numpy()
        # Share of a decode iteration's time spent reading context, at the steady decode batch.
        batch = frame.event_decode_batch.to_numpy()
        reading = cost.decode_per_context * batch * XSimulator.one_engine(cost).mean_context
        share = reading / (cost.decode_iteration_time(batch) + reading)
        print(f"  {name}: {cost}")
        print(f"    context is {share.min():.0%}-{share.max():.0%} of a decode iteration's time")
        frame.insert(0, "weights", "population")
        frame.insert(0, "cost", name)
        out.extend(frame.to_dict(orient="records"))
    side = pd.DataFrame({"B_E": [b for b, _ in CROSSCHECK], "N_D": [n for _, n in CROSSCHECK], **errors})
    print("error_pct of XSimulator's throughput, side by side:")
    print(side.round(3).to_string(index=False))
    for name, col in errors.items():
        print(
            f"  {name}: worst |error| {abs(col).max():.2f}%, mean |error| {abs(col).mean():.2f}%; "
            f"within 10% in {(abs(col) <= 10).sum()}/{len(col)}"
        )
    return out


def fig6_part() -> list[dict]:
    print("\nFig. 6: ExeGPT against FasterTransformer (the best fixed batch under each bound)")
    rows = []
    for model in FIG6_MODELS:
        for task in FIG6_TASKS:
            found = against_fixed_batch(XSimulator.for_task(model, task))
            rows += [{"model": model, "task": task, **row} for row in found]
            cells = "  ".join(
                f"{row['bound']:6.2f} s {row['gain']:.2f}x ({row['schedule']})"
                if row["gain"] is not None
                else f"{row['bound']:6.2f} s -"
                for row in found
            )
            print(f"{model:9s} {task:2s}  {cells}")
    gains = [row["gain"] for row in rows if row["gain"] is not None]
    print(f"mean gain {sum(gains) / len(gains):.2f}x over {len(gains)} scenarios (paper: 2x), largest "
          f"{max(gains):.2f}x (paper: 5.4x)")  # fmt: skip
    return rows


def calibrated_part() -> dict:
    fit = calibrate_efficiencies("llama2-70b", "a100", *splitwise_samples())
    print(
        "\nLayer model calibrated on Splitwise's A100 measurements: "
        f"compute {fit['compute_efficiency']:.0%}, memory {fit['memory_efficiency']:.0%} of peak; "
        f"mean errors {fit['prompt_mape']:.1f}% prompt, {fit['token_mape']:.1f}% token "
        f"over {fit['samples']} samples"
    )
    layer = LayerCostModel.from_specs("opt-13b", "a40", fit["compute_efficiency"], fit["memory_efficiency"])
    sim = XSimulator.for_task("opt-13b", "S", cost=layer)
    rows = []
    for bound, p_sched, _, _, p_thr in PAPER_TABLE6:
        r = optimize(sim, bound)
        rows.append({**r.to_dict(), "paper_throughput": p_thr})
        print(
            f"L_B={bound:5.1f}  {r.schedule or '-':5s} {r.throughput:6.2f} seq/s | "
            f"{p_sched} {p_thr:6.2f} seq/s"
        )
    return {"fit": fit, "table6": rows}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="opt-13b")
    parser.add_argument("--parts", default="scenarios,monotonicity,case,crosscheck")
    parser.add_argument("--eps", default="0.01,0.05", help="comma-separated tolerances for the search")
    parser.add_argument("--json", help="write every figure to this file")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    start = time.perf_counter()
    report: dict = {"model": args.model}
    if "scenarios" in parts:
        report["scenarios"] = scenarios_part(args.model, [float(e) for e in args.eps.split(",")])
    if "monotonicity" in parts:
        report["monotonicity"] = monotonicity_part(args.model)
    if "case" in parts:
        report["case_study"] = case_part()
    if "crosscheck" in parts:
        report["crosscheck"] = crosscheck_part()
    if "fig6" in parts:
        report["fig6"] = fig6_part()
    if "calibrated" in parts:
        report["calibrated"] = calibrated_part()
    print(f"\ntotal {time.perf_counter() - start:.1f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2, default=lambda x: None if x is None else float(x))


if __name__ == "__main__":
    main()
