"""Bin completion: a complete depth-first search for P||Cmax at a given capacity.

Deciding whether n jobs fit on m machines of capacity C is bin packing. Bin completion
(Korf 2002; Schreiber and Korf 2013) fills one machine at a time: the machine takes the
largest job left, then one *completion* (a set of further jobs that fits) out of every
completion that is not dominated, fullest first, and the search backtracks when the room
left unused exceeds ``m * C - sum(jobs)`` or a bin-packing bound says the jobs left need
more machines than are left. It is complete: an exhausted search proves that C is too
small, which is how the pipeline closes gaps whose arc-flow graph is too large to build
(wide job sizes, few jobs per machine).

Completions are pruned by two dominance rules that keep at least one optimal completion:

* maximality: a job left out that would still fit means a fuller completion exists;
* single replacement: a job in the completion that could be swapped for a larger job left
  out (and still fit) is dominated by the swap.

Jobs of equal size are interchangeable, so the search works on distinct sizes and counts;
a table of failed (remaining jobs, machines left) states stops it from refuting the same
state twice.

Effort is counted in deterministic *work*, never in seconds. Its unit is about a
microsecond on one core of a 2-core machine: a node counts 10, a recursive step spent
listing completions 8, a threshold of the L2 bound 2, and 2,000 64-bit words of bit-set
arithmetic 1 (weights fitted to measured times). The optional ``expired`` callable is the
caller's wall-clock safety net.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["SearchOutcome", "bin_completion_search", "repack_search"]

FEASIBLE, INFEASIBLE, LIMIT = "feasible", "infeasible", "limit"

# Work of a node, of a step listing completions, of an L2 threshold; words of bit-set
# arithmetic that count as one unit.
NODE_WORK, STEP_WORK, L2_WORK = 10, 8, 2
WORDS_PER_UNIT = 2_000
# Every node keeps one bit set per distinct size over the room of its machine; above this
# many bits per node (distinct sizes x capacity) the search is not started.
MAX_BITS_PER_NODE = 400_000_000


@dataclass(frozen=True)
class SearchOutcome:
    """``verdict`` is ``feasible`` (with ``assignment``), ``infeasible`` (proven) or ``limit``;
    ``nodes`` and ``work`` say what the search spent (see the module docstring)."""

    verdict: str
    assignment: np.ndarray | None
    nodes: int
    work: int = 0

    def __post_init__(self) -> None:
        if self.assignment is not None:
            frozen = np.array(self.assignment, dtype=np.int64)
            frozen.setflags(write=False)
            object.__setattr__(self, "assignment", frozen)


class _Stop(Exception):
    pass


class _Search:
    def __init__(
        self,
        sizes: list[int],
        counts: list[int],
        m: int,
        capacity: int,
        node_limit: int | None,
        work_limit: int | None,
        rng: np.random.Generator | None,
        expired: Callable[[], bool] | None,
    ):
        self.sizes, self.counts, self.m, self.capacity = sizes, counts, m, capacity
        self.node_limit, self.work_limit, self.rng, self.expired = node_limit, work_limit, rng, expired
        self.nodes = 0
        self.steps = 0  # recursive steps spent listing completions
        self.words = 0  # 64-bit words of the bit sets shifted while listing completions
        self.l2_terms = 0  # thresholds tried by the L2 bound
        self.bins: list[tuple[int, list[tuple[int, int]]]] = []  # (largest job's kind, [(kind, count)])
        self.failed: set[tuple[tuple[int, ...], int]] = set()

    # ------------------------------------------------------------------ completions
    def completions(self, first: int, room: int) -> Any:
        """A function listing the undominated completions with a total in a window [low, top].

        A completion is a set of jobs (a list of (kind, count)) that fits in ``room``. The
        sets are built by choosing kinds in order of decreasing size; every kind passed
        over with copies left is *skipped*. ``need`` carries the dominance rules down: a
        skipped size s forces the final total above ``room - s`` (else s would still fit),
        and taking a size a after skipping a larger size b forces it above
        ``room - (b - a)`` (else b could replace a). Bit sets of the sums reachable with
        the kinds from each position on (built once per node, shared by every window) cut
        every branch that cannot end in the window, so the work grows with the number of
        completions listed rather than with the number of sets that fit.
        """
        sizes, counts = self.sizes, self.counts
        live = [k for k in range(first, len(sizes)) if counts[k]]
        words = room // 64 + 1
        mask = (1 << (room + 1)) - 1
        reach = [1] * (len(live) + 1)  # reach[i]: sums (<= room) of sets of kinds live[i:]
        for i in range(len(live) - 1, -1, -1):
            size, bits = sizes[live[i]], reach[i + 1]
            acc = bits
            copies = min(counts[live[i]], room // size) if size else 0
            for _ in range(copies):
                bits = (bits << size) & mask
                acc |= bits
            reach[i] = acc
            self.words += (copies + 1) * words
        smallest = sizes[live[-1]] if live else 0

        def window(low: int, top: int) -> list[tuple[int, list[tuple[int, int]]]]:
            found: list[tuple[int, list[tuple[int, int]]]] = []
            chosen: list[tuple[int, int]] = []

            def can_end(i: int, total: int, need: int) -> bool:
                # some set of kinds live[i:] brings total into [need, top]
                lo = max(0, need - total)
                self.words += words
                return lo <= top - total and (reach[i] >> lo) & ((1 << (top - total - lo + 1)) - 1) != 0

            def rec(start: int, total: int, need: int, skipped: int) -> None:
                self.steps += 1
                if self.steps & 255 == 0:
                    self.check_limits()
                if total >= need and (smallest > room - total or self._maximal(live, chosen, room - total)):
                    found.append((total, list(chosen)))
                prev = skipped  # the smallest size skipped before kind live[i]
                for i in range(start, len(live)):
                    k = live[i]
                    size = sizes[k]
                    if i > start:
                        prev = sizes[live[i - 1]]
                    next_need = need if prev == 0 else max(need, room - prev + 1)
                    if next_need > top or not can_end(i, total, next_need):
                        break  # later kinds only raise the need and reach less
                    if size > top - total:
                        continue
                    if prev:
                        next_need = max(next_need, room - (prev - size) + 1)
                        if next_need > top:
                            continue
                    count = counts[k]
                    for c in range(min(count, (top - total) // size), 0, -1):
                        t = total + c * size
                        if t < next_need and not can_end(i + 1, t, next_need):
                            continue
                        chosen.append((k, c))
                        rec(i + 1, t, next_need, size if c < count else prev)
                        chosen.pop()

            rec(0, 0, low, 0)
            return found

        return window

    def _maximal(self, live: list[int], chosen: list[tuple[int, int]], slack: int) -> bool:
        """No job left out of ``chosen`` fits in ``slack``."""
        used = dict(chosen)
        counts, sizes = self.counts, self.sizes
        unused = next((sizes[k] for k in reversed(live) if used.get(k, 0) < counts[k]), None)
        return unused is None or unused > slack

    # ------------------------------------------------------------------------ search
    @property
    def work(self) -> int:
        return (
            NODE_WORK * self.nodes
            + STEP_WORK * self.steps
            + L2_WORK * self.l2_terms
            + self.words // WORDS_PER_UNIT
        )

    def tick(self) -> None:
        self.nodes += 1
        if self.node_limit is not None and self.nodes > self.node_limit:
            raise _Stop
        if self.work_limit is not None and self.work > self.work_limit:
            raise _Stop
        if self.nodes % 64 == 0:
            self.check_limits()

    def check_limits(self) -> None:
        # Listing completions can take long on its own (many jobs, much room): its steps
        # count, sixteen to a node, against the node limit, and against the work limit
        # (and meet the safety net).
        if self.expired is not None and self.expired():
            raise _Stop
        if self.node_limit is not None and self.steps > 16 * self.node_limit:
            raise _Stop
        if self.work_limit is not None and self.work > self.work_limit:
            raise _Stop

    def bound_ok(self, bins_left: int) -> bool:
        """The jobs left fit in ``bins_left`` machines as far as Martello-Toth's L2 can tell.

        The same bound as :func:`llmsched.mip.pcmax.bounds.bin_packing_l2`, over the
        distinct sizes and their counts in plain Python: the search calls it at every
        node, on lists far too short for array code to pay off.
        """
        cap = self.capacity
        asc = [(size, c) for size, c in zip(reversed(self.sizes), reversed(self.counts), strict=True) if c]
        if not asc:
            return True
        keys = [size for size, _ in asc]
        n_at, sum_at = [0], [0]  # jobs and their total over the kinds before each index
        for size, c in asc:
            n_at.append(n_at[-1] + c)
            sum_at.append(sum_at[-1] + size * c)
        n = n_at[-1]
        half_hi = bisect_right(keys, cap // 2)  # kinds <= cap / 2
        self.l2_terms += half_hi + 1
        for a in [0, *keys[:half_hi]]:
            over = bisect_right(keys, cap - a)  # kinds <= cap - a
            big = n - n_at[over]
            n_mid = n_at[over] - n_at[half_hi]
            sum_mid = sum_at[over] - sum_at[half_hi]
            lo = bisect_left(keys, a)
            sum_small = sum_at[half_hi] - sum_at[lo]
            extra = max(0, -(-(sum_small - (n_mid * cap - sum_mid)) // cap))
            if big + n_mid + extra > bins_left:
                return False
        return True

    def dfs(self, bins_left: int, waste_left: int) -> bool:
        self.tick()
        counts = self.counts
        first = next((k for k, c in enumerate(counts) if c), -1)
        if first < 0:
            return True
        if bins_left == 1:  # waste_left >= 0, so everything left fits
            self.bins.append((-1, [(k, c) for k, c in enumerate(counts) if c]))
            for k in range(len(counts)):
                counts[k] = 0
            return True
        key = (tuple(counts), bins_left)
        if key in self.failed:
            return False
        counts[first] -= 1
        room = self.capacity - self.sizes[first]
        # Completions in bands of growing waste, fullest first: the search usually succeeds
        # or fails early, and a band's list is much shorter than the list of all of them.
        window = self.completions(first, room)
        lower, upper = -1, 0
        while lower < waste_left:
            upper = min(upper, waste_left)
            options = window(max(0, room - upper), room - lower - 1)
            if self.rng is not None:
                jitter = self.rng.random(len(options)).tolist()
                order = sorted(range(len(options)), key=lambda i: (-options[i][0], jitter[i]))
                options = [options[i] for i in order]
            else:
                options.sort(key=lambda o: -o[0])
            for total, used in options:
                for k, c in used:
                    counts[k] -= c
                self.bins.append((first, used))
                if self.bound_ok(bins_left - 1) and self.dfs(bins_left - 1, waste_left - (room - total)):
                    return True
                self.bins.pop()
                for k, c in used:
                    counts[k] += c
            lower, upper = upper, 2 * upper + 1
        counts[first] += 1
        if len(self.failed) < 2_000_000:
            self.failed.add(key)
        return False


def bin_completion_search(
    times: np.ndarray,
    m: int,
    capacity: int,
    *,
    node_limit: int | None = None,
    work_limit: int | None = None,
    rng: np.random.Generator | None = None,
    expired: Callable[[], bool] | None = None,
) -> SearchOutcome:
    """Decide whether ``times`` fit on ``m`` machines of load at most ``capacity``.

    Parameters
    ----------
    times
        Non-negative integer job sizes.
    m, capacity
        Machines and their capacity.
    node_limit
        Give up after this many nodes (verdict ``limit``); ``None`` for no limit.
    work_limit
        Give up after this much work (see the module docstring); ``None`` for no limit.
    rng
        Break ties between equally full completions at random (for restarts).
    expired
        The caller's wall-clock safety net, called every 64 nodes: True gives up
        (verdict ``limit``).

    Returns
    -------
    SearchOutcome
        ``feasible`` with an assignment of every job, ``infeasible`` when the exhausted
        search proves no packing exists, ``limit`` when a limit stopped it first (or the
        instance is too large to search: distinct sizes x capacity above
        ``MAX_BITS_PER_NODE``).
    """
    p = np.asarray(times, dtype=np.int64)
    total = int(p.sum())
    if (p.size and int(p.max()) > capacity) or total > m * capacity:
        return SearchOutcome(INFEASIBLE, None, 0)
    positive = p[p > 0]
    sizes_arr, counts_arr = np.unique(positive, return_counts=True)
    sizes, counts = sizes_arr[::-1].tolist(), counts_arr[::-1].tolist()
    if len(sizes) * (capacity + 1) > MAX_BITS_PER_NODE:
        return SearchOutcome(LIMIT, None, 0)
    search = _Search(sizes, counts, m, capacity, node_limit, work_limit, rng, expired)
    if not search.bound_ok(m):
        return SearchOutcome(INFEASIBLE, None, 0, search.work)
    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * m + 1000))
    try:
        ok = search.dfs(m, m * capacity - total)
    except _Stop:
        return SearchOutcome(LIMIT, None, search.nodes, search.work)
    finally:
        sys.setrecursionlimit(limit)
    if not ok:
        return SearchOutcome(INFEASIBLE, None, search.nodes, search.work)
    # Place the jobs: every bin's kinds and counts, zero-size jobs on machine 0.
    assignment = np.zeros(p.size, dtype=np.int64)
    pools = {size: np.flatnonzero(p == size).tolist() for size in sizes}
    for j, (first, used) in enumerate(search.bins):
        if first >= 0:
            assignment[pools[sizes[first]].pop()] = j
        for k, c in used:
            for _ in range(c):
                assignment[pools[sizes[k]].pop()] = j
    return SearchOutcome(FEASIBLE, assignment, search.nodes, search.work)


def repack_search(
    times: np.ndarray,
    m: int,
    assignment: np.ndarray,
    target: int,
    rng: np.random.Generator,
    *,
    work: int,
    group: int = 6,
    node_limit: int = 500,
    expired: Callable[[], bool] | None = None,
) -> np.ndarray | None:
    """Large-neighbourhood search towards makespan ``target``: repack small groups of machines.

    Each move pools the jobs of the busiest machine and ``group - 1`` others (drawn with
    weight growing with their slack) and asks a node-limited :func:`bin_completion_search`
    to spread them over the same machines with every load below the busiest one's, or, on
    a share of the moves, no higher (a plateau move that reshuffles the group and lets the
    search walk across equal makespans). A group more than 5% from balanced is first asked for
    its own bound (its mean load or largest job). Moves go on until their searches have
    spent ``work`` (each move also counts 50 units plus one per 20 jobs for its own
    bookkeeping) or ``expired()``. Returns an assignment with makespan at most ``target``
    as soon as one is found, else the best assignment it walked through when that is better
    than the one given, else None.
    """
    p = np.asarray(times, dtype=np.int64)
    a = np.asarray(assignment, dtype=np.int64).copy()
    loads = np.bincount(a, weights=p, minlength=m).astype(np.int64)
    group = min(group, m)
    if group < 2:
        return a if loads.max() <= target else None
    machines = np.arange(m)
    best, best_makespan = None, int(loads.max())
    spent, per_move = 0, 50 + p.size // 20
    while spent < work:
        spent += per_move
        top = int(np.argmax(loads))
        if loads[top] <= target:
            return a
        if loads[top] < best_makespan:
            best, best_makespan = a.copy(), int(loads[top])
        if expired is not None and expired():
            break
        rest = machines[machines != top]
        weight = (loads[top] - loads[rest]).astype(np.float64) + 1.0
        others = rng.choice(rest, group - 1, replace=False, p=weight / weight.sum())
        pool = np.concatenate([[top], others])
        members = np.flatnonzero(np.isin(a, pool))
        items = p[members]
        goal = max(target, int(loads[top]) - (0 if rng.random() < 0.3 else 1))
        # Far from balanced (a poor start), first ask for the group's own bound.
        balanced = max(target, -(-int(items.sum()) // group), int(items.max()))
        out = SearchOutcome(LIMIT, None, 0)
        if 20 * (goal - balanced) > balanced:  # more than 5% above
            out = bin_completion_search(
                items, group, balanced, node_limit=node_limit, rng=rng, expired=expired
            )
            spent += out.work
        if out.verdict != FEASIBLE:
            out = bin_completion_search(items, group, goal, node_limit=node_limit, rng=rng, expired=expired)
            spent += out.work
        if out.verdict == FEASIBLE and out.assignment is not None:
            a[members] = pool[out.assignment]
            loads[pool] = np.bincount(out.assignment, weights=p[members], minlength=group).astype(np.int64)
    if int(loads.max()) < best_makespan:
        best = a.copy()
    return best
