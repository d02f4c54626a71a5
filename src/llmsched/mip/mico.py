"""Mico's token-granularity distribution of queries over engines (group based, near O(n)).

Mico predicts each query's response-length *bucket* (10 buckets of equal width up to the
maximum length), takes the bucket's midpoint as the length, groups queries by bucket, and
hands the groups out longest first so that every engine receives about the same number of
tokens rather than of queries. Our reading of its description:

* groups are dealt in rounds of one query per engine; the longest query of a round goes
  to the engine with the fewest tokens so far (relative to its speed), the next longest
  to the next, and so on;
* a group whose size is not a multiple of the number of engines borrows the longest
  queries of the next group to complete its last round, so no round mixes far-apart
  lengths except across neighbouring buckets;
* with engines of different speeds, each query goes to the engine that would finish its
  tokens soonest (rounds lose their meaning when engines are unequal).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from llmsched.mip.pcmax.solve import check_pcmax_input

__all__ = ["mico_distribute"]


def mico_distribute(
    lengths: Any,
    machines: int,
    speeds: Any = None,
    buckets: int = 10,
    max_length: int | None = None,
) -> np.ndarray:
    """Assign queries (by response length) to engines with Mico's group-based rule.

    Parameters
    ----------
    lengths
        Response length of each query (true or predicted).
    machines
        Number of engines (clouds).
    speeds
        Optional relative speed of each engine.
    buckets
        Number of length buckets (Mico uses 10).
    max_length
        Upper end of the last bucket; defaults to the longest query.

    Returns
    -------
    numpy.ndarray
        The engine of each query.
    """
    p, m, s = check_pcmax_input(lengths, machines, speeds)
    if isinstance(buckets, bool) or not isinstance(buckets, (int, np.integer)) or buckets < 1:
        raise ValueError(f"buckets must be a positive integer, got {buckets!r}")
    top = int(max_length) if max_length is not None else int(p.max())
    if top < 1:
        top = 1
    width = top / buckets
    label = np.minimum((p / width).astype(np.int64), buckets - 1)
    estimate = (label + 0.5) * width  # the bucket's midpoint stands for the length
    order = np.lexsort((np.arange(p.size), -label))  # longest bucket first, then by index
    assignment = np.empty(p.size, dtype=np.int64)
    if s is not None:
        finish = np.zeros(m)
        for i in order.tolist():
            j = int(np.argmin(finish + estimate[i] / s))
            assignment[i] = j
            finish[j] += estimate[i] / s[j]
        return assignment
    # Identical engines: rounds of m; a group's last partial round borrows from the next
    # group, which is what dealing the sorted order in consecutive rounds does.
    if p.size <= m:
        # One round: engine k takes the k-th query in order (all engines start empty, the
        # fewest-tokens order is the engines' own). Nothing is kept per idle engine.
        assignment[order] = np.arange(p.size)
        return assignment
    tokens = np.zeros(m)
    for start in range(0, p.size, m):
        round_ = order[start : start + m]
        takers = np.argsort(tokens, kind="stable")[: round_.size]  # fewest tokens first
        assignment[round_] = takers
        tokens[takers] += estimate[round_]
    return assignment
