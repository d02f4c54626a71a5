"""solve_pcmax: exact answers on small instances, bounds that hold, limits, bad input."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsched import workloads
from llmsched.mip import Status, solve_pcmax
from llmsched.mip import pcmax_bounds as lb
from llmsched.mip import pcmax_heuristics as ub
from llmsched.mip.mico import mico_distribute
from llmsched.mip.pcmax_search import bin_completion_search, repack_search


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


def _check(result, times, m, speeds=None) -> None:
    assert result.assignment.shape == times.shape
    assert result.assignment.min() >= 0 and result.assignment.max() < m
    loads = np.bincount(result.assignment, weights=times, minlength=m)
    if speeds is not None:
        loads = loads / np.asarray(speeds, dtype=float)
    assert result.makespan == pytest.approx(loads.max())
    assert result.lower_bound <= result.makespan + 1e-9


@pytest.mark.parametrize("seed", range(25))
def test_equals_brute_force_on_small_instances(seed: int) -> None:
    """On random instances of up to 12 jobs and 4 machines the pipeline proves the true optimum."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 13 if seed < 5 else 10))
    m = int(rng.integers(1, 5))
    times = rng.integers(0, [10, 100, 1000][seed % 3], size=n)
    result = solve_pcmax(times, m, time_limit=20)
    _check(result, times, m)
    assert result.status is Status.OPTIMAL
    assert result.makespan == brute_force(times, m)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 60), min_size=1, max_size=9),
    st.integers(1, 4),
    st.floats(0.0, 0.05),
)
def test_never_claims_better_than_the_optimum(times, m, limit) -> None:
    """With any time limit, the bound never exceeds the optimum and 'optimal' is only claimed at it."""
    arr = np.array(times)
    opt = brute_force(arr, m)
    result = solve_pcmax(arr, m, time_limit=limit)
    _check(result, arr, m)
    assert result.lower_bound <= opt + 1e-9
    assert result.makespan >= opt - 1e-9
    if result.status is Status.OPTIMAL:
        assert result.makespan == opt


@pytest.mark.parametrize("seed", range(6))
def test_uniform_machines_equal_brute_force(seed: int) -> None:
    """With integer speeds the pipeline proves the optimum of Q||Cmax."""
    rng = np.random.default_rng(100 + seed)
    n, m = int(rng.integers(2, 10)), int(rng.integers(2, 4))
    times = rng.integers(1, 50, size=n)
    speeds = rng.integers(1, 4, size=m)
    result = solve_pcmax(times, m, time_limit=20, speeds=speeds)
    _check(result, times, m, speeds)
    assert result.status is Status.OPTIMAL
    assert result.makespan == pytest.approx(brute_force(times, m, speeds))


@pytest.mark.parametrize("backend", ["scip", "cpsat"])
def test_paper_model_backends_agree(backend: str) -> None:
    """The paper's Eqs. 26-30 in SCIP and CP-SAT reach the pipeline's optimum on a small instance."""
    times = np.array([9, 8, 7, 6, 5, 5, 4, 3, 2])
    ours = solve_pcmax(times, 3)
    theirs = solve_pcmax(times, 3, time_limit=30, backend=backend)
    assert theirs.status is Status.OPTIMAL and ours.status is Status.OPTIMAL
    assert theirs.makespan == ours.makespan == 17
    assert theirs.trace, "the solver's progress is traced"
    _check(theirs, times, 3)


def test_gsm8k_instance_is_proven_optimal_quickly() -> None:
    """The paper's offline instance (1,319 outputs on 200 clients) closes at ceil(sum/m)."""
    times = workloads.gsm8k(0).output_tokens
    result = solve_pcmax(times, 200, time_limit=10)
    assert result.status is Status.OPTIMAL
    assert result.makespan == -(-int(times.sum()) // 200) == 2277
    assert result.runtime < 5
    frame = result.trace_frame()
    assert list(frame.columns) == ["time", "lower_bound", "upper_bound", "source"]
    assert frame["upper_bound"].is_monotonic_decreasing and frame["lower_bound"].is_monotonic_increasing


def test_time_limit_is_honoured_with_best_solution_and_bound() -> None:
    """A hard instance stops within its limit with a valid solution, a bound and status time_limit."""
    rng = np.random.default_rng(0)
    times = rng.integers(1, 10001, size=50)
    start = time.perf_counter()
    result = solve_pcmax(times, 10, time_limit=1.0)
    elapsed = time.perf_counter() - start
    assert elapsed <= 1.0 * 1.1 + 0.5
    _check(result, times, 10)
    if result.status is not Status.OPTIMAL:
        assert result.status is Status.TIME_LIMIT
        assert result.gap > 0


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (([3, -1], 2), {}, r"times\[1\] is -1"),
        (([3, 1.5], 2), {}, "whole numbers"),
        (([3, float("nan")], 2), {}, "whole numbers"),
        (([], 2), {}, "no jobs"),
        (([3, 4], 0), {}, "machines must be at least 1"),
        (([3, 4], 1.5), {}, "machines must be a positive integer"),
        (([3, 4], 2), {"speeds": [1, 0]}, r"speeds\[1\]"),
        (([3, 4], 2), {"speeds": [1, 2, 3]}, "one entry per machine"),
        (([3, 4], 2), {"backend": "gurobi"}, "unknown backend"),
        (([3, 4], 2), {"time_limit": -1}, "time_limit"),
    ],
)
def test_bad_input_is_rejected(args, kwargs, message) -> None:
    """Negative or fractional times, no jobs or machines, bad speeds or backends raise ValueError."""
    with pytest.raises(ValueError, match=message):
        solve_pcmax(*args, **kwargs)


def test_bounds_are_valid_and_ordered() -> None:
    """Each lower bound holds against the brute-force optimum on small random instances."""
    rng = np.random.default_rng(7)
    for _ in range(30):
        n, m = int(rng.integers(2, 10)), int(rng.integers(2, 4))
        p = np.sort(rng.integers(1, 40, size=n))[::-1]
        opt = brute_force(p, m)
        trivial = lb.trivial_bound(p, m)
        assert trivial <= opt
        assert lb.dell_amico_martello_bound(p, m) <= opt
        assert lb.bpp_bound(p, m, trivial, int(p.sum())) <= opt
        assert lb.lift_to_subset_sum(p, trivial, int(p.sum())) <= opt


def test_heuristics_return_complete_assignments() -> None:
    """LPT, largest differencing, MULTIFIT and bin completion place every job on a machine."""
    p = workloads.gsm8k(2).output_tokens
    for assignment in (
        ub.lpt(p, 200),
        ub.largest_differencing(p, 200),
        ub.multifit(p, 200, 2200, 2400),
        ub.bin_completion(p, 200, 2300),
    ):
        assert assignment is not None and assignment.shape == p.shape
        assert assignment.min() >= 0 and assignment.max() < 200
    assert ub.bin_completion(p, 200, 1000) is None  # below the trivial bound


def test_mico_group_distribution_balances_tokens() -> None:
    """Mico's rule balances tokens far better than round-robin by count, and handles speeds."""
    p = workloads.gsm8k(0).output_tokens
    mico = ub.makespan(p, mico_distribute(p, 8, max_length=512), 8)
    round_robin = ub.makespan(p, np.arange(p.size) % 8, 8)
    exact = solve_pcmax(p, 8).makespan
    assert exact <= mico < round_robin
    speeds = np.array([1, 1, 2, 2, 3, 3, 4, 4])
    fast = mico_distribute(p, 8, speeds, max_length=512)
    loads = np.bincount(fast, weights=p, minlength=8)
    assert loads[-1] > loads[0]  # faster engines get more tokens
    with pytest.raises(ValueError, match="buckets"):
        mico_distribute(p, 8, buckets=0)


def test_randomised_bin_completion_is_reproducible_and_valid() -> None:
    """Bin completion with a seeded generator gives the same valid packing twice."""
    rng_times = np.random.default_rng(3).integers(1, 10001, size=50)
    cap = lb.trivial_bound(np.sort(rng_times)[::-1], 10) + 50
    a = ub.bin_completion(rng_times, 10, cap, np.random.default_rng(1))
    b = ub.bin_completion(rng_times, 10, cap, np.random.default_rng(1))
    assert a is not None and b is not None and np.array_equal(a, b)
    assert np.bincount(a, weights=rng_times, minlength=10).max() <= cap


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(1, 60), min_size=1, max_size=14),
    st.integers(1, 4),
    st.integers(0, 5),
    st.integers(0, 2**32 - 1),
)
def test_sequential_completion_never_overfills(times: list[int], m: int, extra: int, seed: int) -> None:
    """Whatever it returns places every job and keeps every machine within the capacity."""
    p = np.array(times)
    cap = max(int(p.max()), -(-int(p.sum()) // m)) + extra
    found = ub.sequential_completion(p, m, cap, np.random.default_rng(seed))
    if found is not None:
        assert found.shape == p.shape and found.min() >= 0 and found.max() < m
        assert np.bincount(found, weights=p, minlength=m).max() <= cap


def test_sequential_completion_finds_a_perfect_partition() -> None:
    """Jobs built as m blocks summing to the same total are partitioned perfectly within a few passes."""
    rng = np.random.default_rng(5)
    blocks = [rng.integers(1, 1000, size=4) for _ in range(6)]
    target = max(int(b.sum()) for b in blocks)
    for b in blocks:
        b[-1] += target - int(b.sum())  # every block sums to target
    p = rng.permutation(np.concatenate(blocks))
    gen = np.random.default_rng(0)
    found = next(
        (a for a in (ub.sequential_completion(p, 6, target, gen) for _ in range(2000)) if a is not None),
        None,
    )
    assert found is not None
    assert np.array_equal(np.bincount(found, weights=p, minlength=6), np.full(6, target))
    assert ub.sequential_completion(p, 6, target - 1, gen) is None  # below the average: impossible


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
    out = bin_completion_search(p, m, capacity, time.perf_counter() + 30, rng=rng)
    if capacity >= optimum:
        assert out.verdict == "feasible" and out.assignment is not None
        assert out.assignment.shape == p.shape and out.assignment.min() >= 0 and out.assignment.max() < m
        assert np.bincount(out.assignment, weights=p, minlength=m).max() <= capacity
    else:
        assert out.verdict == "infeasible" and out.assignment is None


def test_bin_completion_search_honours_node_and_time_limits() -> None:
    """A hard decision stops with 'limit' when its node budget or deadline runs out."""
    p = np.random.default_rng(7).integers(1, 10001, size=100)
    capacity = lb.trivial_bound(np.sort(p)[::-1], 25)
    start = time.perf_counter()
    out = bin_completion_search(p, 25, capacity, start + 60, node_limit=50)
    assert out.verdict in ("limit", "feasible") and out.nodes <= 51
    out = bin_completion_search(p, 25, capacity, start)  # deadline already past
    assert out.verdict in ("limit", "feasible") and time.perf_counter() - start < 1.0


def test_bin_completion_search_refutes_the_bound_where_the_optimum_is_above_it() -> None:
    """Three jobs of 5 on two machines: the bound is 8 (ceil(15/2)); the search proves 9 is not enough."""
    p = np.array([5, 5, 5])
    assert bin_completion_search(p, 2, 9, time.perf_counter() + 5).verdict == "infeasible"
    found = bin_completion_search(p, 2, 10, time.perf_counter() + 5)
    assert found.verdict == "feasible" and found.assignment is not None
    assert sorted(np.bincount(found.assignment, weights=p, minlength=2).tolist()) == [5.0, 10.0]


def test_repack_search_only_improves_and_keeps_every_job() -> None:
    """Repacking from a poor assignment reaches a target at or above the optimum with every job placed."""
    rng = np.random.default_rng(11)
    p = rng.integers(1, 1001, size=40)
    m = 8
    start = ub.lpt(p, m)
    optimum = solve_pcmax(p, m, time_limit=20)
    assert optimum.status is Status.OPTIMAL
    target = int(optimum.makespan) + 5
    found = repack_search(p, m, np.zeros(p.size, dtype=np.int64), target, time.perf_counter() + 20, rng)
    assert found is not None and found.shape == p.shape
    assert np.bincount(found, weights=p, minlength=m).max() <= target
    assert np.bincount(start, minlength=m).sum() == np.bincount(found, minlength=m).sum() == p.size


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.sampled_from([3, 5, 7, 11, 13]), min_size=2, max_size=11),
    st.integers(1, 4),
)
def test_arcflow_lp_bound_never_exceeds_the_optimum(times: list[int], m: int) -> None:
    """The arc-flow LP bound, bisected over any range, is a valid lower bound on the optimum."""
    from llmsched.mip.pcmax_exact import arcflow_lp_bound

    arr = np.array(times)
    opt = brute_force(arr, m)
    sorted_p = np.sort(arr)[::-1]
    low = lb.trivial_bound(sorted_p, m)
    bound = arcflow_lp_bound(sorted_p, m, low, int(arr.sum()), time.perf_counter() + 10)
    assert low <= bound <= opt


def test_arcflow_lp_bound_closes_class_predicted_sizes() -> None:
    """Few sizes repeated many times (class-based predictions): the LP bound proves the optimum
    far above ceil(sum/m), where bin completion alone cannot."""
    from llmsched.mip.pcmax_exact import arcflow_lp_bins

    w = workloads.gsm8k(0)
    sizes = (np.minimum(w.output_tokens // 51.2, 9) + 0.5) * 51.2  # Mico's class midpoints
    times = np.rint(sizes).astype(np.int64)
    result = solve_pcmax(times, 200, time_limit=30)
    assert result.status is Status.OPTIMAL and result.lower_bound == result.makespan
    trivial = lb.trivial_bound(np.sort(times)[::-1], 200)
    assert result.makespan > trivial  # the bound had to be raised above the trivial one
    sorted_p = np.sort(times)[::-1]
    assert (
        arcflow_lp_bins(sorted_p, int(result.makespan) - 1)
        > 200
        > arcflow_lp_bins(sorted_p, int(result.makespan) + 50)
    )
