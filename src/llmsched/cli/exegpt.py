"""``llmsched exegpt``: ExeGPT's best RRA or WAA configuration under a latency bound
(XSimulator and the monotone branch-and-bound)."""

from __future__ import annotations

from typing import Any

from llmsched.cli.options import (
    FLAG,
    JSON,
    PROGRESS,
    TEXT,
    TIMINGS,
    Command,
    Option,
    integer,
    number,
    print_json,
    progress,
    resolve,
    with_timings,
)
from llmsched.exegpt.xsim import MAX_BATCH, MAX_GPUS, MAX_ITERATIONS

__all__ = ["COMMAND", "OPTIONS", "run"]

#: The command's options, each declared once: its flag and its TOML key.
#:
#: :meta hide-value:
OPTIONS = (
    Option("model", TEXT, "opt-13b", "t5-11b, opt-13b, gpt3-39b, gpt3-101b, gpt3-175b, gpt3-341b"),
    Option("task", TEXT, "S", "S, T, G, C1 or C2 (ExeGPT's Table 3)"),
    Option(
        "latency_bound",
        TEXT,
        None,
        "seconds for the 99th-percentile output, or inf",
        required=True,
        metavar="SECONDS",
    ),
    Option("gpu", TEXT, None, "a40 or a100", shown="the paper's for the model"),
    Option("gpus", integer(1, MAX_GPUS), None, "GPU count", shown="the paper's for the model"),
    Option("schedules", TEXT, "RRA,WAA-C,WAA-M", "comma-separated subset of RRA,WAA-C,WAA-M"),
    Option("eps", number(0.0, 1.0, high_open=True), 0.01, "throughput and latency tolerance of the search"),
    Option("batch_max", integer(1, MAX_BATCH), 128, "largest encoder batch B_E searched"),
    Option(
        "iterations_max",
        integer(1, MAX_ITERATIONS),
        None,
        "largest N_D searched",
        shown="the longest output, at most 128",
    ),
    Option("verify", FLAG, False, "also run the exhaustive search"),
    JSON,
    PROGRESS,
    TIMINGS,
)


def latency_bound(text: str) -> float:
    """--latency-bound as seconds (``inf`` for none)."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"--latency-bound must be a number of seconds or 'inf', got {text!r}") from None
    if not value > 0:
        raise ValueError(f"--latency-bound must be positive (seconds) or 'inf', got {text!r}")
    return value


def run(args: Any) -> int:
    """Run ``llmsched exegpt``: 0 when a configuration meets the bound, 1 when none does."""
    from llmsched.exegpt import XSimulator, optimize

    config = resolve(args, COMMAND).config
    bound = latency_bound(config.latency_bound)
    sim = XSimulator.for_task(config.model, config.task, gpu=config.gpu, gpus=config.gpus)
    schedules = [s.strip().upper() for s in config.schedules.split(",")]
    grid = {"batch_max": config.batch_max, "iterations_max": config.iterations_max}
    result = optimize(
        sim, bound, schedules=schedules, eps_throughput=config.eps, eps_latency=config.eps, **grid
    )
    out: dict[str, Any] = {"setup": sim.name, "schedules": schedules, **result.to_dict()}
    exh = None
    if config.verify:
        exh = optimize(
            sim, bound, method="exhaustive", schedules=schedules, progress=progress(config), **grid
        )
        out["exhaustive"] = {
            "schedule": exh.schedule,
            "variables": exh.variables,
            "throughput": exh.throughput,
            "latency": None if exh.latency == float("inf") else exh.latency,
            "evaluations": exh.evaluations,
        }
    if config.json:
        runtime = out.pop("runtime_s")
        extra = {} if exh is None else {"exhaustive_s": exh.runtime}
        print_json(with_timings(out, config, search_s=runtime, **extra))
        return 0 if result.feasible else 1
    print(f"{sim.name}; latency bound {bound:g} s (99th-percentile output, {sim.quantile_length} tokens)")
    if not result.feasible:
        print(f"  {result.message}")
    else:
        variables = ", ".join(f"{k}={v}" for k, v in (result.variables or {}).items())
        print(f"  schedule    {result.schedule}  ({variables})")
        print(f"  throughput  {result.throughput:.3f} sequences/s")
        print(f"  latency     {result.latency:.3f} s")
    print(
        f"  search      {result.evaluations} XSimulator evaluations of {result.grid_size} "
        f"({result.evaluations / result.grid_size:.2%}), {result.runtime:.2f} s"
    )
    if exh is not None:
        if exh.feasible:
            variables = ", ".join(f"{k}={v}" for k, v in (exh.variables or {}).items())
            print(f"  exhaustive  {exh.schedule} ({variables}) {exh.throughput:.3f} sequences/s")
        else:
            print(f"  exhaustive  {exh.message}")
        print(f"              {exh.evaluations} evaluations, {exh.runtime:.1f} s")
    return 0 if result.feasible else 1


COMMAND = Command(
    "exegpt",
    "ExeGPT: the best RRA/WAA configuration under a latency bound (XSimulator + B&B)",
    "",
    OPTIONS,
    run,
)
