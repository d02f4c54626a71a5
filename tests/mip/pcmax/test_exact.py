"""pcmax_exact: the pattern LP's bound and rounding, against independent answers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsched import workloads
from llmsched.mip import Status, solve_pcmax
from llmsched.mip.pcmax import bounds as lb
from llmsched.mip.pcmax.exact import arcflow_graph, pattern_lp, pattern_lp_bound, pattern_lp_rounding
from tests.mip.pcmax.oracles import brute_force, optimum
from tests.mip.pcmax.oracles import pattern_lp_bins as reference_lp_bins


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.sampled_from([3, 5, 7, 11, 13]), min_size=8, max_size=30),
    st.integers(1, 4),
)
def test_pattern_lp_bound_never_exceeds_the_optimum(times: list[int], m: int) -> None:
    """The pattern LP bound, bisected over any range, is a valid lower bound on the optimum, and
    its value at the bound matches an independent column generation."""
    arr = np.array(times)
    sorted_p = np.sort(arr)[::-1]
    low = lb.trivial_bound(sorted_p, m)
    packing = solve_pcmax(arr, m).assignment  # a schedule in hand bounds the oracle's search
    opt = optimum(arr, m, upper=int(np.bincount(packing, weights=arr, minlength=m).max()))
    bound, solved = pattern_lp_bound(sorted_p, m, low, int(arr.sum()))
    assert low <= bound <= opt
    for capacity, lp in solved.items():
        assert lp.converged
        assert lp.bins == pytest.approx(reference_lp_bins(arr, capacity), rel=1e-6)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.sampled_from([4, 9, 10, 17, 23]), min_size=8, max_size=30),
    st.integers(2, 5),
    st.integers(0, 6),
)
def test_pattern_lp_rounding_packs_within_the_capacity(times: list[int], m: int, extra: int) -> None:
    """Whatever the rounding returns places every job within the capacity on m machines."""
    arr = np.array(times)
    sorted_p = np.sort(arr)[::-1]
    capacity = lb.trivial_bound(sorted_p, m) + extra
    found = pattern_lp_rounding(sorted_p, arr, m, capacity, None, 100_000)
    if found is not None:
        assert found.shape == arr.shape and found.min() >= 0 and found.max() < m
        assert np.bincount(found, weights=arr, minlength=m).max() <= capacity


def test_pattern_lp_declines_instances_without_repeats() -> None:
    """Distinct sizes with few copies each (random wide sizes) are not worth the LP: None."""
    p = np.sort(np.random.default_rng(0).integers(1, 10001, size=50))[::-1]
    assert pattern_lp(p, int(p.sum()) // 10) is None


def test_pattern_lp_closes_class_predicted_sizes() -> None:
    """Few sizes repeated many times (class-based predictions): the LP bound proves the optimum
    far above ceil(sum/m), where bin completion alone cannot, and rounding its patterns packs it."""
    w = workloads.gsm8k(0)
    sizes = (np.minimum(w.output_tokens // 51.2, 9) + 0.5) * 51.2  # Mico's class midpoints
    times = np.rint(sizes).astype(np.int64)
    result = solve_pcmax(times, 200, time_limit=30)
    assert result.status is Status.OPTIMAL and result.lower_bound == result.makespan
    sorted_p = np.sort(times)[::-1]
    assert result.makespan > lb.trivial_bound(sorted_p, 200)  # the bound had to be raised
    below = pattern_lp(sorted_p, int(result.makespan) - 1)
    at = pattern_lp(sorted_p, int(result.makespan))
    assert below is not None and at is not None
    assert below.bins > 200 >= at.bins
    assert reference_lp_bins(times, int(result.makespan) - 1) > 200


def test_arcflow_graph_holds_every_packing_in_decreasing_order() -> None:
    """Every pattern of sizes (largest first) that fits the capacity is a path of arcs."""
    sizes, counts, capacity = np.array([5, 3, 2]), np.array([2, 2, 3]), 11
    graph = arcflow_graph(sizes, counts, capacity)
    assert graph is not None
    arcs = set(zip(graph[0].tolist(), graph[1].tolist(), strict=True))
    for a in range(3):
        for b in range(3):
            for c in range(4):
                if 5 * a + 3 * b + 2 * c <= capacity:
                    load = 0
                    for kind, copies in enumerate((a, b, c)):
                        for _ in range(copies):
                            assert (load, kind) in arcs
                            load += int(sizes[kind])


@pytest.mark.parametrize("seed", range(4))
def test_exact_step_closes_small_gaps(seed: int) -> None:
    """Instances the heuristics leave open are closed by the exact step at the brute-force optimum."""
    rng = np.random.default_rng(200 + seed)
    times = rng.integers(1, 100, size=9)
    result = solve_pcmax(times, 3, time_limit=20)
    assert result.status is Status.OPTIMAL and result.makespan == brute_force(times, 3)
