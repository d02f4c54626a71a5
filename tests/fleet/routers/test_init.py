"""The registry of routers, and routers of the user's own in a fleet."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched import LinearCostModel, Workload
from llmsched.fleet.engine import Engine
from llmsched.fleet.routers import (
    REGISTRY,
    BaseRouter,
    Loads,
    RouterSetup,
    as_router,
    check_router,
    make_router,
    router_names,
)
from llmsched.fleet.simulate import ROUTERS, simulate_fleet
from llmsched.fleet.validate import validate_fleet

PAPER = LinearCostModel.paper()
ENGINES = [Engine(PAPER, 2), Engine(PAPER, 2), Engine(PAPER, 2)]
WORKLOAD = Workload([10, 20, 30, 40], [3, 1, 4, 2], arrival=[0.0, 0.1, 0.2, 0.3])


def test_the_registry_holds_every_router_under_its_own_name() -> None:
    """Each name makes a fresh router of that name; the flags are where the fleet reads them."""
    names = ("round-robin", "random", "jsq", "power-of-two", "least-work", "qcmax", "mico")
    # In this order (routers added later may stand anywhere among them).
    assert [name for name in router_names() if name in names] == list(names) and router_names() == ROUTERS
    for name, kind in REGISTRY.items():
        router = make_router(name)
        assert type(router) is kind and router.name == name and check_router(router) is router
        assert make_router(name) is not router  # a fresh one each time
    assert [n for n in names if REGISTRY[n].closed_batch] == ["qcmax", "mico"]
    assert [n for n in names if REGISTRY[n].weighs] == ["least-work", "qcmax", "mico"]


def test_an_unknown_name_is_refused_with_the_list() -> None:
    """By the registry and by the fleet, with the names it knows."""
    with pytest.raises(ValueError, match=r"router must be one of \['round-robin', 'random', .*got 'nearest'"):
        make_router("nearest")
    with pytest.raises(ValueError, match="router must be one of"):
        simulate_fleet(WORKLOAD, ENGINES, "nearest")


class Last(BaseRouter):
    """Everything to the last engine; it records what it was shown."""

    name = "last"

    def start(self, setup: RouterSetup) -> None:
        self.engines = setup.engines
        self.seen: list[tuple[int, list[float]]] = []

    def route(self, request: int, loads: Loads) -> int:
        self.seen.append((request, loads.requests.tolist()))
        return np.int64(self.engines - 1)  # type: ignore[return-value]


def test_a_router_of_the_user_s_own_runs_the_fleet() -> None:
    """An object meeting the contract routes a fleet, numpy answers included."""
    router = Last()
    assert as_router(router) is router
    fleet = simulate_fleet(WORKLOAD, ENGINES, router)
    assert fleet.request_engine.tolist() == [2, 2, 2, 2] and validate_fleet(fleet) == []
    assert fleet.router == "last" and fleet.info["seed"] is None and fleet.info["sizes"] is None
    # Asked in order of arrival, it saw the requests each engine still held: request 0 (3
    # tokens) at 0.1 s, none at 0.2 s.
    assert router.seen == [(0, [0, 0, 0]), (1, [0, 0, 1]), (2, [0, 0, 0]), (3, [0, 0, 1])]
    # Started afresh, the same object runs the same again.
    again = simulate_fleet(WORKLOAD, ENGINES, router)
    assert len(router.seen) == 4
    np.testing.assert_array_equal(again.finish, fleet.finish)


def test_a_broken_answer_or_object_is_refused() -> None:
    """An answer that is not an engine, a write to the loads, or no router at all is refused."""

    class Beyond(Last):
        def route(self, request: int, loads: Loads) -> int:
            return self.engines if request == 2 else 0

    with pytest.raises(ValueError, match=r"router 'last' sent request 2 to 3, which is not an engine"):
        simulate_fleet(WORKLOAD, ENGINES, Beyond())

    class Halves(Last):
        def route(self, request: int, loads: Loads) -> int:
            return 0.5  # type: ignore[return-value]

    with pytest.raises(ValueError, match=r"sent request 0 to 0\.5"):
        simulate_fleet(WORKLOAD, ENGINES, Halves())

    class Writes(Last):
        def route(self, request: int, loads: Loads) -> int:
            loads.requests[0] = 99.0  # the fleet's own counts: read-only
            return 0

    with pytest.raises(ValueError, match="read-only"):
        simulate_fleet(WORKLOAD, ENGINES, Writes())
    with pytest.raises(TypeError, match="lacks a start method, a route method"):
        simulate_fleet(WORKLOAD, ENGINES, lambda request, loads: 0)  # type: ignore[arg-type]


def test_a_user_router_s_flags_are_checked_as_a_registered_one_s() -> None:
    """closed_batch and weighs bring the same refusals and info as qcmax's."""

    class Planner(Last):
        name = "planner"
        weighs = True
        closed_batch = True

    with pytest.raises(ValueError, match="router 'planner' assigns a closed batch"):
        simulate_fleet(WORKLOAD.replace(predicted_output=[3, 1, 4, 2]), ENGINES, Planner())
    with pytest.raises(ValueError, match="predicted_output"):
        simulate_fleet(WORKLOAD.replace(arrival=np.zeros(4)), ENGINES, Planner())
    fleet = simulate_fleet(WORKLOAD.replace(arrival=np.zeros(4)), ENGINES, Planner(), sizes="oracle")
    assert fleet.info["clairvoyant"] and fleet.info["sizes"] == "oracle"
