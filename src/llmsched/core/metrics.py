"""Statistics over values given with multiplicities, and range maxima.

A schedule's time-between-tokens distribution has one entry per output token (34 million
for a 100,000-request GSM8K-shaped run), but few distinct entries: within one decode run
every gap is that run's iteration time. The functions here compute with ``(values, counts)``
pairs instead of the expanded list, and give what numpy gives on the expanded list.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["range_max", "weighted_mean", "weighted_percentile"]


def _pairs(values: Any, counts: Any) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    vals = np.asarray(values, dtype=np.float64)
    cnts = np.asarray(counts)
    if vals.ndim != 1 or cnts.shape != vals.shape:
        raise ValueError(
            f"values and counts must be one-dimensional arrays of one length, got shapes "
            f"{vals.shape} and {cnts.shape}"
        )
    if cnts.size and cnts.dtype.kind not in "iu":
        raise ValueError(f"counts must be integers, got dtype {cnts.dtype}")
    cnts = cnts.astype(np.int64)
    if cnts.size and cnts.min() < 0:
        raise ValueError(f"counts must be >= 0, got {cnts.min().item()} among them")
    return vals, cnts


def weighted_percentile(values: Any, counts: Any, q: Any) -> npt.NDArray[np.float64]:
    """``np.percentile(np.repeat(values, counts), q)``, bit for bit, without the repeat.

    numpy's default (``"linear"``) percentile over the list in which ``values[k]`` appears
    ``counts[k]`` times. The interpolation repeats numpy's own arithmetic step by step
    (virtual index ``(n - 1) * q / 100``, its floor, and the two-sided linear interpolation),
    so the result is the same float, not merely a close one. Time and memory grow with
    ``values``, not with the sum of ``counts``.

    Parameters
    ----------
    values
        The distinct (or not) values, in any order; NaN makes every percentile NaN, as in numpy.
    counts
        How often each value occurs: integers >= 0 (values with count 0 are left out).
    q
        Percentiles in [0, 100], a number or an array of them.

    Returns
    -------
    numpy.ndarray
        One float per entry of ``q`` (a 0-dimensional array for a scalar ``q``).

    Raises
    ------
    ValueError
        Mismatched shapes, negative or non-integer counts, no values at all (every count
        0), or a percentile outside [0, 100].
    """
    vals, cnts = _pairs(values, counts)
    fraction = np.true_divide(q, 100)
    if not (np.all(fraction >= 0) and np.all(fraction <= 1)):
        raise ValueError(f"percentiles must be in [0, 100], got {q!r}")
    shape = np.shape(fraction)
    fraction = np.atleast_1d(fraction)
    keep = cnts > 0
    vals, cnts = vals[keep], cnts[keep]
    if not vals.size:
        raise ValueError("weighted_percentile needs at least one value with a count > 0")
    order = np.argsort(vals, kind="stable")
    vals, ends = vals[order], np.cumsum(cnts[order])
    total = int(ends[-1])

    # numpy.lib._function_base_impl._quantile and _get_indexes, for method="linear".
    virtual = (total - 1) * fraction
    previous = np.floor(virtual)
    following = previous + 1
    above = virtual >= total - 1
    previous[above] = -1
    following[above] = -1
    below = virtual < 0
    previous[below] = 0
    following[below] = 0
    previous_at = previous.astype(np.intp)
    following_at = following.astype(np.intp)
    gamma = np.asanyarray(virtual - previous_at)

    def at(index: np.ndarray) -> np.ndarray:
        # The entry at this position of the expanded, sorted list (-1: the last one).
        position = np.where(index < 0, total + index, index)
        return vals[np.searchsorted(ends, position, side="right")]

    low, high = at(previous_at), at(following_at)
    # numpy's _lerp: from the low side below one half, from the high side from one half on.
    step = high - low
    result = np.add(low, step * gamma)
    np.subtract(high, step * (1 - gamma), out=result, where=gamma >= 0.5)
    if np.isnan(vals[-1]):  # NaN sorts last; numpy then answers NaN throughout
        result = np.full_like(result, np.nan)
    return np.asarray(result, dtype=np.float64).reshape(shape)


def weighted_mean(values: Any, counts: Any) -> float:
    """Mean of the list in which ``values[k]`` appears ``counts[k]`` times (NaN when it is empty)."""
    vals, cnts = _pairs(values, counts)
    total = int(cnts.sum())
    if not total:
        return float("nan")
    keep = cnts > 0
    return float(np.dot(vals[keep], cnts[keep].astype(np.float64)) / total)


def range_max(values: Any, lo: Any, hi: Any, empty: float = -np.inf) -> npt.NDArray[np.float64]:
    """``max(values[lo[k]:hi[k]])`` for every ``k`` (``empty`` where a range holds nothing).

    A segment tree over ``values`` (twice their memory) answers all ranges together, one
    level at a time: time grows as ``len(values) + len(lo) * log(len(values))``, whatever
    the ranges' lengths.

    Parameters
    ----------
    values
        Floats (a NaN among them propagates to the ranges holding it).
    lo, hi
        Integer arrays of one shape: half-open ranges, clipped to ``[0, len(values)]``.
    empty
        The answer for an empty range.
    """
    vals = np.asarray(values, dtype=np.float64)
    start = np.clip(np.asarray(lo, dtype=np.int64), 0, vals.size)
    stop = np.clip(np.asarray(hi, dtype=np.int64), 0, vals.size)
    if start.shape != stop.shape:
        raise ValueError(f"lo and hi must have one shape, got {start.shape} and {stop.shape}")
    out = np.full(start.shape, -np.inf)
    if vals.size:
        size = 1 << int(vals.size - 1).bit_length()
        tree = np.full(2 * size, -np.inf)
        tree[size : size + vals.size] = vals
        for level in range(size.bit_length() - 2, -1, -1):
            first = 1 << level
            tree[first : 2 * first] = np.maximum(
                tree[2 * first : 4 * first : 2], tree[2 * first + 1 : 4 * first : 2]
            )
        # The iterative bottom-up query, every range at once: a left end that is a right
        # child (odd) takes its node and moves right; a right end that is odd moves left
        # and takes its node; both climb one level.
        left, right = start + size, stop + size
        while True:
            live = left < right
            if not live.any():
                break
            take = live & (left & 1 == 1)
            out[take] = np.maximum(out[take], tree[left[take]])
            left = left + take
            take = live & (right & 1 == 1)
            right = right - take
            out[take] = np.maximum(out[take], tree[right[take]])
            left >>= 1
            right >>= 1
    return np.where(stop > start, out, empty)
