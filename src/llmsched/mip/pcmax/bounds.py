"""Lower bounds for P||Cmax (identical machines, minimise the makespan) and Q||Cmax.

The P||Cmax functions take the job sizes sorted in non-increasing order (``p``) and ``m``
machines. Every value returned is proven: a formula that holds for every schedule, or a
capacity refuted by a bin-packing bound. ``expired`` is the caller's wall-clock safety net:
when it returns True the function stops early with what it has proven so far.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = [
    "bin_packing_l2",
    "bpp_bound",
    "dell_amico_martello_bound",
    "lift_to_subset_sum",
    "trivial_bound",
    "uniform_bound",
]

# Bit operations (shifted bits) that subset-sum lifting may spend.
LIFT_BITS = 2e10


def trivial_bound(p: np.ndarray, m: int) -> int:
    """max(ceil(sum p / m), p_max)."""
    return max(-(-int(p.sum()) // m), int(p[0]))


def dell_amico_martello_bound(p: np.ndarray, m: int) -> int:
    """max over k >= 1 of the k+1 smallest among the k*m+1 largest jobs.

    Among the k*m+1 largest jobs some machine receives k+1, so the makespan is at least
    the sum of the k+1 smallest of them. k = 1 is the classic p_m + p_{m+1}.
    """
    n = p.size
    kmax = (n - 1) // m
    if kmax < 1:
        return int(p[0])
    prefix = np.concatenate([[0], np.cumsum(p)])
    k = np.arange(1, kmax + 1)
    # jobs k*m - k .. k*m (0-based), i.e. prefix[k*m + 1] - prefix[k*m - k]
    sums = prefix[k * m + 1] - prefix[k * m - k]
    return int(sums.max())


def bin_packing_l2(p: np.ndarray, capacity: int) -> int:
    """Martello and Toth's L2: a lower bound on the bins of size ``capacity`` the jobs need.

    For each threshold a <= capacity/2: jobs larger than capacity - a each need a bin of
    their own; jobs in (capacity/2, capacity - a] too, leaving room that only jobs in
    [a, capacity/2] could use; the rest of those jobs need new bins.
    """
    if p[0] > capacity:
        return np.iinfo(np.int64).max
    asc = p[::-1]  # non-decreasing
    prefix = np.concatenate([[0], np.cumsum(asc)])
    n = asc.size
    half = capacity / 2
    thresholds = np.unique(asc[asc <= half])
    thresholds = np.concatenate([[0], thresholds]) if thresholds.size else np.array([0])

    def count_le(x: np.ndarray | float) -> np.ndarray:
        return np.searchsorted(asc, x, side="right")

    def count_lt(x: np.ndarray | float) -> np.ndarray:
        return np.searchsorted(asc, x, side="left")

    a = thresholds.astype(np.float64)
    big = n - count_le(capacity - a)  # > capacity - a
    mid_lo = count_le(half)  # index of first job > half
    mid_hi = count_le(capacity - a)
    n_mid = mid_hi - mid_lo
    sum_mid = prefix[mid_hi] - prefix[mid_lo]
    small_lo = count_lt(a)
    sum_small = prefix[mid_lo] - prefix[small_lo]
    free = n_mid * capacity - sum_mid
    extra = np.maximum(0, -(-(sum_small - free) // capacity))
    return int((big + n_mid + extra).max())


def bpp_bound(
    p: np.ndarray, m: int, lower: int, upper: int, expired: Callable[[], bool] | None = None
) -> int:
    """Raise ``lower`` to the least capacity C in [lower, upper] that L2 does not rule out.

    ``upper`` must be the makespan of a schedule in hand (so that C = upper needs no test).
    Feasibility is monotone in C (a packing into bins of size C fits bins of size C + 1),
    so a binary search is valid whatever L2 does between the probes: every capacity below
    the returned one was refuted, or lies below one that was.
    """
    lo, hi = lower, upper
    while lo < hi and not (expired is not None and expired()):
        mid = (lo + hi) // 2
        if bin_packing_l2(p, mid) > m:
            lo = mid + 1
        else:
            hi = mid
    return lo


def lift_to_subset_sum(
    p: np.ndarray, lower: int, upper: int, expired: Callable[[], bool] | None = None
) -> int:
    """The smallest sum of a subset of the jobs that is >= ``lower`` (and <= ``upper``).

    The busiest machine's load is such a sum; ``upper`` must be the makespan of a schedule
    in hand. Bitset dynamic programme on a Python int. Returns ``lower`` unchanged when
    the range is too wide to be worth it (more than ``LIFT_BITS`` bit operations) or the
    safety net fires.
    """
    if upper > 20_000_000 or lower >= upper:
        return lower
    sizes, counts = np.unique(p, return_counts=True)
    pieces = int(np.ceil(np.log2(counts + 1)).sum())
    if pieces * (upper + 1) > LIFT_BITS:
        return lower
    mask = (1 << (upper + 1)) - 1
    reach = 1
    for size, count in zip(sizes.tolist(), counts.tolist(), strict=True):
        if expired is not None and expired():
            return lower
        # binary splitting of the count: 1, 2, 4, ... copies
        k = 1
        while count > 0:
            take = min(k, count)
            reach = (reach | (reach << (take * size))) & mask
            count -= take
            k *= 2
    above = reach >> lower
    if above == 0:
        return upper
    return lower + ((above & -above).bit_length() - 1)


def uniform_bound(p: np.ndarray, speeds: np.ndarray) -> float:
    """Q||Cmax: the k largest jobs need at least their total over the k fastest speeds.

    k = n is the total work over the total speed of the n fastest machines (all of them
    when there are fewer); ``p`` in any order.
    """
    k = min(p.size, speeds.size)
    big = np.cumsum(np.sort(p)[::-1][:k])
    fast = np.cumsum(np.sort(speeds)[::-1][:k])
    return float(max(p.sum() / speeds.sum(), (big / fast).max()))
