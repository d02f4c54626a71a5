"""``llmsched provision``: the engines a load needs, at the most output tokens per unit of cost
with the p99 TTFT and the p99 time between tokens within their targets.

``--mode competition`` or ``fusion`` sizes a fleet of engines of each ``--kind``
(:func:`llmsched.fleet.provision.provision`); ``--mode disaggregated`` the prompt and token
pools of a Splitwise cluster (:func:`~llmsched.fleet.provision.provision_disaggregated`).
"""

from __future__ import annotations

from typing import Any

from llmsched.cli.options import (
    BACKEND,
    BACKOFF,
    CLUSTER,
    ENGINE,
    ENGINE_KIND,
    ENGINE_POLICIES,
    JSON,
    LOAD,
    MEMORY,
    MODES,
    NONNEGATIVE,
    PROGRESS,
    REAL_ENGINES,
    SLO_TBT_P99,
    SLO_TTFT,
    Command,
    Option,
    backoff,
    choice,
    engine_kind,
    engine_price,
    enter_backend,
    integers,
    load_config_class,
    load_inputs,
    make_cluster,
    make_memory,
    number,
    only,
    print_json,
    progress,
    resolve,
    router,
    scaled_cost,
)

__all__ = ["COMMAND", "OPTIONS", "ProvisionConfig", "run"]

_POOLS = only("mode", "disaggregated")
_ENGINE_MODES = only("mode", "competition", "fusion", *REAL_ENGINES)

#: The command's options, each declared once: its flag and its TOML key.
#:
#: :meta hide-value:
OPTIONS = (
    # A cluster's pools are searched with first-come-first-served prompt machines: there the
    # predictions would be read by nothing.
    *(o._replace(applies=_ENGINE_MODES) if o.name == "predictor" else o for o in LOAD),
    *ENGINE,
    *ENGINE_POLICIES,
    *MEMORY,
    router("jsq"),
    *BACKOFF,
    Option(
        "kind",
        ENGINE_KIND,
        None,
        "an engine kind; repeat for several",
        shown="one kind of --clients at the --cost preset's price, else 1",
        applies=_ENGINE_MODES,
        refusal="--kind names fleet engines; --mode disaggregated sizes prompt and token pools",
        repeat=True,
    ),
    Option(
        "max",
        integers(1, 100_000, "8 or 4,2"),
        (8,),
        "most engines of each kind (one for all, or one per kind; --mode disaggregated: P or P,T, "
        "prompt and token machines)",
        metavar="N[,N...]",
    ),
    SLO_TTFT,
    SLO_TBT_P99,
    Option(
        "method",
        choice("bnb", "exhaustive"),
        "bnb",
        "bnb: ExeGPT's monotone branch-and-bound; exhaustive: every configuration",
    ),
    Option(
        "eps_latency",
        number(0.0, 1.0, high_open=True),
        0.1,
        "the branch-and-bound's latency tolerance for non-monotone steps",
    ),
    *(
        Option(
            f"{pool}_price",
            NONNEGATIVE,
            None,
            f"disaggregated: a {pool} machine an hour",
            shown="the --cost preset's, else 1",
            applies=_POOLS,
        )
        for pool in ("prompt", "token")
    ),
    *CLUSTER,
    *BACKEND,
    JSON,
    PROGRESS,
)

ProvisionConfig = load_config_class(
    "ProvisionConfig",
    OPTIONS,
    __name__,
    """One ``provision`` search, resolved: every field is the flag of the same name (see
    :mod:`llmsched.cli.config` for the TOML layout); ``kind`` is None for one kind of
    ``clients`` at the ``--cost`` preset's price (else 1).""",
)


def run(args: Any) -> int:
    """Run ``llmsched provision``: 0 when a configuration meets the targets, 1 when none does."""
    import contextlib

    from llmsched.fleet.provision import provision, provision_disaggregated

    resolved = resolve(args, COMMAND)
    config = resolved.config
    pools = config.mode == "disaggregated"
    if config.kind and resolved.given("clients"):
        raise ValueError(
            "--clients applies only without --kind (each --kind NAME:CLIENTS names its own clients); "
            "it would be ignored"
        )
    pulls = None if pools else backoff(resolved)
    tops = list(config.max)
    if pools and len(tops) not in (1, 2):
        raise ValueError("--mode disaggregated takes --max P or --max P,T")
    cost, workload, _ = load_inputs(resolved)
    default_price = engine_price(config)  # the --cost preset's, where no option gives one
    with contextlib.ExitStack() as stack:
        enter_backend(config, stack)
        common = {
            "slo_ttft": config.slo_ttft,
            "slo_tbt": config.slo_tbt_p99,
            "method": config.method,
            "eps_latency": config.eps_latency,
            "n_jobs": config.jobs,
            "backend": config.backend,
            "progress": progress(config),
        }
        if pools:
            prompt, token = tops if len(tops) == 2 else tops * 2
            result = provision_disaggregated(
                workload,
                make_cluster(config, cost, 1, 1),
                prompt,
                token,
                prompt_price=default_price if config.prompt_price is None else config.prompt_price,
                token_price=default_price if config.token_price is None else config.token_price,
                **common,
            )
        else:
            from llmsched.fleet.engine import Engine

            specs = config.kind or (f"engine:{config.clients}",)
            kinds = [
                Engine(
                    scaled_cost(cost, speed),
                    clients,
                    price,
                    config.request_policy,
                    config.iteration_policy,
                    name,
                    mode=config.mode,
                    token_budget=config.token_budget,
                    max_num_batched_tokens=config.max_num_batched_tokens,
                    chunked_prefill=config.chunked_prefill,
                    memory=make_memory(config),
                )
                for name, clients, price, speed in (engine_kind(spec, default_price) for spec in specs)
            ]
            counts = tops if len(tops) != 1 else tops * len(kinds)
            result = provision(
                workload, kinds, counts, router=config.router, backoff=pulls, seed=config.seed, **common
            )
    frame = result.frame()
    if config.json:
        print_json(
            {
                "workload": workload.name,
                "counts": result.counts,
                "feasible": result.feasible,
                "tokens_per_cost": result.tokens_per_cost,
                "tokens_per_s": result.tokens_per_s,
                "price_per_hour": result.price_per_hour,
                "ttft_p99_s": result.ttft_p99_s,
                "tbt_p99_s": result.tbt_p99_s,
                "evaluations": result.evaluations,
                "grid": result.grid,
                "method": result.method,
                "message": result.message,
                "rows": frame.to_dict(orient="records"),
            }
        )
    else:
        print(
            f"{workload.name}: {len(workload)} requests; targets p99 TTFT {config.slo_ttft} s, "
            f"p99 TBT {config.slo_tbt_p99} s"
        )
        if result.feasible:
            chosen = ", ".join(f"{count} x {name}" for name, count in (result.counts or {}).items())
            print(f"  chosen          {chosen}")
            print(f"  price_per_hour  {result.price_per_hour:.6g}")
            print(f"  tokens_per_cost {result.tokens_per_cost:.6g}")
            print(f"  ttft_p99_s      {result.ttft_p99_s:.4f}")
            print(f"  tbt_p99_s       {result.tbt_p99_s:.4f}")
        else:
            print(f"  {result.message}")
        print(f"  evaluations     {result.evaluations} of {result.grid} ({result.method})")
        print()
        print(frame.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0 if result.feasible else 1


COMMAND = Command(
    "provision",
    "the engines a load needs: most tokens per cost within p99 TTFT and TBT targets",
    "Search the number of engines of each kind (--mode competition, fusion, vllm, sarathi, orca or "
    "padded: a "
    "fleet of such "
    "engines) or of prompt and token machines (--mode disaggregated) that serves the workload at "
    "the most output tokens per unit of cost with the p99 TTFT within --slo-ttft and the p99 time "
    "between tokens within --slo-tbt-p99: ExeGPT's monotone branch-and-bound, or every "
    "configuration. Every option can also come from a TOML file (--config; see "
    "llmsched.cli.config); a flag given on the command line overrides the file's value.",
    OPTIONS,
    run,
    config=ProvisionConfig,
    modes=MODES,
)
