"""``solve_full``: check the instance, size the model, run a backend, return one result.

The backends (:mod:`~llmsched.mip.full.scip`, :mod:`~llmsched.mip.full.cpsat`,
:mod:`~llmsched.mip.full.highs`) are imported only when called, so an optional solver stays
optional; ``backend="auto"`` is SCIP when it is installed, else HiGHS, which scipy brings
(see :mod:`llmsched.mip.backends`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmsched.core.checks import positive_int
from llmsched.core.checks import time_limit as check_time_limit
from llmsched.core.cost import LevelCostModel, LinearCostModel, is_context_aware
from llmsched.core.result import Result, Status, Tracer
from llmsched.core.workload import Workload
from llmsched.engines.competition.schedule import Schedule
from llmsched.mip.backends import AUTO, auto_backend, require
from llmsched.mip.full.model import FORMULATIONS, FullData, Plan, SolveJob
from llmsched.mip.full.replay import plan_from_schedule, schedule_from_plan

__all__ = [
    "BACKENDS",
    "DEFAULT_WORK_LIMIT",
    "FullResult",
    "default_bins",
    "min_decode_iterations",
    "solve_full",
]

BACKENDS = ("scip", "cpsat", "highs")
#: The deterministic budget a solve stops on when no ``work_limit`` is given: SCIP's and
#: HiGHS's branch-and-bound nodes, CP-SAT's deterministic time. The same answer on any
#: machine under any load. On the small instances this MIP is for (2-8 requests) most close
#: within it in seconds; a few stop short of their proof, after up to half a minute (pass
#: ``work_limit=math.inf`` and a ``time_limit`` to go on).
DEFAULT_WORK_LIMIT: dict[str, float] = {"scip": 5_000, "highs": 5_000, "cpsat": 5.0}
# A schedule and a bound equal up to float rounding (sums of the same times in another
# order) are closed.
_ROUNDING = 1e-12

# A backend's solve: the job -> (status, plan of its best solution or None).
SolveFunction = Callable[[SolveJob], tuple[Status, Plan | None]]


@dataclass(frozen=True, kw_only=True)
class FullResult(Result):
    """Outcome of :func:`solve_full`: the vocabulary of :class:`~llmsched.core.result.Result` and
    the schedule.

    Attributes
    ----------
    status
        ``optimal`` only when the solver proved it; ``time_limit`` when the wall-clock limit
        stopped the build or the search (best schedule and bound returned); ``feasible`` when
        ``work_limit`` stopped it with a schedule; ``infeasible`` when no schedule fits the
        bins; ``unknown`` when it stopped without a schedule.
    objective
        Makespan of ``schedule`` (seconds; ``inf`` without one).
    lower_bound
        A proven lower bound on the optimal makespan (of schedules of at most ``bins`` bins,
        which is every schedule unless ``bins`` was given); ``bound`` is the same number.
    gap
        (objective - lower_bound) / objective.
    runtime
        Seconds, model building included.
    trace
        Incumbent and bound over time.
    schedule
        The best schedule, valid under ``cost`` (None without one).
    backend, formulation, bins
        What was solved: ``scip``, ``cpsat`` or ``highs`` (what ``auto`` chose), ``strong``
        or ``literal``, K.
    warm_start
        Name and makespan of the warm-start schedule the solver started from (None when it
        had none).
    cost
        The MIP's cost model (levels, decode time per iteration).
    """

    schedule: Schedule | None = field(repr=False)
    backend: str
    formulation: str
    bins: int
    warm_start: tuple[str, float] | None
    cost: LevelCostModel = field(repr=False)

    @property
    def bound(self) -> float:
        """The proven lower bound on the makespan (``lower_bound``)."""
        return self.lower_bound


def default_bins(
    workload: Workload, cost: LevelCostModel, clients: int, upper: float, formulation: str
) -> int:
    """A number of bins K that cannot cut off an optimal schedule.

    In an optimal schedule every bin prefills something (a bin without a prefill merges into
    the one before), so it pays at least the cheapest level's time, and the decode stages
    run at least :func:`min_decode_iterations` iterations: K <= (UB - T^d * that) / T^p_min,
    and K <= n. The literal formulation drops the decode term, as the paper sizes K. Without
    a schedule in hand (``upper`` infinite) K = n.
    """
    n = len(workload)
    if not math.isfinite(upper):
        return n
    cheapest = min(lv.time for lv in cost.levels)
    decode = cost.decode_token_time * min_decode_iterations(workload, clients)
    spare = upper - (decode if formulation == "strong" else 0.0)
    return max(1, min(n, math.floor(spare / cheapest + 1e-9)))


def min_decode_iterations(workload: Workload, clients: int) -> int:
    """Decode iterations any schedule runs: the longest output, and the tokens over the clients."""
    out = workload.output_tokens
    return int(max(out.max(), -(-int(out.sum()) // clients)))


def solve_full(
    workload: Workload,
    cost: LevelCostModel | LinearCostModel,
    clients: int,
    time_limit: float = math.inf,
    *,
    backend: str = AUTO,
    formulation: str = "strong",
    warm_starts: Mapping[str, Schedule] | None = None,
    bins: int | None = None,
    work_limit: float | None = None,
    workers: int = 1,
    display: bool = False,
) -> FullResult:
    """Solve the full MIP (Eqs. 1-25) and return the best schedule with a proven bound.

    Parameters
    ----------
    workload, clients
        The requests (an offline batch: all at time 0) and the number of clients J.
    cost
        A :class:`LevelCostModel` (the MIP's semantics) or a :class:`LinearCostModel`,
        turned into one by ``cost.to_levels(clients)``.
    time_limit
        Wall-clock seconds, model building included: a safety net the caller chooses (none
        by default; the solve stops on ``work_limit``). When it fires, during the build or
        the search, the best schedule in hand (a warm start or the solver's) and the proven
        bound come back with status ``time_limit``. Importing the solver's package (about a
        second for scipy's HiGHS) is not counted.
    backend
        ``auto`` (the default: ``scip`` when PySCIPOpt is installed, else ``highs``),
        ``scip`` or ``cpsat`` (the ``solvers`` extra), or ``highs`` (HiGHS through
        ``scipy.optimize.milp``, which needs no extra). HiGHS takes no warm start (scipy
        cannot pass one): it searches from nothing, and the warm start stays the incumbent
        and fallback result; its trace holds HiGHS's final incumbent and bound only.
    formulation
        ``strong`` (client-free, tight constants, cuts, symmetry breaking; when the lower
        bound already meets the best warm start no model is built) or ``literal`` (the
        paper's per-client variables and big-M rules, always solved).
    warm_starts
        Schedules to start from, by name, valid under the MIP's cost model (``cost`` as a
        :class:`LevelCostModel`) for this workload and these clients; the best one that fits
        in the bins is the solver's start (not HiGHS's: see ``backend``), an incumbent, and
        the fallback result, so the result is never worse than it. The online heuristics make a good set:
        :func:`llmsched.online.warm_starts.heuristic_schedules`. Without warm starts the
        solver starts from nothing (the lower bounds still apply).
    bins
        K; by default a number that cannot cut off an optimum (see :func:`default_bins`).
        Too few bins for the requests is a ValueError. With a given K the problem solved is
        "the best schedule of at most K bins": a warm start of more bins is not a solution
        of it (it is neither an incumbent nor returned), ``optimal`` means optimal among
        schedules of at most K bins, ``lower_bound`` bounds only those (with fewer bins than
        an optimum needs it can exceed the unrestricted optimum), and a K no schedule fits
        gives ``infeasible``.
    work_limit
        Deterministic effort (same result on any machine, under any load): SCIP's or
        HiGHS's branch-and-bound nodes (``limits/nodes``, ``mip_max_nodes``; a whole number)
        or CP-SAT's deterministic time (``max_deterministic_time``). None (the default) is
        the backend's :data:`DEFAULT_WORK_LIMIT`; ``math.inf`` is none (the solve then runs
        until it proves the optimum or ``time_limit`` fires). Stopping on it gives
        ``feasible`` (``unknown`` without a schedule).
    workers
        CP-SAT's search workers; 1 (the default) is deterministic, more are faster but not.
        SCIP and HiGHS solve on one thread (only 1 is allowed).
    display
        Print the solver's log.

    Returns
    -------
    FullResult

    Raises
    ------
    MissingSolverError
        ``backend="scip"`` or ``"cpsat"`` without its package (a ``ModuleNotFoundError``
        whose message says ``pip install 'llmsched[solvers]'``).
    ValueError
        An unknown backend or formulation, a bad time or work limit or worker count, a
        prompt no level holds, a request arriving after time 0 (the model is of an offline
        batch), ``bins`` too few to prefill every request, or a warm start that is not a
        valid schedule of this instance under the MIP's cost model.
    """
    limit = check_time_limit("time_limit", time_limit)
    if backend == AUTO:
        backend = auto_backend()
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {[AUTO, *BACKENDS]}")
    if formulation not in FORMULATIONS:
        raise ValueError(f"unknown formulation {formulation!r}; choose one of {list(FORMULATIONS)}")
    work_limit = _check_work_limit(work_limit, backend)
    workers = positive_int("workers", workers)
    if backend in ("scip", "highs") and workers != 1:
        raise ValueError(
            f"workers={workers}: {_NAMES[backend]} solves on one thread here; only cpsat takes more workers"
        )
    require(backend)
    # Imported before the clock starts: loading a solver (scipy.optimize takes about a
    # second) is not solving, and a short limit would be spent on it.
    solve_backend = _backend(backend)
    tracer = Tracer(limit)
    clients = positive_int("clients", clients)
    if isinstance(cost, LinearCostModel):
        cost = cost.to_levels(clients)
    if is_context_aware(cost):
        raise TypeError(
            f"the full MIP has the semantics of a LevelCostModel (prefill levels, one time per decode "
            f"iteration) and cannot see context; pass {type(cost).__name__}.to_levels(clients, "
            "context=N), which charges every iteration as a full batch at N context tokens per "
            "client (N at least the longest prompt plus output: the MIP then never charges a "
            "stage less than the model does)"
        )
    if not isinstance(cost, LevelCostModel):
        raise TypeError(f"cost must be a LevelCostModel or LinearCostModel, got {type(cost).__name__}")
    _check_batch(workload, cost, clients)
    if bins is not None:
        bins = _check_bins(bins, workload, cost, clients)
    starts = _check_warm_starts(warm_starts, workload, cost, clients)

    from llmsched.engines.competition.bounds import lower_bounds

    tracer.bound(lower_bounds(workload, cost, clients).strong, "lower bounds")
    upper = min((s.makespan for s, _, _ in starts.values()), default=math.inf)
    K = bins if bins is not None else default_bins(workload, cost, clients, upper, formulation)
    # The best warm start that fits in K bins: a schedule of more bins is no solution of the
    # K-bin problem. With the default K the best of all fits (K leaves room for it).
    fitting = {name: entry for name, entry in starts.items() if entry[1].bins <= K}
    start_name = min(fitting, key=lambda name: fitting[name][0].makespan, default=None)
    start = fitting[start_name] if start_name is not None else None
    if start is not None:
        tracer.incumbent(start[0].makespan, f"warm start ({start_name})")
    data = FullData(
        workload=workload,
        cost=cost,
        clients=clients,
        bins=K,
        upper_bound=start[0].makespan if start is not None else _horizon(workload, cost, K),
        lower_bound=tracer.lower_bound,
        min_decode_iterations=min_decode_iterations(workload, clients),
    )
    solved: Plan | None
    if formulation == "strong" and bins is None and tracer.closed() and start is not None:
        # The lower bound (a cut of the strong formulation) already proves the start optimal.
        status, solved = Status.OPTIMAL, start[1]
    else:
        status, solved = solve_backend(
            SolveJob(
                data,
                formulation,
                tracer,
                (start[1], start[2]) if start is not None else None,
                work_limit,
                workers,
                display,
            )
        )

    schedule: Schedule | None = None
    if solved is not None:
        schedule = schedule_from_plan(solved, workload, cost, clients)
        tracer.incumbent(schedule.makespan, backend)
    if start is not None and status is not Status.INFEASIBLE:
        if schedule is None or start[0].makespan < schedule.makespan:
            schedule = start[0]  # never worse than the start, a schedule of at most K bins
        if status is Status.UNKNOWN:
            status = Status.FEASIBLE  # the solver found nothing, but the start is a schedule
    objective = schedule.makespan if schedule is not None else math.inf
    if schedule is not None and tracer.lower_bound >= objective - _ROUNDING * max(1.0, objective):
        status = Status.OPTIMAL  # a proven bound meets the schedule, whatever stopped the solver
    lower = min(tracer.lower_bound, objective)
    if status is Status.OPTIMAL:
        lower = objective  # the solver proved it (up to its tolerance)
    elif status is Status.INFEASIBLE:
        lower = math.inf  # no schedule of at most K bins (SCIP says 1e20, its infinity)
    return FullResult(
        status=status,
        **tracer.figures(objective, lower),
        schedule=schedule,
        backend=backend,
        formulation=formulation,
        bins=K,
        warm_start=(start_name, start[0].makespan) if start is not None and start_name is not None else None,
        cost=cost,
    )


_NAMES = {"scip": "SCIP", "cpsat": "CP-SAT", "highs": "HiGHS"}


def _backend(name: str) -> SolveFunction:
    """The backend's solve function, imported on first use."""
    if name == "scip":
        from llmsched.mip.full import scip

        return scip.solve
    if name == "highs":
        from llmsched.mip.full import highs

        return highs.solve
    from llmsched.mip.full import cpsat

    return cpsat.solve


def _horizon(workload: Workload, cost: LevelCostModel, bins: int) -> float:
    """The longest any schedule of ``bins`` bins can take: every bin at the dearest level, and
    every token decoded in an iteration of its own."""
    return bins * cost.levels[-1].time + cost.decode_token_time * int(workload.output_tokens.sum())


def _check_work_limit(work_limit: Any, backend: str) -> float | None:
    """The work limit to pass the backend: its default for None, None for ``inf``."""
    if work_limit is None:
        return DEFAULT_WORK_LIMIT[backend]
    allowed = "a positive number, math.inf for none or None for the default"
    if isinstance(work_limit, bool) or not isinstance(work_limit, numbers.Real):
        raise ValueError(f"work_limit must be {allowed}, got {work_limit!r}")
    value = float(work_limit)
    if value == math.inf:
        return None
    if not 0 < value < math.inf:
        raise ValueError(f"work_limit must be {allowed}, got {work_limit!r}")
    if backend in ("scip", "highs") and not value.is_integer():
        raise ValueError(
            f"work_limit counts {_NAMES[backend]}'s branch-and-bound nodes: a whole number, "
            f"got {work_limit!r}"
        )
    return value


def _check_batch(workload: Workload, cost: LevelCostModel, clients: int) -> None:
    from llmsched.core.instance import check_instance

    check_instance(workload, cost, clients)
    if np.any(workload.arrival > 0):
        raise ValueError(
            "solve_full models an offline batch, as the paper's MIP does: every request must "
            "arrive at time 0 (use the simulator's policies for arrivals over time)"
        )


def _check_bins(bins: Any, workload: Workload, cost: LevelCostModel, clients: int) -> int:
    bins = positive_int("bins", bins)
    n, cap = len(workload), cost.prefill_capacity
    prompt = int(workload.prompt_tokens.sum())
    need = max(-(-n // clients), -(-prompt // cap))
    if bins < need:
        raise ValueError(
            f"bins={bins} cannot hold the requests: {n} requests on {clients} clients with "
            f"{prompt} prompt tokens at most {cap} a stage need at least {need} bins"
        )
    return bins


def _check_warm_starts(
    warm_starts: Any, workload: Workload, cost: LevelCostModel, clients: int
) -> dict[str, tuple[Schedule, Plan, np.ndarray]]:
    """Each warm start with its plan and clients; ValueError unless it is a valid schedule of
    this instance under the MIP's cost model."""
    if warm_starts is None:
        return {}
    if not isinstance(warm_starts, Mapping):
        raise TypeError(f"warm_starts must map names to Schedules, got {type(warm_starts).__name__}")
    from llmsched.engines.competition.validate import validate

    out = {}
    for name, schedule in warm_starts.items():
        where = f"warm_starts[{name!r}]"
        if not isinstance(schedule, Schedule):
            raise TypeError(f"{where} must be a Schedule, got {type(schedule).__name__}")
        if schedule.cost != cost:
            raise ValueError(
                f"{where} was run under {schedule.cost!r}; a warm start must be under the MIP's cost "
                f"model {cost!r} (heuristic_schedules(workload, cost, clients) runs them so)"
            )
        same = (
            schedule.clients == clients
            and len(schedule.workload) == len(workload)
            and np.array_equal(schedule.workload.prompt_tokens, workload.prompt_tokens)
            and np.array_equal(schedule.workload.output_tokens, workload.output_tokens)
        )
        if not same:
            raise ValueError(f"{where} is a schedule of another instance (other requests or clients)")
        violations = validate(schedule)
        if violations:
            raise ValueError(f"{where} is not a valid schedule: {violations[0]}")
        plan, client = plan_from_schedule(schedule)
        out[str(name)] = (schedule, plan, client)
    return out
