"""``llmsched simulate``: one workload on one engine, in any mode, with its figures and files.

The run is a competition engine (a prefill stage pauses decoding) under a request policy and
an iteration policy, a fused engine (chunked prefill) under a request policy, or a Splitwise
cluster of prompt and token machines; each is validated and compared with its lower bound.
Its options are declared here and in :mod:`llmsched.cli.options`;
``RunConfig`` is the config they make (a ``--config`` file's layout is in
:mod:`llmsched.cli.config`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from llmsched.cli.config import PolicyConfig, check_policy, config_class, make_policy
from llmsched.cli.options import (
    CLUSTER,
    ENGINE,
    FLAG,
    JSON,
    LOAD,
    MEMORY,
    MODES,
    PLOT_FILE,
    POOLS,
    REAL_ENGINES,
    SLO_TBT_MEAN,
    SLO_TTFT,
    TRACES,
    Command,
    Kind,
    LoadSettings,
    Option,
    check_outputs,
    describe_preparation,
    load_inputs,
    make_cluster,
    make_memory,
    only,
    print_json,
    print_traces,
    refuse_unused_predictor,
    resolve,
    write_traces,
)
from llmsched.online.registry import iteration_policy_names, request_policy_names

__all__ = ["COMMAND", "OPTIONS", "run"]


def _policy(kind: str) -> Kind:
    """A policy of ``kind`` ("request" or "iteration"): a flag names it, a config file may give
    its parameters too; a flag naming the file's policy keeps the file's parameters."""

    def merge(name: str, current: PolicyConfig) -> PolicyConfig:
        return PolicyConfig(name, current.params if name == current.name else {})

    return Kind(str, check_policy(kind), "NAME", merge=merge, as_toml=PolicyConfig.as_dict)


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
        "request_policy",
        _policy("request"),
        PolicyConfig("fcfs"),
        f"one of {request_policy_names()}; parameters go in --config",
        shown="fcfs",
    ),
    Option(
        "iteration_policy",
        _policy("iteration"),
        PolicyConfig("prefill-first"),
        f"one of {iteration_policy_names()}; parameters go in --config",
        shown="prefill-first",
        applies=only("mode", "competition"),
    ),
    Option(
        "clairvoyant",
        FLAG,
        False,
        "reveal every request to the policies before the run starts, a study of planning ahead",
        shown="off; policies learn of a request when it arrives",
        applies=only("mode", "competition", "fusion", *REAL_ENGINES),
    ),
    SLO_TTFT,
    SLO_TBT_MEAN,
    Option(
        "plot",
        PLOT_FILE,
        None,
        "write a Gantt chart to this file (PNG, SVG, PDF)",
        section="output",
        applies=only("mode", "competition"),
        strict=True,
    ),
    *TRACES,
    JSON,
)


def _make_request_policy(config: Any) -> Any:
    """A fresh request policy: the named one with its parameters."""
    return make_policy("request", config.request_policy)


def _make_iteration_policy(config: Any) -> Any:
    """A fresh iteration policy: the named one with its parameters; the ``slo`` rule serves
    ``slo_ttft`` unless its parameters give a target of its own."""
    policy = config.iteration_policy
    if policy.name == "slo" and "slo_ttft" not in policy.params and config.slo_ttft is not None:
        return make_policy("iteration", policy, slo_ttft=config.slo_ttft)
    return make_policy("iteration", policy)


def _check_together(config: Any) -> None:
    config.prepare_options()  # replace_arrivals needs arrivals
    if config.predictor not in (None, "oracle"):
        refuse_unused_predictor(config.predictor, config.request_policy.name, _make_request_policy(config))


RunConfig = config_class(
    "RunConfig",
    OPTIONS,
    # Its home is llmsched.cli.config, where it is documented and has always been imported from.
    "llmsched.cli.config",
    """One ``simulate`` run, resolved: every field has its value (:mod:`llmsched.cli.config`
    gives the TOML layout; each field is the flag of the same name, ``workload`` is the spec).

    ``cost`` is a ``--cost`` spec string or a checked ``[cost]`` table (read-only);
    ``arrivals`` is an arrival-process spec; output paths are strings.

    Raises
    ------
    TypeError, ValueError
        A field of the wrong type or out of range (the message names it), arrivals to
        replace without arrivals, a policy that refuses its parameters, or a predictor the
        request policy would not use.
    """,
    bases=(LoadSettings,),
    methods={
        "check_together": _check_together,
        "make_request_policy": _make_request_policy,
        "make_iteration_policy": _make_iteration_policy,
    },
)


class EngineRun(NamedTuple):
    """What one mode's run gives the report: the schedule, its lower bound (``bounds``: the
    bound's parts, where the mode has several), and how the report names the engine, the bound
    and the policies."""

    schedule: Any
    bound: float | None  # None: the mode has no proven bound (padded insertion)
    bounds: dict[str, float] | None
    bound_name: str
    engine: str
    request_policy: str
    iteration_policy: str | None


def _held(memory: Any, before: str) -> str:
    """How the report names an engine's KV-cache memory ('' without one)."""
    return "" if memory is None else f"{before}{memory.tokens:,} tokens of KV cache"


def _competition(config: Any, workload: Any, cost: Any) -> EngineRun:
    from llmsched.engines.competition.bounds import lower_bounds
    from llmsched.online.simulate import simulate

    memory = make_memory(config)
    schedule = simulate(
        workload,
        cost,
        config.clients,
        config.make_request_policy(),
        config.make_iteration_policy(),
        clairvoyant=config.clairvoyant,
        memory=memory,
    )
    bounds = lower_bounds(workload, cost, config.clients)
    request, iteration = config.request_policy.name, config.iteration_policy.name
    return EngineRun(
        schedule,
        bounds.strong,
        bounds.as_dict(),
        "strong lower bound",
        f"{request} / {iteration}{_held(memory, ', ')}",
        request,
        iteration,
    )


def _fusion(config: Any, workload: Any, cost: Any) -> EngineRun:
    from llmsched.engines.fusion.bounds import fused_lower_bounds
    from llmsched.online.simulate import simulate_fusion

    memory = make_memory(config)
    schedule = simulate_fusion(
        workload,
        cost,
        config.clients,
        config.make_request_policy(),
        config.token_budget,
        clairvoyant=config.clairvoyant,
        memory=memory,
    )
    bound = fused_lower_bounds(workload, cost, config.clients, config.token_budget).strong
    request = config.request_policy.name
    engine = (
        f"fused (chunked prefill, {config.token_budget} tokens an iteration{_held(memory, ', ')}), {request}"
    )
    return EngineRun(schedule, bound, None, "lower bound", engine, request, None)


def _cluster_figures(schedule: Any) -> dict[str, Any]:
    """What a disaggregated cluster moved, as it ran (a preset's model's, or the options'):
    ``kv_bytes_per_token``, ``layers`` and ``kv_bandwidth_gbps``; nothing for an engine."""
    cluster = getattr(schedule, "cluster", None)
    if cluster is None:
        return {}
    return {
        "kv_bytes_per_token": cluster.kv_bytes_per_token,
        "layers": cluster.layers,
        "kv_bandwidth_gbps": cluster.kv_bandwidth,
    }


def _disaggregated(config: Any, workload: Any, cost: Any) -> EngineRun:
    from llmsched import simulate_disaggregated
    from llmsched.engines.disaggregation.bounds import disaggregated_lower_bounds

    cluster = make_cluster(config, cost, config.prompt_machines, config.token_machines)
    # Each prompt machine takes its stages through a policy of its own.
    policies = [config.make_request_policy() for _ in range(cluster.prompt_machines)]
    schedule = simulate_disaggregated(workload, cluster, policies)
    bound = disaggregated_lower_bounds(workload, cluster).strong
    request = config.request_policy.name
    engine = (
        f"disaggregated ({config.prompt_machines} prompt + {config.token_machines} token machines, "
        f"{config.kv_bandwidth:g} GB/s, {cluster.kv_bytes_per_token:,.0f} bytes a token over "
        f"{cluster.layers} layers, overlap {'on' if config.kv_overlap else 'off'}"
        f"{', mixed pool' if config.mixed_pool else ''}), {request}, join-the-shortest-queue"
    )
    # A cluster has no prefill-or-decode choice to make: no iteration policy.
    return EngineRun(schedule, bound, None, "lower bound", engine, request, None)


def _real_engine(config: Any, workload: Any, cost: Any) -> EngineRun:
    from llmsched.engines.competition.bounds import lower_bounds
    from llmsched.engines.fusion.bounds import fused_lower_bounds
    from llmsched.engines.orca.rule import most_iteration_tokens
    from llmsched.online.simulate import simulate_batching

    memory = make_memory(config)
    chunked = config.chunked_prefill and config.mode == "vllm"
    schedule = simulate_batching(
        workload,
        cost,
        config.clients,
        config.mode,
        config.make_request_policy(),
        config.max_num_batched_tokens,
        chunked,
        memory,
        clairvoyant=config.clairvoyant,
    )
    tokens = config.max_num_batched_tokens
    if config.mode == "vllm" and not chunked:
        bound = lower_bounds(workload, cost, config.clients).strong
        how = f"prefill first, at most {tokens} prompt tokens an iteration"
    elif config.mode == "padded":
        # Its iterations are priced padded, not as the fused bounds assume: no proven bound.
        bound = None
        how = f"new prompts padded against the batch, at most {tokens} prompt tokens an iteration"
    else:
        budget = most_iteration_tokens(tokens, workload) if config.mode == "orca" else tokens
        bound = fused_lower_bounds(workload, cost, config.clients, budget).strong
        how = ("whole prompts and decoding" if config.mode == "orca" else "chunked prefill") + (
            f", at most {tokens} tokens an iteration"
        )
    held = _held(memory, ", ") or ", no KV-cache memory limit"
    request = config.request_policy.name
    engine = f"{config.mode} ({how}{held}), {request}"
    return EngineRun(schedule, bound, None, "lower bound", engine, request, None)


# How each mode runs: the engine it simulates and its bound.
_RUNS: dict[str, Callable[[Any, Any, Any], EngineRun]] = {
    "competition": _competition,
    "fusion": _fusion,
    "disaggregated": _disaggregated,
    **dict.fromkeys(REAL_ENGINES, _real_engine),
}


def run(args: Any) -> int:
    """Run ``llmsched simulate``: 0 for a valid schedule, 1 for an invalid one."""
    resolved = resolve(args, COMMAND)
    config = resolved.config
    check_outputs(resolved)
    cost, workload, preparation = load_inputs(resolved)
    engine = _RUNS[config.mode](config, workload, cost)
    schedule = engine.schedule
    violations = schedule.validate()
    summary = schedule.summary(slo_ttft=config.slo_ttft, slo_tbt=config.slo_tbt_mean)
    result = {
        "workload": workload.name,
        "workload_options": preparation.options.as_dict(),
        "prompts_clipped": preparation.prompts_clipped,
        "outputs_clipped": preparation.outputs_clipped,
        "predictions_clipped": preparation.predictions_clipped,
        "predictor": config.predictor,
        "request_policy": engine.request_policy,
        "iteration_policy": engine.iteration_policy,
        "clairvoyant": bool(schedule.info.get("clairvoyant", False)),
        "oracle_lengths": bool(schedule.info.get("oracle_lengths", False)),
        **summary,
        **_cluster_figures(schedule),
        "lower_bound_s": engine.bound,
        **({} if engine.bounds is None else {"lower_bounds": engine.bounds}),
        "gap_to_lb": None if engine.bound is None else schedule.makespan / engine.bound - 1.0,
        "valid": not violations,
        "violations": [str(v) for v in violations],
        "config": config.as_dict(),
    }
    if config.plot:
        from llmsched.plot import save_gantt

        title = f"{workload.name}: {engine.request_policy} / {engine.iteration_policy}"
        save_gantt(schedule, Path(config.plot), title=title)
        result["plot"] = config.plot
    written = write_traces(schedule, config)
    result.update(written)
    if config.json:
        print_json(result)
    else:
        _print_report(config, workload, preparation, engine, summary, violations, result)
        print_traces(written)
    return 0 if not violations else 1


def _print_report(
    config: Any,
    workload: Any,
    preparation: Any,
    engine: EngineRun,
    summary: dict[str, Any],
    violations: list[Any],
    result: dict[str, Any],
) -> None:
    """The text report: the run's figures, the lines of each figure the summary holds."""
    print(f"{workload!r} on {config.clients} clients, {engine.engine}")
    prepared = describe_preparation(preparation)
    if prepared:
        print(f"  workload      {prepared}")
    if config.predictor is not None:
        print(f"  predictor     {config.predictor} (the request policy plans with its predictions)")
    if engine.bound is None:
        print(f"  makespan      {summary['makespan_s']:10.3f} s   (no proven lower bound in this mode)")
    else:
        print(
            f"  makespan      {summary['makespan_s']:10.3f} s   ({engine.bound_name} {engine.bound:.3f} s, "
            f"gap {result['gap_to_lb']:+.2%})"
        )
    if "utilization" in summary:
        busy = f" (the engine busy {summary['busy']:.2%} of the makespan)" if "busy" in summary else ""
        print(f"  utilization   {summary['utilization']:10.2%}{busy}")
    if "utilization_prompt" in summary:
        print(
            f"  busy          {summary['utilization_prompt']:.2%} prompt pool, "
            f"{summary['utilization_token']:.2%} token pool"
        )
    if "transfer_mean_s" in summary:
        print(
            f"  KV transfer   {summary['transfer_mean_s'] * 1e3:.3f} ms mean, "
            f"{summary['transfer_p99_s'] * 1e3:.3f} ms p99"
        )
    print(f"  throughput    {summary['tokens_per_s']:10.1f} output tokens/s")
    print(f"  TTFT p50/p99  {summary['ttft_p50_s']:.3f} / {summary['ttft_p99_s']:.3f} s")
    print(f"  TBT p50/p99   {summary['tbt_p50_s']:.3f} / {summary['tbt_p99_s']:.3f} s")
    print(f"  e2e p50/p99   {summary['e2e_p50_s']:.3f} / {summary['e2e_p99_s']:.3f} s")
    goodput = f"  goodput       {summary['goodput_rps']:10.3f} requests/s"
    if config.slo_ttft is not None or config.slo_tbt_mean is not None:
        goodput += f" ({summary['slo_attainment']:.1%} meet the targets)"
    print(goodput)
    if "mixed_iterations" in summary:
        print(
            f"  iterations    {summary['iterations']} ({summary['mixed_iterations']} mixing decode "
            f"and prompt chunks; {summary['chunks']} chunks)"
        )
    if summary.get("sit_outs"):
        print(f"  sit-outs      {summary['sit_outs']} (a decoding request past the token cap, an iteration)")
    if "lent_stages" in summary:
        print(
            f"  stages        {summary['prefill_stages']} prefill stages ({summary['lent_stages']} on lent "
            f"token machines), {summary['decode_iterations']} decode iterations"
        )
    if getattr(engine.schedule, "memory", None) is not None:
        peak = int(engine.schedule.memory_in_use()["blocks"].to_numpy().max(initial=0))
        print(
            f"  KV memory     {summary['preemptions']} preemptions, {summary['recomputed_tokens']:,} "
            f"tokens recomputed; at most {peak:,} of {engine.schedule.memory.blocks:,} blocks in use"
        )
    if config.clairvoyant:
        print("  clairvoyant   every request was revealed to the policies before the run started")
    print(f"  valid         {not violations}")
    for v in violations[:10]:
        print(f"    {v}")
    if config.plot:
        print(f"  Gantt chart written to {config.plot}")


COMMAND = Command(
    "simulate",
    "simulate a workload under a pair of policies",
    "Simulate a workload on an engine in any mode: competition (under a request and an iteration "
    "policy), fusion (chunked prefill) or disaggregated (prompt and token machines). Goodput counts "
    "the requests within --slo-ttft and --slo-tbt-mean; the slo iteration policy serves --slo-ttft. "
    "--json prints one JSON object, with the resolved config as 'config'. Every option can also "
    "come from a TOML file (--config; see llmsched.cli.config); a flag given on the command line "
    "overrides the file's value.",
    OPTIONS,
    run,
    config=RunConfig,
    modes=MODES,
)
