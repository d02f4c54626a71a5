"""The ``llmsched`` command."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

__all__ = ["main", "parse_cost", "parse_workload"]

WORKLOAD_HELP = (
    "gsm8k | gsm8k-answers | exegpt:TASK (S, T, G, C1, C2) | csv:PATH | vidur:PATH | splitwise:PATH "
    "| azure:PATH (an Azure LLM inference trace)"
)
COST_HELP = (
    "paper | linear:A_P,B_P,A_D,B_D[,CAPACITY] (seconds, seconds/token, seconds, seconds/client, "
    "tokens) | context:A_P,B_P,C_P,A_D,B_D,C_D[,CAPACITY] (the linear terms plus seconds per "
    "squared prompt token and per context token) | levels:CAP1=T1,CAP2=T2,...;TD (the MIP's semantics)"
)


def parse_workload(spec: str, seed: int = 0, requests: int = 1000) -> Any:
    """A workload from a command-line spec (see ``WORKLOAD_HELP``).

    Raises
    ------
    ValueError
        An unknown spec, a file that cannot be read as that kind of workload (the message
        names the file), or a bad ``seed`` or ``requests``.
    """
    from llmsched import workloads

    if not isinstance(spec, str):
        raise TypeError(f"workload must be a spec string ({WORKLOAD_HELP}), got {type(spec).__name__}")
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
        "azure": workloads.from_azure_trace,
    }
    if kind in loaders and arg:
        return loaders[kind](arg)
    raise ValueError(f"unknown workload {spec!r}; expected {WORKLOAD_HELP}")


def _spec_number(field: str, text: str, kind: type = float) -> Any:
    """``text`` as a number of ``kind`` (float or int); a ValueError naming ``field`` otherwise."""
    try:
        return kind(text)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise ValueError(f"{field} must be {what}, got {text!r}") from None


# The coefficients of each --cost kind that takes numbers, in the model's order.
_SPEC_FIELDS = {"linear": ("A_P", "B_P", "A_D", "B_D"), "context": ("A_P", "B_P", "C_P", "A_D", "B_D", "C_D")}


def parse_cost(spec: str, clients: int | None = None) -> Any:
    """A cost model from a command-line spec (see ``COST_HELP``).

    Raises
    ------
    ValueError
        An unknown spec, a malformed one, or parameters the cost model refuses; the
        message names the spec and the field.
    """
    from llmsched.core.cost import ContextCostModel, LevelCostModel, LinearCostModel

    if not isinstance(spec, str):
        raise TypeError(f"cost must be a spec string ({COST_HELP}), got {type(spec).__name__}")
    kind, _, arg = spec.partition(":")
    try:
        if kind == "paper" and not arg:
            return LinearCostModel.paper()
        if kind in _SPEC_FIELDS and arg:
            fields = _SPEC_FIELDS[kind]
            parts = [p.strip() for p in arg.split(",")]
            if len(parts) not in (len(fields), len(fields) + 1):
                raise ValueError(
                    f"{kind} needs {len(fields)} or {len(fields) + 1} comma-separated numbers "
                    f"({','.join(fields)}[,CAPACITY]), got {len(parts)}"
                )
            numbers = [_spec_number(field, p) for field, p in zip(fields, parts, strict=False)]
            cap = _spec_number("CAPACITY", parts[len(fields)], int) if len(parts) > len(fields) else 5000
            model: Any = LinearCostModel if kind == "linear" else ContextCostModel
            return model(*numbers, prefill_capacity=cap)
        if kind == "levels" and arg:
            level_part, *rest = arg.split(";")
            if len(rest) != 1:
                raise ValueError("levels needs the levels, one ';', then TD (CAP1=T1,CAP2=T2,...;TD)")
            levels = []
            for item in level_part.split(","):
                cap_s, sep, time_s = item.partition("=")
                if not sep:
                    raise ValueError(f"a level must be CAP=T (tokens=seconds), got {item.strip()!r}")
                levels.append((_spec_number("CAP", cap_s.strip(), int), _spec_number("T", time_s.strip())))
            return LevelCostModel(levels, _spec_number("TD", rest[0].strip()))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"bad cost model {spec!r}: {exc}; expected {COST_HELP}") from None
    raise ValueError(f"unknown cost model {spec!r}; expected {COST_HELP}")


def _int_arg(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in ``[minimum, maximum]``."""
    allowed = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer {allowed}, got {text!r}") from None
        if value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"must be an integer {allowed}, got {text}")
        return value

    return parse


def _float_arg(
    low: float, high: float, high_open: bool = False, low_open: bool = False
) -> Callable[[str], float]:
    """An argparse type: a number in the interval from ``low`` to ``high``."""
    allowed = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number in {allowed}, got {text!r}") from None
        inside = (value > low if low_open else value >= low) and (
            value < high if high_open else value <= high
        )
        if not inside:  # NaN is never inside
            raise argparse.ArgumentTypeError(f"must be a number in {allowed}, got {text}")
        return value

    return parse


def _positive_float_arg(text: str) -> float:
    """An argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}") from None
    if not 0 < value < float("inf"):  # NaN is refused too
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def _arrivals_arg(text: str) -> Any:
    """An argparse type: an arrival process spec (``poisson:RATE`` or ``gamma:RATE,CV``)."""
    from llmsched.workloads import ArrivalProcess

    try:
        return ArrivalProcess.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _jobs_arg(text: str) -> int:
    """An argparse type: a joblib worker count, -1 (every core) or a count >= 1 (joblib reads
    other negative counts as every core but some, and runs -1000 on one worker)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a nonzero integer (-1: every core), got {text!r}"
        ) from None
    if value == 0:
        raise argparse.ArgumentTypeError("must be a nonzero integer (-1: every core), got 0")
    if value < -1:
        raise argparse.ArgumentTypeError(f"must be -1 (every core) or a worker count >= 1, got {value}")
    return value


def _plot_file(text: str) -> Path:
    """An argparse type: a --plot file, named as matplotlib will write it.

    A name without a suffix gets matplotlib's default format (``chart`` is written as
    ``chart.png``), so that the report names the file written. A folder is left as it is, for
    :func:`_check_plot_file` to refuse.
    """
    path = Path(text)
    stem = path.name.rstrip(".")
    try:
        if path.suffix or not stem or path.is_dir():
            return path
    except OSError:  # a name too long, say: refused with its reason by _check_plot_file
        return path
    import matplotlib

    return path.with_name(f"{stem}.{matplotlib.rcParams['savefig.format']}")


def _check_plot_file(path: Path | None) -> None:
    """Refuse a --plot file that cannot be written, or not as an image, before the work whose
    figure it is."""
    if path is None:
        return
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = path.suffix.lower().lstrip(".")
    if suffix and suffix not in formats:
        raise ValueError(
            f"--plot {str(path)!r}: unknown image format {suffix!r}; use one of {sorted(formats)}"
        )
    _check_output_file(path, "--plot", "gantt.png")


def _check_output_file(path: Path | None, option: str, example: str = "out.json") -> None:
    """Refuse an output file that cannot be written, before the work that fills it.

    The file is opened for appending (and removed again if it was not there), so that any
    reason the system has to refuse it (a missing or read-only folder, a name too long) shows
    now rather than after the work. ``option`` names the flag in the message.
    """
    if path is None:
        return
    shown = f"{option} {str(path)!r}"
    try:
        if path.is_dir():
            raise ValueError(f"{shown} is a folder; give a file such as {example}")
        folder = path.parent
        if not folder.exists():
            raise ValueError(f"{shown}: folder {str(folder)!r} does not exist")
        if not folder.is_dir():
            raise ValueError(f"{shown}: {str(folder)!r} is a file, not a folder")
        existed = path.exists()
        with path.open("ab"):
            pass
        if not existed:
            path.unlink()
    except OSError as exc:
        raise ValueError(f"{shown}: cannot write the file ({exc.strerror or exc})") from None


def _check_plot_dir(path: Path | None) -> None:
    """Create the --plot folder now and write a file in it, so that a path that cannot be a
    folder of charts fails before the work."""
    if path is None:
        return
    import tempfile

    shown = f"--plot {str(path)!r}"
    try:
        if path.exists() and not path.is_dir():
            raise ValueError(f"{shown} is a file; give a folder for the charts")
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"{shown}: cannot create the folder ({exc.strerror or exc})") from None
    try:
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise ValueError(f"{shown}: cannot write in the folder ({exc.strerror or exc})") from None


def _add_progress_flag(parser: argparse.ArgumentParser) -> None:
    """--no-progress, for a command whose work can take more than a few seconds."""
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="hide the progress bar on stderr (default: shown when stderr is a terminal, "
        "hidden when it is a file or a pipe)",
    )


def _progress(args: argparse.Namespace) -> bool:
    """Whether to show a progress bar: not with --no-progress, and only on a terminal, so that
    a log or a pipe does not fill with the bar's redrawn lines."""
    return not args.no_progress and sys.stderr is not None and sys.stderr.isatty()


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=float))


def _add_timings_flag(parser: argparse.ArgumentParser) -> None:
    """--timings: seconds of work in the JSON output, which is otherwise the same on any machine."""
    parser.add_argument(
        "--timings",
        action="store_true",
        help="add a 'timings' object (seconds of work) to the JSON output (default: none, so "
        "that the output depends on the inputs alone and is the same on any machine)",
    )


def _with_timings(report: dict[str, Any], args: argparse.Namespace, **seconds: float) -> dict[str, Any]:
    """``report`` with ``timings`` (the given seconds) when --timings asked for them."""
    if getattr(args, "timings", False):
        return {**report, "timings": {**report.get("timings", {}), **seconds}}
    return report


def _check_predictor(predictor: str | None, request_policy: str) -> None:
    """Refuse an unknown --predictor, or one the request policy would not use, before any work."""
    if predictor is None:
        return
    from llmsched.online import make_predictor, make_request_policy

    make_predictor(predictor)
    if predictor != "oracle" and getattr(make_request_policy(request_policy), "sizes", None) == "oracle":
        base = request_policy.removesuffix("-oracle")
        hint = f"; choose {base!r} to plan with the predictions" if base != request_policy else ""
        raise ValueError(
            f"request policy {request_policy!r} plans with the true output lengths, so --predictor "
            f"{predictor} would go unused{hint}"
        )


def _with_predictor(workload: Any, predictor: str | None, seed: int) -> Any:
    """``workload`` with ``predictor``'s cross-fitted predictions attached (unchanged for None)."""
    if predictor is None:
        return workload
    from llmsched.online import cross_fit, with_predictions

    try:
        predicted = cross_fit(predictor, workload, seed=seed)
    except ValueError as exc:
        raise ValueError(f"--predictor {predictor}: cannot cross-fit on this workload ({exc})") from None
    return with_predictions(workload, predicted)


def _describe_preparation(report: Any) -> str:
    """The text report's line on what --rate-scale, --arrivals and the clipping flags did."""
    options = report.options
    parts = []
    if options.arrivals is not None:
        parts.append(f"arrivals {options.arrivals} (seed {options.seed})")
    if options.rate_scale != 1.0:
        parts.append(f"replayed {options.rate_scale:g}x faster")
    if options.max_prompt is not None:
        parts.append(f"{report.prompts_clipped} prompts clipped to {options.max_prompt} tokens")
    if options.max_output is not None:
        parts.append(
            f"{report.outputs_clipped} outputs and {report.predictions_clipped} predictions clipped to "
            f"{options.max_output} tokens"
        )
    return ", ".join(parts)


# The simulate options a --config file can also set: each flag's dest is the RunConfig field.
_SIMULATE_FIELDS = (
    "workload",
    "seed",
    "requests",
    "rate_scale",
    "max_prompt",
    "max_output",
    "arrivals",
    "replace_arrivals",
    "cost",
    "clients",
    "mode",
    "token_budget",
    "prompt_machines",
    "token_machines",
    "kv_bandwidth",
    "kv_bytes_per_token",
    "layers",
    "kv_overlap",
    "mixed_pool",
    "request_policy",
    "iteration_policy",
    "predictor",
    "clairvoyant",
    "slo_ttft",
    "slo_tbt",
    "plot",
    "trace",
    "requests_csv",
    "stages_csv",
    "json",
)
# simulate's flags that only some modes use: RunConfig field -> the modes that use it. Given
# explicitly with another mode, such a flag is refused (it would be ignored, and echoed in the
# run's config as if it had counted); a --config file may hold every key.
_SIMULATE_MODE_FLAGS = {
    "token_budget": ("fusion",),
    "prompt_machines": ("disaggregated",),
    "token_machines": ("disaggregated",),
    "kv_bandwidth": ("disaggregated",),
    "kv_bytes_per_token": ("disaggregated",),
    "layers": ("disaggregated",),
    "kv_overlap": ("disaggregated",),
    "mixed_pool": ("disaggregated",),
    # The disaggregated cluster routes first come first served to the shortest queue.
    "request_policy": ("competition", "fusion"),
    "predictor": ("competition", "fusion"),
    "clairvoyant": ("competition", "fusion"),
    # A fused engine never pauses decoding: it has no iteration policy.
    "iteration_policy": ("competition",),
}


def _flag_name(dest: str, value: Any) -> str:
    """The flag that set ``dest`` to ``value``: ``--no-X`` for a boolean flag turned off."""
    flag = "--" + dest.replace("_", "-")
    return "--no-" + flag[2:] if value is False else flag


def _refuse_flags(args: argparse.Namespace, dests: Sequence[str], applies: str, chosen: str) -> None:
    """Refuse the first of ``dests`` given on the command line (not None): it applies to
    ``applies`` only, and this run is ``chosen``, where it would be ignored."""
    for dest in dests:
        value = getattr(args, dest)
        if value is not None:
            raise ValueError(
                f"{_flag_name(dest, value)} applies to {applies} only; this run is {chosen}, "
                "where it would be ignored"
            )


def _check_simulate_mode_flags(args: argparse.Namespace, mode: str) -> None:
    """Refuse a flag given on the command line that ``mode`` does not use."""
    for modes in dict.fromkeys(_SIMULATE_MODE_FLAGS.values()):
        if mode not in modes:
            dests = [dest for dest, used in _SIMULATE_MODE_FLAGS.items() if used == modes]
            _refuse_flags(args, dests, f"--mode {' or '.join(modes)}", f"--mode {mode}")


# simulate's output files: RunConfig field, flag, and an example name for the messages.
_SIMULATE_OUTPUTS = (
    ("trace", "--trace", "trace.json"),
    ("requests_csv", "--requests-csv", "requests.csv"),
    ("stages_csv", "--stages-csv", "stages.csv"),
)


def _simulate_config(args: argparse.Namespace) -> tuple[Any, set[str]]:
    """The run simulate's arguments ask for: the --config file's values (or the defaults),
    overridden by every flag given; and the fields the file set that no flag overrode.

    A --request-policy or --iteration-policy flag keeps the file's parameters of that
    policy only when it names the same policy.
    """
    from dataclasses import fields, replace

    from llmsched.cli.config import PolicyConfig, RunConfig, load_config

    config = RunConfig() if args.config is None else load_config(args.config)
    changes: dict[str, Any] = {}
    for name in _SIMULATE_FIELDS:
        value = getattr(args, name)
        if value is None:
            continue
        if name in ("request_policy", "iteration_policy"):
            current = getattr(config, name)
            value = PolicyConfig(value, current.params if value == current.name else {})
        elif name in ("arrivals", "plot", "trace", "requests_csv", "stages_csv"):
            value = str(value)  # specs and paths as the config holds them
        changes[name] = value
    from_file: set[str] = set()
    if args.config is not None:
        defaults = RunConfig()
        from_file = {
            f.name
            for f in fields(RunConfig)
            if f.name not in changes and getattr(config, f.name) != getattr(defaults, f.name)
        }
    return (replace(config, **changes) if changes else config), from_file


def _from_config_file(args: argparse.Namespace, from_file: set[str], field: str, key: str) -> Any:
    """A context that prefixes a ValueError with the config file and ``key`` when ``field``'s
    value came from the file (a flag's error already names the flag)."""
    from contextlib import contextmanager

    @contextmanager
    def wrap() -> Any:
        try:
            yield
        except ValueError as exc:
            if field not in from_file:
                raise
            raise ValueError(f"{args.config}: {key}: {exc}") from None

    return wrap()


def _check_simulate_outputs(args: argparse.Namespace, config: Any, from_file: set[str]) -> None:
    """Refuse simulate's output files (--plot, --trace, the CSVs) that cannot be written,
    before any work; one set in the config file is named by its file and key."""
    from llmsched.engines.export import check_output_path

    with _from_config_file(args, from_file, "plot", "output.plot"):
        _check_plot_file(None if config.plot is None else Path(config.plot))
    for field, flag, example in _SIMULATE_OUTPUTS:
        path = getattr(config, field)
        if path is None:
            pass
        elif field in from_file:
            try:
                check_output_path(path, f"output.{field}", example)
            except ValueError as exc:
                raise ValueError(f"{args.config}: {exc}") from None
        else:
            check_output_path(path, flag, example)


def _simulate_inputs(args: argparse.Namespace, config: Any, from_file: set[str]) -> tuple[Any, Any, Any, Any]:
    """simulate's cost model, workload options, prepared workload (with the predictor's
    predictions) and the preparation report; an error from a config file names its key."""
    from llmsched.cli.config import cost_model

    with _from_config_file(args, from_file, "cost", "cost"):
        cost = parse_cost(config.cost) if isinstance(config.cost, str) else cost_model(config.cost)
    options = config.prepare_options()
    with _from_config_file(args, from_file, "workload", "workload.spec"):
        workload = parse_workload(config.workload, config.seed, config.requests)
    workload, preparation = options.apply(workload)
    workload = _with_predictor(workload, config.predictor, config.seed)
    return cost, options, workload, preparation


def _run_head(workload: Any, options: Any, preparation: Any, config: Any) -> dict[str, Any]:
    """The first keys of simulate's --json, in every mode: the workload and how it was prepared."""
    return {
        "workload": workload.name,
        "workload_options": options.as_dict(),
        "prompts_clipped": preparation.prompts_clipped,
        "outputs_clipped": preparation.outputs_clipped,
        "predictions_clipped": preparation.predictions_clipped,
        "predictor": config.predictor,
    }


def _print_latencies(summary: dict[str, Any]) -> None:
    """simulate's text lines for throughput, TTFT, TBT and end-to-end latency, in every mode."""
    print(f"  throughput    {summary['tokens_per_s']:10.1f} output tokens/s")
    print(f"  TTFT p50/p99  {summary['ttft_p50_s']:.3f} / {summary['ttft_p99_s']:.3f} s")
    print(f"  TBT p50/p99   {summary['tbt_p50_s']:.3f} / {summary['tbt_p99_s']:.3f} s")
    print(f"  e2e p50/p99   {summary['e2e_p50_s']:.3f} / {summary['e2e_p99_s']:.3f} s")


def _cmd_simulate(args: argparse.Namespace) -> int:
    from llmsched.engines.competition.bounds import lower_bounds
    from llmsched.engines.competition.validate import validate
    from llmsched.engines.export import write_chrome_trace, write_requests_csv, write_stages_csv
    from llmsched.online.simulate import simulate

    config, from_file = _simulate_config(args)
    _check_simulate_mode_flags(args, config.mode)
    if config.mode != "competition":
        return _simulate_other_mode(args, config, from_file)
    _check_simulate_outputs(args, config, from_file)
    cost, options, workload, preparation = _simulate_inputs(args, config, from_file)
    request_name, iteration_name = config.request_policy.name, config.iteration_policy.name
    schedule = simulate(
        workload,
        cost,
        config.clients,
        config.make_request_policy(),
        config.make_iteration_policy(),
        clairvoyant=config.clairvoyant,
    )
    violations = validate(schedule)
    bounds = lower_bounds(workload, cost, config.clients)
    summary = schedule.summary(slo_ttft=config.slo_ttft, slo_tbt=config.slo_tbt)
    result = {
        **_run_head(workload, options, preparation, config),
        "request_policy": request_name,
        "iteration_policy": iteration_name,
        "clairvoyant": schedule.info["clairvoyant"],
        "oracle_lengths": schedule.info["oracle_lengths"],
        **summary,
        "lower_bound_s": bounds.strong,
        "lower_bounds": bounds.as_dict(),
        "gap_to_lb": schedule.makespan / bounds.strong - 1.0,
        "valid": not violations,
        "violations": [str(v) for v in violations],
        "config": config.as_dict(),
    }
    if config.plot:
        from llmsched.plot import save_gantt

        save_gantt(schedule, Path(config.plot), title=f"{workload.name}: {request_name} / {iteration_name}")
        result["plot"] = config.plot
    if config.trace:
        write_chrome_trace(schedule, config.trace)
        result["trace"] = config.trace
    if config.requests_csv:
        write_requests_csv(schedule, config.requests_csv, slo_ttft=config.slo_ttft, slo_tbt=config.slo_tbt)
        result["requests_csv"] = config.requests_csv
    if config.stages_csv:
        write_stages_csv(schedule, config.stages_csv)
        result["stages_csv"] = config.stages_csv
    if config.json:
        _print_json(result)
    else:
        print(f"{workload!r} on {config.clients} clients, {request_name} / {iteration_name}")
        prepared = _describe_preparation(preparation)
        if prepared:
            print(f"  workload      {prepared}")
        if config.predictor is not None:
            print(f"  predictor     {config.predictor} (the request policy plans with its predictions)")
        print(
            f"  makespan      {schedule.makespan:10.3f} s   (strong lower bound {bounds.strong:.3f} s, "
            f"gap {result['gap_to_lb']:+.2%})"
        )
        print(f"  utilization   {schedule.utilization:10.2%}")
        _print_latencies(summary)
        goodput = f"  goodput       {summary['goodput_rps']:10.3f} requests/s"
        if config.slo_ttft is not None or config.slo_tbt is not None:
            goodput += f" ({summary['slo_attainment']:.1%} meet the targets)"
        print(goodput)
        if config.clairvoyant:
            print("  clairvoyant   every request was revealed to the policies before the run started")
        print(f"  valid         {not violations}")
        for v in violations[:10]:
            print(f"    {v}")
        if config.plot:
            print(f"  Gantt chart written to {config.plot}")
        if config.trace:
            print(f"  Chrome trace written to {config.trace} (open it in ui.perfetto.dev)")
        if config.requests_csv:
            print(f"  per-request metrics written to {config.requests_csv}")
        if config.stages_csv:
            print(f"  per-stage table written to {config.stages_csv}")
    return 0 if not violations else 1


def _simulate_other_mode(args: argparse.Namespace, config: Any, from_file: set[str]) -> int:
    """``llmsched simulate --mode fusion|disaggregated``: the workload on a fused engine
    (chunked prefill) or a disaggregated cluster (Splitwise)."""
    from llmsched.engines.disaggregation.bounds import disaggregated_lower_bounds
    from llmsched.engines.disaggregation.cluster import DisaggregatedCluster
    from llmsched.engines.disaggregation.validate import validate_disaggregated
    from llmsched.engines.fusion.bounds import fused_lower_bounds
    from llmsched.engines.fusion.validate import validate_fused
    from llmsched.online.simulate import simulate_disaggregated, simulate_fusion

    unsupported = [flag for field, flag, _ in _SIMULATE_OUTPUTS if getattr(config, field)]
    if config.plot:
        unsupported.append("--plot")
    if unsupported:
        raise ValueError(f"{', '.join(unsupported)}: not available with --mode {config.mode} (use --json)")
    cost, options, workload, preparation = _simulate_inputs(args, config, from_file)
    request_name = config.request_policy.name
    schedule: Any
    violations: list[Any]
    if config.mode == "fusion":
        schedule = simulate_fusion(
            workload,
            cost,
            config.clients,
            config.make_request_policy(),
            config.token_budget,
            clairvoyant=config.clairvoyant,
        )
        violations = validate_fused(schedule)
        bound = fused_lower_bounds(workload, cost, config.clients, config.token_budget).strong
        described = f"fused (chunked prefill, {config.token_budget} tokens an iteration), {request_name}"
    else:
        request_name = "jsq"
        cluster = DisaggregatedCluster(
            config.prompt_machines,
            config.token_machines,
            cost,
            cost,
            config.clients,
            config.kv_bytes_per_token,
            config.kv_bandwidth,
            config.layers,
            config.kv_overlap,
            config.mixed_pool,
        )
        schedule = simulate_disaggregated(workload, cluster)
        violations = validate_disaggregated(schedule)
        bound = disaggregated_lower_bounds(workload, cluster).strong
        described = (
            f"disaggregated ({config.prompt_machines} prompt + {config.token_machines} token machines, "
            f"{config.kv_bandwidth:g} GB/s, overlap {'on' if config.kv_overlap else 'off'}"
            f"{', mixed pool' if config.mixed_pool else ''}), join-the-shortest-queue"
        )
    summary = schedule.summary(slo_ttft=config.slo_ttft, slo_tbt=config.slo_tbt)
    result = {
        **_run_head(workload, options, preparation, config),
        "request_policy": request_name,
        "iteration_policy": None,
        "clairvoyant": bool(schedule.info.get("clairvoyant", False)),
        "oracle_lengths": bool(schedule.info.get("oracle_lengths", False)),
        **summary,
        "lower_bound_s": bound,
        "gap_to_lb": schedule.makespan / bound - 1.0,
        "valid": not violations,
        "violations": [str(v) for v in violations],
        "config": config.as_dict(),
    }
    if config.json:
        _print_json(result)
    else:
        print(f"{workload!r} on {config.clients} clients, {described}")
        prepared = _describe_preparation(preparation)
        if prepared:
            print(f"  workload      {prepared}")
        print(
            f"  makespan      {schedule.makespan:10.3f} s   (lower bound {bound:.3f} s, "
            f"gap {result['gap_to_lb']:+.2%})"
        )
        if config.mode == "fusion":
            print(
                f"  utilization   {schedule.utilization:10.2%} "
                f"(the engine busy {schedule.busy:.2%} of the makespan)"
            )
        else:
            print(
                f"  busy          {summary['utilization_prompt']:.2%} prompt pool, "
                f"{summary['utilization_token']:.2%} token pool"
            )
            print(
                f"  KV transfer   {summary['transfer_mean_s'] * 1e3:.3f} ms mean, "
                f"{summary['transfer_p99_s'] * 1e3:.3f} ms p99"
            )
        _print_latencies(summary)
        if config.mode == "fusion":
            print(
                f"  iterations    {summary['iterations']} "
                f"({summary['mixed_iterations']} mixing decode "
                f"and prompt chunks; {summary['chunks']} chunks)"
            )
        else:
            print(
                f"  stages        {summary['prefill_stages']} prefill stages "
                f"({summary['lent_stages']} on lent "
                f"token machines), {summary['decode_iterations']} decode iterations"
            )
        print(f"  valid         {not violations}")
        for v in violations[:10]:
            print(f"    {v}")
    return 0 if not violations else 1


def _cmd_reproduce(args: argparse.Namespace) -> int:
    from llmsched.experiments.reproduce import format_mico, format_report, reproduce_gsm8k, reproduce_mico

    if args.experiment == "mico":
        if args.plot is not None:
            raise ValueError("--plot draws the GSM8K experiment's Gantt charts; reproduce mico has none")
        if args.timings:
            raise ValueError("--timings: reproduce mico runs no solver and reports no timings")
        report = reproduce_mico(
            engines=args.engines,
            batches=args.batches,
            queries=args.queries,
            seeds=args.seeds,
            seed=args.seed,
            progress=_progress(args),
        )
        if args.json:
            _print_json(report)
        else:
            print(format_mico(report))
        return 0 if not report["invalid"] else 1
    _check_plot_dir(args.plot)
    report = reproduce_gsm8k(
        seed=args.seed,
        plot_dir=args.plot,
        predictor=args.predictor,
        progress=_progress(args),
        timings=args.timings,
    )
    if args.json:
        _print_json(report)
    else:
        print(format_report(report))
        if args.plot:
            print(f"\nGantt charts written to {args.plot}/")
    return 0


def _cmd_study(args: argparse.Namespace) -> int:
    import time

    from llmsched.experiments.study import format_study, plot_study, run_study, study_summary

    _check_plot_file(args.plot)
    start = time.perf_counter()
    frame = run_study(
        args.cases,
        requests=args.requests,
        clients=args.clients,
        predictor=args.predictor,
        n_jobs=args.jobs,
        progress=_progress(args),
    )
    summary = study_summary(frame)
    wall = time.perf_counter() - start
    summary["predictor"] = args.predictor
    if args.plot:
        plot_study(frame, args.plot)
        summary["plot"] = str(args.plot)
    if args.json:
        _print_json(_with_timings({**summary, "rows": frame.to_dict(orient="records")}, args, wall_s=wall))
    else:
        print(f"{summary['cases']} cases, predictor {args.predictor}, {wall:.1f} s")
        print(format_study(frame, summary))
        if args.plot:
            print(f"figure written to {args.plot}")
    return 0


def _ints_arg(minimum: int, maximum: int) -> Callable[[str], list[int]]:
    """An argparse type: comma-separated integers in ``[minimum, maximum]`` (``a-b`` for a range)."""

    def parse(text: str) -> list[int]:
        values: list[int] = []
        for part in text.split(","):
            low, _, high = part.strip().partition("-")
            try:
                span = range(int(low), int(high or low) + 1)
            except ValueError:
                raise argparse.ArgumentTypeError(
                    f"must be comma-separated integers or ranges (as 2,3,6,9 or 2-10), got {part.strip()!r}"
                ) from None
            if not span or span[0] < minimum or span[-1] > maximum:
                raise argparse.ArgumentTypeError(
                    f"each value must lie in [{minimum}, {maximum}], got {part.strip()!r}"
                )
            values.extend(span)
        return values

    return parse


def _rates_arg(text: str) -> list[float]:
    """An argparse type: comma-separated arrival-rate multipliers, each a finite number > 0."""
    rates = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"must be comma-separated numbers > 0 (as 0.5,0.75,1), got {part.strip()!r} in {text!r}"
            ) from None
        if not 0 < value < float("inf"):  # NaN is never inside
            raise argparse.ArgumentTypeError(f"each rate must be a finite number > 0, got {part.strip()!r}")
        rates.append(value)
    return rates


def _dask_workers(jobs: int) -> int:
    """Local Dask workers for a joblib worker count (-1: every core)."""
    from joblib import cpu_count

    return jobs if jobs > 0 else max(1, cpu_count() + 1 + jobs)


def _scaled_cost(cost: Any, speed: float) -> Any:
    """``cost`` on a machine ``speed`` times as fast (every time divided by it)."""
    from dataclasses import fields, replace

    from llmsched.core.cost import ContextCostModel, LinearCostModel

    if speed == 1:
        return cost
    if not isinstance(cost, (LinearCostModel, ContextCostModel)):
        raise ValueError(
            "a kind's SPEED needs a linear or context cost model (--cost linear:... or context:...)"
        )
    changes: dict[str, Any] = {
        f.name: getattr(cost, f.name) / speed
        for f in fields(cost)
        if f.name not in ("prefill_capacity", "decode_by_batch")
    }
    table = getattr(cost, "decode_by_batch", None)
    if table is not None:
        changes["decode_by_batch"] = tuple(t / speed for t in table)
    return replace(cost, **changes)


def _kind_arg(text: str) -> tuple[str, int, float, float]:
    """An argparse type: ``NAME:CLIENTS[:PRICE[:SPEED]]``, an engine kind."""
    parts = text.split(":")
    try:
        if not 2 <= len(parts) <= 4 or not parts[0]:
            raise ValueError
        clients = int(parts[1])
        price = float(parts[2]) if len(parts) > 2 else 1.0
        speed = float(parts[3]) if len(parts) > 3 else 1.0
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be NAME:CLIENTS[:PRICE[:SPEED]] (as big:64:1.0 or slow:32:0.4:0.5), got {text!r}"
        ) from None
    if not 1 <= clients <= MAX_CLIENTS or not 0 <= price < float("inf") or not 0 < speed < float("inf"):
        raise argparse.ArgumentTypeError(
            f"CLIENTS must lie in [1, {MAX_CLIENTS}], PRICE be >= 0 and SPEED > 0, got {text!r}"
        )
    return parts[0], clients, price, speed


def _load_inputs(args: argparse.Namespace) -> tuple[Any, Any]:
    """The workload (prepared, with predictions when asked) and the cost model."""
    from llmsched.workloads import prepare

    cost = parse_cost(args.cost)
    workload = parse_workload(args.workload, args.seed, args.requests)
    arrivals = None if args.arrival_rate is None else f"poisson:{args.arrival_rate!r}"
    workload = prepare(
        workload,
        max_prompt=args.max_prompt,
        max_output=args.max_output,
        arrivals=arrivals,
        replace_arrivals=arrivals is not None,
        seed=args.seed,
    )
    return _with_predictor(workload, args.predictor, args.seed), cost


def _backoff(args: argparse.Namespace) -> Any:
    from llmsched.fleet.engine import Backoff

    if not args.backoff:
        if args.backoff_delay is not None or args.backoff_threshold is not None:
            raise ValueError("--backoff-delay and --backoff-threshold need --backoff")
        return None
    return Backoff(
        delay=0.02 if args.backoff_delay is None else args.backoff_delay,
        threshold=1 if args.backoff_threshold is None else args.backoff_threshold,
    )


# The fleet's routers that weigh requests (by --sizes).
_WEIGHING_ROUTERS = ("least-work", "qcmax", "mico")


def _resolve_engine_flags(args: argparse.Namespace, given: str) -> None:
    """Refuse the engine flags fleet and provision's engines do not use, then fill in the
    defaults of those not given: --token-budget only with --engine-mode fusion,
    --iteration-policy only with competition, --clients only without engines (kinds) that
    name their own clients (``given``: --engine or --kind)."""
    mode = args.engine_mode or "competition"
    if mode == "fusion":
        _refuse_flags(args, ["iteration_policy"], "--engine-mode competition", "--engine-mode fusion")
    else:
        _refuse_flags(args, ["token_budget"], "--engine-mode fusion", f"--engine-mode {mode}")
    if getattr(args, given.removeprefix("--")) and args.clients is not None:
        raise ValueError(
            f"--clients applies only without {given} (each {given} NAME:CLIENTS names its own clients); "
            "it would be ignored"
        )
    args.engine_mode = mode
    args.token_budget = 512 if args.token_budget is None else args.token_budget
    args.iteration_policy = args.iteration_policy or "prefill-first"
    args.request_policy = args.request_policy or "fcfs"
    args.clients = 200 if args.clients is None else args.clients


def _cmd_fleet(args: argparse.Namespace) -> int:
    from llmsched.fleet.engine import Engine
    from llmsched.fleet.simulate import simulate_fleet
    from llmsched.fleet.validate import validate_fleet

    _resolve_engine_flags(args, "--engine")
    args.router = args.router or "round-robin"
    if args.router not in _WEIGHING_ROUTERS:
        _refuse_flags(args, ["sizes"], "--router least-work, qcmax or mico", f"--router {args.router}")
    args.sizes = args.sizes or "predicted"
    workload, cost = _load_inputs(args)
    kinds = args.engine or [("engine", args.clients, 1.0, 1.0)]
    if args.engine and args.engines != 1:
        raise ValueError(
            "give --engines N (N alike) or --engine NAME:CLIENTS:PRICE:SPEED (repeated), not both"
        )
    mode = {"mode": args.engine_mode, "token_budget": args.token_budget}
    engines = [
        Engine(
            _scaled_cost(cost, speed),
            clients,
            price,
            args.request_policy,
            args.iteration_policy,
            name,
            **mode,
        )
        for name, clients, price, speed in kinds
        for _ in range(args.engines)
    ]
    if not args.engine:
        engines = [
            Engine(cost, args.clients, 1.0, args.request_policy, args.iteration_policy, **mode)
        ] * args.engines
    fleet = simulate_fleet(workload, engines, args.router, _backoff(args), seed=args.seed, sizes=args.sizes)
    violations = validate_fleet(fleet)
    summary = fleet.summary(slo_ttft=args.slo_ttft, slo_tbt=args.slo_tbt)
    frame = fleet.engine_frame()
    if args.json:
        _print_json(
            {
                "workload": workload.name,
                "summary": summary,
                "info": fleet.info,
                "engines": frame.to_dict(orient="records"),
                "valid": not violations,
                "violations": [str(v) for v in violations[:20]],
            }
        )
    else:
        print(
            f"{workload.name}: {len(workload)} requests on {len(engines)} engines, router {args.router}"
            f"{', backoff' if args.backoff else ''}"
        )
        for key in ("makespan_s", "tokens_per_s", "price_per_hour", "tokens_per_cost", "utilization"):
            print(f"  {key:<16}{summary[key]:.6g}")
        for key in ("ttft_p50_s", "ttft_p99_s", "tbt_p99_s", "latency_p99_s"):
            print(f"  {key:<16}{summary[key]:.4f}")
        print(f"  {'pulled':<16}{summary['pulled']}")
        print(f"  {'valid':<16}{not violations}")
        for v in violations[:10]:
            print(f"    {v}")
        print()
        print(frame.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0 if not violations else 1


# provision's flags of one --mode: the fleet's engines and routing, and the cluster's pools.
_PROVISION_FLEET_FLAGS = (
    "router",
    "backoff",
    "backoff_delay",
    "backoff_threshold",
    "request_policy",
    "iteration_policy",
    "engine_mode",
    "token_budget",
    "predictor",
)
_PROVISION_POOL_FLAGS = (
    "prompt_price",
    "token_price",
    "kv_bandwidth",
    "kv_bytes_per_token",
    "layers",
    "no_kv_overlap",
    "mixed_pool",
)


def _cmd_provision(args: argparse.Namespace) -> int:
    import contextlib

    from llmsched.cli.config import RunConfig
    from llmsched.fleet.provision import provision, provision_disaggregated

    mode = f"--mode {args.mode}"
    if args.mode == "disaggregated":
        _refuse_flags(args, _PROVISION_FLEET_FLAGS, "--mode fleet", mode)
        if args.kind:
            raise ValueError("--kind names fleet engines; --mode disaggregated sizes prompt and token pools")
        args.clients = 200 if args.clients is None else args.clients
    else:
        _refuse_flags(args, _PROVISION_POOL_FLAGS, "--mode disaggregated", mode)
        _resolve_engine_flags(args, "--kind")
        args.router = args.router or "jsq"
    defaults = RunConfig()
    for dest, default in (
        ("prompt_price", 1.0),
        ("token_price", 1.0),
        ("kv_bandwidth", defaults.kv_bandwidth),
        ("kv_bytes_per_token", defaults.kv_bytes_per_token),
        ("layers", defaults.layers),
    ):
        if getattr(args, dest) is None:
            setattr(args, dest, default)
    workload, cost = _load_inputs(args)
    with contextlib.ExitStack() as stack:
        _enter_backend(args, stack)
        common = {
            "slo_ttft": args.slo_ttft,
            "slo_tbt": args.slo_tbt,
            "method": args.method,
            "eps_latency": args.eps_latency,
            "n_jobs": args.jobs,
            "backend": args.backend,
            "progress": _progress(args),
        }
        if args.mode == "disaggregated":
            from llmsched.engines.disaggregation.cluster import DisaggregatedCluster

            tops = args.max if len(args.max) == 2 else args.max * 2
            if len(tops) != 2:
                raise ValueError("--mode disaggregated takes --max P or --max P,T")
            cluster = DisaggregatedCluster(
                1,
                1,
                cost,
                cost,
                args.clients,
                args.kv_bytes_per_token,
                args.kv_bandwidth,
                args.layers,
                not args.no_kv_overlap,
                bool(args.mixed_pool),
            )
            result = provision_disaggregated(
                workload,
                cluster,
                tops[0],
                tops[1],
                prompt_price=args.prompt_price,
                token_price=args.token_price,
                **common,
            )
        else:
            from llmsched.fleet.engine import Engine

            kinds = [
                Engine(
                    _scaled_cost(cost, speed),
                    clients,
                    price,
                    args.request_policy,
                    args.iteration_policy,
                    name,
                    mode=args.engine_mode,
                    token_budget=args.token_budget,
                )
                for name, clients, price, speed in (args.kind or [("engine", args.clients, 1.0, 1.0)])
            ]
            tops = args.max if len(args.max) != 1 else args.max * len(kinds)
            result = provision(
                workload, kinds, tops, router=args.router, backoff=_backoff(args), seed=args.seed, **common
            )
    frame = result.frame()
    if args.json:
        _print_json(
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
            f"{workload.name}: {len(workload)} requests; targets p99 TTFT {args.slo_ttft} s, "
            f"p99 TBT {args.slo_tbt} s"
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


def _enter_backend(args: argparse.Namespace, stack: Any) -> None:
    """Start or join what ``--backend`` names for joblib: a Dask cluster (the one at
    ``--dask-address``, else a local one of ``--jobs`` workers) or a Ray runtime (the one
    at ``--ray-address``, else a local one); loky needs nothing."""
    if getattr(args, "dask_address", None) is not None and args.backend != "dask":
        raise ValueError("--dask-address needs --backend dask")
    if getattr(args, "ray_address", None) is not None and args.backend != "ray":
        raise ValueError("--ray-address needs --backend ray")
    if args.backend == "dask":
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise ValueError(
                "--backend dask needs dask's distributed scheduler: pip install 'llmsched[dask]'"
            ) from None
        if args.dask_address is not None:
            stack.enter_context(Client(args.dask_address))
        else:
            cluster = LocalCluster(
                n_workers=_dask_workers(args.jobs),
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
            )
            stack.enter_context(cluster)
            stack.enter_context(Client(cluster))
    elif args.backend == "ray":
        try:
            import ray
            from ray.util.joblib import register_ray
        except ImportError:
            raise ValueError("--backend ray needs Ray: pip install 'llmsched[ray]'") from None
        address = getattr(args, "ray_address", None)
        if address is not None:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(num_cpus=_dask_workers(args.jobs), include_dashboard=False, log_to_driver=False)
        stack.callback(ray.shutdown)
        register_ray()


def _add_backend_flags(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--jobs",
        type=_jobs_arg,
        default=-1,
        help="joblib workers, or local Dask or Ray workers (default: -1, every core)",
    )
    parser.add_argument(
        "--backend",
        choices=["loky", "dask", "ray"],
        default="loky",
        help=f"where {what} run: local processes, a Dask cluster or a Ray runtime (default: loky)",
    )
    parser.add_argument(
        "--dask-address",
        metavar="ADDR",
        help="scheduler of a running Dask cluster (default: start a local one of --jobs workers)",
    )
    parser.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="a running Ray cluster to join (default: start a local one of --jobs workers)",
    )


def _cmd_sweep(args: argparse.Namespace) -> int:
    import contextlib
    import math
    import time

    from llmsched.experiments.sweep import parse_policy, plot_sweep, sweep

    _check_plot_file(args.plot)
    policies = [parse_policy(spec) for spec in (args.policy or ["fcfs/prefill-first"])]
    for request, _ in policies:
        _check_predictor(args.predictor, request)
    workload, cost = _load_inputs(args)
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        _enter_backend(args, stack)
        frame = sweep(
            workload,
            cost,
            args.clients,
            policies,
            args.rates,
            slo_ttft=args.slo_ttft,
            slo_tbt=args.slo_tbt,
            n_jobs=args.jobs,
            backend=args.backend,
            progress=_progress(args),
        )
    wall = time.perf_counter() - start
    if args.plot:
        plot_sweep(
            frame,
            metric=args.metric,
            title=f"{Path(workload.name).name} on {args.clients} clients: {args.metric}",
        ).savefig(args.plot)
    if args.json:
        rows = [
            {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}
            for row in frame.to_dict(orient="records")
        ]
        report: dict[str, Any] = {
            "workload": workload.name,
            "requests": len(workload),
            "clients": args.clients,
            "cost": args.cost,
            "arrival_rate": args.arrival_rate,
            "max_prompt": args.max_prompt,
            "max_output": args.max_output,
            "predictor": args.predictor,
            "policies": ["/".join(pair) for pair in policies],
            "rates": args.rates,
            "slo_ttft_s": args.slo_ttft,
            "slo_tbt_s": args.slo_tbt,
            "backend": args.backend,
            "rows": rows,
        }
        if args.plot:
            report["plot"] = str(args.plot)
        _print_json(_with_timings(report, args, wall_s=wall))
        return 0
    print(
        f"{workload!r} on {args.clients} clients, cost {args.cost}: {len(frame)} cases in {wall:.1f} s "
        f"({args.backend})"
    )
    table = frame.assign(policy=frame["request_policy"] + "/" + frame["iteration_policy"])
    columns = ["rate_scale", "policy", "offered_rps", "tokens_per_s", "ttft_p50_s", "ttft_p99_s"]
    columns += ["tbt_p50_s", "tbt_p99_s", "e2e_p99_s"]
    if args.slo_ttft is not None or args.slo_tbt is not None:
        columns += ["goodput_rps", "slo_attainment"]
    print(table[columns].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
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
        exh = optimize(sim, bound, method="exhaustive", schedules=schedules, progress=_progress(args), **grid)
        out["exhaustive"] = {
            "schedule": exh.schedule,
            "variables": exh.variables,
            "throughput": exh.throughput,
            "latency": None if exh.latency == float("inf") else exh.latency,
            "evaluations": exh.evaluations,
        }
    if args.json:
        runtime = out.pop("runtime_s")
        extra = {} if exh is None else {"exhaustive_s": exh.runtime}
        _print_json(_with_timings(out, args, search_s=runtime, **extra))
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
        threads=args.threads,
        dtype=args.dtype,
        progress=_progress(args),
        check_tokens=args.check_tokens,
        executions=args.executions,
        batch_table=args.batch_table,
    )
    if args.json:
        _print_json(report)
    else:
        _print_runtime_report(report)
    exact = report["dtype"] == "float32"  # in half precision tokens may change with the batch
    return 0 if report["valid"] and (report["tokens_match"] or not exact) else 1


def _print_runtime_report(report: dict[str, Any]) -> None:
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


class _Parser(argparse.ArgumentParser):
    """argparse reporting usage errors as every other error: ``llmsched: error: ...``, status 2."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"llmsched: error: {message}\n")


# The fleet's routers (llmsched.fleet.simulate.ROUTERS, named here so that the parser loads no solver).
ROUTER_NAMES = ("round-robin", "random", "jsq", "power-of-two", "least-work", "qcmax", "mico")
# Clients beyond this are refused: no workload the command builds has that many requests, and
# per-client state in the study's solvers grows with the count.
MAX_CLIENTS = 1_000_000
# The runtime gives every client a slot of KV cache and runs every request on a real model,
# so its sizes are bounded far lower (a million clients asked the tiny model for 21 GB).
RUNTIME_MAX_CLIENTS = 1024
RUNTIME_MAX_REQUESTS = 100_000


def _version() -> str:
    """The installed distribution's version; the package's own ``__version__`` when it is not
    installed (run from a source tree on ``PYTHONPATH``)."""
    import importlib.metadata

    try:
        return importlib.metadata.version("llmsched")
    except importlib.metadata.PackageNotFoundError:
        from llmsched import __version__

        return __version__


def _add_clip_flags(parser: argparse.ArgumentParser, reported: str = "") -> None:
    """--max-prompt and --max-output (``reported``: what the command says of the clipping)."""
    from llmsched.core.checks import MAX_TOKENS

    parser.add_argument(
        "--max-prompt",
        type=_int_arg(1, MAX_TOKENS),
        metavar="N",
        help=f"clip prompts to at most N tokens{reported} (default: no clipping)",
    )
    parser.add_argument(
        "--max-output",
        type=_int_arg(1, MAX_TOKENS),
        metavar="N",
        help="clip outputs and predicted outputs to at most N tokens (default: no clipping)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``llmsched`` command's argument parser, with every subcommand and its options."""
    from llmsched.cli.config import MODES, RunConfig
    from llmsched.core.checks import MAX_REQUESTS
    from llmsched.exegpt.xsim import MAX_BATCH, MAX_GPUS, MAX_ITERATIONS
    from llmsched.online.predictors import predictor_names
    from llmsched.online.registry import iteration_policy_names, request_policy_names
    from llmsched.workloads import ARRIVALS_HELP

    seed = _int_arg(0)
    requests = _int_arg(1, MAX_REQUESTS)
    clients = _int_arg(1, MAX_CLIENTS)
    parser = _Parser(prog="llmsched", description="Schedule LLM inference.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    # Flags default to None (not given), so that a --config file's value stands unless a flag
    # overrides it; the defaults are RunConfig's.
    defaults = RunConfig()
    sim = sub.add_parser(
        "simulate",
        help="simulate a workload under a pair of policies",
        description="Simulate a workload under a pair of policies. Every option can also come from a "
        "TOML file (--config; see llmsched.cli.config); a flag given on the command line overrides the "
        "file's value.",
    )
    sim.add_argument(
        "--config",
        type=Path,
        metavar="TOML",
        help="read the run from this TOML file (workload, cost, clients, policies with their parameters, "
        "predictor, SLO targets, outputs); flags given on the command line override it (default: none)",
    )
    sim.add_argument("--workload", help=f"{WORKLOAD_HELP} (default: {defaults.workload})")
    sim.add_argument(
        "--seed",
        type=seed,
        help="seed of generated workloads, of --arrivals and of --predictor's folds "
        f"(default: {defaults.seed})",
    )
    sim.add_argument(
        "--requests",
        type=requests,
        help=f"requests of generated ExeGPT workloads (default: {defaults.requests})",
    )
    sim.add_argument("--cost", help=f"{COST_HELP} (default: {defaults.cost})")
    sim.add_argument(
        "--clients", type=clients, help=f"number of clients (batch slots) (default: {defaults.clients})"
    )
    sim.add_argument(
        "--mode",
        choices=MODES,
        help="how the engine treats prefill and decode: competition (a prefill stage pauses decoding) "
        "fusion (chunked prefill: decoding and prompt chunks share iterations) or disaggregated (prompt "
        f"and token machines, a KV transfer between them) (default: {defaults.mode})",
    )
    sim.add_argument(
        "--token-budget",
        type=_int_arg(2, 1 << 31),
        metavar="N",
        help="fusion: decoding requests plus prompt-chunk tokens per iteration (Sarathi-Serve's chunk size) "
        f"(default: {defaults.token_budget})",
    )
    sim.add_argument(
        "--prompt-machines",
        type=_int_arg(1, 10_000),
        metavar="P",
        help=f"disaggregated: prompt machines (default: {defaults.prompt_machines})",
    )
    sim.add_argument(
        "--token-machines",
        type=_int_arg(1, 10_000),
        metavar="T",
        help=f"disaggregated: token machines, each of --clients clients (default: {defaults.token_machines})",
    )
    sim.add_argument(
        "--kv-bandwidth",
        type=_positive_float_arg,
        metavar="GBPS",
        help=f"disaggregated: GB/s of the link carrying keys and values (default: {defaults.kv_bandwidth:g})",
    )
    sim.add_argument(
        "--kv-bytes-per-token",
        type=_positive_float_arg,
        metavar="BYTES",
        help="disaggregated: keys and values per prompt token, 2 x layers x kv heads x head dim x bytes "
        f"(default: {defaults.kv_bytes_per_token:.0f}, LLaMA-65B in float16)",
    )
    sim.add_argument(
        "--layers",
        type=_int_arg(1, 100_000),
        help=f"disaggregated: the model's layers, for the per-layer overlap (default: {defaults.layers})",
    )
    sim.add_argument(
        "--kv-overlap",
        action=argparse.BooleanOptionalAction,
        help="disaggregated: send each layer's keys and values as soon as it is computed (default: on)",
    )
    sim.add_argument(
        "--mixed-pool",
        action=argparse.BooleanOptionalAction,
        help="disaggregated: lend idle token machines to the prompt pool under load (default: off)",
    )
    sim.add_argument(
        "--request-policy",
        metavar="NAME",
        help=f"one of {request_policy_names()}; parameters go in --config "
        f"(default: {defaults.request_policy.name})",
    )
    sim.add_argument(
        "--iteration-policy",
        metavar="NAME",
        help=f"one of {iteration_policy_names()}; parameters go in --config "
        f"(default: {defaults.iteration_policy.name})",
    )
    sim.add_argument(
        "--rate-scale",
        type=_positive_float_arg,
        metavar="K",
        help="replay the arrivals K times faster: every arrival time divided by K "
        f"(default: {defaults.rate_scale:g})",
    )
    _add_clip_flags(sim, "; the count clipped is reported")
    sim.add_argument(
        "--arrivals",
        type=_arrivals_arg,
        metavar="PROCESS",
        help=f"draw arrival times: {ARRIVALS_HELP}; the first request at 0 (default: the workload's own)",
    )
    sim.add_argument(
        "--replace-arrivals",
        action=argparse.BooleanOptionalAction,
        help="let --arrivals replace arrival times the workload already has (default: refused)",
    )
    sim.add_argument(
        "--predictor",
        metavar="NAME",
        help="plan with predicted output lengths: oracle (the true lengths) or a predictor cross-fitted "
        f"on the workload ({', '.join(name for name in predictor_names() if name != 'oracle')}); "
        "request policies that take sizes plan with them (default: none, a csv workload's own "
        "predicted_output if it has one)",
    )
    sim.add_argument(
        "--slo-ttft",
        type=_positive_float_arg,
        metavar="SECONDS",
        help="time-to-first-token target of the goodput figures, and the slo rule's target (default: none)",
    )
    sim.add_argument(
        "--slo-tbt",
        type=_positive_float_arg,
        metavar="SECONDS",
        help="time-between-tokens target of the goodput figures (default: none)",
    )
    sim.add_argument(
        "--clairvoyant",
        action=argparse.BooleanOptionalAction,
        help="reveal every request to the policies before the run starts, a study of planning ahead "
        "(default: off; policies learn of a request when it arrives)",
    )
    sim.add_argument(
        "--plot", type=_plot_file, help="write a Gantt chart to this file (PNG, SVG, PDF) (default: none)"
    )
    sim.add_argument(
        "--trace",
        type=Path,
        metavar="PATH",
        help="write a Chrome trace (JSON) to this file: an engine track and a track per client, for "
        "ui.perfetto.dev or chrome://tracing (default: none)",
    )
    sim.add_argument(
        "--requests-csv",
        type=Path,
        metavar="PATH",
        help="write one row per request (lengths, placement, TTFT, TBT, e2e, meets_slo) to this CSV "
        "(default: none)",
    )
    sim.add_argument(
        "--stages-csv",
        type=Path,
        metavar="PATH",
        help="write one row per stage (kind, start, end, tokens, iterations) to this CSV (default: none)",
    )
    sim.add_argument(
        "--json",
        action=argparse.BooleanOptionalAction,
        help="print one JSON object, with the resolved config as 'config' (default: text)",
    )
    sim.set_defaults(func=_cmd_simulate)

    rep = sub.add_parser("reproduce", help="reproduce a published experiment")
    rep.add_argument(
        "experiment",
        choices=["gsm8k", "mico"],
        help="gsm8k: Pang et al.'s GSM8K experiment (Table III, Figs. 6-9); mico: Mico's throughput "
        "ratios over clouds and batch sizes (Table 1)",
    )
    rep.add_argument(
        "--seed",
        type=seed,
        default=0,
        help="seed of the GSM8K output lengths, or of Mico's first query set (default: %(default)s)",
    )
    rep.add_argument(
        "--engines",
        type=_ints_arg(1, 1000),
        default=[2, 3, 6, 9],
        help="mico: numbers of engines (clouds), as 2,3,6,9 (default: 2,3,6,9)",
    )
    rep.add_argument(
        "--batches",
        type=_ints_arg(1, 1000),
        default=list(range(2, 11)),
        help="mico: batch sizes (each engine's clients), as 2-10 (default: 2-10)",
    )
    rep.add_argument(
        "--queries",
        type=_ints_arg(1, 1_000_000),
        default=[800],
        help="mico: numbers of queries, as 200,500,800,1000 (default: 800, Table 1's)",
    )
    rep.add_argument(
        "--seeds",
        type=_int_arg(1, 1000),
        default=3,
        help="mico: query sets each setting is averaged over (default: %(default)s)",
    )
    rep.add_argument("--json", action="store_true", help="print one JSON object (default: text)")
    rep.add_argument(
        "--predictor",
        default="mico",
        help="the realistic predictor run beside the oracle: mico, noisy, bucket or mean "
        "(default: %(default)s)",
    )
    rep.add_argument(
        "--plot", type=Path, metavar="DIR", help="write Gantt charts to DIR, made if missing (default: none)"
    )
    _add_progress_flag(rep)
    _add_timings_flag(rep)
    rep.set_defaults(func=_cmd_reproduce)

    study = sub.add_parser("study", help="the 100-case study (Figs. 10-11): strategies on random cases")
    study.add_argument(
        "--cases",
        type=_int_arg(1, 1_000_000),
        default=100,
        help="random cases, seeds 0.. (default: %(default)s)",
    )
    study.add_argument(
        "--requests", type=requests, default=1319, help="requests per case (default: %(default)s)"
    )
    study.add_argument(
        "--clients", type=clients, default=200, help="number of clients (default: %(default)s)"
    )
    study.add_argument(
        "--predictor", default="oracle", help="oracle, mico, noisy, bucket or mean (default: %(default)s)"
    )
    study.add_argument(
        "--jobs", type=_jobs_arg, default=-1, help="joblib workers (-1: every core) (default: %(default)s)"
    )
    study.add_argument(
        "--plot", type=_plot_file, help="write the per-case figure to this file (default: none)"
    )
    study.add_argument("--json", action="store_true", help="print one JSON object (default: text)")
    _add_progress_flag(study)
    _add_timings_flag(study)
    study.set_defaults(func=_cmd_study)

    _add_fleet_parsers(sub, seed, requests, clients)
    _add_sweep_parser(sub, seed, requests, clients)

    exe = sub.add_parser(
        "exegpt", help="ExeGPT: the best RRA/WAA configuration under a latency bound (XSimulator + B&B)"
    )
    exe.add_argument(
        "--model",
        default="opt-13b",
        help="t5-11b, opt-13b, gpt3-39b, gpt3-101b, gpt3-175b, gpt3-341b (default: %(default)s)",
    )
    exe.add_argument(
        "--task", default="S", help="S, T, G, C1 or C2 (ExeGPT's Table 3) (default: %(default)s)"
    )
    exe.add_argument(
        "--latency-bound",
        required=True,
        metavar="SECONDS",
        help="seconds for the 99th-percentile output, or inf (required)",
    )
    exe.add_argument("--gpu", help="a40 or a100 (default: the paper's for the model)")
    exe.add_argument(
        "--gpus", type=_int_arg(1, MAX_GPUS), help="GPU count (default: the paper's for the model)"
    )
    exe.add_argument(
        "--schedules",
        default="RRA,WAA-C,WAA-M",
        help="comma-separated subset of RRA,WAA-C,WAA-M (default: %(default)s)",
    )
    exe.add_argument(
        "--eps",
        type=_float_arg(0.0, 1.0, high_open=True),
        default=0.01,
        help="throughput and latency tolerance of the search (default: %(default)s)",
    )
    exe.add_argument(
        "--batch-max",
        type=_int_arg(1, MAX_BATCH),
        default=128,
        help="largest encoder batch B_E searched (default: %(default)s)",
    )
    exe.add_argument(
        "--iterations-max",
        type=_int_arg(1, MAX_ITERATIONS),
        help="largest N_D searched (default: the longest output, at most 128)",
    )
    exe.add_argument("--verify", action="store_true", help="also run the exhaustive search (default: off)")
    exe.add_argument("--json", action="store_true", help="print one JSON object (default: text)")
    _add_progress_flag(exe)
    _add_timings_flag(exe)
    exe.set_defaults(func=_cmd_exegpt)

    run = sub.add_parser("runtime", help="run schedules on a real torch decode loop (needs torch)")
    run_sub = run.add_subparsers(dest="action")
    run.set_defaults(func=_cmd_runtime, runtime_parser=run, action=None)
    val = run_sub.add_parser(
        "validate",
        help="profile, fit cost models (context-aware and linear), execute simulated schedules, "
        "compare with the clock",
    )
    val.add_argument(
        "--model",
        default="tiny",
        help="tiny, small, 125m or 1b (seeded random weights) (default: %(default)s)",
    )
    val.add_argument("--device", default="cpu", help="cpu or cuda (default: %(default)s)")
    val.add_argument(
        "--requests",
        type=_int_arg(1, RUNTIME_MAX_REQUESTS),
        default=None,
        help="requests of the GSM8K-like workload (default: the model's, from "
        "llmsched.runtime.check.DEFAULTS)",
    )
    val.add_argument(
        "--clients",
        type=_int_arg(2, RUNTIME_MAX_CLIENTS),
        default=None,
        help="number of clients, each a KV-cache slot (default: the model's)",
    )
    val.add_argument(
        "--scale",
        type=_float_arg(0.0, 1.0, low_open=True),
        default=None,
        help="GSM8K lengths times this (default: the model's)",
    )
    val.add_argument(
        "--strategy",
        default="both",
        help="baseline, hybrid or both, executed after one profile (default: %(default)s)",
    )
    val.add_argument(
        "--check-tokens",
        type=_int_arg(1, RUNTIME_MAX_REQUESTS),
        default=None,
        help="check the tokens of the first N requests against a run of their own (default: all)",
    )
    val.add_argument(
        "--executions",
        type=_int_arg(1, 1000),
        default=None,
        help="execute each schedule N times, strategies taking turns; the median counts "
        "(default: the model's)",
    )
    val.add_argument(
        "--batch-table",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="profile decode at every batch size and fit the context-aware model's decode time "
        "as a table over batch sizes (held-out decode points then differ in context only); "
        "--no-batch-table fits a line in the batch and holds out batch sizes too (default: on)",
    )
    val.add_argument(
        "--threads",
        type=_int_arg(1, 1024),
        default=1,
        help="CPU threads of torch, for CPU runs (default: %(default)s, for steady timings)",
    )
    val.add_argument(
        "--seed",
        type=seed,
        default=0,
        help="seed of the workload, prompts and weights (default: %(default)s)",
    )
    val.add_argument(
        "--dtype",
        default="float32",
        help="float32 (exact token check), float16 or bfloat16 (default: %(default)s)",
    )
    val.add_argument("--json", action="store_true", help="print one JSON object (default: text)")
    _add_progress_flag(val)
    val.set_defaults(func=_cmd_runtime)
    return parser


def _add_load_flags(
    parser: argparse.ArgumentParser,
    seed: Callable[[str], int],
    requests: Callable[[str], int],
    predictions: str,
) -> None:
    """The flags of a command that runs a load: workload, seed, requests, arrival rate, clipping,
    predictor and cost model (read back by :func:`_load_inputs`)."""
    parser.add_argument("--workload", default="gsm8k", help=f"{WORKLOAD_HELP} (default: gsm8k)")
    parser.add_argument(
        "--seed", type=seed, default=0, help="seed of generated workloads, arrivals and draws (default: 0)"
    )
    parser.add_argument(
        "--requests", type=requests, default=1000, help="requests of generated workloads (default: 1000)"
    )
    parser.add_argument(
        "--arrival-rate",
        type=_float_arg(0.0, float("inf"), low_open=True, high_open=True),
        metavar="R",
        help="replace the workload's arrivals by Poisson arrivals at R requests/s "
        "(default: the workload's own; one without any, such as gsm8k, needs this for a stream)",
    )
    _add_clip_flags(parser)
    parser.add_argument(
        "--predictor", metavar="NAME", help=f"attach cross-fitted predictions {predictions} (default: none)"
    )
    parser.add_argument("--cost", default="paper", help=f"{COST_HELP} (default: paper)")


def _add_fleet_parsers(
    sub: Any, seed: Callable[[str], int], requests: Callable[[str], int], clients: Callable[[str], int]
) -> None:
    """The ``fleet`` and ``provision`` commands."""
    from llmsched.cli.config import RunConfig
    from llmsched.core.checks import MAX_REQUESTS

    defaults = RunConfig()

    def fleet_inputs(parser: argparse.ArgumentParser) -> None:
        _add_load_flags(parser, seed, requests, "(least-work, qcmax and mico route by them)")
        # Defaults of None (filled in by the command), so that a flag the run's mode ignores
        # can be refused when it is given.
        parser.add_argument(
            "--clients",
            type=clients,
            help="clients of each engine (default: 200)"
            + ("" if parser.prog.endswith("fleet") else "; --mode disaggregated: of each token machine"),
        )
        parser.add_argument("--request-policy", help="each engine's request policy (default: fcfs)")
        parser.add_argument(
            "--iteration-policy",
            help="each engine's iteration policy, --engine-mode competition (default: prefill-first)",
        )
        parser.add_argument(
            "--router",
            choices=ROUTER_NAMES,
            help="how arrivals are sent to engines (default: "
            f"{'round-robin' if parser.prog.endswith('fleet') else 'jsq'})",
        )
        parser.add_argument(
            "--engine-mode",
            choices=["competition", "fusion"],
            help="every engine's mode: competition, or fusion (chunked prefill) (default: competition)",
        )
        parser.add_argument(
            "--token-budget",
            type=_int_arg(2, 1_000_000),
            help="--engine-mode fusion: tokens per iteration (default: 512)",
        )
        parser.add_argument(
            "--backoff",
            action="store_true",
            default=None,
            help="let an engine that runs dry pull waiting requests (default: off)",
        )
        parser.add_argument(
            "--backoff-delay",
            type=_float_arg(0.0, float("inf")),
            metavar="S",
            help="seconds a pulled request travels (default: 0.02)",
        )
        parser.add_argument(
            "--backoff-threshold",
            type=_int_arg(1, MAX_REQUESTS),
            metavar="K",
            help="pull only from an engine with at least K waiting (default: 1)",
        )

    positive_target = _float_arg(0.0, float("inf"), low_open=True)
    fl = sub.add_parser(
        "fleet",
        help="several engines behind a router (Mico's multi-cloud; JSQ, power of two, least work, backoff)",
        description="Simulate the workload on a fleet of engines (competition or fusion) behind a "
        "router; print the fleet's serving figures and one row per engine.",
    )
    fleet_inputs(fl)
    fl.add_argument("--engines", type=_int_arg(1, 100_000), default=1, help="engines alike (default: 1)")
    fl.add_argument(
        "--engine",
        action="append",
        type=_kind_arg,
        metavar="NAME:CLIENTS[:PRICE[:SPEED]]",
        help="an engine of its own clients, price an hour and speed (times the cost model's); repeat "
        "for several, each --engines times (default: --engines engines of --clients)",
    )
    fl.add_argument(
        "--sizes",
        choices=["predicted", "oracle"],
        help="what least-work, qcmax and mico weigh requests by (default: predicted)",
    )
    fl.add_argument(
        "--slo-ttft", type=positive_target, metavar="S", help="TTFT target for goodput (default: none)"
    )
    fl.add_argument("--slo-tbt", type=positive_target, metavar="S", help="mean TBT target (default: none)")
    fl.add_argument("--json", action="store_true", help="print one JSON object (default: text)")
    fl.set_defaults(func=_cmd_fleet)

    pv = sub.add_parser(
        "provision",
        help="the engines a load needs: most tokens per cost within p99 TTFT and TBT targets",
        description="Search the number of engines of each kind (or of prompt and token machines) that "
        "serves the workload at the most output tokens per unit of cost with p99 TTFT and p99 time "
        "between tokens within the targets: ExeGPT's monotone branch-and-bound, or every configuration.",
    )
    fleet_inputs(pv)
    pv.add_argument(
        "--mode",
        choices=["fleet", "disaggregated"],
        default="fleet",
        help="fleet: engines of each --kind; disaggregated: prompt and token machines (default: fleet)",
    )
    pv.add_argument(
        "--kind",
        action="append",
        type=_kind_arg,
        metavar="NAME:CLIENTS[:PRICE[:SPEED]]",
        help="an engine kind; repeat for several (default: one kind of --clients at price 1)",
    )
    pv.add_argument(
        "--max",
        type=_ints_arg(1, 100_000),
        default=[8],
        metavar="N[,N...]",
        help="most engines of each kind (one for all, or one per kind; prompt,token machines) (default: 8)",
    )
    pv.add_argument(
        "--slo-ttft", type=positive_target, metavar="S", help="p99 TTFT target in seconds (default: none)"
    )
    pv.add_argument(
        "--slo-tbt",
        type=positive_target,
        metavar="S",
        help="p99 time-between-tokens target in seconds (default: none)",
    )
    pv.add_argument(
        "--method",
        choices=["bnb", "exhaustive"],
        default="bnb",
        help="bnb: ExeGPT's monotone branch-and-bound; exhaustive: every configuration (default: bnb)",
    )
    pv.add_argument(
        "--eps-latency",
        type=_float_arg(0.0, 1.0, high_open=True),
        default=0.1,
        help="the branch-and-bound's latency tolerance for non-monotone steps (default: %(default)s)",
    )
    # The pools' flags default to None (filled in by the command), so that they can be refused
    # in --mode fleet, which ignores them.
    pv.add_argument(
        "--prompt-price",
        type=_float_arg(0.0, float("inf"), high_open=True),
        help="disaggregated: a prompt machine an hour (default: 1)",
    )
    pv.add_argument(
        "--token-price",
        type=_float_arg(0.0, float("inf"), high_open=True),
        help="disaggregated: a token machine an hour (default: 1)",
    )
    pv.add_argument(
        "--kv-bandwidth",
        type=_positive_float_arg,
        help=f"disaggregated: GB/s of the KV link (default: {defaults.kv_bandwidth:g})",
    )
    pv.add_argument(
        "--kv-bytes-per-token",
        type=_positive_float_arg,
        help=f"disaggregated: KV bytes per prompt token (default: {defaults.kv_bytes_per_token:.0f})",
    )
    pv.add_argument(
        "--layers",
        type=_int_arg(1, 100_000),
        help=f"disaggregated: layers (default: {defaults.layers})",
    )
    pv.add_argument(
        "--no-kv-overlap",
        action="store_true",
        default=None,
        help="disaggregated: send keys and values after the stage (default: overlapped)",
    )
    pv.add_argument(
        "--mixed-pool",
        action="store_true",
        default=None,
        help="disaggregated: let the pools lend machines (default: off)",
    )
    _add_backend_flags(pv, "exhaustive evaluations")
    pv.add_argument(
        "--json", action="store_true", help="print one JSON object with every evaluation (default: text)"
    )
    _add_progress_flag(pv)
    pv.set_defaults(func=_cmd_provision)


def _add_sweep_parser(
    sub: Any, seed: Callable[[str], int], requests: Callable[[str], int], clients: Callable[[str], int]
) -> None:
    from llmsched.experiments.sweep import PLOT_METRICS

    sw = sub.add_parser(
        "sweep",
        help="latency against load: policies at several arrival rates (TTFT, TBT, e2e, goodput)",
        description="Run each policy pair at each arrival-rate multiplier (arrivals divided by it) "
        "and report serving metrics per (rate, policy).",
    )
    _add_load_flags(sw, seed, requests, "(oracle, or a predictor name), as simulate does")
    sw.add_argument("--clients", type=clients, default=200, help="number of clients (default: 200)")
    sw.add_argument(
        "--policy",
        action="append",
        metavar="REQUEST/ITERATION",
        help="a policy pair such as hybrid/lagrangian; repeat for several (default: fcfs/prefill-first)",
    )
    sw.add_argument(
        "--rates",
        type=_rates_arg,
        default=[0.5, 0.75, 1.0],
        metavar="K1,K2,...",
        help="arrival-rate multipliers; 1 is the trace's own rate (default: 0.5,0.75,1)",
    )
    positive_seconds = _float_arg(0.0, float("inf"), low_open=True)
    sw.add_argument(
        "--slo-ttft",
        type=positive_seconds,
        metavar="S",
        help="TTFT target in seconds for goodput (default: none)",
    )
    sw.add_argument(
        "--slo-tbt",
        type=positive_seconds,
        metavar="S",
        help="target for each request's mean time between tokens, seconds (default: none)",
    )
    _add_backend_flags(sw, "cases")
    sw.add_argument(
        "--metric",
        choices=PLOT_METRICS,
        default="ttft_p99_s",
        metavar="METRIC",
        help="what --plot draws against the load: a summary column such as ttft_p99_s, tbt_p99_s, "
        "e2e_p50_s, goodput_rps (default: ttft_p99_s)",
    )
    sw.add_argument(
        "--plot",
        type=_plot_file,
        metavar="FILE",
        help="write the latency-load figure to this file (default: none)",
    )
    sw.add_argument("--json", action="store_true", help="print one JSON object with rows (default: off)")
    _add_progress_flag(sw)
    _add_timings_flag(sw)
    sw.set_defaults(func=_cmd_sweep)


# The status of a command whose reader went away (``llmsched ... | head -1``): what a shell
# reports for a program that SIGPIPE ended, 128 + 13.
EXIT_BROKEN_PIPE = 141
# The status of a command stopped by Ctrl-C: what a shell reports for SIGINT, 128 + 2.
EXIT_INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; return its exit status.

    0 on success; 1 when the result says so (an invalid schedule, no feasible configuration);
    2 for bad arguments, or an input or output that cannot be read or written, reported as one
    ``llmsched: error: ...`` line on stderr; 141 (as for SIGPIPE), quietly, when the reader of
    the output went away before it was all written (``llmsched ... | head -1``); 130 after
    ``llmsched: interrupted`` when Ctrl-C stops it.
    """
    try:
        return _run(argv)
    except BrokenPipeError:
        _discard_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        print("llmsched: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _run(argv: Sequence[str] | None) -> int:
    try:
        args = build_parser().parse_args(argv)
        status = int(args.func(args))
    except SystemExit as exc:  # --help (0), or a usage error argparse has reported (2)
        status = exc.code if isinstance(exc.code, int) else 2
    except BrokenPipeError:
        raise
    except (ValueError, TypeError, OSError, ImportError) as exc:  # ImportError: a solver extra missing
        if isinstance(exc, OSError) and exc.filename is None and not _flush_stdout():
            return _fail(f"cannot write the output: {exc.strerror or exc}")  # stdout refused it
        return _fail(_describe(exc))
    # Flushed here, so that an output that cannot be written (a reader gone away, a full disk)
    # is met in main rather than at exit.
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        return _fail(f"cannot write the output: {exc.strerror or exc}")
    return status


def _describe(exc: Exception) -> str:
    """The error line's text: an OSError as ``PATH: reason``, others as their message."""
    if isinstance(exc, OSError) and exc.strerror:
        if exc.filename is None:
            return exc.strerror
        target = f" -> {exc.filename2}" if exc.filename2 is not None else ""
        return f"{exc.filename}{target}: {exc.strerror}"
    return str(exc)


def _fail(message: str) -> int:
    """Report ``message`` as ``llmsched: error: ...`` on stderr; status 2."""
    print(f"llmsched: error: {message}", file=sys.stderr)
    _flush_stdout()  # what stdout still holds, now, so that it cannot fail again at exit
    return 2


def _flush_stdout() -> bool:
    """Flush stdout; if it cannot be written, discard what it holds and return False."""
    try:
        sys.stdout.flush()
    except OSError:
        _discard_stdout()
        return False
    return True


def _discard_stdout() -> None:
    """Point stdout at the null device, so that what its buffer still holds is not written (and
    refused again, with a traceback) when the interpreter exits."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # a stdout without a file descriptor
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
