"""Maximise throughput under a latency bound over monotone integer control variables.

ExeGPT's control variables (batch sizes, decode iterations between encodings, micro-batches,
tensor-parallel GPUs) are *monotone*: moving one of them in its direction raises throughput
and latency together. :func:`branch_and_bound` is its Algorithm 1 for any number of such
variables: a block of the grid is a box of value indices; its highest corner bounds the
throughput of every point in it and its lowest corner bounds the latency from below. A
block whose lowest latency already breaks the bound (beyond ``eps_latency``) is pruned, a
block whose highest corner meets the bound is solved by that corner, and the rest are split
in two, best upper bound first, until no block can beat the incumbent by more than
``eps_throughput``. The tolerances absorb small violations of monotonicity, as the paper's
do. Every distinct configuration is evaluated once and counted.

:func:`exhaustive` evaluates every configuration of the grid, to verify the search.
"""

from __future__ import annotations

import heapq
import itertools
import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

__all__ = ["Evaluation", "SearchResult", "Variable", "branch_and_bound", "exhaustive", "grid_size"]

Perf = Callable[[dict[str, int]], tuple[float, float]]

# Values one variable may take: a grid beyond this is not searched but refused up front.
MAX_VALUES = 10_000_000


@dataclass(frozen=True)
class Variable:
    """A control variable: its name and its values, in the order that raises throughput and
    latency (list them from the lowest-latency end, e.g. batch sizes ascending and micro-batch
    counts descending)."""

    name: str
    values: tuple[int, ...]

    def __init__(self, name: str, values: Sequence[int]):
        if not isinstance(name, str) or not name:
            raise ValueError(f"a variable needs a name, got {name!r}")
        if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
            raise TypeError(f"variable {name!r} takes a sequence of integers, got {type(values).__name__}")
        if len(values) > MAX_VALUES:
            raise ValueError(
                f"variable {name!r} has {len(values)} values; at most {MAX_VALUES} are searched "
                "(use a coarser grid)"
            )
        raw = tuple(values)
        if not raw:
            raise ValueError(f"variable {name!r} has no values")
        if any(isinstance(v, bool) or not isinstance(v, numbers.Integral) for v in raw):
            raise ValueError(f"variable {name!r} must take integer values, got {raw!r}")
        vals = tuple(int(v) for v in raw)
        if len(set(vals)) != len(vals):
            raise ValueError(f"variable {name!r} repeats a value: {vals!r}")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "values", vals)


@dataclass(frozen=True)
class Evaluation:
    """One configuration and its throughput and latency."""

    config: dict[str, int]
    throughput: float
    latency: float


@dataclass(frozen=True)
class SearchResult:
    """The best configuration meeting the latency bound, or none.

    ``feasible`` is False when no configuration met the bound (``config`` is then None and
    ``message`` says so). ``evaluations`` counts distinct configurations evaluated.
    """

    config: dict[str, int] | None
    throughput: float
    latency: float
    evaluations: int
    feasible: bool
    message: str = ""
    history: list[Evaluation] = field(default_factory=list, repr=False)


class _Counted:
    """``perf`` with a cache and a count of distinct configurations."""

    def __init__(self, perf: Perf, variables: Sequence[Variable]):
        self.perf = perf
        self.variables = variables
        self.cache: dict[tuple[int, ...], tuple[float, float]] = {}
        self.history: list[Evaluation] = []

    def config(self, index: tuple[int, ...]) -> dict[str, int]:
        return {v.name: v.values[i] for v, i in zip(self.variables, index, strict=True)}

    def __call__(self, index: tuple[int, ...]) -> tuple[float, float]:
        if index not in self.cache:
            config = self.config(index)
            out = self.perf(dict(config))
            if not (isinstance(out, tuple) and len(out) == 2):
                raise TypeError(f"perf must return (throughput, latency), got {out!r}")
            thr, lat = float(out[0]), float(out[1])
            if math.isnan(thr) or math.isnan(lat):
                raise ValueError(f"perf returned NaN for {config}")
            self.cache[index] = (thr, lat)
            self.history.append(Evaluation(config, thr, lat))
        return self.cache[index]


def _meets(latency: float, bound: float) -> bool:
    """A configuration meets the bound when its latency is finite (it can run) and at most the bound."""
    return latency <= bound and math.isfinite(latency)


def _check(perf: Perf, variables: Sequence[Variable], latency_bound: float, *tolerances: float) -> None:
    if not callable(perf):
        raise TypeError(f"perf must be a function config -> (throughput, latency), got {type(perf).__name__}")
    if not variables:
        raise ValueError("at least one variable is needed")
    if not all(isinstance(v, Variable) for v in variables):
        raise TypeError("variables must be Variable objects")
    names = [v.name for v in variables]
    if len(set(names)) != len(names):
        raise ValueError(f"variable names repeat: {names}")
    if (
        isinstance(latency_bound, bool)
        or not isinstance(latency_bound, numbers.Real)
        or not latency_bound > 0
    ):
        raise ValueError(
            f"latency_bound must be a positive number of seconds (or inf), got {latency_bound!r}"
        )
    for eps in tolerances:
        if isinstance(eps, bool) or not (isinstance(eps, numbers.Real) and 0 <= eps < 1):
            raise ValueError(f"tolerances must be fractions in [0, 1), got {eps!r}")


def _result(
    counted: _Counted, best: tuple[float, float, tuple[int, ...]] | None, bound: float
) -> SearchResult:
    if best is None:
        return SearchResult(
            None,
            0.0,
            math.inf,
            len(counted.cache),
            False,
            f"no configuration meets the latency bound of {bound:g} s",
            counted.history,
        )
    thr, lat, index = best
    return SearchResult(counted.config(index), thr, lat, len(counted.cache), True, "", counted.history)


def exhaustive(perf: Perf, variables: Sequence[Variable], latency_bound: float) -> SearchResult:
    """The best configuration meeting ``latency <= latency_bound``, by evaluating all of them.

    A latency of ``inf`` means the configuration cannot run: it meets no bound, not even ``inf``.
    """
    _check(perf, variables, latency_bound)
    counted = _Counted(perf, variables)
    best: tuple[float, float, tuple[int, ...]] | None = None
    for index in itertools.product(*(range(len(v.values)) for v in variables)):
        thr, lat = counted(index)
        if _meets(lat, latency_bound) and (best is None or thr > best[0]):
            best = (thr, lat, index)
    return _result(counted, best, latency_bound)


def branch_and_bound(
    perf: Perf,
    variables: Sequence[Variable],
    latency_bound: float,
    eps_throughput: float = 0.01,
    eps_latency: float = 0.01,
) -> SearchResult:
    """ExeGPT's Algorithm 1 over any number of monotone variables.

    Parameters
    ----------
    perf
        ``perf(config) -> (throughput, latency)`` for a dict of variable values.
    variables
        The control variables, each listing its values from the low-latency end.
    latency_bound
        Seconds; ``math.inf`` for no bound.
    eps_throughput, eps_latency
        Relative tolerances: a block is kept while its lowest latency is below
        ``latency_bound * (1 + eps_latency)`` and dropped once its highest throughput is
        below the incumbent's divided by ``1 + eps_throughput``.

    Returns
    -------
    SearchResult
        With ``feasible=False`` and a message when no configuration meets the bound.
    """
    _check(perf, variables, latency_bound, eps_throughput, eps_latency)
    counted = _Counted(perf, variables)
    lo0 = tuple(0 for _ in variables)
    hi0 = tuple(len(v.values) - 1 for v in variables)
    best: tuple[float, float, tuple[int, ...]] | None = None

    def offer(index: tuple[int, ...]) -> None:
        nonlocal best
        thr, lat = counted(index)
        if _meets(lat, latency_bound) and (best is None or thr > best[0]):
            best = (thr, lat, index)

    tie = itertools.count()
    queue: list[tuple[float, int, tuple[int, ...], tuple[int, ...]]] = []

    def push(lo: tuple[int, ...], hi: tuple[int, ...]) -> None:
        offer(lo)
        fastest = counted(lo)[1]
        if not math.isfinite(fastest) or fastest > latency_bound * (1 + eps_latency):
            return  # even its fastest point cannot run or breaks the bound (beyond the tolerance)
        offer(hi)
        upper = counted(hi)[0]
        if _meets(counted(hi)[1], latency_bound):
            return  # its best point meets the bound: nothing in it beats hi
        heapq.heappush(queue, (-upper, next(tie), lo, hi))

    push(lo0, hi0)
    while queue:
        neg_upper, _, lo, hi = heapq.heappop(queue)
        if best is not None and -neg_upper * (1 + eps_throughput) < best[0]:
            continue
        if lo == hi:
            continue
        dim = _split_dimension(counted, lo, hi, latency_bound)
        mid = (lo[dim] + hi[dim]) // 2
        push(lo, (*hi[:dim], mid, *hi[dim + 1 :]))
        push((*lo[:dim], mid + 1, *lo[dim + 1 :]), hi)
    return _result(counted, best, latency_bound)


def _split_dimension(counted: _Counted, lo: tuple[int, ...], hi: tuple[int, ...], bound: float) -> int:
    """The paper's split rule, for any number of dimensions.

    For each splittable dimension d, the corner that is high everywhere but low in d is
    where the block's best point would lie if d were the variable to give up; the feasible
    one of highest throughput says which dimension to split (the paper's top-left/bottom-right
    test in two dimensions). If none is feasible, split the longest dimension.
    """
    open_dims = [d for d in range(len(lo)) if hi[d] > lo[d]]
    best_dim, best_thr = -1, -math.inf
    for d in open_dims:
        corner = (*hi[:d], lo[d], *hi[d + 1 :])
        thr, lat = counted(corner)
        if _meets(lat, bound) and thr > best_thr:
            best_dim, best_thr = d, thr
    if best_dim >= 0:
        return best_dim
    return max(open_dims, key=lambda d: hi[d] - lo[d])


def grid_size(variables: Sequence[Variable]) -> int:
    """Configurations in the grid."""
    return math.prod(len(v.values) for v in variables)
