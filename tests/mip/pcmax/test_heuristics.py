"""pcmax_heuristics: complete assignments, exchanges that only improve, randomised completions."""

from __future__ import annotations

import tracemalloc

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsched import workloads
from llmsched.mip.pcmax import bounds as lb
from llmsched.mip.pcmax import heuristics as ub


def _best_exchange_by_enumeration(t, a, m, s) -> float:
    """The lowest busier-of-the-two finish time any single move or swap off the busiest machine gives."""
    loads = np.bincount(a, weights=t, minlength=m)
    finish = loads / s
    top = int(np.argmax(finish))
    best = float(finish[top])
    for x in np.flatnonzero(a == top):
        for k in range(m):
            if k == top:
                continue
            for y in [-1, *np.flatnonzero(a == k).tolist()]:
                delta = t[x] - (0 if y < 0 else t[y])
                if delta > 0:
                    best = min(best, max((loads[top] - delta) / s[top], (loads[k] + delta) / s[k]))
    return best


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(0, 40), min_size=2, max_size=14),
    st.integers(2, 4),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)
def test_one_exchange_is_the_best_there_is(times: list[int], m: int, uniform: bool, seed: int) -> None:
    """One round of exchanges reaches exactly the best makespan of the pair that any single move
    or swap off the busiest machine reaches (checked by enumerating them all)."""
    rng = np.random.default_rng(seed)
    t = np.array(times, dtype=float)
    a = rng.integers(0, m, size=t.size)
    s = rng.integers(1, 4, size=m).astype(float) if uniform else np.ones(m)
    expected = _best_exchange_by_enumeration(t, a, m, s)
    after = ub.improve(t, a, m, 0.0, s if uniform else None, max_rounds=1)
    loads = np.bincount(a, weights=t, minlength=m)
    finish = loads / s
    top = int(np.argmax(finish))
    moved = np.flatnonzero(after != a)
    if expected >= finish[top] - 1e-9:
        assert moved.size == 0  # no exchange helps: nothing moves
    else:
        new = np.bincount(after, weights=t, minlength=m) / s
        touched = set(after[moved].tolist()) | set(a[moved].tolist())
        assert top in touched and len(touched) == 2
        assert max(new[j] for j in touched) == expected


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 1000), min_size=1, max_size=40), st.integers(1, 6))
def test_exchanges_never_worsen_and_keep_every_job(times: list[int], m: int) -> None:
    """From LPT, exchanges keep every job on a machine and never raise the makespan."""
    t = np.array(times)
    start = ub.lpt(t, m)
    after = ub.improve(t, start, m, 0.0)
    assert after.shape == t.shape and after.min() >= 0 and after.max() < m
    assert ub.makespan(t, after, m) <= ub.makespan(t, start, m)


def test_exchanges_on_many_jobs_stay_small() -> None:
    """20,000 jobs on 3 machines: exchanges reach ceil(sum / 3) without a jobs x jobs table."""
    t = workloads.gsm8k_like(20_000, 2).output_tokens
    start = np.arange(t.size) % 3  # round-robin: far from balanced by tokens
    tracemalloc.start()
    after = ub.improve(t, start, 3, 0.0)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 60e6
    assert ub.makespan(t, after, 3) == -(-int(t.sum()) // 3)


def test_exchanges_stop_on_their_round_budget_and_the_safety_net() -> None:
    """max_rounds bounds the exchanges made; a fired safety net stops them before any."""
    t = workloads.gsm8k(0).output_tokens
    start = np.zeros(t.size, dtype=np.int64)  # everything on one machine
    one = ub.improve(t, start, 8, 0.0, max_rounds=1)
    assert np.count_nonzero(one != start) == 1
    assert np.array_equal(ub.improve(t, start, 8, 0.0, expired=lambda: True), start)


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


def test_heuristics_give_up_where_their_tables_would_be_too_large() -> None:
    """Largest differencing and MULTIFIT decline jobs x machines above their limit; bin
    completion declines a subset-sum table above its limit (instead of gigabytes of memory)."""
    p = np.arange(1, 5001)
    assert ub.largest_differencing(p, ub.MAX_JOBS_TIMES_MACHINES // 4000) is None
    assert ub.multifit(p, ub.MAX_JOBS_TIMES_MACHINES // 4000, 1, 10**9) is None
    wide = np.random.default_rng(0).integers(1, 2**30, size=400)
    assert ub.completion_cells(wide, 2**34) > ub.MAX_COMPLETION_CELLS
    assert ub.bin_completion(wide, 2, 2**34) is None


def test_randomised_bin_completion_is_reproducible_and_valid() -> None:
    """Bin completion with a seeded generator gives the same valid packing twice."""
    times = np.random.default_rng(3).integers(1, 10001, size=50)
    cap = lb.trivial_bound(np.sort(times)[::-1], 10) + 50
    a = ub.bin_completion(times, 10, cap, np.random.default_rng(1))
    b = ub.bin_completion(times, 10, cap, np.random.default_rng(1))
    assert a is not None and b is not None and np.array_equal(a, b)
    assert np.bincount(a, weights=times, minlength=10).max() <= cap


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
