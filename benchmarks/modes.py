"""The three engine modes at equal machine counts: PD competition (a prefill stage pauses
decoding), PD fusion (chunked prefill) and PD disaggregation (Splitwise's prompt and token
machines), on the GSM8K batch and on the Azure code trace at three rates.

Every machine is one engine of the paper's coefficients (capacity 16,384; LLaMA-65B's keys and
values, 2.6 MB a token, over 25 GB/s with per-layer overlap). With ``N`` machines, competition
and fusion run ``N`` engines of 200 clients each, the requests dealt round-robin in order of
arrival; disaggregation runs ``P`` prompt and ``N - P`` token machines of 200 clients each,
join-the-shortest-queue on each pool, with and without the mixed pool. For each: throughput,
TTFT and TBT percentiles, the busy share of each machine, the mean KV transfer, and whether
every schedule validates. Then the hour-long stream's simulation time in each mode on one
engine (target <= 3 s) and the cost model's phase figures (compute against memory bound).

    python benchmarks/modes.py [--machines 4] [--budget 2048] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from instances import PAPER_16K, azure_code, hour_stream
from llmsched import Workload, simulate, validate, workloads
from llmsched.core.metrics import weighted_percentile
from llmsched.engines.disaggregation.cluster import DisaggregatedCluster, kv_bytes_per_token
from llmsched.engines.disaggregation.validate import validate_disaggregated
from llmsched.engines.fusion.validate import validate_fused
from llmsched.fleet.disaggregated import simulate_disaggregated
from llmsched.online.simulate import simulate_fusion
from llmsched.workloads import PrepareOptions

CLIENTS = 200
RATES = (1.0, 2.0, 4.0)  # the trace's arrivals replayed K times faster
KV_BYTES = kv_bytes_per_token(80, 64, 128)  # LLaMA-65B, float16
BANDWIDTH = 25.0  # GB/s: a 200 Gb/s InfiniBand link


def _deal(workload: Workload, machines: int) -> list[Workload]:
    """The requests dealt round-robin over ``machines`` engines in order of arrival."""
    order = np.argsort(workload.arrival, kind="stable")
    parts = []
    for m in range(machines):
        mine = np.sort(order[m::machines])
        if mine.size:
            parts.append(
                Workload(
                    workload.prompt_tokens[mine], workload.output_tokens[mine], arrival=workload.arrival[mine]
                )
            )
    return parts


def _combine(
    workload: Workload, schedules: list[Any], busy: list[float], valid: bool, seconds: float
) -> dict:
    span = max(s.makespan for s in schedules)
    ttft = np.concatenate([s.ttft for s in schedules])
    dists = [s.tbt_distribution() for s in schedules]
    gaps = np.concatenate([d[0] for d in dists])
    counts = np.concatenate([d[1] for d in dists])
    p50, p99 = (float(x) for x in weighted_percentile(gaps, counts, [50, 99]))
    return {
        "tokens_per_s": workload.total_output_tokens / span,
        "makespan_s": span,
        "ttft_p50_s": float(np.percentile(ttft, 50)),
        "ttft_p99_s": float(np.percentile(ttft, 99)),
        "tbt_p50_s": p50,
        "tbt_p99_s": p99,
        "busy": [b / span for b in busy],
        "valid": valid,
        "seconds": seconds,
    }


def run_mode(
    workload: Workload, mode: str, machines: int, budget: int, prompt_machines: int = 1, mixed: bool = False
) -> dict:
    start = time.perf_counter()
    if mode == "competition":
        schedules = [
            simulate(part, PAPER_16K, CLIENTS, "fcfs", "prefill-first") for part in _deal(workload, machines)
        ]
        seconds = time.perf_counter() - start
        valid = all(not validate(s) for s in schedules)
        busy = [s.prefill_time_total + s.decode_time_total for s in schedules]
        row = _combine(workload, schedules, busy, valid, seconds)
    elif mode == "fusion":
        schedules = [
            simulate_fusion(part, PAPER_16K, CLIENTS, "fcfs", budget) for part in _deal(workload, machines)
        ]
        seconds = time.perf_counter() - start
        valid = all(not validate_fused(s) for s in schedules)
        row = _combine(workload, schedules, [s.busy_time for s in schedules], valid, seconds)  # engine busy
    else:
        cluster = DisaggregatedCluster(
            prompt_machines,
            machines - prompt_machines,
            PAPER_16K,
            PAPER_16K,
            CLIENTS,
            KV_BYTES,
            BANDWIDTH,
            80,
            True,
            mixed,
        )
        s = simulate_disaggregated(workload, cluster)
        seconds = time.perf_counter() - start
        row = _combine(workload, [s], list(s.machine_busy()), not validate_disaggregated(s), seconds)
        row["transfer_mean_s"] = float(s.transfer_time.mean())
        row["lent_stages"] = s.summary()["lent_stages"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", type=int, default=4)
    parser.add_argument("--budget", type=int, default=2048, help="fusion's token budget")
    parser.add_argument("--json", help="write every row to this file")
    args = parser.parse_args()
    n, budget = args.machines, args.budget

    cases: list[tuple[str, Workload]] = [("gsm8k batch", workloads.gsm8k(0))]
    trace = azure_code()
    if trace is None:
        print("the Azure code trace is not beside the repository: its rows are skipped")
    else:
        for rate in RATES:
            cases.append((f"azure-code x{rate:g}", PrepareOptions(rate_scale=rate).apply(trace)[0]))
    modes = [("competition", {}), ("fusion", {})]
    modes += [("disaggregated", {"prompt_machines": p}) for p in range(1, n)]
    modes += [("disaggregated", {"prompt_machines": 1, "mixed": True})]
    rows = []
    print(
        f"{n} machines of {CLIENTS} clients; fusion budget {budget}; KV {KV_BYTES / 1e6:.2f} MB/token over "
        f"{BANDWIDTH:g} GB/s, overlapped"
    )
    print(
        f"{'workload':16s} {'mode':22s} {'tokens/s':>9s} {'TTFT p50':>9s} {'TTFT p99':>9s} {'TBT p50':>8s} "
        f"{'TBT p99':>8s} {'busy per machine':24s} valid"
    )
    for label, workload in cases:
        for mode, extra in modes:
            row = run_mode(workload, mode, n, budget, **extra)
            name = mode
            if mode == "disaggregated":
                name = f"disagg {extra['prompt_machines']}P+{n - extra['prompt_machines']}T"
                name += " mixed" if extra.get("mixed") else ""
            row.update({"workload": label, "mode": name})
            rows.append(row)
            busy = " ".join(f"{b:.0%}" for b in row["busy"])
            print(
                f"{label:16s} {name:22s} {row['tokens_per_s']:9.1f} {row['ttft_p50_s']:9.2f} "
                f"{row['ttft_p99_s']:9.2f} "
                f"{row['tbt_p50_s']:8.3f} {row['tbt_p99_s']:8.3f} {busy:24s} {row['valid']}"
                + (f"  transfer {row['transfer_mean_s'] * 1e3:.2f} ms" if "transfer_mean_s" in row else "")
            )

    stream = hour_stream()
    print(f"\n{stream!r}, simulation time (target <= 3 s), best and worst of 3:")
    speed = {}
    for mode, extra in [("competition", {}), ("fusion", {}), ("disaggregated", {"prompt_machines": 1})]:
        machines = 2 if mode == "disaggregated" else 1
        times = [run_mode(stream, mode, machines, budget, **extra)["seconds"] for _ in range(3)]
        speed[mode] = times
        print(f"  {mode:14s} {min(times):.2f} s, {max(times):.2f} s")

    cost = PAPER_16K
    per_token_prefill = [cost.prefill_time(t) / t * 1e3 for t in (500, 5000, 16_384)]
    per_token_decode = [cost.decode_iteration_time(b) / b * 1e3 for b in (1, 50, 200)]
    print(
        "\nphases under the paper's model: prefill "
        + ", ".join(f"{x:.3f}" for x in per_token_prefill)
        + " ms a token at 500 / 5,000 / 16,384 tokens (batching barely helps: compute-bound); decode "
        + ", ".join(f"{x:.3f}" for x in per_token_decode)
        + " ms a token at 1 / 50 / 200 requests (batching divides it: memory-bound)"
    )
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"rows": rows, "stream_seconds": speed}, out, indent=2)


if __name__ == "__main__":
    main()
