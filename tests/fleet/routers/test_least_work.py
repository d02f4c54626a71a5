"""Least work: the engine with the least predicted seconds of work, this request's included."""

from __future__ import annotations

import numpy as np

from llmsched.fleet.routers.base import RouterSetup
from llmsched.fleet.routers.least_work import LeastWorkRouter
from tests.fleet.routers import loads


def test_prices_the_request_at_each_engine_s_rates() -> None:
    """Engine 0 holds less work (1.0 s against 1.2 s), but engine 1 is twice as fast: with this
    request of 100 prompt and 50 planned tokens it ends at 1.5 s against 1.6 s."""
    router = LeastWorkRouter()
    router.start(RouterSetup(2, 2, np.array([100, 100]), np.array([50, 0]), np.arange(2)))
    shown = loads(2, work=[1.0, 1.2], rates=[[1e-3, 1e-2], [5e-4, 5e-3]])
    assert router.route(0, shown) == 1
    # A request of no output tokens: 1.1 s against 1.25 s.
    assert router.route(1, shown) == 0
    assert router.weighs and not router.closed_batch


def test_ties_go_to_the_lowest_index() -> None:
    """Engines 1 and 2 end this request at the same time: engine 1 takes it."""
    router = LeastWorkRouter()
    router.start(RouterSetup(3, 1, np.array([10]), np.array([10]), np.arange(1)))
    assert router.route(0, loads(3, work=[2.0, 1.0, 1.0], rates=np.full((3, 2), 0.01))) == 1
