"""Power of two choices: the less loaded of two engines drawn at random."""

from __future__ import annotations

import numpy as np

from llmsched.core.checks import rng
from llmsched.fleet.routers.base import BaseRouter, Loads, RouterSetup

__all__ = ["PowerOfTwoRouter"]


class PowerOfTwoRouter(BaseRouter):
    """Draws two distinct engines for each request (every pair as likely) and sends it to the
    one holding fewer requests per client; ties to the lower index.

    The draws are one row per request, in order of arrival (ties by index): what a request
    draws does not depend on how many requests come after it.
    """

    name = "power-of-two"
    seeded = True

    def start(self, setup: RouterSetup) -> None:
        n, m = setup.requests, setup.engines
        pairs = rng("seed", setup.seed).random((n, 2))
        # The first engine of m, the second of the m - 1 others (shifted past the first).
        first = np.minimum((pairs[:, 0] * m).astype(np.int64), m - 1)
        second = np.minimum((pairs[:, 1] * max(m - 1, 1)).astype(np.int64), max(m - 2, 0))
        second += second >= first
        self._pair: list[tuple[int, int]] = [(0, 0)] * n
        for place, request in enumerate(setup.order.tolist()):
            self._pair[request] = (int(first[place]), int(second[place]))
        self._engines = m

    def route(self, request: int, loads: Loads) -> int:
        if self._engines == 1:
            return 0
        a, b = self._pair[request]
        held, clients = loads.requests, loads.clients
        return a if (held[a] / clients[a], a) <= (held[b] / clients[b], b) else b
