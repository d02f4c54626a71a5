"""Upper bounds for P||Cmax and Q||Cmax: LPT, MULTIFIT, largest differencing, exchanges.

Every function returns an assignment: ``assignment[i]`` is the machine of job ``i`` (jobs
in the order given). ``speeds`` (uniform machines) default to all ones.
"""

from __future__ import annotations

import heapq

import numpy as np

__all__ = ["improve", "largest_differencing", "lpt", "makespan", "multifit"]


def makespan(times: np.ndarray, assignment: np.ndarray, m: int, speeds: np.ndarray | None = None) -> float:
    loads = np.bincount(assignment, weights=times, minlength=m)
    if speeds is not None:
        loads = loads / speeds
    return float(loads.max())


def lpt(times: np.ndarray, m: int, speeds: np.ndarray | None = None) -> np.ndarray:
    """Longest processing time first: each job, largest first, to the machine that finishes it first."""
    order = np.argsort(-times, kind="stable")
    assignment = np.empty(times.size, dtype=np.int64)
    if speeds is None:
        heap = [(0, j) for j in range(m)]
        for i in order.tolist():
            load, j = heap[0]
            assignment[i] = j
            heapq.heapreplace(heap, (load + int(times[i]), j))
        return assignment
    loads = np.zeros(m)
    for i in order.tolist():
        j = int(np.argmin((loads + times[i]) / speeds))
        assignment[i] = j
        loads[j] += times[i]
    return assignment


def _first_fit_decreasing(times: np.ndarray, order: np.ndarray, m: int, capacity: float) -> np.ndarray | None:
    loads = np.zeros(m)
    assignment = np.empty(times.size, dtype=np.int64)
    for i in order.tolist():
        fits = np.flatnonzero(loads + times[i] <= capacity)
        if fits.size == 0:
            return None
        j = int(fits[0])
        loads[j] += times[i]
        assignment[i] = j
    return assignment


def multifit(times: np.ndarray, m: int, lower: float, upper: float, rounds: int = 10) -> np.ndarray | None:
    """MULTIFIT (Coffman, Garey, Johnson): binary search on a capacity that FFD can pack into m bins."""
    order = np.argsort(-times, kind="stable")
    best = None
    lo, hi = float(lower), float(upper)
    for _ in range(rounds):
        if hi - lo < 1:
            break
        mid = np.floor((lo + hi) / 2)
        packed = _first_fit_decreasing(times, order, m, mid)
        if packed is None:
            lo = mid + 1
        else:
            best, hi = packed, mid
    return best


def largest_differencing(times: np.ndarray, m: int) -> np.ndarray:
    """The m-way largest differencing method of Karmarkar and Karp.

    Each partial solution is m groups of jobs; the two solutions with the largest spread
    (largest group sum minus smallest) are combined by joining the largest group of one
    with the smallest of the other, and so on. Groups are kept as nodes of a merge tree so
    that a combination costs O(m), not O(jobs).
    """
    n = times.size
    # Node arrays: a node is a leaf (job) or the union of two nodes.
    left = np.full(n + n * m, -1, dtype=np.int64)
    right = np.full(n + n * m, -1, dtype=np.int64)
    next_node = n
    heap: list[tuple[int, int, np.ndarray, np.ndarray]] = []
    for i in range(n):
        sums = np.zeros(m, dtype=np.int64)
        sums[0] = times[i]
        nodes = np.full(m, -1, dtype=np.int64)
        nodes[0] = i
        heap.append((-int(times[i]), i, sums, nodes))
    heapq.heapify(heap)
    tie = n
    while len(heap) > 1:
        _, _, sums_a, nodes_a = heapq.heappop(heap)
        _, _, sums_b, nodes_b = heapq.heappop(heap)
        oa = np.argsort(-sums_a, kind="stable")
        ob = np.argsort(sums_b, kind="stable")
        sums = sums_a[oa] + sums_b[ob]
        na, nb = nodes_a[oa], nodes_b[ob]
        nodes = np.where(na < 0, nb, na)
        both = (na >= 0) & (nb >= 0)
        k = int(both.sum())
        if k:
            ids = np.arange(next_node, next_node + k)
            left[ids], right[ids] = na[both], nb[both]
            nodes[both] = ids
            next_node += k
        sums -= sums.min()
        order = np.argsort(-sums, kind="stable")
        heapq.heappush(heap, (-int(sums[order[0]] - sums[order[-1]]), tie, sums[order], nodes[order]))
        tie += 1
    assignment = np.empty(n, dtype=np.int64)
    _, _, _, roots = heap[0]
    for j, root in enumerate(roots.tolist()):
        stack = [root] if root >= 0 else []
        while stack:
            node = stack.pop()
            if node < n:
                assignment[node] = j
            else:
                stack.append(int(left[node]))
                stack.append(int(right[node]))
    return assignment


def improve(
    times: np.ndarray,
    assignment: np.ndarray,
    m: int,
    target: float,
    speeds: np.ndarray | None = None,
    max_rounds: int = 100_000,
    deadline: float | None = None,
) -> np.ndarray:
    """Exchanges that lower the makespan: move one job off a busiest machine, or swap two.

    Repeats until no move or swap strictly lowers the busiest machine without making
    another machine as busy, or the makespan reaches ``target``.
    """
    import time as _time

    a = assignment.copy()
    t = times.astype(np.float64)
    s = np.ones(m) if speeds is None else speeds.astype(np.float64)
    loads = np.bincount(a, weights=t, minlength=m)
    for round_ in range(max_rounds):
        if deadline is not None and round_ % 64 == 0 and _time.perf_counter() > deadline:
            break
        finish = loads / s
        top = int(np.argmax(finish))
        cmax = finish[top]
        if cmax <= target + 1e-9:
            break
        on_top = np.flatnonzero(a == top)
        others = np.flatnonzero(a != top)
        # Candidate (x from top) and (y from machine k, or nothing): new finishes on both.
        x = t[on_top][:, None]
        k_all = np.concatenate([np.arange(m), a[others]])
        y = np.concatenate([np.zeros(m), t[others]])[None, :]
        keep = k_all != top
        k_all, y = k_all[keep], y[:, keep]
        y_idx = np.concatenate([np.full(m, -1), others])[keep]
        delta = x - y
        new_top = (loads[top] - delta) / s[top]
        new_k = (loads[k_all][None, :] + delta) / s[k_all][None, :]
        worst = np.maximum(new_top, new_k)
        worst[delta <= 0] = np.inf
        best = np.unravel_index(np.argmin(worst), worst.shape)
        if not worst[best] < cmax - 1e-9:
            break
        xi = int(on_top[best[0]])
        k = int(k_all[best[1]])
        yi = int(y_idx[best[1]])
        a[xi] = k
        loads[top] -= t[xi]
        loads[k] += t[xi]
        if yi >= 0:
            a[yi] = top
            loads[top] += t[yi]
            loads[k] -= t[yi]
    return a


def _fullest_subset(weights: list[int], low: int, high: int) -> list[bool] | None:
    """A subset of ``weights`` with the largest reachable sum in [low, high], or None.

    A subset-sum programme over Python integers used as bit sets; among the subsets of that
    sum, the one recovered depends on the order of ``weights`` (callers shuffle it).
    """
    if high < low or high < 0:
        return None
    low = max(low, 0)
    mask = (1 << (high + 1)) - 1
    layers = [1]
    for w in weights:
        layers.append((layers[-1] | (layers[-1] << w)) & mask)
    window = layers[-1] >> low
    if window == 0:
        return None
    r = low + window.bit_length() - 1
    used = [False] * len(weights)
    for i in range(len(weights) - 1, -1, -1):
        if not (layers[i] >> r) & 1:  # r is out of reach without job i
            used[i] = True
            r -= weights[i]
    return used


def sequential_completion(
    times: np.ndarray, m: int, capacity: int, rng: np.random.Generator
) -> np.ndarray | None:
    """One randomised pass of sequential partitioning into machines of ``capacity``; None if it fails.

    Machine after machine takes, from all remaining jobs in a random order, a subset of the
    largest sum that leaves the rest packable (at most ``capacity`` per remaining machine on
    average and within the unused room ``m * capacity - sum``). Taking the fullest sum saves
    the room for the last machines, where fills are hardest; the random order varies which
    jobs make up each sum, so repeated passes sample different partitions. This finds
    near-perfect partitions at ``ceil(sum / m)`` with about five jobs per machine that
    largest-first bin completion misses.
    """
    t = [int(x) for x in times.tolist()]
    room = m * capacity - sum(t)
    if room < 0 or max(t) > capacity:
        return None
    left = list(range(len(t)))
    assignment = np.full(len(t), m - 1, dtype=np.int64)
    for j in range(m - 1):
        if not left:
            break
        order = [left[q] for q in rng.permutation(len(left)).tolist()]
        total = sum(t[i] for i in order)
        low = max(total - (m - j - 1) * capacity, capacity - room)
        used = _fullest_subset([t[i] for i in order], low, capacity)
        if used is None:
            return None
        filled = 0
        rest = []
        for i, u in zip(order, used, strict=True):
            if u:
                assignment[i] = j
                filled += t[i]
            else:
                rest.append(i)
        room -= capacity - filled
        left = rest
    if sum(t[i] for i in left) > capacity:
        return None
    return assignment


def _fill(
    sizes: np.ndarray, counts: np.ndarray, room: int, rng: np.random.Generator | None = None
) -> np.ndarray:
    """Counts of each size (sizes ascending) filling ``room`` as fully as possible.

    Among the fullest fills it prefers large sizes, or, with ``rng``, a random order of sizes.
    """
    bundle_size: list[int] = []
    bundle_count: list[int] = []
    kinds = np.arange(sizes.size) if rng is None else rng.permutation(sizes.size)
    for k in kinds.tolist():
        size, count = int(sizes[k]), int(counts[k])
        if size == 0:
            continue  # zero-size jobs fit anywhere; the caller places them
        c, piece = count, 1
        while c > 0 and size <= room:
            take = min(piece, c, room // size)
            if take == 0:
                break
            bundle_size.append(k)
            bundle_count.append(take)
            c -= take
            piece *= 2
    weights = [int(sizes[k]) * c for k, c in zip(bundle_size, bundle_count, strict=True)]
    layers = np.zeros((len(weights) + 1, room + 1), dtype=bool)
    layers[0, 0] = True
    for i, w in enumerate(weights):
        layers[i + 1] = layers[i]
        if w <= room:
            layers[i + 1, w:] |= layers[i, : room + 1 - w]
    best = int(np.flatnonzero(layers[-1])[-1])
    used = np.zeros(sizes.size, dtype=np.int64)
    r = best
    for i in range(len(weights) - 1, -1, -1):
        w = weights[i]
        if r >= w and layers[i, r - w]:
            used[bundle_size[i]] += bundle_count[i]
            r -= w
    return used


def bin_completion(
    times: np.ndarray, m: int, capacity: int, rng: np.random.Generator | None = None
) -> np.ndarray | None:
    """Fill machines one at a time to exactly ``capacity`` where possible; None if it cannot fit.

    Each machine takes the largest remaining job and then the subset of the remaining jobs
    that fills it most (a bounded subset-sum dynamic programme, preferring large jobs). The
    total room left unused must stay within ``m * capacity - sum(times)``. With ``rng`` the
    fill among equally full subsets is chosen at random (for restarts).
    """
    sizes, counts = np.unique(times, return_counts=True)  # ascending
    counts = counts.astype(np.int64)
    budget = m * capacity - int(times.sum())
    if budget < 0 or int(sizes[-1]) > capacity:
        return None
    per_machine = np.zeros((m, sizes.size), dtype=np.int64)
    for j in range(m):
        left = np.flatnonzero(counts)
        if left.size == 0:
            break
        if j == m - 1:
            if int((sizes * counts).sum()) > capacity:
                return None
            per_machine[j] = counts
            counts = counts - counts
            break
        big = int(left[-1])
        counts[big] -= 1
        per_machine[j, big] += 1
        room = capacity - int(sizes[big])
        if room > 0 and counts.any():
            used = _fill(sizes, counts, room, rng)
            per_machine[j] += used
            counts = counts - used
            room -= int((sizes * used).sum())
        budget -= room
        if budget < 0:
            return None
    # Turn counts per machine into an assignment of the jobs.
    assignment = np.empty(times.size, dtype=np.int64)
    pools = {int(v): list(np.flatnonzero(times == v)) for v in sizes.tolist()}
    for j in range(m):
        for k in np.flatnonzero(per_machine[j]).tolist():
            for _ in range(int(per_machine[j, k])):
                assignment[pools[int(sizes[k])].pop()] = j
    return assignment
