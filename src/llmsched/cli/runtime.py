"""``llmsched runtime validate``: schedules run on a real torch decode loop (needs torch),
measured against the cost models fitted on the machine."""

from __future__ import annotations

import sys
from typing import Any

from llmsched.cli.options import (
    FLAG,
    JSON,
    PROGRESS,
    TEXT,
    Command,
    Option,
    choice,
    integer,
    number,
    print_json,
    progress,
    resolve,
)

__all__ = ["COMMAND", "OPTIONS", "RUNTIME_MAX_CLIENTS", "RUNTIME_MAX_REQUESTS", "run"]

# The runtime gives every client a slot of KV cache and runs every request on a real model,
# so its sizes are bounded far lower than a simulation's (a million clients asked the tiny
# model for 21 GB).
RUNTIME_MAX_CLIENTS = 1024
RUNTIME_MAX_REQUESTS = 100_000

#: The command's options, each declared once: its flag and its TOML key.
#:
#: :meta hide-value:
OPTIONS = (
    Option("model", TEXT, "tiny", "tiny, small, 125m or 1b (seeded random weights)"),
    Option("device", TEXT, "cpu", "cpu or cuda"),
    Option(
        "requests",
        integer(1, RUNTIME_MAX_REQUESTS),
        None,
        "requests of the GSM8K-like workload",
        shown="the model's, from llmsched.runtime.check.DEFAULTS",
    ),
    Option(
        "clients",
        integer(2, RUNTIME_MAX_CLIENTS),
        None,
        "number of clients, each a KV-cache slot",
        shown="the model's",
    ),
    Option("scale", number(0.0, 1.0, low_open=True), None, "GSM8K lengths times this", shown="the model's"),
    Option("strategy", TEXT, "both", "baseline, hybrid or both, executed after one profile"),
    Option(
        "check_tokens",
        integer(1, RUNTIME_MAX_REQUESTS),
        None,
        "check the tokens of the first N requests against a run of their own",
        shown="all",
    ),
    Option(
        "executions",
        integer(1, 1000),
        None,
        "execute each schedule N times, strategies taking turns; the median counts",
        shown="the model's",
    ),
    Option(
        "batch_table",
        FLAG,
        True,
        "profile decode at every batch size and fit the context-aware model's decode time as a "
        "table over batch sizes (held-out decode points then differ in context only); "
        "--no-batch-table fits a line in the batch and holds out batch sizes too",
    ),
    Option(
        "threads", integer(1, 1024), 1, "CPU threads of torch, for CPU runs", shown="1, for steady timings"
    ),
    Option(
        "rule",
        choice("competition", "sarathi", "vllm", "orca", "disaggregated", "all", metavar="RULE"),
        None,
        "run a batching rule (competition, sarathi, vllm, orca, disaggregated or all) on a paged "
        "engine under the drift-aware protocol of llmsched.runtime.protocol, instead of the "
        "strategies; --executions runs of each",
        shown="the strategies",
    ),
    Option("budget", integer(1, 1 << 20), 256, "token budget of sarathi, vllm and orca (with --rule)"),
    Option(
        "block_size", integer(1, 4096), 16, "tokens per KV-cache block of the paged engines (with --rule)"
    ),
    Option(
        "preemption",
        FLAG,
        True,
        "with --rule, also run vllm on a pool of half the blocks the batch needs (it preempts)",
    ),
    Option("seed", integer(0), 0, "seed of the workload, prompts and weights"),
    Option("dtype", TEXT, "float32", "float32 (exact token check), float16 or bfloat16"),
    JSON,
    PROGRESS,
)


def run(args: Any) -> int:
    """Run ``llmsched runtime [validate]``: 3 without torch; the help and 2 without an action;
    else 0 when the measured schedules are valid and (in float32) the tokens match."""
    from llmsched.runtime import MISSING_TORCH, torch_available

    if not torch_available():
        print(f"llmsched runtime: {MISSING_TORCH}", file=sys.stderr)
        return 3
    if args.action is None:
        args.command_parser.print_help(sys.stderr)
        return 2
    from llmsched.runtime import validate_runtime

    config = resolve(args, VALIDATE).config
    if config.rule is not None:
        return _run_rules(config)
    report = validate_runtime(
        **_setup(config),
        strategy=config.strategy,
        check_tokens=config.check_tokens,
        executions=config.executions,
        batch_table=config.batch_table,
    )
    if config.json:
        print_json(report)
    else:
        print_report(report)
    exact = report["dtype"] == "float32"  # in half precision tokens may change with the batch
    return 0 if report["valid"] and (report["tokens_match"] or not exact) else 1


def print_report(report: dict[str, Any]) -> None:
    """``llmsched runtime validate``'s figures as text: both cost models side by side."""
    threads = f", {report['threads']} thread(s)" if report["threads"] else ""
    print(
        f"{report['model']} model ({report['parameters']:,} parameters) on {report['device']}{threads}, "
        f"{report['workload']} on {report['clients']} clients"
    )
    names = {"context": "context-aware", "linear": "linear"}
    held = "prompt sizes and contexts" if report["profile"]["batch_table"] else "sizes and contexts"
    print(f"  held-out profile points ({held} not fitted on), mean relative error:")
    labels = {**names, "context_line": "context, line"}
    for model, label in labels.items():
        if model not in report["fit_error"]:
            continue
        fit = report["fit_error"][model]
        print(
            f"    {label:14s} {fit['mape']:6.1%}  (prefill {fit['prefill_mape']:.1%}, "
            f"decode {fit['decode_mape']:.1%})"
        )
    for strategy, row in report["strategies"].items():
        print(
            f"  {strategy} ({', '.join(row['policies'])}): {row['iterations']} decode iterations, "
            f"median of {len(row['measured_makespans_s']['context'])} execution(s)"
        )
        for model, label in names.items():
            low, high = row["makespan_error_range"][model]
            spread = f", {low:+.1%} to {high:+.1%}" if len(row["measured_makespans_s"][model]) > 1 else ""
            print(
                f"    {label:14s} predicted {row['predicted_makespan_s'][model]:8.3f} s  measured "
                f"{row['measured_makespan_s'][model]:8.3f} s  ({row['makespan_error'][model]:+.1%}{spread}); "
                f"executed stages {row['stage_error'][model]:.1%}"
            )
        for v in row["violations"][:5]:
            print(f"    {v}")
    print(
        f"  tokens match       {report['tokens_match']} ({report['tokens_checked']}/{report['requests']} "
        f"requests checked against a run of their own, {report['dtype']})"
    )
    valid = "valid" if report["valid"] else "INVALID"
    print(f"  measured schedules {valid} (all rules but stage_time)")
    machine = report["machine"]
    reference = ", ".join(f"{s * 1e3:.2f}" for s in machine["reference_iteration_s"])
    busy = machine["other_cpus_busy"]
    print(
        f"  machine            reference iteration {reference} ms (before profiling, after, after "
        f"executing)" + (f"; other CPUs {busy:.0%} busy" if busy is not None else "")
    )


def _setup(config: Any) -> dict[str, Any]:
    """What both validations take from the options alike: the model, the machine, the load."""
    keys = ("model", "device", "requests", "clients", "scale", "seed", "threads", "dtype")
    return {key: getattr(config, key) for key in keys} | {"progress": progress(config)}


def _run_rules(config: Any) -> int:
    """``--rule``: 0 when every rule's runs are valid with exact tokens (float32), else 1."""
    from llmsched.runtime.protocol import RULES, validate_rules

    report = validate_rules(
        **_setup(config),
        rules=RULES if config.rule == "all" else (config.rule,),
        runs=config.executions or 3,
        budget=config.budget,
        block_size=config.block_size,
        preemption=config.preemption,
    )
    if config.json:
        print_json(report)
    else:
        print_rules(report)
    exact = report["dtype"] == "float32"
    rows = [*report["rules"].values(), *([report["preemption"]] if report["preemption"] else [])]
    return 0 if all(r["valid"] and (r["tokens_exact"] or not exact) for r in rows) else 1


def _pct(value: float | None) -> str:
    return "-" if value is None or value != value else f"{value:+.1%}"


def print_rules(report: dict[str, Any]) -> None:
    """``llmsched runtime validate --rule``'s figures as text."""
    threads = f", {report['threads']} thread(s)" if report["threads"] else ""
    print(
        f"{report['model']} model ({report['parameters']:,} parameters) on {report['device']}{threads}, "
        f"{report['workload']} on {report['clients']} clients, paged ({report['blocks']} blocks of "
        f"{report['block_size']}), token budget {report['budget']}"
    )
    parts = []
    for m, fit in report["fit_error"].items():
        if m in ("context", "linear"):
            parts.append(
                f"{m} {fit['mape']:.1%} (prefill {fit['prefill_mape']:.1%}, decode {fit['decode_mape']:.1%})"
            )
    print("  held-out profile error: " + "; ".join(parts))
    machine = report["machine"]
    print(
        f"  steady: the references inside a run within {report['steady_within']:.0%} of the fitted speed "
        f"({machine['fitted_speed_s'] * 1e3:.3f} ms, the median of {machine['probe_samples_during_profile']} "
        f"references during the profile, 10th-90th percentile {machine['probe_spread_during_profile']:.1%} "
        "of it)"
    )
    for rule, row in report["rules"].items():
        state = "valid" if row["valid"] else "INVALID"
        tokens = "tokens exact" if row["tokens_exact"] else "tokens DIFFER"
        print(f"  {rule}: {tokens}, {state}, {row['steady_runs']}/{len(row['runs'])} runs steady")
        for i, run in enumerate(row["runs"]):
            predicted, error = run["predicted_makespan_s"], run["error"]
            print(
                f"    run {i}: measured {run['measured_makespan_s']:.3f} s, predicted "
                f"{predicted['context']:.3f} s context ({_pct(error['context'])}, "
                f"corrected {_pct(run['corrected_error']['context'])}), "
                f"{predicted['linear']:.3f} s linear ({_pct(error['linear'])}); "
                f"drift {run['drift']:.1%} over {run['probes']} references"
                + ("" if run["steady"] else " (moved)")
            )
        executed = row["executed_error"]
        seen, said = row["latency"]["measured"], row["latency"]["context"]
        print(
            f"    executed stages: context {executed['context']['mape']:.1%}, "
            f"linear {executed['linear']['mape']:.1%}; "
            f"TTFT p50/p90 {seen['ttft_p50_s']:.3f}/{seen['ttft_p90_s']:.3f} s "
            f"(predicted {said['ttft_p50_s']:.3f}/{said['ttft_p90_s']:.3f}), "
            f"TBT p50/p90 {seen['tbt_p50_s'] * 1e3:.2f}/{seen['tbt_p90_s'] * 1e3:.2f} ms "
            f"(predicted {said['tbt_p50_s'] * 1e3:.2f}/{said['tbt_p90_s'] * 1e3:.2f})"
        )
        peak, pre = row["peak_blocks"], row["preemptions"]
        print(
            f"    peak blocks {peak['measured']} (predicted {peak['predicted']}), preemptions "
            f"{pre['measured']} (predicted {pre['predicted']})"
        )
        copy = row["copy"]
        if copy is not None:
            print(
                f"    KV copy: mean {copy['measured_s'] * 1e6:.1f} us measured, "
                f"{copy['predicted_s'] * 1e6:.1f} us predicted ({_pct(copy['error'])} mean per request)"
            )
        for v in row["violations"][:5]:
            print(f"    {v}")
    scene = report["preemption"]
    if scene is not None:
        print(
            f"  preemption (vllm, {scene['blocks']} blocks, {scene['blocks_needed_at_once']} needed at "
            f"once): {scene['preemptions']} preemptions (predicted "
            f"{scene['predicted_preemptions']['context']}), {scene['recomputed_tokens']} tokens "
            f"recomputed, peak {scene['peak_blocks']} blocks, "
            f"{'tokens exact' if scene['tokens_exact'] else 'tokens DIFFER'}, "
            f"{'valid' if scene['valid'] else 'INVALID'}"
        )


VALIDATE = Command(
    "validate",
    "profile, fit cost models (context-aware and linear), execute simulated schedules, "
    "compare with the clock",
    "",
    OPTIONS,
    run,
)
COMMAND = Command(
    "runtime", "run schedules on a real torch decode loop (needs torch)", "", (), run, subcommands=(VALIDATE,)
)
