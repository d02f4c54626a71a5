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
    report = validate_runtime(
        model=config.model,
        device=config.device,
        requests=config.requests,
        clients=config.clients,
        scale=config.scale,
        strategy=config.strategy,
        seed=config.seed,
        threads=config.threads,
        dtype=config.dtype,
        progress=progress(config),
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
