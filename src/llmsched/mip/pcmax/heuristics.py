"""Upper bounds for P||Cmax and Q||Cmax: LPT, MULTIFIT, largest differencing, exchanges.

Every function returns an assignment: ``assignment[i]`` is the machine of job ``i`` (jobs
in the order given), or None where it found none. ``speeds`` (uniform machines) default to
all ones. ``expired`` is the caller's wall-clock safety net: when it returns True the
function stops and returns None (or, for :func:`improve`, what it has so far). Work and
memory are bounded by the instance: no function builds a jobs x jobs table.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

import numpy as np

__all__ = [
    "bin_completion",
    "completion_cells",
    "improve",
    "largest_differencing",
    "lpt",
    "makespan",
    "multifit",
    "sequential_completion",
]

Expired = Callable[[], bool] | None

# Largest table (bits) that bin completion's subset-sum programme may build per machine;
# above it bin completion is skipped (LPT and exchanges balance such instances well).
MAX_COMPLETION_CELLS = 500_000_000
# Largest jobs x machines product for which MULTIFIT and largest differencing run (their
# cost grows with it: first-fit scans the machines for every job; largest differencing
# keeps m sums per partial solution, about 32 bytes each).
MAX_JOBS_TIMES_MACHINES = 2_000_000


def _stop(expired: Expired) -> bool:
    return expired is not None and expired()


def makespan(times: np.ndarray, assignment: np.ndarray, m: int, speeds: np.ndarray | None = None) -> float:
    """The makespan of ``assignment``: the largest machine load (divided by the machine's speed)."""
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


def _first_fit_decreasing(
    times: np.ndarray, order: np.ndarray, m: int, capacity: float, expired: Expired = None
) -> np.ndarray | None:
    loads = np.zeros(m)
    assignment = np.empty(times.size, dtype=np.int64)
    for step, i in enumerate(order.tolist()):
        if step % 1024 == 1023 and _stop(expired):
            return None
        fits = np.flatnonzero(loads + times[i] <= capacity)
        if fits.size == 0:
            return None
        j = int(fits[0])
        loads[j] += times[i]
        assignment[i] = j
    return assignment


def multifit(
    times: np.ndarray, m: int, lower: float, upper: float, rounds: int = 10, expired: Expired = None
) -> np.ndarray | None:
    """MULTIFIT (Coffman, Garey, Johnson): binary search on a capacity that FFD can pack into m bins.

    None when no capacity below ``upper`` was packed, or jobs x machines exceeds
    ``MAX_JOBS_TIMES_MACHINES``.
    """
    if times.size * m > MAX_JOBS_TIMES_MACHINES:
        return None
    order = np.argsort(-times, kind="stable")
    best = None
    lo, hi = float(lower), float(upper)
    for _ in range(rounds):
        if hi - lo < 1 or _stop(expired):
            break
        mid = np.floor((lo + hi) / 2)
        packed = _first_fit_decreasing(times, order, m, mid, expired)
        if packed is None:
            lo = mid + 1
        else:
            best, hi = packed, mid
    return best


def largest_differencing(times: np.ndarray, m: int, expired: Expired = None) -> np.ndarray | None:
    """The m-way largest differencing method of Karmarkar and Karp.

    Each partial solution is m groups of jobs; the two solutions with the largest spread
    (largest group sum minus smallest) are combined by joining the largest group of one
    with the smallest of the other, and so on. Groups are kept as nodes of a merge tree so
    that a combination costs O(m), not O(jobs). None when jobs x machines exceeds
    ``MAX_JOBS_TIMES_MACHINES`` (its memory) or the safety net fires.
    """
    n = times.size
    if n * m > MAX_JOBS_TIMES_MACHINES:
        return None
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
        if tie % 256 == 0 and _stop(expired):
            return None
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
    max_rounds: int | None = None,
    expired: Expired = None,
    max_work: int | None = None,
) -> np.ndarray:
    """Exchanges that lower the makespan: move one job off a busiest machine, or swap two.

    Each round takes the busiest machine and makes the move or swap with another machine
    that leaves the higher of the two finish times lowest, if that is below the makespan.
    It stops when no such exchange exists, the makespan reaches ``target``, after
    ``max_rounds`` rounds (default ``2 * jobs + 100``) or ``max_work`` work (a round costs
    jobs + machines + the pairs of a job on the busiest machine and another machine), or
    when ``expired()`` says the wall-clock safety net has fired.

    For a job of size x on the busiest machine and another machine k, the higher finish
    time after exchanging x for a job of size y on k (y = 0: a move) falls and then rises
    in x - y, with its least value at x - y = d_k (the shift that equalises the two finish
    times). So only the jobs on k just above and just below x - d_k need a look: a round
    costs O(n log n) time and O(n) memory, not a jobs x jobs matrix.

    Parameters
    ----------
    times, assignment, m
        Job sizes, the machine of each job, the number of machines.
    target
        Stop once the makespan is at most this (a lower bound, say).
    speeds
        Machine speeds (uniform machines); None for identical machines.
    max_rounds
        At most this many exchanges.
    expired
        Called once a round; True stops the search (the caller's wall-clock safety net).
    max_work
        At most this much work (see above); None for no limit.

    Returns
    -------
    numpy.ndarray
        The improved assignment (a new array).
    """
    a = np.asarray(assignment, dtype=np.int64).copy()
    t = np.asarray(times, dtype=np.float64)
    n = t.size
    s = np.ones(m) if speeds is None else np.asarray(speeds, dtype=np.float64)
    loads = np.bincount(a, weights=t, minlength=m)
    rounds = 2 * n + 100 if max_rounds is None else max_rounds
    work = 0
    for _ in range(rounds):
        if _stop(expired) or (max_work is not None and work >= max_work):
            break
        finish = loads / s
        top = int(np.argmax(finish))
        cmax = float(finish[top])
        if cmax <= target + 1e-9:
            break
        work += n + m + int(np.count_nonzero(a == top)) * (m - 1)
        best = _best_exchange(t, a, loads, s, top, cmax)
        if best is None:
            break
        xi, k, yi = best
        a[xi] = k
        loads[top] -= t[xi]
        loads[k] += t[xi]
        if yi >= 0:
            a[yi] = top
            loads[top] += t[yi]
            loads[k] -= t[yi]
    return a


# Pairs (job on the busiest machine, other machine) looked at in one vectorised block.
_PAIRS_PER_BLOCK = 1 << 18


def _best_exchange(
    t: np.ndarray, a: np.ndarray, loads: np.ndarray, s: np.ndarray, top: int, cmax: float
) -> tuple[int, int, int] | None:
    """(job off ``top``, machine it goes to, job that comes back or -1) lowering the pair's
    higher finish time the most below ``cmax``; None when no exchange gets below it.

    Among equally good exchanges: the lowest job off ``top``, then a move before a swap,
    then the lowest machine (a move) or the lowest job coming back (a swap).
    """
    m = loads.size
    on_top = np.flatnonzero(a == top)
    others = np.flatnonzero(a != top)
    machines = np.flatnonzero(np.arange(m) != top)
    if machines.size == 0 or on_top.size == 0:
        return None  # one machine: nothing to exchange with
    # Candidates y on each other machine, y = 0 (a move, job -1) included, sorted by
    # (machine, size, job). Sizes are replaced by their rank among the distinct sizes, so
    # that the key machine * (ranks + 1) + rank orders them without overflow.
    y_job = np.concatenate([others, np.full(machines.size, -1)])
    y_machine = np.concatenate([a[others], machines])
    y_size = np.concatenate([t[others], np.zeros(machines.size)])
    values = np.unique(y_size)
    y_rank = np.searchsorted(values, y_size)
    width = values.size + 1
    order = np.lexsort((y_job, y_rank, y_machine))
    keys = y_machine[order] * width + y_rank[order]
    y_job, y_machine, y_size = y_job[order], y_machine[order], y_size[order]
    s_top, l_top = s[top], loads[top]
    s_k, l_k = s[machines], loads[machines]
    shift = (l_top * s_k - l_k * s_top) / (s_top + s_k)  # d_k: equal finish times after it
    best_value, best = cmax - 1e-9, None
    block = max(1, _PAIRS_PER_BLOCK // max(1, machines.size))
    for start in range(0, on_top.size, block):
        x_job = on_top[start : start + block]
        x = t[x_job][:, None]
        rank = np.searchsorted(values, x - shift[None, :])  # first distinct size >= the ideal y
        above = np.searchsorted(keys, machines[None, :] * width + rank)
        below = np.clip(above - 1, 0, keys.size - 1)
        below = np.searchsorted(keys, keys[below])  # the lowest job of that size
        worst_parts, cand_parts = [], []
        for cand in (np.clip(above, 0, keys.size - 1), below):
            ok = y_machine[cand] == machines[None, :]
            delta = x - y_size[cand]
            ok &= delta > 0
            worst = np.maximum((l_top - delta) / s_top, (l_k[None, :] + delta) / s_k[None, :])
            worst[~ok] = np.inf
            worst_parts.append(worst.ravel())
            cand_parts.append(cand.ravel())
        worst_all = np.concatenate(worst_parts)
        value = float(worst_all.min())
        if not value < best_value:
            continue
        tied = np.flatnonzero(worst_all == value)
        cand = np.concatenate(cand_parts)[tied]
        pair = tied % (x_job.size * machines.size)
        xi = x_job[pair // machines.size]
        yi = y_job[cand]
        k = machines[pair % machines.size]
        pick = np.lexsort((np.where(yi < 0, k, yi), yi >= 0, xi))[0]
        best_value = value
        best = (int(xi[pick]), int(k[pick]), int(yi[pick]))
    return best


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
    times: np.ndarray, m: int, capacity: int, rng: np.random.Generator, expired: Expired = None
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
        if _stop(expired):
            return None
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
    # Subset sums as bit sets (Python integers): bit r of layers[i] says some of the first
    # i bundles sum to r. An eighth of the memory of a table of booleans, and faster.
    mask = (1 << (room + 1)) - 1
    layers = [1]
    for w in weights:
        layers.append((layers[-1] | (layers[-1] << w)) & mask)
    best = layers[-1].bit_length() - 1
    used = np.zeros(sizes.size, dtype=np.int64)
    r = best
    for i in range(len(weights) - 1, -1, -1):
        w = weights[i]
        if r >= w and (layers[i] >> (r - w)) & 1:
            used[bundle_size[i]] += bundle_count[i]
            r -= w
    return used


def completion_cells(times: np.ndarray, capacity: int) -> int:
    """Bits of the subset-sum table :func:`bin_completion` builds for one machine, at most."""
    _, counts = np.unique(times, return_counts=True)
    pieces = int(np.ceil(np.log2(counts + 1)).sum())  # counts split into 1, 2, 4, ... copies
    return (pieces + 1) * (capacity + 1)


def bin_completion(
    times: np.ndarray,
    m: int,
    capacity: int,
    rng: np.random.Generator | None = None,
    expired: Expired = None,
) -> np.ndarray | None:
    """Fill machines one at a time to exactly ``capacity`` where possible; None if it cannot fit.

    Each machine takes the largest remaining job and then the subset of the remaining jobs
    that fills it most (a bounded subset-sum dynamic programme, preferring large jobs). The
    total room left unused must stay within ``m * capacity - sum(times)``. With ``rng`` the
    fill among equally full subsets is chosen at random (for restarts). None also when the
    programme's table would exceed ``MAX_COMPLETION_CELLS`` bits.
    """
    sizes, counts = np.unique(times, return_counts=True)  # ascending
    counts = counts.astype(np.int64)
    budget = m * capacity - int(times.sum())
    if budget < 0 or int(sizes[-1]) > capacity:
        return None
    if completion_cells(times, capacity) > MAX_COMPLETION_CELLS:
        return None
    per_machine = np.zeros((min(m, times.size), sizes.size), dtype=np.int64)
    for j in range(per_machine.shape[0]):
        if _stop(expired):
            return None
        left = np.flatnonzero(counts)
        if left.size == 0:
            break
        if j == per_machine.shape[0] - 1:
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
    for j in range(per_machine.shape[0]):
        for k in np.flatnonzero(per_machine[j]).tolist():
            for _ in range(int(per_machine[j, k])):
                assignment[pools[int(sizes[k])].pop()] = j
    return assignment
