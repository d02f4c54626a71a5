"""``solve_full``: the full deterministic MIP of PD-competition inference, solved and extracted.

The model (:mod:`llmsched.mip.full_model`) is built in SCIP or CP-SAT, warm-started from
the best heuristic schedule, solved within a time limit with a trace of incumbent and
bound, and its solution is turned into a :class:`~llmsched.Schedule` by replaying its plan
(each bin's requests, each decode stage's iterations) in the simulator, so the validator
checks it like any other schedule.

The MIP's semantics are those of :class:`~llmsched.cost.LevelCostModel` (prefill levels, a
constant decode time per iteration); a :class:`~llmsched.cost.LinearCostModel` is turned
into one with ``cost.to_levels(clients)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmsched._checks import positive_int
from llmsched.cost import LevelCostModel, LinearCostModel
from llmsched.mip.full_model import (
    FORMULATIONS,
    Backend,
    FullData,
    LiteralModel,
    Plan,
    StrongModel,
    floor_units,
    time_scale,
)
from llmsched.mip.result import Status, TracePoint, Tracer, attach_scip_trace, relative_gap, run_cpsat
from llmsched.schedule import DECODE, PREFILL, Schedule
from llmsched.workload import Workload

__all__ = [
    "HEURISTICS",
    "FullResult",
    "default_bins",
    "heuristic_schedules",
    "plan_from_schedule",
    "schedule_from_plan",
    "solve_full",
    "tiny_instance",
]

BACKENDS = ("scip", "cpsat")
# Strategies run under the MIP's semantics for the warm start and for comparisons.
HEURISTICS = (
    ("baseline", "fcfs", "prefill-first"),
    ("offline", "offline-oracle", "prefill-first"),
    ("online", "sorted-preemptive-rr-oracle", "lagrangian"),
    ("hybrid", "hybrid-oracle", "lagrangian"),
    ("longest-first", "longest-first-oracle", "lagrangian"),
    ("longest-first/prefill-first", "longest-first-oracle", "prefill-first"),
)


@dataclass(frozen=True)
class FullResult:
    """Outcome of :func:`solve_full`.

    Attributes
    ----------
    status
        ``optimal`` only when the solver proved it; ``time_limit`` when the limit stopped it
        (best schedule and bound returned); ``infeasible`` when no schedule fits the bins.
    objective
        Makespan of ``schedule`` (seconds; ``inf`` without one).
    bound
        A proven lower bound on the optimal makespan.
    gap
        (objective - bound) / objective.
    runtime
        Seconds, model building included.
    schedule
        The best schedule, validated against the MIP's cost model (None without one).
    trace
        Incumbent and bound over time.
    backend, formulation, bins
        What was solved: ``scip`` or ``cpsat``, ``strong`` or ``literal``, K.
    warm_start
        Name and makespan of the heuristic schedule the solver started from.
    cost
        The MIP's cost model (levels, decode time per iteration).
    """

    status: Status
    objective: float
    bound: float
    gap: float
    runtime: float
    schedule: Schedule | None
    trace: list[TracePoint] = field(repr=False)
    backend: str
    formulation: str
    bins: int
    warm_start: tuple[str, float] | None
    cost: LevelCostModel = field(repr=False)

    def trace_frame(self) -> Any:
        """The trace as a DataFrame (time, lower_bound, upper_bound, source)."""
        import pandas as pd

        return pd.DataFrame([p.__dict__ for p in self.trace])


def tiny_instance(
    seed: int, max_requests: int = 8, max_clients: int = 3, max_output: int = 20
) -> tuple[Workload, LevelCostModel, int]:
    """A random instance small enough for the full MIP: (workload, cost, clients).

    2 to ``max_requests`` requests with GSM8K prompt lengths drawn from the real ones,
    outputs uniform in ``[1, max_output]``, 1 to ``max_clients`` clients, and the paper's
    cost model under the MIP's semantics (``LinearCostModel.paper().to_levels(clients)``).
    """
    from llmsched.workloads import gsm8k

    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, positive_int("max_requests", max_requests, 2) + 1))
    clients = int(rng.integers(1, positive_int("max_clients", max_clients) + 1))
    prompts = rng.choice(gsm8k(0).prompt_tokens, size=n)
    outputs = rng.integers(1, positive_int("max_output", max_output) + 1, size=n)
    workload = Workload(prompt_tokens=prompts, output_tokens=outputs, name=f"tiny({seed})")
    return workload, LinearCostModel.paper().to_levels(clients), clients


def heuristic_schedules(
    workload: Workload, cost: LevelCostModel, clients: int, assignment_time_limit: float = 10.0
) -> dict[str, Schedule]:
    """Every strategy of :data:`HEURISTICS` run under the MIP's semantics, by name.

    ``assignment_time_limit`` bounds the offline assignment of ``offline`` and ``hybrid``.
    """
    from llmsched.mip.offline import OfflineQueues
    from llmsched.online import HYBRID_OVERHEAD, SortedPreemptive
    from llmsched.simulate import simulate

    limited: dict[str, Any] = {
        "offline-oracle": lambda: OfflineQueues(sizes="oracle", time_limit=assignment_time_limit),
        "hybrid-oracle": lambda: SortedPreemptive(
            initial="offline", sizes="oracle", time_limit=assignment_time_limit, overhead=HYBRID_OVERHEAD
        ),
    }
    return {
        name: simulate(workload, cost, clients, limited[rp]() if rp in limited else rp, ip)
        for name, rp, ip in HEURISTICS
    }


def default_bins(
    data_workload: Workload, cost: LevelCostModel, clients: int, upper: float, formulation: str
) -> int:
    """A number of bins K that cannot cut off an optimal schedule.

    In an optimal schedule every bin prefills something (a bin without a prefill merges into
    the one before), so it pays at least the cheapest level's time, and the decode stages
    run at least ``min_decode_iterations`` iterations: K <= (UB - T^d * that) / T^p_min,
    and K <= n. The literal formulation drops the decode term, as the paper sizes K.
    """
    n = len(data_workload)
    cheapest = min(lv.time for lv in cost.levels)
    decode = cost.decode_token_time * min_decode_iterations(data_workload, clients)
    spare = upper - (decode if formulation == "strong" else 0.0)
    return max(1, min(n, math.floor(spare / cheapest + 1e-9)))


def min_decode_iterations(workload: Workload, clients: int) -> int:
    """Decode iterations any schedule runs: the longest output, and the tokens over the clients."""
    out = workload.output_tokens
    return int(max(out.max(), -(-int(out.sum()) // clients)))


def plan_from_schedule(schedule: Schedule) -> tuple[Plan, np.ndarray]:
    """The MIP plan of a valid schedule (bins = its prefill stages) and each request's client."""
    kinds = schedule.stage_kind
    prefill_stages = np.flatnonzero(kinds == PREFILL)
    bin_of_stage = np.full(kinds.size, -1, dtype=np.int64)
    bin_of_stage[prefill_stages] = np.arange(prefill_stages.size)
    bins = prefill_stages.size
    iterations = np.zeros(bins, dtype=np.int64)
    first = np.zeros(bins, dtype=np.int64)
    for k, s in enumerate(prefill_stages.tolist()):
        if s + 1 < kinds.size and kinds[s + 1] == DECODE:
            iterations[k] = schedule.stage_iterations[s + 1]
            first[k] = schedule.stage_first_iteration[s + 1]
    n = len(schedule.workload)
    tokens = np.zeros((n, bins), dtype=np.int64)
    lo = first
    hi = first + iterations
    for i in range(n):
        a, b = int(schedule.request_decode_start[i]), int(schedule.request_decode_end[i])
        tokens[i] = np.maximum(0, np.minimum(hi, b) - np.maximum(lo, a))
    prefill_bin = bin_of_stage[schedule.request_prefill_stage]
    cost = schedule.cost
    assert isinstance(cost, LevelCostModel)
    caps = np.array([lv.capacity for lv in cost.levels])
    stage_tokens = np.bincount(prefill_bin, weights=schedule.workload.prompt_tokens, minlength=bins)
    level = np.searchsorted(caps, stage_tokens, side="left")
    return Plan.make(prefill_bin, tokens, iterations, level), schedule.request_client.copy()


class _PlanRequests:
    """Request policy that prefills the plan's bins in order."""

    name = "mip-plan"

    def __init__(self, order: list[list[int]]):
        self.order = order
        self.next = 0

    def start(self, workload: Workload, clients: int) -> None:
        from llmsched.policies import _FreeClients

        self.free = _FreeClients(clients)
        self.arrived: set[int] = set()
        self.next = 0

    def arrive(self, request: int) -> None:
        self.arrived.add(request)

    def release(self, client: int) -> None:
        self.free.release(client)

    def ready(self) -> int:
        if self.next >= len(self.order):
            return 0
        group = self.order[self.next]
        if len(self.free) < len(group) or not all(i in self.arrived for i in group):
            return 0
        return len(group)

    def take(self, capacity: int) -> list[tuple[int, int]]:
        group = self.order[self.next]
        self.next += 1
        return [(i, self.free.pop_lowest()) for i in group]


class _PlanIterations:
    """Iteration policy that runs each bin's decode stage for the plan's iterations."""

    name = "mip-plan"

    def __init__(self, requests: _PlanRequests, iterations: list[int]):
        self.requests = requests
        self.iterations = iterations

    def start(self, workload: Workload, cost: Any, clients: int) -> None:
        pass

    def decide(self, engine: Any) -> int:
        k = self.requests.next - 1  # the bin whose decode stage runs now
        left = self.iterations[k] - (0 if engine.just_prefilled else engine.stage_iterations)
        return max(left, 1) if engine.just_prefilled else max(left, 0)


def schedule_from_plan(plan: Plan, workload: Workload, cost: LevelCostModel, clients: int) -> Schedule:
    """Replay a plan in the simulator: bins in order, each decode stage for its iterations.

    Bins that prefill nothing are skipped (their decode iterations belong to the stage
    before), and a stage whose requests all finish early ends there, so the schedule is
    never longer than the plan.
    """
    from llmsched.simulate import simulate

    order: list[list[int]] = []
    iterations: list[int] = []
    for k in range(plan.bins):
        group = np.flatnonzero(plan.prefill_bin == k).tolist()
        if group:
            order.append(group)
            iterations.append(int(plan.iterations[k]))
        elif iterations:
            iterations[-1] += int(plan.iterations[k])
    requests = _PlanRequests(order)
    return simulate(workload, cost, clients, requests, _PlanIterations(requests, iterations))


def solve_full(
    workload: Workload,
    cost: LevelCostModel | LinearCostModel,
    clients: int,
    time_limit: float = 60.0,
    *,
    backend: str = "scip",
    formulation: str = "strong",
    bins: int | None = None,
    warm_start: bool = True,
    workers: int = 1,
    display: bool = False,
) -> FullResult:
    """Solve the full MIP (Eqs. 1-25) and return the best schedule with a proven bound.

    Parameters
    ----------
    workload, clients
        The requests and the number of clients J.
    cost
        A :class:`LevelCostModel` (the MIP's semantics) or a :class:`LinearCostModel`,
        turned into one by ``cost.to_levels(clients)``.
    time_limit
        Seconds, model building included; past it the best schedule and bound come back
        with status ``time_limit``.
    backend
        ``scip`` or ``cpsat``.
    formulation
        ``strong`` (client-free, tight constants, cuts, symmetry breaking; when the lower
        bound already meets the best heuristic no model is built) or ``literal`` (the
        paper's per-client variables and big-M rules, always solved).
    bins
        K; by default a bound that cannot cut off an optimum (see :func:`default_bins`).
        Too few bins for the requests is a ValueError; a K that fits no schedule gives
        ``infeasible``. With a given K, the status and the bound are about schedules of at
        most K bins (fewer bins than an optimum needs make the bound exceed its makespan).
    warm_start
        Start the solver from the best heuristic schedule.
    workers
        CP-SAT's search workers (SCIP solves on one thread).
    display
        Print the solver's log.

    Raises
    ------
    ValueError
        An unknown backend or formulation, a negative time limit, a prompt no level holds,
        a request arriving after time 0 (the model is of an offline batch), or ``bins`` too
        few to prefill every request.
    """
    from llmsched.bounds import lower_bounds
    from llmsched.simulate import check_instance

    tracer = Tracer(_check_limit(time_limit))
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {list(BACKENDS)}")
    if formulation not in FORMULATIONS:
        raise ValueError(f"unknown formulation {formulation!r}; choose one of {list(FORMULATIONS)}")
    clients = positive_int("clients", clients)
    if isinstance(cost, LinearCostModel):
        cost = cost.to_levels(clients)
    if not isinstance(cost, LevelCostModel):
        raise TypeError(f"cost must be a LevelCostModel or LinearCostModel, got {type(cost).__name__}")
    check_instance(workload, cost, clients)
    if np.any(workload.arrival > 0):
        raise ValueError(
            "solve_full models an offline batch, as the paper's MIP does: every request must "
            "arrive at time 0 (use the simulator's policies for arrivals over time)"
        )
    n = len(workload)
    cap = cost.prefill_capacity
    if bins is not None:
        bins = positive_int("bins", bins)
        need = max(-(-n // clients), -(-int(workload.prompt_tokens.sum()) // cap))
        if bins < need:
            raise ValueError(
                f"bins={bins} cannot hold the requests: {n} requests on {clients} clients with "
                f"{int(workload.prompt_tokens.sum())} prompt tokens at most {cap} a stage need at "
                f"least {need} bins"
            )

    # The heuristics' offline assignments get a small share of the limit (they are a start).
    heuristics = heuristic_schedules(
        workload, cost, clients, assignment_time_limit=max(0.01, min(1.0, 0.02 * tracer.time_limit))
    )
    best_name = min(heuristics, key=lambda name: heuristics[name].makespan)
    best = heuristics[best_name]
    bound = lower_bounds(workload, cost, clients).strong
    tracer.bound(bound, "lower bounds")
    K = bins if bins is not None else default_bins(workload, cost, clients, best.makespan, formulation)
    plan, client = plan_from_schedule(best)
    fits = plan.bins <= K
    if fits:  # a schedule of more than K bins is no incumbent of the K-bin problem
        tracer.incumbent(best.makespan, f"heuristic ({best_name})")
    # A horizon for the time variables: the heuristic's makespan when it fits the bins, else
    # the longest any K-bin schedule can take.
    horizon = (
        best.makespan
        if fits
        else K * cost.levels[-1].time + cost.decode_token_time * int(workload.output_tokens.sum())
    )
    data = FullData(
        workload=workload,
        cost=cost,
        clients=clients,
        bins=K,
        upper_bound=horizon,
        lower_bound=bound,
        min_decode_iterations=min_decode_iterations(workload, clients),
    )
    use_start = warm_start and fits
    solved_plan: Plan | None
    if formulation == "strong" and bins is None and tracer.closed():
        # The lower bound (a cut of the strong formulation) already proves the heuristic optimal.
        status, solved_plan = Status.OPTIMAL, plan
    elif backend == "scip":
        status, solved_plan = _solve_scip(
            data, formulation, tracer, plan if use_start else None, client, workers, display
        )
    else:
        status, solved_plan = _solve_cpsat(
            data, formulation, tracer, plan if use_start else None, client, workers, display
        )

    schedule: Schedule | None = None
    if solved_plan is not None:
        schedule = schedule_from_plan(solved_plan, workload, cost, clients)
        tracer.incumbent(schedule.makespan, backend)
    if fits and status is not Status.INFEASIBLE and (schedule is None or best.makespan < schedule.makespan):
        schedule = best  # never worse than the best heuristic, a schedule of at most K bins
    objective = schedule.makespan if schedule is not None else math.inf
    lower = min(tracer.lower_bound, objective)
    if status is Status.OPTIMAL:
        lower = objective  # the solver proved it (up to its tolerance)
    return FullResult(
        status=status,
        objective=objective,
        bound=lower,
        gap=relative_gap(objective, lower),
        runtime=tracer.elapsed(),
        schedule=schedule,
        trace=list(tracer.points),
        backend=backend,
        formulation=formulation,
        bins=K,
        warm_start=(best_name, best.makespan) if use_start else None,
        cost=cost,
    )


def _check_limit(time_limit: Any) -> float:
    if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) or not time_limit >= 0:
        raise ValueError(f"time_limit must be a number of seconds >= 0, got {time_limit!r}")
    return float(time_limit)


def _build(data: FullData, formulation: str, backend: Backend) -> StrongModel | LiteralModel:
    model: StrongModel | LiteralModel = (StrongModel if formulation == "strong" else LiteralModel)(
        data, backend
    )
    model.build()
    return model


def _start_values(
    model: StrongModel | LiteralModel, plan: Plan, client: np.ndarray
) -> list[tuple[Any, float]]:
    if isinstance(model, StrongModel):
        return model.values_from_plan(plan)
    return model.values_from_plan(plan, client)


# ------------------------------------------------------------------------------ SCIP
class _ScipBackend(Backend):
    def __init__(self, model: Any):
        from pyscipopt import quicksum

        self.model = model
        self._quicksum = quicksum

    def binary(self, name: str) -> Any:
        return self.model.addVar(vtype="B", name=name)

    def integer(self, lb: int, ub: int, name: str) -> Any:
        return self.model.addVar(vtype="I", lb=lb, ub=ub, name=name)

    def continuous(self, lb: float, ub: float, name: str) -> Any:
        return self.model.addVar(vtype="C", lb=lb, ub=ub, name=name)

    def add(self, constraint: Any, name: str) -> None:
        self.model.addCons(constraint, name=name)

    def minimize(self, expr: Any) -> None:
        self.model.setObjective(expr, "minimize")

    def sum(self, terms: Any) -> Any:
        return self._quicksum(terms)

    def time(self, seconds: float) -> float:
        return float(seconds)


def _solve_scip(
    data: FullData,
    formulation: str,
    tracer: Tracer,
    plan: Plan | None,
    client: np.ndarray,
    workers: int,
    display: bool,
) -> tuple[Status, Plan | None]:
    from pyscipopt import Model

    scip = Model(f"full-mip-{formulation}")
    if not display:
        scip.hideOutput()
    model = _build(data, formulation, _ScipBackend(scip))
    if tracer.expired():
        return Status.TIME_LIMIT, None

    attach_scip_trace(scip, tracer)
    if plan is not None:
        sol = scip.createSol()
        for var, value in _start_values(model, plan, client):
            scip.setSolVal(sol, var, value)
        scip.addSol(sol, free=True)
    scip.setParam("limits/time", max(tracer.remaining(), 0.01))
    scip.optimize()
    raw = scip.getStatus()
    if raw == "infeasible":
        return Status.INFEASIBLE, None
    solved = None
    if scip.getNSols() > 0:
        best = scip.getBestSol()
        solved = model.plan_from(lambda var: scip.getSolVal(best, var))
        tracer.bound(scip.getDualbound(), "scip")
    if raw == "optimal":
        return Status.OPTIMAL, solved
    return (Status.TIME_LIMIT if raw == "timelimit" else Status.FEASIBLE), solved


# ----------------------------------------------------------------------------- CP-SAT
class _CpSatBackend(Backend):
    def __init__(self, model: Any, scale: int):
        self.model = model
        self.scale = scale

    def binary(self, name: str) -> Any:
        return self.model.new_bool_var(name)

    def integer(self, lb: int, ub: int, name: str) -> Any:
        return self.model.new_int_var(lb, ub, name)

    def continuous(self, lb: float, ub: float, name: str) -> Any:
        return self.model.new_int_var(floor_units(lb, self.scale), math.ceil(ub * self.scale) + 1, name)

    def add(self, constraint: Any, name: str) -> None:
        self.model.add(constraint).with_name(name)

    def minimize(self, expr: Any) -> None:
        self.model.minimize(expr)

    def sum(self, terms: Any) -> Any:
        from ortools.sat.python import cp_model

        return cp_model.LinearExpr.sum(list(terms))

    def time(self, seconds: float) -> int:
        return floor_units(seconds, self.scale)


def _solve_cpsat(
    data: FullData,
    formulation: str,
    tracer: Tracer,
    plan: Plan | None,
    client: np.ndarray,
    workers: int,
    display: bool,
) -> tuple[Status, Plan | None]:
    from ortools.sat.python import cp_model

    times = [lv.time for lv in data.cost.levels] + [data.cost.decode_token_time]
    scale, exact = time_scale(times)
    model = cp_model.CpModel()
    built = _build(data, formulation, _CpSatBackend(model, scale))
    if plan is not None:
        for var, value in _start_values(built, plan, client):
            model.add_hint(var, round(value))
    if tracer.expired():
        return Status.TIME_LIMIT, None
    solver, raw = run_cpsat(model, tracer, workers, display, scale)
    if raw == cp_model.INFEASIBLE:
        return Status.INFEASIBLE, None
    if raw == cp_model.MODEL_INVALID:
        raise RuntimeError(f"CP-SAT rejected the model: {model.validate()}")
    solved = None
    if raw in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        solved = built.plan_from(solver.value)
        tracer.bound(solver.best_objective_bound / scale, "cp-sat")
    if raw == cp_model.OPTIMAL:
        # With times rounded down to the unit, the model's optimum may sit below the true one.
        return (Status.OPTIMAL if exact else Status.FEASIBLE), solved
    return (Status.TIME_LIMIT if tracer.expired() else Status.UNKNOWN), solved
