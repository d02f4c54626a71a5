"""Request policies against load on the engines people run: the Azure code trace on a fleet of
DGX-H100s serving Llama-2-70B, under vLLM's rules with and without chunked prefill.

The trace (8,819 requests over 3,436 s, as the package ships it with its real arrival times) is
replayed at each load by dividing its arrival times by the load. Each engine is
``preset("llama2-70b/h100/tp8")``: its measured table, 128 batch slots and the KV cache of eight
H100s less the weights (preemption by recompute when it runs out); the fleet of ``--engines``
engines routes by the fewest tokens held (``token-jsq``, SplitwiseSim's baseline). The two
rules: ``vllm`` (prefill first, prompt batches of up to 8,192 tokens: the trace's longest
request, prompt and output, is 7,841) and ``vllm+chunked`` (2,048 tokens an iteration).

Policies, every one non-anticipative:

* ``fcfs``: vLLM's order;
* ``shortest-first``: shortest predicted output first (no guard against starvation);
* ``aged-shortest-first``: shortest predicted work (prompt and predicted output tokens) first,
  aged at ``--seconds-per-token``;
* ``deadline-first``: earliest TTFT deadline first, the requests that can no longer meet their
  target deferred behind the others (never dropped); ``deadline-first/no-defer``: the same order
  without deferral. The deadline is Table VI's TTFT target, 6x the prompt's time alone on a
  DGX-A100, as a line in the prompt's tokens fitted to that machine's measured prompt times;
* ``...+admission``: the fleet turns a request away at its arrival when the TTFT it can expect
  on the engine the router chose (the prompt tokens waiting there and its own, at that
  engine's prefill speed) is past half that target (:class:`llmsched.TTFTAdmission`); the
  rejected are counted (``rejected``), never served, and meet no SLO.

A request meets Splitwise's SLOs (Table VI) when its TTFT, TBT and end-to-end slowdowns (over
its time alone on a DGX-A100, as Splitwise measures them) are within Table VI's P99 limits:
6x, 5x and 5x; ``goodput`` counts those a second of the trace's span, and ``table_vi`` says
whether all nine of Table VI's percentile limits hold over the run. Predictions are cross-fitted
(each request predicted by a model that never saw it): ``mico`` (Mico's ten classes at its
reported accuracy), ``bucket`` (output classes learned from the prompt length), ``noisy`` (the
truth with a log-normal error), ``mean`` and ``oracle``.

Prints one row per rule, load, policy and predictor, then, per rule, the load where FCFS's
goodput has fallen to half its peak and the best policy there. ``--plot`` draws goodput
against load; ``--json`` writes every row. Figures depend on nothing but the trace and the
seed: not on the machine.

    python benchmarks/policy_study.py [--engines 3] [--loads 0.5,0.75,1,1.5,2,2.5,3,4,5] [--plot F] [--json F]
"""

from __future__ import annotations

import argparse
import json
import time
from importlib import resources
from typing import Any

import numpy as np
import pandas as pd

import llmsched
from llmsched.experiments.splitwise import MACHINES, SLOS
from llmsched.online import AgedShortestFirst, DeadlineFirst, cross_fit, with_predictions
from llmsched.online.registry import register_request_policy
from llmsched.workloads import from_azure_trace

RULES = {"vllm": (False, 8192), "vllm+chunked": (True, 2048)}
#: Table VI's P99 limits, each request's: TTFT, TBT and end-to-end slowdown.
LIMITS = {"ttft": SLOS[("ttft", 99)], "tbt": SLOS[("tbt", 99)], "e2e": SLOS[("e2e", 99)]}


def trace() -> llmsched.Workload:
    path = resources.files("llmsched").joinpath("data/azure_llm_code_2023.csv")
    return from_azure_trace(str(path), name="azure-code")


def alone(workload: llmsched.Workload) -> tuple[np.ndarray, np.ndarray]:
    """Each request's prompt time and token time alone on a DGX-A100 (Table VI's reference)."""
    reference = llmsched.preset(MACHINES["a100"][0]).splitwisesim_cost()
    prompts = workload.prompt_tokens
    ttft0 = np.array([float(reference.prefill_time(int(p))) for p in prompts])
    tbt0 = np.array([float(reference.decode_iteration_time(int(p))) for p in prompts])
    return ttft0, tbt0


def ttft_line(workload: llmsched.Workload, ttft0: np.ndarray) -> tuple[float, float]:
    """Table VI's TTFT target (6x alone on a DGX-A100) as ``base + per_token * prompt``: a
    least-squares line through the targets of the trace's prompts."""
    target = LIMITS["ttft"] * ttft0
    per_token, base = np.polyfit(workload.prompt_tokens.astype(float), target, 1)
    return float(max(base, 0.0)), float(max(per_token, 0.0))


def score(schedule: Any, workload: llmsched.Workload, ttft0: np.ndarray, tbt0: np.ndarray) -> dict:
    frame = schedule.request_frame()
    served = ~schedule.rejected
    ttft = frame["ttft"].to_numpy(dtype=float)
    e2e = frame["e2e"].to_numpy(dtype=float)
    output = workload.output_tokens
    tbt = (e2e - ttft) / (output + 1)  # Splitwise's: over every token after the first
    slow = {"ttft": ttft / ttft0, "tbt": tbt / tbt0, "e2e": e2e / (ttft0 + tbt0 * output)}
    good = served.copy()  # a rejected request is not served: it meets nothing
    for metric, limit in LIMITS.items():
        good &= slow[metric] <= limit
    span = float(workload.arrival.max() - workload.arrival.min())
    table_vi = bool(served.any()) and all(
        np.percentile(slow[m][served], q) < limit for (m, q), limit in SLOS.items()
    )
    return {
        "goodput": good.sum() / span,
        "attainment": float(good.mean()),
        "table_vi": bool(table_vi),
        "ttft_p50": float(np.percentile(ttft[served], 50)),
        "ttft_p99": float(np.percentile(ttft[served], 99)),
        "tbt_p50_ms": 1e3 * float(np.percentile(tbt[served], 50)),
        "tbt_p99_ms": 1e3 * float(np.percentile(tbt[served], 99)),
        "preemptions": int(np.asarray(schedule.preemptions).sum()),
        "rejected": int(schedule.rejected.sum()),
        "deferred": int(schedule.info["deferred"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", type=int, default=3)
    parser.add_argument("--loads", default="0.5,0.75,1,1.5,2,2.5,3,4,5")
    parser.add_argument("--seconds-per-token", type=float, default=0.002)
    parser.add_argument("--predictors", default="mico,bucket,noisy,mean,oracle")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", help="draw goodput against load to this file")
    parser.add_argument("--json", help="write every row to this file")
    args = parser.parse_args()
    loads = [float(x) for x in args.loads.split(",")]
    base = trace()
    ttft0, tbt0 = alone(base)
    line = ttft_line(base, ttft0)
    register_request_policy("study-deadline", lambda: DeadlineFirst(line[0], line[1], defer=True))
    register_request_policy("study-deadline-no-defer", lambda: DeadlineFirst(line[0], line[1], defer=False))
    register_request_policy("study-aged", lambda: AgedShortestFirst(args.seconds_per_token))
    door = llmsched.TTFTAdmission(line[0], line[1])
    # label: (the engines' request policy, whether it reads predictions, the fleet's admission)
    policies = {
        "fcfs": ("fcfs", False, None),
        "shortest-first": ("shortest-first", True, None),
        "aged-shortest-first": ("study-aged", True, None),
        "deadline-first": ("study-deadline", False, None),
        "deadline-first/no-defer": ("study-deadline-no-defer", False, None),
        "fcfs+admission": ("fcfs", False, door),
        "aged-shortest-first+admission": ("study-aged", True, door),
        "deadline-first+admission": ("study-deadline", False, door),
    }
    predicted = {
        name: with_predictions(base, cross_fit(name, base, seed=args.seed))
        for name in args.predictors.split(",")
    }
    preset = llmsched.preset("llama2-70b/h100/tp8")
    cost, memory = preset.cost(), preset.memory()
    print(
        f"{len(base)} requests over {base.arrival.max():.0f} s; {args.engines} x {preset.name}; "
        f"deadline: {line[0]:.3f} s + {line[1] * 1e3:.4f} ms a prompt token"
    )
    rows = []
    start = time.perf_counter()
    for rule, (chunked, cap) in RULES.items():
        for load in loads:
            for label, (policy, reads, admission) in policies.items():
                for predictor in list(predicted) if reads else ["-"]:
                    source = predicted[predictor] if reads else next(iter(predicted.values()))
                    workload = source.replace(arrival=source.arrival / load)
                    engine = llmsched.Engine(
                        cost,
                        128,
                        request_policy=policy,
                        mode="vllm",
                        chunked_prefill=chunked,
                        max_num_batched_tokens=cap,
                        memory=memory,
                    )
                    schedule = llmsched.simulate_fleet(
                        workload, [engine] * args.engines, "token-jsq", admission=admission
                    )
                    violations = schedule.validate()
                    if violations:
                        raise SystemExit(f"{rule} {load} {label}: invalid: {violations[:3]}")
                    rows.append(
                        {"rule": rule, "load": load, "policy": label, "predictor": predictor}
                        | score(schedule, workload, ttft0, tbt0)
                    )
    frame = pd.DataFrame(rows)
    pd.set_option("display.width", 200)
    print(frame.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    print(f"\n{len(frame)} runs in {time.perf_counter() - start:.0f} s; every schedule valid")
    for rule in RULES:
        mine = frame[frame.rule == rule]
        fcfs = mine[mine.policy == "fcfs"].set_index("load")
        peak = fcfs.goodput.max()
        fallen = fcfs[(fcfs.index > fcfs.goodput.idxmax()) & (fcfs.goodput <= peak / 2)]
        if fallen.empty:
            print(f"{rule}: FCFS's goodput never fell to half its peak ({peak:.3g}/s) by load {max(loads)}")
            continue
        load = float(fallen.index[0])
        at = mine[(mine.load == load) & (mine.policy != "fcfs")]
        best = at.loc[at.goodput.idxmax()]
        base_row = fcfs.loc[load]
        print(
            f"{rule}: FCFS peaks at {peak:.3g}/s and falls to {base_row.goodput:.3g}/s at load {load:g} "
            f"(p99 TTFT {base_row.ttft_p99:.3g} s); best there: {best.policy} ({best.predictor}) "
            f"{best.goodput:.3g}/s = {best.goodput / base_row.goodput:.2f}x, p99 TTFT {best.ttft_p99:.3g} s"
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(RULES), figsize=(11, 4), sharey=True)
        for ax, rule in zip(axes, RULES, strict=True):
            mine = frame[(frame.rule == rule) & frame.predictor.isin(["-", "mico"])]
            for label, part in mine.groupby("policy", sort=False):
                ax.plot(part.load, part.goodput, marker="o", label=label)
            ax.set_title(f"{rule}, {args.engines} x DGX-H100")
            ax.set_xlabel("load (x the trace's rate)")
            ax.grid(alpha=0.3)
        axes[0].set_ylabel("goodput (requests/s within Table VI)")
        axes[0].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
