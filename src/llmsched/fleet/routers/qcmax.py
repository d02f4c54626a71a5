"""Q||Cmax: a closed batch's exact assignment of predicted output tokens over engine speeds."""

from __future__ import annotations

import numpy as np

from llmsched.fleet.routers.base import BaseRouter, Loads, RouterSetup

__all__ = ["QcmaxRouter", "relative_speeds"]


def relative_speeds(setup: RouterSetup) -> np.ndarray | None:
    """The engines' speeds over the fastest one's, or None when they are all alike (the
    solvers' identical machines)."""
    speed = np.ones(setup.engines) if setup.speeds is None else np.asarray(setup.speeds, dtype=np.float64)
    return None if bool(np.all(speed == speed[0])) else speed / speed.max()


class QcmaxRouter(BaseRouter):
    """Plans the whole batch at the start: the makespan-minimising assignment of the requests'
    sizes (planned output tokens) to engines of their speeds (:func:`llmsched.mip.solve_pcmax`,
    Q||Cmax, or P||Cmax when the engines are alike), within ``RouterSetup.time_limit``."""

    name = "qcmax"
    weighs = True
    closed_batch = True

    def start(self, setup: RouterSetup) -> None:
        from llmsched.mip import solve_pcmax  # the solvers load only when asked for

        result = solve_pcmax(
            np.maximum(setup.weight, 0).astype(np.int64),
            setup.engines,
            time_limit=setup.time_limit,
            speeds=relative_speeds(setup),
        )
        self._engine = np.asarray(result.assignment, dtype=np.int64).tolist()

    def route(self, request: int, loads: Loads) -> int:
        return self._engine[request]
