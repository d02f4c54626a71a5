"""PD competition's batching rule: a prefill stage, which pauses decoding, or a run of decode
iterations (the paper's engine; :mod:`llmsched.engines.competition.schedule` has the model).

At a decision point with requests ready and requests decoding, the iteration policy decides
(:class:`~llmsched.policies.IterationPolicy`): prefill now, or decode ``n`` more iterations.
With nothing decoding, ready requests are prefilled at once; right after a prefill stage
the engine decodes at least one iteration (stages alternate), whatever the policy says.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from llmsched.core.cost import CostModel
from llmsched.core.instance import check_instance
from llmsched.core.memory import KVMemory
from llmsched.core.schedule import DECODE, PREFILL
from llmsched.core.workload import Workload
from llmsched.engines.answers import check_decision, check_iteration_policy, policy_name
from llmsched.engines.competition.schedule import Schedule
from llmsched.engines.memory import check_memory
from llmsched.engines.rule import PREFILL_STAGE, LoopView, RuleStart, RunRecord
from llmsched.policies import DECODE_UNTIL_EVENT, PREFILL_NOW, IterationPolicy

__all__ = ["CompetitionRule"]


class CompetitionRule:
    """A prefill stage or a run of decode iterations, as ``iteration_policy`` decides.

    Parameters
    ----------
    iteration_policy
        An iteration-policy object (see :mod:`llmsched.policies`); it is started afresh
        with each run.
    memory
        The engine's KV-cache memory (:class:`~llmsched.core.memory.KVMemory`), or None for
        an engine whose clients alone bound what it holds.

    Raises
    ------
    TypeError
        When ``iteration_policy`` lacks the protocol's methods.
    """

    mode = "competition"
    # Free clients may always take requests (a prefill stage's capacity is the request
    # policy's to respect), and taken requests are prefilled at once: none is under way.
    admit_below = math.inf
    under_way: tuple[()] = ()
    first_cut = None  # every arrival may cut a decode run, while a client is free

    def __init__(self, iteration_policy: IterationPolicy, memory: KVMemory | None = None):
        check_iteration_policy(iteration_policy)
        self.memory = memory
        self.policy = iteration_policy
        self.view: LoopView | None = None
        self._decide = iteration_policy.decide
        self._prefilled_at = -1  # the decode iterations run before the last prefill stage
        self._decoded_at = 0  # the tokens decoded before it

    def check(self, workload: Workload, cost: CostModel, clients: int) -> None:
        check_instance(workload, cost, clients)
        if self.memory is not None:
            capacity = min(cost.prefill_capacity, getattr(self, "token_cap", math.inf))
            check_memory(workload, self.memory, clients, capacity)

    def start(self, engine: RuleStart) -> None:
        known = engine.known_for(self.policy)
        self.policy.start(known, engine.cost, engine.clients)
        self.view = LoopView(known, engine.cost, engine.clients, engine.running, engine.decode_start)
        self._decide = self.policy.decide
        self._prefilled_at = -1
        self._decoded_at = 0

    def plan(self, ready: int, active: int, iteration: int) -> int:
        if not ready:
            return DECODE_UNTIL_EVENT
        view: Any = self.view  # set by start
        if active:
            # No decode iteration since the last prefill stage: the engine must decode now.
            just_prefilled = view.just_prefilled = iteration == self._prefilled_at
            view.stage_iterations = iteration - self._prefilled_at
            view.stage_tokens = view._decoded - self._decoded_at
            decision = self._decide(view)
            if type(decision) is not int or decision < 0:
                decision = check_decision(decision, self.policy)
            if decision != PREFILL_NOW or just_prefilled:
                return decision or 1
        self._prefilled_at = iteration
        self._decoded_at = view._decoded
        return PREFILL_STAGE

    def taken(self, pairs: list[tuple[int, int]], active: int) -> int:
        return DECODE_UNTIL_EVENT  # never asked: plan answers PREFILL_STAGE, not TAKE

    def info(self, facts: dict[str, Any]) -> dict[str, Any]:
        # The iteration policy's name beside the request policy's, as the schedules always had it.
        named = {"request_policy": facts["request_policy"], "iteration_policy": policy_name(self.policy)}
        return {**named, **facts}

    def schedule(
        self, workload: Workload, cost: CostModel, clients: int, record: RunRecord, measured: bool
    ) -> Schedule:
        """The :class:`~llmsched.Schedule` of a run. Stages alternate: prefill stage ``k``,
        then the decode stage of the runs up to the next prefill stage (never empty: the
        requests just prefilled decode), so take ``k`` is prefilled in stage ``2 k``."""
        at = np.asarray(record.prefill_run, dtype=np.int64)
        upto = np.append(at[1:], len(record.run_start)) if at.size else at
        if np.any(upto <= at):
            raise RuntimeError("a prefill stage was followed by no decode iteration; stages must alternate")
        done = np.concatenate(([0], np.cumsum(np.asarray(record.run_iterations, dtype=np.int64))))
        first = done[at]
        take = np.asarray(record.request_take, dtype=np.int64)
        decode_start = np.asarray(record.request_decode_start, dtype=np.int64)
        run_start = np.asarray(record.run_start, dtype=np.float64)
        run_step = np.asarray(record.run_step, dtype=np.float64)
        return Schedule(
            workload=workload,
            cost=cost,
            clients=clients,
            stage_kind=np.tile(np.array([PREFILL, DECODE], dtype=np.int8), at.size),
            stage_start=_alternate(record.prefill_start, run_start[at]),
            stage_end=_alternate(record.prefill_end, np.asarray(record.run_end, dtype=np.float64)[upto - 1]),
            stage_first_iteration=np.repeat(first, 2),
            stage_iterations=_alternate(np.zeros_like(first), done[upto] - first),
            run_start=run_start,
            run_iterations=done[1:] - done[:-1],
            run_iteration_time=np.asarray(record.run_time, dtype=np.float64),
            request_client=np.asarray(record.request_client, dtype=np.int64),
            request_prefill_stage=np.where(take >= 0, 2 * take, -1),
            request_decode_start=decode_start,
            request_decode_end=decode_start + workload.output_tokens,
            makespan=record.run_end[-1] if record.run_end else 0.0,
            measured=measured,
            info=record.info,
            # None when every run is at constant speed (a model blind to context).
            run_iteration_step=run_step if run_step.any() else None,
            request_parent=None if record.request_parent is None else np.asarray(record.request_parent),
            memory=self.memory,
        )


def _alternate(prefill: Any, decode: np.ndarray) -> np.ndarray:
    """The values of the prefill stages and of the decode stages, interleaved (prefill first)."""
    out = np.empty(2 * decode.size, dtype=decode.dtype)
    out[0::2] = prefill
    out[1::2] = decode
    return out
