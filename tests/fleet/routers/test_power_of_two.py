"""Power of two choices: the less loaded of two distinct engines drawn at random."""

from __future__ import annotations

import numpy as np

from llmsched.fleet.routers.base import RouterSetup
from llmsched.fleet.routers.power_of_two import PowerOfTwoRouter
from tests.fleet.routers import loads


def _run(held: list[float], n: int = 3000, seed: int = 0) -> np.ndarray:
    m = len(held)
    router = PowerOfTwoRouter()
    router.start(RouterSetup(m, n, np.ones(n), np.zeros(0), np.arange(n), seed=seed))
    shown = loads(m, held=held)
    return np.bincount([router.route(request, shown) for request in range(n)], minlength=m)


def test_picks_the_lesser_of_two_distinct_draws() -> None:
    """With loads 0 < 5 < 9 the most loaded engine is never picked (two draws of it would pick
    it); the least loaded is picked whenever drawn, in 2 of the 3 pairs; the middle one in 1."""
    counts = _run([0, 5, 9]) / 3000
    assert counts[2] == 0
    assert abs(counts[0] - 2 / 3) < 0.04 and abs(counts[1] - 1 / 3) < 0.04
    # Two engines: both are always drawn, so the less loaded always wins.
    assert _run([4, 1]).tolist() == [0, 3000]


def test_ties_go_to_the_lower_index_and_one_engine_takes_all() -> None:
    """Among equal loads the lower of the two drawn engines wins, so the last never does, and
    the lower an engine the more it wins; a single engine takes everything."""
    counts = _run([2, 2, 2, 2])
    assert counts[3] == 0 and counts[0] > counts[1] > counts[2] > 0
    assert _run([7]).tolist() == [3000]


def test_the_same_seed_gives_the_same_routing() -> None:
    """A seed decides the draws; the router says it is seeded and does not weigh."""
    assert _run([3, 1, 2, 0, 1], seed=4).tolist() == _run([3, 1, 2, 0, 1], seed=4).tolist()
    assert PowerOfTwoRouter.seeded and not PowerOfTwoRouter.weighs
