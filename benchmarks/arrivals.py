"""Policies under arrivals: the Azure code trace of 2023 at 0.5x, 0.75x and 1x its rate.

200 clients, the paper's LLaMA-65B coefficients with a prefill capacity of 16,384 tokens,
every run non-anticipative (a policy learns of a request when it arrives). Policies that plan
with predicted lengths get cross-fitted ``mico`` predictions (ten length classes at the
accuracy Mico reports); ``-oracle`` policies the true lengths. Prints, per rate and policy,
the makespan, TTFT, TBT and end-to-end percentiles and the goodput under the SLO targets,
and checks the targets of the hybrid:

* every schedule validates;
* hybrid (mico) and hybrid-oracle, with the Lagrangian rule, end within 0.5% of the best
  other policy's makespan, with a p99 TTFT at most 1.2x that of fcfs / prefill-first + 1 s.

    python benchmarks/arrivals.py [--rates 0.5,0.75,1] [--slo-ttft 10] [--slo-tbt-mean 0.5] [--json PATH]

Without the trace (``../shared/data/azure-llm-2023`` beside the repository) it runs the
hour-long stream of :func:`instances.hour_stream` instead and says so.

A second table (``--gsm8k-rates``, default 4,6,7 requests/s) runs 6,000 GSM8K-shaped requests
(``gsm8k_like(6000, seed=1)``) arriving as a Poisson stream on the paper's own model
(capacity 5,000): long outputs, so there the clients and the iteration rule are what binds.
"""

from __future__ import annotations

import argparse
import json
import time

from instances import PAPER_16K, azure_code, hour_stream
from llmsched import simulate, validate
from llmsched.online import cross_fit, make_iteration_policy, make_request_policy, with_predictions

PAIRS = [
    ("fcfs", "prefill-first"),
    ("fcfs", "lagrangian"),
    ("fcfs", "threshold"),
    ("fcfs", "slo"),
    ("offline", "lagrangian"),
    ("sorted-preemptive", "lagrangian"),
    ("longest-first", "lagrangian"),
    ("shortest-first", "lagrangian"),
    ("hybrid", "prefill-first"),
    ("hybrid", "lagrangian"),
    ("hybrid", "slo"),
    ("offline-oracle", "lagrangian"),
    ("longest-first-oracle", "lagrangian"),
    ("hybrid-oracle", "lagrangian"),
]
HYBRIDS = [("hybrid", "lagrangian"), ("hybrid-oracle", "lagrangian")]
KEYS = ("makespan_s", "ttft_p50_s", "ttft_p99_s", "tbt_p50_s", "tbt_p99_s", "e2e_p99_s", "goodput_rps")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="0.5,0.75,1", help="rate multipliers (default 0.5,0.75,1)")
    parser.add_argument("--slo-ttft", type=float, default=10.0, help="TTFT target, seconds (default 10)")
    parser.add_argument(
        "--slo-tbt-mean", type=float, default=0.5, help="mean TBT target, seconds (default 0.5)"
    )
    parser.add_argument("--gsm8k-rates", default="4,6,7", help="Poisson rates of the GSM8K stream")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    failures = _azure(rates, args)
    _gsm8k_stream([float(r) for r in args.gsm8k_rates.split(",")] if args.gsm8k_rates else [], args)
    print("\nall targets met" if not failures else "\nFAILED:\n  " + "\n  ".join(failures))
    raise SystemExit(1 if failures else 0)


GSM8K_PAIRS = [
    ("fcfs", "prefill-first", {}),
    ("fcfs", "lagrangian", {}),
    ("fcfs", "lagrangian", {"ttft_weight": 1.0}),
    ("fcfs", "threshold", {}),
    ("fcfs", "slo", {"slo_ttft": 2.0}),
    ("hybrid-oracle", "lagrangian", {}),
    ("hybrid-oracle", "lagrangian", {"slo_ttft": 2.0}),
    ("longest-first-oracle", "lagrangian", {}),
]


def _gsm8k_stream(rates: list[float], args: argparse.Namespace) -> None:
    from llmsched import LinearCostModel, workloads
    from llmsched.workloads import poisson_arrivals

    cost = LinearCostModel.paper()
    base = workloads.gsm8k_like(6000, seed=1)
    for rate in rates:
        workload = base.replace(arrival=poisson_arrivals(len(base), rate, seed=2))
        print(f"\ngsm8k_like(6000, seed=1), Poisson {rate} requests/s, 200 clients, the paper's model:")
        print(f"  {'policy':58}" + "".join(f"{k:>13}" for k in (*KEYS, "tokens_per_s")))
        for request, iteration, params in GSM8K_PAIRS:
            schedule = simulate(
                workload, cost, 200, make_request_policy(request), make_iteration_policy(iteration, **params)
            )
            assert not validate(schedule)
            summary = schedule.summary(slo_ttft=args.slo_ttft, slo_tbt=args.slo_tbt_mean)
            label = f"{request} / {iteration} {params or ''}"
            print(f"  {label:58}" + "".join(f"{summary[k]:>13.2f}" for k in (*KEYS, "tokens_per_s")))


def _azure(rates: list[float], args: argparse.Namespace) -> list[str]:
    base = azure_code()
    if base is None:
        print("the Azure code trace is absent: running the synthetic hour-long stream instead")
        base = hour_stream()
    print(f"{base!r}; 200 clients; paper coefficients, capacity 16,384")
    print(f"SLO targets: TTFT {args.slo_ttft} s, mean TBT {args.slo_tbt_mean} s")
    rows = []
    failures: list[str] = []
    for rate in rates:
        workload = base.replace(arrival=base.arrival / rate)
        predicted = with_predictions(workload, cross_fit("mico", workload))
        print(f"\nrate x{rate}: {len(workload)} requests over {workload.arrival[-1]:.0f} s")
        print(f"  {'policy':42}" + "".join(f"{k:>13}" for k in KEYS) + f"{'run s':>8}")
        by_pair = {}
        for request, iteration in PAIRS:
            start = time.perf_counter()
            schedule = simulate(
                predicted, PAPER_16K, 200, make_request_policy(request), make_iteration_policy(iteration)
            )
            elapsed = time.perf_counter() - start
            violations = validate(schedule)
            if violations:
                failures.append(f"x{rate} {request}/{iteration}: invalid schedule: {violations[:2]}")
            summary = schedule.summary(slo_ttft=args.slo_ttft, slo_tbt=args.slo_tbt_mean)
            row = {"rate_scale": rate, "request_policy": request, "iteration_policy": iteration}
            row.update({k: summary[k] for k in KEYS})
            row["valid"] = not violations
            rows.append(row)
            by_pair[request, iteration] = row
            label = f"{request} / {iteration}"
            print(f"  {label:42}" + "".join(f"{row[k]:>13.2f}" for k in KEYS) + f"{elapsed:>8.2f}")
        fcfs = by_pair["fcfs", "prefill-first"]
        others = [row for pair, row in by_pair.items() if pair not in HYBRIDS]
        best = min(others, key=lambda row: row["makespan_s"])
        for pair in HYBRIDS:
            row = by_pair[pair]
            over = row["makespan_s"] / best["makespan_s"] - 1
            ttft_cap = 1.2 * fcfs["ttft_p99_s"] + 1.0
            ok = over <= 0.005 and row["ttft_p99_s"] <= ttft_cap
            print(
                f"  check {pair[0]} / {pair[1]}: makespan {over:+.3%} against the best other "
                f"({best['request_policy']} / {best['iteration_policy']}; target <= +0.5%), "
                f"TTFT p99 {row['ttft_p99_s']:.2f} s (target <= {ttft_cap:.2f} s): {'ok' if ok else 'FAIL'}"
            )
            if not ok:
                failures.append(f"x{rate} {pair}: makespan {over:+.3%}, TTFT p99 {row['ttft_p99_s']:.2f} s")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"workload": base.name, "rows": rows}, out, indent=2)
    return failures


if __name__ == "__main__":
    main()
