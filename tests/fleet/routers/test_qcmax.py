"""The qcmax router plans a closed batch with the exact P||Cmax (Q||Cmax) assignment."""

from __future__ import annotations

import numpy as np

from llmsched.fleet.routers.base import RouterSetup
from llmsched.fleet.routers.qcmax import QcmaxRouter, relative_speeds
from llmsched.mip import solve_pcmax
from tests.fleet.routers import loads


def _plan(sizes: list[int], engines: int, speeds: np.ndarray | None = None) -> list[int]:
    router = QcmaxRouter()
    n = len(sizes)
    router.start(RouterSetup(engines, n, np.ones(n), np.array(sizes), np.arange(n), speeds=speeds))
    # The plan is made at the start: busy engines do not change it.
    busy = loads(engines, held=np.arange(engines)[::-1])
    return [router.route(request, busy) for request in range(n)]


def test_the_plan_is_the_pcmax_assignment() -> None:
    """Alike engines: the plan is solve_pcmax's, here two engines of 15 tokens each."""
    sizes = [7, 5, 4, 4, 3, 3, 3, 1]
    plan = _plan(sizes, 2)
    assert plan == np.asarray(solve_pcmax(np.array(sizes), 2).assignment).tolist()
    assert sorted(np.bincount(plan, weights=sizes).tolist()) == [15, 15]  # the optimum
    assert QcmaxRouter.closed_batch and QcmaxRouter.weighs


def test_engines_of_different_speeds_are_weighed() -> None:
    """Engine 1 twice as fast: Q||Cmax with relative speeds (1/2, 1); alike engines: P||Cmax."""
    sizes = [9, 8, 6, 5, 4, 3, 2, 2, 1]
    speeds = np.array([100.0, 200.0])
    plan = _plan(sizes, 2, speeds)
    expected = solve_pcmax(np.array(sizes), 2, speeds=np.array([0.5, 1.0])).assignment
    assert plan == np.asarray(expected).tolist()
    # 40 tokens: 13 on the slow engine (26 s) and 27 on the fast one is the optimum.
    load = np.bincount(plan, weights=sizes, minlength=2)
    assert max(load[0] / 0.5, load[1]) == 27
    alike = RouterSetup(2, 0, np.ones(0), np.ones(0), np.ones(0), speeds=np.array([3.0, 3.0]))
    assert relative_speeds(alike) is None


def test_negative_sizes_count_as_nothing() -> None:
    """A negative size is planned as 0, as the solver takes only sizes >= 0."""
    assert _plan([-5, 4, 4], 2) == np.asarray(solve_pcmax(np.array([0, 4, 4]), 2).assignment).tolist()
