"""A schedule: the stages the engine ran, and where and when each request ran in them.

Layout (all numpy arrays, read-only):

* stages, in time order: ``stage_kind`` (``PREFILL`` or ``DECODE``), ``stage_start``,
  ``stage_end``, and for decode stages ``stage_first_iteration`` and ``stage_iterations``:
  the decode iterations of all decode stages are numbered 0, 1, ... in time order, and
  ``iteration_end[g]`` is when iteration ``g`` ended;
* ``makespan``: when the run ended, as its producer reports it (the end of the last
  stage, which the validator checks);
* requests, indexed like the workload: ``request_client``, ``request_prefill_stage``, and
  ``request_decode_start`` / ``request_decode_end``, the half-open range of global decode
  iterations in which the request decoded (one token each).

``llmsched.validate`` checks a schedule against the system model; nothing here assumes it
is valid, but the metrics only mean something for a valid schedule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from llmsched.cost import CostModel
from llmsched.workload import Workload

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["DECODE", "PREFILL", "Schedule"]

PREFILL = 0
DECODE = 1
_KIND_NAMES = np.array(["prefill", "decode"])


def _frozen(name: str, values: Any, dtype: Any) -> np.ndarray:
    raw = np.asarray(values)
    arr = raw.astype(dtype)
    lossy = (
        raw.size
        and raw.dtype.kind in "iufb"
        and not np.array_equal(arr, raw, equal_nan=raw.dtype.kind == "f")
    )
    if lossy:
        raise ValueError(f"Schedule.{name} holds values that are not {np.dtype(dtype).name}")
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, eq=False)
class Schedule:
    """Stages and per-request placement of one run of the engine (see the module docstring)."""

    workload: Workload
    cost: CostModel
    clients: int
    stage_kind: np.ndarray
    stage_start: np.ndarray
    stage_end: np.ndarray
    stage_first_iteration: np.ndarray
    stage_iterations: np.ndarray
    iteration_end: np.ndarray
    request_client: np.ndarray
    request_prefill_stage: np.ndarray
    request_decode_start: np.ndarray
    request_decode_end: np.ndarray
    makespan: float
    measured: bool = False
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, dtype in (
            ("stage_kind", np.int8),
            ("stage_start", np.float64),
            ("stage_end", np.float64),
            ("stage_first_iteration", np.int64),
            ("stage_iterations", np.int64),
            ("iteration_end", np.float64),
            ("request_client", np.int64),
            ("request_prefill_stage", np.int64),
            ("request_decode_start", np.int64),
            ("request_decode_end", np.int64),
        ):
            object.__setattr__(self, name, _frozen(name, getattr(self, name), dtype))
        object.__setattr__(self, "makespan", float(self.makespan))

    # ------------------------------------------------------------------ sizes
    @property
    def num_stages(self) -> int:
        return int(self.stage_kind.size)

    @property
    def num_iterations(self) -> int:
        """Decode iterations over all decode stages."""
        return int(self.iteration_end.size)

    def __repr__(self) -> str:
        return (
            f"Schedule(requests={len(self.workload)}, clients={self.clients}, "
            f"stages={self.num_stages}, makespan={self.makespan:.3f}s, "
            f"utilization={self.utilization:.2%})"
        )

    # ---------------------------------------------------------------- timings
    @cached_property
    def iteration_start(self) -> np.ndarray:
        """Start time of every decode iteration (the previous one's end, or its stage's start)."""
        starts = np.empty_like(self.iteration_end)
        if starts.size:
            starts[1:] = self.iteration_end[:-1]
            decode = np.flatnonzero((self.stage_kind == DECODE) & (self.stage_iterations > 0))
            starts[self.stage_first_iteration[decode]] = self.stage_start[decode]
        return starts

    @cached_property
    def iteration_time(self) -> np.ndarray:
        return self.iteration_end - self.iteration_start

    @cached_property
    def _iteration_time_cumsum(self) -> np.ndarray:
        return np.concatenate([[0.0], np.cumsum(self.iteration_time)])

    @cached_property
    def prefill_end(self) -> np.ndarray:
        """When each request's prefill stage ended."""
        return self.stage_end[self.request_prefill_stage]

    @cached_property
    def finish(self) -> np.ndarray:
        """When each request produced its last token."""
        return self.iteration_end[self.request_decode_end - 1]

    @cached_property
    def ttft(self) -> np.ndarray:
        """Time to first token of each request: end of its prefill minus its arrival."""
        return self.prefill_end - self.workload.arrival

    @cached_property
    def latency(self) -> np.ndarray:
        """End-to-end latency of each request: its finish minus its arrival."""
        return self.finish - self.workload.arrival

    # ---------------------------------------------------------------- metrics
    @cached_property
    def busy_time(self) -> float:
        """Client-seconds spent prefilling or decoding a request."""
        stage_len = self.stage_end - self.stage_start
        prefill = float(stage_len[self.request_prefill_stage].sum())
        c = self._iteration_time_cumsum
        decode = float((c[self.request_decode_end] - c[self.request_decode_start]).sum())
        return prefill + decode

    @property
    def utilization(self) -> float:
        """Busy client-time over ``clients * makespan`` (the coloured share of the Gantt chart)."""
        span = self.makespan
        return self.busy_time / (self.clients * span) if span > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        """Output tokens per second of makespan."""
        span = self.makespan
        return self.workload.total_output_tokens / span if span > 0 else 0.0

    @property
    def prefill_time_total(self) -> float:
        """Seconds the engine spent in prefill stages."""
        mask = self.stage_kind == PREFILL
        return float((self.stage_end[mask] - self.stage_start[mask]).sum())

    @property
    def decode_time_total(self) -> float:
        """Seconds the engine spent in decode stages."""
        mask = self.stage_kind == DECODE
        return float((self.stage_end[mask] - self.stage_start[mask]).sum())

    def summary(self) -> dict[str, float | int]:
        """Headline figures: makespan, utilization, throughput, TTFT and latency percentiles."""
        out: dict[str, float | int] = {
            "requests": len(self.workload),
            "clients": self.clients,
            "makespan_s": self.makespan,
            "utilization": self.utilization,
            "tokens_per_s": self.tokens_per_s,
            "prefill_stages": int(np.count_nonzero(self.stage_kind == PREFILL)),
            "decode_iterations": self.num_iterations,
            "prefill_time_s": self.prefill_time_total,
            "decode_time_s": self.decode_time_total,
        }
        for name, values in (("ttft", self.ttft), ("latency", self.latency)):
            p50, p90, p99 = np.percentile(values, [50, 90, 99]) if values.size else (0, 0, 0)
            out[f"{name}_mean_s"] = float(values.mean()) if values.size else 0.0
            out[f"{name}_p50_s"] = float(p50)
            out[f"{name}_p90_s"] = float(p90)
            out[f"{name}_p99_s"] = float(p99)
        return out

    # ------------------------------------------------------------ dataframes
    def request_frame(self) -> pd.DataFrame:
        """One row per request: client, prefill stage, prefill end, finish, TTFT and latency."""
        import pandas as pd

        frame = self.workload.to_frame()
        frame["client"] = self.request_client
        frame["prefill_stage"] = self.request_prefill_stage
        frame["prefill_end"] = self.prefill_end
        frame["finish"] = self.finish
        frame["ttft"] = self.ttft
        frame["latency"] = self.latency
        return pd.DataFrame(frame)

    def stage_frame(self) -> pd.DataFrame:
        """One row per stage: kind, start, end, duration, prompt tokens or decode iterations."""
        import pandas as pd

        tokens = np.zeros(self.num_stages, dtype=np.int64)
        np.add.at(tokens, self.request_prefill_stage, self.workload.prompt_tokens)
        return pd.DataFrame(
            {
                "kind": _KIND_NAMES[self.stage_kind],
                "start": self.stage_start,
                "end": self.stage_end,
                "duration": self.stage_end - self.stage_start,
                "prompt_tokens": np.where(self.stage_kind == PREFILL, tokens, 0),
                "iterations": self.stage_iterations,
            }
        ).rename_axis("stage")

    def segments(self) -> dict[str, np.ndarray]:
        """Every (stage, client) segment in which a client worked on a request, as arrays.

        Keys: ``stage``, ``kind``, ``request``, ``client``, ``start``, ``end``, ``tokens``
        (prompt tokens for a prefill segment, decoded tokens for a decode segment).
        """
        n = len(self.workload)
        req = np.arange(n)
        decode_stages = np.flatnonzero(self.stage_kind == DECODE)
        firsts = self.stage_first_iteration[decode_stages]
        # Decode stage holding each request's first and last decode iteration.
        lo = np.searchsorted(firsts, self.request_decode_start, side="right") - 1
        hi = np.searchsorted(firsts, self.request_decode_end - 1, side="right") - 1
        counts = np.maximum(hi - lo + 1, 0)
        seg_req = np.repeat(req, counts)
        offsets = np.arange(seg_req.size) - np.repeat(np.cumsum(counts) - counts, counts)
        seg_pos = np.repeat(lo, counts) + offsets
        seg_stage = decode_stages[seg_pos]
        stage_lo = self.stage_first_iteration[seg_stage]
        stage_hi = stage_lo + self.stage_iterations[seg_stage]
        it_lo = np.maximum(stage_lo, self.request_decode_start[seg_req])
        it_hi = np.minimum(stage_hi, self.request_decode_end[seg_req])
        return {
            "stage": np.concatenate([self.request_prefill_stage, seg_stage]),
            "kind": np.concatenate(
                [np.full(n, PREFILL, dtype=np.int8), np.full(seg_req.size, DECODE, dtype=np.int8)]
            ),
            "request": np.concatenate([req, seg_req]),
            "client": np.concatenate([self.request_client, self.request_client[seg_req]]),
            "start": np.concatenate(
                [self.stage_start[self.request_prefill_stage], self.iteration_start[it_lo]]
            ),
            "end": np.concatenate([self.prefill_end, self.iteration_end[it_hi - 1]]),
            "tokens": np.concatenate([self.workload.prompt_tokens, it_hi - it_lo]),
        }

    def to_frame(self) -> pd.DataFrame:
        """One row per stage and client segment, sorted by start time then client.

        Columns: ``stage``, ``kind`` (``prefill``/``decode``), ``request``, ``client``,
        ``start``, ``end``, ``tokens``.
        """
        import pandas as pd

        seg = self.segments()
        frame = pd.DataFrame(
            {
                "stage": seg["stage"],
                "kind": _KIND_NAMES[seg["kind"]],
                "request": seg["request"],
                "client": seg["client"],
                "start": seg["start"],
                "end": seg["end"],
                "tokens": seg["tokens"],
            }
        )
        return frame.sort_values(["start", "client"], kind="stable").reset_index(drop=True)

    def plot(self, **kwargs: Any) -> Figure:
        """Gantt chart of clients over time; see :func:`llmsched.plot.gantt`."""
        from llmsched.plot import gantt

        return gantt(self, **kwargs)
