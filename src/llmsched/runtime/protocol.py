"""The measurement protocol of ``llmsched runtime validate --rule``: every batching rule run on
the engine against the predictions of the cost models fitted on it, with the machine's own
speed measured beside every run.

On a shared machine the same schedule's time moves with the machine by more than a cost
model's error, so a prediction is judged only where the machine held steady, by a rule stated
before anything is measured (:data:`STEADY`):

1. a fixed reference iteration (:class:`Probe`: a decode iteration of half the clients at the
   mean prompt's context, on an engine of its own) is timed after each of the profile's
   visits, the machine's drift taken out of the profile with it
   (:func:`~llmsched.runtime.profiling.profile`'s ``reference``), and both cost models fitted
   (context-aware and linear; their error on held-out profile points is reported): the
   *reading* of those references (:func:`reading`, their mean once the lowest and highest
   tenth are set aside) is the speed the models were fitted at, and their spread (10th to 90th
   percentile) how much the machine moved meanwhile;
2. the rules take turns, run after run (a slow spell falls on each alike), and the reference
   is timed every 10 stages or iterations *inside* each run, off the run's clock (the run's
   times are as if it had not run), so that it samples the machine over the whole run;
3. a run's *drift* is the reading of its references against the fitted speed; it is *steady*
   when the drift is under :data:`STEADY`, and a prediction is judged on the steady runs only.
   Every run's raw error is reported, with the drift beside it and the error once the
   prediction is scaled by the run's own reference speed (``corrected``), so a figure taken
   while the machine moved says so.

A run's time is a sum over its iterations, so a slow spell over a fifth of it shows in its
time; a median of its references would not see it, a mean does, and trimming a tenth from
either end keeps a single stalled reference from moving it.

Each rule runs on a paged engine (:class:`~llmsched.runtime.engine.Engine` with
``block_size``), so every measured schedule carries the KV-cache memory and passes the
validator's memory rule; a pool large enough for every client at full length preempts nothing,
and the preemption scenario (a pool about half the batch needs) preempts by recompute, counted
against the simulator's prediction. ``disaggregated`` runs a prompt engine and a token engine
(:func:`~llmsched.runtime.disaggregated.execute_disaggregated`) with the link fitted by
:func:`~llmsched.runtime.disaggregated.fit_link`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from llmsched.core.checks import flag, positive_int
from llmsched.core.cost import CostModel, decode_seconds, prefill_seconds
from llmsched.core.memory import KVMemory
from llmsched.core.progress import progress_bar
from llmsched.core.schedule import PREFILL
from llmsched.engines.competition.schedule import Schedule
from llmsched.engines.disaggregation.cluster import DisaggregatedCluster
from llmsched.engines.disaggregation.schedule import DisaggregatedSchedule
from llmsched.engines.fusion.iteration import fused_iteration_time
from llmsched.engines.fusion.schedule import FusedSchedule
from llmsched.engines.loop import simulate_policies
from llmsched.fleet.disaggregated import simulate_disaggregated
from llmsched.online.registry import make_iteration_policy, make_request_policy
from llmsched.online.simulate import simulate_batching
from llmsched.runtime.check import (
    check_setup,
    profile_and_fit,
    run_facts,
    scaled_gsm8k,
    sizes,
    time_decodes,
    workload_plan,
)
from llmsched.runtime.disaggregated import execute_disaggregated, fit_link
from llmsched.runtime.engine import Engine
from llmsched.runtime.executor import Execution, make_prompts, run_alone, run_batching, run_policies
from llmsched.runtime.model import PRESETS, LlamaModel

__all__ = ["RULES", "STEADY", "Probe", "executed_errors", "reading", "validate_rules"]

#: The rules ``--rule`` runs: the competition engine (FCFS, prefill first), the engines people
#: run (:mod:`llmsched.engines.batching`) and the disaggregated cluster.
RULES = ("competition", "sarathi", "vllm", "orca", "disaggregated")

#: A run is steady when its references' median stays within this share of the speed the models
#: were fitted at (stated before measuring).
STEADY = 0.02

_MODELS = ("context", "linear")
_FIGURES = ("ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tbt_p50_s", "tbt_p90_s", "tbt_p99_s")


class Probe:
    """The reference: one fixed decode iteration (``batch`` slots at ``context`` tokens) on an
    engine of its own (the model's weights shared), after one untimed; each call times it
    once and keeps the seconds in ``samples``.
    """

    def __init__(self, model: LlamaModel, batch: int, context: int, **engine: Any):
        self.engine = Engine(model, batch, context + 3, **engine)
        self.slots = list(range(batch))
        self.context = context
        self.samples: list[float] = []

    def __call__(self) -> float:
        (seconds,) = time_decodes(self.engine, self.slots, self.context, 1)
        self.samples.append(seconds)
        return seconds

    def since(self, mark: int) -> list[float]:
        """The samples taken since there were ``mark``."""
        return self.samples[mark:]


def reading(samples: Sequence[float]) -> float:
    """The machine's speed read from reference times: their mean over the samples between the
    10th and the 90th percentile (all of them where there are fewer than ten)."""
    if not len(samples):
        raise ValueError("reading needs at least one reference time")
    times = np.asarray(samples, dtype=float)
    if not np.all(np.isfinite(times)):
        raise ValueError("reference times must be finite numbers of seconds")
    low, high = np.percentile(times, [10, 90])
    kept = times[(times >= low) & (times <= high)] if len(times) >= 10 else times
    return float(kept.mean())


def _spread(samples: list[float]) -> float:
    """The 10th-to-90th percentile range of ``samples`` over their median."""
    low, mid, high = np.percentile(samples, [10, 50, 90])
    return float((high - low) / mid)


def executed_errors(schedule: Any, cost: CostModel) -> dict[str, float]:
    """Mean absolute relative error of ``cost``'s times for a measured schedule's stages and
    iterations (``mape``), over its prefill stages and iterations with prompt tokens
    (``prefill_mape``) and its decode-only iterations (``decode_mape``); NaN where it has none.
    A competition, fused (not padded) or disaggregated schedule."""
    if isinstance(schedule, Schedule):
        work = schedule.stage_work()
        prefill = np.flatnonzero(schedule.stage_kind == PREFILL)
        got_p = schedule.stage_end[prefill] - schedule.stage_start[prefill]
        want_p = prefill_seconds(cost, work["prompt_tokens"][prefill], work["prompt_squares"][prefill])
        runs = schedule.active_runs()
        got_d = runs["iteration_time"]
        want_d = decode_seconds(cost, runs["active"], runs["context"])
    elif isinstance(schedule, FusedSchedule):
        if schedule.padded:
            raise ValueError("executed_errors prices fused iterations; a padded schedule's are not")
        chunks = schedule.run_chunk_tokens > 0
        want = np.asarray(
            fused_iteration_time(
                cost,
                schedule.run_decoding,
                schedule.run_context,
                schedule.run_chunk_tokens,
                schedule.run_chunk_squares,
            ),
            dtype=np.float64,
        )
        got_p, want_p = schedule.run_first_time[chunks], want[chunks]
        got_d, want_d = schedule.run_first_time[~chunks], want[~chunks]
    elif isinstance(schedule, DisaggregatedSchedule):
        prompt = schedule.workload.prompt_tokens.astype(np.int64)
        stages = schedule.stage_start.size
        tokens = np.bincount(schedule.request_stage, weights=prompt, minlength=stages)
        squares = np.bincount(
            schedule.request_stage, weights=prompt.astype(np.float64) ** 2, minlength=stages
        )
        got_p = schedule.stage_end - schedule.stage_start
        want_p = prefill_seconds(cost, tokens, squares)
        got_d = schedule.run_first_time
        want_d = decode_seconds(cost, schedule.run_active, schedule.run_context)
    else:
        raise TypeError(f"executed_errors needs a measured schedule, got {type(schedule).__name__}")
    p = np.abs(np.asarray(got_p, dtype=np.float64) / np.asarray(want_p, dtype=np.float64) - 1.0)
    d = np.abs(np.asarray(got_d, dtype=np.float64) / np.asarray(want_d, dtype=np.float64) - 1.0)
    both = np.concatenate([p, d])
    return {
        "mape": float(both.mean()) if both.size else float("nan"),
        "prefill_mape": float(p.mean()) if p.size else float("nan"),
        "decode_mape": float(d.mean()) if d.size else float("nan"),
    }


def _peak(schedule: Any) -> int | None:
    """The most KV-cache blocks a schedule holds at once, by its memory model (None without)."""
    if getattr(schedule, "memory", None) is None:
        return None
    return int(schedule.memory_in_use()["blocks"].max())


def _pieces(schedule: Any) -> int:
    """Preemptions in a schedule: its pieces beyond its user requests (0 for a disaggregated one)."""
    return len(schedule.workload) - len(getattr(schedule, "requests", schedule.workload))


def validate_rules(
    model: str = "small",
    rules: tuple[str, ...] | list[str] = RULES,
    runs: int = 3,
    device: str = "cpu",
    requests: int | None = None,
    clients: int | None = None,
    scale: float | None = None,
    seed: int = 0,
    threads: int | None = 1,
    dtype: str = "float32",
    budget: int = 256,
    block_size: int = 16,
    preemption: bool = True,
    progress: bool = False,
) -> dict[str, Any]:
    """Run every rule of ``rules`` ``runs`` times on the engine and compare it with both cost
    models' predictions, under the protocol of this module's docstring.

    Parameters
    ----------
    model, device, dtype, threads, seed
        As for :func:`~llmsched.runtime.check.validate_runtime`.
    rules
        Names from :data:`RULES`.
    runs
        Runs of each rule, the rules taking turns.
    requests, clients, scale
        The GSM8K-shaped workload, all requests waiting at time 0 (None: the model's
        :data:`~llmsched.runtime.check.DEFAULTS`).
    budget
        The token budget of sarathi, vllm and orca (vLLM's ``max_num_batched_tokens``; vllm's is
        raised to the longest prompt, which it never chunks).
    block_size
        Tokens per KV-cache block of the paged engines.
    preemption
        Also run the preemption scenario: vllm on a pool of about half the blocks the batch
        needs at once.
    progress
        A bar on stderr.

    Returns
    -------
    dict
        ``fit_error`` (each model's held-out profile error), ``link`` (the copy's fit), per rule
        in ``rules``: ``tokens_exact``, ``valid`` and ``violations`` over its runs, ``runs`` (each
        run's measured makespan, both predictions, raw and corrected errors, its references'
        ``probes`` and their times ``reference_s``, ``speed`` (their :func:`reading`) against the fitted
        one, ``drift``, ``probe_spread`` and ``steady``), ``steady_runs``,
        ``within_5pct_when_steady`` (per model: every steady run's raw error within 5%, None
        without a steady run), ``executed_error`` (per
        model, over the median run's stages), ``latency`` (measured and predicted TTFT and TBT
        percentiles of the median run), ``peak_blocks`` (measured and predicted) and
        ``preemptions``; ``preemption`` (the scenario, when run); ``machine`` (the fitted
        speed, the reference's batch and context, its times during the profile and their
        spread); ``seconds``.
    """

    torch_dtype = check_setup(model, device, dtype)
    rules = list(rules)
    unknown = [r for r in rules if r not in RULES]
    if unknown or not rules:
        raise ValueError(f"rules must be names from {list(RULES)}, got {rules!r}")
    runs = positive_int("runs", runs)
    budget = positive_int("budget", budget)
    block_size = positive_int("block_size", block_size)
    preemption = flag("preemption", preemption)
    given = {"requests": requests, "clients": clients, "scale": scale}
    size = sizes(model, given)
    clients = size["clients"]
    n = positive_int("requests", size["requests"])
    start = time.perf_counter()
    seconds: dict[str, float] = {}
    workload = scaled_gsm8k(n, size["scale"], seed)
    config = PRESETS[model]
    capacity, plan = workload_plan(workload, clients, count=size["count"], seed=seed, every_batch=True)
    capacity = max(capacity, budget)
    longest = int(np.max(workload.prompt_tokens + workload.output_tokens))
    max_len = longest + size["repeats"] + 2
    steps = 3 + runs * len(rules) + int(preemption)
    weights = LlamaModel(config, seed=seed)
    on: dict[str, Any] = {"device": device, "dtype": torch_dtype, "block_size": block_size}
    with progress_bar(progress, steps, f"runtime rules ({model})", unit="step") as bar:
        bar.set_postfix_str("profile")
        engine = Engine(weights, clients, max_len, threads=threads if device == "cpu" else None, **on)
        probe = Probe(weights, clients // 2, int(workload.prompt_tokens.mean()), **on)
        for _ in range(5):  # warm-up: first calls, first touches
            probe()
        mark = time.perf_counter()
        start_samples = len(probe.samples)
        fitted = profile_and_fit(
            engine,
            plan,
            capacity,
            repeats=size["repeats"],
            rounds=size["rounds"],
            seed=seed,
            batch_table=True,
            reference=probe,
        )
        during_profile = probe.since(start_samples)
        fitted_speed = reading(during_profile)
        models: dict[str, CostModel] = {m: fitted[m] for m in _MODELS}
        seconds["profile"] = time.perf_counter() - mark
        bar.update()
        bar.set_postfix_str("each request alone")
        prompts = make_prompts(workload, config.vocab_size, seed)
        alone = run_alone(engine, workload, prompts)
        bar.update()
        memory = KVMemory(engine.blocks, block_size)
        link: dict[str, Any] | None = None
        clusters: dict[str, DisaggregatedCluster] = {}
        prompt_engine = token_engine = None
        if "disaggregated" in rules:
            bar.set_postfix_str("link")
            prompt_engine = Engine(weights, n, max_len, **on)  # a stage may hold every request
            token_engine = Engine(weights, n, max_len, **on)
            lo, hi = int(workload.prompt_tokens.min()), int(workload.prompt_tokens.max())
            link = fit_link(prompt_engine, token_engine, sorted({lo, (lo + hi) // 2, hi, 2 * hi}))
            for m, cost in models.items():
                clusters[m] = DisaggregatedCluster(
                    1,
                    1,
                    cost,
                    cost,
                    clients,
                    token_engine.kv_bytes_per_token,
                    link["bandwidth_gbs"],
                    layers=config.num_hidden_layers,
                    overlap=False,
                    kv_latency=link["latency_s"],
                )
        bar.update()

        def execute(rule: str) -> tuple[Execution, dict[str, Any]]:
            """One run of ``rule`` and both models' predictions of it."""
            linear: Any
            if rule == "competition":
                done = run_policies(
                    workload,
                    engine,
                    models["context"],
                    clients,
                    "fcfs",
                    "prefill-first",
                    prompts,
                    probe=probe,
                )
                linear = simulate_policies(
                    workload,
                    models["linear"],
                    clients,
                    make_request_policy("fcfs"),
                    make_iteration_policy("prefill-first"),
                    memory=memory,
                )
            elif rule == "disaggregated":
                assert prompt_engine is not None and token_engine is not None
                predicted = simulate_disaggregated(workload, clusters["context"])
                done = execute_disaggregated(predicted, prompt_engine, token_engine, prompts, probe=probe)
                linear = simulate_disaggregated(workload, clusters["linear"])
            else:
                cap = max(budget, int(workload.prompt_tokens.max())) if rule == "vllm" else budget
                done = run_batching(
                    workload, engine, models["context"], clients, rule, "fcfs", cap, prompts, probe=probe
                )
                linear = simulate_batching(
                    workload, models["linear"], clients, rule, "fcfs", cap, memory=memory
                )
            return done, {"context": done.predicted, "linear": linear}

        results: dict[str, list[dict[str, Any]]] = {rule: [] for rule in rules}
        mark = time.perf_counter()
        for turn in range(runs):
            for rule in rules:
                bar.set_postfix_str(f"{rule} ({turn + 1}/{runs})")
                mark_samples = len(probe.samples)
                done, predicted = execute(rule)
                results[rule].append(
                    {"done": done, "predicted": predicted, "samples": probe.since(mark_samples)}
                )
                bar.update()
        seconds["execute"] = time.perf_counter() - mark
        scenario = None
        if preemption:
            bar.set_postfix_str("preemption")
            scenario = _preemption(workload, weights, clients, max_len, on, models, budget, prompts, alone)
            bar.update()
    report_rules = {
        rule: _score(
            results[rule], models, alone, fitted_speed, engine if rule != "disaggregated" else token_engine
        )
        for rule in rules
    }
    seconds["total"] = time.perf_counter() - start
    return {
        **run_facts(model, device, dtype, n, clients),
        "workload": workload.name,
        "budget": budget,
        "block_size": block_size,
        "blocks": engine.blocks,
        "runs": runs,
        "steady_within": STEADY,
        "fit_error": fitted["fit_error"],
        "link": None
        if link is None
        else {k: v for k, v in link.items() if k != "rows"} | {"rows": link["rows"]},
        "rules": report_rules,
        "preemption": scenario,
        "machine": {
            "fitted_speed_s": fitted_speed,
            "probe": [len(probe.slots), probe.context],
            "probe_samples_during_profile": len(during_profile),
            "profile_reference_s": during_profile,
            "probe_spread_during_profile": _spread(during_profile),
        },
        "seconds": seconds,
    }


def _preemption(
    workload: Any,
    weights: LlamaModel,
    clients: int,
    max_len: int,
    on: dict[str, Any],
    models: dict[str, CostModel],
    budget: int,
    prompts: list[list[int]],
    alone: list[list[int]],
) -> dict[str, Any]:
    """vllm on a pool of about half the blocks the batch needs at once: it preempts by
    recompute; the preemptions measured against both models' predictions."""
    size = on["block_size"]
    ends = np.sort(-(-(workload.prompt_tokens + workload.output_tokens) // size))[::-1]
    needed = int(ends[:clients].sum())
    least = int(ends[0]) + clients + 2  # the longest request alone, with a block for every client
    blocks = max(least, needed // 2)
    engine = Engine(weights, clients, max_len, **{**on, "blocks": blocks})
    # A preempted request comes back with its prompt and the tokens it made: vLLM's batch must
    # hold the longest such prompt whole (as it asks max_num_batched_tokens >= max_model_len).
    cap = max(budget, int((workload.prompt_tokens + workload.output_tokens).max()) - 1)
    done = run_batching(workload, engine, models["context"], clients, "vllm", "fcfs", cap, prompts)
    memory = KVMemory(blocks, size)
    linear = simulate_batching(workload, models["linear"], clients, "vllm", "fcfs", cap, memory=memory)
    violations = [str(v) for v in done.measured.validate(skip=("stage_time",))]
    return {
        "rule": "vllm",
        "blocks": blocks,
        "blocks_needed_at_once": needed,
        "tokens_exact": done.tokens == alone,
        "valid": not violations,
        "violations": violations[:10],
        "preemptions": done.info["preemptions"],
        "predicted_preemptions": {"context": _pieces(done.predicted), "linear": _pieces(linear)},
        "recomputed_tokens": done.info["recomputed_tokens"],
        "peak_blocks": done.info["peak_blocks"],
        "predicted_peak_blocks": _peak(done.predicted),
        "measured_makespan_s": done.measured.makespan,
        "predicted_makespan_s": {"context": done.predicted.makespan, "linear": linear.makespan},
    }


def _score(
    results: list[dict[str, Any]],
    models: dict[str, CostModel],
    alone: list[list[int]],
    fitted_speed: float,
    engine: Engine | None,
) -> dict[str, Any]:
    """One rule's figures over its runs (see :func:`validate_rules`)."""
    rows = []
    for row in results:
        done: Execution = row["done"]
        measured = done.measured.makespan
        samples = row["samples"]
        speed = reading(samples) / fitted_speed if samples else float("nan")
        drift = abs(speed - 1.0)
        rows.append(
            {
                "measured_makespan_s": measured,
                "predicted_makespan_s": {m: row["predicted"][m].makespan for m in _MODELS},
                "error": {m: measured / row["predicted"][m].makespan - 1.0 for m in _MODELS},
                "corrected_error": {
                    m: measured / (row["predicted"][m].makespan * speed) - 1.0 for m in _MODELS
                },
                "drift": drift,
                "speed": speed,
                "probes": len(samples),
                "reference_s": list(samples),
                "probe_spread": _spread(samples) if samples else float("nan"),
                "steady": bool(drift < STEADY),
            }
        )
    makespans = [r["measured_makespan_s"] for r in rows]
    middle = int(np.argsort(makespans)[(len(rows) - 1) // 2])
    median = results[middle]
    measured = median["done"].measured
    violations = sorted(
        {
            str(v)
            for row in results
            for v in row["done"].measured.validate(skip=("stage_time", "transfer_time"))
        }
        if isinstance(measured, DisaggregatedSchedule)
        else {str(v) for row in results for v in row["done"].measured.validate(skip=("stage_time",))}
    )
    steady = [r for r in rows if r["steady"]]
    summary = measured.summary()
    predicted_summary = {m: median["predicted"][m].summary() for m in _MODELS}
    info = median["done"].info
    return {
        "tokens_exact": all(row["done"].tokens == alone for row in results),
        "valid": not violations,
        "violations": violations[:10],
        "runs": rows,
        "steady_runs": len(steady),
        "within_5pct_when_steady": {
            m: (all(abs(r["error"][m]) <= 0.05 for r in steady) if steady else None) for m in _MODELS
        },
        "executed_error": {m: executed_errors(measured, models[m]) for m in _MODELS},
        "latency": {
            "measured": {k: summary[k] for k in _FIGURES},
            **{m: {k: predicted_summary[m][k] for k in _FIGURES} for m in _MODELS},
        },
        "peak_blocks": {
            "measured": info.get("peak_blocks"),
            "predicted": _peak(median["predicted"]["context"]),
        },
        "preemptions": {
            "measured": info.get("preemptions", 0),
            "predicted": _pieces(median["predicted"]["context"]),
        },
        "copy": (
            {
                "measured_s": float(np.mean(info["copy_s"])),
                "predicted_s": float(np.mean(info["predicted_copy_s"])),
                "error": float(np.mean(np.array(info["copy_s"]) / np.array(info["predicted_copy_s"]) - 1.0)),
            }
            if "copy_s" in info
            else None
        ),
        "engine_blocks": None if engine is None else engine.blocks,
    }
