"""Exact steps of the P||Cmax pipeline: the pattern LP's bound and rounding, search, SCIP, CP-SAT.

The Gilmore-Gomory LP of bin packing (patterns of jobs that fit a machine, by column
generation with HiGHS) gives a strong bound where few sizes repeat many times, and whole
patterns of its solution, the few jobs left over packed by bin-completion search, usually
give a packing at that bound.

The exact step proper: bin-completion search (:mod:`llmsched.mip.pcmax.search`) bisects
the gap; then the arc-flow model of bin packing (Valerio de Carvalho) over aggregated job
sizes, in SCIP, decides the capacity one below the incumbent; where its graph is too large,
a CP-SAT model counts how many jobs of each size a machine gets (``y[s, j]``), machines
ordered by load to break their symmetry, warm-started from the incumbent.

Every step's effort is deterministic: search work, SCIP nodes and decisions, CP-SAT's
deterministic time with a fixed seed (one worker, or interleaved workers, which CP-SAT
makes deterministic). The wall clock enters only as the pipeline's safety net.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from llmsched.mip.pcmax.budgets import (
    ARCFLOW_ARCS,
    ARCFLOW_DECISIONS,
    ARCFLOW_LP_ITERATIONS,
    ARCFLOW_LP_WORK,
    ARCFLOW_NODE_WORK,
    ARCFLOW_NODES,
    CPSAT_DETERMINISTIC_TIME,
    EXACT_SEARCH_WORK,
    RANDOM_SEED,
)

if TYPE_CHECKING:
    from llmsched.mip.pcmax.solve import Pipeline

__all__ = [
    "PatternLP",
    "SafetyNet",
    "arcflow_fits",
    "arcflow_graph",
    "pattern_lp",
    "pattern_lp_bins",
    "pattern_lp_bound",
    "pattern_lp_rounding",
    "search_capacities",
    "solve_aggregated",
    "solve_arcflow",
    "solve_uniform",
]


class SafetyNet(Protocol):
    """The wall-clock safety net of a solve (the pipeline is one)."""

    def expired(self) -> bool:
        """Whether the time limit has passed (the caller then stops)."""
        ...

    def remaining(self) -> float:
        """Seconds left before the limit (``inf`` without one)."""
        ...


# Above this many count variables the model is too large to help within typical limits.
MAX_VARIABLES = 60_000
# Arc-flow graphs larger than this are not built.
MAX_ARCS = 100_000
# Arc-flow graphs are built over loads 0..capacity; above this capacity they are not built.
MAX_CAPACITY = 20_000_000


def _solver(pipe: Pipeline) -> tuple[Any, Any]:
    """A CP-SAT solver that gives the same answer on every run: a fixed seed, one worker or
    interleaved workers, a deterministic time budget; the wall clock only as a safety net."""
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    solver.parameters.max_deterministic_time = CPSAT_DETERMINISTIC_TIME * pipe.effort
    remaining = pipe.tracer.remaining()
    if math.isfinite(remaining):
        solver.parameters.max_time_in_seconds = max(0.01, remaining)
    solver.parameters.num_workers = pipe.workers
    solver.parameters.interleave_search = pipe.workers > 1
    solver.parameters.random_seed = RANDOM_SEED
    solver.parameters.log_search_progress = bool(pipe.display)
    return cp_model, solver


def arcflow_graph(
    sizes: np.ndarray, counts: np.ndarray, capacity: int, max_arcs: int = MAX_ARCS
) -> tuple[np.ndarray, np.ndarray] | None:
    """Arcs (tail, size index) of Valerio de Carvalho's arc-flow graph for bin packing.

    Nodes are partial loads 0..capacity; items are placed in non-increasing size order, so
    an arc of size s leaves only loads reachable with larger sizes and fewer copies of s.
    ``sizes`` must be non-increasing. None when the graph would exceed ``max_arcs`` (or its
    capacity ``MAX_CAPACITY``: the construction keeps arrays over every load).
    """
    if capacity > MAX_CAPACITY:
        return None
    reach = np.zeros(capacity + 1, dtype=bool)
    reach[0] = True
    tails: list[np.ndarray] = []
    kinds: list[np.ndarray] = []
    total = 0
    for k, (size, count) in enumerate(zip(sizes.tolist(), counts.tolist(), strict=True)):
        frontier = np.flatnonzero(reach)
        seen = np.zeros(capacity + 1, dtype=bool)  # tails already given an arc of this size
        added = np.zeros(capacity + 1, dtype=bool)
        for _ in range(min(count, capacity // max(size, 1))):
            frontier = frontier[frontier + size <= capacity]
            frontier = frontier[~seen[frontier]]
            if frontier.size == 0:
                break
            seen[frontier] = True
            tails.append(frontier)
            kinds.append(np.full(frontier.size, k))
            total += frontier.size
            if total > max_arcs:
                return None
            frontier = frontier + size
            added[frontier] = True
        reach |= added
    if not tails:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(tails), np.concatenate(kinds)


def _positive_sizes(sorted_p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct positive job sizes, largest first, and their counts (the arc-flow's items)."""
    sizes, counts = np.unique(sorted_p[sorted_p > 0], return_counts=True)
    return sizes[::-1], counts[::-1]


def arcflow_fits(sorted_p: np.ndarray, capacity: int, max_arcs: int = MAX_ARCS) -> bool:
    """Whether the arc-flow graph at ``capacity`` has at most ``max_arcs`` arcs (and SCIP is here)."""
    import importlib.util

    if importlib.util.find_spec("pyscipopt") is None:
        return False
    sizes, counts = _positive_sizes(sorted_p)
    return arcflow_graph(sizes, counts, capacity, max_arcs) is not None


# The pattern LP is solved only where it pays: few distinct sizes repeated many times
# (class-based predictions). Its pricing programme has (pieces of the counts) x capacity
# cells; above these limits the step is skipped.
MAX_LP_SIZES = 64
MIN_LP_REPEATS = 4
MAX_PRICING_CELLS = 4_000_000
# Column-generation rounds at one capacity (each a small LP and a pricing programme).
MAX_LP_ROUNDS = 100
# Relative slack on the dual values and the pricing optimum, far above rounding errors.
LP_SLACK = 1e-9


@dataclass(frozen=True)
class PatternLP:
    """The Gilmore-Gomory LP at one capacity: a proven bound on its value, and its patterns.

    ``bins`` is a proven lower bound on the least fractional number of machines of
    ``capacity`` that hold the jobs (the LP optimum when ``converged``). ``patterns[q]``
    says how many jobs of each size (``sizes``, largest first) pattern q puts on a
    machine, and ``usage[q]`` how many machines the last master LP gives it.
    """

    capacity: int
    bins: float
    sizes: np.ndarray
    counts: np.ndarray
    patterns: np.ndarray
    usage: np.ndarray
    converged: bool

    def __post_init__(self) -> None:
        for name in ("sizes", "counts", "patterns", "usage"):
            frozen = np.array(getattr(self, name))
            frozen.setflags(write=False)
            object.__setattr__(self, name, frozen)


def _pricing(
    sizes: np.ndarray, most: np.ndarray, capacity: int, duals: np.ndarray
) -> tuple[float, np.ndarray]:
    """The pattern of largest dual value (a bounded knapsack): (its value, its counts).

    Each size's copies are split into bundles of 1, 2, 4, ... jobs (0/1 items), and a
    dynamic programme over the loads 0..capacity keeps the best value at each load.
    """
    kinds, copies = [], []
    for k, c in enumerate(most.tolist()):
        piece = 1
        while c > 0:
            take = min(piece, c)
            kinds.append(k)
            copies.append(take)
            c -= take
            piece *= 2
    best = np.zeros(capacity + 1)
    taken = np.zeros((len(kinds), capacity + 1), dtype=bool)
    for b, (k, c) in enumerate(zip(kinds, copies, strict=True)):
        w = int(sizes[k]) * c
        gain = np.full(capacity + 1, -np.inf)
        gain[w:] = best[: capacity + 1 - w] + float(duals[k]) * c
        taken[b] = gain > best
        best = np.maximum(best, gain)
    load = int(np.argmax(best))
    value = float(best[load])
    pattern = np.zeros(sizes.size, dtype=np.int64)
    for b in range(len(kinds) - 1, -1, -1):
        if taken[b, load]:
            pattern[kinds[b]] += copies[b]
            load -= int(sizes[kinds[b]]) * copies[b]
    return value, pattern


def pattern_lp(
    sorted_p: np.ndarray,
    capacity: int,
    net: SafetyNet | None = None,
    rounds: int = MAX_LP_ROUNDS,
    start: np.ndarray | None = None,
) -> PatternLP | None:
    """The Gilmore-Gomory LP of bin packing at ``capacity``, by column generation.

    The master LP (HiGHS) covers each size's count with patterns (sets of jobs that fit
    a machine, at most a size's count of it); pricing finds the pattern of most dual value.
    The bound does not trust the LP solver's optimality: for any duals y >= 0 and V the
    largest dual value of a pattern (found exactly by the pricing programme), every
    covering uses at least y . counts / V machines (Farley's bound), which at convergence
    is the LP optimum. ``start`` holds patterns to begin with (those of another capacity:
    the ones that fit this one are kept). None where the instance has more than
    ``MAX_LP_SIZES`` distinct sizes or fewer than ``MIN_LP_REPEATS`` jobs per size on
    average, the pricing table would exceed ``MAX_PRICING_CELLS``, or the master LP fails.
    """
    sizes, counts = _positive_sizes(sorted_p)
    if sizes.size == 0 or sizes[0] > capacity:
        empty = np.zeros((0, sizes.size), dtype=np.int64)
        bins = 0.0 if sizes.size == 0 else math.inf
        return PatternLP(capacity, bins, sizes, counts, empty, np.zeros(0), True)
    most = np.minimum(counts, capacity // sizes)
    pieces = int(np.ceil(np.log2(most + 1)).sum())
    if sizes.size > MAX_LP_SIZES or pieces * (capacity + 1) > MAX_PRICING_CELLS:
        return None
    if counts.sum() < MIN_LP_REPEATS * sizes.size:
        return None
    from scipy.optimize import linprog  # here: importing it costs more than most instances

    patterns = [np.eye(sizes.size, dtype=np.int64)[k] * most[k] for k in range(sizes.size)]
    if start is not None:
        seen = {q.tobytes() for q in patterns}
        for q in start:
            if int(q @ sizes) <= capacity and np.all(q <= most) and q.tobytes() not in seen:
                seen.add(q.tobytes())
                patterns.append(q)
    demand = counts.astype(np.float64)
    bound, usage, converged = 0.0, np.zeros(0), False
    for _ in range(rounds):
        if net is not None and net.expired():
            break
        columns = np.array(patterns, dtype=np.float64).T  # sizes x patterns
        res = linprog(
            np.ones(columns.shape[1]), A_ub=-columns, b_ub=-demand, bounds=(0, None), method="highs"
        )
        if res.status != 0:
            return None
        usage = res.x
        duals = np.maximum(-res.ineqlin.marginals, 0.0)
        value, pattern = _pricing(sizes, most, capacity, duals)
        top = value * (1 + LP_SLACK) + LP_SLACK
        bound = max(bound, float(duals @ demand) * (1 - LP_SLACK) / top)
        if value <= 1 + LP_SLACK or any(np.array_equal(pattern, q) for q in patterns):
            converged = True
            break
        patterns.append(pattern)
    return PatternLP(
        capacity,
        bound,
        sizes,
        counts,
        np.array(patterns[: usage.size], dtype=np.int64).reshape(usage.size, sizes.size),
        usage,
        converged,
    )


def pattern_lp_bins(sorted_p: np.ndarray, capacity: int) -> float | None:
    """The least fractional number of machines of ``capacity`` that hold the jobs (the
    Gilmore-Gomory bound), or a proven lower bound on it where column generation stopped
    early; None where the LP is not tried (see :func:`pattern_lp`)."""
    lp = pattern_lp(sorted_p, capacity)
    return None if lp is None else lp.bins


def _refutes(lp: PatternLP, m: int) -> bool:
    """The LP proves that the jobs need more than ``m`` machines of its capacity."""
    return lp.bins > m + 1e-6 * max(1, m)


def pattern_lp_bound(
    sorted_p: np.ndarray, m: int, low: int, high: int, net: SafetyNet | None = None
) -> tuple[int, dict[int, PatternLP]]:
    """The least capacity in ``[low, high]`` that the pattern LP does not refute for ``m`` machines.

    Every capacity refuted (the LP proves more than ``m`` machines are needed) raises the
    bound above it, as jobs that do not fit a capacity fit no smaller one; the LP's value
    does not increase with the capacity, so bisection finds the least capacity it leaves
    open. ``low`` must be a proven bound and ``high + 1`` the makespan of a schedule in
    hand. Returns the bound (``low`` when nothing is refuted or the LP is not tried) and
    every LP solved, by capacity.
    """
    proven = low
    solved: dict[int, PatternLP] = {}
    patterns = None  # every LP starts from the patterns of the one before
    while low <= high and not (net is not None and net.expired()):
        capacity = (low + high) // 2
        lp = pattern_lp(sorted_p, capacity, net, start=patterns)
        if lp is None:
            break
        solved[capacity] = lp
        patterns = lp.patterns
        if _refutes(lp, m):
            proven = max(proven, capacity + 1)
            low = capacity + 1
        else:
            high = capacity - 1
    return proven, solved


def pattern_lp_rounding(
    sorted_p: np.ndarray,
    p: np.ndarray,
    m: int,
    capacity: int,
    lp: PatternLP | None,
    work: int,
    net: SafetyNet | None = None,
    start: np.ndarray | None = None,
) -> np.ndarray | None:
    """A packing of the jobs into ``m`` machines of ``capacity`` rounded from the pattern LP.

    Every pattern the LP uses x times fills floor(x) machines (copies of a size beyond what
    is left dropped), largest x first, and the jobs left over go to the machines left by a
    bin-completion search of at most ``work`` units. This is the residual heuristic of
    cutting stock: where the LP bound is the optimum the left-over jobs are few and their
    machines many, and it usually finds the optimum. ``lp`` is the LP at ``capacity`` if
    already solved (else it is solved from the patterns ``start``). None when it finds no
    packing.
    """
    from llmsched.mip.pcmax.search import FEASIBLE, bin_completion_search

    if lp is None:
        lp = pattern_lp(sorted_p, capacity, net, start=start)
    if lp is None or _refutes(lp, m):
        return None
    left = lp.counts.copy()
    machines: list[np.ndarray] = []  # jobs of each size on each machine
    for q in np.argsort(-lp.usage, kind="stable").tolist():
        for _ in range(math.floor(lp.usage[q] + 1e-6)):
            take = np.minimum(lp.patterns[q], left)
            if not take.any():
                break
            left -= take
            machines.append(take)
    if len(machines) > m:
        return None
    if left.any():
        if len(machines) == m:
            return None
        rest = np.repeat(lp.sizes, left)
        out = bin_completion_search(
            rest, m - len(machines), capacity, work_limit=work, expired=None if net is None else net.expired
        )
        if out.verdict != FEASIBLE or out.assignment is None:
            return None
        kinds = np.repeat(np.arange(lp.sizes.size), left)
        for j in range(m - len(machines)):
            machines.append(np.bincount(kinds[out.assignment == j], minlength=lp.sizes.size))
    assignment = np.zeros(p.size, dtype=np.int64)  # zero-size jobs stay on machine 0
    pools = [np.flatnonzero(p == v).tolist() for v in lp.sizes.tolist()]
    for j, tally in enumerate(machines):
        for k in np.flatnonzero(tally).tolist():
            for _ in range(int(tally[k])):
                assignment[pools[k].pop()] = j
    return assignment


def solve_arcflow(pipe: Pipeline, sorted_p: np.ndarray) -> bool:
    """Decide capacities just below the incumbent with the arc-flow model of bin packing (SCIP).

    For capacity C, the model asks for at most m bins (paths from load 0 to C) holding
    every job; its LP relaxation is the Gilmore-Gomory bound. The capacity tried is one
    below the incumbent: a packing is a better incumbent (and the next try goes lower), a
    refutation proves the incumbent optimal (feasibility is monotone in C, so one proof
    covers every smaller capacity). Each decision may spend ``ARCFLOW_NODES`` nodes of
    SCIP's branch and bound (times the effort), and at most ``ARCFLOW_DECISIONS`` are made.
    Returns False, untouched, when a graph is too large to build or SCIP is not installed.
    """
    import importlib.util

    if importlib.util.find_spec("pyscipopt") is None:
        return False
    from pyscipopt import Model, quicksum

    p, m = pipe.p, pipe.m
    sizes, counts = _positive_sizes(sorted_p)
    if sizes.size == 0:
        return True
    for _ in range(pipe.budget(ARCFLOW_DECISIONS)):
        if pipe.tracer.closed() or pipe.expired():
            return True
        capacity = pipe.upper - 1
        # The graph's size is part of the budget: SCIP presolves it and solves its root LP
        # before the node limit counts anything.
        graph = arcflow_graph(sizes, counts, capacity, min(MAX_ARCS, pipe.budget(ARCFLOW_ARCS)))
        if graph is None:
            return False
        tails, kinds = graph
        heads = tails + sizes[kinds]
        nodes = np.unique(np.concatenate([[0, capacity], tails, heads])).tolist()
        model = Model(f"arcflow({capacity})")
        model.hideOutput(not pipe.display)
        flow = [model.addVar(vtype="I", lb=0, ub=int(counts[k])) for k in kinds.tolist()]
        bins = model.addVar(vtype="I", lb=0, ub=m, name="bins")
        out_edges: dict[int, list[Any]] = {v: [] for v in nodes}
        in_edges: dict[int, list[Any]] = {v: [] for v in nodes}
        for arc, (t, h) in enumerate(zip(tails.tolist(), heads.tolist(), strict=True)):
            out_edges[t].append(flow[arc])
            in_edges[h].append(flow[arc])
        for v in nodes:
            if 0 < v < capacity:  # loss arc: the bin ends below the capacity
                loss = model.addVar(vtype="I", lb=0, ub=m)
                out_edges[v].append(loss)
                in_edges[capacity].append(loss)
        for v in nodes:
            if v == 0:
                model.addCons(quicksum(out_edges[v]) == bins)
            elif v == capacity:
                model.addCons(quicksum(in_edges[v]) == bins)
            else:
                model.addCons(quicksum(in_edges[v]) == quicksum(out_edges[v]))
        for k in range(sizes.size):
            model.addCons(
                quicksum(flow[arc] for arc in np.flatnonzero(kinds == k).tolist()) == int(counts[k])
            )
        model.setObjective(bins, "minimize")
        model.setParam("limits/solutions", 1)  # any packing into m bins decides the question
        # Nodes, and simplex iterations of each LP (the root's included): a deterministic
        # bound on the LP work a large graph can take before the node limit counts
        # anything. Both shrink with the graph, whose size an iteration's cost follows.
        arcs = max(1, tails.size)
        nodes_allowed = min(pipe.budget(ARCFLOW_NODES), max(1, pipe.budget(ARCFLOW_NODE_WORK) // arcs))
        iterations = min(pipe.budget(ARCFLOW_LP_ITERATIONS), max(1, pipe.budget(ARCFLOW_LP_WORK) // arcs))
        model.setParam("lp/iterlim", iterations)
        model.setParam("lp/rootiterlim", iterations)
        # Probing in presolve has no work limit of its own: on a large graph of binary-like
        # arcs it alone ran past the clock (9.5 s for 0.6% of the variables).
        model.setParam("propagating/probing/maxprerounds", 0)
        remaining = pipe.tracer.remaining()
        if math.isfinite(remaining):  # SCIP refuses an infinite limit; its default is none
            model.setParam("limits/time", max(0.01, remaining))
        # The root first: where its LP does not converge within the iterations, every node's
        # LP would hit the cap too (each costing as much), so the decision is given up.
        model.setParam("limits/nodes", 1)
        model.optimize()
        status = model.getStatus()
        if status == "nodelimit" and model.getNSols() == 0 and nodes_allowed > 1:
            if model.getNLPIterations() >= iterations:
                return True  # the root LP ran out of iterations: undecided, the exact step ends
            model.setParam("limits/nodes", nodes_allowed)
            model.optimize()  # SCIP goes on from where the root left it
            status = model.getStatus()
        if status == "infeasible":
            pipe.bound(capacity + 1, "exact (arc-flow)")
            continue
        if model.getNSols() > 0:
            best = model.getBestSol()
            values = [round(model.getSolVal(best, f)) for f in flow]
            used = round(model.getSolVal(best, bins))
            # A packing proves the optimum is at most ``capacity``, never at least: it is a
            # better incumbent, and the next round decides one below it.
            pipe.offer(
                _decompose(p, sizes, (tails, heads, kinds), capacity, values, used), "exact (arc-flow)"
            )
            continue
        if status == "timelimit":
            pipe.expired()  # records that the safety net stopped it
        return True  # the node budget (or the clock) ran out undecided
    return True


def _decompose(
    p: np.ndarray,
    sizes: np.ndarray,
    arcs: tuple[np.ndarray, np.ndarray, np.ndarray],
    capacity: int,
    values: list[int],
    used: int,
) -> np.ndarray:
    """Split an arc flow into paths from 0 to the sink (one per machine) and place the jobs."""
    tails, heads, kinds = arcs
    remaining = list(values)
    by_tail: dict[int, list[int]] = {}
    for a, t in enumerate(tails.tolist()):
        by_tail.setdefault(t, []).append(a)
    assignment = np.zeros(p.size, dtype=np.int64)  # zero-size jobs stay on machine 0
    pools = {int(v): list(np.flatnonzero(p == v)) for v in sizes.tolist()}
    for j in range(used):
        node = 0
        while node != capacity:
            arc = next((a for a in by_tail.get(node, []) if remaining[a] > 0), None)
            if arc is None:
                break  # the bin closes here through its loss arc
            remaining[arc] -= 1
            assignment[pools[int(sizes[kinds[arc]])].pop()] = j
            node = int(heads[arc])
    return assignment


def search_capacities(pipe: Pipeline, work: int, source: str, *, bound_first: bool = False) -> bool:
    """Bisect the gap with bin-completion search, within ``work`` units of search in all.

    Each decision at a capacity C between the bound and the incumbent either packs the
    jobs into loads <= C (a better incumbent) or proves none exists (the bound becomes
    C + 1); feasibility is monotone in C, so bisection closes the gap in a logarithmic
    number of decisions. ``bound_first`` decides the bound itself first (the optimum of
    random instances is usually the bound). Stops at the first decision the work budget
    (or the safety net) cuts short. Returns True when the gap is closed.
    """
    from llmsched.mip.pcmax.search import FEASIBLE, INFEASIBLE, bin_completion_search

    left = work
    while not pipe.tracer.closed() and left > 0 and not pipe.expired():
        low, high = pipe.lower, pipe.upper - 1
        capacity = low if bound_first else low + (high - low) // 2
        bound_first = False
        out = bin_completion_search(pipe.p, pipe.m, capacity, work_limit=left, expired=pipe.expired)
        left -= max(1, out.work)
        if out.verdict == FEASIBLE:
            pipe.offer(out.assignment, source)
        elif out.verdict == INFEASIBLE:
            pipe.bound(capacity + 1, source)
        else:
            break
    return pipe.tracer.closed()


def solve_aggregated(pipe: Pipeline, sorted_p: np.ndarray) -> None:
    """Close the gap of an identical-machines instance, or raise its bound as far as the budgets allow."""

    # Few jobs per machine and wide sizes suit the search; many small jobs suit arc-flow.
    fits = pipe.arcflow_fits(sorted_p, pipe.upper - 1)
    work = pipe.budget(EXACT_SEARCH_WORK / (4 if fits else 1))
    if search_capacities(pipe, work, "exact (bin-completion search)"):
        return
    if pipe.expired() or solve_arcflow(pipe, sorted_p):
        return
    p, m = pipe.p, pipe.m
    sizes, counts = np.unique(sorted_p, return_counts=True)
    sizes, counts = sizes[::-1], counts[::-1]
    used = min(m, p.size)  # machines beyond the number of jobs stay empty
    if sizes.size * used > MAX_VARIABLES:
        return
    cp_model, solver = _solver(pipe)
    model = cp_model.CpModel()
    upper = pipe.upper
    lower = pipe.lower
    y = {
        (k, j): model.new_int_var(0, int(counts[k]), f"y[{sizes[k]},{j}]")
        for k in range(sizes.size)
        for j in range(used)
    }
    loads = [model.new_int_var(0, upper, f"load[{j}]") for j in range(used)]
    cmax = model.new_int_var(lower, upper, "cmax")
    for k in range(sizes.size):
        model.add(sum(y[k, j] for j in range(used)) == int(counts[k]))
    for j in range(used):
        model.add(loads[j] == sum(int(sizes[k]) * y[k, j] for k in range(sizes.size)))
        model.add(loads[j] <= cmax)
        if j:
            model.add(loads[j - 1] >= loads[j])  # identical machines: order them by load
    model.minimize(cmax)

    # Warm start: the incumbent's machines in order of load.
    assert pipe.assignment is not None
    inc_loads = np.bincount(pipe.assignment, weights=p, minlength=m)
    rank = np.argsort(-inc_loads, kind="stable")[:used]
    index = {int(v): k for k, v in enumerate(sizes.tolist())}
    for j, machine in enumerate(rank.tolist()):
        on = p[pipe.assignment == machine]
        tally = np.zeros(sizes.size, dtype=np.int64)
        for v in on.tolist():
            tally[index[v]] += 1
        for k in range(sizes.size):
            model.add_hint(y[k, j], int(tally[k]))

    status = solver.solve(model)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        # Turn counts back into an assignment of the original jobs.
        assignment = np.empty(p.size, dtype=np.int64)
        pools = {int(v): list(np.flatnonzero(p == v)) for v in sizes.tolist()}
        for j in range(used):
            for k in range(sizes.size):
                for _ in range(solver.value(y[k, j])):
                    assignment[pools[int(sizes[k])].pop()] = j
        pipe.offer(assignment, "exact (cp-sat)")
    if status == cp_model.OPTIMAL:
        pipe.bound(float(solver.objective_value), "exact (cp-sat)")
    elif status in (cp_model.FEASIBLE, cp_model.UNKNOWN):
        pipe.expired()  # records whether the safety net, not the deterministic budget, stopped it
        pipe.bound(float(math.ceil(solver.best_objective_bound - 1e-9)), "exact (cp-sat)")


def solve_uniform(pipe: Pipeline) -> None:
    """Exact step for uniform machines with integer speeds (makespan scaled by lcm(speeds))."""
    p, m, speeds = pipe.p, pipe.m, pipe.speeds
    assert speeds is not None and pipe.assignment is not None
    if not np.all(speeds == np.round(speeds)) or p.size * m > MAX_VARIABLES:
        return
    s = speeds.astype(np.int64)
    scale = math.lcm(*s.tolist())
    if scale > 10**6:
        return
    cp_model, solver = _solver(pipe)
    model = cp_model.CpModel()
    upper = math.ceil(pipe.tracer.upper_bound * scale)
    lower = math.ceil(pipe.tracer.lower_bound * scale - 1e-9)
    x = {(i, j): model.new_bool_var(f"x[{i},{j}]") for i in range(p.size) for j in range(m)}
    t = model.new_int_var(lower, upper, "scaled_makespan")
    for i in range(p.size):
        model.add_exactly_one(x[i, j] for j in range(m))
    for j in range(m):
        load = sum(int(p[i]) * x[i, j] for i in range(p.size))
        model.add(load * (scale // int(s[j])) <= t)
    model.minimize(t)
    for i in range(p.size):
        for j in range(m):
            model.add_hint(x[i, j], int(pipe.assignment[i] == j))
    status = solver.solve(model)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        assignment = np.array(
            [next(j for j in range(m) if solver.value(x[i, j])) for i in range(p.size)], dtype=np.int64
        )
        pipe.offer(assignment, "exact (cp-sat)")
    if status in (cp_model.FEASIBLE, cp_model.UNKNOWN):
        pipe.expired()  # records whether the safety net, not the deterministic budget, stopped it
    bound = solver.objective_value if status == cp_model.OPTIMAL else solver.best_objective_bound
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.UNKNOWN):
        pipe.bound(float(math.ceil(bound - 1e-9)) / scale, "exact (cp-sat)")
