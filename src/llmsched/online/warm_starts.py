"""Warm starts for the full MIP: the heuristic strategies run under the MIP's semantics.

:func:`llmsched.mip.solve_full` starts from the schedules its caller gives it (the MIP layer
does not run online policies); :func:`heuristic_schedules` makes the usual set, and the
same schedules serve to compare each strategy with the MIP's optimum.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from llmsched.core.checks import positive_int, time_limit
from llmsched.core.cost import LevelCostModel, LinearCostModel
from llmsched.core.workload import Workload
from llmsched.engines.competition.schedule import Schedule
from llmsched.online.registry import make_request_policy
from llmsched.online.simulate import simulate

__all__ = ["HEURISTICS", "heuristic_schedules"]

#: (name, request policy, iteration policy) of every strategy run as a warm start.
#:
#: :meta hide-value:
HEURISTICS = (
    ("baseline", "fcfs", "prefill-first"),
    ("offline", "offline-oracle", "prefill-first"),
    ("online", "sorted-preemptive-rr-oracle", "lagrangian"),
    ("hybrid", "hybrid-oracle", "lagrangian"),
    ("longest-first", "longest-first-oracle", "lagrangian"),
    ("longest-first/prefill-first", "longest-first-oracle", "prefill-first"),
)


def heuristic_schedules(
    workload: Workload,
    cost: LevelCostModel | LinearCostModel,
    clients: int,
    assignment_time_limit: float = math.inf,
) -> dict[str, Schedule]:
    """Every strategy of :data:`HEURISTICS` run under the MIP's semantics, by name.

    The strategies are clairvoyant (``oracle`` sizes: they read the true output lengths), as
    the MIP is; the results are warm starts and yardsticks, not online runs.

    Parameters
    ----------
    workload, clients
        The instance.
    cost
        The MIP's cost model: a :class:`LevelCostModel`, or a :class:`LinearCostModel` turned
        into one by ``cost.to_levels(clients)`` exactly as :func:`~llmsched.mip.solve_full`
        does, so the schedules are valid warm starts for it.
    assignment_time_limit
        Wall-clock safety net (seconds) of the offline assignment that ``offline`` and
        ``hybrid`` start from; none by default (it stops on its deterministic work budget).

    Returns
    -------
    dict
        Strategy name -> its :class:`~llmsched.Schedule`.
    """
    clients = positive_int("clients", clients)
    if isinstance(cost, LinearCostModel):
        cost = cost.to_levels(clients)
    if not isinstance(cost, LevelCostModel):
        raise TypeError(f"cost must be a LevelCostModel or LinearCostModel, got {type(cost).__name__}")
    limit = time_limit("assignment_time_limit", assignment_time_limit)
    # The two strategies that solve an offline assignment get the caller's limit.
    limited: dict[str, Callable[[], Any]] = {
        "offline-oracle": lambda: make_request_policy("offline", sizes="oracle", time_limit=limit),
        "hybrid-oracle": lambda: make_request_policy("hybrid", sizes="oracle", time_limit=limit),
    }
    return {
        name: simulate(
            workload, cost, clients, limited[requests]() if requests in limited else requests, iterations
        )
        for name, requests, iterations in HEURISTICS
    }
