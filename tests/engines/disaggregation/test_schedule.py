"""The disaggregated mode's core (:mod:`llmsched.engines.disaggregation.schedule`): the transfer,
the cluster's
checks, and the validator rule by rule on schedules the loop makes and on hand-built ones."""

from __future__ import annotations

import numpy as np

from llmsched import ContextCostModel, Workload
from llmsched.engines.disaggregation.schedule import DisaggregatedSchedule
from llmsched.engines.disaggregation.validate import validate_disaggregated
from llmsched.online.simulate import simulate_disaggregated
from tests.engines.disaggregation.test_cluster_loop import PAPER, _cluster


def _valid() -> DisaggregatedSchedule:
    """A burst of long prompts and a tail of short ones: stages on the prompt machine and on
    lent token machines, transfers, runs under a context-aware model."""
    rng = np.random.default_rng(3)
    prompt = np.concatenate([rng.integers(2000, 2500, 20), rng.integers(5, 200, 20)])
    arrival = np.concatenate([np.zeros(20), np.sort(rng.uniform(0, 4, 20)).round(3)])
    work = Workload(prompt, rng.integers(1, 40, 40), arrival=arrival)
    cost = ContextCostModel.from_linear(PAPER, decode_per_context=1e-7)
    s = simulate_disaggregated(work, _cluster(token_cost=cost, token_clients=6, token_machines=3, mixed=True))
    assert validate_disaggregated(s) == []
    assert (~s.cluster.is_prompt(s.stage_machine)).any() and s.cluster.is_prompt(s.stage_machine).any()
    return s


def _rules(s: DisaggregatedSchedule) -> set[str]:
    return {v.rule for v in validate_disaggregated(s)}


def _set(arr: np.ndarray, index: int, value: object) -> np.ndarray:
    out = arr.copy()
    out[index] = value
    return out
