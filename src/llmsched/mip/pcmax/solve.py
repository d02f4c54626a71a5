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
   one at a time to the bound by a subset-sum dynamic programme);
3. the pattern LP bound (Gilmore-Gomory, by column generation) by bisection on the
   capacity, and a packing rounded from that LP's solution (whole patterns, the residue
   packed by search);
4. a complete bin-completion search bisecting the gap (Korf's, with dominance; a
   refutation raises the bound); a large-neighbourhood search that repacks small groups
   of machines; randomised restarts that alternate bin completion with sequential
   partitioning in a random order;
5. an exact step for whatever gap remains: bin-completion search, the arc-flow model of bin
   packing in SCIP deciding the capacity one below the incumbent, then a CP-SAT model over
   aggregated job sizes (see :mod:`llmsched.mip.pcmax.exact`).

Every step's effort is a count of deterministic work (exchange rounds, search steps and
bit-set words, LP solves, solver nodes and CP-SAT's deterministic time),
scaled by the instance and by ``effort``; the same input gives the same answer on any
machine and under any load. There is no time limit by default; one the caller sets is only a
safety net: when it cuts a step short the status is ``time_limit``.

Only proofs raise the lower bound: a bound formula, a refutation of a capacity (by L2, the
arc-flow LP, an exhausted search or an infeasible arc-flow model) or a solver's proven
bound. A packing found at a capacity lowers the incumbent and never raises the bound.

With at least as many machines as jobs of positive size the answer is immediate (one job
per machine); nothing of the size of the machine count is allocated then.

``backend="scip"``, ``"cpsat"`` or ``"highs"`` instead solves the paper's model as written
(one binary per job and machine), so the two can be compared honestly. SCIP and CP-SAT are
the ``solvers`` extra; HiGHS comes with scipy (see :mod:`llmsched.mip.backends`).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import replace
from typing import Any

import numpy as np

from llmsched.core.result import Status, Tracer
from llmsched.mip.backends import load, require
from llmsched.mip.pcmax import bounds as lb
from llmsched.mip.pcmax import heuristics as ub
from llmsched.mip.pcmax.budgets import (
    ARCFLOW_ARCS,
    EXCHANGE_ROUNDS_PER_JOB,
    EXCHANGE_WORK,
    RANDOM_SEED,
    REPACK_WORK,
    RESTART_WORK,
    ROUNDING_CAPACITIES,
    ROUNDING_WORK,
    SEARCH_WORK,
)
from llmsched.mip.pcmax.result import PcmaxResult

__all__ = ["PcmaxResult", "check_pcmax_input", "solve_pcmax"]

BACKENDS = ("pipeline", "scip", "cpsat", "highs")


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


def _check_number(name: str, value: Any, allowed: str, *, positive: bool = False) -> float:
    """``value`` as a float if it is a real number (not a bool, not nan) >= 0 (> 0 when ``positive``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value):
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    return float(value)


def solve_pcmax(
    times: Any,
    machines: int,
    time_limit: float = math.inf,
    *,
    speeds: Any = None,
    backend: str = "pipeline",
    exact: bool = True,
    effort: float = 1.0,
    workers: int = 1,
    display: bool = False,
) -> PcmaxResult:
    """Assign jobs to machines to minimise the makespan, with a proven lower bound.

    Parameters
    ----------
    times
        Non-negative integer size of each job.
    machines
        Number of machines m (any size: with m at least the number of jobs the answer is
        immediate and costs nothing per machine).
    time_limit
        Wall-clock seconds, a safety net the caller chooses; none by default (``math.inf``),
        so the pipeline stops on its deterministic work budget and returns the same answer
        on any machine under any load (well under a second for most instances, about 10 s
        at most for the hardest on a 2-core machine). If the
        limit cuts the search short, the best solution and bound found by then come back
        with status ``time_limit``; it never changes an answer otherwise. The paper model's
        backends (``scip``, ``cpsat``, ``highs``) have no work budget: without a limit they
        run until they prove the optimum.
    speeds
        Optional speed of each machine (uniform machines, Q||Cmax): a machine's finish time
        is its load divided by its speed. Proofs of optimality need integer speeds.
    backend
        ``pipeline`` (bounds, heuristics, exact search), or the paper's model as written in
        ``scip`` or ``cpsat`` (the ``solvers`` extra) or ``highs`` (scipy's HiGHS, no extra
        needed), which runs until it proves the optimum or the time limit. Loading the
        solver's package is not counted against ``time_limit``.
    exact
        Run the exact step when bounds and heuristics leave a gap (pipeline only).
    effort
        Multiplies every deterministic work budget of the pipeline (1 by default): more
        effort, more chances to close a hard gap.
    workers
        Solver threads. Above 1, CP-SAT interleaves its workers deterministically in the
        pipeline; the paper model's backends then search in parallel, whose result may
        depend on timing.
    display
        Print solver logs.

    Returns
    -------
    PcmaxResult
        Makespan (``objective``), proven ``lower_bound``, ``assignment``, ``status``.

    Raises
    ------
    MissingSolverError
        ``backend="scip"`` or ``"cpsat"`` without its package (a ``ModuleNotFoundError``
        whose message says ``pip install 'llmsched[solvers]'``).
    ValueError
        Negative, fractional or missing job times, fewer than one machine, a speed <= 0,
        an unknown backend, a time limit that is negative, nan or not a number, an effort
        that is not a positive number or fewer than one worker.
    """
    limit = _check_number("time_limit", time_limit, "a number of seconds >= 0 (math.inf for no limit)")
    amount = _check_number("effort", effort, "a finite number > 0", positive=True)
    if not math.isfinite(amount):
        raise ValueError(f"effort must be a finite number > 0, got {effort!r}")
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {list(BACKENDS)}")
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    p, m, s = check_pcmax_input(times, machines, speeds)
    if backend != "pipeline":
        require(backend)
        load(backend)  # off the clock: scipy.optimize alone takes about a second to import
    elif math.isfinite(limit):
        _load_pipeline_solvers(exact)
    tracer = Tracer(limit)
    if backend == "pipeline" and s is None and np.count_nonzero(p) <= m:
        return _one_job_per_machine(p, tracer)
    fastest = None
    if p.size < m:
        # Some optimum uses only n machines (the n fastest): a used machine outside them
        # could hand its jobs to an unused one at least as fast. Solve on those, map back.
        if s is not None:
            fastest = np.sort(np.argpartition(-s, p.size - 1)[: p.size])
            s = s[fastest]
        m = p.size
    if backend != "pipeline":
        from llmsched.mip.pcmax.paper import solve_paper_model

        result = solve_paper_model(p, m, s, tracer, backend, int(workers), display)
    else:
        result = Pipeline(p, m, s, tracer, exact, amount, int(workers), display).run()
    if fastest is not None and result.assignment.min() >= 0:
        result = replace(result, assignment=fastest[result.assignment])
    return result


def _load_pipeline_solvers(exact: bool) -> None:
    """Import what the pipeline's steps may call (scipy's HiGHS for the pattern LP, SCIP and
    CP-SAT for the exact step) before a time limit's clock starts: loading them takes about
    a second, more on a busy machine, and is not solving. Without a limit nothing is
    loaded that the instance does not need."""
    from llmsched.mip.backends import installed

    load("highs")
    if exact:
        for backend in ("scip", "cpsat"):
            if installed(backend):
                load(backend)


def _one_job_per_machine(p: np.ndarray, tracer: Tracer) -> PcmaxResult:
    """Every job of positive size on a machine of its own (zero-size jobs on machine 0):
    the makespan is the largest job, which bounds every schedule."""
    assignment = np.zeros(p.size, dtype=np.int64)
    positive = np.flatnonzero(p)
    assignment[positive] = np.arange(positive.size)
    largest = float(p.max())
    tracer.bound(largest, "largest job")
    tracer.incumbent(largest, "one job per machine")
    return PcmaxResult(
        status=Status.OPTIMAL,
        objective=largest,
        lower_bound=largest,
        gap=0.0,
        runtime=tracer.elapsed(),
        trace=tuple(tracer.points),
        assignment=assignment,
        backend="pipeline",
        closed_by="one job per machine",
    )


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


class Pipeline:
    """The steps of the pipeline around one tracer of bound and incumbent.

    ``expired()`` is the only clock read a step may act on; it records that it fired, so
    that a result cut short by the clock says ``time_limit``.
    """

    def __init__(
        self,
        p: np.ndarray,
        m: int,
        speeds: np.ndarray | None,
        tracer: Tracer,
        exact: bool,
        effort: float,
        workers: int,
        display: bool,
    ):
        self.p, self.m, self.speeds, self.tracer = p, m, speeds, tracer
        self.exact, self.effort, self.workers, self.display = exact, effort, workers, display
        self.assignment: np.ndarray | None = None
        self.closed_by = ""
        self.fired = False  # the wall-clock safety net cut something short
        self._arcflow_fits: dict[int, bool] = {}

    # ------------------------------------------------------------------ shared by the steps
    def expired(self) -> bool:
        """Whether the time limit has passed; the caller must stop what it is doing if so."""
        if self.tracer.expired():
            self.fired = True
            return True
        return False

    def arcflow_fits(self, sorted_p: np.ndarray, capacity: int) -> bool:
        """Whether the arc-flow graph at ``capacity`` is small enough for SCIP (remembered)."""
        from llmsched.mip.pcmax.exact import MAX_ARCS, arcflow_fits

        if capacity not in self._arcflow_fits:
            self._arcflow_fits[capacity] = arcflow_fits(
                sorted_p, capacity, min(MAX_ARCS, self.budget(ARCFLOW_ARCS))
            )
        return self._arcflow_fits[capacity]

    def remaining(self) -> float:
        """Seconds left before the time limit (a solver's own limit, as a safety net)."""
        return self.tracer.remaining()

    def budget(self, amount: float) -> int:
        """A work budget at effort 1 scaled by ``effort`` (at least 1)."""
        return max(1, int(amount * self.effort))

    def exchanges(self, assignment: np.ndarray | None) -> np.ndarray | None:
        """``assignment`` improved by exchanges, within their round and work budgets."""
        if assignment is None:
            return None
        return ub.improve(
            self.p,
            assignment,
            self.m,
            self.tracer.lower_bound,
            self.speeds,
            self.budget(EXCHANGE_ROUNDS_PER_JOB * self.p.size + 100),
            self.expired,
            self.budget(EXCHANGE_WORK),
        )

    def offer(self, assignment: np.ndarray | None, source: str) -> None:
        if assignment is None:
            return
        value = ub.makespan(self.p, assignment, self.m, self.speeds)
        if self.tracer.incumbent(value, source):
            self.assignment = assignment

    def bound(self, value: float, source: str) -> None:
        """Raise the bound to a *proven* value (never a packing's makespan)."""
        self.tracer.bound(value, source)

    @property
    def lower(self) -> int:
        return math.ceil(self.tracer.lower_bound - 1e-9)

    @property
    def upper(self) -> int:
        return int(self.tracer.upper_bound)

    def run(self) -> PcmaxResult:
        steps = self._identical_steps() if self.speeds is None else self._uniform_steps()
        for name, step in steps:
            # The first steps always run (a bound and LPT's incumbent), whatever the limit.
            if self.assignment is not None and self.expired():
                break
            step()
            if self.assignment is not None and self.tracer.closed():
                # The source of the last change names the proof or packing that closed it.
                self.closed_by = self.tracer.points[-1].source if self.tracer.points else name
                break
        return self.result()

    # ---------------------------------------------------------------- identical machines
    def _identical_steps(self) -> list[tuple[str, Any]]:
        p, m = self.p, self.m
        sorted_p = np.sort(p)[::-1]

        def differencing() -> None:
            found = ub.largest_differencing(p, m, expired=self.expired)
            self.offer(self.exchanges(found), "largest differencing")

        def multifit() -> None:
            found = ub.multifit(p, m, self.tracer.lower_bound, self.upper, expired=self.expired)
            self.offer(self.exchanges(found), "multifit")

        def complete(tries: int) -> None:
            # Bin completion at the bound, then a little above it, while it can still improve.
            capacity = self.lower
            for _ in range(tries):
                if capacity >= self.upper or self.expired():
                    return
                found = ub.bin_completion(p, m, capacity, expired=self.expired)
                if found is not None:
                    self.offer(found, "bin completion")
                    return
                capacity += 1

        def arcflow_small() -> bool:
            # Where the arc-flow model is small the exact step usually settles the gap
            # itself, so the searches before it get a smaller budget.
            return self.exact and self.arcflow_fits(sorted_p, self.upper - 1)

        def restarts() -> None:
            # Randomised passes at the bound: bin completion with random fills among equally
            # full subsets, alternating with sequential partitioning in a random order (whose
            # subset-sum bit sets stay small enough only for modest sums).
            rng = np.random.default_rng(RANDOM_SEED)
            capacity = self.lower
            sequential = p.size * capacity <= 50_000_000
            # What a pass costs in work units (fitted to measured times): bit-set words,
            # Python steps per job (or piece of a size's count) and per machine.
            words = capacity // 64 + 1
            pieces = ub.completion_cells(p, capacity) // (capacity + 1)
            costs = [
                m * pieces * words // 400 + m * pieces // 8 + 20 * m,
                m * p.size * words // 800 + m * p.size // 4 + 20 * m,
            ]
            work = self.budget(RESTART_WORK / (8 if arcflow_small() else 1))
            spent = 0
            for attempt in range(20 * p.size * m):
                if spent >= work or capacity >= self.upper or self.expired():
                    return
                if sequential and attempt % 2:
                    found = ub.sequential_completion(p, m, capacity, rng, expired=self.expired)
                else:
                    found = ub.bin_completion(p, m, capacity, rng, expired=self.expired)
                spent += costs[bool(sequential and attempt % 2)]
                if found is not None:
                    self.offer(found, "randomised completion")
                    return

        lp_solutions: dict[int, Any] = {}

        def lp_bound() -> None:
            # The pattern LP (Gilmore-Gomory) bound, by bisection on the capacity: strong
            # where few distinct sizes repeat many times (class-based predictions, say).
            from llmsched.mip.pcmax.exact import pattern_lp_bound

            found, solutions = pattern_lp_bound(sorted_p, m, self.lower, self.upper - 1, self)
            lp_solutions.update(solutions)
            self.bound(found, "pattern lp bound")

        def lp_rounding() -> None:
            # Whole patterns of the LP's solution at the bound, the rest packed by search:
            # where the LP bound is the optimum (the usual case) this finds it.
            from llmsched.mip.pcmax.exact import pattern_lp_rounding

            if not lp_solutions:
                return  # the LP is not tried on this instance
            capacity = self.lower
            for _ in range(ROUNDING_CAPACITIES):
                if capacity >= self.upper or self.expired():
                    return
                found = pattern_lp_rounding(
                    sorted_p,
                    p,
                    m,
                    capacity,
                    lp_solutions.get(capacity),
                    self.budget(ROUNDING_WORK),
                    self,
                    start=max(lp_solutions.values(), key=lambda lp: lp.capacity).patterns,
                )
                if found is not None:
                    self.offer(found, "pattern lp rounding")
                    return
                capacity += 1

        def search() -> None:
            from llmsched.mip.pcmax.exact import search_capacities

            search_capacities(self, self.budget(SEARCH_WORK), "bin-completion search", bound_first=True)

        def repack() -> None:
            # Large-neighbourhood search: repack small groups of machines towards the bound.
            from llmsched.mip.pcmax.search import repack_search

            if self.assignment is None or self.tracer.closed():
                return
            work = self.budget(REPACK_WORK / (8 if arcflow_small() else 1))
            found = repack_search(
                p,
                m,
                self.assignment,
                self.lower,
                np.random.default_rng(RANDOM_SEED),
                work=work,
                expired=self.expired,
            )
            self.offer(found, "repacking search")

        def exact_step() -> None:
            if self.exact and not self.tracer.closed() and _have_ortools():
                from llmsched.mip.pcmax.exact import solve_aggregated

                solve_aggregated(self, sorted_p)

        return [
            ("trivial bound", lambda: self.bound(lb.trivial_bound(sorted_p, m), "trivial bound")),
            ("lpt", lambda: self.offer(ub.lpt(p, m), "lpt")),
            (
                "dell'amico-martello bound",
                lambda: self.bound(lb.dell_amico_martello_bound(sorted_p, m), "dell'amico-martello bound"),
            ),
            ("lpt + exchanges", lambda: self.offer(self.exchanges(self.assignment), "lpt + exchanges")),
            (
                "bin-packing bound",
                lambda: self.bound(
                    lb.bpp_bound(sorted_p, m, self.lower, self.upper, self.expired), "bin-packing bound"
                ),
            ),
            (
                "subset-sum lifting",
                lambda: self.bound(
                    lb.lift_to_subset_sum(sorted_p, self.lower, self.upper, self.expired),
                    "subset-sum lifting",
                ),
            ),
            ("bin completion", lambda: complete(1)),
            ("largest differencing", differencing),
            ("multifit", multifit),
            ("bin completion above the bound", lambda: complete(3)),
            ("pattern lp bound", lp_bound),
            ("pattern lp rounding", lp_rounding),
            ("bin-completion search", search),
            ("repacking search", repack),
            ("randomised completion", restarts),
            ("exact", exact_step),
        ]

    # ------------------------------------------------------------------ uniform machines
    def _uniform_steps(self) -> list[tuple[str, Any]]:
        p, m, s = self.p, self.m, self.speeds
        assert s is not None

        def exact_step() -> None:
            if self.exact and not self.tracer.closed() and _have_ortools():
                from llmsched.mip.pcmax.exact import solve_uniform

                solve_uniform(self)

        return [
            ("uniform bound", lambda: self.bound(lb.uniform_bound(p, s), "uniform bound")),
            ("lpt", lambda: self.offer(ub.lpt(p, m, s), "lpt")),
            ("lpt + exchanges", lambda: self.offer(self.exchanges(self.assignment), "lpt + exchanges")),
            ("exact", exact_step),
        ]

    def result(self) -> PcmaxResult:
        tracer = self.tracer
        assert self.assignment is not None
        if tracer.closed():
            status = Status.OPTIMAL
        elif self.fired:
            status = Status.TIME_LIMIT
        else:
            status = Status.FEASIBLE
        return PcmaxResult(
            status=status,
            # The bound reported never passes the incumbent (a gap of 0 either way).
            **tracer.figures(tracer.upper_bound, min(tracer.lower_bound, tracer.upper_bound)),
            assignment=self.assignment,
            backend="pipeline",
            closed_by=self.closed_by if status is Status.OPTIMAL else "",
        )
