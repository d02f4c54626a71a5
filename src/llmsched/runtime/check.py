"""``llmsched runtime validate``: profile the engine, fit a cost model, run a simulated
schedule on the engine, and compare the prediction with the clock.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from llmsched.runtime.engine import Engine
from llmsched.runtime.executor import execute_schedule, make_prompts, run_alone
from llmsched.runtime.model import PRESETS, LlamaModel
from llmsched.runtime.profiling import fit_cost, profile, schedule_stage_times, stage_errors
from llmsched.simulate import simulate
from llmsched.validate import validate
from llmsched.workload import Workload

__all__ = ["STRATEGIES", "scaled_gsm8k", "validate_runtime"]

# (request policy, iteration policy) of the strategies the runtime can execute.
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
) -> dict[str, Any]:
    """Profile, fit, simulate a schedule with the fitted model, execute it, compare.

    Returns the figures as a dict: ``predicted_makespan_s``, ``measured_makespan_s``,
    ``makespan_error``, ``tokens_match`` (every request's tokens equal its tokens when run
    alone), ``fit_error`` (mean absolute relative error on held-out profile stages),
    ``stage_error`` (on the executed schedule's stages), ``violations`` of the measured
    schedule (all rules but ``stage_time``), and the fitted cost model.
    """
    import torch

    if model not in PRESETS:
        raise ValueError(f"unknown model {model!r}; choose one of {sorted(PRESETS)}")
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {sorted(STRATEGIES)}")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was asked for, but torch sees no CUDA GPU")
    start = time.perf_counter()
    workload = scaled_gsm8k(requests, scale, seed)
    config = PRESETS[model]
    longest = int(np.max(workload.prompt_tokens + workload.output_tokens))
    engine = Engine(
        LlamaModel(config, seed=seed),
        clients,
        max(longest, 160) + 8,
        device=device,
        dtype=torch.float32 if device == "cpu" else torch.float16,
        threads=threads if device == "cpu" else None,
    )
    prompt_len = max(1, int(np.median(workload.prompt_tokens)))
    capacity = prompt_len * clients
    sizes = np.unique(np.linspace(prompt_len, capacity, 6).astype(int)).tolist()
    batches = np.unique(np.linspace(1, clients, 6).astype(int)).tolist()
    samples = profile(engine, sizes, batches, prompt_len=prompt_len, context=64, seed=seed)
    cost = fit_cost(samples, capacity)
    rng = np.random.default_rng(seed + 1)
    held_sizes = sorted({int(x) for x in rng.integers(1, capacity + 1, size=6)})
    held_batches = sorted({int(x) for x in rng.integers(1, clients + 1, size=6)})
    held = profile(engine, held_sizes, held_batches, prompt_len=prompt_len, context=64, seed=seed + 1)
    fit_error = stage_errors(cost, held)
    rp, ip = STRATEGIES[strategy]
    predicted = simulate(workload, cost, clients, rp, ip)
    prompts = make_prompts(workload, config.vocab_size, seed)
    execution = execute_schedule(predicted, engine, prompts)
    alone = run_alone(engine, workload, prompts)
    violations = validate(execution.measured, skip=("stage_time",))
    executed = stage_errors(cost, schedule_stage_times(execution.measured))
    return {
        "model": model,
        "parameters": config.parameters_count(),
        "device": device,
        "strategy": strategy,
        "requests": requests,
        "clients": clients,
        "workload": workload.name,
        "predicted_makespan_s": predicted.makespan,
        "measured_makespan_s": execution.measured.makespan,
        "makespan_error": execution.measured.makespan / predicted.makespan - 1.0,
        "tokens_match": execution.tokens == alone,
        "fit_error": fit_error["mape"],
        "fit_error_prefill": fit_error["prefill_mape"],
        "fit_error_decode": fit_error["decode_mape"],
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
