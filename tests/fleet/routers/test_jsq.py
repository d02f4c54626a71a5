"""Join the shortest queue: the fewest requests held per client, ties to the lowest index."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from llmsched.fleet.routers.base import Loads
from llmsched.fleet.routers.jsq import JsqRouter
from tests.fleet.routers import loads


def _loads(held: list[int], clients: list[int]) -> Loads:
    return loads(len(held), held=held, clients=clients)


def test_counts_per_client_and_breaks_ties_low() -> None:
    """Requests held are counted per client, and equal loads go to the lowest index."""
    router = JsqRouter()
    # 3 of 4 clients busy is fewer per client than 1 of 1.
    assert router.route(0, _loads([1, 3], [1, 4])) == 1
    # Equal per client (1.0 each): the lowest index.
    assert router.route(0, _loads([2, 1, 4], [2, 1, 4])) == 0
    assert router.route(0, _loads([5, 2, 2], [1, 4, 4])) == 1


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(1, 8)), min_size=1, max_size=8))
def test_picks_the_lowest_load_per_client(engines) -> None:
    """For any loads, the choice is the least (held / clients, index)."""
    held, clients = zip(*engines, strict=True)
    chosen = JsqRouter().route(0, _loads(list(held), list(clients)))
    ratio = [h / c for h, c in engines]
    assert chosen == min(range(len(engines)), key=lambda k: (ratio[k], k))
