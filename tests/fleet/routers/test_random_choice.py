"""The random router: a uniformly drawn engine, the same for the same seed."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched.fleet.routers.base import RouterSetup
from llmsched.fleet.routers.random_choice import RandomRouter
from tests.fleet.routers import loads


def _routes(seed: object, n: int = 400, engines: int = 4, order: np.ndarray | None = None) -> list[int]:
    router = RandomRouter()
    order = np.arange(n) if order is None else order
    router.start(RouterSetup(engines, n, np.ones(n), np.zeros(0), order, seed=seed))
    return [router.route(request, loads(engines)) for request in range(n)]


def test_the_same_seed_gives_the_same_routing() -> None:
    """A seed decides the routing, and a restart forgets the earlier run's draws."""
    assert _routes(3) == _routes(3)
    assert _routes(3) != _routes(4)
    # Restarting the same object forgets the earlier run.
    router = RandomRouter()
    setup = RouterSetup(4, 50, np.ones(50), np.zeros(0), np.arange(50), seed=9)
    router.start(setup)
    first = [router.route(i, loads(4)) for i in range(50)]
    router.start(setup)
    assert [router.route(i, loads(4)) for i in range(50)] == first
    assert router.seeded


def test_draws_are_uniform_and_dealt_in_order_of_arrival() -> None:
    """Every engine gets about a quarter; the p-th arrival gets the p-th draw, so fewer later
    requests change nothing for the earlier ones; a generator is drawn from as it is."""
    counts = np.bincount(_routes(0, n=4000), minlength=4)
    assert np.all(np.abs(counts - 1000) < 120)
    draws = np.random.default_rng(5).integers(0, 4, size=400)
    reverse = np.arange(400)[::-1].copy()
    got = _routes(5, order=reverse)
    assert [got[request] for request in reverse] == draws.tolist()
    assert _routes(5, n=100) == _routes(5, n=400)[:100]
    assert _routes(np.random.default_rng(5)) == draws.tolist()


def test_a_bad_seed_is_refused() -> None:
    """A negative seed is refused by name."""
    with pytest.raises(ValueError, match="seed"):
        _routes(-1)
