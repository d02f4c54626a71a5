"""The result of :func:`llmsched.mip.solve_pcmax` (its own module, so that the backends that
build one need not import the pipeline back)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from llmsched.core.result import Result

__all__ = ["PcmaxResult"]


@dataclass(frozen=True, kw_only=True, eq=False)
class PcmaxResult(Result):
    """Outcome of :func:`~llmsched.mip.pcmax.solve.solve_pcmax` (a :class:`~llmsched.core.result.Result`).

    Attributes
    ----------
    objective
        The best makespan found (machine load, or load / speed for uniform machines);
        also available as ``makespan``. Infinite when a backend found no solution.
    lower_bound
        A proven lower bound on the optimal makespan.
    assignment
        Machine of each job, in the order the jobs were given (all -1 if a backend found no
        solution within the time limit). Read-only.
    status
        ``optimal`` only when ``lower_bound`` proves ``makespan`` optimal; ``time_limit``
        when the wall-clock limit cut the search short; ``feasible`` when the search's
        deterministic budgets ran out without a proof.
    gap
        (makespan - lower_bound) / makespan.
    runtime
        Seconds spent (for information; no result depends on it).
    trace
        Bound and incumbent over time, with what produced each change (a tuple).
    backend
        ``pipeline``, ``scip`` or ``cpsat``.
    closed_by
        What closed the gap: the bound or heuristic whose result met the other side, as
        named in the trace (``""`` when open).
    """

    assignment: np.ndarray = field(repr=False)
    backend: str = "pipeline"
    closed_by: str = ""

    def __post_init__(self) -> None:
        # The result owns a read-only copy: neither the caller nor the solver can change it later.
        assignment = np.array(self.assignment, dtype=np.int64)
        assignment.setflags(write=False)
        object.__setattr__(self, "assignment", assignment)
        object.__setattr__(self, "trace", tuple(self.trace))

    @property
    def makespan(self) -> float:
        """The best makespan found (the ``objective``)."""
        return self.objective

    def loads(self, times: Any, machines: int) -> np.ndarray:
        """Load of every machine under ``assignment`` (``machines`` entries)."""
        return np.bincount(self.assignment, weights=np.asarray(times, dtype=np.float64), minlength=machines)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(
            np.array_equal(getattr(self, f.name), getattr(other, f.name))
            if f.name == "assignment"
            else getattr(self, f.name) == getattr(other, f.name)
            for f in fields(self)
        )

    __hash__ = None  # type: ignore[assignment]  # holds an array
