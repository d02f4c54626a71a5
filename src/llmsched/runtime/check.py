"""``llmsched runtime validate``: profile the engine, fit a cost model, run a simulated
schedule on the engine, and compare the prediction with the clock.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from llmsched._checks import flag
from llmsched._progress import progress_bar
from llmsched.runtime.engine import Engine
from llmsched.runtime.executor import execute_schedule, make_prompts, run_alone
from llmsched.runtime.model import PRESETS, LlamaModel
from llmsched.runtime.profiling import fit_cost, profile, schedule_stage_times, split_sizes, stage_errors
from llmsched.simulate import simulate
from llmsched.validate import validate
from llmsched.workload import Workload

__all__ = ["STRATEGIES", "scaled_gsm8k", "validate_runtime"]

# (request policy, iteration policy) of the strategies the runtime can execute; the hybrid
# plans its offline queues with the true output lengths (the oracle).
STRATEGIES = {
    "baseline": ("fcfs", "prefill-first"),
    "hybrid": ("hybrid-oracle", "lagrangian"),
}


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


def validate_runtime(
    model: str = "tiny",
    device: str = "cpu",
    requests: int = 24,
    clients: int = 8,
    scale: float = 0.125,
    strategy: str = "hybrid",
    seed: int = 0,
    threads: int | None = 1,
    dtype: str = "float32",
    progress: bool = False,
) -> dict[str, Any]:
    """Profile, fit, simulate a schedule with the fitted model, execute it, compare.

    Returns the figures as a dict: ``predicted_makespan_s``, ``measured_makespan_s``,
    ``makespan_error``, ``tokens_match`` (every request's tokens equal its tokens when run
    alone; ``tokens_matched`` counts the requests that do), ``fit_error`` (mean absolute
    relative error on held-out profile stages of sizes not fitted on), ``stage_error`` (on
    the executed schedule's stages), ``violations`` of the measured schedule (all rules but
    ``stage_time``), and the fitted cost model.

    In float16 or bfloat16 a request's greedy tokens can change with the batch around it
    (rounding in the matrix products), so the token check is exact only in float32.

    With ``progress`` a bar on stderr counts the steps: building the model, profiling,
    profiling held-out sizes, simulating, executing the schedule, running each request alone.
    """
    import torch

    dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    if model not in PRESETS:
        raise ValueError(f"unknown model {model!r}; choose one of {sorted(PRESETS)}")
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {sorted(STRATEGIES)}")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if dtype not in dtypes:
        raise ValueError(f"dtype must be one of {sorted(dtypes)}, got {dtype!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was asked for, but torch sees no CUDA GPU")
    if isinstance(clients, bool) or not isinstance(clients, int) or clients < 2:
        raise ValueError(
            f"clients must be an integer >= 2 (decode fits need two batch sizes), got {clients!r}"
        )
    progress = flag("progress", progress)
    start = time.perf_counter()
    workload = scaled_gsm8k(requests, scale, seed)
    config = PRESETS[model]
    longest = int(np.max(workload.prompt_tokens + workload.output_tokens))
    with progress_bar(progress, 6, f"runtime ({model})", unit="step") as bar:
        bar.set_postfix_str("model")
        engine = Engine(
            LlamaModel(config, seed=seed),
            clients,
            longest + 8,
            device=device,
            dtype=dtypes[dtype],
            threads=threads if device == "cpu" else None,
        )
        bar.update()
        prompt_len = max(1, int(np.median(workload.prompt_tokens)))
        capacity = max(prompt_len * clients, int(workload.prompt_tokens.max()))
        sizes, held_sizes = split_sizes(prompt_len, prompt_len * clients, 6)
        batches, held_batches = split_sizes(1, clients, 5)
        bar.set_postfix_str("profile")
        samples = profile(engine, sizes, batches, prompt_len=prompt_len, context=64, seed=seed)
        cost = fit_cost(samples, capacity)
        bar.update()
        fit_error = {"mape": float("nan"), "prefill_mape": float("nan"), "decode_mape": float("nan")}
        if held_sizes and held_batches:
            bar.set_postfix_str("held-out profile")
            held = profile(engine, held_sizes, held_batches, prompt_len=prompt_len, context=64, seed=seed + 1)
            fit_error = stage_errors(cost, held, median=True)
        bar.update()
        bar.set_postfix_str("simulate")
        rp, ip = STRATEGIES[strategy]
        predicted = simulate(workload, cost, clients, rp, ip)
        prompts = make_prompts(workload, config.vocab_size, seed)
        bar.update()
        bar.set_postfix_str("execute")
        execution = execute_schedule(predicted, engine, prompts)
        bar.update()
        bar.set_postfix_str("each request alone")
        alone = run_alone(engine, workload, prompts)
        bar.update()
    violations = validate(execution.measured, skip=("stage_time",))
    executed = stage_errors(cost, schedule_stage_times(execution.measured))
    matched = sum(a == b for a, b in zip(execution.tokens, alone, strict=True))
    return {
        "model": model,
        "parameters": config.parameters_count(),
        "device": device,
        "dtype": dtype,
        "strategy": strategy,
        "policies": [rp, ip],
        "requests": requests,
        "clients": clients,
        "workload": workload.name,
        "predicted_makespan_s": predicted.makespan,
        "measured_makespan_s": execution.measured.makespan,
        "makespan_error": execution.measured.makespan / predicted.makespan - 1.0,
        "tokens_match": matched == len(alone),
        "tokens_matched": matched,
        "fit_error": fit_error["mape"],
        "fit_error_prefill": fit_error["prefill_mape"],
        "fit_error_decode": fit_error["decode_mape"],
        "held_out_sizes": {"prefill_tokens": held_sizes, "decode_batches": held_batches},
        "stage_error": executed["mape"],
        "valid": not violations,
        "violations": [str(v) for v in violations],
        "cost_model": {
            "prefill_base": cost.prefill_base,
            "prefill_per_token": cost.prefill_per_token,
            "decode_base": cost.decode_base,
            "decode_per_client": cost.decode_per_client,
            "prefill_capacity": cost.prefill_capacity,
        },
        "wall_s": time.perf_counter() - start,
    }
