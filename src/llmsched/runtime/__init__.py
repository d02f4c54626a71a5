"""A real torch decode loop that executes schedules, measures them, and fits cost models.

Needs torch (``pip install 'llmsched[runtime]'``); importing this package does not, so the
rest of llmsched works without it and :func:`require_torch` says what is missing. The names
below load their modules on first use:

* :class:`LlamaConfig`, :class:`LlamaModel`, :data:`PRESETS`, :func:`load_pretrained`
  (:mod:`~llmsched.runtime.model`): a Llama-family decoder with seeded random weights;
* :class:`Engine`, :class:`KVCacheFull` (:mod:`~llmsched.runtime.engine`): the KV cache (a
  region per slot, or paged blocks from a pool) and the forward passes;
* :class:`EngineExecutor`, :func:`execute_schedule`, :func:`run_policies`, :func:`run_batching`
  (any engine's batching rule, mixed iterations included, preemption by recompute on a paged
  engine), :func:`run_alone` (:mod:`~llmsched.runtime.executor`): the decision loop on the engine;
* :func:`execute_disaggregated`, :func:`fit_link` (:mod:`~llmsched.runtime.disaggregated`): a
  prompt engine and a token engine, the keys and values copied between them;
* :func:`run_insertion` (:mod:`~llmsched.runtime.insertion`): static, padded and apart insertion;
* :func:`profile`, :func:`fit_cost`, :func:`stage_errors` (:mod:`~llmsched.runtime.profiling`):
  stage times against batch, context and prompt mix, the context-aware and the linear fit;
* :func:`validate_runtime`, :func:`scaled_gsm8k` (:mod:`~llmsched.runtime.check`) and
  :func:`validate_rules` (:mod:`~llmsched.runtime.protocol`): ``llmsched runtime validate``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any

__all__ = [
    "PRESETS",
    "Engine",
    "EngineExecutor",
    "KVCacheFull",
    "LlamaConfig",
    "LlamaModel",
    "execute_disaggregated",
    "execute_schedule",
    "fit_cost",
    "fit_link",
    "load_pretrained",
    "profile",
    "require_torch",
    "run_alone",
    "run_batching",
    "run_insertion",
    "run_policies",
    "scaled_gsm8k",
    "stage_errors",
    "torch_available",
    "validate_rules",
    "validate_runtime",
]

_WHERE = {
    "PRESETS": "model",
    "LlamaConfig": "model",
    "LlamaModel": "model",
    "load_pretrained": "model",
    "Engine": "engine",
    "KVCacheFull": "engine",
    "execute_disaggregated": "disaggregated",
    "fit_link": "disaggregated",
    "validate_rules": "protocol",
    "EngineExecutor": "executor",
    "execute_schedule": "executor",
    "run_alone": "executor",
    "run_batching": "executor",
    "run_insertion": "insertion",
    "run_policies": "executor",
    "fit_cost": "profiling",
    "profile": "profiling",
    "stage_errors": "profiling",
    "scaled_gsm8k": "check",
    "validate_runtime": "check",
}

MISSING_TORCH = (
    "the llmsched runtime needs PyTorch, which is not installed; install it with "
    "pip install 'llmsched[runtime]' (torch==2.13.0)"
)


def torch_available() -> bool:
    """Whether torch can be imported (without importing it)."""
    if "torch" in sys.modules:
        return sys.modules["torch"] is not None
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def require_torch() -> None:
    """Raise ImportError with what to install when torch is missing."""
    if not torch_available():
        raise ImportError(MISSING_TORCH)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'llmsched.runtime' has no attribute {name!r}")
    require_torch()
    return getattr(importlib.import_module(f"llmsched.runtime.{module}"), name)
