"""Join the shortest queue counted in requests: the fewest requests held, ties to the lowest
index; among engines of equal clients, jsq's choice."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from llmsched.fleet.routers import REGISTRY, check_router, make_router
from llmsched.fleet.routers.base import Loads
from llmsched.fleet.routers.jsq import JsqRouter
from llmsched.fleet.routers.jsq_requests import JsqRequestsRouter
from tests.fleet.routers import loads


def _loads(held: list[int], clients: list[int]) -> Loads:
    return loads(len(held), held=held, clients=clients)


def test_counts_requests_whatever_the_clients_and_breaks_ties_low() -> None:
    """3 requests on 4 clients are more than 1 on 1 (jsq, per client, says the opposite)."""
    router = JsqRequestsRouter()
    assert router.route(0, _loads([1, 3], [1, 4])) == 0
    assert JsqRouter().route(0, _loads([1, 3], [1, 4])) == 1
    assert router.route(0, _loads([4, 2, 2], [1, 1, 1])) == 1


@given(st.integers(1, 64), st.lists(st.integers(0, 200), min_size=1, max_size=9))
def test_chooses_as_jsq_among_engines_of_equal_clients(clients, held) -> None:
    loads = _loads(held, [clients] * len(held))
    chosen = JsqRequestsRouter().route(0, loads)
    assert type(chosen) is int
    assert chosen == min(range(len(held)), key=lambda k: (held[k], k)) == JsqRouter().route(0, loads)


def test_is_a_registered_online_router() -> None:
    router = make_router("jsq-requests")
    assert REGISTRY["jsq-requests"] is JsqRequestsRouter and check_router(router) is router
    assert router.name == "jsq-requests"
    assert not router.weighs and not router.closed_batch
