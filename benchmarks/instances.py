"""Instances of the benchmarks, shared with the tests and the notebook.

A benchmark script imports ``from instances import tiny_instance`` (its folder is on the path);
the tests, run from the repository root, import ``from benchmarks.instances import tiny_instance``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from llmsched import ContextCostModel, LinearCostModel, Workload
from llmsched.core.cost import LevelCostModel
from llmsched.workloads import gsm8k


def tiny_instance(
    seed: int, max_requests: int = 8, max_clients: int = 3, max_output: int = 20
) -> tuple[Workload, LevelCostModel, int]:
    """A random instance small enough for the full MIP: (workload, cost, clients).

    2 to ``max_requests`` requests with GSM8K prompt lengths drawn from the real ones,
    outputs uniform in ``[1, max_output]``, 1 to ``max_clients`` clients, and the paper's
    cost model under the MIP's semantics (``LinearCostModel.paper().to_levels(clients)``).
    """
    for name, value, least in (("max_requests", max_requests, 2), ("max_clients", max_clients, 1)):
        if not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    if not isinstance(max_output, int) or max_output < 1:
        raise ValueError(f"max_output must be an integer >= 1, got {max_output!r}")
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, max_requests + 1))
    clients = int(rng.integers(1, max_clients + 1))
    prompts = rng.choice(gsm8k(0).prompt_tokens, size=n)
    outputs = rng.integers(1, max_output + 1, size=n)
    workload = Workload(prompt_tokens=prompts, output_tokens=outputs, name=f"tiny({seed})")
    return workload, LinearCostModel.paper().to_levels(clients), clients


# The Azure LLM inference trace of 2023 (code service), where the repository sits beside a
# ``shared`` folder holding it; the benchmarks fall back to GSM8K-shaped lengths without it.
AZURE_CODE = (
    Path(__file__).resolve().parents[2]
    / "shared"
    / "data"
    / "azure-llm-2023"
    / ("AzureLLMInferenceTrace_code.csv")
)
PAPER_16K = replace(LinearCostModel.paper(), prefill_capacity=16_384)

# PAPER_16K with context terms for benchmarks of the context-aware paths. Not measured: sized
# from LLaMA-65B's shape on eight accelerators, in round numbers. A decode iteration reads 2 x
# 80 layers x 8,192 x 2 bytes = 2.6 MB of keys and values per context token, at about 13 TB/s
# in all: 2e-7 s per token. Attention over a prompt does about 4 x 80 x 8,192 = 2.6 MFLOP per
# squared token, at about 1.3 PFLOP/s sustained: 2e-9 s.
PAPER_CONTEXT_16K = ContextCostModel.from_linear(PAPER_16K, prefill_per_square=2e-9, decode_per_context=2e-7)


def azure_code() -> Workload | None:
    """The Azure code trace (8,819 requests over 3,436 s), or None when it is absent."""
    if not AZURE_CODE.is_file():
        return None
    from llmsched.workloads import from_azure_trace

    return from_azure_trace(AZURE_CODE, name="azure-code")


def hour_stream(n: int = 19_366, seconds: float = 3600.0, seed: int = 0) -> Workload:
    """``n`` requests arriving as a Poisson stream over about ``seconds`` (the size of the
    Azure conversation trace of 2023: 19,366 requests in an hour).

    Lengths are drawn (with replacement) from the Azure code trace when it is present, else
    from :func:`~llmsched.workloads.gsm8k_like`.
    """
    from llmsched.workloads import gsm8k_like, poisson_arrivals

    rng = np.random.default_rng(seed)
    trace = azure_code()
    if trace is not None:
        pick = rng.integers(0, len(trace), n)
        prompt, output = trace.prompt_tokens[pick], trace.output_tokens[pick]
        name = "azure-code-lengths-hour"
    else:
        lengths = gsm8k_like(n, seed=seed)
        prompt, output = lengths.prompt_tokens, lengths.output_tokens
        name = "gsm8k-like-hour"
    arrival = poisson_arrivals(n, n / seconds, seed=rng)
    return Workload(prompt, output, arrival=arrival, name=name)
