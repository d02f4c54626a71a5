"""The ``llmsched`` command."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["main", "parse_cost", "parse_workload"]

WORKLOAD_HELP = (
    "gsm8k | gsm8k-answers | exegpt:TASK (S, T, G, C1, C2) | csv:PATH | vidur:PATH | splitwise:PATH"
)
COST_HELP = (
    "paper | linear:A_P,B_P,A_D,B_D[,CAPACITY] (seconds, seconds/token, seconds, seconds/client, "
    "tokens) | levels:CAP1=T1,CAP2=T2,...;TD (the MIP's semantics)"
)


def parse_workload(spec: str, seed: int = 0, requests: int = 1000) -> Any:
    """A workload from a command-line spec (see ``WORKLOAD_HELP``)."""
    from llmsched import workloads

    kind, _, arg = spec.partition(":")
    if kind == "gsm8k" and not arg:
        return workloads.gsm8k(seed)
    if kind == "gsm8k-answers" and not arg:
        return workloads.gsm8k(outputs="answers")
    if kind == "exegpt" and arg:
        return workloads.exegpt_task(arg, requests, seed)
    loaders = {
        "csv": workloads.from_csv,
        "vidur": workloads.from_vidur_trace,
        "splitwise": workloads.from_splitwise_trace,
    }
    if kind in loaders and arg:
        if not Path(arg).is_file():
            raise ValueError(f"workload file {arg!r} does not exist")
        return loaders[kind](arg)
    raise ValueError(f"unknown workload {spec!r}; expected {WORKLOAD_HELP}")


def parse_cost(spec: str, clients: int | None = None) -> Any:
    """A cost model from a command-line spec (see ``COST_HELP``)."""
    from llmsched.cost import LevelCostModel, LinearCostModel

    kind, _, arg = spec.partition(":")
    try:
        if kind == "paper" and not arg:
            return LinearCostModel.paper()
        if kind == "linear" and arg:
            parts = [p.strip() for p in arg.split(",")]
            if len(parts) not in (4, 5):
                raise ValueError("linear needs 4 or 5 numbers")
            a_p, b_p, a_d, b_d = (float(p) for p in parts[:4])
            cap = int(parts[4]) if len(parts) == 5 else 5000
            return LinearCostModel(a_p, b_p, a_d, b_d, prefill_capacity=cap)
        if kind == "levels" and arg:
            level_part, _, td = arg.partition(";")
            levels = []
            for item in level_part.split(","):
                cap_s, _, time_s = item.partition("=")
                levels.append((int(cap_s), float(time_s)))
            return LevelCostModel(levels, float(td))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"bad cost model {spec!r}: {exc}; expected {COST_HELP}") from exc
    raise ValueError(f"unknown cost model {spec!r}; expected {COST_HELP}")


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=float))


def _cmd_simulate(args: argparse.Namespace) -> int:
    from llmsched.bounds import lower_bounds
    from llmsched.simulate import simulate
    from llmsched.validate import validate

    workload = parse_workload(args.workload, args.seed, args.requests)
    cost = parse_cost(args.cost)
    schedule = simulate(workload, cost, args.clients, args.request_policy, args.iteration_policy)
    violations = validate(schedule)
    bounds = lower_bounds(workload, cost, args.clients)
    summary = schedule.summary()
    result = {
        "workload": workload.name,
        "request_policy": args.request_policy,
        "iteration_policy": args.iteration_policy,
        **summary,
        "lower_bound_s": bounds.strong,
        "lower_bounds": bounds.as_dict(),
        "gap_to_lb": schedule.makespan / bounds.strong - 1.0,
        "valid": not violations,
        "violations": [str(v) for v in violations],
    }
    if args.plot:
        from llmsched.plot import save_gantt

        save_gantt(
            schedule, args.plot, title=f"{workload.name}: {args.request_policy} / {args.iteration_policy}"
        )
        result["plot"] = str(args.plot)
    if args.json:
        _print_json(result)
    else:
        print(f"{workload!r} on {args.clients} clients, {args.request_policy} / {args.iteration_policy}")
        print(
            f"  makespan      {schedule.makespan:10.3f} s   (strong lower bound {bounds.strong:.3f} s, "
            f"gap {result['gap_to_lb']:+.2%})"
        )
        print(f"  utilization   {schedule.utilization:10.2%}")
        print(f"  throughput    {schedule.tokens_per_s:10.1f} output tokens/s")
        print(f"  TTFT p50/p99  {summary['ttft_p50_s']:.3f} / {summary['ttft_p99_s']:.3f} s")
        print(f"  latency p50/p99 {summary['latency_p50_s']:.3f} / {summary['latency_p99_s']:.3f} s")
        print(f"  valid         {not violations}")
        for v in violations[:10]:
            print(f"    {v}")
        if args.plot:
            print(f"  Gantt chart written to {args.plot}")
    return 0 if not violations else 1


def _cmd_reproduce(args: argparse.Namespace) -> int:
    from llmsched.reproduce import format_report, reproduce_gsm8k

    report = reproduce_gsm8k(seed=args.seed, plot_dir=args.plot, predictor=args.predictor)
    if args.json:
        _print_json(report)
    else:
        print(format_report(report))
        if args.plot:
            print(f"\nGantt charts written to {args.plot}/")
    return 0


def _cmd_study(args: argparse.Namespace) -> int:
    import time

    from llmsched.study import format_study, plot_study, run_study, study_summary

    start = time.perf_counter()
    frame = run_study(
        args.cases,
        requests=args.requests,
        clients=args.clients,
        predictor=args.predictor,
        n_jobs=args.jobs,
        progress=not args.no_progress,
    )
    summary = study_summary(frame)
    summary["wall_s"] = time.perf_counter() - start
    summary["predictor"] = args.predictor
    if args.plot:
        plot_study(frame, args.plot)
        summary["plot"] = str(args.plot)
    if args.json:
        _print_json({**summary, "rows": frame.to_dict(orient="records")})
    else:
        print(f"{summary['cases']} cases, predictor {args.predictor}, {summary['wall_s']:.1f} s")
        print(format_study(frame, summary))
        if args.plot:
            print(f"figure written to {args.plot}")
    return 0


def _latency_bound(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"--latency-bound must be a number of seconds or 'inf', got {text!r}") from None
    if not value > 0:
        raise ValueError(f"--latency-bound must be positive (seconds) or 'inf', got {text!r}")
    return value


def _cmd_exegpt(args: argparse.Namespace) -> int:
    from llmsched.exegpt import XSimulator, optimize

    bound = _latency_bound(args.latency_bound)
    sim = XSimulator.for_task(args.model, args.task, gpu=args.gpu, gpus=args.gpus)
    schedules = [s.strip().upper() for s in args.schedules.split(",")]
    grid = {"batch_max": args.batch_max, "iterations_max": args.iterations_max}
    result = optimize(sim, bound, schedules=schedules, eps_throughput=args.eps, eps_latency=args.eps, **grid)
    out: dict[str, Any] = {"setup": sim.name, "schedules": schedules, **result.to_dict()}
    exh = None
    if args.verify:
        exh = optimize(sim, bound, method="exhaustive", schedules=schedules, **grid)
        out["exhaustive"] = {
            "schedule": exh.schedule,
            "variables": exh.variables,
            "throughput": exh.throughput,
            "latency": None if exh.latency == float("inf") else exh.latency,
            "evaluations": exh.evaluations,
            "runtime_s": exh.runtime,
        }
    if args.json:
        _print_json(out)
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


def _cmd_runtime(args: argparse.Namespace) -> int:
    from llmsched.runtime import MISSING_TORCH, torch_available

    if not torch_available():
        print(f"llmsched runtime: {MISSING_TORCH}", file=sys.stderr)
        return 3
    if args.action is None:
        args.runtime_parser.print_help(sys.stderr)
        return 2
    from llmsched.runtime import validate_runtime

    report = validate_runtime(
        model=args.model,
        device=args.device,
        requests=args.requests,
        clients=args.clients,
        scale=args.scale,
        strategy=args.strategy,
        seed=args.seed,
        dtype=args.dtype,
    )
    if args.json:
        _print_json(report)
    else:
        print(
            f"{report['model']} model ({report['parameters']:,} parameters) on {report['device']}, "
            f"{report['workload']} on {report['clients']} clients, {report['strategy']} strategy"
        )
        print(
            f"  fitted cost model  held-out error {report['fit_error']:.1%} "
            f"(prefill {report['fit_error_prefill']:.1%}, decode {report['fit_error_decode']:.1%}); "
            f"on the executed stages {report['stage_error']:.1%}"
        )
        print(f"  predicted makespan {report['predicted_makespan_s']:.4f} s")
        print(f"  measured makespan  {report['measured_makespan_s']:.4f} s ({report['makespan_error']:+.1%})")
        print(
            f"  tokens match       {report['tokens_match']} ({report['tokens_matched']}/{report['requests']} "
            f"requests equal a run of their own, {report['dtype']})"
        )
        print(f"  measured schedule  {'valid' if report['valid'] else 'INVALID'} (all rules but stage_time)")
        for v in report["violations"][:5]:
            print(f"    {v}")
    exact = report["dtype"] == "float32"  # in half precision tokens may change with the batch
    return 0 if report["valid"] and (report["tokens_match"] or not exact) else 1


def build_parser() -> argparse.ArgumentParser:
    from llmsched.online.registry import iteration_policy_names, request_policy_names

    parser = argparse.ArgumentParser(prog="llmsched", description="Schedule LLM inference.")
    sub = parser.add_subparsers(dest="command", required=True)

    sim = sub.add_parser("simulate", help="simulate a workload under a pair of policies")
    sim.add_argument("--workload", default="gsm8k", help=WORKLOAD_HELP)
    sim.add_argument("--seed", type=int, default=0, help="seed of generated workloads")
    sim.add_argument("--requests", type=int, default=1000, help="requests of generated ExeGPT workloads")
    sim.add_argument("--cost", default="paper", help=COST_HELP)
    sim.add_argument("--clients", type=int, default=200, help="number of clients (batch slots)")
    sim.add_argument("--request-policy", default="fcfs", help=f"one of {request_policy_names()}")
    sim.add_argument("--iteration-policy", default="prefill-first", help=f"one of {iteration_policy_names()}")
    sim.add_argument("--plot", type=Path, help="write a Gantt chart to this file (PNG, SVG, PDF)")
    sim.add_argument("--json", action="store_true", help="print one JSON object")
    sim.set_defaults(func=_cmd_simulate)

    rep = sub.add_parser("reproduce", help="reproduce a published experiment")
    rep.add_argument("experiment", choices=["gsm8k"])
    rep.add_argument("--seed", type=int, default=0)
    rep.add_argument("--json", action="store_true", help="print one JSON object")
    rep.add_argument(
        "--predictor",
        default="mico",
        help="the realistic predictor run beside the oracle (mico, noisy, bucket, mean)",
    )
    rep.add_argument("--plot", type=Path, metavar="DIR", help="write Gantt charts to DIR")
    rep.set_defaults(func=_cmd_reproduce)

    study = sub.add_parser("study", help="the 100-case study (Figs. 10-11): strategies on random cases")
    study.add_argument("--cases", type=int, default=100)
    study.add_argument("--requests", type=int, default=1319, help="requests per case")
    study.add_argument("--clients", type=int, default=200)
    study.add_argument("--predictor", default="oracle", help="oracle, mico, noisy, bucket or mean")
    study.add_argument("--jobs", type=int, default=-1, help="joblib workers (-1: every core)")
    study.add_argument("--plot", type=Path, help="write the per-case figure to this file")
    study.add_argument("--json", action="store_true", help="print one JSON object")
    study.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    study.set_defaults(func=_cmd_study)

    exe = sub.add_parser(
        "exegpt", help="ExeGPT: the best RRA/WAA configuration under a latency bound (XSimulator + B&B)"
    )
    exe.add_argument(
        "--model", default="opt-13b", help="t5-11b, opt-13b, gpt3-39b, gpt3-101b, gpt3-175b, gpt3-341b"
    )
    exe.add_argument("--task", default="S", help="S, T, G, C1 or C2 (ExeGPT's Table 3)")
    exe.add_argument("--latency-bound", required=True, help="seconds for the 99th-percentile output, or inf")
    exe.add_argument("--gpu", help="a40 or a100 (default: the paper's for the model)")
    exe.add_argument("--gpus", type=int, help="GPU count (default: the paper's for the model)")
    exe.add_argument(
        "--schedules", default="RRA,WAA-C,WAA-M", help="comma-separated subset of RRA,WAA-C,WAA-M"
    )
    exe.add_argument("--eps", type=float, default=0.01, help="throughput and latency tolerance of the search")
    exe.add_argument("--batch-max", type=int, default=128, help="largest encoder batch B_E searched")
    exe.add_argument(
        "--iterations-max", type=int, help="largest N_D searched (default: the longest output, at most 128)"
    )
    exe.add_argument("--verify", action="store_true", help="also run the exhaustive search")
    exe.add_argument("--json", action="store_true", help="print one JSON object")
    exe.set_defaults(func=_cmd_exegpt)

    run = sub.add_parser("runtime", help="run schedules on a real torch decode loop (needs torch)")
    run_sub = run.add_subparsers(dest="action")
    run.set_defaults(func=_cmd_runtime, runtime_parser=run, action=None)
    val = run_sub.add_parser(
        "validate", help="profile, fit a cost model, execute a simulated schedule, compare with the clock"
    )
    val.add_argument("--model", default="tiny", help="tiny, small, 125m or 1b (seeded random weights)")
    val.add_argument("--device", default="cpu", help="cpu or cuda")
    val.add_argument("--requests", type=int, default=24)
    val.add_argument("--clients", type=int, default=8)
    val.add_argument("--scale", type=float, default=0.125, help="GSM8K lengths times this")
    val.add_argument("--strategy", default="hybrid", help="baseline or hybrid")
    val.add_argument("--seed", type=int, default=0)
    val.add_argument("--dtype", default="float32", help="float32 (exact token check), float16 or bfloat16")
    val.add_argument("--json", action="store_true", help="print one JSON object")
    val.set_defaults(func=_cmd_runtime)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except (ValueError, TypeError, FileNotFoundError) as exc:
        print(f"llmsched: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
