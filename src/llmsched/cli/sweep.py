"""``llmsched sweep``: latency against load, each policy at each arrival-rate multiplier.

The cases run through :func:`llmsched.experiments.sweep.sweep` on an engine of any mode,
through joblib on local cores or a Dask or Ray cluster; the report is one row of serving
figures per (rate, policy), as a table, a JSON object or a latency-load figure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmsched.cli.config import cost_as_toml
from llmsched.cli.options import (
    BACKEND,
    CLUSTER,
    ENGINE,
    JSON,
    LOAD,
    MEMORY,
    MODES,
    PLOT_FILE,
    POOLS,
    PROGRESS,
    RATES,
    REAL_ENGINES,
    SLO_TBT_MEAN,
    SLO_TTFT,
    SPEC,
    TIMINGS,
    Command,
    Option,
    check_outputs,
    choice,
    describe_cost,
    describe_preparation,
    enter_backend,
    load_config_class,
    load_inputs,
    make_cluster,
    make_memory,
    print_json,
    progress,
    refuse_unused_predictor,
    resolve,
    with_timings,
)
from llmsched.experiments.sweep import PLOT_METRICS

__all__ = ["COMMAND", "OPTIONS", "SweepConfig", "run"]

# The policies a sweep runs when --policy is not given, by mode.
DEFAULT_POLICIES = {
    "competition": ("fcfs/prefill-first",),
    "fusion": ("fcfs",),
    "disaggregated": ("fcfs",),
    **dict.fromkeys(REAL_ENGINES, ("fcfs",)),
}

#: The command's options, each declared once: its flag and its TOML key.
#:
#: :meta hide-value:
OPTIONS = (
    *LOAD,
    *ENGINE,
    *MEMORY,
    *POOLS,
    *CLUSTER,
    Option(
        "policy",
        SPEC,
        None,
        "a policy pair such as hybrid/lagrangian (any --mode but competition: a request policy "
        "alone, such as fcfs); repeat for several",
        shown="fcfs/prefill-first; any other --mode: fcfs",
        repeat=True,
        metavar="REQUEST/ITERATION",
    ),
    Option("rates", RATES, (0.5, 0.75, 1.0), "arrival-rate multipliers; 1 is the trace's own rate"),
    SLO_TTFT,
    SLO_TBT_MEAN,
    *BACKEND,
    Option(
        "metric",
        choice(*PLOT_METRICS, metavar="METRIC"),
        "ttft_p99_s",
        "what --plot draws against the load: a summary column such as ttft_p99_s, tbt_p99_s, "
        "e2e_p50_s, goodput_rps",
        section="output",
    ),
    Option("plot", PLOT_FILE, None, "write the latency-load figure to this file", section="output"),
    JSON,
    PROGRESS,
    TIMINGS,
)

SweepConfig = load_config_class(
    "SweepConfig",
    OPTIONS,
    __name__,
    """One ``sweep``, resolved: every field is the flag of the same name (see
    :mod:`llmsched.cli.config` for the TOML layout); ``policy`` is None for the mode's default.""",
)


def run(args: Any) -> int:
    """Run ``llmsched sweep``: 0 once every case has run."""
    import contextlib
    import math
    import time

    from llmsched.experiments.sweep import case_policies, plot_sweep, sweep

    resolved = resolve(args, COMMAND)
    config = resolved.config
    check_outputs(resolved)
    specs = config.policy or DEFAULT_POLICIES.get(config.mode)
    policies = case_policies(None if specs is None else list(specs), config.mode)
    for request, _ in policies:
        refuse_unused_predictor(config.predictor, request)
    cost, workload, preparation = load_inputs(resolved)
    cluster = None
    if config.mode == "disaggregated":
        cluster = make_cluster(config, cost, config.prompt_machines, config.token_machines)
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        enter_backend(config, stack)
        frame = sweep(
            workload,
            cost,
            config.clients,
            specs if specs is None else list(specs),
            list(config.rates),
            slo_ttft=config.slo_ttft,
            slo_tbt=config.slo_tbt_mean,
            n_jobs=config.jobs,
            backend=config.backend,
            progress=progress(config),
            mode=config.mode,
            token_budget=config.token_budget,
            cluster=cluster,
            max_num_batched_tokens=config.max_num_batched_tokens,
            chunked_prefill=config.chunked_prefill,
            # A cluster's memory is its token machines' (make_cluster gives it to the cluster).
            memory=None if config.mode == "disaggregated" else make_memory(config),
        )
    wall = time.perf_counter() - start
    if config.plot:
        plot_sweep(
            frame,
            metric=config.metric,
            title=f"{Path(workload.name).name} on {config.clients} clients: {config.metric}",
        ).savefig(config.plot)
    labels = [request if iteration is None else f"{request}/{iteration}" for request, iteration in policies]
    if config.json:
        rows = [
            {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}
            for row in frame.to_dict(orient="records")
        ]
        report: dict[str, Any] = {
            "workload": workload.name,
            "requests": len(workload),
            "clients": config.clients,
            "cost": cost_as_toml(config.cost),
            "mode": config.mode,
            "arrivals": config.arrivals,
            "rate_scale": config.rate_scale,
            "max_prompt": config.max_prompt,
            "max_output": config.max_output,
            "predictor": config.predictor,
            "policies": labels,
            "rates": list(config.rates),
            "slo_ttft_s": config.slo_ttft,
            "slo_tbt_s": config.slo_tbt_mean,
            "backend": config.backend,
            "rows": rows,
        }
        if config.plot:
            report["plot"] = config.plot
        print_json(with_timings(report, config, wall_s=wall))
        return 0
    print(
        f"{workload!r} on {config.clients} clients, cost {describe_cost(config.cost)}: {len(frame)} cases "
        f"in {wall:.1f} s ({config.backend})"
    )
    prepared = describe_preparation(preparation)
    if prepared:
        scaled = "; each rate multiplies the replayed rate" if preparation.options.rate_scale != 1.0 else ""
        print(f"  workload      {prepared}{scaled}")
    table = frame.assign(
        policy=[
            request if not isinstance(iteration, str) else f"{request}/{iteration}"
            for request, iteration in zip(frame["request_policy"], frame["iteration_policy"], strict=True)
        ]
    )
    columns = ["rate_scale", "policy", "offered_rps", "tokens_per_s", "ttft_p50_s", "ttft_p99_s"]
    columns += ["tbt_p50_s", "tbt_p99_s", "e2e_p99_s"]
    targets = config.slo_ttft is not None or config.slo_tbt_mean is not None
    if targets:
        columns += ["goodput_rps", "slo_attainment"]
    if (table["preemptions"].fillna(0) > 0).any():
        columns += ["preemptions"]
    print(table[columns].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if targets and table["policy"].nunique() > 1:
        # The recommendation: at each load, the policy that serves the most requests within the
        # targets (ties to the lower p99 TTFT).
        best = table.sort_values(["rate_scale", "goodput_rps", "ttft_p99_s"], ascending=[True, False, True])
        print("best policy at each rate (most goodput within the targets, then the lowest p99 TTFT):")
        for rate, row in best.groupby("rate_scale", sort=False).head(1).set_index("rate_scale").iterrows():
            if not row["goodput_rps"] > 0:
                load = f"  x{rate:g} ({row['offered_rps']:.3g} requests/s)"
                print(f"{load}: no policy serves a request within the targets")
                continue
            print(
                f"  x{rate:g} ({row['offered_rps']:.3g} requests/s): {row['policy']}, "
                f"{row['slo_attainment']:.1%} within the targets"
            )
    if config.plot:
        print(f"figure written to {config.plot}")
    return 0


COMMAND = Command(
    "sweep",
    "latency against load: policies at several arrival rates (TTFT, TBT, e2e, goodput)",
    "Run each policy pair at each arrival-rate multiplier (arrivals divided by it) on an engine of "
    "any --mode and report serving metrics per (rate, policy); goodput counts the requests within "
    "--slo-ttft and --slo-tbt-mean. Every option can also come from a TOML file (--config; see "
    "llmsched.cli.config); a flag given on the command line overrides the file's value.",
    OPTIONS,
    run,
    config=SweepConfig,
    modes=MODES,
)
