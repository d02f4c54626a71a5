"""``llmsched runtime validate``: profile the engine, fit cost models, run simulated
schedules on the engine, and compare the predictions with the clock.

Two cost models are fitted to the same profile: the context-aware model
(:class:`~llmsched.ContextCostModel`: a decode iteration's time grows with the context it
reads, a prefill stage's with the squares of its prompts) and the linear model
(:class:`~llmsched.LinearCostModel`, counts alone). Both are scored on held-out profile
points, on the executed schedule's stages, and by the makespan they predict.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from typing import Any

import numpy as np

from llmsched.core.checks import flag, positive_int
from llmsched.core.cost import CostModel
from llmsched.core.progress import progress_bar
from llmsched.core.schedule import PREFILL
from llmsched.core.workload import Workload
from llmsched.engines.competition.schedule import Schedule
from llmsched.engines.competition.validate import validate
from llmsched.online.simulate import simulate
from llmsched.runtime.engine import Engine
from llmsched.runtime.executor import Execution, execute_schedule, make_prompts, run_alone
from llmsched.runtime.model import PRESETS, LlamaModel
from llmsched.runtime.profiling import (
    ProfilePlan,
    fit_cost,
    plan_profile,
    profile,
    schedule_stage_times,
    stage_errors,
)

__all__ = [
    "DEFAULTS",
    "STRATEGIES",
    "profile_and_fit",
    "same_decisions",
    "scaled_gsm8k",
    "time_decodes",
    "validate_runtime",
]

# (request policy, iteration policy) of the strategies the runtime can execute; the hybrid
# plans its offline queues with the true output lengths (the oracle).
STRATEGIES = {
    "baseline": ("fcfs", "prefill-first"),
    "hybrid": ("hybrid-oracle", "lagrangian"),
}

#: Defaults of ``llmsched runtime validate`` for each model: the GSM8K-shaped workload
#: (``requests`` on ``clients``, lengths times ``scale``), the profile (``rounds`` visits of
#: every point, ``repeats`` stages timed per visit, ``count`` values per fitted range), how
#: many times each schedule is executed (``executions``, the median counts) and how many
#: requests are checked against a run of their own (``check_tokens``, None for all).
#:
#: ``small`` runs GSM8K's lengths in full (contexts up to 676 tokens; each schedule about 7 s
#: on one CPU thread, executed five times); ``125m`` half of them (each schedule about a
#: minute on one CPU thread, a shorter profile, three executions, a token check on four
#: requests); ``tiny`` is sized for the tests. On a shared machine a schedule's time moves
#: with the machine's speed by more than the model's error, so the median of several
#: executions counts.
DEFAULTS: dict[str, dict[str, Any]] = {
    "tiny": {"requests": 24, "clients": 8, "scale": 0.125, "rounds": 6, "repeats": 2, "count": 5,
             "executions": 1, "check_tokens": None},
    "small": {"requests": 32, "clients": 16, "scale": 1.0, "rounds": 6, "repeats": 2, "count": 5,
              "executions": 5, "check_tokens": None},
    "125m": {"requests": 32, "clients": 8, "scale": 0.5, "rounds": 3, "repeats": 1, "count": 4,
             "executions": 3, "check_tokens": 4},
    "1b": {"requests": 64, "clients": 16, "scale": 0.5, "rounds": 3, "repeats": 1, "count": 4,
           "executions": 1, "check_tokens": 4},
}  # fmt: skip

_MODELS = ("context", "linear")


def scaled_gsm8k(requests: int, scale: float, seed: int = 0) -> Workload:
    """GSM8K-shaped requests with prompt and output lengths multiplied by ``scale`` (at
    least one token each), so a small model's context holds them."""
    from llmsched.workloads import gsm8k_like

    if not 0 < scale <= 1:
        raise ValueError(f"scale must be in (0, 1], got {scale!r}")
    base = gsm8k_like(requests, seed)
    prompt = np.maximum(np.rint(base.prompt_tokens * scale), 1).astype(np.int64)
    output = np.maximum(np.rint(base.output_tokens * scale), 1).astype(np.int64)
    return Workload(prompt, output, name=f"gsm8k-like-{requests}x{scale:g}")


def workload_plan(
    workload: Workload, clients: int, count: int = 5, seed: int = 0, every_batch: bool = False
) -> tuple[int, ProfilePlan]:
    """The prefill capacity for ``workload`` on ``clients`` clients (a median prompt per
    client, and at least the longest prompt) and profile points spanning its stages: prompt
    lengths from its shortest to its longest prompt, contexts from its shortest prompt to
    its longest request, batches up to ``clients`` (every one with ``every_batch``)."""
    prompt, output = workload.prompt_tokens, workload.output_tokens
    capacity = max(int(np.median(prompt)) * clients, int(prompt.max()))
    longest = int(np.max(prompt + output)) - 1  # the context of a request's last iteration
    plan = plan_profile(
        clients,
        capacity,
        (int(prompt.min()), int(prompt.max())),
        (int(prompt.min()), max(int(prompt.min()), longest)),
        count=count,
        seed=seed,
        every_batch=every_batch,
    )
    return capacity, plan


def profile_and_fit(
    engine: Engine,
    plan: ProfilePlan,
    capacity: int,
    repeats: int = 2,
    rounds: int = 6,
    seed: int = 0,
    batch_table: bool = False,
    reference: Any = None,
) -> dict[str, Any]:
    """Profile the plan's points, fitted and held out together in one random order (a slow
    spell of the machine then falls on both alike), and fit both cost models on the fitted
    points.

    Returns ``rows`` (every measurement), ``fit_rows``, ``held_rows``, ``context`` and
    ``linear`` (the two fitted models) and ``fit_error`` (each model's
    :func:`~llmsched.runtime.profiling.stage_errors` on the held-out points, each the mean
    of its repeats as in the fit).

    With ``batch_table`` (for a plan that profiles every batch size: ``every_batch``) the
    context-aware model has a batch table (``decode_by_batch``); ``fit_error`` then also
    scores the context-aware model with a line in the batch instead, fitted on the same
    rows, as ``context_line``. ``reference`` is :func:`~llmsched.runtime.profiling.profile`'s
    (the machine's drift taken out of the rows).
    """
    rows = profile(
        engine,
        plan.fit_prefill + plan.held_prefill,
        plan.fit_decode + plan.held_decode,
        repeats=repeats,
        rounds=rounds,
        seed=seed,
        reference=reference,
    )
    fitted = np.where(rows["kind"] == "prefill", len(plan.fit_prefill), len(plan.fit_decode))
    is_fit = rows["point"].to_numpy() < fitted
    fit_rows, held_rows = rows[is_fit].reset_index(drop=True), rows[~is_fit].reset_index(drop=True)
    table = flag("batch_table", batch_table)
    models: dict[str, CostModel] = {
        "context": fit_cost(fit_rows, capacity, batch_table=table),
        "linear": fit_cost(fit_rows, capacity, context=False),
    }
    scored = dict(models)
    if table:
        scored["context_line"] = fit_cost(fit_rows, capacity)
    nan = {"mape": float("nan"), "prefill_mape": float("nan"), "decode_mape": float("nan")}
    errors = {
        name: stage_errors(model, held_rows, points="mean") if len(held_rows) else dict(nan)
        for name, model in scored.items()
    }
    return {"rows": rows, "fit_rows": fit_rows, "held_rows": held_rows, **models, "fit_error": errors}


def same_decisions(a: Schedule, b: Schedule) -> bool:
    """Whether two schedules of one workload make the same decisions: the same stages in
    order, the same requests on the same clients, decode stages of the same lengths."""
    return all(
        np.array_equal(getattr(a, name), getattr(b, name))
        for name in ("stage_kind", "stage_iterations", "request_client", "request_prefill_stage")
    )


def _cost_fields(cost: CostModel) -> dict[str, float]:
    # Both fitted models are dataclasses of plain numbers.
    return dict(dataclasses.asdict(cost))  # type: ignore[call-overload]


class _CpuLoad:
    """Busy share of the CPUs this process may not run on, over a span (Linux; None
    elsewhere or when the process may run on every CPU): work there can slow this
    process's memory and caches, and the figures with it."""

    def __init__(self) -> None:
        self.cpus: set[int] | None = None
        try:
            mine = os.sched_getaffinity(0)
            others = set(range(os.cpu_count() or 0)) - mine
            self.cpus = others or None
        except (AttributeError, OSError):
            self.cpus = None
        self.start = self._read()

    def _read(self) -> tuple[int, int] | None:
        if not self.cpus:
            return None
        busy = total = 0
        try:
            with open("/proc/stat") as stat:
                for line in stat:
                    name, *fields = line.split()
                    if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in self.cpus:
                        ticks = [int(f) for f in fields]
                        busy += sum(ticks) - ticks[3] - ticks[4]  # all but idle and iowait
                        total += sum(ticks)
        except (OSError, ValueError, IndexError):
            return None
        return busy, total

    def busy(self) -> float | None:
        end = self._read()
        if self.start is None or end is None or end[1] == self.start[1]:
            return None
        return (end[0] - self.start[0]) / (end[1] - self.start[1])


def check_setup(model: str, device: str, dtype: str) -> Any:
    """The torch dtype named ``dtype``, after checking ``model`` (a preset), ``device`` (``cpu``
    or ``cuda``, which must be there) and ``dtype``; ValueError otherwise."""
    import torch

    dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    if model not in PRESETS:
        raise ValueError(f"unknown model {model!r}; choose one of {sorted(PRESETS)}")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if dtype not in dtypes:
        raise ValueError(f"dtype must be one of {sorted(dtypes)}, got {dtype!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was asked for, but torch sees no CUDA GPU")
    return dtypes[dtype]


def sizes(model: str, given: dict[str, Any]) -> dict[str, Any]:
    """The model's :data:`DEFAULTS` with the ``given`` values that are not None, its clients
    checked (at least two: the decode fits need two batch sizes)."""
    size = {**DEFAULTS.get(model, DEFAULTS["1b"]), **{k: v for k, v in given.items() if v is not None}}
    clients = size["clients"]
    if isinstance(clients, bool) or not isinstance(clients, int) or clients < 2:
        raise ValueError(
            f"clients must be an integer >= 2 (decode fits need two batch sizes), got {clients!r}"
        )
    return size


def run_facts(model: str, device: str, dtype: str, requests: int, clients: int) -> dict[str, Any]:
    """The head of a runtime report: the model and its size, where and in what precision it ran
    (with torch's CPU threads), and the workload's requests and clients."""
    import torch

    return {
        "model": model,
        "parameters": PRESETS[model].parameters_count(),
        "device": device,
        "dtype": dtype,
        "threads": torch.get_num_threads() if device == "cpu" else None,
        "requests": requests,
        "clients": clients,
    }


def time_decodes(engine: Engine, slots: list[int], context: int, iterations: int) -> list[float]:
    """Seconds of each of ``iterations`` decode iterations of ``slots``, all at ``context``
    tokens to start with, after one untimed (the engine is reset first, not after): the
    machine's speed on a fixed piece of work."""
    engine.reset()
    engine.occupy(slots, [context] * len(slots))
    engine.decode(slots)
    times = []
    end = engine.clock()
    for _ in range(iterations):
        engine.decode(slots)
        start, end = end, engine.clock()
        times.append(end - start)
    return times


def _reference_iteration(engine: Engine, batch: int, context: int, iterations: int = 20) -> float:
    """Median seconds of a fixed decode iteration (``batch`` slots at ``context``): the
    same measurement before profiling, after it and after executing shows whether the
    machine's speed moved during a run."""
    context = max(1, min(context, engine.max_len - iterations - 2))
    times = time_decodes(engine, list(range(batch)), context, iterations)
    engine.reset()
    return statistics.median(times)


def validate_runtime(
    model: str = "tiny",
    device: str = "cpu",
    requests: int | None = None,
    clients: int | None = None,
    scale: float | None = None,
    strategy: str = "both",
    seed: int = 0,
    threads: int | None = 1,
    dtype: str = "float32",
    progress: bool = False,
    check_tokens: int | None = None,
    executions: int | None = None,
    rounds: int | None = None,
    repeats: int | None = None,
    batch_table: bool = True,
) -> dict[str, Any]:
    """Profile, fit both cost models, simulate each strategy's schedule, execute it, compare.

    Every argument left None takes the model's default from
    :data:`~llmsched.runtime.check.DEFAULTS`.

    Parameters
    ----------
    model, device, dtype
        The preset (seeded random weights), ``cpu`` or ``cuda``, and the precision.
    requests, clients, scale
        The GSM8K-shaped workload (:func:`scaled_gsm8k`).
    strategy
        ``baseline``, ``hybrid`` or ``both`` (one profile, both strategies executed).
    seed
        Seeds the workload, the prompts, the weights and the profile.
    threads
        CPU threads for torch (CPU runs only); one by default, for steady timings.
    progress
        A bar on stderr counting the steps.
    check_tokens
        Requests whose tokens are checked against a run of their own (the first ones).
        Running each request alone costs its output tokens in single-request iterations.
    executions
        Times each schedule is executed, the strategies taking turns; the measured makespan
        is the median, so that a slow spell of the machine during one execution does not
        decide the figure (all of them are reported).
    rounds, repeats
        Of the profile (see :func:`~llmsched.runtime.profiling.profile`).
    batch_table
        Profile decode at every batch size and give the context-aware model a batch table
        (``decode_by_batch``): on a CPU a decode iteration's time is a sawtooth in the batch
        size that no line follows. Held-out decode points are then at contexts not fitted
        on (every batch size is fitted). With False, a line in the batch, and held-out batch
        sizes too.

    Returns
    -------
    dict
        ``cost_models`` (``context`` and ``linear`` coefficients); ``fit_error`` (each
        model's mean absolute relative error on held-out profile points, of batch sizes,
        contexts, prompt totals and prompt lengths not fitted on: ``mape``, ``prefill_mape``,
        ``decode_mape``, ``max_relative_error``); ``held_out`` (those sizes); per strategy
        in ``strategies``, each figure per model: ``predicted_makespan_s``,
        ``measured_makespan_s`` (the median execution of the schedule that model's
        simulation chose; ``linear_executed_apart`` says whether the linear model's schedule
        differed and was executed too), ``measured_makespans_s`` (every execution),
        ``makespan_error`` (median measured over predicted, minus 1) and
        ``makespan_error_range``, ``stage_error`` (on the median execution's stages), then
        ``tokens_matched`` (the fewest over the executions), ``valid`` and ``violations``;
        ``tokens_match`` and ``valid`` over all strategies; ``machine`` (load average, busy
        share of the other CPUs, a reference iteration timed before profiling, after it and
        after executing); ``seconds`` spent per step.

    In float16 or bfloat16 a request's greedy tokens can change with the batch around it
    (rounding in the matrix products), so the token check is exact only in float32.
    """

    torch_dtype = check_setup(model, device, dtype)
    if strategy not in (*STRATEGIES, "both"):
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {[*sorted(STRATEGIES), 'both']}")
    given = {
        "requests": requests,
        "clients": clients,
        "scale": scale,
        "executions": executions,
        "rounds": rounds,
        "repeats": repeats,
        "check_tokens": check_tokens,
    }
    size = sizes(model, given)
    clients = size["clients"]
    requests = positive_int("requests", size["requests"])
    executions = positive_int("executions", size["executions"])
    repeats = positive_int("repeats", size["repeats"])
    check = requests if size["check_tokens"] is None else positive_int("check_tokens", size["check_tokens"])
    check = min(check, requests)
    progress = flag("progress", progress)
    batch_table = flag("batch_table", batch_table)
    names = list(STRATEGIES) if strategy == "both" else [strategy]
    load = _CpuLoad()
    load_average = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    workload = scaled_gsm8k(requests, size["scale"], seed)
    config = PRESETS[model]
    capacity, plan = workload_plan(workload, clients, count=size["count"], seed=seed, every_batch=batch_table)
    longest = int(np.max(workload.prompt_tokens + workload.output_tokens))
    steps = 4 + len(names) + executions
    with progress_bar(progress, steps, f"runtime ({model})", unit="step") as bar:
        bar.set_postfix_str("model")
        engine = Engine(
            LlamaModel(config, seed=seed),
            clients,
            longest + repeats + 2,  # the profile times iterations past the longest context
            device=device,
            dtype=torch_dtype,
            threads=threads if device == "cpu" else None,
        )
        _reference_iteration(engine, clients, longest // 2)  # warm-up: first calls, first touches
        reference = [_reference_iteration(engine, clients, longest // 2)]
        bar.update()
        bar.set_postfix_str("profile")
        mark = time.perf_counter()
        fitted = profile_and_fit(
            engine, plan, capacity, repeats=repeats, rounds=size["rounds"], seed=seed, batch_table=batch_table
        )
        models: dict[str, Any] = {name: fitted[name] for name in _MODELS}
        reference.append(_reference_iteration(engine, clients, longest // 2))
        seconds["profile"] = time.perf_counter() - mark
        bar.update()
        prompts = make_prompts(workload, config.vocab_size, seed)
        plans: dict[str, dict[str, Any]] = {}
        for name in names:
            rp, ip = STRATEGIES[name]
            bar.set_postfix_str(f"simulate {name}")
            predicted = {m: simulate(workload, cost, clients, rp, ip) for m, cost in models.items()}
            apart = not same_decisions(predicted["context"], predicted["linear"])
            runs: dict[str, list[Execution]] = {m: [] for m in _MODELS}
            plans[name] = {"predicted": predicted, "runs": runs, "apart": apart}
            bar.update()
        mark = time.perf_counter()
        for turn in range(executions):
            bar.set_postfix_str(f"execute ({turn + 1}/{executions})")
            for name in names:  # the strategies take turns: a slow spell falls on each alike
                predicted, runs = plans[name]["predicted"], plans[name]["runs"]
                runs["context"].append(execute_schedule(predicted["context"], engine, prompts))
                if plans[name]["apart"]:
                    runs["linear"].append(execute_schedule(predicted["linear"], engine, prompts))
                else:
                    runs["linear"] = runs["context"]
            bar.update()
        reference.append(_reference_iteration(engine, clients, longest // 2))
        seconds["execute"] = time.perf_counter() - mark
        bar.set_postfix_str("each request alone")
        mark = time.perf_counter()
        checked = Workload(workload.prompt_tokens[:check], workload.output_tokens[:check])
        alone = run_alone(engine, checked, prompts[:check])
        seconds["tokens"] = time.perf_counter() - mark
        bar.update()
        bar.set_postfix_str("score")
        strategies = {name: _score(plans[name], models, alone, STRATEGIES[name]) for name in names}
        bar.update()
    seconds["total"] = time.perf_counter() - start
    return {
        **run_facts(model, device, dtype, requests, clients),
        "scale": size["scale"],
        "workload": workload.name,
        "output_tokens": int(workload.output_tokens.sum()),
        "profile": {
            "rounds": size["rounds"],
            "repeats": repeats,
            "rows": len(fitted["rows"]),
            "batch_table": batch_table,
        },
        "executions": executions,
        "cost_models": {name: _cost_fields(cost) for name, cost in models.items()},
        "fit_error": fitted["fit_error"],
        "held_out": plan.held_out(),
        "strategies": strategies,
        "tokens_checked": check,
        "tokens_match": all(s["tokens_matched"] == check for s in strategies.values()),
        "valid": all(s["valid"] for s in strategies.values()),
        "machine": {
            "load_average": load_average,
            "other_cpus_busy": load.busy(),
            "reference_iteration_s": reference,
        },
        "seconds": seconds,
    }


def _score(
    plan: dict[str, Any], models: dict[str, Any], alone: list[list[int]], policies: tuple[str, str]
) -> dict[str, Any]:
    """One strategy's figures for both models (see :func:`validate_runtime`)."""
    predicted: dict[str, Schedule] = plan["predicted"]
    runs: dict[str, list[Execution]] = plan["runs"]
    makespans = {m: [run.measured.makespan for run in runs[m]] for m in _MODELS}
    # The median execution (the lower of the middle two for an even count).
    middle = {m: runs[m][int(np.argsort(makespans[m])[(len(runs[m]) - 1) // 2])] for m in _MODELS}
    errors = {m: stage_errors(models[m], schedule_stage_times(middle["context"].measured)) for m in _MODELS}
    everything = [run for m in _MODELS for run in runs[m]]
    violations = sorted({str(v) for run in everything for v in validate(run.measured, skip=("stage_time",))})
    matched = min(sum(a == b for a, b in zip(run.tokens, alone, strict=False)) for run in everything)
    measured = middle["context"].measured
    return {
        "policies": list(policies),
        "predicted_makespan_s": {m: predicted[m].makespan for m in _MODELS},
        "measured_makespan_s": {m: middle[m].measured.makespan for m in _MODELS},
        "measured_makespans_s": makespans,
        "makespan_error": {m: middle[m].measured.makespan / predicted[m].makespan - 1.0 for m in _MODELS},
        "makespan_error_range": {
            m: [
                min(makespans[m]) / predicted[m].makespan - 1.0,
                max(makespans[m]) / predicted[m].makespan - 1.0,
            ]
            for m in _MODELS
        },
        "stage_error": {m: errors[m]["mape"] for m in _MODELS},
        "stage_error_prefill": {m: errors[m]["prefill_mape"] for m in _MODELS},
        "stage_error_decode": {m: errors[m]["decode_mape"] for m in _MODELS},
        "linear_executed_apart": plan["apart"],
        "iterations": int(measured.num_iterations),
        "prefill_stages": int(np.count_nonzero(measured.stage_kind == PREFILL)),
        "tokens_matched": matched,
        "valid": not violations,
        "violations": violations,
    }
