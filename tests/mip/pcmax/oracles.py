"""Exact P||Cmax answers computed independently of llmsched's pipeline, for its tests.

* :func:`brute_force`: dynamic programming over subsets of jobs (n up to about 12), with
  machine speeds;
* :func:`fits`: whether the jobs fit ``m`` machines of a capacity: refuted at once where
  the Gilmore-Gomory LP (:func:`pattern_lp_bins`, column generation) needs more than ``m``,
  else decided by Valerio de Carvalho's arc-flow model in its textbook form (an arc of
  every size from every load, unit loss arcs), solved as a MILP by HiGHS through
  ``scipy.optimize.milp``;
* :func:`optimum`: the least capacity that fits, by bisection between ceil(sum/m) and a
  list schedule's makespan (or a given schedule's makespan, deciding one below it first);
* :func:`lp_lower_bound`: the least capacity the Gilmore-Gomory LP alone does not refute.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix


def brute_force(times: np.ndarray, m: int, speeds: np.ndarray | None = None) -> float:
    """The optimal makespan by dynamic programming over subsets (fine for n <= 12)."""
    n = times.size
    full = (1 << n) - 1
    load = np.zeros(1 << n)
    for i in range(n):
        load[1 << i : 1 << (i + 1)] = load[: 1 << i] + times[i]
    s = np.ones(m) if speeds is None else np.asarray(speeds, dtype=float)
    # best[S] for machines 0..k: min over submask T for machine k of max(best_prev[S\\T], load[T]/s_k)
    best = load / s[0]
    for k in range(1, m):
        new = best.copy()
        for mask in range(1, full + 1):
            sub = mask
            value = new[mask]
            while sub:
                cand = max(best[mask ^ sub], load[sub] / s[k])
                if cand < value:
                    value = cand
                sub = (sub - 1) & mask
            new[mask] = value
        best = new
    return float(best[full])


def fits(times: np.ndarray, m: int, capacity: int) -> bool:
    """Whether the jobs can be packed on ``m`` machines with loads <= ``capacity`` (arc-flow MILP).

    Nodes are the loads 0..capacity. Variables: one arc (v, v + s) for every load v and
    distinct positive size s with v + s <= capacity, one loss arc (v, v + 1) for every v,
    and the number of machines z <= m. Flow is conserved at every load strictly between 0
    and the capacity, z leaves 0 and arrives at the capacity, and the arcs of each size
    carry exactly that size's count.
    """
    p = np.asarray(times, dtype=np.int64)
    p = p[p > 0]
    if p.size == 0:
        return True
    if int(p.max()) > capacity or int(p.sum()) > m * capacity:
        return False
    if pattern_lp_bins(p, capacity) > m * (1 + 1e-6):
        return False
    sizes, counts = np.unique(p, return_counts=True)
    tails, heads, kinds = [], [], []
    for k, size in enumerate(sizes.tolist()):
        v = np.arange(capacity - size + 1)
        tails.append(v)
        heads.append(v + size)
        kinds.append(np.full(v.size, k))
    v = np.arange(capacity)
    tails.append(v)
    heads.append(v + 1)
    kinds.append(np.full(v.size, -1))  # loss
    tail, head, kind = np.concatenate(tails), np.concatenate(heads), np.concatenate(kinds)
    arcs = tail.size
    z = arcs  # the column of the machine count
    cols = np.arange(arcs)
    # Row v (0..capacity): inflow - outflow, with +z at the source and -z at the sink.
    rows = np.concatenate([head, tail, [0, capacity]])
    columns = np.concatenate([cols, cols, [z, z]])
    values = np.concatenate([np.ones(arcs), -np.ones(arcs), [1.0, -1.0]])
    balance = coo_matrix((values, (rows, columns)), shape=(capacity + 1, arcs + 1)).tocsr()
    item = kind >= 0
    demand = coo_matrix(
        (np.ones(int(item.sum())), (kind[item], cols[item])), shape=(sizes.size, arcs + 1)
    ).tocsr()
    upper = np.full(arcs + 1, np.inf)
    upper[z] = m
    result = milp(
        np.zeros(arcs + 1),
        constraints=[LinearConstraint(balance, 0, 0), LinearConstraint(demand, counts, counts)],
        integrality=np.ones(arcs + 1),
        bounds=Bounds(np.zeros(arcs + 1), upper),
    )
    if result.status == 0:
        return True
    if result.status == 2:
        return False
    raise RuntimeError(f"HiGHS did not decide capacity {capacity}: {result.message}")


def optimum(times: np.ndarray, m: int, upper: int | None = None) -> int:
    """The optimal makespan on identical machines: the least capacity that :func:`fits`.

    ``upper`` is the makespan of a schedule in hand (checked by the caller); the capacity
    one below it is decided first, as that schedule is often optimal.
    """
    p = np.asarray(times, dtype=np.int64)
    low = max(int(p.max()), -(-int(p.sum()) // m))
    if upper is None:
        loads = np.zeros(m, dtype=np.int64)
        for size in sorted(p.tolist(), reverse=True):  # a list schedule bounds the optimum
            loads[int(np.argmin(loads))] += size
        high = int(loads.max())
    else:
        high = int(upper)
    first = upper is not None
    while low < high:
        mid = high - 1 if first else (low + high) // 2
        first = False
        if fits(p, m, mid):
            high = mid
        else:
            low = mid + 1
    return low


def pattern_lp_bins(times: np.ndarray, capacity: int) -> float:
    """The Gilmore-Gomory LP bound: the least fractional number of machines of ``capacity``.

    Column generation over patterns (how many jobs of each size share a machine, at most
    the size's count): the master LP by HiGHS, the pricing problem (the pattern of most
    dual value) by a bounded-knapsack dynamic programme over the loads. A value clearly
    above m proves that the jobs do not fit m machines of this capacity.
    """
    from scipy.optimize import linprog

    p = np.asarray(times, dtype=np.int64)
    p = p[p > 0]
    if p.size == 0:
        return 0.0
    if int(p.max()) > capacity:
        return np.inf
    sizes, counts = np.unique(p, return_counts=True)
    most = np.minimum(counts, capacity // sizes)
    patterns = [np.eye(sizes.size, dtype=np.int64)[k] * most[k] for k in range(sizes.size)]
    # Pricing items: each size's copies split into bundles of 1, 2, 4, ... jobs.
    bundle_kind, bundle_count = [], []
    for k, c in enumerate(most.tolist()):
        piece = 1
        while c > 0:
            take = min(piece, c)
            bundle_kind.append(k)
            bundle_count.append(take)
            c -= take
            piece *= 2
    weights = [int(sizes[k]) * c for k, c in zip(bundle_kind, bundle_count, strict=True)]
    while True:
        a = np.array(patterns, dtype=np.float64).T  # sizes x patterns
        lp = linprog(
            np.ones(a.shape[1]), A_ub=-a, b_ub=-counts.astype(np.float64), bounds=(0, None), method="highs"
        )
        assert lp.status == 0, lp.message
        duals = -lp.ineqlin.marginals  # >= 0: the value of one more job of each size
        values = [float(duals[k]) * c for k, c in zip(bundle_kind, bundle_count, strict=True)]
        best = np.zeros(capacity + 1)
        taken = np.zeros((len(weights), capacity + 1), dtype=bool)
        for b, (w, v) in enumerate(zip(weights, values, strict=True)):
            with_b = np.full(capacity + 1, -np.inf)
            with_b[w:] = best[: capacity + 1 - w] + v
            taken[b] = with_b > best + 1e-12
            best = np.maximum(best, with_b)
        load = int(np.argmax(best))
        if best[load] <= 1 + 1e-9:
            return float(lp.fun)
        pattern = np.zeros(sizes.size, dtype=np.int64)
        for b in range(len(weights) - 1, -1, -1):
            if taken[b, load]:
                pattern[bundle_kind[b]] += bundle_count[b]
                load -= weights[b]
        patterns.append(pattern)


def lp_lower_bound(times: np.ndarray, m: int, high: int) -> int:
    """The least capacity in [ceil(sum/m), high] that :func:`pattern_lp_bins` does not refute
    for ``m`` machines (``high`` must be the makespan of a schedule in hand): a lower bound on
    the optimum proven by the LP alone, found by bisection (the LP's value does not increase
    with the capacity)."""
    p = np.asarray(times, dtype=np.int64)
    low = max(int(p.max()), -(-int(p.sum()) // m))
    while low < high:
        mid = (low + high) // 2
        if pattern_lp_bins(p, mid) > m * (1 + 1e-6):
            low = mid + 1
        else:
            high = mid
    return low
