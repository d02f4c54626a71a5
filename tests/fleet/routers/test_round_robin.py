"""Round robin deals the requests to the engines in turn, in order of arrival."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from llmsched.fleet.routers.base import RouterSetup
from llmsched.fleet.routers.round_robin import RoundRobinRouter
from tests.fleet.routers import loads


def test_deals_in_order_of_arrival_not_of_index() -> None:
    """Request 2 arrives first and gets engine 0; then 0, 1, 3 get 1, 0, 1."""
    router = RoundRobinRouter()
    order = np.array([2, 0, 1, 3])
    router.start(RouterSetup(2, 4, np.ones(4), np.zeros(0), order))
    assert [router.route(i, loads(2)) for i in order] == [0, 1, 0, 1]
    assert [router.route(i, loads(2)) for i in range(4)] == [1, 0, 0, 1]


@given(st.permutations(list(range(12))), st.integers(1, 5))
def test_the_place_in_the_arrival_order_decides_alone(order, engines) -> None:
    """The p-th arrival goes to engine p mod N whatever the loads, so the engines' counts differ
    by at most one."""
    router = RoundRobinRouter()
    router.start(RouterSetup(engines, len(order), np.ones(len(order)), np.zeros(0), np.array(order)))
    busy = loads(engines, held=range(engines))
    got = [router.route(request, busy) for request in order]
    assert got == [place % engines for place in range(len(order))]
    counts = np.bincount(got, minlength=engines)
    assert counts.max() - counts.min() <= 1
    assert not router.weighs and not router.closed_batch
