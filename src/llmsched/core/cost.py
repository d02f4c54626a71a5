"""Cost models: how long a prefill stage and a decode iteration take (seconds).

Every cost model offers

* ``prefill_time(tokens)``: time of a prefill stage holding ``tokens`` prompt tokens;
* ``prefill_capacity``: the most prompt tokens one prefill stage may hold;
* ``decode_iteration_time(active)``: time of one decode iteration with ``active`` clients
  decoding (each produces one token);
* ``min_prefill_time(total_tokens, stages)`` and ``min_decode_time(total_tokens, iterations)``:
  lower bounds on the total time any schedule spends in prefill and in decode, used by
  :mod:`llmsched.engines.competition.bounds`.

Both functions of a stage accept scalars or numpy arrays.

:class:`LinearCostModel` is the paper's measured model; :class:`LevelCostModel` has the
semantics of the paper's MIP (prefill levels, constant per-token decode time).

A *context-aware* model (:class:`ContextCostModel`, or any model that
:func:`is_context_aware` accepts) also sees what a stage reads and computes beyond its
counts: ``prefill_time(tokens, squares)`` takes the sum of the squared prompt lengths
(attention over a prompt costs its square) and ``decode_iteration_time(active, context)``
the context tokens of the active requests (each iteration reads every cached key and value).
A request with ``p`` prompt tokens that has decoded ``j`` tokens has context ``p + j``: the
tokens in its cache when the iteration starts. Decode time must be affine in the context,
with slope ``decode_per_context``: the simulator jumps over a run of iterations in closed
form (the context grows by one token per active request and iteration, so a run's iteration
times form an arithmetic series).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from itertools import pairwise
from typing import Any, Protocol, runtime_checkable

import numpy as np

from llmsched.core.checks import (
    MAX_TOKENS,
    flag,
    instance,
    nonnegative_int,
    positive_int,
    real,
    real_array,
    sizes,
)

__all__ = [
    "BoundedCostModel",
    "ContextAwareCostModel",
    "ContextCostModel",
    "CostModel",
    "LevelCostModel",
    "LinearCostModel",
    "PrefillLevel",
    "context_rate",
    "cost_model_error",
    "decode_seconds",
    "is_context_aware",
    "prefill_seconds",
    "request_context",
]


@runtime_checkable
class CostModel(Protocol):
    """What the simulator and the validator need of a cost model."""

    @property
    def prefill_capacity(self) -> int: ...

    def prefill_time(self, tokens: Any) -> Any: ...

    def decode_iteration_time(self, active: Any) -> Any: ...


@runtime_checkable
class BoundedCostModel(CostModel, Protocol):
    """A cost model that can also bound total stage times from below (for ``lower_bounds``)."""

    def min_prefill_time(self, total_tokens: int, stages: int = 0) -> float: ...

    def min_decode_time(self, total_tokens: int, iterations: int) -> float: ...


@runtime_checkable
class ContextAwareCostModel(CostModel, Protocol):
    """A cost model whose stage times see context (see the module's docstring).

    ``decode_iteration_time(active, context)`` must equal ``decode_iteration_time(active)
    + decode_per_context * context``.
    """

    @property
    def decode_per_context(self) -> float: ...

    @property
    def prefill_per_square(self) -> float: ...

    def prefill_time(self, tokens: Any, squares: Any = 0) -> Any: ...

    def decode_iteration_time(self, active: Any, context: Any = 0) -> Any: ...


def is_context_aware(cost: object) -> bool:
    """Whether ``cost`` prices context: it has ``decode_per_context`` and ``prefill_per_square``.

    The simulator, the validator and the bounds then pass ``squares`` to ``prefill_time``
    and ``context`` to ``decode_iteration_time``; other models are called with counts alone.
    """
    return isinstance(getattr(cost, "decode_per_context", None), numbers.Real) and isinstance(
        getattr(cost, "prefill_per_square", None), numbers.Real
    )


def context_rate(cost: object) -> float:
    """``c_d`` (seconds per context token read) of a context-aware model; 0.0 for any other."""
    price: Any = cost
    return float(price.decode_per_context) if is_context_aware(cost) else 0.0


def prefill_seconds(cost: CostModel, tokens: Any, squares: Any) -> Any:
    """A prefill stage's time: ``prefill_time(tokens, squares)`` under a context-aware model,
    ``prefill_time(tokens)`` under one that prices counts alone (``squares`` unused)."""
    price: Any = cost
    return price.prefill_time(tokens, squares) if is_context_aware(cost) else price.prefill_time(tokens)


def decode_seconds(cost: CostModel, active: Any, context: Any) -> Any:
    """A decode iteration's time: ``decode_iteration_time(active, context)`` under a
    context-aware model, ``decode_iteration_time(active)`` under another (``context`` unused)."""
    price: Any = cost
    if is_context_aware(cost):
        return price.decode_iteration_time(active, context)
    return price.decode_iteration_time(active)


def request_context(prompt_tokens: Any, output_tokens: Any) -> np.ndarray:
    """Context tokens a request reads over its whole decode phase: ``sum_{j < N^d} (N^p + j)``
    ``= N^d N^p + N^d (N^d - 1) / 2`` per request, whatever the schedule (as int64: exact for
    token counts up to ``2**31``; sum them as Python ints, which their total may outgrow)."""
    prompt = np.asarray(prompt_tokens, dtype=np.int64)
    output = np.asarray(output_tokens, dtype=np.int64)
    return output * prompt + output * (output - 1) // 2


# More prefill levels than this are refused: the MIP carries a binary per level and stage.
MAX_LEVELS = 10_000
# A batch table longer than this is refused (one entry per batch size).
MAX_BATCH_TABLE = 1 << 16


def _cross(o: tuple[float, float], a: tuple[float, float], b: tuple[float, float]) -> float:
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


@dataclass(frozen=True)
class PrefillLevel:
    """A prefill level of the MIP: at most ``capacity`` tokens in ``time`` seconds.

    ``capacity`` is a positive integer and ``time`` a finite number of seconds > 0.
    """

    capacity: int
    time: float

    def __post_init__(self) -> None:
        positive_int("capacity", self.capacity)
        real("time", self.time, low=0.0, low_open=True)


@dataclass(frozen=True)
class LinearCostModel:
    """Prefill ``a_p + b_p * tokens``; decode iteration ``a_d + b_d * active``.

    Parameters
    ----------
    prefill_base, prefill_per_token
        a_p (s) and b_p (s per prompt token) of a prefill stage.
    decode_base, decode_per_client
        a_d (s) and b_d (s per active client) of a decode iteration.
    prefill_capacity
        The most prompt tokens one prefill stage may hold.
    """

    prefill_base: float
    prefill_per_token: float
    decode_base: float
    decode_per_client: float
    prefill_capacity: int = 5000

    def __post_init__(self) -> None:
        for name in ("prefill_base", "prefill_per_token", "decode_base", "decode_per_client"):
            real(name, getattr(self, name), low=0.0)
        # Stored as a Python int: unsigned numpy integers would overflow in -(-a // b).
        object.__setattr__(self, "prefill_capacity", positive_int("prefill_capacity", self.prefill_capacity))
        if self.prefill_base + self.prefill_per_token <= 0:
            raise ValueError("a prefill stage must take some time: prefill_base + prefill_per_token > 0")
        if self.decode_base + self.decode_per_client <= 0:
            raise ValueError("a decode iteration must take some time: decode_base + decode_per_client > 0")

    @classmethod
    def paper(cls) -> LinearCostModel:
        """LLaMA-65B on eight Ascend NPUs as measured by Pang et al. (Sec. V-A).

        Prefill 25 ms + 0.13 ms/token, at most 5,000 tokens a stage (675 ms when full);
        decode 29 ms + 0.21 ms per active client (71 ms for 200 clients).
        """
        return cls(0.025, 0.13e-3, 0.029, 0.21e-3, 5000)

    def prefill_time(self, tokens: Any) -> Any:
        return self.prefill_base + self.prefill_per_token * sizes("tokens", tokens)

    def decode_iteration_time(self, active: Any) -> Any:
        return self.decode_base + self.decode_per_client * sizes("active", active)

    def min_prefill_time(self, total_tokens: int, stages: int = 0) -> float:
        total = nonnegative_int("total_tokens", total_tokens)
        # At least ceil(total / capacity) stages (or ``stages``), each paying the base once.
        stages = max(nonnegative_int("stages", stages), -(-total // self.prefill_capacity))
        return stages * self.prefill_base + self.prefill_per_token * total

    def min_decode_time(self, total_tokens: int, iterations: int) -> float:
        total = nonnegative_int("total_tokens", total_tokens)
        # sum over iterations of (a_d + b_d * active) = a_d * #iterations + b_d * #tokens.
        return self.decode_base * nonnegative_int("iterations", iterations) + self.decode_per_client * total

    def levels(self, count: int = 5) -> tuple[PrefillLevel, ...]:
        """``count`` prefill levels with evenly spaced capacities up to ``prefill_capacity``.

        Level l holds ``ceil(l * capacity / count)`` tokens and takes this model's time for
        that many tokens, so a stage at the smallest level that holds its tokens is never
        faster than the linear model says.
        """
        count = positive_int("count", count, maximum=MAX_LEVELS)
        caps = sorted({-(-k * self.prefill_capacity // count) for k in range(1, count + 1)})
        return tuple(PrefillLevel(int(c), float(self.prefill_time(c))) for c in caps)

    def to_levels(self, clients: int, levels: int = 5) -> LevelCostModel:
        """This model under the MIP's semantics.

        Prefill runs at ``levels`` levels (see :meth:`levels`); a decode token costs the
        iteration time of a full batch of ``clients``, whatever the batch.
        """
        clients = positive_int("clients", clients)
        levels = positive_int("levels", levels, maximum=MAX_LEVELS)
        return LevelCostModel(self.levels(levels), float(self.decode_iteration_time(clients)))

    @classmethod
    def fit(
        cls,
        prefill_tokens: Any,
        prefill_times: Any,
        decode_active: Any,
        decode_times: Any,
        prefill_capacity: int,
    ) -> LinearCostModel:
        """Least-squares fit of both lines from measured stages (relative errors weighted equally).

        Parameters
        ----------
        prefill_tokens, prefill_times
            Measured prefill stages: total prompt tokens and seconds.
        decode_active, decode_times
            Measured decode iterations: active clients and seconds.
        prefill_capacity
            Capacity of the fitted model (not identifiable from times).

        Notes
        -----
        Negative fitted coefficients (noise on a flat line) are clipped to zero and the
        other coefficient refitted, so the result is always a valid model.

        Raises
        ------
        TypeError, ValueError
            If sizes are not finite numbers >= 0, times not finite and > 0, a size array
            and its times differ in length, fewer than two distinct sizes are given, or
            ``prefill_capacity`` is not a positive integer.
        """
        positive_int("prefill_capacity", prefill_capacity)
        xs_p, ys_p = _samples("prefill_tokens", prefill_tokens, "prefill_times", prefill_times)
        xs_d, ys_d = _samples("decode_active", decode_active, "decode_times", decode_times)
        a_p, b_p = _fit_line("prefill_tokens", xs_p, ys_p)
        a_d, b_d = _fit_line("decode_active", xs_d, ys_d)
        return cls(a_p, b_p, a_d, b_d, prefill_capacity)


@dataclass(frozen=True)
class ContextCostModel:
    """Stage times that see context.

    Prefill ``a_p + b_p * tokens + c_p * squares`` (``squares`` the sum of the squared
    prompt lengths in the stage: attention over a prompt grows with its square); decode
    iteration ``a_d + b_d * active + c_d * context`` (``context`` the tokens already in the
    active requests' caches: each iteration reads their keys and values). With
    ``c_p = c_d = 0`` it is :class:`LinearCostModel` and gives the same times.

    Parameters
    ----------
    prefill_base, prefill_per_token, prefill_per_square
        a_p (s), b_p (s per prompt token) and c_p (s per squared prompt token).
    decode_base, decode_per_client, decode_per_context
        a_d (s), b_d (s per active client) and c_d (s per context token read).
    prefill_capacity
        The most prompt tokens one prefill stage may hold.
    decode_by_batch
        Optional: the decode iteration's time at no context for each batch size,
        ``decode_by_batch[k - 1]`` for ``k`` active clients (seconds, each > 0), in place of
        ``a_d + b_d * k`` (Splitwise's piecewise shape, with a piece per size). Past the
        table the time goes on from its last entry at ``b_d`` per client; a fractional batch
        size is interpolated (``a_d`` at 0). On a CPU a matrix product's time is a sawtooth
        in its rows (measured in ``benchmarks/runtime_layouts.py``), which no line follows;
        a table does, and it need not increase. ``c_d * context`` is added either way.

    Notes
    -----
    Every coefficient is >= 0, so a stage never gets faster with more work of one kind
    (more tokens, squares or context); the lower bounds (:meth:`min_prefill_time`,
    :meth:`min_decode_time`) rest on it. With a batch table an iteration of more clients
    may be faster than one of fewer, and :meth:`min_decode_time` bounds through the table's
    lower convex hull instead.
    """

    prefill_base: float
    prefill_per_token: float
    prefill_per_square: float
    decode_base: float
    decode_per_client: float
    decode_per_context: float
    prefill_capacity: int = 5000
    decode_by_batch: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        for name in self.coefficients():
            object.__setattr__(self, name, real(name, getattr(self, name), low=0.0))
        if self.decode_by_batch is not None:
            table = real_array("decode_by_batch", self.decode_by_batch, low=0.0, low_open=True)
            if not 1 <= table.size <= MAX_BATCH_TABLE:
                raise ValueError(
                    f"decode_by_batch needs 1..{MAX_BATCH_TABLE} times (one per batch size), got {table.size}"
                )
            object.__setattr__(self, "decode_by_batch", tuple(float(t) for t in table))
        # At most MAX_TOKENS: a stage's sum of squared prompts is then below 2**62 (int64).
        capacity = positive_int("prefill_capacity", self.prefill_capacity, maximum=MAX_TOKENS)
        object.__setattr__(self, "prefill_capacity", capacity)
        if self.prefill_base + self.prefill_per_token + self.prefill_per_square <= 0:
            raise ValueError(
                "a prefill stage must take some time: prefill_base + prefill_per_token "
                "+ prefill_per_square > 0"
            )
        if self.decode_by_batch is None and self.decode_base + self.decode_per_client <= 0:
            raise ValueError(
                "a decode iteration must take some time: decode_base + decode_per_client > 0 "
                "(an iteration with no context still runs), or a batch table (decode_by_batch)"
            )

    @classmethod
    def coefficients(cls) -> tuple[str, ...]:
        """The names of the six coefficients, in order (every field but the capacity and
        the batch table)."""
        return tuple(f.name for f in fields(cls) if f.name not in ("prefill_capacity", "decode_by_batch"))

    @classmethod
    def from_linear(
        cls, linear: LinearCostModel, prefill_per_square: float = 0.0, decode_per_context: float = 0.0
    ) -> ContextCostModel:
        """``linear``'s coefficients with the two context terms added (0 by default)."""
        instance("linear", linear, LinearCostModel, "a LinearCostModel")
        return cls(
            linear.prefill_base,
            linear.prefill_per_token,
            prefill_per_square,
            linear.decode_base,
            linear.decode_per_client,
            decode_per_context,
            linear.prefill_capacity,
        )

    def linear(self) -> LinearCostModel:
        """The same model without its context terms (what a linear fit cannot see), and
        without its batch table (``a_d + b_d * active`` throughout)."""
        return LinearCostModel(
            self.prefill_base,
            self.prefill_per_token,
            self.decode_base,
            self.decode_per_client,
            self.prefill_capacity,
        )

    def prefill_time(self, tokens: Any, squares: Any = 0) -> Any:
        return (
            self.prefill_base
            + self.prefill_per_token * sizes("tokens", tokens)
            + self.prefill_per_square * sizes("squares", squares)
        )

    def decode_iteration_time(self, active: Any, context: Any = 0) -> Any:
        active = sizes("active", active)
        if self.decode_by_batch is None:
            base = self.decode_base + self.decode_per_client * active
        else:
            base = self._batch_time(active)
        return base + self.decode_per_context * sizes("context", context)

    def _batch_time(self, active: Any) -> Any:
        """The batch table at ``active`` (interpolated between sizes, ``a_d`` at 0, on at
        ``b_d`` per client past its end)."""
        table = self.decode_by_batch
        assert table is not None
        last = len(table)
        if isinstance(active, numbers.Real):
            whole = float(active)
            if whole.is_integer() and 1 <= whole <= last:
                return table[int(whole) - 1]  # the simulator's path: a plain lookup
        xs = np.arange(last + 1, dtype=np.float64)
        ys = np.array((self.decode_base, *table))
        a = np.asarray(active, dtype=np.float64)
        out = np.where(a > last, table[-1] + self.decode_per_client * (a - last), np.interp(a, xs, ys))
        return float(out) if out.ndim == 0 else out

    def batch_hull(self) -> list[tuple[float, float]]:
        """Lines ``(alpha, beta)`` with ``alpha + beta * k`` at most the context-free
        iteration time at every batch size ``k >= 1``: one per edge of the lower convex
        hull of the batch table (slopes kept within ``[0, b_d]``: ``b_d`` is the slope past
        the table), or the model's own line without a table. Every iteration time, and so
        every sum of them, is bounded below by any of them (see :meth:`min_decode_time`).

        No slope is negative, so a line also bounds an iteration by any part of its batch:
        ``alpha + beta * k`` for the ``k`` of its clients that one counts (the bounds count
        the requests arriving after a time, which may share iterations with earlier ones,
        and a larger batch may be faster by the table)."""
        if self.decode_by_batch is None:
            return [(self.decode_base, self.decode_per_client)]
        points = [(float(k), t) for k, t in enumerate(self.decode_by_batch, start=1)]
        points.append((len(points) + 1.0, points[-1][1] + self.decode_per_client))
        hull: list[tuple[float, float]] = []
        for point in points:  # Andrew's monotone chain, lower half
            while len(hull) >= 2 and _cross(hull[-2], hull[-1], point) <= 0:
                hull.pop()
            hull.append(point)
        slopes = {
            min(self.decode_per_client, max(0.0, (y1 - y0) / (x1 - x0)))
            for (x0, y0), (x1, y1) in pairwise(hull)
        }
        slopes |= {0.0, self.decode_per_client}
        # Past the table the time rises at b_d >= beta, so the least of f(k) - beta * k is
        # taken within the table and its next size.
        return [(min(y - beta * x for x, y in points), beta) for beta in sorted(slopes)]

    def min_prefill_time(self, total_tokens: int, stages: int = 0, squares: int = 0) -> float:
        """Least total prefill time of ``total_tokens`` prompt tokens in at least ``stages``
        stages (and at least ``ceil(total / capacity)``), their squared lengths summing to
        ``squares``.

        Exact, not only a bound, in its two sums: every prompt is prefilled in one stage,
        so the stages' tokens sum to ``total_tokens`` and their squares to ``squares``
        whatever the grouping; only the number of stages is free, and each costs a_p.
        """
        total = nonnegative_int("total_tokens", total_tokens)
        stages = max(nonnegative_int("stages", stages), -(-total // self.prefill_capacity))
        return (
            stages * self.prefill_base
            + self.prefill_per_token * total
            + self.prefill_per_square * nonnegative_int("squares", squares)
        )

    def min_decode_time(self, total_tokens: int, iterations: int, context: int = 0) -> float:
        """Least total decode time of ``total_tokens`` output tokens over at least
        ``iterations`` iterations, the requests reading ``context`` tokens in all.

        Summing an iteration's time over the iterations gives a_d per iteration, b_d per
        token produced (every active client produces one) and c_d per context token read.
        A request's context at its j-th decode iteration is ``N^p + j`` whichever
        iteration that is, so the total context is :func:`request_context` summed over the
        requests: a property of the workload, not of the schedule. Only the number of
        iterations is free, and each costs a_d >= 0.

        With a batch table, let ``alpha + beta * k`` be any line of :meth:`batch_hull`
        (below the context-free time at every batch size k >= 1, with ``beta >= 0``). The
        ``n`` iterations that produce these tokens, ``k_i >= 1`` of them in iteration i
        (``sum k_i = total_tokens``; other requests may share the iteration, and
        ``beta >= 0`` makes them only add), take at least
        ``n * alpha + beta * total_tokens``; ``n`` is at least ``iterations`` and at most
        ``total_tokens``, so that is at least ``iterations * alpha`` (``alpha >= 0``) or
        ``total_tokens * alpha`` (``alpha < 0``) plus ``beta * total_tokens``. The best of
        the lines is returned.
        """
        total = nonnegative_int("total_tokens", total_tokens)
        iterations = nonnegative_int("iterations", iterations)
        reading = self.decode_per_context * nonnegative_int("context", context)
        if self.decode_by_batch is None:
            return self.decode_base * iterations + self.decode_per_client * total + reading
        if total == 0:
            return 0.0
        best = max(
            (iterations if alpha >= 0 else total) * alpha + beta * total for alpha, beta in self.batch_hull()
        )
        return max(0.0, best) + reading

    def to_levels(self, clients: int, levels: int = 5, context: int = 0) -> LevelCostModel:
        """This model under the MIP's semantics, charged as if every client's request held
        ``context`` tokens of context in every iteration.

        Prefill level ``l`` holds ``ceil(l * capacity / levels)`` tokens and takes their time
        as one prompt (the largest sum of squares those tokens can have); a decode iteration
        takes the time of a full batch of ``clients`` at ``context`` tokens each. With
        ``context`` at least the longest prompt plus output, the MIP never charges a stage
        less than this model does; with less it sees an engine that reads fewer keys and values.
        """
        clients = positive_int("clients", clients)
        levels = positive_int("levels", levels, maximum=MAX_LEVELS)
        context = nonnegative_int("context", context)
        caps = sorted({-(-k * self.prefill_capacity // levels) for k in range(1, levels + 1)})
        return LevelCostModel(
            tuple(PrefillLevel(int(c), float(self.prefill_time(c, c * c))) for c in caps),
            float(self.decode_iteration_time(clients, clients * context)),
        )

    @classmethod
    def fit(
        cls,
        prefill_tokens: Any,
        prefill_squares: Any,
        prefill_times: Any,
        decode_active: Any,
        decode_context: Any,
        decode_times: Any,
        prefill_capacity: int,
        robust: bool = True,
        batch_table: bool = False,
    ) -> ContextCostModel:
        """Least-squares fit of both stage models from measured stages.

        Each sample's error counts relative to its time (a 1-token prefill against a full
        one spans orders of magnitude); coefficients are kept >= 0 (non-negative least
        squares). With ``robust`` the fit is iteratively reweighted with Huber's weights on
        the relative residuals (scale from their median absolute deviation), so a stray slow
        run (the operating system taking the core) pulls the fit far less than it pulls
        plain least squares.

        Parameters
        ----------
        prefill_tokens, prefill_squares, prefill_times
            Measured prefill stages: total prompt tokens, sum of squared prompt lengths, seconds.
        decode_active, decode_context, decode_times
            Measured decode iterations: active clients, context tokens, seconds.
        prefill_capacity
            Capacity of the fitted model (not identifiable from times).
        batch_table
            Also fit ``decode_by_batch``: one time per batch size from 1 to the largest
            measured, fitted jointly with ``c_d`` (the line ``a_d + b_d * active`` is still
            fitted, for sizes past the table). Every batch size in that range must be measured.

        Raises
        ------
        TypeError, ValueError
            If sizes are not finite numbers >= 0, times not finite and > 0, arrays of one
            kind differ in length, fewer than two distinct token counts (prefill) or batch
            sizes (decode) are given, ``prefill_capacity`` is not a positive integer, or a
            batch table is asked for and a batch size is missing or not whole.
        """
        positive_int("prefill_capacity", prefill_capacity)
        robust = flag("robust", robust)
        batch_table = flag("batch_table", batch_table)
        xs_p, ys_p = _samples("prefill_tokens", prefill_tokens, "prefill_times", prefill_times)
        sq_p, _ = _samples("prefill_squares", prefill_squares, "prefill_times", prefill_times)
        xs_d, ys_d = _samples("decode_active", decode_active, "decode_times", decode_times)
        cx_d, _ = _samples("decode_context", decode_context, "decode_times", decode_times)
        for name, xs in (("prefill_tokens", xs_p), ("decode_active", xs_d)):
            if np.unique(xs).size < 2:
                raise ValueError(
                    f"{name}: need samples at two or more distinct sizes to fit, got {np.unique(xs).size}"
                )
        a_p, b_p, c_p = _fit_relative(np.column_stack([np.ones_like(xs_p), xs_p, sq_p]), ys_p, robust)
        a_d, b_d, c_d = _fit_relative(np.column_stack([np.ones_like(xs_d), xs_d, cx_d]), ys_d, robust)
        if a_p + b_p + c_p <= 0:  # all clipped: a constant through the mean
            a_p = float(ys_p.mean())
        if a_d + b_d <= 0:
            b_d = float(np.mean(ys_d / np.maximum(xs_d, 1.0)))
        if not batch_table:
            return cls(a_p, b_p, c_p, a_d, b_d, c_d, prefill_capacity)
        batches = xs_d.astype(np.int64)
        if not np.array_equal(batches, xs_d) or batches.min() < 1:
            raise ValueError("decode_active: a batch table needs whole batch sizes >= 1")
        last = int(batches.max())
        missing = sorted(set(range(1, last + 1)) - set(batches.tolist()))
        if missing:
            raise ValueError(
                f"decode_active: a batch table needs every batch size from 1 to {last}; "
                f"none measured at {missing[:10]}{' ...' if len(missing) > 10 else ''}"
            )
        onehot = (batches[:, None] == np.arange(1, last + 1)[None, :]).astype(np.float64)
        *table, c_table = _fit_relative(np.column_stack([onehot, cx_d]), ys_d, robust)
        # A size whose samples all got weight 0 would be clipped to 0: the line takes over.
        table = [t if t > 0 else a_d + b_d * k for k, t in enumerate(table, start=1)]
        return cls(a_p, b_p, c_p, a_d, b_d, c_table, prefill_capacity, tuple(table))


def _fit_relative(design: np.ndarray, ys: np.ndarray, robust: bool, rounds: int = 20) -> list[float]:
    """Non-negative coefficients ``x`` minimising the (Huber-weighted) squared relative
    errors ``(design @ x - ys) / ys``.

    Columns are scaled to unit norm before the solve (a count and a sum of squares differ
    by orders of magnitude) and the scale is undone after.
    """
    from scipy.optimize import nnls

    rel = design / ys[:, None]
    norms = np.linalg.norm(rel, axis=0)
    norms[norms == 0] = 1.0
    scaled = rel / norms
    weights = np.ones_like(ys)
    coef = np.zeros(design.shape[1])
    for _ in range(rounds if robust else 1):
        root = np.sqrt(weights)
        solution, _ = nnls(scaled * root[:, None], root, maxiter=50 * design.shape[1])
        new = solution / norms
        residual = design @ new / ys - 1.0
        if robust:
            spread = 1.4826 * float(np.median(np.abs(residual - np.median(residual))))
            edge = 1.345 * max(spread, 1e-6)
            weights = np.minimum(1.0, edge / np.maximum(np.abs(residual), 1e-300))
        if np.allclose(new, coef, rtol=1e-10, atol=0.0):
            coef = new
            break
        coef = new
    return [float(c) for c in coef]


def _samples(size_name: str, sizes: Any, time_name: str, times: Any) -> tuple[np.ndarray, np.ndarray]:
    """Measured (size, seconds) pairs: sizes finite and >= 0, times finite and > 0, one length."""
    xs = real_array(size_name, sizes, low=0.0)
    ys = real_array(time_name, times, low=0.0, low_open=True)
    if xs.shape != ys.shape:
        raise ValueError(
            f"{size_name} has {xs.size} samples but {time_name} has {ys.size}; every size needs its time"
        )
    return xs, ys


def _fit_line(size_name: str, xs: np.ndarray, ys: np.ndarray) -> tuple[float, float]:
    """Fit ``y = base + slope * x`` minimising the squared *relative* errors.

    Stage times span one to two orders of magnitude (a 1-token prefill against a full one),
    and what matters is the relative error of each prediction, so each sample is weighted
    by ``1 / y``. Coefficients are kept non-negative.
    """
    if xs.size < 2 or np.unique(xs).size < 2:
        raise ValueError(
            f"{size_name}: need samples at two or more distinct sizes to fit a line, got {np.unique(xs).size}"
        )
    w = 1.0 / ys
    design = np.column_stack([w, xs * w])
    (base, slope), *_ = np.linalg.lstsq(design, np.ones_like(ys), rcond=None)
    if slope < 0:  # flat within noise: the best constant in relative terms
        base, slope = float((w @ np.ones_like(ys)) / (w @ w)), 0.0
    elif base < 0:  # proportional: the best slope through the origin
        base, slope = 0.0, float(((xs * w) @ np.ones_like(ys)) / ((xs * w) @ (xs * w)))
    return float(base), float(slope)


def _parse_level(index: int, level: Any) -> PrefillLevel:
    if isinstance(level, PrefillLevel):
        capacity, time = level.capacity, level.time
    else:
        try:
            capacity, time = level
        except (TypeError, ValueError):
            raise ValueError(
                f"levels[{index}]: a level must be a (capacity, time) pair, got {level!r}"
            ) from None
    capacity = positive_int(f"levels[{index}] capacity", capacity)
    time = real(f"levels[{index}] time (seconds)", time, low=0.0, low_open=True)
    return PrefillLevel(capacity, time)


@dataclass(frozen=True, init=False)
class LevelCostModel:
    """The MIP's semantics: prefill levels and a constant decode time per token.

    A prefill stage takes the time of the smallest level that holds its tokens (Eqs. 5-7).
    Every decode iteration takes ``decode_token_time`` whatever the batch, so a decode
    stage lasts ``decode_token_time`` times the most tokens any client decodes in it (Eq. 8).

    Parameters
    ----------
    levels
        ``PrefillLevel`` objects or ``(capacity, time)`` pairs: capacities strictly
        increasing, times positive and non-decreasing.
    decode_token_time
        T^d, seconds per decode iteration.
    """

    levels: tuple[PrefillLevel, ...]
    decode_token_time: float
    # Derived from the levels, not arguments: ``dataclasses.replace`` passes only the two above.
    _caps: np.ndarray = field(init=False, repr=False, compare=False)
    _times: np.ndarray = field(init=False, repr=False, compare=False)

    def __init__(self, levels: Sequence[PrefillLevel | tuple[int, float]], decode_token_time: float):
        if isinstance(levels, (str, bytes, dict)) or not isinstance(levels, Iterable):
            raise TypeError(
                f"levels must be a sequence of (capacity, time) pairs, got {type(levels).__name__} {levels!r}"
            )
        parsed = tuple(_parse_level(i, lv) for i, lv in enumerate(levels))
        if len(parsed) > MAX_LEVELS:
            raise ValueError(f"levels must hold at most {MAX_LEVELS} levels, got {len(parsed)}")
        if not parsed:
            raise ValueError("levels must hold at least one (capacity, time) level")
        caps = [lv.capacity for lv in parsed]
        times = [lv.time for lv in parsed]
        if caps[0] < 1 or any(b <= a for a, b in pairwise(caps)):
            raise ValueError(f"level capacities must be positive and strictly increasing, got {caps}")
        if any(not math.isfinite(t) or t <= 0 for t in times) or any(b < a for a, b in pairwise(times)):
            raise ValueError(f"level times must be positive, finite and non-decreasing, got {times}")
        real("decode_token_time", decode_token_time, low=0.0, low_open=True)
        object.__setattr__(self, "levels", parsed)
        object.__setattr__(self, "decode_token_time", float(decode_token_time))
        object.__setattr__(self, "_caps", np.array(caps, dtype=np.int64))
        object.__setattr__(self, "_times", np.array(times, dtype=np.float64))

    @property
    def prefill_capacity(self) -> int:
        return self.levels[-1].capacity

    def prefill_time(self, tokens: Any) -> Any:
        idx = np.searchsorted(self._caps, np.asarray(sizes("tokens", tokens)), side="left")
        if np.any(idx >= len(self.levels)):
            raise ValueError(
                f"a prefill stage of {np.max(tokens)} tokens exceeds the largest level's "
                f"capacity of {self.prefill_capacity}"
            )
        out = self._times[idx]
        return float(out) if np.ndim(out) == 0 else out

    def decode_iteration_time(self, active: Any) -> Any:
        active = sizes("active", active)
        if np.ndim(active) == 0:
            return self.decode_token_time
        return np.full(np.shape(active), self.decode_token_time)

    def min_prefill_time(self, total_tokens: int, stages: int = 0) -> float:
        total = nonnegative_int("total_tokens", total_tokens)
        stages = nonnegative_int("stages", stages)
        if total == 0:
            return 0.0
        stages = max(stages, -(-total // self.prefill_capacity))
        cheapest_stage = float(self._times.min())
        best_rate = float((self._times / self._caps).min())
        return max(stages * cheapest_stage, total * best_rate)

    def min_decode_time(self, total_tokens: int, iterations: int) -> float:
        nonnegative_int("total_tokens", total_tokens)
        return self.decode_token_time * nonnegative_int("iterations", iterations)


def cost_model_error(
    model: CostModel,
    prefill_tokens: Any = (),
    prefill_times: Any = (),
    decode_active: Any = (),
    decode_times: Any = (),
    prefill_squares: Any = None,
    decode_context: Any = None,
) -> dict[str, float]:
    """Mean absolute relative error of a model's stage times against measured ones.

    ``prefill_squares`` (sum of squared prompt lengths per stage) and ``decode_context``
    (context tokens per iteration) reach a context-aware model (:func:`is_context_aware`);
    other models price counts alone and ignore them.

    Returns ``prefill_mape``, ``decode_mape`` (fractions, NaN where no sample was given)
    and ``max_relative_error`` over all samples.

    Raises
    ------
    TypeError, ValueError
        If ``model`` is not a cost model, sizes are not finite numbers >= 0, times not
        finite and > 0, or a size array and its times differ in length.
    """
    instance(
        "model", model, CostModel, "a cost model (prefill_time, decode_iteration_time, prefill_capacity)"
    )
    samples = []
    for key, size_name, size, extra_name, extra, time_name, times in (
        ("prefill_mape", "prefill_tokens", prefill_tokens, "prefill_squares", prefill_squares,
         "prefill_times", prefill_times),
        ("decode_mape", "decode_active", decode_active, "decode_context", decode_context,
         "decode_times", decode_times),
    ):  # fmt: skip
        xs, ys = _samples(size_name, size, time_name, times)
        more = _samples(extra_name, extra, time_name, times)[0] if extra is not None else None
        samples.append((key, xs, more, ys))
    errors: dict[str, float] = {}
    worst = 0.0
    for (key, xs, more, ys), seconds in zip(samples, (prefill_seconds, decode_seconds), strict=True):
        if xs.size == 0:
            errors[key] = float("nan")
            continue
        predicted = seconds(model, xs, 0 if more is None else more)
        rel = np.abs(np.asarray(predicted, dtype=np.float64) - ys) / ys
        errors[key] = float(rel.mean())
        worst = max(worst, float(rel.max()))
    errors["max_relative_error"] = worst
    return errors
