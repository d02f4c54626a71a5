"""mip.pcmax.bounds: every lower bound holds against the brute-force optimum."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsched.mip.pcmax import bounds as lb
from tests.mip.pcmax.oracles import brute_force


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=2, max_size=9), st.integers(1, 4))
def test_bounds_never_exceed_the_optimum(times: list[int], m: int) -> None:
    """The trivial, Dell'Amico-Martello, L2-bisection and subset-sum bounds are all <= the optimum."""
    p = np.sort(np.array(times))[::-1]
    opt = brute_force(p, m)
    upper = int(p.sum())  # one machine holding everything is a schedule
    trivial = lb.trivial_bound(p, m)
    assert trivial <= opt
    assert lb.dell_amico_martello_bound(p, m) <= opt
    assert trivial <= lb.bpp_bound(p, m, trivial, upper) <= opt
    assert trivial <= lb.lift_to_subset_sum(p, trivial, upper) <= opt


def test_dell_amico_martello_beats_the_average_where_jobs_pair_up() -> None:
    """Three jobs of 5 on two machines: some machine gets two of them, so 10 (not ceil(15/2) = 8)."""
    p = np.array([5, 5, 5])
    assert lb.trivial_bound(p, 2) == 8
    assert lb.dell_amico_martello_bound(p, 2) == 10


def test_subset_sum_lifting_skips_unreachable_loads() -> None:
    """Jobs of 4 and 6 on two machines: no load of 11 or 12 (ceil(22/2) = 11) exists, 12 does."""
    p = np.array([6, 6, 4, 4, 2])
    assert lb.lift_to_subset_sum(np.sort(p)[::-1], 11, 22) == 12


def test_l2_counts_the_bins_that_big_jobs_force() -> None:
    """Jobs larger than half the capacity need a bin each: four jobs of 6 need four bins of 10."""
    p = np.array([6, 6, 6, 6, 1])
    assert lb.bin_packing_l2(p, 10) == 4
    assert lb.bpp_bound(p, 3, 9, 12) == 12  # three machines: two jobs of 6 share one


def test_bounds_stop_when_the_safety_net_fires() -> None:
    """With the safety net already fired, bisection and lifting return what was proven before."""
    p = np.sort(np.random.default_rng(3).integers(1, 100, size=30))[::-1]
    trivial = lb.trivial_bound(p, 4)
    assert lb.bpp_bound(p, 4, trivial, int(p.sum()), lambda: True) == trivial
    assert lb.lift_to_subset_sum(p, trivial, int(p.sum()), lambda: True) == trivial


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 40), min_size=1, max_size=8),
    st.lists(st.integers(1, 4), min_size=1, max_size=3),
)
def test_uniform_bound_never_exceeds_the_optimum(times: list[int], speeds: list[int]) -> None:
    """Q||Cmax: total over total speed, and the k largest jobs over the k fastest, bound the optimum."""
    p, s = np.array(times), np.array(speeds, dtype=float)
    assert lb.uniform_bound(p, s) <= brute_force(p, s.size, s) + 1e-9
