"""mico: Mico's group-based distribution of queries over engines."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched import workloads
from llmsched.mip import solve_pcmax
from llmsched.mip.mico import mico_distribute
from llmsched.mip.pcmax import heuristics as ub


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


def test_mico_deals_rounds_of_one_query_per_engine() -> None:
    """Identical engines: every engine gets one query of each round of m, so counts differ by at most one."""
    p = workloads.gsm8k(1).output_tokens
    counts = np.bincount(mico_distribute(p, 7, max_length=512), minlength=7)
    assert counts.max() - counts.min() <= 1 and counts.sum() == p.size


def test_more_engines_than_queries_cost_nothing_per_engine() -> None:
    """A few queries on a million engines: one query per engine, longest bucket first, the
    same as the general rule gives with as many engines as queries."""
    p = np.array([40, 500, 120, 499, 7])
    many = mico_distribute(p, 10**6, max_length=512)
    assert np.array_equal(many, mico_distribute(p, p.size, max_length=512))
    assert sorted(many.tolist()) == list(range(p.size))


@pytest.mark.parametrize("buckets", [0, -1, 1.5, True])
def test_bad_buckets_are_rejected(buckets) -> None:
    """A bucket count that is not a positive integer raises ValueError naming it."""
    with pytest.raises(ValueError, match="buckets must be a positive integer"):
        mico_distribute([3, 4, 5], 2, buckets=buckets)
