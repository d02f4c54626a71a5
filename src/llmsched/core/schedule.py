"""What every schedule offers, whatever its mode: per-request latencies and the figures
computed from them (:class:`RequestTimes`, :func:`latency_figures`, :func:`goodput_figures`),
the stage kinds, and the array helpers the schedule classes share."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from llmsched.core.checks import real
from llmsched.core.metrics import weighted_mean, weighted_percentile
from llmsched.core.workload import Workload

if TYPE_CHECKING:
    pass

__all__ = ["DECODE", "PREFILL", "RequestTimes", "latency_figures", "runs_from_iteration_end"]

PREFILL = 0
DECODE = 1
KIND_NAMES = np.array(["prefill", "decode"])


def frozen_array(name: str, values: Any, dtype: Any) -> np.ndarray:
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


def read_only(arr: np.ndarray) -> np.ndarray:
    arr.setflags(write=False)
    return arr


# Percentiles reported by Schedule.summary.
QUANTILES = (50, 90, 99)


def percentiles(values: np.ndarray) -> list[float]:
    """numpy's p50, p90 and p99 of ``values`` (zeros for no values)."""
    if not values.size:
        return [0.0] * len(QUANTILES)
    return [float(p) for p in np.percentile(values, QUANTILES)]


def latency_figures(
    ttft: np.ndarray, latency: np.ndarray, gaps: np.ndarray, counts: np.ndarray
) -> dict[str, float]:
    """The serving figures every mode's ``summary`` reports: mean, p50, p90 and p99 of
    ``ttft``, ``latency`` and ``e2e`` (the latency again) over requests, then of the gaps
    between tokens (values with counts) as ``tbt_mean_s`` ... ``tbt_p99_s`` (zeros without)."""
    out: dict[str, float] = {}
    for name, values in (("ttft", ttft), ("latency", latency), ("e2e", latency)):
        p50, p90, p99 = percentiles(values)
        out[f"{name}_mean_s"] = float(values.mean()) if values.size else 0.0
        out[f"{name}_p50_s"] = p50
        out[f"{name}_p90_s"] = p90
        out[f"{name}_p99_s"] = p99
    if counts.size and counts.sum():
        out["tbt_mean_s"] = weighted_mean(gaps, counts)
        tbt = weighted_percentile(gaps, counts, QUANTILES)
        out["tbt_p50_s"], out["tbt_p90_s"], out["tbt_p99_s"] = (float(p) for p in tbt)
    else:
        out.update({"tbt_mean_s": 0.0, "tbt_p50_s": 0.0, "tbt_p90_s": 0.0, "tbt_p99_s": 0.0})
    return out


def goodput_figures(
    meets: np.ndarray, span: float, slo_ttft: float | None, slo_tbt: float | None
) -> dict[str, Any]:
    """``requests_per_s``, ``goodput_rps`` (requests meeting the targets per second of
    ``span``), ``slo_attainment`` (their share) and the targets ``slo_ttft_s``, ``slo_tbt_s``
    (None when not given), for a summary whose requests meet the targets as ``meets`` says."""
    n = int(meets.size)
    good = int(np.count_nonzero(meets))
    return {
        "requests_per_s": n / span if span > 0 else 0.0,
        "goodput_rps": good / span if span > 0 else 0.0,
        "slo_attainment": good / n if n else 0.0,
        "slo_ttft_s": None if slo_ttft is None else slo_target("slo_ttft", slo_ttft),
        "slo_tbt_s": None if slo_tbt is None else slo_target("slo_tbt", slo_tbt),
    }


def slo_target(name: str, value: Any) -> float | None:
    """A latency target in seconds: None (every request meets it), or a number > 0 (inf allowed)."""
    if value is None:
        return None
    return real(name, value, low=0.0, low_open=True, finite=False)


def sum_of_min(sorted_values: np.ndarray, prefix: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``sum(min(t, x) for x in sorted_values)`` for each ``t``, from the prefix sums of the values."""
    below = np.searchsorted(sorted_values, t, side="left")
    return prefix[below] + t * (sorted_values.size - below)


def run_holding(run_first: np.ndarray, run_len: np.ndarray, iterations: np.ndarray) -> np.ndarray:
    """The run holding each of ``iterations``, all in ``0..total`` for ``total`` the runs'
    iterations (``total`` itself, one past the last iteration, gives the last run).

    A binary search among the runs; but where the iterations are few next to the runs and
    the lookups, a table of every iteration's run takes no more memory than the lookups
    themselves and is several times faster than searching with unsorted keys.
    """
    total = int(run_len.sum())
    if run_len.size and total <= 4 * (run_len.size + iterations.size):
        table = np.repeat(np.arange(run_len.size), run_len)
        return np.append(table, run_len.size - 1)[iterations]
    return np.searchsorted(run_first, iterations, side="right") - 1


def context_at(
    decode_start: np.ndarray, decode_end: np.ndarray, prompt: np.ndarray, iterations: np.ndarray
) -> np.ndarray:
    """Context tokens of the requests decoding in each global iteration ``g``: the sum of
    ``prompt + g - decode_start`` over requests with ``decode_start <= g < decode_end``.

    Written ``S(g) + A(g) * g`` with ``A`` the requests decoding and ``S`` the sum of their
    ``prompt - decode_start``: two prefix sums over the requests sorted by start and by end.
    Ranges that are empty or negative count for nothing.
    """
    ok = (decode_start >= 0) & (decode_end > decode_start)
    lo, hi = decode_start[ok], decode_end[ok]
    weight = prompt[ok].astype(np.int64) - lo
    by_lo, by_hi = np.argsort(lo, kind="stable"), np.argsort(hi, kind="stable")
    opened = np.concatenate([[0], np.cumsum(weight[by_lo])])
    closed = np.concatenate([[0], np.cumsum(weight[by_hi])])
    i = np.searchsorted(lo[by_lo], iterations, side="right")
    j = np.searchsorted(hi[by_hi], iterations, side="right")
    return (opened[i] - closed[j] + (i - j) * iterations).astype(np.int64)


def runs_from_iteration_end(
    stage_kind: Any, stage_start: Any, stage_first_iteration: Any, stage_iterations: Any, iteration_end: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Decode runs of one iteration each from the end time of every decode iteration.

    An iteration starts when the one before it ended, or at its decode stage's start when
    it is the stage's first.

    Returns
    -------
    run_start, run_iterations, run_iteration_time
        One entry per iteration: its start, 1, and its duration.
    """
    ends = np.asarray(iteration_end, dtype=np.float64)
    starts = np.empty_like(ends)
    if ends.size:
        starts[1:] = ends[:-1]
        kind = np.asarray(stage_kind)
        counts = np.asarray(stage_iterations)
        first = np.asarray(stage_first_iteration)
        opens = np.flatnonzero((kind == DECODE) & (counts > 0))
        # Stage arrays may be malformed (the validator reports that); skip what points nowhere.
        opens = opens[(first[opens] >= 0) & (first[opens] < ends.size)]
        starts[first[opens]] = np.asarray(stage_start, dtype=np.float64)[opens]
    return starts, np.ones(ends.size, dtype=np.int64), ends - starts


class RequestTimes:
    """Per-request latencies of any mode's schedule, from its ``workload``, ``prefill_end``
    (each request's first token) and ``finish`` (its last)."""

    workload: Workload

    if TYPE_CHECKING:  # each schedule class computes them its own way

        @property
        def prefill_end(self) -> np.ndarray: ...

        @property
        def finish(self) -> np.ndarray: ...

    @cached_property
    def ttft(self) -> np.ndarray:
        """Time to first token of each request: end of its prefill minus its arrival."""
        return read_only(self.prefill_end - self.workload.arrival)

    @cached_property
    def latency(self) -> np.ndarray:
        """End-to-end latency of each request: its finish minus its arrival."""
        return read_only(self.finish - self.workload.arrival)

    @cached_property
    def e2e(self) -> np.ndarray:
        """End-to-end latency of each request (the same array as :attr:`latency`)."""
        return self.latency

    @cached_property
    def normalized_latency(self) -> np.ndarray:
        """End-to-end latency of each request over its output tokens (seconds per token)."""
        return read_only(self.latency / self.workload.output_tokens)
