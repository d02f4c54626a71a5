"""Cost models: how long a prefill stage and a decode iteration take (seconds).

Every cost model offers

* ``prefill_time(tokens)``: time of a prefill stage holding ``tokens`` prompt tokens;
* ``prefill_capacity``: the most prompt tokens one prefill stage may hold;
* ``decode_iteration_time(active)``: time of one decode iteration with ``active`` clients
  decoding (each produces one token);
* ``min_prefill_time(total_tokens, stages)`` and ``min_decode_time(total_tokens, iterations)``:
  lower bounds on the total time any schedule spends in prefill and in decode, used by
  :mod:`llmsched.bounds`.

Both functions of a stage accept scalars or numpy arrays.

:class:`LinearCostModel` is the paper's measured model; :class:`LevelCostModel` has the
semantics of the paper's MIP (prefill levels, constant per-token decode time).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Protocol, runtime_checkable

import numpy as np

from llmsched._checks import instance, nonnegative_int, positive_int, real, real_array, sizes

__all__ = [
    "BoundedCostModel",
    "CostModel",
    "LevelCostModel",
    "LinearCostModel",
    "PrefillLevel",
    "cost_model_error",
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


# More prefill levels than this are refused: the MIP carries a binary per level and stage.
MAX_LEVELS = 10_000


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
) -> dict[str, float]:
    """Mean absolute relative error of a model's stage times against measured ones.

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
    samples = (
        ("prefill_mape", *_samples("prefill_tokens", prefill_tokens, "prefill_times", prefill_times)),
        ("decode_mape", *_samples("decode_active", decode_active, "decode_times", decode_times)),
    )
    errors: dict[str, float] = {}
    worst = 0.0
    for (key, xs, ys), fn in zip(samples, (model.prefill_time, model.decode_iteration_time), strict=True):
        if xs.size == 0:
            errors[key] = float("nan")
            continue
        rel = np.abs(np.asarray(fn(xs), dtype=np.float64) - ys) / ys
        errors[key] = float(rel.mean())
        worst = max(worst, float(rel.max()))
    errors["max_relative_error"] = worst
    return errors
