"""Mico: a closed batch's group distribution of predicted output tokens over engines."""

from __future__ import annotations

import numpy as np

from llmsched.fleet.routers.base import BaseRouter, Loads, RouterSetup
from llmsched.fleet.routers.qcmax import relative_speeds

__all__ = ["MicoRouter"]


class MicoRouter(BaseRouter):
    """Plans the whole batch at the start with Mico's O(n) rule
    (:func:`llmsched.mip.mico.mico_distribute`): requests grouped by size (planned output
    tokens) into ten length buckets, the longest first, each to the engine that finishes its
    share soonest at its speed."""

    name = "mico"
    weighs = True
    closed_batch = True

    def start(self, setup: RouterSetup) -> None:
        from llmsched.mip.mico import mico_distribute

        plan = mico_distribute(np.asarray(setup.weight), setup.engines, speeds=relative_speeds(setup))
        self._engine = np.asarray(plan, dtype=np.int64).tolist()

    def route(self, request: int, loads: Loads) -> int:
        return self._engine[request]
