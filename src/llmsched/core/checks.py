"""Argument checks shared across the package.

Each check raises a ``TypeError`` (wrong kind of value) or a ``ValueError`` (right kind, out
of range) whose message names the argument, shows the value and says what is allowed, and
returns the value in the form the caller computes with (a Python ``int`` or ``float``, a
read-only numpy array). numpy scalars are accepted wherever the Python type is.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "MAX_REQUESTS",
    "MAX_TOKENS",
    "choice",
    "flag",
    "instance",
    "jobs",
    "nonnegative_int",
    "path_arg",
    "positive_int",
    "probability",
    "prompt_and_output",
    "real",
    "real_array",
    "rng",
    "seed",
    "sizes",
    "text",
    "token_counts",
]

# Token counts beyond this are refused: far above any context length, and safe from overflow
# when the simulator adds counts to its iteration counter.
MAX_TOKENS = 2**31 - 1

# Generators refuse to draw more requests than this (about 80 MB per int64 array): far beyond
# what the simulator or a solver can use, and short of exhausting memory.
MAX_REQUESTS = 10_000_000


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _show(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"


def positive_int(name: str, value: Any, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` as an int if it is an integer (not a bool) in ``[minimum, maximum]``."""
    if not _is_int(value):
        raise TypeError(f"{name} must be an integer, got {_show(value)}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum:,}, got {value:,}")
    return int(value)


def nonnegative_int(name: str, value: Any, maximum: int | None = None) -> int:
    """``value`` as an int if it is an integer >= 0 (and at most ``maximum``)."""
    return positive_int(name, value, minimum=0, maximum=maximum)


def _interval(low: float | None, high: float | None, low_open: bool, high_open: bool, finite: bool) -> str:
    if low is None and high is None:
        return "a finite number" if finite else "a number (inf allowed)"
    if low is not None and high is not None:
        return f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    if low is not None:
        text = f"a {'finite ' if finite else ''}number {'>' if low_open else '>='} {low:g}"
        return text if finite else f"{text} (inf allowed)"
    assert high is not None
    return f"a finite number {'<' if high_open else '<='} {high:g}"


def real(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    finite: bool = True,
) -> float:
    """``value`` as a float if it is a real number (not a bool) in the given interval.

    NaN is always refused; ``inf`` only when ``finite`` is False and no ``high`` is given.
    """
    allowed = _interval(low, high, low_open, high_open, finite)
    if not _is_real(value):
        raise TypeError(f"{name} must be {allowed}, got {_show(value)}")
    x = float(value)
    bad = (
        x != x
        or (finite and x in (np.inf, -np.inf))
        or x == -np.inf
        or (low is not None and (x < low or (low_open and x == low)))
        or (high is not None and (x > high or (high_open and x == high)))
    )
    if bad:
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    return x


def probability(name: str, value: Any) -> float:
    """``value`` as a float in [0, 1]."""
    return real(name, value, low=0.0, high=1.0)


def time_limit(name: str, value: Any) -> float:
    """A wall-clock limit as a float: a real number of seconds >= 0 (``inf`` for none)."""
    if not _is_real(value) or not float(value) >= 0:
        raise ValueError(f"{name} must be a number of seconds >= 0, got {value!r} (inf for no limit)")
    return float(value)


def jobs(name: str, value: Any) -> int:
    """A joblib worker count as an int: -1 (every core) or a count >= 1.

    joblib reads other negative counts as every core but some (-2: all but one), and runs
    one worker when there are not that many: a count that means something else on every
    machine is refused, as is a count that is not an integer (joblib would run ``"2"``).
    A ValueError either way, as for a time limit.
    """
    if not _is_int(value) or not (value == -1 or value >= 1):
        raise ValueError(f"{name} must be a nonzero integer: -1 (every core) or a count >= 1, got {value!r}")
    return int(value)


def seed(name: str, value: Any) -> int:
    """A seed kept for later draws: an integer >= 0."""
    if not _is_int(value):
        raise TypeError(f"{name} must be an integer >= 0 (a seed), got {_show(value)}")
    if value < 0:
        raise ValueError(f"{name} must be an integer >= 0 (a seed), got {value}")
    return int(value)


def rng(name: str, value: Any) -> np.random.Generator:
    """A generator from a seed (an integer >= 0), a ``numpy.random.Generator``, or None (fresh entropy)."""
    if isinstance(value, np.random.Generator):
        return value
    if value is None:
        return np.random.default_rng()
    if not _is_int(value):
        raise TypeError(f"{name} must be an integer >= 0, a numpy Generator or None, got {_show(value)}")
    if value < 0:
        raise ValueError(f"{name} must be an integer >= 0, a numpy Generator or None, got {value}")
    return np.random.default_rng(int(value))


def choice(name: str, value: Any, choices: Iterable[str]) -> str:
    """``value`` if it is one of ``choices`` (strings)."""
    options = list(choices)
    if not isinstance(value, str) or value not in options:
        raise ValueError(f"{name} must be one of {options}, got {value!r}")
    return value


def flag(name: str, value: Any) -> bool:
    """``value`` as a bool if it is a bool (Python or numpy); "yes" or 1 are not flags."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {_show(value)}")
    return bool(value)


def text(name: str, value: Any) -> str:
    """``value`` if it is a str (a name or a label)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {_show(value)}")
    return value


def instance(name: str, value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    """``value`` if it is an instance of ``kind``; ``what`` says what is allowed ("a Workload")."""
    if not isinstance(value, kind):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__}")
    return value


def path_arg(name: str, value: Any) -> str | os.PathLike[str]:
    """``value`` if it is a file system path (a str or an os.PathLike)."""
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a file path (str or os.PathLike), got {_show(value)}")
    return value


def _first(mask: npt.NDArray[np.bool_]) -> int:
    return int(np.flatnonzero(mask)[0])


def _at(mask: npt.NDArray[np.bool_]) -> tuple[int, ...]:
    """The index of the first True of ``mask``, as a tuple of ints (``[i]`` or ``[i, j]``)."""
    return tuple(int(i) for i in np.unravel_index(_first(mask.ravel()), mask.shape))


def _where(index: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, index)) + "]"


def _real_values(name: str, values: Any, ndim: int) -> tuple[np.ndarray, npt.NDArray[np.float64]]:
    if values is None or isinstance(values, (str, bytes, dict, set)):
        raise TypeError(f"{name} must be an array of numbers, got {type(values).__name__}")
    arr = np.asarray(values)
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-dimensional array, got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iuf":
        raise ValueError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    as_float = arr.astype(np.float64)
    if arr.size and not np.all(np.isfinite(as_float)):
        bad = _at(~np.isfinite(as_float))
        raise ValueError(f"{name}{_where(bad)} is {arr[bad].item()!r}; values must be finite")
    return arr, as_float


def real_array(
    name: str,
    values: Any,
    *,
    low: float | None = None,
    low_open: bool = False,
    ndim: int = 1,
    nonempty: bool = False,
) -> npt.NDArray[np.float64]:
    """``values`` as a float64 array of ``ndim`` dimensions, finite and (optionally) >= or > ``low``."""
    arr, out = _real_values(name, values, ndim)
    if nonempty and out.size == 0:
        raise ValueError(f"{name} is empty; it needs at least one value")
    if low is not None and out.size:
        below = (out <= low) if low_open else (out < low)
        if np.any(below):
            bad = _at(below)
            relation = ">" if low_open else ">="
            raise ValueError(f"{name}{_where(bad)} is {arr[bad].item()!r}; values must be {relation} {low:g}")
    return out


def sizes(name: str, value: Any) -> Any:
    """``value`` if it is a size (a count of tokens, clients, ...) or an array of sizes: finite, >= 0.

    Returned unchanged (a sequence as an array), so results computed from it do not move.
    Cost functions are on the simulator's path, so a plain number is checked without numpy
    (a plain int first of all: what the simulator passes).
    """
    if type(value) is int:
        if value >= 0:
            return value
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if _is_real(value):
        if 0 <= value < np.inf:  # NaN fails both comparisons
            return value
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if isinstance(value, np.ndarray) and value.dtype.kind in "iu":
        if value.size and value.min() < 0:
            raise ValueError(f"{name} must hold numbers >= 0, got {value.min().item()!r} among them")
        return value
    if value is None or isinstance(value, (bool, np.bool_, str, bytes, dict, set)):
        raise TypeError(f"{name} must be a number >= 0 or an array of them, got {_show(value)}")
    arr = np.asarray(value)
    real_array(name, arr, low=0.0, ndim=arr.ndim)
    return arr


def token_counts(name: str, values: Any) -> npt.NDArray[np.int64]:
    """``values`` as a read-only int64 array of whole token counts in ``[1, MAX_TOKENS]``."""
    if values is None or isinstance(values, (str, bytes, dict, set)):
        raise TypeError(f"{name} must be an array of token counts, got {type(values).__name__}")
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a one-dimensional array, got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iuf":
        raise ValueError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    if arr.dtype.kind in "iu":
        if arr.size and (arr.max() > MAX_TOKENS or arr.min() < 1):
            bad = _first((arr > MAX_TOKENS) | (arr < 1))
            raise ValueError(
                f"{name}[{bad}] is {arr[bad].item()!r}; token counts must be in [1, {MAX_TOKENS}]"
            )
        out = arr.astype(np.int64)
        out.setflags(write=False)
        return out
    as_float = arr.astype(np.float64)
    if arr.size and not np.all(np.isfinite(as_float)):
        bad = _first(~np.isfinite(as_float))
        raise ValueError(f"{name}[{bad}] is {arr[bad].item()!r}; token counts must be finite")
    if arr.size and np.any(as_float != np.round(as_float)):
        bad = _first(as_float != np.round(as_float))
        raise ValueError(f"{name}[{bad}] is {arr[bad].item()!r}; token counts must be whole numbers")
    if arr.size and np.any((as_float < 1) | (as_float > MAX_TOKENS)):
        bad = _first((as_float < 1) | (as_float > MAX_TOKENS))
        raise ValueError(f"{name}[{bad}] is {arr[bad].item()!r}; token counts must be in [1, {MAX_TOKENS}]")
    out = as_float.astype(np.int64)
    out.setflags(write=False)
    return out


def prompt_and_output(
    prompt_tokens: Any, output_tokens: Any, each: str
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``prompt_tokens`` and ``output_tokens`` as :func:`token_counts`, one entry each for
    every ``each`` (a request, a training example), which the message of a length mismatch
    names."""
    prompt = token_counts("prompt_tokens", prompt_tokens)
    output = token_counts("output_tokens", output_tokens)
    if prompt.shape != output.shape:
        raise ValueError(
            f"prompt_tokens has {prompt.size} entries but output_tokens has {output.size}; "
            f"every {each} needs both"
        )
    return prompt, output
