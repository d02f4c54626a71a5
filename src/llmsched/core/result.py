"""The one result vocabulary of every solver: status, objective, bound, gap, runtime, trace.

Every solver in llmsched (P||Cmax, the full MIP, the ExeGPT search) returns a subclass of
:class:`Result`. The names mean the same everywhere:

* ``status``: how the solve ended (:class:`Status`); ``optimal`` only when proven;
* ``objective``: the value of the best solution found (``inf`` when minimising without one);
* ``lower_bound``: a proven lower bound on the optimal objective of a minimisation
  (``-inf`` when none is proven). A feasible solution never raises it;
* ``gap``: ``(objective - lower_bound) / objective``, 0 when closed, ``inf`` without a solution;
* ``runtime``: seconds spent (wall clock: for information only, never for a decision);
* ``trace``: the bound and incumbent over the solve, with what produced each change.

Search effort is counted in deterministic work (nodes, moves, iterations); a wall-clock
time limit is only a safety net, and when it fires the status says ``time_limit``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Result", "Status", "TracePoint", "Tracer", "relative_gap"]


class Status(StrEnum):
    """How a solve ended. ``OPTIMAL`` only when the bound proves the incumbent optimal."""

    OPTIMAL = "optimal"
    FEASIBLE = "feasible"  # a solution, not proven optimal, and the solver stopped on its own
    TIME_LIMIT = "time_limit"  # stopped by the wall-clock limit, with the best solution and bound
    INFEASIBLE = "infeasible"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class TracePoint:
    """Incumbent and bound at a moment of the solve, and what produced the change."""

    time: float
    lower_bound: float
    upper_bound: float
    source: str


def relative_gap(upper: float, lower: float) -> float:
    """(upper - lower) / upper, 0 when closed, inf when there is no solution."""
    if not math.isfinite(upper):
        return math.inf
    if upper <= 0:
        return 0.0
    return max(0.0, (upper - lower) / upper)


@dataclass(frozen=True, kw_only=True)
class Result:
    """What every solver returns (see the module docstring for what each field means)."""

    status: Status
    objective: float
    lower_bound: float
    gap: float
    runtime: float
    trace: tuple[TracePoint, ...] = field(default=(), repr=False)

    def trace_frame(self) -> pd.DataFrame:
        """The trace as a DataFrame (time, lower_bound, upper_bound, source)."""
        import pandas as pd

        return pd.DataFrame(
            [p.__dict__ for p in self.trace], columns=["time", "lower_bound", "upper_bound", "source"]
        )


class Tracer:
    """Collects the trace of bound and incumbent over a solve and keeps the wall-clock safety net.

    A bound above the incumbent, or an incumbent below the bound, is a contradiction (a proof
    that the optimum is worse than a solution in hand): either raises ``RuntimeError`` rather
    than letting a false ``optimal`` out. ``tolerance`` (relative) absorbs the rounding of
    solvers that close gaps within their own tolerances.
    """

    def __init__(self, time_limit: float, tolerance: float = 1e-9):
        self.time_limit = float(time_limit)
        self.start = time.perf_counter()
        self.lower_bound = -math.inf
        self.upper_bound = math.inf
        self.points: list[TracePoint] = []
        self._tolerance = tolerance

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def remaining(self) -> float:
        return max(0.0, self.time_limit - self.elapsed())

    def expired(self) -> bool:
        return self.elapsed() >= self.time_limit

    def _slack(self, value: float) -> float:
        return self._tolerance * max(1.0, abs(value))

    def bound(self, value: float, source: str) -> None:
        """Raise the proven lower bound to ``value`` (no effect when it is not higher)."""
        if value > self.upper_bound + self._slack(self.upper_bound):
            raise RuntimeError(
                f"{source} claims a lower bound of {value!r}, above the incumbent {self.upper_bound!r}: "
                "a bound must never exceed a solution in hand"
            )
        if value > self.lower_bound:
            self.lower_bound = float(value)
            self._record(source)

    def incumbent(self, value: float, source: str) -> bool:
        """Offer a solution's objective; True when it improves the incumbent."""
        if value < self.lower_bound - self._slack(self.lower_bound):
            raise RuntimeError(
                f"{source} offers a solution of {value!r}, below the proven lower bound "
                f"{self.lower_bound!r}: either the solution or the bound is wrong"
            )
        if value < self.upper_bound:
            self.upper_bound = float(value)
            self._record(source)
            return True
        return False

    def closed(self) -> bool:
        return self.lower_bound >= self.upper_bound

    def figures(self, objective: float, lower_bound: float) -> dict[str, Any]:
        """The :class:`Result` fields of the solve this tracer follows, ending with
        ``objective`` and ``lower_bound``: those two, their gap (:func:`relative_gap`), the
        seconds elapsed and the trace so far."""
        return {
            "objective": objective,
            "lower_bound": lower_bound,
            "gap": relative_gap(objective, lower_bound),
            "runtime": self.elapsed(),
            "trace": tuple(self.points),
        }

    def _record(self, source: str) -> None:
        self.points.append(TracePoint(self.elapsed(), self.lower_bound, self.upper_bound, source))
