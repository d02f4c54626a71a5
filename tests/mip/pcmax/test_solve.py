"""solve_pcmax: proven bounds against independent optima, determinism, limits, bad input."""

from __future__ import annotations

import math
import time
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsched import workloads
from llmsched.mip import PcmaxResult, Status, solve_pcmax
from llmsched.mip.pcmax import bounds as lb
from tests.mip.pcmax.oracles import brute_force, fits, optimum


def _check(result: PcmaxResult, times, m: int, speeds=None) -> None:
    """The assignment places every job on a machine and its makespan is the one reported."""
    times = np.asarray(times)
    assert result.assignment.shape == times.shape
    assert result.assignment.min() >= 0 and result.assignment.max() < m
    loads = np.bincount(result.assignment, weights=times, minlength=min(m, times.size))
    if speeds is not None:
        loads = loads / np.asarray(speeds, dtype=float)[: loads.size]
    assert result.makespan == pytest.approx(loads.max())
    assert result.lower_bound <= result.makespan + 1e-9


def _check_against(result: PcmaxResult, opt: float) -> None:
    """Bound <= optimum <= makespan, 'optimal' only at the optimum, and at no moment of the
    trace a bound above the optimum or above the incumbent of that moment."""
    assert result.lower_bound <= opt + 1e-9 <= result.makespan + 2e-9
    if result.status is Status.OPTIMAL:
        assert result.makespan == pytest.approx(opt) and result.lower_bound == result.makespan
    for point in result.trace:
        assert point.lower_bound <= opt + 1e-9
        assert point.upper_bound >= opt - 1e-9
        assert point.lower_bound <= point.upper_bound


@pytest.mark.parametrize("seed", range(12))
def test_equals_brute_force_on_small_instances(seed: int) -> None:
    """On random instances of up to 12 jobs and 4 machines the pipeline proves the true optimum."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 13 if seed < 4 else 10))
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
    """With any time limit, bounds hold against the brute-force optimum, 'optimal' only at it."""
    arr = np.array(times)
    result = solve_pcmax(arr, m, time_limit=limit)
    _check(result, arr, m)
    _check_against(result, brute_force(arr, m))


@st.composite
def repeated_sizes(draw: st.DrawFn) -> tuple[np.ndarray, int]:
    """Few distinct sizes, each repeated many times (the shape class-based predictions give)."""
    sizes = draw(st.lists(st.integers(5, 60), min_size=1, max_size=4, unique=True))
    counts = draw(st.lists(st.integers(1, 14), min_size=len(sizes), max_size=len(sizes)))
    m = draw(st.integers(2, 7))
    times = np.repeat(sizes, counts)
    order = draw(st.permutations(range(times.size)))
    return times[list(order)], m


@settings(max_examples=40, deadline=None)
@given(repeated_sizes())
def test_bounds_hold_on_repeated_sizes_against_an_arcflow_milp(instance) -> None:
    """On few sizes with many repeats the bound, the makespan and the status agree with the
    optimum of an independent arc-flow MILP (HiGHS), at every moment of the trace."""
    times, m = instance
    result = solve_pcmax(times, m, time_limit=30)
    _check(result, times, m)
    _check_against(result, optimum(times, m, upper=int(result.makespan)))
    assert result.status is Status.OPTIMAL  # these are small: the pipeline closes them


def _mico_instance(requests: int, seed: int) -> np.ndarray:
    """Mico class-midpoint predictions of GSM8K-like outputs, plus 40 tokens per request."""
    from llmsched.online import cross_fit
    from llmsched.workloads import gsm8k_like

    return cross_fit("mico", gsm8k_like(requests, seed=seed), seed=seed) + 40


def _certify(times: np.ndarray, m: int, result: PcmaxResult) -> None:
    """Check the result independently: its makespan from its assignment, and its lower bound
    by refuting one capacity below it (the Gilmore-Gomory LP, else the arc-flow MILP)."""
    _check(result, times, m)
    below = int(result.lower_bound) - 1
    assert not fits(times, m, below), f"{m} machines of {below} hold the jobs"


def test_false_optimal_reproducer_is_now_proven_right() -> None:
    """The reported false 'optimal' 2433 (mico sizes + 40 of gsm8k_like(1319, seed=3) on 200
    machines): the optimum is 2426, and the pipeline proves it."""
    times = _mico_instance(1319, 3)
    result = solve_pcmax(times, 200, time_limit=60)
    _certify(times, 200, result)
    assert result.status is Status.OPTIMAL and result.makespan == result.lower_bound == 2426
    assert all(point.lower_bound <= point.upper_bound for point in result.trace)


@pytest.mark.parametrize("seed", [0, 5])
def test_mico_shape_full_size(seed: int) -> None:
    """Two more full-size instances of the reproducer's shape: bounds certified independently."""
    times = _mico_instance(1319, seed)
    result = solve_pcmax(times, 200, time_limit=60)
    _certify(times, 200, result)
    assert result.status is Status.OPTIMAL


@pytest.mark.parametrize("seed", range(20))
def test_mico_shape_reduced_size(seed: int) -> None:
    """Twenty instances of the reproducer's shape at a seventh of its size (200 requests on
    30 machines): the lower bound is refuted one below independently, the makespan is real."""
    times = _mico_instance(200, 100 + seed)
    result = solve_pcmax(times, 30, time_limit=60)
    _certify(times, 30, result)
    assert result.status is Status.OPTIMAL


def test_same_answer_whatever_the_time_limit() -> None:
    """Search effort is deterministic: limits of 3.3, 10 and 60 s give bit-identical results
    (makespan, bound, assignment, status, closing step) on the reproducer itself."""
    times = _mico_instance(1319, 3)
    runs = [solve_pcmax(times, 200, time_limit=limit) for limit in (3.3, 10, 60)]
    first = runs[0]
    assert first.status is Status.OPTIMAL and first.closed_by == "pattern lp rounding"
    assert len(first.trace) >= 4  # it went through bounds, heuristics and the LP steps
    for other in runs[1:]:
        assert other.makespan == first.makespan and other.lower_bound == first.lower_bound
        assert np.array_equal(other.assignment, first.assignment)
        assert (other.status, other.closed_by) == (first.status, first.closed_by)
        assert [p.source for p in other.trace] == [p.source for p in first.trace]


def test_gsm8k_instance_is_proven_optimal_quickly() -> None:
    """The paper's offline instance (1,319 outputs on 200 clients) closes at ceil(sum/m)."""
    times = workloads.gsm8k(0).output_tokens
    result = solve_pcmax(times, 200, time_limit=10)
    assert result.status is Status.OPTIMAL
    assert result.makespan == -(-int(times.sum()) // 200) == 2277
    assert result.runtime < 5


@pytest.mark.parametrize(
    ("times", "machines", "limit"),
    [
        (np.random.default_rng(0).integers(1, 10001, size=50), 10, 1.0),
        (np.random.default_rng(0).integers(1, 10001, size=50), 10, 0.1),
        (workloads.gsm8k_like(20_000, 2).output_tokens, 3, 0.1),
        (np.random.default_rng(2).integers(1, 10**9, size=20_000), 1000, 0.3),
    ],
)
def test_time_limit_is_honoured_with_best_solution_and_bound(times, machines, limit) -> None:
    """Instances that need more than the limit stop within 10% + 0.5 s with a valid solution
    and a proven bound; status 'time_limit' says the limit cut the search short."""
    start = time.perf_counter()
    result = solve_pcmax(times, machines, time_limit=limit)
    elapsed = time.perf_counter() - start
    assert elapsed <= 1.1 * limit + 0.5
    _check(result, times, machines)
    assert result.lower_bound >= lb.trivial_bound(np.sort(times)[::-1], machines)
    assert result.status in (Status.OPTIMAL, Status.TIME_LIMIT)
    if result.status is Status.TIME_LIMIT:
        assert result.gap > 0


def test_exchanges_on_many_jobs_need_no_jobs_by_jobs_memory() -> None:
    """20,000 jobs on 3 machines (once 15 s and 4.2 GB) take well under a second and 100 MB."""
    times = workloads.gsm8k_like(20_000, 2).output_tokens
    tracemalloc.start()
    start = time.perf_counter()
    result = solve_pcmax(times, 3, time_limit=1)
    elapsed = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert elapsed < 1.6 and peak < 100e6
    assert result.status is Status.OPTIMAL and result.makespan == -(-int(times.sum()) // 3)


@pytest.mark.parametrize("machines", [7, 10**6, 10**12])
def test_machines_beyond_the_jobs_cost_nothing(machines: int) -> None:
    """With at least as many machines as jobs the optimum is immediate: one job per machine,
    the largest job as makespan and bound, machine indices below the number of jobs."""
    times = np.array([5, 0, 9, 3, 3, 0])
    tracemalloc.start()
    start = time.perf_counter()
    result = solve_pcmax(times, machines, time_limit=1)
    elapsed = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert elapsed < 0.05 and peak < 1e6
    assert result.status is Status.OPTIMAL and result.makespan == result.lower_bound == 9
    assert result.assignment.max() < times.size
    positive = result.assignment[times > 0]
    assert np.unique(positive).size == positive.size  # one job per machine


def test_many_uniform_machines_use_the_fastest() -> None:
    """Three jobs on 100,000 machines of different speeds: the optimum uses the fastest ones."""
    speeds = np.ones(100_000)
    speeds[[10, 500, 99_999]] = [4.0, 2.0, 3.0]
    times = np.array([8, 6, 4])
    result = solve_pcmax(times, speeds.size, time_limit=10, speeds=speeds)
    assert result.status is Status.OPTIMAL
    assert result.makespan == pytest.approx(brute_force(times, 3, np.array([4.0, 2.0, 3.0])))
    assert set(result.assignment.tolist()) <= {10, 500, 99_999}


@pytest.mark.parametrize("seed", range(4))
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


def test_infinite_time_limit_works() -> None:
    """time_limit=math.inf means no safety net: the pipeline runs on its budgets alone."""
    times = np.array([9, 8, 7, 6, 5, 5, 4, 3, 2])
    result = solve_pcmax(times, 3, time_limit=math.inf)
    assert result.status is Status.OPTIMAL and result.makespan == 17


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
        (([3, 4], 2), {"time_limit": -1}, r"time_limit must be a number of seconds >= 0.*-1"),
        (([3, 4], 2), {"time_limit": float("nan")}, r"time_limit must be .*nan"),
        (([3, 4], 2), {"time_limit": "10"}, r"time_limit must be .*'10'"),
        (([3, 4], 2), {"time_limit": None}, r"time_limit must be .*None"),
        (([3, 4], 2), {"time_limit": True}, r"time_limit must be .*True"),
        (([3, 4], 2), {"effort": 0}, r"effort must be a finite number > 0, got 0"),
        (([3, 4], 2), {"effort": math.inf}, r"effort must be a finite number > 0, got inf"),
        (([3, 4], 2), {"workers": 0}, r"workers must be an integer >= 1, got 0"),
    ],
)
def test_bad_input_is_rejected(args, kwargs, message) -> None:
    """Bad times, machines, speeds, backends, limits, efforts or workers raise ValueError naming them."""
    with pytest.raises(ValueError, match=message):
        solve_pcmax(*args, **kwargs)
