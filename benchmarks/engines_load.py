"""The engines people run, on one DGX-H100 serving Llama-2-70B, against load.

The Azure code trace's (prompt, output) pairs (2023; ``../shared/data/azure-llm-2023`` beside
the repository, or ``--trace``) arrive as a Poisson stream at each rate; one engine of 128
batch slots with the memory of eight H100s less the weights (``preset("llama2-70b/h100/tp8")``:
its measured table and 210,640 tokens of KV cache in blocks of 16) runs them as

* ``vllm``: prefill first, prompt batches of up to 8,192 tokens (the trace's prompts reach 7,437);
* ``vllm+chunked``: vLLM with chunked prefill, 2,048 tokens an iteration;
* ``orca``: whole prompts and every decoding request, up to 2,048 tokens an iteration;
* ``competition``: the paper's engine (a prefill stage pauses decoding) under prefill-first.

Each row: TTFT and TBT (each gap between tokens) p50 and p99, throughput (output tokens a second
of makespan), preemptions (recomputations after the KV cache ran out) and the largest share of
the KV cache in use. Every schedule is
validated. Figures depend on the seed alone, not on the machine.

    python benchmarks/engines_load.py [--rates 1,2,3,4,5] [--requests 2000] [--seed 0]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import llmsched
from llmsched.engines.competition.rule import CompetitionRule
from llmsched.engines.loop import CostClock, run_loop
from llmsched.online import make_iteration_policy, make_request_policy

AZURE_CODE = (
    Path(__file__).resolve().parents[2]
    / "shared"
    / "data"
    / "azure-llm-2023"
    / "AzureLLMInferenceTrace_code.csv"
)
CLIENTS = 128
ENGINES = ("vllm", "vllm+chunked", "orca", "competition")


def workload(trace: Path, rate: float, requests: int, seed: int) -> llmsched.Workload:
    """``requests`` of the trace's (prompt, output) pairs, in a seeded order, arriving as a
    Poisson stream of ``rate`` requests a second."""
    source = pd.read_csv(trace)
    rng = np.random.default_rng(seed)
    rows = np.resize(rng.permutation(len(source)), requests)
    return llmsched.Workload(
        source["ContextTokens"].to_numpy(dtype=np.int64)[rows],
        np.maximum(source["GeneratedTokens"].to_numpy(dtype=np.int64)[rows] - 1, 1),
        arrival=llmsched.workloads.poisson_arrivals(requests, rate, seed),
        name=f"azure-code x{requests} at {rate:g}/s",
    )


def run(engine: str, load: llmsched.Workload) -> Any:
    """One engine's schedule of ``load`` (validated)."""
    target = llmsched.preset("llama2-70b/h100/tp8")
    cost, memory = target.cost(), target.memory()
    if engine == "competition":
        rule = CompetitionRule(make_iteration_policy("prefill-first"), memory)
        schedule = run_loop(load, cost, CLIENTS, make_request_policy("fcfs"), None, CostClock(), False, rule)
    else:
        name, _, chunked = engine.partition("+")
        tokens = 8192 if engine == "vllm" else 2048
        schedule = llmsched.simulate_batching(
            load, cost, CLIENTS, name, "fcfs", tokens, bool(chunked), memory
        )
    violations = schedule.validate()
    if violations:
        raise RuntimeError(f"{engine}: invalid schedule: {violations[:3]}")
    return schedule


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="1,2,3,4,5", help="requests a second, comma-separated")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trace", default=str(AZURE_CODE), help="the Azure code trace")
    args = parser.parse_args()
    if not Path(args.trace).is_file():
        print(f"the Azure code trace is not at {args.trace}; give it with --trace")
        return 1
    rows = []
    start = time.process_time()
    for rate in (float(r) for r in args.rates.split(",")):
        load = workload(Path(args.trace), rate, args.requests, args.seed)
        for engine in ENGINES:
            schedule = run(engine, load)
            s = schedule.summary()
            rows.append(
                {
                    "rate": rate,
                    "engine": engine,
                    "ttft_p50_s": s["ttft_p50_s"],
                    "ttft_p99_s": s["ttft_p99_s"],
                    "tbt_p50_s": s["tbt_p50_s"],
                    "tbt_p99_s": s["tbt_p99_s"],
                    "tokens_per_s": s["tokens_per_s"],
                    "preemptions": s["preemptions"],
                    "kv_peak": float(schedule.memory_in_use()["share"].max()),
                }
            )
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    print(f"({len(rows)} runs of {args.requests} requests in {time.process_time() - start:.1f} s of CPU)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
