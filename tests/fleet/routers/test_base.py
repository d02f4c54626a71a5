"""The router contract: what meets it, and the check of every engine a router answers."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from llmsched.fleet.routers.base import (
    BaseRouter,
    Router,
    RouterSetup,
    check_router,
    engine_index,
    read_only_view,
)
from tests.fleet.routers import loads


class Last(BaseRouter):
    """Everything to the last engine."""

    name = "last"

    def start(self, setup: RouterSetup) -> None:
        self.engines = setup.engines

    def route(self, request: int, loads) -> int:
        return self.engines - 1


def test_a_base_router_subclass_meets_the_contract_with_its_defaults() -> None:
    """A subclass that names itself and routes is a Router: online, unweighing, unseeded."""
    router = Last()
    assert check_router(router) is router and isinstance(router, Router)
    assert (router.weighs, router.closed_batch, router.seeded) == (False, False, False)
    router.start(RouterSetup(3, 1, np.ones(1), np.zeros(0), np.arange(1)))
    assert router.route(0, loads(3)) == 2
    assert repr(router) == "Last()"
    with pytest.raises(NotImplementedError, match="route"):
        BaseRouter().route(0, loads(1))


def test_what_a_router_lacks_is_named() -> None:
    """An object short of the contract is refused with every method and flag it lacks."""

    class NoRoute:
        name = "no-route"
        weighs = False
        closed_batch = False

        def start(self, setup: RouterSetup) -> None: ...

    with pytest.raises(TypeError, match="NoRoute lacks a route method"):
        check_router(NoRoute())
    with pytest.raises(TypeError, match=r"lacks a start method, a route method, a str name \(has none\)"):
        check_router(object())
    flagged = Last()
    flagged.weighs = "yes"  # type: ignore[assignment]
    with pytest.raises(TypeError, match=r"a bool weighs \(has str 'yes'\)"):
        check_router(flagged)
    with pytest.raises(TypeError, match="int lacks"):
        check_router(3)
    with pytest.raises(TypeError, match=r"not a class: pass Last\(\)"):
        check_router(Last)


@pytest.mark.parametrize("answer", [0, 2, np.int64(1), np.int32(2)])
def test_an_engine_index_is_an_integer_in_range(answer) -> None:
    """numpy integers pass too, handed back as Python ints."""
    index = engine_index(Last(), 5, answer, 3)
    assert index == answer and type(index) is int


@pytest.mark.parametrize("answer", [3, -1, 1.0, True, np.bool_(False), "0", None])
def test_any_other_answer_is_refused_naming_router_request_and_answer(answer) -> None:
    """Out of range, a float, a bool, a str or None is not an engine."""
    with pytest.raises(ValueError, match=rf"router 'last' sent request 5 to {answer!r}.*\[0, 3\)") as info:
        engine_index(Last(), 5, answer, 3)
    assert "not an engine" in str(info.value)


def test_a_setup_hands_out_read_only_views() -> None:
    """A router cannot change what the fleet (or another router) reads; the caller's own arrays
    stay writable, and replace gives an equal setup."""
    prompt = np.array([10, 20, 30])
    setup = RouterSetup(2, 3, prompt, np.array([3, 1, 4]), np.arange(3), speeds=np.array([1.0, 2.0]))
    for array in (setup.prompt, setup.weight, setup.order, setup.speeds):
        assert isinstance(array, np.ndarray) and not array.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        setup.prompt[0] = 5
    prompt[0] = 11
    assert setup.prompt[0] == 11
    copy = dataclasses.replace(setup)
    assert np.array_equal(copy.weight, setup.weight)
    assert copy.speeds is not None and copy.speeds.tolist() == [1.0, 2.0]
    assert RouterSetup(1, 0, np.ones(0), np.ones(0), np.ones(0)).speeds is None
    shown = read_only_view(prompt)
    prompt[1] = 21
    assert shown[1] == 21 and not shown.flags.writeable and prompt.flags.writeable
