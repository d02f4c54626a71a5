"""Random: a uniformly drawn engine for each request (seeded)."""

from __future__ import annotations

from llmsched.core.checks import rng
from llmsched.fleet.routers.base import BaseRouter, Loads, RouterSetup

__all__ = ["RandomRouter"]


class RandomRouter(BaseRouter):
    """Sends each request to an engine drawn uniformly from ``RouterSetup.seed``.

    One draw per request, dealt in order of arrival (ties by index): what a request gets does
    not depend on the requests that come after it, and the same seed gives the same routing.
    """

    name = "random"
    seeded = True

    def start(self, setup: RouterSetup) -> None:
        dealt = rng("seed", setup.seed).integers(0, setup.engines, size=setup.requests).tolist()
        self._engine = [0] * setup.requests
        for place, request in enumerate(setup.order.tolist()):
            self._engine[request] = dealt[place]

    def route(self, request: int, loads: Loads) -> int:
        return self._engine[request]
