"""The set of requests to schedule.

A :class:`Workload` is immutable: its arrays are read-only copies, and changes go
through :meth:`Workload.replace`, which returns a new, re-validated workload.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

__all__ = ["Workload"]


# Token counts beyond this are refused: far above any context length, and safe from overflow
# when the simulator adds counts to its iteration counter.
MAX_TOKENS = 2**31 - 1


def _as_int_array(name: str, values: Any) -> IntArray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a one-dimensional array, got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iuf":
        raise ValueError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    if arr.dtype.kind in "iu":
        if arr.size and (arr.max() > MAX_TOKENS or arr.min() < 1):
            bad = int(np.flatnonzero((arr > MAX_TOKENS) | (arr < 1))[0])
            raise ValueError(
                f"{name}[{bad}] is {arr[bad].item()!r}; token counts must be in [1, {MAX_TOKENS}]"
            )
        out = arr.astype(np.int64)
        out.setflags(write=False)
        return out
    as_float = arr.astype(np.float64)
    if arr.size and not np.all(np.isfinite(as_float)):
        bad = int(np.flatnonzero(~np.isfinite(as_float))[0])
        raise ValueError(f"{name}[{bad}] is {arr[bad].item()!r}; token counts must be finite")
    if arr.size and np.any(as_float != np.round(as_float)):
        bad = int(np.flatnonzero(as_float != np.round(as_float))[0])
        raise ValueError(f"{name}[{bad}] is {arr[bad].item()!r}; token counts must be whole numbers")
    if arr.size and np.any((as_float < 1) | (as_float > MAX_TOKENS)):
        bad = int(np.flatnonzero((as_float < 1) | (as_float > MAX_TOKENS))[0])
        raise ValueError(f"{name}[{bad}] is {arr[bad].item()!r}; token counts must be in [1, {MAX_TOKENS}]")
    out = as_float.astype(np.int64)
    out.setflags(write=False)
    return out


def _as_arrival_array(values: Any, n: int) -> FloatArray:
    if values is None:
        out = np.zeros(n, dtype=np.float64)
    else:
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
        prompt = _as_int_array("prompt_tokens", prompt_tokens)
        output = _as_int_array("output_tokens", output_tokens)
        if prompt.shape != output.shape:
            raise ValueError(
                f"prompt_tokens has {prompt.size} entries but output_tokens has {output.size}; "
                "every request needs both"
            )
        predicted = None
        if predicted_output is not None:
            predicted = _as_int_array("predicted_output", predicted_output)
            if predicted.shape != prompt.shape:
                raise ValueError(
                    f"predicted_output has {predicted.size} entries but the workload has "
                    f"{prompt.size} requests"
                )
        times = _as_arrival_array(arrival, prompt.size)
        if times.shape != prompt.shape:
            raise ValueError(f"arrival has {times.size} entries but the workload has {prompt.size} requests")
        object.__setattr__(self, "prompt_tokens", prompt)
        object.__setattr__(self, "output_tokens", output)
        object.__setattr__(self, "predicted_output", predicted)
        object.__setattr__(self, "arrival", times)
        object.__setattr__(self, "name", str(name))

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
        """The requests selected by ``index`` (a slice, mask or index array), in that order."""
        idx = np.arange(len(self))[index]
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
