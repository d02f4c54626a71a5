"""Round robin: requests in order of arrival to engines 0, 1, ..., N-1, 0, ..."""

from __future__ import annotations

from llmsched.fleet.routers.base import BaseRouter, Loads, RouterSetup

__all__ = ["RoundRobinRouter"]


class RoundRobinRouter(BaseRouter):
    """Deals the requests to the engines in turn, in order of arrival (ties by index).

    What a request gets depends only on its place in the arrival order, not on the requests
    that come after it nor on the engines' loads.
    """

    name = "round-robin"

    def start(self, setup: RouterSetup) -> None:
        self._engine = [0] * setup.requests
        for place, request in enumerate(setup.order.tolist()):
            self._engine[request] = place % setup.engines

    def route(self, request: int, loads: Loads) -> int:
        return self._engine[request]
