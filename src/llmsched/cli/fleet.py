"""``llmsched fleet``: a workload on several engines behind a router (Mico's multi-cloud).

The engines are alike (``--engines N`` of ``--clients``) or of kinds of their own size, price
and speed (``--engine NAME:CLIENTS[:PRICE[:SPEED]]``, repeated), each a competition or a fused
engine; the router sends arrivals to them and backoff lets a dry engine pull waiting requests;
admission (``--admission-ttft``) turns away at the door a request whose expected TTFT is past
its target, reported as rejected.
"""

from __future__ import annotations

from typing import Any

from llmsched.cli.options import (
    ADMISSION,
    BACKOFF,
    ENGINE,
    ENGINE_KIND,
    ENGINE_POLICIES,
    JSON,
    LOAD,
    MEMORY,
    REAL_ENGINES,
    SLO_TBT_MEAN,
    SLO_TTFT,
    TRACES,
    WEIGHING_ROUTERS,
    Command,
    Option,
    admission,
    backoff,
    check_outputs,
    choice,
    engine_kind,
    engine_price,
    integer,
    load_config_class,
    load_inputs,
    make_memory,
    only,
    print_json,
    print_traces,
    resolve,
    router,
    scaled_cost,
    write_traces,
)

__all__ = ["COMMAND", "OPTIONS", "FleetConfig", "run"]

#: The command's options, each declared once: its flag and its TOML key.
#:
#: :meta hide-value:
OPTIONS = (
    *LOAD,
    *ENGINE,
    *ENGINE_POLICIES,
    *MEMORY,
    router("round-robin"),
    *BACKOFF,
    *ADMISSION,
    Option("engines", integer(1, 100_000), 1, "engines alike (each --engine kind this many times)"),
    Option(
        "engine",
        ENGINE_KIND,
        None,
        "an engine of its own clients, price an hour (left out: the --cost preset's, else 1) and "
        "speed (times the cost model's); repeat for several, each --engines times",
        shown="--engines engines of --clients",
        repeat=True,
    ),
    Option(
        "sizes",
        choice("predicted", "oracle"),
        "predicted",
        "what least-work, qcmax and mico weigh requests by",
        applies=only("router", *WEIGHING_ROUTERS),
    ),
    SLO_TTFT,
    SLO_TBT_MEAN,
    *TRACES,
    JSON,
)

FleetConfig = load_config_class(
    "FleetConfig",
    OPTIONS,
    __name__,
    """One ``fleet`` run, resolved: every field is the flag of the same name (see
    :mod:`llmsched.cli.config` for the TOML layout); ``engine`` is None for ``engines`` alike.""",
)


def run(args: Any) -> int:
    """Run ``llmsched fleet``: 0 when every engine's schedule is valid, 1 otherwise."""
    from llmsched.fleet.engine import Engine
    from llmsched.fleet.simulate import simulate_fleet

    resolved = resolve(args, COMMAND)
    config = resolved.config
    if config.engine and resolved.given("clients"):
        raise ValueError(
            "--clients applies only without --engine (each --engine NAME:CLIENTS names its own clients); "
            "it would be ignored"
        )
    if config.engine and config.engines != 1:
        raise ValueError(
            "give --engines N (N alike) or --engine NAME:CLIENTS:PRICE:SPEED (repeated), not both"
        )
    pulls = backoff(resolved)
    door = admission(resolved)
    check_outputs(resolved)
    cost, workload, _ = load_inputs(resolved)
    policies = (config.request_policy, config.iteration_policy)
    mode = {
        "mode": config.mode,
        "token_budget": config.token_budget,
        "max_num_batched_tokens": config.max_num_batched_tokens,
        "chunked_prefill": config.chunked_prefill,
        "memory": make_memory(config),
    }
    default_price = engine_price(config)  # the --cost preset's, where an engine gives none
    if config.engine:
        kinds = [engine_kind(spec, default_price) for spec in config.engine]
        engines = [
            Engine(scaled_cost(cost, speed), clients, price, *policies, name, **mode)
            for name, clients, price, speed in kinds
            for _ in range(config.engines)
        ]
    else:
        engines = [Engine(cost, config.clients, default_price, *policies, **mode)] * config.engines
    fleet = simulate_fleet(
        workload, engines, config.router, pulls, seed=config.seed, sizes=config.sizes, admission=door
    )
    violations = fleet.validate()
    summary = fleet.summary(slo_ttft=config.slo_ttft, slo_tbt=config.slo_tbt_mean)
    frame = fleet.engine_frame()
    written = write_traces(fleet, config)
    if config.json:
        print_json(
            {
                "workload": workload.name,
                "summary": summary,
                "info": fleet.info,
                "engines": frame.to_dict(orient="records"),
                "valid": not violations,
                "violations": [str(v) for v in violations[:20]],
                **written,
            }
        )
    else:
        print(
            f"{workload.name}: {len(workload)} requests on {len(engines)} engines, router {config.router}"
            f"{', backoff' if config.backoff else ''}"
        )
        for key in ("makespan_s", "tokens_per_s", "price_per_hour", "tokens_per_cost", "utilization"):
            print(f"  {key:<16}{summary[key]:.6g}")
        for key in ("ttft_p50_s", "ttft_p99_s", "tbt_p99_s", "latency_p99_s"):
            print(f"  {key:<16}{summary[key]:.4f}")
        print(f"  {'pulled':<16}{summary['pulled']}")
        if door is not None:
            print(f"  {'rejected':<16}{summary['rejected']} (turned away by admission)")
        if mode["memory"] is not None:
            print(
                f"  {'preemptions':<16}{summary['preemptions']} "
                f"({summary['recomputed_tokens']:,} tokens recomputed)"
            )
        print(f"  {'valid':<16}{not violations}")
        for v in violations[:10]:
            print(f"    {v}")
        print_traces(written)
        print()
        print(frame.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0 if not violations else 1


COMMAND = Command(
    "fleet",
    "several engines behind a router (Mico's multi-cloud; JSQ, power of two, least work, backoff)",
    "Simulate the workload on a fleet of engines (--mode competition, fusion, vllm, sarathi, orca or "
    "padded) "
    "behind a router; "
    "print the fleet's serving figures and one row per engine. Goodput counts the requests within "
    "--slo-ttft and --slo-tbt-mean. Every option can also come from a TOML file (--config; see "
    "llmsched.cli.config); a flag given on the command line overrides the file's value.",
    OPTIONS,
    run,
    config=FleetConfig,
    modes=("competition", "fusion", *REAL_ENGINES),
)
