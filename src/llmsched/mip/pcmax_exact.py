"""Exact step of the P||Cmax pipeline.

First choice: the arc-flow model of bin packing (Valerio de Carvalho) over aggregated job
sizes, in SCIP, deciding the capacity one below the incumbent; its LP relaxation is the
strong Gilmore-Gomory bound. Before it, bin-completion search
(:mod:`llmsched.mip.pcmax_search`) bisects the gap for a share of the time (a fifth, or
half when the arc-flow graph is too large to build); what neither closes goes to a CP-SAT
model that counts how many jobs of each size a machine gets (``y[s, j]``), machines
ordered by load to break their symmetry, warm-started from the incumbent.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from llmsched.mip.pcmax import _Pipeline

__all__ = ["arcflow_lp_bins", "arcflow_lp_bound", "search_capacities", "solve_aggregated", "solve_uniform"]

# Above this many count variables the model is too large to help within typical limits.
MAX_VARIABLES = 60_000
# Arc-flow graphs larger than this are not built.
MAX_ARCS = 100_000


def _solver(pipe: _Pipeline) -> Any:
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, pipe.tracer.remaining())
    solver.parameters.num_workers = max(1, int(pipe.workers))
    solver.parameters.log_search_progress = bool(pipe.display)
    return cp_model, solver


def arcflow_graph(
    sizes: np.ndarray, counts: np.ndarray, capacity: int, max_arcs: int = MAX_ARCS
) -> tuple[np.ndarray, np.ndarray] | None:
    """Arcs (tail, size index) of Valerio de Carvalho's arc-flow graph for bin packing.

    Nodes are partial loads 0..capacity; items are placed in non-increasing size order, so
    an arc of size s leaves only loads reachable with larger sizes and fewer copies of s.
    ``sizes`` must be non-increasing. None when the graph would exceed ``max_arcs``.
    """
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


def arcflow_fits(sorted_p: np.ndarray, capacity: int) -> bool:
    """Whether the arc-flow graph at ``capacity`` is small enough to build (and SCIP is here)."""
    import importlib.util

    if importlib.util.find_spec("pyscipopt") is None:
        return False
    sizes, counts = _positive_sizes(sorted_p)
    return arcflow_graph(sizes, counts, capacity) is not None


# The LP bound is tried only on graphs up to this size: it pays where few sizes repeat many
# times (graphs of a few thousand arcs); on larger graphs each LP costs seconds.
MAX_LP_ARCS = 20_000


def arcflow_lp_bins(sorted_p: np.ndarray, capacity: int, time_limit: float | None = None) -> float | None:
    """The LP relaxation of the arc-flow model: the least fractional number of bins of size
    ``capacity`` (the Gilmore-Gomory bound). None when the graph is too large to build.

    Solved with HiGHS through scipy; arcs carry at most their size's count of jobs, every
    node below the capacity has a loss arc to the sink, and each size's arcs carry at least
    its count. None also when the graph has more than ``MAX_LP_ARCS`` arcs or HiGHS stops
    at ``time_limit`` seconds.
    """
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    sizes, counts = _positive_sizes(sorted_p)
    if sizes.size == 0:
        return 0.0
    if sizes[0] > capacity:
        return math.inf
    graph = arcflow_graph(sizes, counts, capacity, MAX_LP_ARCS)
    if graph is None:
        return None
    tails, kinds = graph
    heads = tails + sizes[kinds]
    nodes = np.unique(np.concatenate([[0, capacity], tails, heads]))
    inner = nodes[(nodes > 0) & (nodes < capacity)]
    # Columns: item arcs, loss arcs (inner node -> sink), then the bin count z.
    arc_tail = np.concatenate([tails, inner])
    arc_head = np.concatenate([heads, np.full(inner.size, capacity)])
    n_arcs = arc_tail.size
    z = n_arcs
    row_of = {int(v): r for r, v in enumerate(inner.tolist())}
    # Conservation at inner nodes: in - out = 0; source: out - z = 0; sink: in - z = 0.
    source_row, sink_row = len(row_of), len(row_of) + 1
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    index = np.arange(n_arcs)
    head_rows = np.array([sink_row if h == capacity else row_of[h] for h in arc_head.tolist()])
    tail_rows = np.array([source_row if t == 0 else row_of[t] for t in arc_tail.tolist()])
    rows += [head_rows, tail_rows, np.array([source_row, sink_row])]
    cols += [index, index, np.array([z, z])]
    vals += [np.ones(n_arcs), -np.ones(n_arcs), np.array([1.0, -1.0])]
    a_eq = coo_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(sink_row + 1, z + 1)
    ).tocsr()
    # Demand: each size's arcs carry at least its count (as -sum <= -count).
    a_ub = coo_matrix(
        (-np.ones(tails.size), (kinds, np.arange(tails.size))), shape=(sizes.size, z + 1)
    ).tocsr()
    cost = np.zeros(z + 1)
    cost[z] = 1.0
    upper = np.concatenate([counts[kinds].astype(np.float64), np.full(inner.size, np.inf), [np.inf]])
    res = linprog(
        cost,
        A_ub=a_ub,
        b_ub=-counts.astype(np.float64),
        A_eq=a_eq,
        b_eq=np.zeros(sink_row + 1),
        bounds=np.column_stack([np.zeros(z + 1), upper]),
        method="highs",
        options={} if time_limit is None else {"time_limit": max(0.01, float(time_limit))},
    )
    if res.status != 0:
        return None
    return float(res.fun)


def arcflow_lp_bound(sorted_p: np.ndarray, m: int, low: int, high: int, deadline: float) -> int:
    """The least capacity in ``[low, high]`` whose arc-flow LP fits the jobs in ``m`` bins.

    The LP's bin count does not increase with the capacity, so bisection finds it; the
    result is a lower bound on the makespan (``high + 1`` when even ``high`` needs more than
    ``m`` bins, ``low`` when a graph is too large or time runs out before any proof).
    A capacity counts as refuted only when the LP needs clearly more than ``m`` bins.
    """
    import time

    proven = low
    while low <= high and time.perf_counter() < deadline:
        capacity = (low + high) // 2
        bins = arcflow_lp_bins(sorted_p, capacity, deadline - time.perf_counter())
        if bins is None:
            break
        if bins > m + 1e-6 * max(1, m):
            proven = max(proven, capacity + 1)
            low = capacity + 1
        else:
            high = capacity - 1
    return proven


def solve_arcflow(pipe: _Pipeline, sorted_p: np.ndarray) -> bool:
    """Decide capacities just below the incumbent with the arc-flow model of bin packing (SCIP).

    For capacity C, the model asks for at most m bins (paths from load 0 to C) holding
    every job; its LP relaxation is the Gilmore-Gomory bound. The capacity tried is one
    below the incumbent: a packing is a better incumbent (and the next try goes lower), a
    refutation proves the incumbent optimal (feasibility is monotone in C, so one proof
    covers every smaller capacity). Returns False, untouched, when a graph is too large to
    build or SCIP is not installed.
    """
    import importlib.util

    if importlib.util.find_spec("pyscipopt") is None:
        return False
    from pyscipopt import Model, quicksum

    p, m = pipe.p, pipe.m
    sizes, counts = _positive_sizes(sorted_p)
    if sizes.size == 0:
        return True
    while not pipe.tracer.closed() and not pipe.tracer.expired():
        capacity = int(pipe.tracer.upper_bound) - 1
        graph = arcflow_graph(sizes, counts, capacity)
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
        model.setParam("limits/time", max(0.01, pipe.tracer.remaining()))
        model.optimize()
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
        pipe.hit_limit = True
        return True
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


def search_capacities(pipe: _Pipeline, share: float, source: str, *, bound_first: bool = False) -> bool:
    """Bisect the gap with bin-completion search, for a share of the time left.

    Each decision at a capacity C between the bound and the incumbent either packs the
    jobs into loads <= C (a better incumbent) or proves none exists (the bound becomes
    C + 1); feasibility is monotone in C, so bisection closes the gap in a logarithmic
    number of decisions. ``bound_first`` decides the bound itself first (the optimum of
    random instances is usually the bound). Stops at the first decision the time share
    cuts short. Returns True when the gap is closed.
    """
    import time

    from llmsched.mip.pcmax_search import bin_completion_search

    stop = time.perf_counter() + share * pipe.tracer.remaining()
    while not pipe.tracer.closed() and time.perf_counter() < stop:
        low, high = int(pipe.tracer.lower_bound), int(pipe.tracer.upper_bound) - 1
        capacity = low if bound_first else low + (high - low) // 2
        bound_first = False
        out = bin_completion_search(pipe.p, pipe.m, capacity, stop)
        if out.verdict == "feasible":
            pipe.offer(out.assignment, source)
        elif out.verdict == "infeasible":
            pipe.bound(capacity + 1, source)
        else:
            break
    return pipe.tracer.closed()


def solve_aggregated(pipe: _Pipeline, sorted_p: np.ndarray) -> None:
    """Close the gap of an identical-machines instance, or raise its bound as far as time allows."""
    # Few jobs per machine and wide sizes suit the search; many small jobs suit arc-flow.
    fits = arcflow_fits(sorted_p, int(pipe.tracer.upper_bound) - 1)
    if search_capacities(pipe, 0.2 if fits else 0.5, "exact (bin-completion search)"):
        return
    if solve_arcflow(pipe, sorted_p):
        return
    p, m = pipe.p, pipe.m
    sizes, counts = np.unique(sorted_p, return_counts=True)
    sizes, counts = sizes[::-1], counts[::-1]
    used = min(m, p.size)  # machines beyond the number of jobs stay empty
    if sizes.size * used > MAX_VARIABLES:
        return
    cp_model, solver = _solver(pipe)
    model = cp_model.CpModel()
    upper = int(pipe.tracer.upper_bound)
    lower = math.ceil(pipe.tracer.lower_bound)
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
    pipe.hit_limit |= status in (cp_model.FEASIBLE, cp_model.UNKNOWN)
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
        pipe.bound(float(math.ceil(solver.best_objective_bound - 1e-9)), "exact (cp-sat)")


def solve_uniform(pipe: _Pipeline) -> None:
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
    pipe.hit_limit |= status in (cp_model.FEASIBLE, cp_model.UNKNOWN)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        assignment = np.array(
            [next(j for j in range(m) if solver.value(x[i, j])) for i in range(p.size)], dtype=np.int64
        )
        pipe.offer(assignment, "exact (cp-sat)")
    bound = solver.objective_value if status == cp_model.OPTIMAL else solver.best_objective_bound
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.UNKNOWN):
        pipe.bound(float(math.ceil(bound - 1e-9)) / scale, "exact (cp-sat)")
