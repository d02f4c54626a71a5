"""An RRA configuration as policies of the event simulator, to cross-check XSimulator.

On one engine (one pipeline stage), RRA with ``(B_E, N_D)`` is: prefill the next ``B_E``
waiting requests, decode ``N_D`` iterations, repeat. :func:`rra_policies` gives that pair of
policies for the decision loop; :func:`crosscheck` runs sampled workloads through
the event simulator and compares the measured steady throughput with XSimulator's estimate
under the same cost model: a :class:`~llmsched.LinearCostModel`, or a
:class:`~llmsched.ContextCostModel` whose decode iterations read their context (``p + j``
tokens per request in both simulators).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from llmsched.core.checks import positive_int
from llmsched.core.cost import ContextCostModel, CostModel, LinearCostModel
from llmsched.core.schedule import PREFILL
from llmsched.engines.competition.schedule import Schedule
from llmsched.engines.loop import simulate_policies
from llmsched.exegpt.xsim import XSimulator
from llmsched.online.baselines import FCFS
from llmsched.policies import PREFILL_NOW, EngineView, KnownRequests

__all__ = [
    "RRAIterations",
    "RRARequests",
    "crosscheck",
    "rra_policies",
    "steady_decode_batch",
    "steady_throughput",
]


class RRARequests(FCFS):
    """First come, first served, at most ``batch`` requests per prefill stage."""

    name = "rra"

    def __init__(self, batch: int):
        super().__init__(max_batch=batch)
        self.batch = self.max_batch


class RRAIterations:
    """Prefill after every ``iterations`` decode iterations (while requests wait)."""

    name = "rra"

    def __init__(self, iterations: int):
        self.iterations = positive_int("iterations", iterations)

    def start(self, known: KnownRequests, cost: CostModel, clients: int) -> None:
        pass

    def decide(self, engine: EngineView) -> int:
        done = engine.stage_iterations
        if not engine.just_prefilled and done >= self.iterations:
            return PREFILL_NOW
        return self.iterations - done


def rra_policies(batch: int, iterations: int) -> tuple[RRARequests, RRAIterations]:
    """The request and iteration policy of RRA with ``B_E = batch`` and ``N_D = iterations``."""
    return RRARequests(batch), RRAIterations(iterations)


def steady_throughput(schedule: Schedule, trim: float = 0.2) -> float:
    """Requests finished per second between the ``trim`` and ``1 - trim`` quantiles of the
    finish times (the ramp-up and the drain left out)."""
    if not 0 <= trim < 0.5:
        raise ValueError(f"trim must be in [0, 0.5), got {trim!r}")
    finish = np.sort(schedule.finish)
    lo = math.floor(trim * (len(finish) - 1))
    hi = math.ceil((1 - trim) * (len(finish) - 1))
    if hi <= lo or finish[hi] <= finish[lo]:
        raise ValueError("too few requests to measure a steady throughput")
    return float((hi - lo) / (finish[hi] - finish[lo]))


def steady_decode_batch(schedule: Schedule, trim: float = 0.2) -> float:
    """Mean number of requests decoding in the first iteration after each prefill stage,
    over the stages between the ``trim`` and ``1 - trim`` quantiles (XSimulator's ``B_D``)."""
    prefills = np.flatnonzero(schedule.stage_kind == PREFILL)
    lo, hi = int(trim * len(prefills)), math.ceil((1 - trim) * len(prefills))
    first = schedule.stage_first_iteration[prefills[lo:hi]]
    started = np.searchsorted(np.sort(schedule.request_decode_start), first, side="right")
    ended = np.searchsorted(np.sort(schedule.request_decode_end), first, side="right")
    return float(np.mean(started - ended))


def crosscheck(
    configs: Iterable[tuple[int, int]],
    task: str = "S",
    cost: LinearCostModel | ContextCostModel | None = None,
    requests: int = 4000,
    seeds: Iterable[int] = (0, 1, 2),
    weights: str = "population",
) -> Any:
    """XSimulator's RRA throughput against the event simulator's, per ``(B_E, N_D)``.

    Both use ``cost`` (default :meth:`LinearCostModel.paper`, no prefill capacity limit);
    XSimulator runs one GPU, one layer (:meth:`XSimulator.one_engine`). A
    :class:`~llmsched.ContextCostModel` runs with its context terms in both: the event
    simulator charges each decode iteration the context its requests hold, XSimulator the
    mean context of a decoding sequence; its ``prefill_per_square`` must be 0 (the layer
    model's encoding is linear in tokens). The event simulator runs ``requests`` requests of
    the task, all waiting at time 0, per seed, with enough clients never to bind.
    Returns a DataFrame with both throughputs and the relative error in percent.

    Raises
    ------
    TypeError
        If ``cost`` is neither a ``LinearCostModel`` nor a ``ContextCostModel``.
    ValueError
        If the task is unknown, no seed or fewer than 50 requests are given, or a context
        model has ``prefill_per_square`` > 0.
    """
    import pandas as pd

    from llmsched.workloads import EXEGPT_TASKS, exegpt_task

    base = LinearCostModel.paper() if cost is None else cost
    if not isinstance(base, (LinearCostModel, ContextCostModel)):
        raise TypeError(f"cost must be a LinearCostModel or a ContextCostModel, got {type(base).__name__}")
    key = task.upper() if isinstance(task, str) else task
    if not isinstance(key, str) or key not in EXEGPT_TASKS:
        raise ValueError(f"unknown ExeGPT task {task!r}; choose one of {sorted(EXEGPT_TASKS)}")
    seeds = list(seeds)
    if not seeds:
        raise ValueError("crosscheck needs at least one seed")
    requests = int(requests)
    if requests < 50:
        raise ValueError(f"requests must be at least 50 to measure a steady throughput, got {requests}")
    spec_in = EXEGPT_TASKS[key][0]
    sim = XSimulator.one_engine(base, key, weights=weights)  # type: ignore[arg-type]
    rows = []
    for batch, iterations in configs:
        estimate = sim.rra(batch, iterations)
        # The same coefficients (context terms included), with room for a full batch.
        engine = dataclasses.replace(base, prefill_capacity=batch * spec_in.max)
        clients = int(4 * estimate.decode_batch) + 2 * batch
        measured, batches = [], []
        for seed in seeds:
            workload = exegpt_task(key, requests, seed)
            rp, ip = rra_policies(batch, iterations)
            schedule = simulate_policies(workload, engine, clients, rp, ip)
            measured.append(steady_throughput(schedule))
            batches.append(steady_decode_batch(schedule))
        event = float(np.mean(measured))
        rows.append(
            {
                "B_E": batch,
                "N_D": iterations,
                "xsim_decode_batch": estimate.decode_batch,
                "event_decode_batch": float(np.mean(batches)),
                "xsim_throughput": estimate.throughput,
                "event_throughput": event,
                "error_pct": 100 * (estimate.throughput - event) / event,
            }
        )
    return pd.DataFrame(rows)
