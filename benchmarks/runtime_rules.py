"""Every batching rule on the CPU runtime: tokens, validity, and predicted against measured makespan.

On the ``small`` preset (one thread) with 32 GSM8K-shaped requests waiting at time 0 on 16
clients, the engine is profiled and a context-aware cost model fitted
(:func:`llmsched.runtime.check.profile_and_fit`); then each rule runs ``--runs`` times live on
the engine: the competition engine (FCFS, prefill first: ``run_policies``) and the engines
people run (``run_batching``: ``vllm``, ``sarathi`` and ``orca`` at a 256-token budget, and
``padded``). For each run it prints whether every request got the tokens it gets alone, whether
the measured schedule passes its validator (``stage_time`` aside), the measured and predicted
makespans and the machine's drift: a fixed reference decode iteration timed before and after
the run, whose change says whether the machine held steady while the run was measured.

    python benchmarks/runtime_rules.py [--runs 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from llmsched.engines.fusion.schedule import FusedSchedule
from llmsched.engines.fusion.validate import validate_fused
from llmsched.runtime import PRESETS, Engine, LlamaModel, run_alone, run_batching, run_policies
from llmsched.runtime.check import _reference_iteration, profile_and_fit, scaled_gsm8k, workload_plan
from llmsched.runtime.executor import make_prompts

RULES = ("competition", "vllm", "sarathi", "orca", "padded")
BUDGET = 256


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each rule (default 3)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    model = LlamaModel(PRESETS["small"], seed=0)
    clients = 16
    workload = scaled_gsm8k(32, 1.0, seed=0)
    engine = Engine(
        model, clients, int((workload.prompt_tokens + workload.output_tokens).max()) + 16, threads=1
    )
    prompts = make_prompts(workload, model.config.vocab_size, seed=0)
    alone = run_alone(engine, workload, prompts)
    capacity, plan = workload_plan(workload, clients)
    fitted = profile_and_fit(engine, plan, max(capacity, BUDGET))
    cost = fitted["context"]
    reference = (clients // 2, int(workload.prompt_tokens.mean()))
    rows = []
    for rule in RULES:
        for run in range(args.runs):
            before = _reference_iteration(engine, *reference)
            if rule == "competition":
                done = run_policies(workload, engine, cost, clients, "fcfs", "prefill-first", prompts)
            else:
                budget = max(BUDGET, int(workload.prompt_tokens.max())) if rule == "vllm" else BUDGET
                done = run_batching(workload, engine, cost, clients, rule, "fcfs", budget, prompts)
            after = _reference_iteration(engine, *reference)
            measured = done.measured
            if isinstance(measured, FusedSchedule):
                valid = not validate_fused(measured, skip=("stage_time",))
            else:
                valid = not measured.validate(skip=("stage_time",))
            row = {
                "rule": rule,
                "run": run,
                "tokens_exact": done.tokens == alone,
                "valid": valid,
                "measured_s": measured.makespan,
                "predicted_s": done.predicted.makespan,
                "error": measured.makespan / done.predicted.makespan - 1.0,
                "drift": after / before - 1.0,
            }
            rows.append(row)
            if not args.json:
                print(
                    f"{rule:11s} run {run}: tokens {'exact' if row['tokens_exact'] else 'DIFFER'}, "
                    f"{'valid' if valid else 'INVALID'}, measured {row['measured_s']:.3f} s, predicted "
                    f"{row['predicted_s']:.3f} s ({row['error']:+.1%}), reference drift {row['drift']:+.1%}",
                    flush=True,
                )
    errors = fitted["fit_error"]["context"]
    if args.json:
        print(json.dumps({"rows": rows, "held_out_mape": errors}, indent=2, default=float))
    else:
        print(
            f"\nheld-out stage error of the fitted model: prefill {errors['prefill_mape']:.1%}, decode "
            f"{errors['decode_mape']:.1%}; {time.perf_counter() - start:.0f} s"
        )


if __name__ == "__main__":
    main()
