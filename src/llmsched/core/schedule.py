"""What every schedule offers, whatever its mode: the contract (:class:`ScheduleLike`),
per-request latencies and the figures computed from them (:class:`RequestTimes`,
:func:`latency_figures`, :func:`goodput_figures`), the stage kinds, and the array helpers the
schedule classes share.

Pieces. An engine with KV-cache memory (:mod:`llmsched.core.memory`) may preempt a decoding
request by recompute: it stops, its cache is freed, and when taken again its prompt and the
tokens it has decoded are prefilled anew before it decodes the rest. Such a schedule is built
over *pieces*, one per stretch of a request's work: its ``workload`` is the pieces' and its
``request_parent`` names the user request of each piece (None: every piece is a request of its
own, and nothing below differs from a schedule without pieces). A user request's pieces, in
increasing index, run one after the other; its first piece has its prompt, a later one the
prompt and every token decoded before (recomputed, making no token), and their outputs add up
to its output.

Which arrays are per piece and which per user request:

* per piece, indexed like ``workload``: the placement the mode records (``request_client``,
  ``request_machine``, decode ranges, ...), ``prefill_end``, ``finish`` and
  :attr:`RequestTimes.previous_piece`; ``piece_frame`` (of the engine schedules) has a row per piece;
* per user request, indexed like :attr:`RequestTimes.requests`: ``ttft``, ``latency``, ``e2e``,
  ``normalized_latency``, ``tbt_mean`` (and a mode's ``tbt_max``), ``meets_slo``,
  ``preemptions``, ``recomputed_tokens``, ``first_piece`` and ``last_piece``; ``request_frame``
  and ``summary`` are over user requests, and ``tbt_distribution`` holds each user request's
  gaps, ``output_tokens`` of them whatever its pieces (the first gap of a later piece runs from
  the previous piece's last token to the end of its own first decode iteration).
"""

from __future__ import annotations

import os
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from llmsched.core.checks import real
from llmsched.core.memory import KVMemory
from llmsched.core.metrics import weighted_mean, weighted_percentile
from llmsched.core.workload import Workload

if TYPE_CHECKING:
    import pandas as pd

    from llmsched.core.violations import Violation

__all__ = [
    "DECODE",
    "PREFILL",
    "REQUEST_COLUMNS",
    "STAGE_COLUMNS",
    "SUMMARY_KEYS",
    "EngineSchedule",
    "RequestTimes",
    "ScheduleBase",
    "ScheduleLike",
    "decoding_at",
    "latency_figures",
    "piece_parents",
    "replace_gaps",
    "runs_from_iteration_end",
]

PREFILL = 0
DECODE = 1
KIND_NAMES = np.array(["prefill", "decode"])

#: The keys every mode's ``summary`` holds, each with one meaning in every mode (a mode adds
#: its own: a cluster's pools, a fleet's prices, ...).
SUMMARY_KEYS = (
    "mode",
    "requests",
    "machines",
    "clients",
    "makespan_s",
    "utilization",
    "tokens_per_s",
    "prefill_stages",
    "decode_iterations",
    *(
        f"{name}_{figure}_s"
        for name in ("ttft", "latency", "e2e")
        for figure in ("mean", "p50", "p90", "p99")
    ),
    "tbt_mean_s",
    "tbt_p50_s",
    "tbt_p90_s",
    "tbt_p99_s",
    "normalized_latency_p50_s",
    "normalized_latency_p90_s",
    "normalized_latency_p99_s",
    "requests_per_s",
    "goodput_rps",
    "slo_attainment",
    "slo_ttft_s",
    "slo_tbt_s",
    "rejected",
)

#: The columns every mode's ``request_frame`` holds after the workload's (a mode adds its own).
REQUEST_COLUMNS = (
    "machine",
    "client",
    "prefill_end",
    "finish",
    "ttft",
    "latency",
    "tbt_mean",
    "e2e",
    "normalized_latency",
    "meets_slo",
)

#: The first columns of every mode's ``stage_frame``, in this order (a mode adds its own after).
STAGE_COLUMNS = ("machine", "kind", "start", "end", "duration", "tokens", "requests")


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


def piece_parents(values: Any, pieces: int) -> np.ndarray:
    """A schedule's ``request_parent`` as a read-only int64 array, checked for its shape only:
    one integer per piece, the user requests numbered ``0 to U-1`` with a piece each (so that
    every user-level figure is defined). Whether the pieces agree with the workload and with
    one another (prompts, outputs, time order) is the validator's to say.

    Raises
    ------
    TypeError
        If the values are not integers.
    ValueError
        If they are not one-dimensional, not one per piece, negative, or skip a user request.
    """
    raw = np.asarray(values)
    if raw.size and raw.dtype.kind not in "iu":
        raise TypeError(f"Schedule.request_parent must hold integers, got dtype {raw.dtype}")
    if raw.ndim != 1:
        raise ValueError(f"Schedule.request_parent must be one-dimensional, got shape {raw.shape}")
    if raw.size != pieces:
        raise ValueError(f"Schedule.request_parent has {raw.size} entries for {pieces} pieces")
    parent = raw.astype(np.int64)
    if parent.size and parent.min() < 0:
        raise ValueError(
            f"Schedule.request_parent holds {int(parent.min())}; user requests are numbered from 0"
        )
    # U user requests with a piece each are at most as many as the pieces: a larger index
    # skips one (checked before counting, so that a huge index costs no memory).
    if parent.size and parent.max() >= pieces:
        raise ValueError(
            f"Schedule.request_parent holds {int(parent.max())}, but {pieces} pieces make at most "
            f"{pieces} user requests, numbered 0 .. {pieces - 1}"
        )
    if parent.size:
        missing = np.flatnonzero(np.bincount(parent) == 0)
        if missing.size:
            raise ValueError(
                f"Schedule.request_parent skips user request {int(missing[0])}: every user request "
                f"0 .. {int(parent.max())} needs a piece"
            )
    return read_only(parent)


def replace_gaps(
    values: np.ndarray, counts: np.ndarray, old: np.ndarray, new: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Gaps as distinct ``values`` with ``counts``, with one count of each gap of ``old``
    taken away and each gap of ``new`` added: read-only, values sorted, counts all > 0.

    ``old`` must be values the distribution holds, bit for bit (a mode passes the very
    values it counted); a count that would fall to 0 or below drops its value.
    """
    every = np.concatenate([values, old, new])
    weight = np.concatenate(
        [counts.astype(np.int64), np.full(old.size, -1, dtype=np.int64), np.ones(new.size, dtype=np.int64)]
    )
    distinct, where = np.unique(every, return_inverse=True)
    total = np.zeros(distinct.size, dtype=np.int64)
    np.add.at(total, where.reshape(-1), weight)
    keep = total > 0
    return read_only(distinct[keep]), read_only(total[keep])


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


def meets_targets(
    ttft: np.ndarray, tbt_mean: np.ndarray, slo_ttft: float | None, slo_tbt: float | None
) -> np.ndarray:
    """Whether each request's ``ttft`` and ``tbt_mean`` are within the targets (None: met by
    every request; NaN meets no target).

    Raises
    ------
    TypeError, ValueError
        A target that is not None or a number > 0 (``inf`` allowed).
    """
    ttft_target, tbt_target = slo_target("slo_ttft", slo_ttft), slo_target("slo_tbt", slo_tbt)
    meets = np.ones(ttft.size, dtype=bool)
    if ttft_target is not None:
        meets &= ttft <= ttft_target
    if tbt_target is not None:
        meets &= tbt_mean <= tbt_target
    return meets


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


@runtime_checkable
class ScheduleLike(Protocol):
    """What every schedule offers, whatever its mode: a competition engine's
    :class:`~llmsched.Schedule`, a fused engine's :class:`~llmsched.FusedSchedule`, a
    disaggregated cluster's :class:`~llmsched.DisaggregatedSchedule` and a fleet's
    :class:`~llmsched.FleetSchedule`. A caller that needs no more than this never asks
    which mode it holds.

    Placement arrays, ``prefill_end`` and ``finish`` are indexed like the workload, whose rows
    are the schedule's pieces; latencies, ``meets_slo`` and the frames and figures over
    requests are indexed like ``requests``, the user requests. Without preemption (every
    schedule but an engine's with KV-cache memory) the two are one: see the module docstring.
    A *machine* is what runs stages: the one engine of a competition or fused schedule
    (machine 0), a prompt or token machine of a cluster (numbered as the cluster numbers them,
    prompt machines first), an engine of a fleet. A *client* is a batch slot of a machine.
    """

    @property
    def mode(self) -> str:
        """``competition``, ``fusion``, ``disaggregated`` or ``fleet``."""
        ...

    @property
    def workload(self) -> Workload:
        """The requests the schedule ran: its pieces, when a request was preempted."""
        ...

    @property
    def requests(self) -> Workload:
        """The user requests: ``workload`` itself when no request was preempted."""
        ...

    @property
    def preemptions(self) -> np.ndarray:
        """How many times each user request was preempted (its pieces less one)."""
        ...

    @property
    def recomputed_tokens(self) -> np.ndarray:
        """Tokens each user request had prefilled anew after a preemption."""
        ...

    @property
    def makespan(self) -> float:
        """When the last machine finished, in seconds."""
        ...

    @property
    def machines(self) -> int:
        """How many machines the schedule ran on (1 for a single engine)."""
        ...

    @property
    def clients(self) -> int:
        """Batch slots over all machines that decode (a fleet's engines' added up; a
        cluster's token machines')."""
        ...

    @property
    def request_machine(self) -> np.ndarray:
        """The machine each piece decoded on (its engine in a fleet, its token machine in a
        cluster; 0 on a single engine)."""
        ...

    @property
    def request_client(self) -> np.ndarray:
        """The client (of its machine) each piece decoded on."""
        ...

    @property
    def prefill_end(self) -> np.ndarray:
        """When each piece's prefill ended: its request's first token, for a first piece."""
        ...

    @property
    def finish(self) -> np.ndarray:
        """When each piece produced its last token."""
        ...

    @property
    def ttft(self) -> np.ndarray:
        """Time to first token of each user request: its first piece's ``prefill_end`` minus
        its arrival."""
        ...

    @property
    def latency(self) -> np.ndarray:
        """End-to-end latency of each user request: its last piece's ``finish`` minus its
        arrival."""
        ...

    @property
    def e2e(self) -> np.ndarray:
        """The same array as :attr:`latency`."""
        ...

    @property
    def normalized_latency(self) -> np.ndarray:
        """End-to-end latency of each user request over its output tokens."""
        ...

    @property
    def tbt_mean(self) -> np.ndarray:
        """Each user request's mean time between tokens: from its first token (its first
        piece's ``prefill_end``) to its last (its last piece's ``finish``) over its tokens."""
        ...

    @property
    def utilization(self) -> float:
        """The busy share of the schedule's capacity over the makespan (each mode says
        which capacity: client-time of an engine, machine-time of a cluster)."""
        ...

    @property
    def rejected(self) -> np.ndarray:
        """Whether each user request was turned away before it reached an engine (bool)."""
        ...

    @property
    def tokens_per_s(self) -> float:
        """Output tokens per second of makespan."""
        ...

    def tbt_distribution(self) -> tuple[np.ndarray, np.ndarray]:
        """Every gap between tokens of every user request, as distinct values and their counts."""
        ...

    def meets_slo(self, slo_ttft: float | None = None, slo_tbt: float | None = None) -> np.ndarray:
        """Whether each user request's TTFT and mean time between tokens meet the targets
        (seconds; None: no target)."""
        ...

    def latency_figures(self) -> dict[str, float]:
        """Mean and percentiles of TTFT, latency and time between tokens, and percentiles of
        the normalized latency: the summary's latency keys."""
        ...

    def goodput_figures(self, slo_ttft: float | None = None, slo_tbt: float | None = None) -> dict[str, Any]:
        """Requests and good requests per second, the share meeting the targets, and the
        targets: the summary's goodput keys."""
        ...

    def summary(self, slo_ttft: float | None = None, slo_tbt: float | None = None) -> dict[str, Any]:
        """Headline figures: every key of :data:`SUMMARY_KEYS`, then the mode's own."""
        ...

    def request_frame(self, slo_ttft: float | None = None, slo_tbt: float | None = None) -> pd.DataFrame:
        """One row per user request (index ``request``): the columns of ``requests``,
        then :data:`REQUEST_COLUMNS` and the mode's own."""
        ...

    def stage_frame(self) -> pd.DataFrame:
        """What ran when, one row per stage, run or transfer (index ``stage``):
        :data:`STAGE_COLUMNS` first, then the mode's own."""
        ...

    def validate(self, **options: Any) -> list[Violation]:
        """Every rule of the mode the schedule breaks, by the mode's validator (``options``,
        such as ``skip``, ``rtol`` and ``atol``, go to it); empty when valid."""
        ...

    def chrome_trace(self) -> dict[str, Any]:
        """The schedule as a Chrome trace (Trace Event Format, :mod:`llmsched.core.export`)."""
        ...

    def write_chrome_trace(self, path: str | os.PathLike[str]) -> dict[str, Any]:
        """Write :meth:`chrome_trace` to ``path`` as JSON (the path checked first); return it."""
        ...

    def write_requests_csv(
        self,
        path: str | os.PathLike[str] | None = None,
        slo_ttft: float | None = None,
        slo_tbt: float | None = None,
    ) -> str | None:
        """Write :meth:`request_frame` as CSV to ``path``; without a path, return the text."""
        ...

    def write_stages_csv(self, path: str | os.PathLike[str] | None = None) -> str | None:
        """Write :meth:`stage_frame` as CSV to ``path``; without a path, return the text."""
        ...


class RequestTimes:
    """Per-request latencies of any mode's schedule, from its ``workload``, ``prefill_end``
    (each piece's first token) and ``finish`` (its last), over the user requests that
    ``request_parent`` makes of the pieces (see the module docstring; None: each piece is a
    user request, and each figure is computed as it always was)."""

    workload: Workload
    # A class without pieces (a cluster's, a fleet's) keeps this; the engine schedules have a field.
    request_parent: np.ndarray | None = None

    if TYPE_CHECKING:  # each schedule class computes them its own way

        @property
        def prefill_end(self) -> np.ndarray: ...

        @property
        def finish(self) -> np.ndarray: ...

    @cached_property
    def _piece_links(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each user request's first and last piece, and each piece's previous piece (-1 for
        a first piece), from ``request_parent``."""
        n = len(self.workload)
        parent = self.request_parent
        if parent is None:
            every = read_only(np.arange(n, dtype=np.int64))
            return every, every, read_only(np.full(n, -1, dtype=np.int64))
        # A stable sort keeps each request's pieces in index order, which is their time order.
        order = np.argsort(parent, kind="stable")
        grouped = parent[order]
        same = grouped[1:] == grouped[:-1]
        opens = np.flatnonzero(np.concatenate([[True], ~same])) if n else np.zeros(0, dtype=np.int64)
        closes = np.append(opens[1:] - 1, n - 1) if n else opens
        previous = np.full(n, -1, dtype=np.int64)
        previous[order[1:][same]] = order[:-1][same]
        return read_only(order[opens]), read_only(order[closes]), read_only(previous)

    @property
    def first_piece(self) -> np.ndarray:
        """Each user request's first piece (the one prefilling its own prompt; its index
        among the pieces)."""
        return self._piece_links[0]

    @property
    def last_piece(self) -> np.ndarray:
        """Each user request's last piece (the one producing its last token)."""
        return self._piece_links[1]

    @property
    def previous_piece(self) -> np.ndarray:
        """Each piece's previous piece of its user request, -1 for a first piece."""
        return self._piece_links[2]

    @cached_property
    def preemptions(self) -> np.ndarray:
        """How many times each user request was preempted: its pieces less one (int64)."""
        if self.request_parent is None:
            return read_only(np.zeros(len(self.workload), dtype=np.int64))
        pieces = np.bincount(self.request_parent, minlength=self.first_piece.size)
        return read_only(pieces.astype(np.int64) - 1)

    @cached_property
    def recomputed_tokens(self) -> np.ndarray:
        """Tokens prefilled anew for each user request: the prompts of its pieces after the
        first, each its request's prompt and the tokens decoded before it (int64)."""
        out = np.zeros(self.first_piece.size, dtype=np.int64)
        if self.request_parent is not None:
            later = self.previous_piece >= 0
            np.add.at(out, self.request_parent[later], self.workload.prompt_tokens[later])
        return read_only(out)

    @cached_property
    def requests(self) -> Workload:
        """The user requests: each with its first piece's prompt, arrival and predicted
        output, and its pieces' output tokens added up (``workload`` itself without
        ``request_parent``)."""
        work = self.workload
        if self.request_parent is None:
            return work
        first = self.first_piece
        output = np.zeros(first.size, dtype=np.int64)
        np.add.at(output, self.request_parent, work.output_tokens)
        predicted = None if work.predicted_output is None else work.predicted_output[first]
        return Workload(work.prompt_tokens[first], output, predicted, work.arrival[first], name=work.name)

    def _of_first_piece(self, per_piece: np.ndarray) -> np.ndarray:
        """A per-piece array's entry of each user request's first piece (the array itself
        without pieces)."""
        return per_piece if self.request_parent is None else per_piece[self.first_piece]

    def _of_last_piece(self, per_piece: np.ndarray) -> np.ndarray:
        """A per-piece array's entry of each user request's last piece (the array itself
        without pieces)."""
        return per_piece if self.request_parent is None else per_piece[self.last_piece]

    @cached_property
    def ttft(self) -> np.ndarray:
        """Time to first token of each user request: end of its first piece's prefill minus
        its arrival."""
        return read_only(self._of_first_piece(self.prefill_end) - self.requests.arrival)

    @cached_property
    def latency(self) -> np.ndarray:
        """End-to-end latency of each user request: its last piece's finish minus its arrival."""
        return read_only(self._of_last_piece(self.finish) - self.requests.arrival)

    @cached_property
    def e2e(self) -> np.ndarray:
        """End-to-end latency of each user request (the same array as :attr:`latency`)."""
        return self.latency

    @cached_property
    def normalized_latency(self) -> np.ndarray:
        """End-to-end latency of each user request over its output tokens (seconds per token)."""
        return read_only(self.latency / self.requests.output_tokens)


class ScheduleBase(RequestTimes):
    """What every schedule class derives the same way from its own members: the SLO check,
    the latency and goodput figures of its summary, and the CSV and trace writers (each class
    gives ``tbt_mean``, ``tbt_distribution``, ``makespan``, ``request_frame``,
    ``stage_frame`` and ``chrome_trace``)."""

    if TYPE_CHECKING:

        @property
        def tbt_mean(self) -> np.ndarray: ...

        @property
        def makespan(self) -> float: ...

        def tbt_distribution(self) -> tuple[np.ndarray, np.ndarray]: ...

        def request_frame(
            self, slo_ttft: float | None = None, slo_tbt: float | None = None
        ) -> pd.DataFrame: ...

        def stage_frame(self) -> pd.DataFrame: ...

        def chrome_trace(self) -> dict[str, Any]: ...

    @property
    def rejected(self) -> np.ndarray:
        """Whether each user request was turned away before it reached an engine (bool): none
        is in a single engine's or a cluster's run; a fleet's admission may turn some away
        (:attr:`llmsched.fleet.schedule.FleetSchedule.rejected`)."""
        return read_only(np.zeros(len(self.requests), dtype=bool))

    @property
    def tokens_per_s(self) -> float:
        """Output tokens per second of makespan."""
        span = self.makespan
        return self.workload.total_output_tokens / span if span > 0 else 0.0

    def meets_slo(self, slo_ttft: float | None = None, slo_tbt: float | None = None) -> np.ndarray:
        """Whether each user request meets the latency targets: TTFT <= ``slo_ttft`` and mean
        time between tokens (``tbt_mean``) <= ``slo_tbt``, in seconds; a target left None is
        met by every request.

        Raises
        ------
        TypeError, ValueError
            A target that is not None or a number > 0 (``inf`` allowed).
        """
        return meets_targets(self.ttft, self.tbt_mean, slo_ttft, slo_tbt)

    def latency_figures(self) -> dict[str, float]:
        """:func:`latency_figures` of the schedule's requests and gaps, then p50, p90 and p99
        of the normalized latency (``normalized_latency_p50_s`` ...)."""
        out = latency_figures(self.ttft, self.latency, *self.tbt_distribution())
        p50, p90, p99 = percentiles(self.normalized_latency)
        out["normalized_latency_p50_s"] = p50
        out["normalized_latency_p90_s"] = p90
        out["normalized_latency_p99_s"] = p99
        return out

    def goodput_figures(self, slo_ttft: float | None = None, slo_tbt: float | None = None) -> dict[str, Any]:
        """:func:`goodput_figures` of the requests meeting the targets (:meth:`meets_slo`)
        over the makespan.

        Raises
        ------
        TypeError, ValueError
            A target that is not None or a number > 0 (``inf`` allowed).
        """
        return goodput_figures(self.meets_slo(slo_ttft, slo_tbt), self.makespan, slo_ttft, slo_tbt)

    def _request_frame(self, meets: np.ndarray, **columns: Any) -> pd.DataFrame:
        """One row per user request: the columns of ``requests``, then ``columns`` (the
        mode's per-piece arrays, in order: its machine, client, prefill end, ..., each taken
        at the request's first piece), then ``finish`` (its last piece's), ``ttft``,
        ``latency``, ``tbt_mean``, ``e2e``, ``normalized_latency``, the mode's counts of
        preemption (:meth:`_preemption_columns`) and ``meets`` as ``meets_slo``."""
        frame = self.requests.to_frame()
        for name, values in columns.items():
            frame[name] = self._of_first_piece(np.asarray(values))
        frame["finish"] = self._of_last_piece(self.finish)
        for name in ("ttft", "latency", "tbt_mean", "e2e", "normalized_latency"):
            frame[name] = getattr(self, name)
        for name, values in self._preemption_columns().items():
            frame[name] = values
        frame["meets_slo"] = meets
        return frame

    def _preemption_columns(self) -> dict[str, np.ndarray]:
        """Columns on preemption that the mode's request frame holds: none in a mode whose
        requests are never preempted."""
        return {}

    def _preemption_figures(self) -> dict[str, int]:
        """``preemptions`` and ``recomputed_tokens`` over all user requests, for a summary."""
        return {
            "preemptions": int(self.preemptions.sum()),
            "recomputed_tokens": int(self.recomputed_tokens.sum()),
        }

    def write_chrome_trace(self, path: str | os.PathLike[str]) -> dict[str, Any]:
        """Write :meth:`chrome_trace` to ``path`` as JSON and return it.

        Raises
        ------
        TypeError, ValueError
            A path that cannot be written (a folder, a missing folder, no permission), named
            in the message and checked before the trace is built; a time that is not finite.
        """
        from llmsched.core.export import write_chrome_trace

        return write_chrome_trace(self, path)

    def write_requests_csv(
        self,
        path: str | os.PathLike[str] | None = None,
        slo_ttft: float | None = None,
        slo_tbt: float | None = None,
    ) -> str | None:
        """``request_frame`` as CSV (a ``request`` column first), ``meets_slo`` judged against
        the targets, written to ``path``, or returned as text when ``path`` is None.

        Raises
        ------
        TypeError, ValueError
            A path that cannot be written (checked before any work), or a bad target.
        """
        from llmsched.core.export import write_requests_csv

        return write_requests_csv(self, path, slo_ttft=slo_ttft, slo_tbt=slo_tbt)

    def write_stages_csv(self, path: str | os.PathLike[str] | None = None) -> str | None:
        """``stage_frame`` as CSV (a ``stage`` column first) written to ``path``, or returned
        as text when ``path`` is None.

        Raises
        ------
        TypeError, ValueError
            A path that cannot be written, checked before any work.
        """
        from llmsched.core.export import write_stages_csv

        return write_stages_csv(self, path)


class EngineSchedule(ScheduleBase):
    """A schedule of one engine (a competition or a fused one): machine 0 runs every request.

    Its pieces may be parts of user requests (``request_parent``, see the module docstring):
    the mode gives each piece's figures (``_piece_tbt_mean``, ``_first_gap``: the first gap
    its ``tbt_distribution`` counts for a piece), and this class turns them into the user
    requests'.
    """

    memory: KVMemory | None = None

    if TYPE_CHECKING:

        @property
        def num_iterations(self) -> int: ...

        @property
        def request_client(self) -> np.ndarray: ...

        @property
        def request_decode_start(self) -> np.ndarray: ...

        @property
        def request_decode_end(self) -> np.ndarray: ...

        @property
        def _piece_tbt_mean(self) -> np.ndarray: ...

        @property
        def _first_gap(self) -> np.ndarray: ...

        def iteration_end_at(self, iterations: Any) -> np.ndarray: ...

    def _freeze_pieces(self) -> None:
        """Check and freeze ``request_parent`` and ``memory`` (from ``__post_init__``)."""
        if self.request_parent is not None:
            object.__setattr__(self, "request_parent", piece_parents(self.request_parent, len(self.workload)))
        if self.memory is not None and not isinstance(self.memory, KVMemory):
            raise TypeError(f"Schedule.memory must be a KVMemory or None, got {type(self.memory).__name__}")

    @property
    def machines(self) -> int:
        """One engine."""
        return 1

    @cached_property
    def request_machine(self) -> np.ndarray:
        """The machine of each piece: the one engine, 0."""
        return read_only(np.zeros(len(self.workload), dtype=np.int64))

    @cached_property
    def _decoding(self) -> np.ndarray:
        """Pieces whose decode range is a non-empty range of the schedule's iterations (every
        piece of a valid schedule); the others have no gaps and NaN TBT metrics."""
        lo, hi = self.request_decode_start, self.request_decode_end
        return read_only((lo >= 0) & (lo < hi) & (hi <= self.num_iterations))

    @cached_property
    def tbt_mean(self) -> np.ndarray:
        """Mean time between tokens of each user request (TPOT): from its first token to its
        last over its output tokens; for a request in one piece, its piece's (NaN for one
        that decodes nothing)."""
        piece = self._piece_tbt_mean
        if self.request_parent is None:
            return piece
        whole = (
            self._of_last_piece(self.finish) - self._of_first_piece(self.prefill_end)
        ) / self.requests.output_tokens
        return read_only(np.where(self.preemptions == 0, piece[self.first_piece], whole))

    @property
    def _first_token(self) -> np.ndarray:
        """The iteration of each piece's first token: its decode start (a mode whose pieces
        may sit iterations out says otherwise)."""
        return self.request_decode_start

    @cached_property
    def _resumes(self) -> np.ndarray:
        """Pieces that continue a preempted request and decode: each has a gap that runs
        from the previous piece's last token."""
        return read_only(np.flatnonzero((self.previous_piece >= 0) & self._decoding))

    @cached_property
    def _user_first_gap(self) -> np.ndarray:
        """Each piece's first gap as its user request sees it: the mode's ``_first_gap``, but
        for a piece that resumes a request, from the previous piece's last token (its
        recompute makes no token) to the end of its own first decode iteration."""
        resumes = self._resumes
        if not resumes.size:
            return self._first_gap
        gap = self._first_gap.copy()
        ends = self.iteration_end_at(self._first_token[resumes])
        gap[resumes] = ends - self.finish[self.previous_piece[resumes]]
        return read_only(gap)

    def _user_gaps(self, values: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The gaps of the pieces (values with counts, each piece's first gap among them as
        ``_first_gap`` has it) made the user requests' gaps: each resuming piece's first gap
        replaced by :attr:`_user_first_gap`'s. Unchanged, read-only, when no piece resumes."""
        resumes = self._resumes
        if not resumes.size:
            return read_only(values), read_only(counts)
        return replace_gaps(values, counts, self._first_gap[resumes], self._user_first_gap[resumes])

    def _preemption_columns(self) -> dict[str, np.ndarray]:
        """``preemptions`` and ``recomputed_tokens`` of each user request, when the schedule
        has pieces (a frame without them keeps the columns it always had)."""
        if self.request_parent is None:
            return {}
        return {"preemptions": self.preemptions, "recomputed_tokens": self.recomputed_tokens}

    def _piece_frame(self, slo_ttft: float | None, slo_tbt: float | None, **columns: Any) -> pd.DataFrame:
        """One row per piece (index ``piece``): the workload's columns, ``parent`` (its user
        request), then ``columns`` (the mode's), ``finish``, and ``ttft``, ``latency``,
        ``tbt_mean``, ``e2e``, ``normalized_latency`` and ``meets_slo`` of the piece as if
        it were a request (from its own prefill end and finish and its user request's
        arrival)."""
        frame = self.workload.to_frame().rename_axis("piece")
        parent = self.request_parent
        frame["parent"] = np.arange(len(self.workload), dtype=np.int64) if parent is None else parent
        for name, values in columns.items():
            frame[name] = values
        latency = self.finish - self.workload.arrival
        ttft = self.prefill_end - self.workload.arrival
        meets = meets_targets(ttft, self._piece_tbt_mean, slo_ttft, slo_tbt)
        frame["finish"] = self.finish
        frame["ttft"] = ttft
        frame["latency"] = latency
        frame["tbt_mean"] = self._piece_tbt_mean
        frame["e2e"] = latency
        frame["normalized_latency"] = latency / self.workload.output_tokens
        frame["meets_slo"] = meets
        return frame


class RunTable:
    """Decode runs kept as a table, in a mode that stores them so: run ``r`` is
    ``run_iterations[r]`` iterations from ``run_start[r]``, whose first ``k`` take
    ``_elapsed(r, k)`` seconds."""

    run_start: np.ndarray
    run_iterations: np.ndarray

    def _elapsed(self, run: np.ndarray, iterations: np.ndarray) -> np.ndarray:
        """Seconds of the first ``iterations`` iterations of each ``run`` (each mode's series)."""
        raise NotImplementedError

    @property
    def num_runs(self) -> int:
        """Decode runs (the rows of the run arrays)."""
        return int(self.run_start.size)

    @cached_property
    def run_end(self) -> np.ndarray:
        """When each run's last iteration ended."""
        every = np.arange(self.num_runs)
        return read_only(self.run_start + self._elapsed(every, self.run_iterations))


class SteppedRuns(RunTable):
    """Runs that store their first iteration's time, ``run_first_time``, and each next
    iteration's growth, ``run_step`` (the fused and disaggregated schedules)."""

    run_first_time: np.ndarray
    run_step: np.ndarray

    @property
    def run_iteration_time(self) -> np.ndarray:
        """Each run's first iteration time (:attr:`run_first_time`, under the name the
        competition schedule uses)."""
        return self.run_first_time

    @property
    def run_iteration_step(self) -> np.ndarray:
        """Each run's growth per iteration (:attr:`run_step`, under the name the
        competition schedule uses)."""
        return self.run_step

    def _elapsed(self, run: np.ndarray, iterations: np.ndarray) -> np.ndarray:
        """Seconds of the first ``iterations`` iterations of each ``run``."""
        k = iterations.astype(np.float64)
        return k * self.run_first_time[run] + self.run_step[run] * (k * (k - 1) / 2)


class NumberedRuns(RunTable):
    """Runs whose iterations are numbered 0, 1, ... over all of them, in order (one
    engine's: the competition and fused schedules)."""

    @cached_property
    def num_iterations(self) -> int:
        """Decode iterations over all runs."""
        return int(self.run_iterations.sum())

    @cached_property
    def run_first_iteration(self) -> np.ndarray:
        """The global index of each run's first iteration (one entry per run)."""
        return read_only(np.cumsum(self.run_iterations) - self.run_iterations)

    def _locate(self, iterations: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For global iterations ``g``: the run holding each, ``g``'s offset in it, and whether
        ``g`` is an iteration of the schedule at all (run and offset are 0 where it is not)."""
        g = np.asarray(iterations, dtype=np.int64)
        inside = (g >= 0) & (g < self.num_iterations)
        if not self.num_runs:
            return np.zeros(g.shape, dtype=np.int64), np.zeros(g.shape, dtype=np.int64), inside
        run = run_holding(self.run_first_iteration, self.run_iterations, np.where(inside, g, 0))
        offset = np.where(inside, g - self.run_first_iteration[run], 0)
        return run, offset, inside

    def iteration_start_at(self, iterations: Any) -> np.ndarray:
        """When the given global iterations started (NaN for one the schedule lacks).

        Found from the runs without materialising every iteration's time: time and memory
        grow with the runs and the iterations asked for, not with the schedule's iterations.
        """
        return self._iteration_time_at(iterations, ends=0)

    def iteration_end_at(self, iterations: Any) -> np.ndarray:
        """When the given global iterations ended (NaN for one the schedule lacks), found
        from the runs as :meth:`iteration_start_at`."""
        return self._iteration_time_at(iterations, ends=1)

    def _iteration_time_at(self, iterations: Any, ends: int) -> np.ndarray:
        # ends=0: the iteration's start; ends=1: its end (one iteration time later).
        if not self.num_runs:
            return np.full(np.shape(iterations), np.nan)
        run, offset, inside = self._locate(iterations)
        at = self.run_start[run] + self._elapsed(run, offset + ends)
        return np.where(inside, at, np.nan)


def decoding_at(
    iteration: np.ndarray, decode_start: np.ndarray, decode_end: np.ndarray, prompt: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """How many requests decode in each given iteration, and their context tokens then: the
    requests with ``decode_start <= g < decode_end``, each holding its prompt and the
    ``g - decode_start`` tokens it has decoded (exact integers, from prefix sums)."""
    decoded = decode_start >= 0
    start, end = decode_start[decoded], decode_end[decoded]
    # Each request adds prompt - start to the context while it decodes (plus g, counted apart).
    held = (prompt[decoded] - start).astype(np.int64)
    by_start, by_end = np.argsort(start, kind="stable"), np.argsort(end, kind="stable")
    began = np.searchsorted(start[by_start], iteration, side="right")
    ended = np.searchsorted(end[by_end], iteration, side="right")
    held_began = np.concatenate(([0], np.cumsum(held[by_start])))[began]
    held_ended = np.concatenate(([0], np.cumsum(held[by_end])))[ended]
    decoding = began - ended
    return decoding, held_began - held_ended + decoding * iteration
