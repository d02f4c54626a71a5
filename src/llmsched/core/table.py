"""A cost model of measured times, interpolated piecewise-linearly (as SplitwiseSim and Vidur do).

:class:`TableCostModel` prices a prefill stage by its prompt tokens and a decode iteration by
its batch size from tables of measured times (*knots*), joined by straight lines, plus a term
per context token read (decode time must stay affine in the context: the simulator jumps over
a run of decode iterations in closed form). It meets the library's context-aware protocol
(:class:`~llmsched.core.cost.ContextAwareCostModel`) and bounds total stage times from below
(:class:`~llmsched.core.cost.BoundedCostModel`) through the lower convex hulls of its tables,
so every lower bound of the library stays valid under it.

:meth:`TableCostModel.fit` builds one from measurements (a CSV or a DataFrame with named
columns), :meth:`TableCostModel.held_out_error` scores that fit on rows it did not see, and
:meth:`TableCostModel.to_toml` / :meth:`TableCostModel.from_toml` keep a table in a file.
"""

from __future__ import annotations

import csv
import math
import numbers
import os
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from llmsched.core.checks import (
    MAX_TOKENS,
    choice,
    nonnegative_int,
    path_arg,
    positive_int,
    probability,
    real,
    real_array,
    sizes,
    text,
)
from llmsched.core.checks import seed as check_seed
from llmsched.core.cost import MAX_BATCH_TABLE

__all__ = [
    "COLUMNS",
    "TIME_UNITS",
    "HeldOutError",
    "TableCostModel",
    "decode_lines",
    "lower_hull",
    "medians",
    "prefill_lines",
    "split_rows",
]

#: What each column of a measurement holds, by the role :meth:`TableCostModel.fit` reads it
#: for, and its name in SplitwiseSim's ``perf_model.csv`` (the default).
COLUMNS = {
    "prompt": "prompt_size",
    "batch": "batch_size",
    "output": "token_size",
    "prefill_time": "prompt_time",
    "decode_time": "token_time",
}
#: Seconds per unit of a measured time.
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
# How far past its last knot a table may be read: its last segment's slope is a guess there.
EXTRAPOLATION = 2


def lower_hull(xs: Iterable[float], ys: Iterable[float]) -> list[tuple[float, float]]:
    """The vertices of the lower convex hull of the points ``(xs[i], ys[i])`` (``xs``
    ascending), from left to right (Andrew's monotone chain, lower half)."""
    hull: list[tuple[float, float]] = []
    for point in zip(xs, ys, strict=True):
        while len(hull) >= 2:
            (x0, y0), (x1, y1) = hull[-2], hull[-1]
            if (x1 - x0) * (point[1] - y0) - (y1 - y0) * (point[0] - x0) > 0:
                break
            hull.pop()
        hull.append((float(point[0]), float(point[1])))
    return hull


def prefill_lines(cost: Any) -> list[tuple[float, float]]:
    """Lines ``(alpha, beta)``, ``beta >= 0``, below a cost model's prefill time of every
    stage it can run, apart from a squares' term: a table's :meth:`TableCostModel.prefill_hull`,
    or the line ``a_p + b_p * tokens`` of a linear or context model."""
    hull = getattr(cost, "prefill_hull", None)
    if hull is not None:
        return [(float(alpha), float(beta)) for alpha, beta in hull()]
    return [(float(cost.prefill_base), float(cost.prefill_per_token))]


def decode_lines(cost: Any) -> list[tuple[float, float]]:
    """Lines ``(alpha, beta)`` below a cost model's context-free decode time at every batch
    size ``k >= 1``: its ``batch_hull()`` where it has one (a table, a context model), or the
    line ``a_d + b_d * k`` of a linear model."""
    hull = getattr(cost, "batch_hull", None)
    if hull is not None:
        return [(float(alpha), float(beta)) for alpha, beta in hull()]
    return [(float(cost.decode_base), float(cost.decode_per_client))]


def _lines_below(vertices: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Lines ``(alpha, beta)`` with ``alpha + beta * x`` at most every vertex's ``y``: one per
    edge of the lower hull, its slope clipped at 0, and the flat line at the least ``y``.

    A function that is linear between the vertices (and defined only between the first and
    the last) lies above each line everywhere, because it does at the vertices."""
    hull = lower_hull([x for x, _ in vertices], [y for _, y in vertices])
    slopes = {0.0} | {max(0.0, (y1 - y0) / (x1 - x0)) for (x0, y0), (x1, y1) in pairwise(hull)}
    return [(min(y - beta * x for x, y in vertices), beta) for beta in sorted(slopes)]


def _knots(name: str, values: Any, *, whole: bool) -> tuple[Any, ...]:
    """``values`` as a tuple of knots: strictly ascending whole numbers >= 1 (``whole``), or
    finite numbers of seconds > 0; between 1 and :data:`~llmsched.core.cost.MAX_BATCH_TABLE`."""
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, (Iterable, np.ndarray)):
        raise TypeError(f"{name} must be a sequence of numbers, got {type(values).__name__} {values!r}")
    items = list(values)
    if not 1 <= len(items) <= MAX_BATCH_TABLE:
        raise ValueError(f"{name} needs 1..{MAX_BATCH_TABLE} values (one per knot), got {len(items)}")
    if whole:
        knots = tuple(positive_int(f"{name}[{i}]", v, maximum=MAX_TOKENS) for i, v in enumerate(items))
        for i, (a, b) in enumerate(pairwise(knots), start=1):
            if b <= a:
                raise ValueError(f"{name} must be strictly ascending; {name}[{i}] = {b} follows {a}")
        return knots
    return tuple(float(t) for t in real_array(name, items, low=0.0, low_open=True))


def _non_decreasing(name: str, knots: tuple[int, ...], times: tuple[float, ...]) -> None:
    for i, (a, b) in enumerate(pairwise(times), start=1):
        if b < a:
            raise ValueError(
                f"{name} must not decrease (a stage of more tokens is never faster); "
                f"{name}[{i}] = {b!r} s at {knots[i]} tokens follows {a!r} s at {knots[i - 1]}"
            )


def _batched_table(
    prompt: Any, tokens: Any, times: Any
) -> tuple[int | None, tuple[int, ...], tuple[float, ...]]:
    """The batched prefill table, checked: none (``prompt`` None and no knots), or a prompt
    length with knots from it up (batches of prompts of that length) and their times."""
    given = not (
        isinstance(tokens, (tuple, list)) and not tokens and isinstance(times, (tuple, list)) and not times
    )
    if prompt is None:
        if given:
            raise ValueError(
                "batched_tokens and batched_times need batched_prompt, the prompt length measured"
            )
        return None, (), ()
    length = positive_int("batched_prompt", prompt, maximum=MAX_TOKENS)
    knots = _knots("batched_tokens", tokens, whole=True)
    seconds = _knots("batched_times", times, whole=False)
    if len(knots) != len(seconds):
        raise ValueError(
            f"batched_tokens and batched_times differ in length ({len(knots)} and {len(seconds)}): "
            "a time per knot"
        )
    if knots[0] < length:
        raise ValueError(
            f"batched_tokens start at one prompt of batched_prompt = {length} tokens or more, got {knots[0]}"
        )
    _non_decreasing("batched_times", knots, seconds)
    return length, knots, seconds


@dataclass(frozen=True, init=False)
class TableCostModel:
    """Stage times read from tables of measured times, joined by straight lines.

    A prefill stage of ``tokens`` prompt tokens takes the prefill table at ``tokens``; a
    decode iteration of ``active`` requests holding ``context`` tokens in their caches takes
    the decode table at ``active`` plus ``decode_per_context * context``. Between two knots
    a table is read on the straight line through them. Below its first knot it keeps the
    first knot's time: a batch smaller than the smallest measured is not assumed faster (and
    ``prefill_time(0)`` and ``decode_iteration_time(0)`` are finite, as the simulator needs).
    Past its last knot it goes on at its last segment's slope (never below flat), up to
    ``prefill_capacity`` tokens and ``max_batch`` requests; past those it answers ``inf``,
    which every entry point refuses, naming the call, before any work.

    Parameters
    ----------
    prefill_tokens
        Knots of the prefill table: prompt tokens in a prefill stage, whole, >= 1, strictly
        ascending.
    prefill_times
        Seconds of a prefill stage at each knot: finite, > 0 and non-decreasing (a stage of
        more tokens is never faster; the lower bounds rest on it: a request alone is
        prefilled no faster than in any stage that holds it).
    decode_batch
        Knots of the decode table: requests decoding in an iteration, whole, >= 1, strictly
        ascending.
    decode_times
        Seconds of a decode iteration at each knot with no context: finite and > 0 (not
        necessarily increasing: a larger batch may be faster, as on a CPU).
    decode_per_context
        c_d, seconds per context token an iteration reads (>= 0).
    prefill_capacity
        The most prompt tokens one prefill stage may hold; default the last prefill knot, at
        most twice it (past the last knot the table is an extrapolation).
    max_batch
        The largest batch it prices; default the last decode knot, at most twice it.
    mixed_factor
        How a mixed iteration (decoding requests and prompt tokens in one pass) is priced
        (:meth:`mixed_iteration_time`): None for the library's fused rule, or a factor >= 1
        for SplitwiseSim's (the factor times the prefill table at the iteration's tokens,
        each decoding request counting one; SplitwiseSim uses 1.1).
    name
        A label (a preset's name, a file's).

    Raises
    ------
    TypeError, ValueError
        Naming the field: knots that are not ascending whole numbers >= 1, times that are
        not finite and > 0 (or prefill times that decrease), a table and its times of
        different lengths, a capacity or largest batch below 1 or past twice the last knot,
        a negative ``decode_per_context``, or a ``mixed_factor`` below 1.
    """

    prefill_tokens: tuple[int, ...]
    prefill_times: tuple[float, ...]
    decode_batch: tuple[int, ...]
    decode_times: tuple[float, ...]
    decode_per_context: float
    prefill_capacity: int
    max_batch: int
    mixed_factor: float | None
    name: str
    batched_prompt: int | None
    batched_tokens: tuple[int, ...]
    batched_times: tuple[float, ...]
    # The tables as lists and the slopes past their ends, for lookups on the simulator's path.
    _prefill_x: list[float] = field(init=False, repr=False, compare=False)
    _prefill_y: list[float] = field(init=False, repr=False, compare=False)
    _prefill_tail: float = field(init=False, repr=False, compare=False)
    _decode_x: list[float] = field(init=False, repr=False, compare=False)
    _decode_y: list[float] = field(init=False, repr=False, compare=False)
    _decode_tail: float = field(init=False, repr=False, compare=False)
    _batched_x: list[float] = field(init=False, repr=False, compare=False)
    _batched_y: list[float] = field(init=False, repr=False, compare=False)
    _batched_tail: float = field(init=False, repr=False, compare=False)
    _longest: float = field(init=False, repr=False, compare=False)

    def __init__(
        self,
        prefill_tokens: Iterable[int],
        prefill_times: Iterable[float],
        decode_batch: Iterable[int],
        decode_times: Iterable[float],
        decode_per_context: float = 0.0,
        prefill_capacity: int | None = None,
        max_batch: int | None = None,
        mixed_factor: float | None = None,
        name: str = "",
        batched_prompt: int | None = None,
        batched_tokens: Iterable[int] = (),
        batched_times: Iterable[float] = (),
    ):
        tokens = _knots("prefill_tokens", prefill_tokens, whole=True)
        p_times = _knots("prefill_times", prefill_times, whole=False)
        batch = _knots("decode_batch", decode_batch, whole=True)
        d_times = _knots("decode_times", decode_times, whole=False)
        for knots, times, names in (
            (tokens, p_times, "prefill_tokens and prefill_times"),
            (batch, d_times, "decode_batch and decode_times"),
        ):
            if len(knots) != len(times):
                raise ValueError(f"{names} differ in length ({len(knots)} and {len(times)}): a time per knot")
        _non_decreasing("prefill_times", tokens, p_times)
        length, b_tokens, b_times = _batched_table(batched_prompt, batched_tokens, batched_times)
        per_context = real("decode_per_context", decode_per_context, low=0.0)
        last = max(tokens[-1], b_tokens[-1] if b_tokens else 0)
        capacity = self._limit("prefill_capacity", prefill_capacity, last, "prefill knot")
        largest = self._limit("max_batch", max_batch, batch[-1], "decode knot")
        factor = None if mixed_factor is None else real("mixed_factor", mixed_factor, low=1.0)
        set_field = object.__setattr__
        for key, value in (
            ("prefill_tokens", tokens),
            ("prefill_times", p_times),
            ("decode_batch", batch),
            ("decode_times", d_times),
            ("decode_per_context", per_context),
            ("prefill_capacity", capacity),
            ("max_batch", largest),
            ("mixed_factor", factor),
            ("name", text("name", name)),
            ("_prefill_x", [float(x) for x in tokens]),
            ("_prefill_y", list(p_times)),
            ("_prefill_tail", _tail_slope(tokens, p_times)),
            ("_decode_x", [float(x) for x in batch]),
            ("_decode_y", list(d_times)),
            ("_decode_tail", _tail_slope(batch, d_times)),
            ("batched_prompt", length),
            ("batched_tokens", b_tokens),
            ("batched_times", b_times),
            ("_batched_x", [float(x) for x in b_tokens]),
            ("_batched_y", list(b_times)),
            ("_batched_tail", _tail_slope(b_tokens, b_times) if b_tokens else 0.0),
            ("_longest", float(EXTRAPOLATION * tokens[-1])),
        ):
            set_field(self, key, value)

    @staticmethod
    def _limit(name: str, value: Any, last: int, knot: str) -> int:
        if value is None:
            return last
        limit = positive_int(name, value, maximum=MAX_TOKENS)
        if limit > EXTRAPOLATION * last:
            raise ValueError(
                f"{name} may be at most {EXTRAPOLATION} x the last {knot} ({EXTRAPOLATION * last:,}), got "
                f"{limit:,}: past its last knot the table goes on at its last segment's slope, a "
                "guess that is not carried further; measure larger sizes instead"
            )
        return limit

    # ------------------------------------------------------------ the protocol
    @property
    def prefill_per_square(self) -> float:
        """0.0: no time is linear in the prompts' squares (a table reads them to tell a
        stage's prompt count, with a batched prefill table, and a chunk's position in its
        prompt: :meth:`prefill_time`)."""
        return 0.0

    def prefill_time(self, tokens: Any, squares: Any = 0) -> Any:
        """Seconds of a prefill stage of ``tokens`` prompt tokens whose lengths' squares sum to
        ``squares`` (scalars or arrays); ``inf`` past ``prefill_capacity``.

        Without a batched table, or with ``squares`` 0 (not known), the prefill table at
        ``tokens``: the stage is priced as one prompt of all its tokens. With one (prompts of
        ``L = batched_prompt`` tokens batched), the stage's token-weighted mean prompt length
        ``m = squares / tokens`` places it between the two measured lines at its tokens ``T``:
        one prompt (``m = T``, the prefill table) and prompts of ``L`` tokens (``m = L``, the
        batched table), linearly in ``m``, which is linearly in ``squares`` (attention costs
        each prompt its square). A stage of prompts shorter than ``L`` on average takes the
        batched table (not extrapolated below it), and a stage of ``T <= L`` tokens the prefill
        table. The time is never below the prefill table at ``min(T, sqrt(squares))``, at least
        the longest prompt in the stage: a prompt alone is prefilled no faster than in any stage
        that holds it, which the library's lower bounds rest on.

        With a batched table the capacity may reach twice its last knot, past twice the prefill
        table's (on the presets, 32,768 tokens where single prompts were measured up to 8,192).
        The prefill table is never carried on past twice its last knot: there it follows the
        batched table's measured shape, scaled to meet it (``f(2x) * batched(T) /
        batched(2x)``, ``x`` its last knot).

        ``squares`` above ``tokens**2`` is a chunk of a prompt whose earlier chunks are in the
        cache (chunked prefill: a chunk of ``t`` tokens from position ``s`` counts ``(s + t)**2
        - s**2``, so ``s = (squares / t - t) / 2``). The table measured whole prompts; a chunk
        attends to the ``s`` tokens before it, which a prompt of ``t`` tokens does not, so the
        chunk takes what it adds to a prompt of ``s`` tokens, ``f(s + t) - f(s)``, and never
        less than a prompt of its own tokens, ``f(t)`` (the pass's fixed cost). A prompt's
        chunks then take at least the prompt whole, as its first chunk takes ``f(t_1)``: chunked
        prefill is never cheaper than prefill, as in Sarathi-Serve's measurements.
        """
        tokens = sizes("tokens", tokens)
        squares = sizes("squares", squares)
        if isinstance(tokens, numbers.Real) and isinstance(squares, numbers.Real):
            length, squared = float(tokens), float(squares)
            if squared > length * length > 0:
                return self._chunk(length, squared)
            single = self._single(tokens)
            if self.batched_prompt is None:
                return single
            return self._by_count(float(tokens), float(squares), float(single))
        single = self._single(tokens)
        t, s = np.broadcast_arrays(
            np.asarray(tokens, dtype=np.float64), np.asarray(squares, dtype=np.float64)
        )
        chunk = (s > t * t) & (t > 0)
        if self.batched_prompt is None and not chunk.any():
            return single
        one = np.broadcast_to(np.asarray(single, dtype=np.float64), t.shape)
        out = np.array(
            [
                self._chunk(a, b) if c else (d if self.batched_prompt is None else self._by_count(a, b, d))
                for a, b, c, d in zip(t.ravel(), s.ravel(), chunk.ravel(), one.ravel(), strict=True)
            ]
        )
        out = out.reshape(t.shape)
        return float(out) if out.ndim == 0 else out

    def _chunk(self, tokens: float, squares: float, extra: float = 0.0) -> float:
        """A chunk of ``tokens`` prompt tokens of ``squares`` squared tokens (see
        :meth:`prefill_time`), with ``extra`` tokens more in the pass (SplitwiseSim's decoding
        requests): ``max(f(T), f(s + T) - f(s))``, ``T = tokens + extra``, ``f`` the prefill
        table (one prompt), ``s + T`` kept within ``prefill_capacity``."""
        total = tokens + extra
        start = max(0.0, (squares / tokens - tokens) / 2)
        end = min(start + total, float(self.prefill_capacity))
        whole = float(self._single(total))
        added = float(self._single(end)) - float(self._single(max(0.0, end - total)))
        return max(whole, added)

    def _by_count(self, tokens: float, squares: float, single: float) -> float:
        """:meth:`prefill_time` of one stage, given the prefill table's time at its tokens."""
        length = self.batched_prompt
        assert length is not None
        if squares <= 0 or single == math.inf:
            return single
        if tokens <= length:
            return single
        weight = min(1.0, max(0.0, (tokens * tokens - squares) / (tokens * (tokens - length))))
        if weight == 0.0:
            return single
        batched = float(
            _read(tokens, self._batched_x, self._batched_y, self._batched_tail, self.prefill_capacity)
        )
        floor = float(self._single(min(tokens, math.sqrt(squares))))
        return max(single + weight * (batched - single), floor)

    def _single(self, at: Any) -> Any:
        """The prefill table (one prompt) at ``at`` tokens (a size or an array): with a
        batched table, past twice its last knot, the batched table's shape scaled to meet it
        there (see :meth:`prefill_time`)."""
        capacity = self.prefill_capacity
        out = _read(at, self._prefill_x, self._prefill_y, self._prefill_tail, capacity)
        limit = self._longest
        if self.batched_prompt is None or capacity <= limit:
            return out
        edge = float(_read(limit, self._prefill_x, self._prefill_y, self._prefill_tail, capacity))
        scale = edge / float(_read(limit, self._batched_x, self._batched_y, self._batched_tail, capacity))
        if isinstance(at, numbers.Real):
            if limit < float(at) <= capacity:
                return scale * float(
                    _read(at, self._batched_x, self._batched_y, self._batched_tail, capacity)
                )
            return out
        a = np.asarray(at, dtype=np.float64)
        shaped = scale * _read(a, self._batched_x, self._batched_y, self._batched_tail, capacity)
        out = np.where((a > limit) & (a <= capacity), shaped, out)
        return float(out) if np.ndim(out) == 0 else out

    def decode_iteration_time(self, active: Any, context: Any = 0) -> Any:
        """Seconds of a decode iteration of ``active`` requests reading ``context`` tokens
        (scalars or arrays); ``inf`` past ``max_batch``."""
        active = sizes("active", active)
        table = _read(active, self._decode_x, self._decode_y, self._decode_tail, self.max_batch)
        return table + self.decode_per_context * sizes("context", context)

    def mixed_iteration_time(self, decoding: Any, context: Any, chunk_tokens: Any, squares: Any = 0) -> Any:
        """Seconds of one iteration of ``decoding`` requests at ``context`` tokens and
        ``chunk_tokens`` prompt tokens (scalars or arrays).

        With no prompt tokens it is the decode iteration; with no decoding requests, the
        prefill stage. With both: under ``mixed_factor`` f, ``f * prefill_time(chunk_tokens +
        decoding) + c_d * context`` (SplitwiseSim's rule: the pass is priced as a prompt of
        all its tokens, a decoding request counting one); without, the library's fused rule,
        the decode iteration plus the prefill stage less the fixed cost they share (the
        smaller of ``prefill_time(0)`` and ``decode_iteration_time(0)``, and never more than
        the decode batch's own time), as
        :func:`~llmsched.engines.fusion.iteration.fused_iteration_time` prices the other models.
        """
        if (
            type(decoding) is int
            and type(chunk_tokens) is int
            and type(context) is int
            and min(decoding, chunk_tokens, context) >= 0
        ):  # the simulator's path, once an iteration: plain lookups
            if not chunk_tokens:
                return self._read_decode(decoding) + self.decode_per_context * context
            if not decoding:
                return (
                    self._read_prefill(chunk_tokens)
                    if self.batched_prompt is None and squares <= chunk_tokens * chunk_tokens
                    else (float(self.prefill_time(chunk_tokens, squares)))
                )
            if self.mixed_factor is not None:
                if squares > chunk_tokens * chunk_tokens:
                    prompt = self._chunk(chunk_tokens, squares, decoding)
                elif self.batched_prompt is None:  # the prefill table read directly (_single's first step)
                    at = chunk_tokens + decoding
                    prompt = _read(
                        at, self._prefill_x, self._prefill_y, self._prefill_tail, self.prefill_capacity
                    )
                else:
                    prompt = self._read_prefill(chunk_tokens + decoding)
                return self.mixed_factor * prompt + self.decode_per_context * context
        if np.ndim(decoding) == 0 and np.ndim(chunk_tokens) == 0:
            if chunk_tokens == 0:
                return float(self.decode_iteration_time(decoding, context))
            if decoding == 0:
                return float(self.prefill_time(chunk_tokens, squares))
            return float(self._both(decoding, context, chunk_tokens, squares))
        decode = self.decode_iteration_time(decoding, context)
        prefill = self.prefill_time(chunk_tokens, squares)
        both = self._both(decoding, context, chunk_tokens, squares)
        d, c = np.asarray(decoding), np.asarray(chunk_tokens)
        return np.where(c == 0, decode, np.where(d == 0, prefill, both)).astype(np.float64)

    def _read_prefill(self, tokens: int) -> float:
        return float(self._single(tokens))

    def _read_decode(self, active: int) -> float:
        return float(_read(active, self._decode_x, self._decode_y, self._decode_tail, self.max_batch))

    def _both(self, decoding: Any, context: Any, chunk_tokens: Any, squares: Any) -> Any:
        """A mixed iteration's time when it holds both decoding requests and prompt tokens."""
        if self.mixed_factor is not None:
            chunk, extra = sizes("chunk_tokens", chunk_tokens), sizes("decoding", decoding)
            c, x, q = np.broadcast_arrays(
                np.asarray(chunk, dtype=np.float64),
                np.asarray(extra, dtype=np.float64),
                np.asarray(sizes("squares", squares), dtype=np.float64),
            )
            prompt = np.asarray(self.prefill_time(np.add(chunk, extra)), dtype=np.float64)
            prompt = np.array(
                [
                    self._chunk(a, b, d) if b > a * a > 0 else p
                    for a, b, d, p in zip(
                        c.ravel(), q.ravel(), x.ravel(), np.broadcast_to(prompt, c.shape).ravel(), strict=True
                    )
                ]
            ).reshape(c.shape)
            out = self.mixed_factor * prompt + self.decode_per_context * np.asarray(sizes("context", context))
            return float(out) if np.ndim(out) == 0 else out
        fixed = min(self._prefill_y[0], self._decode_y[0])
        decode = self.decode_iteration_time(decoding, context)
        shared = np.minimum(fixed, self.decode_iteration_time(decoding))
        return decode + self.prefill_time(chunk_tokens, squares) - shared

    # ------------------------------------------------------------ bounds
    def prefill_hull(self) -> list[tuple[float, float]]:
        """Lines ``(alpha, beta)``, ``beta >= 0``, with ``alpha + beta * t`` at most
        ``prefill_time(t)`` for every ``t`` from 0 to ``prefill_capacity``: one per edge of
        the lower convex hull of the prefill table over that range, and the flat line at its
        least time. Any of them bounds a stage of any tokens, and so any sum of stages."""
        return _lines_below(self._prefill_vertices())

    def batch_hull(self) -> list[tuple[float, float]]:
        """Lines ``(alpha, beta)``, ``beta >= 0``, with ``alpha + beta * k`` at most the
        context-free decode time at every batch size ``k >= 1`` (past ``max_batch`` the time
        is ``inf``): one per edge of the lower convex hull of the decode table from 1 to
        ``max_batch``, slopes clipped at 0, and the flat line at its least time. The contract
        of :meth:`llmsched.ContextCostModel.batch_hull`: no slope is negative, so a line also
        bounds an iteration by any part of its batch."""
        return _lines_below(_vertices(self._decode_x, self._decode_y, self._decode_tail, 1, self.max_batch))

    def _prefill_vertices(self) -> list[tuple[float, float]]:
        """The corners of the prefill table from 0 to ``prefill_capacity``, and of the batched
        table where there is one, in order of tokens: a stage takes at least the lesser of the
        two tables at its tokens, so a line below every corner is below every stage."""
        capacity = self.prefill_capacity
        limit = self._longest
        if self.batched_prompt is None or capacity <= limit:
            corners = _vertices(self._prefill_x, self._prefill_y, self._prefill_tail, 0, capacity)
        else:  # the prefill table up to twice its last knot, then the batched table's shape
            corners = _vertices(self._prefill_x, self._prefill_y, self._prefill_tail, 0, int(limit))
            inner = [x for x in self._batched_x if limit < x < capacity]
            corners += [(x, float(self._single(x))) for x in [*inner, float(capacity)]]
        if self.batched_prompt is not None:
            corners += _vertices(self._batched_x, self._batched_y, self._batched_tail, 0, capacity)
        least: dict[float, float] = {}
        for x, y in corners:
            least[x] = min(y, least.get(x, y))
        return sorted(least.items())

    def min_prefill_time(self, total_tokens: int, stages: int = 0, squares: int = 0) -> float:
        """Least total prefill time of ``total_tokens`` prompt tokens in at least ``stages``
        stages (and at least ``ceil(total / capacity)``); ``squares`` is checked and unused.

        Let ``h`` be the lower convex hull of the prefill table over ``[0, capacity]``
        (:meth:`prefill_hull`: ``h(t) <= prefill_time(t)``). ``s`` stages of ``t_i`` tokens
        (``sum t_i = T``) take at least ``sum h(t_i) >= s * h(T / s)`` (Jensen), where ``s`` is
        at least the stages asked and ``ceil(T / capacity)``, and at most ``T`` (a stage holds
        a token at least). ``s * h(T / s)`` is convex in ``s`` (the perspective of a convex
        function) and linear between the points ``s = T / x`` at the hull's corners ``x``, so
        its least value over whole ``s`` is at the ends of the range or next to one of those
        points: every such candidate is tried, and the least returned.
        """
        total = nonnegative_int("total_tokens", total_tokens)
        asked = nonnegative_int("stages", stages)
        nonnegative_int("squares", squares)
        if total == 0:
            return 0.0
        least = max(asked, -(-total // self.prefill_capacity))
        most = max(least, total)
        vertices = self._prefill_vertices()
        lines = _lines_below(vertices)
        candidates = {least, most}
        for x, _ in lower_hull([x for x, _ in vertices], [y for _, y in vertices]):
            if x > 0:
                candidates |= {math.floor(total / x), math.ceil(total / x)}
        # h(T / s) is the largest of the hull's lines at T / s, so s h(T / s) is their largest
        # alpha s + beta T.
        least_time = min(
            max(alpha * s + beta * total for alpha, beta in lines) for s in candidates if least <= s <= most
        )
        return max(0.0, least_time)

    def min_decode_time(self, total_tokens: int, iterations: int, context: int = 0) -> float:
        """Least total decode time of ``total_tokens`` output tokens over at least
        ``iterations`` iterations, the requests reading ``context`` tokens in all.

        The argument of :meth:`llmsched.ContextCostModel.min_decode_time` with a batch table:
        for any line ``alpha + beta * k`` of :meth:`batch_hull`, ``n`` iterations producing
        ``k_i >= 1`` of these tokens each take at least ``n * alpha + beta * total_tokens``,
        with ``iterations <= n <= total_tokens``; the context terms add up to
        ``c_d * context`` whatever the schedule. The best line is returned.
        """
        total = nonnegative_int("total_tokens", total_tokens)
        iterations = nonnegative_int("iterations", iterations)
        reading = self.decode_per_context * nonnegative_int("context", context)
        if total == 0:
            return 0.0
        best = max(
            (iterations if alpha >= 0 else total) * alpha + beta * total for alpha, beta in self.batch_hull()
        )
        return max(0.0, best) + reading

    # ------------------------------------------------------------ variants
    def scaled(self, speed: float) -> TableCostModel:
        """This table on a machine ``speed`` times as fast: every time divided by it."""
        speed = real("speed", speed, low=0.0, low_open=True)
        return TableCostModel(
            self.prefill_tokens,
            [t / speed for t in self.prefill_times],
            self.decode_batch,
            [t / speed for t in self.decode_times],
            self.decode_per_context / speed,
            self.prefill_capacity,
            self.max_batch,
            self.mixed_factor,
            self.name,
            self.batched_prompt,
            self.batched_tokens,
            [t / speed for t in self.batched_times],
        )

    # ------------------------------------------------------------ fitting
    @classmethod
    def fit(
        cls,
        data: Any,
        columns: Mapping[str, str | None] | None = None,
        time_unit: str = "ms",
        *,
        prefill_capacity: int | None = None,
        max_batch: int | None = None,
        mixed_factor: float | None = None,
        name: str = "",
        prompt_count: bool | None = None,
    ) -> TableCostModel:
        """A table fitted to measurements, one row per measured run.

        Parameters
        ----------
        data
            A CSV file (its path) with a header row, a pandas DataFrame, or a mapping of
            column names to arrays.
        columns
            Which column holds what, by role (missing roles take :data:`COLUMNS`, SplitwiseSim's
            names): ``prompt`` (tokens of each prompt), ``batch`` (prompts in the batch),
            ``output`` (output tokens of each request; None when not measured), ``prefill_time``
            (the batch's prompt phase) and ``decode_time`` (one decode iteration of the batch,
            averaged over the output).
        time_unit
            The unit of both time columns: ``"s"``, ``"ms"`` or ``"us"``.
        prefill_capacity, max_batch, mixed_factor, name
            As the class takes them.
        prompt_count
            Whether prefill is keyed by the prompt count as well as the tokens: True fits a
            batched table beside the prefill table (the measurements must batch prompts of
            one length), False keys by tokens alone (SplitwiseSim's rule), None (the default)
            does the first where the measurements allow it and the second otherwise.

        Notes
        -----
        Prefill by tokens alone (SplitwiseSim's rule): a row's key is its batch's tokens,
        prompt tokens times batch size; a knot is the median time of the rows of one key. The
        medians are then made non-decreasing by isotonic regression (pool adjacent violators,
        each weighted by its rows): a stage of more tokens is never faster, and measurement
        noise between two near keys could say otherwise.

        The prompt count matters in some measurements: in SplitwiseSim's, 512-token prompts
        batched to 1,024-8,192 tokens take 1-15 % less time than one prompt of as many tokens
        on H100 (Llama-2-70B and BLOOM-176B), but 7-42 % more for Llama-2-70B on A100; the
        median of a key shared by both lies between them (``benchmarks/perf_table.py`` shows
        what that costs). Keyed by the prompt count, the rows of batch 1 make the prefill
        table (by prompt tokens) and the rows of the one prompt length measured in larger
        batches make the batched table (by the batch's tokens), each as above; a stage between
        the two lines is read between them (:meth:`prefill_time`). Measurements that batch
        prompts of several lengths, or none, are keyed by tokens alone (an error when
        ``prompt_count`` is True).

        Decode: a row's context is the tokens its batch holds on average over the output,
        ``batch * (prompt + output / 2)`` (``batch * prompt`` without an output column).
        ``c_d`` is the least-squares slope of time over context within each batch size (the
        rows of one size differ only in context, so the slope is not confounded with the
        batch), clipped at 0; 0 when no batch size was measured at two contexts. A knot is
        then the median of ``time - c_d * context`` over the rows of its batch size.

        Raises
        ------
        TypeError, ValueError
            A column missing or holding other than finite numbers (sizes whole and >= 1,
            times > 0), an unknown role or time unit, a file that cannot be read as CSV, or
            a fitted table the class refuses (a decode knot <= 0 once the context is taken off).
        """
        rows = _measurements(data, columns, time_unit)
        by_count = _batched_length(rows, prompt_count)
        return cls._fit_rows(rows, prefill_capacity, max_batch, mixed_factor, name, by_count)

    @classmethod
    def _fit_rows(
        cls,
        rows: dict[str, np.ndarray],
        prefill_capacity: int | None,
        max_batch: int | None,
        mixed_factor: float | None,
        name: str,
        batched_prompt: int | None = None,
    ) -> TableCostModel:
        keys = rows["prompt"] * rows["batch"]
        prefill = rows["prefill_time"]
        batched: tuple[list[int], list[float]] = ([], [])
        if batched_prompt is not None:
            single = rows["batch"] == 1
            keys, prefill = rows["prompt"][single], prefill[single]
            at_length = rows["prompt"] == batched_prompt
            b_knots, b_median, b_count = medians(
                rows["batch"][at_length] * batched_prompt, rows["prefill_time"][at_length]
            )
            batched = (b_knots.tolist(), _isotonic(b_median, b_count).tolist())
        p_knots, p_median, p_count = medians(keys, prefill)
        p_times = _isotonic(p_median, p_count)
        batch, context, times = rows["batch"], rows["context"], rows["decode_time"]
        per_context = _within_slope(batch, context, times)
        d_knots, d_times, _ = medians(batch, times - per_context * context)
        if np.any(d_times <= 0):
            bad = int(d_knots[int(np.argmax(d_times <= 0))])
            raise ValueError(
                f"decode_time: the fitted context term (c_d = {per_context:.3g} s per token) exceeds the "
                f"measured time at batch size {bad}; the context cannot explain these times"
            )
        return cls(
            p_knots.tolist(),
            p_times.tolist(),
            d_knots.tolist(),
            d_times.tolist(),
            per_context,
            prefill_capacity,
            max_batch,
            mixed_factor,
            name,
            batched_prompt,
            *batched,
        )

    @classmethod
    def held_out_error(
        cls,
        data: Any,
        columns: Mapping[str, str | None] | None = None,
        time_unit: str = "ms",
        *,
        holdout: float = 0.2,
        seed: int = 0,
        mixed_factor: float | None = None,
        name: str = "",
        prompt_count: bool | None = None,
    ) -> HeldOutError:
        """How well :meth:`fit` predicts rows it did not see.

        The rows are split at random (``seed``): ``holdout`` of them (rounded, at least one,
        and at least one left to fit) are held out, the rest fitted; the fitted table then
        predicts each held-out row's prefill time (at its batch's tokens) and decode time (at
        its batch size and mean context). The table may be read up to the held-out rows'
        sizes (within its extrapolation limit): the sizes are the question, not the answer.

        Returns
        -------
        HeldOutError
            The mean absolute percentage errors (as fractions) and the table fitted.

        Raises
        ------
        TypeError, ValueError
            As :meth:`fit`, a ``holdout`` outside (0, 1), fewer than two rows, or a bad ``seed``.
        """
        rows = _measurements(data, columns, time_unit)
        train, test = split_rows(rows["batch"].size, holdout, seed)
        fitted = {key: values[train] for key, values in rows.items()}
        keys = rows["prompt"] * rows["batch"]
        squares = rows["batch"] * rows["prompt"] ** 2
        by_count = _batched_length(rows, prompt_count)
        if by_count is not None and not (
            np.any(fitted["batch"] == 1) and np.any((fitted["prompt"] == by_count) & (fitted["batch"] > 1))
        ):
            by_count = None  # the fitted rows hold no single prompt, or no batch: by tokens alone
        train_keys = keys[train]
        # Cover the held-out sizes where the extrapolation limit allows it.
        capacity = int(min(max(keys.max(), train_keys.max()), EXTRAPOLATION * train_keys.max()))
        largest = int(min(rows["batch"].max(), EXTRAPOLATION * fitted["batch"].max()))
        model = cls._fit_rows(fitted, capacity, largest, mixed_factor, name, by_count)
        predicted_prefill = np.asarray(model.prefill_time(keys[test], squares[test]), dtype=np.float64)
        predicted_decode = np.asarray(
            model.decode_iteration_time(rows["batch"][test], rows["context"][test]), dtype=np.float64
        )
        return HeldOutError(
            float(np.mean(np.abs(predicted_prefill / rows["prefill_time"][test] - 1))),
            float(np.mean(np.abs(predicted_decode / rows["decode_time"][test] - 1))),
            int(train.size),
            int(test.size),
            model,
        )

    # ------------------------------------------------------------ files
    def as_toml(self) -> str:
        """This table as the text of a TOML file (:meth:`from_toml` reads it back exactly:
        every float is written as Python's shortest repr that round-trips)."""
        lines = [
            "# A cost table of llmsched (llmsched.core.table.TableCostModel); times in seconds.",
            'kind = "table"',
        ]
        if self.name:
            lines.append(f"name = {_toml_string(self.name)}")
        lines += [
            f"decode_per_context = {self.decode_per_context!r}",
            f"prefill_capacity = {self.prefill_capacity}",
            f"max_batch = {self.max_batch}",
        ]
        if self.mixed_factor is not None:
            lines.append(f"mixed_factor = {self.mixed_factor!r}")
        lines += [
            "",
            "[prefill]",
            f"tokens = [{', '.join(map(str, self.prefill_tokens))}]",
            f"seconds = [{', '.join(map(repr, self.prefill_times))}]",
            "",
            "[decode]",
            f"batch = [{', '.join(map(str, self.decode_batch))}]",
            f"seconds = [{', '.join(map(repr, self.decode_times))}]",
            "",
        ]
        if self.batched_prompt is not None:
            lines += [
                "[prefill_batched]",
                f"prompt = {self.batched_prompt}",
                f"tokens = [{', '.join(map(str, self.batched_tokens))}]",
                f"seconds = [{', '.join(map(repr, self.batched_times))}]",
                "",
            ]
        return "\n".join(lines)

    def to_toml(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`as_toml` to ``path``."""
        Path(path_arg("path", path)).write_text(self.as_toml(), encoding="utf-8")

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str]) -> TableCostModel:
        """The table a TOML file written by :meth:`to_toml` holds.

        Raises
        ------
        OSError
            When the file cannot be read.
        ValueError, TypeError
            A file that is not TOML, or a key missing, unknown or refused by the class (the
            message names the file and the key).
        """
        import tomllib

        where = Path(path_arg("path", path))
        try:
            table = tomllib.loads(where.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{where}: not a TOML file: {exc}") from None
        return cls.from_mapping(table, str(where))

    @classmethod
    def from_mapping(cls, table: Mapping[str, Any], source: str = "cost table") -> TableCostModel:
        """The table a mapping holds, laid out as :meth:`as_toml` writes it (``source``
        names it in errors)."""
        if not isinstance(table, Mapping):
            raise TypeError(f"{source}: a cost table must be a table of keys, got {type(table).__name__}")
        top = {"kind", "name", "decode_per_context", "prefill_capacity", "max_batch", "mixed_factor"}
        parts = {"prefill": ("tokens", "seconds"), "decode": ("batch", "seconds")}
        optional = {"prefill_batched": ("prompt", "tokens", "seconds")}
        unknown = sorted(set(table) - top - set(parts) - set(optional))
        if unknown:
            raise ValueError(
                f"{source}: unknown key {unknown[0]!r}; a cost table holds "
                f"{sorted(top | set(parts) | set(optional))}"
            )
        if table.get("kind", "table") != "table":
            raise ValueError(f"{source}: kind must be 'table', got {table.get('kind')!r}")
        arrays: dict[str, Any] = {}
        for part, keys in (parts | optional).items():
            section = table.get(part)
            if part in optional and part not in table:
                arrays |= {f"{part}.{key}": None for key in keys}
                continue
            if not isinstance(section, Mapping):
                raise ValueError(f"{source}: [{part}] is missing; it holds {' and '.join(keys)}")
            extra = sorted(set(section) - set(keys))
            if extra:
                raise ValueError(
                    f"{source}: unknown key {part}.{extra[0]}; [{part}] holds {' and '.join(keys)}"
                )
            for key in keys:
                if key not in section:
                    raise ValueError(f"{source}: {part}.{key} is missing")
                arrays[f"{part}.{key}"] = section[key]
        try:
            return cls(
                arrays["prefill.tokens"],
                arrays["prefill.seconds"],
                arrays["decode.batch"],
                arrays["decode.seconds"],
                table.get("decode_per_context", 0.0),
                table.get("prefill_capacity"),
                table.get("max_batch"),
                table.get("mixed_factor"),
                table.get("name", ""),
                arrays["prefill_batched.prompt"],
                arrays["prefill_batched.tokens"] or (),
                arrays["prefill_batched.seconds"] or (),
            )
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{source}: {exc}") from None


class HeldOutError(NamedTuple):
    """What :meth:`TableCostModel.held_out_error` found: the mean absolute percentage error
    (a fraction) of the prefill and decode times of the held-out rows, the rows fitted and
    held out, and the table fitted."""

    prefill_mape: float
    decode_mape: float
    train_rows: int
    test_rows: int
    model: TableCostModel


def split_rows(count: int, holdout: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The rows fitted and the rows held out (ascending indices) of ``count`` rows, drawn by
    ``seed``: ``holdout`` of them, rounded, at least one and at least one left to fit.

    Raises
    ------
    TypeError, ValueError
        A ``holdout`` outside (0, 1), fewer than two rows, or a bad ``seed``.
    """
    share = probability("holdout", holdout)
    if not 0 < share < 1:
        raise ValueError(f"holdout must lie strictly between 0 and 1, got {holdout!r}")
    count = nonnegative_int("count", count)
    if count < 2:
        raise ValueError(f"a held-out error needs two rows or more (one to fit, one to test), got {count}")
    held = min(count - 1, max(1, round(share * count)))
    order = np.random.default_rng(check_seed("seed", seed)).permutation(count)
    return np.sort(order[held:]), np.sort(order[:held])


# ---------------------------------------------------------------- reading tables
def _tail_slope(xs: tuple[int, ...], ys: tuple[float, ...]) -> float:
    """The slope past the last knot: the last segment's, never below flat (0 with one knot)."""
    if len(xs) < 2:
        return 0.0
    return max(0.0, (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]))


def _read(at: Any, xs: list[float], ys: list[float], tail: float, limit: int) -> Any:
    """A table at ``at`` (a size or an array of sizes): flat before its first knot, on a
    straight line between knots, at ``tail`` per unit past its last, ``inf`` past ``limit``."""
    if type(at) is int or type(at) is float or isinstance(at, numbers.Real):  # the plain types first
        x = float(at)
        if x > limit:
            return math.inf
        if x <= xs[0]:
            return ys[0]
        if x >= xs[-1]:
            return ys[-1] + tail * (x - xs[-1])
        i = bisect_right(xs, x)
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    a = np.asarray(at, dtype=np.float64)
    out = np.interp(a, xs, ys)
    out = np.where(a > xs[-1], ys[-1] + tail * (a - xs[-1]), out)
    out = np.where(a > limit, np.inf, out)
    return float(out) if out.ndim == 0 else out


def _vertices(
    xs: list[float], ys: list[float], tail: float, low: int, high: int
) -> list[tuple[float, float]]:
    """The corners of a table read from ``low`` to ``high``: between them it is linear."""
    first = (float(low), float(_read(low, xs, ys, tail, high)))
    if high <= low:
        return [first]
    inner = [(x, y) for x, y in zip(xs, ys, strict=True) if low < x < high]
    return [first, *inner, (float(high), float(_read(high, xs, ys, tail, high)))]


def _toml_string(value: str) -> str:
    """A TOML basic string."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in escaped) + '"'


# ---------------------------------------------------------------- fitting
def _roles(columns: Mapping[str, str | None] | None) -> dict[str, str | None]:
    if columns is None:
        return dict(COLUMNS)
    if not isinstance(columns, Mapping):
        raise TypeError(f"columns must map roles to column names, got {type(columns).__name__}")
    unknown = sorted(set(columns) - set(COLUMNS))
    if unknown:
        raise ValueError(f"columns: unknown role {unknown[0]!r}; the roles are {list(COLUMNS)}")
    roles: dict[str, str | None] = {**COLUMNS, **columns}
    for role, column in roles.items():
        if column is None and role != "output":
            raise ValueError(f"columns: {role} needs a column (only output may be None)")
        if column is not None and not isinstance(column, str):
            raise TypeError(f"columns: {role} must name a column, got {column!r}")
    return roles


class _MissingColumn(ValueError):
    """A column a CSV file lacks (the caller names its role)."""

    def __init__(self, column: str, header: list[str]):
        super().__init__(f"no column {column!r}; the columns are {header}")
        self.column, self.header = column, header


def _read_csv(path: str | os.PathLike[str], wanted: list[str]) -> dict[str, list[str]]:
    """The ``wanted`` columns of a CSV file with a header row, as text."""
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        missing = [c for c in wanted if c not in header]
        if missing:
            raise _MissingColumn(missing[0], list(header))
        out: dict[str, list[str]] = {c: [] for c in wanted}
        for row in reader:
            for column in wanted:
                out[column].append(row[column])
    return out


def _measurements(
    data: Any, columns: Mapping[str, str | None] | None, time_unit: str
) -> dict[str, np.ndarray]:
    """The rows of ``data`` by role, checked: whole sizes >= 1 (prompt and batch), >= 0
    (output), times in seconds > 0, and each row's mean decode context."""
    roles = _roles(columns)
    unit = TIME_UNITS[choice("time_unit", time_unit, TIME_UNITS)]
    wanted = [c for c in roles.values() if c is not None]
    if isinstance(data, (str, os.PathLike)):
        try:
            table: Any = _read_csv(data, wanted)
        except _MissingColumn as missing:
            role = next(r for r, c in roles.items() if c == missing.column)
            raise ValueError(
                f"{data}: no column {missing.column!r} for the {role} role; its columns are "
                f"{missing.header} (name it: columns={{{role!r}: COLUMN}}, or --columns {role}=COLUMN"
                f"{'; output=None when not measured' if role == 'output' else ''})"
            ) from None
        source = str(data)
    else:
        table, source = data, "data"
        if isinstance(data, bytes) or not hasattr(data, "__getitem__"):
            raise TypeError(
                f"data must be a CSV path, a DataFrame or a mapping of columns, got {type(data).__name__}"
            )
        for name in wanted:
            try:
                present = name in table
            except TypeError:
                present = False
            if not present:
                role = next(r for r, c in roles.items() if c == name)
                raise ValueError(
                    f"data has no column {name!r} for the {role} role (name it: columns={{{role!r}: "
                    f"COLUMN}}, or --columns {role}=COLUMN; the roles read {dict(roles)})"
                )
    rows: dict[str, np.ndarray] = {}
    for role, column in roles.items():
        if column is None:
            continue
        try:
            values = np.asarray(table[column], dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"{source}: column {column!r} ({role}) must hold numbers") from None
        label = f"{source}: column {column!r} ({role})"
        if role in ("prefill_time", "decode_time"):
            rows[role] = real_array(label, values, low=0.0, low_open=True) * unit
        else:
            low = 0.0 if role == "output" else 1.0
            checked = real_array(label, values, low=low)
            if np.any(checked != np.round(checked)):
                raise ValueError(f"{label} must hold whole numbers")
            rows[role] = checked.astype(np.int64)
    if rows["prompt"].size == 0:
        raise ValueError(f"{source} holds no rows")
    output = rows.get("output")
    half = 0.0 if output is None else output / 2.0
    rows["context"] = rows["batch"] * (rows["prompt"] + half)
    return rows


def _batched_length(rows: dict[str, np.ndarray], prompt_count: bool | None) -> int | None:
    """The one prompt length measured in batches of more than one prompt, when the prefill is
    keyed by the prompt count (``prompt_count``, see :meth:`TableCostModel.fit`); else None."""
    if prompt_count is not None and not isinstance(prompt_count, (bool, np.bool_)):
        raise TypeError(f"prompt_count must be True, False or None, got {prompt_count!r}")
    if prompt_count is False:
        return None
    lengths = np.unique(rows["prompt"][rows["batch"] > 1])
    if lengths.size == 1 and np.any(rows["batch"] == 1):
        return int(lengths[0])
    if prompt_count:
        why = (
            "no row batches more than one prompt"
            if lengths.size == 0
            else "no row holds a single prompt"
            if lengths.size == 1
            else f"rows batch prompts of {lengths.size} lengths ({', '.join(map(str, lengths[:4].tolist()))})"
        )
        raise ValueError(
            f"prompt_count=True needs rows of single prompts and batches of one prompt length; {why}"
        )
    return None


def medians(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct ``keys`` (ascending), the median of ``values`` at each and its count."""
    unique, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    medians = np.array([np.median(values[inverse == k]) for k in range(unique.size)])
    return unique, medians, counts


def _isotonic(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The non-decreasing sequence nearest ``values`` in weighted least squares (pool
    adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, weight, length]
    for value, weight in zip(values.tolist(), weights.tolist(), strict=True):
        blocks.append([value, weight, 1])
        while len(blocks) >= 2 and blocks[-2][0] > blocks[-1][0]:
            (m1, w1, n1), (m2, w2, n2) = blocks[-2], blocks.pop()
            blocks[-1] = [(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, n1 + n2]
    return np.concatenate([np.full(int(n), m) for m, _, n in blocks])


def _within_slope(groups: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> float:
    """The least-squares slope of ``ys`` over ``xs`` within groups (each group's means taken
    off), clipped at 0; 0 when no group has two different ``xs``."""
    _, inverse = np.unique(groups, return_inverse=True)
    count = np.bincount(inverse)
    dx = xs - (np.bincount(inverse, weights=xs) / count)[inverse]
    dy = ys - (np.bincount(inverse, weights=ys) / count)[inverse]
    spread = float(dx @ dx)
    if spread <= 0:
        return 0.0
    return max(0.0, float(dx @ dy) / spread)
