"""Shared objects of the runtime tests: a tiny seeded model, an engine on its three slots,
a mixed workload with its prompts, and each request's tokens when it runs alone."""

from __future__ import annotations

from typing import Any

import pytest

from llmsched import LinearCostModel, Workload

WORKLOAD = Workload([5, 17, 9, 30, 3, 12, 7, 21], [6, 20, 11, 4, 15, 9, 1, 13], name="mixed")
COST = LinearCostModel(0.002, 2e-5, 0.0015, 1e-4, 64)


@pytest.fixture(scope="session")
def model() -> Any:
    """The ``tiny`` preset with seeded weights, on one CPU thread."""
    torch = pytest.importorskip("torch")
    from llmsched.runtime import PRESETS, LlamaModel

    torch.set_num_threads(1)
    return LlamaModel(PRESETS["tiny"], seed=0)


@pytest.fixture(scope="session")
def prompts(model: Any) -> list[list[int]]:
    from llmsched.runtime.executor import make_prompts

    return make_prompts(WORKLOAD, model.config.vocab_size, seed=4)


@pytest.fixture(scope="module")
def engine(model: Any) -> Any:
    from llmsched.runtime import Engine

    return Engine(model, 3, 128)


@pytest.fixture(scope="module")
def alone(engine: Any, prompts: list[list[int]]) -> list[list[int]]:
    from llmsched.runtime import run_alone

    return run_alone(engine, WORKLOAD, prompts)
