"""Minimising the makespan of jobs on parallel machines: P||Cmax, and Q||Cmax with speeds.

This is the offline model of Pang et al. (Eqs. 26-30): requests are jobs whose size is
their (predicted) decode work, clients are machines, and the makespan is t_d of the lower
bound of Eqs. 31-32. ``solve_pcmax`` runs a pipeline that stops as soon as the bound meets
the incumbent:

1. lower bounds: ceil(sum/m) and the largest job; Dell'Amico-Martello's bound over the
   k*m+1 largest jobs; Martello-Toth's L2 for bin packing, by binary search on the
   capacity; lifting to the next achievable subset sum;
2. upper bounds: LPT, the largest differencing method (Karmarkar-Karp), MULTIFIT, each
   improved by moves and swaps off the busiest machine; bin completion (machines filled
   one at a time to the bound by a subset-sum dynamic programme); a complete bin-completion
   search bisecting the gap (Korf's, with dominance; a refutation raises the bound); a
   large-neighbourhood search that repacks small groups of machines; randomised restarts
   that alternate bin completion with sequential partitioning in a random order;
3. an exact step for whatever gap remains: the arc-flow model of bin packing in SCIP,
   deciding the capacity one below the incumbent; where its graph is too large,
   bin-completion search at that capacity, then a CP-SAT model over aggregated job sizes
   (see :mod:`llmsched.mip.pcmax_exact`).

``backend="scip"`` or ``"cpsat"`` instead solves the paper's model as written (one binary
per job and machine), so the two can be compared honestly.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmsched.mip import pcmax_bounds as lb
from llmsched.mip import pcmax_heuristics as ub
from llmsched.mip.result import Status, TracePoint, Tracer, relative_gap

__all__ = ["PcmaxResult", "check_pcmax_input", "solve_pcmax"]

BACKENDS = ("pipeline", "scip", "cpsat")


@dataclass(frozen=True)
class PcmaxResult:
    """Outcome of :func:`solve_pcmax`.

    Attributes
    ----------
    makespan
        The best makespan found (machine load, or load / speed for uniform machines).
    lower_bound
        A proven lower bound on the optimal makespan.
    assignment
        Machine of each job, in the order the jobs were given (all -1 if a backend found no
        solution within the time limit; ``makespan`` is then infinite).
    status
        ``optimal`` only when ``lower_bound`` proves ``makespan`` optimal; ``time_limit``
        when the limit stopped the search; ``feasible`` when it stopped without proof.
    gap
        (makespan - lower_bound) / makespan.
    runtime
        Seconds spent.
    trace
        Bound and incumbent over time, with what produced each change.
    backend
        ``pipeline``, ``scip`` or ``cpsat``.
    closed_by
        The step that closed the gap (``""`` when open).
    """

    makespan: float
    lower_bound: float
    assignment: np.ndarray
    status: Status
    gap: float
    runtime: float
    trace: list[TracePoint] = field(repr=False)
    backend: str = "pipeline"
    closed_by: str = ""

    def loads(self, times: Any, machines: int) -> np.ndarray:
        return np.bincount(self.assignment, weights=np.asarray(times, dtype=np.float64), minlength=machines)

    def trace_frame(self) -> Any:
        """The trace as a DataFrame (time, lower_bound, upper_bound, source)."""
        import pandas as pd

        return pd.DataFrame([p.__dict__ for p in self.trace])


def check_pcmax_input(
    times: Any, machines: Any, speeds: Any = None
) -> tuple[np.ndarray, int, np.ndarray | None]:
    """Validated (times as int64, machines, speeds as float64 or None); ValueError otherwise."""
    arr = np.asarray(times)
    if arr.ndim != 1:
        raise ValueError(f"times must be a one-dimensional array, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError("times is empty: there are no jobs to schedule")
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"times must hold integers, got dtype {arr.dtype}")
    as_float = arr.astype(np.float64)
    if not np.all(np.isfinite(as_float)) or np.any(as_float != np.round(as_float)):
        bad = int(np.flatnonzero(~np.isfinite(as_float) | (as_float != np.round(as_float)))[0])
        raise ValueError(f"times[{bad}] is {arr[bad].item()!r}; job times must be whole numbers")
    if np.any(as_float < 0):
        bad = int(np.flatnonzero(as_float < 0)[0])
        raise ValueError(f"times[{bad}] is {arr[bad].item()!r}; job times must be >= 0")
    if as_float.max() > 2**40:
        raise ValueError("job times above 2^40 are not supported")
    if isinstance(machines, bool) or not isinstance(machines, (int, np.integer)):
        raise ValueError(f"machines must be a positive integer, got {machines!r}")
    if machines < 1:
        raise ValueError(f"machines must be at least 1, got {machines}")
    s = None
    if speeds is not None:
        s = np.asarray(speeds, dtype=np.float64)
        if s.shape != (int(machines),):
            raise ValueError(f"speeds must have one entry per machine ({machines}), got shape {s.shape}")
        if not np.all(np.isfinite(s)) or np.any(s <= 0):
            bad = int(np.flatnonzero(~np.isfinite(s) | (s <= 0))[0])
            raise ValueError(f"speeds[{bad}] is {s[bad]!r}; speeds must be finite and > 0")
        if np.all(s == s[0]):
            s = None if s[0] == 1 else s
    return as_float.astype(np.int64), int(machines), s


def solve_pcmax(
    times: Any,
    machines: int,
    time_limit: float = 10.0,
    *,
    speeds: Any = None,
    backend: str = "pipeline",
    exact: bool = True,
    workers: int = 2,
    display: bool = False,
) -> PcmaxResult:
    """Assign jobs to machines to minimise the makespan, with a proven lower bound.

    Parameters
    ----------
    times
        Non-negative integer size of each job.
    machines
        Number of machines m.
    time_limit
        Seconds; the best solution and bound found by then come back with status
        ``time_limit``.
    speeds
        Optional speed of each machine (uniform machines, Q||Cmax): a machine's finish time
        is its load divided by its speed. Proofs of optimality need integer speeds.
    backend
        ``pipeline`` (bounds, heuristics, exact CP-SAT), or the paper's model as written in
        ``scip`` or ``cpsat``.
    exact
        Run the exact step when bounds and heuristics leave a gap (pipeline only).
    workers
        Solver threads.
    display
        Print solver logs.

    Raises
    ------
    ValueError
        Negative, fractional or missing job times, fewer than one machine, a speed <= 0,
        an unknown backend or a negative time limit.
    """
    p, m, s = check_pcmax_input(times, machines, speeds)
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {list(BACKENDS)}")
    if not (isinstance(time_limit, (int, float)) and time_limit >= 0 and not math.isnan(time_limit)):
        raise ValueError(f"time_limit must be a number of seconds >= 0, got {time_limit!r}")
    tracer = Tracer(float(time_limit))
    if backend != "pipeline":
        from llmsched.mip.pcmax_paper import solve_paper_model

        return solve_paper_model(p, m, s, tracer, backend, workers, display)
    return _Pipeline(p, m, s, tracer, exact, workers, display).run()


def _have_ortools() -> bool:
    """The exact step needs OR-Tools (the ``solvers`` extra); without it the gap stays open."""
    import importlib.util
    import warnings

    if importlib.util.find_spec("ortools") is None:
        warnings.warn(
            "OR-Tools is not installed (pip install 'llmsched[solvers]'): solve_pcmax skips its "
            "exact step and may return a gap",
            stacklevel=4,
        )
        return False
    return True


class _Pipeline:
    def __init__(
        self,
        p: np.ndarray,
        m: int,
        speeds: np.ndarray | None,
        tracer: Tracer,
        exact: bool,
        workers: int,
        display: bool,
    ):
        self.p, self.m, self.speeds, self.tracer = p, m, speeds, tracer
        self.exact, self.workers, self.display = exact, workers, display
        self.assignment: np.ndarray | None = None
        self.closed_by = ""
        self.hit_limit = False  # a solver stopped on the time limit

    def offer(self, assignment: np.ndarray | None, source: str) -> None:
        if assignment is None:
            return
        value = ub.makespan(self.p, assignment, self.m, self.speeds)
        if self.tracer.incumbent(value, source):
            self.assignment = assignment

    def bound(self, value: float, source: str) -> None:
        self.tracer.bound(value, source)

    def done(self, source: str) -> bool:
        if self.tracer.closed():
            self.closed_by = self.closed_by or source
            return True
        return self.tracer.expired()

    def run(self) -> PcmaxResult:
        steps = self._identical_steps() if self.speeds is None else self._uniform_steps()
        for name, step in steps:
            step()
            # Always get a first incumbent (LPT), even with no time left.
            if self.assignment is not None and self.done(name):
                break
        return self.result()

    # ---------------------------------------------------------------- identical machines
    def _identical_steps(self) -> list[tuple[str, Any]]:
        p, m = self.p, self.m
        order = np.argsort(-p, kind="stable")
        sorted_p = p[order]
        deadline = self.tracer.start + self.tracer.time_limit

        def polish(assignment: np.ndarray | None) -> np.ndarray | None:
            if assignment is None:
                return None
            return ub.improve(p, assignment, m, self.tracer.lower_bound, deadline=deadline)

        def exact_step() -> None:
            if self.exact and not self.tracer.closed() and _have_ortools():
                from llmsched.mip.pcmax_exact import solve_aggregated

                solve_aggregated(self, sorted_p)

        def complete(tries: int) -> None:
            # Bin completion at the bound, then a little above it, while it can still improve.
            capacity = int(self.tracer.lower_bound)
            for _ in range(tries):
                if capacity >= self.tracer.upper_bound or self.tracer.expired():
                    return
                found = ub.bin_completion(p, m, capacity)
                if found is not None:
                    self.offer(found, "bin completion")
                    return
                capacity += 1

        def restarts(share: float) -> None:
            # Randomised passes at the bound, for a share of the remaining time and a number
            # of tries that grows with the instance: bin completion with random fills among
            # equally full subsets, alternating with sequential partitioning in a random order
            # (whose subset-sum bit sets stay small enough only for modest sums).
            # Where the arc-flow model is small, the exact step usually settles the gap itself
            # (the bound is often not the optimum there), so the passes get a smaller share.
            from llmsched.mip.pcmax_exact import arcflow_fits

            rng = np.random.default_rng(0)
            if self.exact and arcflow_fits(sorted_p, int(self.tracer.upper_bound) - 1):
                share = min(share, 0.1)
            stop = time.perf_counter() + share * self.tracer.remaining()
            capacity = int(self.tracer.lower_bound)
            sequential = p.size * capacity <= 50_000_000
            for attempt in range(20 * p.size * m):
                if time.perf_counter() > stop or capacity >= self.tracer.upper_bound:
                    return
                if sequential and attempt % 2:
                    found = ub.sequential_completion(p, m, capacity, rng)
                else:
                    found = ub.bin_completion(p, m, capacity, rng)
                if found is not None:
                    self.offer(found, "randomised completion")
                    return

        def lp_bound(share: float) -> None:
            # The arc-flow LP (Gilmore-Gomory) bound, by bisection on the capacity: strong
            # where few distinct sizes repeat many times (class-based predictions, say).
            from llmsched.mip.pcmax_exact import arcflow_lp_bound

            stop = time.perf_counter() + share * self.tracer.remaining()
            low, high = int(self.tracer.lower_bound), int(self.tracer.upper_bound) - 1
            self.bound(arcflow_lp_bound(sorted_p, m, low, high, stop), "arc-flow lp bound")

        def search(share: float) -> None:
            from llmsched.mip.pcmax_exact import search_capacities

            search_capacities(self, share, "bin-completion search", bound_first=True)

        def repack(share: float) -> None:
            # Large-neighbourhood search: repack small groups of machines towards the bound.
            from llmsched.mip.pcmax_exact import arcflow_fits
            from llmsched.mip.pcmax_search import repack_search

            if self.assignment is None or self.tracer.closed():
                return
            if self.exact and arcflow_fits(sorted_p, int(self.tracer.upper_bound) - 1):
                share = min(share, 0.1)
            stop = time.perf_counter() + share * self.tracer.remaining()
            found = repack_search(
                p, m, self.assignment, int(self.tracer.lower_bound), stop, np.random.default_rng(0)
            )
            self.offer(found, "repacking search")

        return [
            ("trivial bound", lambda: self.bound(lb.trivial_bound(sorted_p, m), "trivial bound")),
            ("lpt", lambda: self.offer(ub.lpt(p, m), "lpt")),
            (
                "dell'amico-martello bound",
                lambda: self.bound(lb.dell_amico_martello_bound(sorted_p, m), "dell'amico-martello bound"),
            ),
            ("lpt + exchanges", lambda: self.offer(polish(self.assignment), "lpt + exchanges")),
            (
                "bin-packing bound",
                lambda: self.bound(
                    lb.bpp_bound(sorted_p, m, int(self.tracer.lower_bound), int(self.tracer.upper_bound)),
                    "bin-packing bound",
                ),
            ),
            (
                "subset-sum lifting",
                lambda: self.bound(
                    lb.lift_to_subset_sum(
                        sorted_p, int(self.tracer.lower_bound), int(self.tracer.upper_bound)
                    ),
                    "subset-sum lifting",
                ),
            ),
            ("bin completion", lambda: complete(1)),
            (
                "largest differencing",
                lambda: self.offer(polish(ub.largest_differencing(p, m)), "largest differencing"),
            ),
            (
                "multifit",
                lambda: self.offer(
                    polish(ub.multifit(p, m, self.tracer.lower_bound, self.tracer.upper_bound)), "multifit"
                ),
            ),
            ("bin completion above the bound", lambda: complete(3)),
            ("arc-flow lp bound", lambda: lp_bound(0.2)),
            ("bin-completion search", lambda: search(0.15)),
            ("repacking search", lambda: repack(0.75)),
            ("randomised completion", lambda: restarts(0.4)),
            ("exact", exact_step),
        ]

    # ------------------------------------------------------------------ uniform machines
    def _uniform_steps(self) -> list[tuple[str, Any]]:
        p, m, s = self.p, self.m, self.speeds
        assert s is not None
        deadline = self.tracer.start + self.tracer.time_limit

        def bound() -> float:
            # The k largest jobs need at least their total over the k fastest speeds.
            k = min(p.size, m)
            big = np.cumsum(np.sort(p)[::-1][:k])
            fast = np.cumsum(np.sort(s)[::-1][:k])
            return float(max(p.sum() / s.sum(), (big / fast).max()))

        def exact_step() -> None:
            if self.exact and not self.tracer.closed() and _have_ortools():
                from llmsched.mip.pcmax_exact import solve_uniform

                solve_uniform(self)

        return [
            ("uniform bound", lambda: self.bound(bound(), "uniform bound")),
            ("lpt", lambda: self.offer(ub.lpt(p, m, s), "lpt")),
            (
                "lpt + exchanges",
                lambda: self.offer(
                    ub.improve(p, self.assignment, m, self.tracer.lower_bound, s, deadline=deadline)
                    if self.assignment is not None
                    else None,
                    "lpt + exchanges",
                ),
            ),
            ("exact", exact_step),
        ]

    def result(self) -> PcmaxResult:
        tracer = self.tracer
        assert self.assignment is not None
        if tracer.closed():
            status = Status.OPTIMAL
        elif tracer.expired() or self.hit_limit:
            status = Status.TIME_LIMIT
        else:
            status = Status.FEASIBLE
        return PcmaxResult(
            makespan=tracer.upper_bound,
            lower_bound=min(tracer.lower_bound, tracer.upper_bound),
            assignment=self.assignment,
            status=status,
            gap=relative_gap(tracer.upper_bound, tracer.lower_bound),
            runtime=time.perf_counter() - tracer.start,
            trace=list(tracer.points),
            backend="pipeline",
            closed_by=self.closed_by if status is Status.OPTIMAL else "",
        )
