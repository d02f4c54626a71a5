"""The mico router plans a closed batch with Mico's group distribution."""

from __future__ import annotations

import numpy as np

from llmsched.fleet.routers.base import RouterSetup
from llmsched.fleet.routers.mico import MicoRouter
from llmsched.mip.mico import mico_distribute
from tests.fleet.routers import loads


def _plan(sizes: np.ndarray, engines: int, speeds: np.ndarray | None = None) -> list[int]:
    router = MicoRouter()
    n = len(sizes)
    router.start(RouterSetup(engines, n, np.ones(n), sizes, np.arange(n), speeds=speeds))
    # The plan is made at the start: busy engines do not change it.
    busy = loads(engines, held=np.arange(engines)[::-1])
    return [router.route(request, busy) for request in range(n)]


def test_the_plan_is_mico_distribute() -> None:
    sizes = np.random.default_rng(0).integers(1, 500, 200)
    assert _plan(sizes, 3) == mico_distribute(sizes, 3).tolist()
    speeds = np.array([50.0, 100.0, 200.0])
    plan = _plan(sizes, 3, speeds)
    assert plan == mico_distribute(sizes, 3, speeds=speeds / 200.0).tolist()
    assert plan != mico_distribute(sizes, 3).tolist()
    # The fastest engine takes the most tokens.
    assert np.argmax(np.bincount(plan, weights=sizes)) == 2
    assert MicoRouter.closed_batch and MicoRouter.weighs
