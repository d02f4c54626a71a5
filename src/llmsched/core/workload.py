"""The set of requests to schedule.

A :class:`Workload` is immutable: its arrays are read-only copies, and changes go
through :meth:`Workload.replace`, which returns a new, re-validated workload.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from llmsched.core.checks import MAX_TOKENS, prompt_and_output, text, token_counts

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

__all__ = ["MAX_TOKENS", "Workload"]


def _as_arrival_array(values: Any, n: int) -> FloatArray:
    if values is None:
        out = np.zeros(n, dtype=np.float64)
    else:
        if isinstance(values, (str, bytes, dict, set)):
            raise TypeError(f"arrival must be an array of seconds, got {type(values).__name__}")
        raw = np.asarray(values)
        if raw.size and raw.dtype.kind not in "iuf":
            raise ValueError(f"arrival must hold real numbers of seconds, got dtype {raw.dtype}")
        out = np.array(raw, dtype=np.float64)
        if out.ndim != 1:
            raise ValueError(f"arrival must be a one-dimensional array, got shape {out.shape}")
        if out.size and not np.all(np.isfinite(out)):
            bad = int(np.flatnonzero(~np.isfinite(out))[0])
            raise ValueError(f"arrival[{bad}] is {out[bad].item()!r}; arrival times must be finite")
        if out.size and np.any(out < 0):
            bad = int(np.flatnonzero(out < 0)[0])
            raise ValueError(f"arrival[{bad}] is {out[bad].item()!r}; arrival times must be >= 0 seconds")
    out.setflags(write=False)
    return out


def _request_index(index: Any, n: int) -> Any:
    """``index`` if it selects requests of a workload of ``n``: a slice, a mask or index array."""
    if isinstance(index, slice):
        return index
    allowed = "a slice, a boolean mask or an array of request indices"
    if isinstance(index, (str, bytes, dict, set)) or index is None:
        raise TypeError(f"index must be {allowed}, got {type(index).__name__}")
    arr = np.asarray(index)
    if arr.ndim != 1:
        raise ValueError(f"index must be {allowed} (one-dimensional), got shape {arr.shape}")
    if arr.dtype.kind == "b":
        if arr.size != n:
            raise ValueError(f"index is a mask of {arr.size} entries; the workload has {n} requests")
        return arr
    if arr.size and arr.dtype.kind not in "iu":
        raise TypeError(f"index must be {allowed}, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.size and (arr.min() < -n or arr.max() >= n):
        bad = arr[(arr < -n) | (arr >= n)][0]
        raise ValueError(f"index holds {bad}; a workload of {n} requests has indices -{n} to {n - 1}")
    return arr


@dataclass(frozen=True, eq=False, init=False)
class Workload:
    """Requests with their prompt and output lengths and arrival times.

    Parameters
    ----------
    prompt_tokens
        Prompt length of each request (N^p_i >= 1).
    output_tokens
        True output length of each request (N^d_i >= 1), revealed only by running it.
    predicted_output
        Optional predicted output length, the only length a scheduler may look at.
    arrival
        Arrival time of each request in seconds (>= 0); all zero (the default) for an
        offline batch.
    name
        A label used in reports.

    Raises
    ------
    ValueError
        If an array is not one-dimensional, holds a non-finite, fractional or
        non-positive token count or a negative arrival, or the arrays differ in length.
    TypeError
        If an array is not an array of numbers, or ``name`` is not a str.
    """

    prompt_tokens: IntArray
    output_tokens: IntArray
    predicted_output: IntArray | None
    arrival: FloatArray
    name: str

    def __init__(
        self,
        prompt_tokens: npt.ArrayLike,
        output_tokens: npt.ArrayLike,
        predicted_output: npt.ArrayLike | None = None,
        arrival: npt.ArrayLike | None = None,
        name: str = "workload",
    ) -> None:
        prompt, output = prompt_and_output(prompt_tokens, output_tokens, "request")
        predicted = None
        if predicted_output is not None:
            predicted = token_counts("predicted_output", predicted_output)
            if predicted.shape != prompt.shape:
                raise ValueError(
                    f"predicted_output has {predicted.size} entries but the workload has "
                    f"{prompt.size} requests"
                )
        text("name", name)
        times = _as_arrival_array(arrival, prompt.size)
        if times.shape != prompt.shape:
            raise ValueError(f"arrival has {times.size} entries but the workload has {prompt.size} requests")
        object.__setattr__(self, "prompt_tokens", prompt)
        object.__setattr__(self, "output_tokens", output)
        object.__setattr__(self, "predicted_output", predicted)
        object.__setattr__(self, "arrival", times)
        object.__setattr__(self, "name", name)

    def __len__(self) -> int:
        return int(self.prompt_tokens.size)

    def __repr__(self) -> str:
        n = len(self)
        if n == 0:
            return f"Workload(name={self.name!r}, requests=0)"
        return (
            f"Workload(name={self.name!r}, requests={n}, "
            f"prompt mean={self.prompt_tokens.mean():.2f}, "
            f"output mean={self.output_tokens.mean():.2f}, "
            f"online={bool(self.arrival.any())})"
        )

    @property
    def total_prompt_tokens(self) -> int:
        return int(self.prompt_tokens.sum())

    @property
    def total_output_tokens(self) -> int:
        return int(self.output_tokens.sum())

    @property
    def is_offline(self) -> bool:
        """True when every request is present at time 0."""
        return not bool(self.arrival.any())

    def replace(self, **changes: Any) -> Workload:
        """Return a new workload with some fields replaced (and validated again)."""
        fields: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "predicted_output": self.predicted_output,
            "arrival": self.arrival,
            "name": self.name,
        }
        unknown = set(changes) - set(fields)
        if unknown:
            raise ValueError(f"unknown Workload field(s) {sorted(unknown)}; allowed: {sorted(fields)}")
        fields.update(changes)
        return Workload(**fields)

    def subset(self, index: Any) -> Workload:
        """The requests selected by ``index`` (a slice, mask or index array), in that order.

        Raises
        ------
        TypeError
            If ``index`` is neither a slice nor an array of integers or booleans.
        ValueError
            If ``index`` is not one-dimensional, a mask of another length, or out of range.
        """
        idx = np.arange(len(self))[_request_index(index, len(self))]
        return Workload(
            prompt_tokens=self.prompt_tokens[idx],
            output_tokens=self.output_tokens[idx],
            predicted_output=None if self.predicted_output is None else self.predicted_output[idx],
            arrival=self.arrival[idx],
            name=self.name,
        )

    def to_frame(self) -> Any:
        """One row per request: ``prompt_tokens``, ``output_tokens``, ``predicted_output``, ``arrival``."""
        import pandas as pd

        data: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
        }
        if self.predicted_output is not None:
            data["predicted_output"] = self.predicted_output
        data["arrival"] = self.arrival
        return pd.DataFrame(data).rename_axis("request")
