"""The runtime adapter on a real decode loop: cost-model fit, predicted vs measured makespan,
and throughput of the baseline and hybrid strategies against static batching.

    python benchmarks/runtime_gpu.py [--device auto|cpu|cuda] [--model 1b] [--requests 256]
                                     [--clients 64] [--scale 1.0] [--json out.json]

Defaults: on a GPU, the 1B-parameter preset in float16 on 256 GSM8K-shaped requests at full
length on 64 clients; on the CPU, the small preset in float32 on the workload of
``llmsched runtime validate --model small`` (32 requests at full length on 16 clients).

1. Profile prefill stages (prompt mixes) and decode iterations (batch sizes times contexts),
   fit the context-aware and the linear cost model on the same rows, report each one's mean
   absolute error on held-out points of other sizes and contexts (target: <= 5%).
2. Simulate the baseline (FCFS, prefill-first) and hybrid (offline queues planned with the
   true output lengths, Algorithm 1, Lagrangian) schedules with each fitted model, execute
   them, compare predicted and measured makespans (target: within 5%) and the executed
   stages' error, and check the tokens against runs alone.
3. Serve the same requests with static batching (run-to-completion batches of J), insertion
   with padding, and prefill-apart insertion: throughput, padded and idle token computations
   (target on a GPU: hybrid >= 1.2x static batching).
4. Where ``transformers`` is installed: its ``generate`` with static batches of J on the same
   architecture and weights, as an outside reference.
5. Every batching rule (competition, sarathi, vllm, orca, disaggregated) under the drift-aware
   protocol of ``llmsched runtime validate --rule all`` (:mod:`llmsched.runtime.protocol`), three
   runs each on a paged engine, on the model's ``llmsched runtime validate`` workload, with the
   preemption scenario; its table is printed and, with ``--table FILE``, written as Markdown.

``--parts`` picks the parts (default all: ``strategies,insertion,reference,rules``).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any

import numpy as np
import torch

from llmsched import simulate, validate
from llmsched.cli.runtime import print_rules
from llmsched.runtime import PRESETS, Engine, LlamaModel, execute_schedule, run_alone, run_insertion
from llmsched.runtime.check import DEFAULTS, STRATEGIES, profile_and_fit, scaled_gsm8k, workload_plan
from llmsched.runtime.executor import make_prompts
from llmsched.runtime.insertion import static_cache_need
from llmsched.runtime.profiling import schedule_stage_times, stage_errors
from llmsched.runtime.protocol import validate_rules


def _hf_reference(
    model: LlamaModel, prompts: list[list[int]], outputs: list[int], batch: int, device: str
) -> Any:
    try:
        import transformers
    except ImportError:
        return None
    cfg = model.config
    hf_cfg = transformers.LlamaConfig(**cfg.to_dict(), attention_bias=False, mlp_bias=False, pad_token_id=0)
    hf = transformers.LlamaForCausalLM(hf_cfg).eval()
    hf.load_state_dict({k: v.float().cpu() for k, v in model.state_dict().items()})
    dtype = torch.float16 if device == "cuda" else torch.float32
    hf = hf.to(device=device, dtype=dtype)
    with torch.no_grad():  # warm-up, as profiling warmed the engine
        hf.generate(input_ids=torch.tensor([prompts[0]], device=device), max_new_tokens=2, pad_token_id=0)
    useful = 0
    start = time.perf_counter()
    for b in range(0, len(prompts), batch):
        chunk, lengths = prompts[b : b + batch], outputs[b : b + batch]
        width = max(len(p) for p in chunk)
        ids = torch.zeros(len(chunk), width, dtype=torch.long)
        mask = torch.zeros(len(chunk), width, dtype=torch.long)
        for i, p in enumerate(chunk):  # left padding, as generate expects
            ids[i, width - len(p) :] = torch.tensor(p)
            mask[i, width - len(p) :] = 1
        steps = max(lengths)
        with torch.no_grad():
            hf.generate(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                max_new_tokens=steps,
                min_new_tokens=steps,
                do_sample=False,
                pad_token_id=0,
            )
        useful += sum(lengths)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "tokens_per_s": useful / seconds, "version": transformers.__version__}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="auto")
    parser.add_argument("--model")
    parser.add_argument("--requests", type=int)
    parser.add_argument("--clients", type=int)
    parser.add_argument("--scale", type=float)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (CPU runs only)")
    parser.add_argument("--no-hf", action="store_true", help="skip the transformers reference")
    parser.add_argument(
        "--batch-table",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="fit decode as a table over batch sizes (profiles every size; default: on)",
    )
    parser.add_argument("--json", help="write every figure to this file")
    parser.add_argument("--table", help="write the rules' table (part 5) to this Markdown file")
    parser.add_argument(
        "--parts", default="strategies,insertion,reference,rules", help="comma-separated parts to run"
    )
    parser.add_argument("--runs", type=int, default=3, help="runs of each rule in part 5 (default 3)")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    unknown = parts - {"strategies", "insertion", "reference", "rules"}
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}")
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    gpu = device == "cuda"
    model_name = args.model or ("1b" if gpu else "small")
    # On the CPU, the workload of llmsched runtime validate --model small.
    requests = args.requests or (256 if gpu else DEFAULTS["small"]["requests"])
    clients = args.clients or (64 if gpu else DEFAULTS["small"]["clients"])
    scale = args.scale or (1.0 if gpu else DEFAULTS["small"]["scale"])
    dtype = torch.float16 if gpu else torch.float32
    started = time.perf_counter()

    workload = scaled_gsm8k(requests, scale, args.seed)
    config = PRESETS[model_name]
    model = LlamaModel(config, seed=args.seed)
    longest = max(
        int(np.max(workload.prompt_tokens + workload.output_tokens)), static_cache_need(workload, clients)
    )
    engine = Engine(
        model, clients, longest + 8, device=device, dtype=dtype, threads=None if gpu else args.threads
    )  # the profile times a few iterations past the longest context
    name = torch.cuda.get_device_name() if gpu else f"CPU ({torch.get_num_threads()} thread(s))"
    print(
        f"{model_name} ({config.parameters_count() / 1e6:.1f} M parameters, {dtype}) on {name}; "
        f"{workload.name}: {requests} requests on {clients} clients"
    )
    report: dict[str, Any] = {
        "device": name,
        "model": model_name,
        "parameters": config.parameters_count(),
        "dtype": str(dtype),
        "requests": requests,
        "clients": clients,
        "scale": scale,
        "output_tokens": int(workload.output_tokens.sum()),
    }

    if "strategies" not in parts:
        _rules(args, model_name, device, dtype, report, started)
        return
    # 1. profile and fit both cost models on the same rows
    capacity, plan = workload_plan(workload, clients, seed=args.seed, every_batch=args.batch_table)
    report["held_out"] = plan.held_out()
    fitted = profile_and_fit(engine, plan, capacity, seed=args.seed, batch_table=args.batch_table)
    models = {name: fitted[name] for name in ("context", "linear")}
    report["cost_models"] = {
        name: {k: getattr(cost, k) for k in vars(cost) if not k.startswith("_")}
        for name, cost in models.items()
    }
    report["fit_error"] = fitted["fit_error"]
    context = models["context"]
    print(
        f"fit: prefill {context.prefill_base * 1e3:.3f} ms + {context.prefill_per_token * 1e6:.3f} "
        f"us/token + {context.prefill_per_square * 1e9:.3f} ns/squared token, decode "
        f"{context.decode_base * 1e3:.3f} ms + {context.decode_per_client * 1e6:.3f} us/client "
        f"+ {context.decode_per_context * 1e9:.3f} ns/context token"
    )
    if context.decode_by_batch is not None:
        table = ", ".join(f"{t * 1e3:.2f}" for t in context.decode_by_batch)
        print(f"  decode at no context by batch size 1..{clients} (ms): {table}")
    for name, fit in fitted["fit_error"].items():
        print(
            f"  {name:12s} held-out error {fit['mape']:.2%} "
            f"(prefill {fit['prefill_mape']:.2%}, decode {fit['decode_mape']:.2%})"
        )

    # 2. strategies: predicted vs measured, both models
    prompts = make_prompts(workload, config.vocab_size, args.seed)
    alone = run_alone(engine, workload, prompts)
    output_tokens = int(workload.output_tokens.sum())
    report["strategies"] = {}
    for strategy, (rp, ip) in STRATEGIES.items():
        row: dict[str, Any] = {}
        for name, cost in models.items():
            predicted = simulate(workload, cost, clients, rp, ip)
            run = execute_schedule(predicted, engine, prompts)
            violations = validate(run.measured, skip=("stage_time",))
            stage = stage_errors(cost, schedule_stage_times(run.measured))
            row[name] = {
                "predicted_makespan_s": predicted.makespan,
                "measured_makespan_s": run.measured.makespan,
                "makespan_error": run.measured.makespan / predicted.makespan - 1,
                "measured_tokens_per_s": output_tokens / run.measured.makespan,
                "stage_error": stage["mape"],
                "valid": not violations,
                "tokens_matched": sum(a == b for a, b in zip(run.tokens, alone, strict=True)),
            }
            print(
                f"{strategy:9s} {name:8s} predicted {predicted.makespan:8.3f} s  measured "
                f"{run.measured.makespan:8.3f} s ({row[name]['makespan_error']:+.2%}); "
                f"{row[name]['measured_tokens_per_s']:9.1f} tokens/s; stage error {stage['mape']:.2%}; "
                f"valid {not violations}; tokens as when alone: {row[name]['tokens_matched']}/{requests}"
            )
        report["strategies"][strategy] = row

    # 3. insertion modes
    report["insertion"] = {}
    for mode in ("static", "padded", "apart") if "insertion" in parts else ():
        result = run_insertion(engine, workload, mode, prompts)  # type: ignore[arg-type]
        report["insertion"][mode] = result.as_dict()
        print(
            f"{mode:9s} {result.seconds:8.3f} s  {result.tokens_per_s:9.1f} tokens/s; forward tokens "
            f"{result.forward_tokens}, padded {result.padded_tokens}, idle {result.idle_tokens}"
        )
    if "insertion" in parts:
        hybrid = report["strategies"]["hybrid"]["context"]["measured_tokens_per_s"]
        static = report["insertion"]["static"]["tokens_per_s"]
        report["hybrid_over_static"] = hybrid / static
        print(f"hybrid / static batching throughput: {hybrid / static:.2f}x")

    # 4. outside reference
    if not args.no_hf and "reference" in parts:
        fresh = LlamaModel(config, seed=args.seed)  # the engine cast its model in place
        reference = _hf_reference(fresh, prompts, workload.output_tokens.tolist(), clients, device)
        report["transformers_static"] = reference
        if reference is None:
            print("transformers is not installed: no outside reference")
        else:
            print(
                f"transformers {reference['version']} generate, static batches of {clients}: "
                f"{reference['seconds']:.3f} s, {reference['tokens_per_s']:.1f} tokens/s"
            )
    _rules(args, model_name, device, dtype, report, started)


def _rules(
    args: Any, model_name: str, device: str, dtype: Any, report: dict[str, Any], started: float
) -> None:
    """Part 5 (when asked for), then the total and the files."""
    if "rules" in args.parts.split(","):
        rules = validate_rules(
            model_name,
            runs=args.runs,
            device=device,
            dtype="float16" if dtype == torch.float16 else "float32",
            seed=args.seed,
            threads=args.threads,
            progress=True,
        )
        print_rules(rules)
        report["rules"] = rules
        table = rules_table(rules)
        print(table)
        if args.table:
            with open(args.table, "w") as fh:
                fh.write(table)
    report["wall_s"] = time.perf_counter() - started
    print(f"total {report['wall_s']:.1f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(_clean(report), fh, indent=2)


def rules_table(rules: dict[str, Any]) -> str:
    """Part 5 as a Markdown table: one row per rule, the context-aware model's figures."""
    lines = [
        f"{rules['model']} on {rules['device']} ({rules['dtype']}), {rules['workload']} on "
        f"{rules['clients']} clients",
        "",
        "| rule | tokens exact | valid | steady runs | makespan error (steady runs) | drift | "
        "executed stages | TTFT p50 measured / predicted | peak blocks | preemptions |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for rule, row in rules["rules"].items():
        steady = [r for r in row["runs"] if r["steady"]]
        errors = ", ".join(f"{r['error']['context']:+.1%}" for r in steady) or "none steady"
        drift = ", ".join(f"{r['drift']:.1%}" for r in row["runs"])
        latency = row["latency"]
        lines.append(
            f"| {rule} | {row['tokens_exact']} | {row['valid']} | {len(steady)}/{len(row['runs'])} | "
            f"{errors} | "
            f"{drift} | {row['executed_error']['context']['mape']:.1%} | "
            f"{latency['measured']['ttft_p50_s']:.3f} / {latency['context']['ttft_p50_s']:.3f} s | "
            f"{row['peak_blocks']['measured']} | {row['preemptions']['measured']} |"
        )
    return "\n".join(lines) + "\n"


def _clean(value: Any) -> Any:
    """JSON-safe: NaN and inf become null, numpy scalars plain numbers."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, (np.integer, np.floating)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


if __name__ == "__main__":
    main()
