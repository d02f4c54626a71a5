"""Instances of the benchmarks, shared with the tests and the notebook.

A benchmark script imports ``from instances import tiny_instance`` (its folder is on the path);
the tests, run from the repository root, import ``from benchmarks.instances import tiny_instance``.
"""

from __future__ import annotations

import numpy as np

from llmsched import LinearCostModel, Workload
from llmsched.cost import LevelCostModel
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
