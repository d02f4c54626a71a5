"""Percentiles and means over values with counts, and range maxima, against the expanded lists."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmsched.core.metrics import range_max, weighted_mean, weighted_percentile

# Values that collide often (ties across entries) and values that do not.
VALUES = st.one_of(
    st.sampled_from([0.0, 0.071, 0.071, 0.1, 1.0, 2.5, 1e6]),
    st.floats(-1e9, 1e9, allow_nan=False, allow_infinity=False),
)
PERCENT = st.one_of(st.sampled_from([0.0, 50.0, 90.0, 99.0, 99.9, 100.0]), st.floats(0, 100))
PERCENTS = st.lists(PERCENT, min_size=1, max_size=8)


@given(st.lists(st.tuples(VALUES, st.integers(0, 7)), min_size=1, max_size=12), PERCENTS)
def test_weighted_percentile_is_numpys_on_the_expanded_list_bit_for_bit(pairs, percents) -> None:
    """Each percentile is the very float numpy gives on the list with every value repeated."""
    values = np.array([v for v, _ in pairs])
    counts = np.array([c for _, c in pairs])
    if counts.sum() == 0:
        counts[0] = 1
    expanded = np.repeat(values, counts)
    got = weighted_percentile(values, counts, percents)
    assert got.tolist() == np.percentile(expanded, percents).tolist()
    assert got.dtype == np.float64 and got.shape == (len(percents),)


@given(st.lists(st.integers(1, 10**9), min_size=1, max_size=6), st.floats(0, 100))
def test_weighted_percentile_with_huge_counts(counts, percent) -> None:
    """Counts in the billions (far beyond what could be expanded) interpolate as numpy would on
    the index (n - 1) * q / 100: checked against the positions numpy's rule picks."""
    values = np.arange(len(counts), dtype=np.float64) * 0.5
    got = float(weighted_percentile(values, counts, percent))
    n = int(np.sum(counts))
    index = (n - 1) * (percent / 100)
    ends = np.cumsum(counts)
    low = values[np.searchsorted(ends, np.floor(index), side="right")]
    high = values[np.searchsorted(ends, min(np.floor(index) + 1, n - 1), side="right")]
    assert low <= got <= high
    if low == high:
        assert got == low


def test_weighted_percentile_shapes_nan_and_bad_input() -> None:
    """A scalar percentile gives a 0-d array; NaN among the values gives NaN as in numpy; bad
    shapes, counts and percentiles are refused by name."""
    assert weighted_percentile([3.0, 1.0], [1, 3], 50).shape == ()
    assert float(weighted_percentile([3.0, 1.0], [1, 3], 50)) == 1.0
    assert float(weighted_percentile([3.0, 1.0], [1, 3], 100)) == 3.0
    assert np.isnan(weighted_percentile([1.0, np.nan], [2, 1], [10, 50])).all()
    assert float(weighted_percentile([1.0, np.nan], [2, 0], 50)) == 1.0  # a count of 0 leaves NaN out
    with pytest.raises(ValueError, match="one length"):
        weighted_percentile([1.0, 2.0], [1], 50)
    with pytest.raises(ValueError, match="counts must be >= 0"):
        weighted_percentile([1.0, 2.0], [1, -1], 50)
    with pytest.raises(ValueError, match="counts must be integers"):
        weighted_percentile([1.0, 2.0], [1, 0.5], 50)
    with pytest.raises(ValueError, match="at least one value"):
        weighted_percentile([1.0, 2.0], [0, 0], 50)
    with pytest.raises(ValueError, match=r"percentiles must be in \[0, 100\]"):
        weighted_percentile([1.0], [1], [50, 101])
    with pytest.raises(ValueError, match=r"percentiles must be in \[0, 100\]"):
        weighted_percentile([1.0], [1], np.nan)


@given(st.lists(st.tuples(VALUES, st.integers(0, 7)), min_size=1, max_size=12))
def test_weighted_mean_is_the_mean_of_the_expanded_list(pairs) -> None:
    """The weighted mean equals numpy's mean of the expanded list (up to rounding)."""
    values = np.array([v for v, _ in pairs])
    counts = np.array([c for _, c in pairs])
    expanded = np.repeat(values, counts)
    if not expanded.size:
        assert np.isnan(weighted_mean(values, counts))
        return
    scale = max(1.0, float(np.abs(values).max()))
    assert weighted_mean(values, counts) == pytest.approx(expanded.mean(), rel=1e-9, abs=1e-9 * scale)


@given(
    st.lists(st.floats(-1e6, 1e6, allow_nan=False), max_size=70),
    st.lists(st.tuples(st.integers(-3, 75), st.integers(-3, 75)), max_size=30),
)
def test_range_max_equals_slicing(values, ranges) -> None:
    """Every range's maximum is the maximum of the slice, clipped to the array; an empty range
    gets the ``empty`` value."""
    arr = np.array(values, dtype=np.float64)
    lo = np.array([a for a, _ in ranges], dtype=np.int64)
    hi = np.array([b for _, b in ranges], dtype=np.int64)
    n = arr.size
    expected = [
        float(arr[min(max(a, 0), n) : min(max(b, 0), n)].max())
        if min(max(b, 0), n) > min(max(a, 0), n)
        else -1.0
        for a, b in ranges
    ]
    assert range_max(arr, lo, hi, empty=-1.0).tolist() == expected


def test_range_max_defaults_and_shapes() -> None:
    """An empty range gives -inf by default; NaN propagates; shapes must agree."""
    assert range_max([1.0, 5.0, 2.0], [0, 2, 1], [3, 2, 2]).tolist() == [5.0, -np.inf, 5.0]
    assert np.isnan(range_max([1.0, np.nan, 2.0], [0], [3])[0])
    assert range_max([], [0], [0]).tolist() == [-np.inf]
    with pytest.raises(ValueError, match="one shape"):
        range_max([1.0], [0, 1], [1])
