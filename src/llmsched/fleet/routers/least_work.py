"""Least work: Mico's token balance with predictions, priced at each engine's speed."""

from __future__ import annotations

import numpy as np

from llmsched.fleet.routers.base import BaseRouter, Loads, RouterSetup

__all__ = ["LeastWorkRouter"]


class LeastWorkRouter(BaseRouter):
    """Sends each request to the engine with the least predicted work still to do, this
    request's included, in seconds: the prompt and planned output tokens of the requests it
    holds, each priced at the engine's busy rate
    (:attr:`~llmsched.fleet.engine.Engine.seconds_per_token`), so faster engines take more.
    Ties to the lowest index."""

    name = "least-work"
    weighs = True

    def start(self, setup: RouterSetup) -> None:
        self._prompt = setup.prompt.tolist()
        self._weight = setup.weight.tolist()

    def route(self, request: int, loads: Loads) -> int:
        rates = loads.rates
        # Work held, then the prompt, then the output: a float sum's rounding depends on the
        # order, and so does the winner of a near-tie.
        ends = loads.work + self._prompt[request] * rates[:, 0]
        ends += self._weight[request] * rates[:, 1]
        return int(np.argmin(ends))
