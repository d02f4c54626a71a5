"""The fused mode's core (:mod:`llmsched.engines.fusion.schedule`): the fused iteration's price, and the
validator rule by rule on schedules the loop makes and on hand-built ones."""

from __future__ import annotations

import numpy as np

from llmsched.engines.fusion.schedule import FusedSchedule
from llmsched.engines.fusion.validate import validate_fused
from llmsched.online.simulate import simulate_fusion
from tests.engines.fusion.test_rule import PAPER, _workload


def _valid() -> FusedSchedule:
    s = simulate_fusion(_workload(30, 2), PAPER, 6, "fcfs", token_budget=200)
    assert validate_fused(s) == []
    return s


def _rules(s: FusedSchedule) -> set[str]:
    return {v.rule for v in validate_fused(s)}


def _decode_run(s: FusedSchedule, multi: bool = False) -> int:
    """A run in the middle with decoding only (and several iterations when ``multi``)."""
    runs = np.flatnonzero(
        (s.run_decoding > 0) & (s.run_chunk_tokens == 0) & (~multi | (s.run_iterations > 1))
    )
    return int(runs[len(runs) // 2])


def _set(arr: np.ndarray, index: int, value: object) -> np.ndarray:
    out = arr.copy()
    out[index] = value
    return out
