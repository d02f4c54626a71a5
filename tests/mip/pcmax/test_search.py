"""pcmax_search: bin-completion search decides exactly; limits and repacking behave."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsched.mip.pcmax import bounds as lb
from llmsched.mip.pcmax import heuristics as ub
from llmsched.mip.pcmax.search import bin_completion_search, repack_search
from tests.mip.pcmax.oracles import brute_force


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(0, 80), min_size=1, max_size=10),
    st.integers(1, 4),
    st.integers(-3, 6),
    st.booleans(),
)
def test_bin_completion_search_decides_exactly(times: list[int], m: int, offset: int, jitter: bool) -> None:
    """The complete search says 'feasible' exactly when the brute-force optimum fits the capacity."""
    p = np.array(times)
    optimum = int(brute_force(p, m))
    capacity = max(0, optimum + offset)
    rng = np.random.default_rng(0) if jitter else None
    out = bin_completion_search(p, m, capacity, rng=rng)
    if capacity >= optimum:
        assert out.verdict == "feasible" and out.assignment is not None
        assert out.assignment.shape == p.shape and out.assignment.min() >= 0 and out.assignment.max() < m
        assert np.bincount(out.assignment, weights=p, minlength=m).max() <= capacity
    else:
        assert out.verdict == "infeasible" and out.assignment is None


def test_bin_completion_search_honours_its_limits() -> None:
    """A hard decision stops with 'limit' when its node or work budget runs out or the safety
    net fires; the same budget gives the same verdict and count every time."""
    p = np.random.default_rng(7).integers(1, 10001, size=100)
    capacity = lb.trivial_bound(np.sort(p)[::-1], 25)
    out = bin_completion_search(p, 25, capacity, node_limit=50)
    assert out.verdict in ("limit", "feasible") and out.nodes <= 51
    first = bin_completion_search(p, 25, capacity, work_limit=20_000)
    second = bin_completion_search(p, 25, capacity, work_limit=20_000)
    assert first.verdict == second.verdict == "limit"
    assert (first.nodes, first.work) == (second.nodes, second.work) and first.work <= 20_000 + 2_000
    calls = []
    out = bin_completion_search(p, 25, capacity, expired=lambda: calls.append(1) or True)
    assert out.verdict == "limit" and calls


def test_bin_completion_search_refutes_the_bound_where_the_optimum_is_above_it() -> None:
    """Three jobs of 5 on two machines: the bound is 8 (ceil(15/2)); the search proves 9 is not enough."""
    p = np.array([5, 5, 5])
    assert bin_completion_search(p, 2, 9).verdict == "infeasible"
    found = bin_completion_search(p, 2, 10)
    assert found.verdict == "feasible" and found.assignment is not None
    assert sorted(np.bincount(found.assignment, weights=p, minlength=2).tolist()) == [5.0, 10.0]


def test_repack_search_only_improves_and_keeps_every_job() -> None:
    """Repacking from all jobs on two of eight machines reaches a target near the bound with
    every job placed, and the same seed and budget give the same assignment."""
    rng = np.random.default_rng(11)
    p = rng.integers(1, 1001, size=40)
    m = 8
    target = lb.trivial_bound(np.sort(p)[::-1], m) + 40
    start = np.arange(p.size) % 2
    found = repack_search(p, m, start, target, np.random.default_rng(0), work=300_000)
    again = repack_search(p, m, start, target, np.random.default_rng(0), work=300_000)
    assert found is not None and found.shape == p.shape and np.array_equal(found, again)
    assert np.bincount(found, weights=p, minlength=m).max() <= target
    assert np.bincount(found, minlength=m).sum() == p.size


def test_repack_search_returns_its_best_walk_when_the_budget_ends() -> None:
    """With a small budget the repacking search returns a better assignment than it was given
    (or None when it found none), never a worse one."""
    p = np.random.default_rng(2).integers(1, 1001, size=60)
    start = ub.lpt(p, 10)
    found = repack_search(p, 10, start, 0, np.random.default_rng(0), work=20_000)
    if found is not None:
        assert ub.makespan(p, found, 10) < ub.makespan(p, start, 10)
    assert repack_search(p, 10, start, 0, np.random.default_rng(0), work=0) is None
