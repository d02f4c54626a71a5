"""A schedule: the stages the engine ran, and where and when each request ran in them.

Layout (all numpy arrays, read-only):

* stages, in time order: ``stage_kind`` (``PREFILL`` or ``DECODE``), ``stage_start``,
  ``stage_end``, and for decode stages ``stage_first_iteration`` and ``stage_iterations``:
  the decode iterations of all decode stages are numbered 0, 1, ... in time order;
* decode runs, in time order: run ``r`` is ``run_iterations[r] >= 1`` consecutive decode
  iterations starting at ``run_start[r]``; the first lasts ``run_iteration_time[r]`` seconds
  and each next one ``run_iteration_step[r]`` seconds longer than the one before (0 under a
  cost model blind to context; ``c_d`` times the active clients under a context-aware one,
  whose context grows by one token per active request and iteration). The runs cover
  iterations 0, 1, ... in order and none crosses a decode stage boundary.
  A producer that jumps over iterations in closed form stores one run per jump, so the
  schedule's size does not grow with the number of iterations; a measured schedule has
  one run per iteration (see :meth:`Schedule.from_iteration_end`). The metrics below work
  from the runs; ``iteration_end`` (and ``iteration_start``, ``iteration_time``) are
  materialised only when asked for, in O(iterations);
* ``makespan``: when the engine finished, as the producer reports it (the end of the last
  stage, which the validator checks);
* requests, indexed like the workload: ``request_client``, ``request_prefill_stage``, and
  ``request_decode_start`` / ``request_decode_end``, the half-open range of global decode
  iterations in which the request decoded (one token each);
* ``request_parent`` (None, or the user request of each request, then called a *piece*) and
  ``memory`` (the engine's KV-cache memory, or None): an engine with memory preempts by
  recompute, and each stretch of a request's work is a piece of the workload (see
  :mod:`llmsched.core.schedule` for which figures are per piece and which per user request).

Serving metrics: a request's first token comes at the end of its prefill stage, then one
token at the end of each decode iteration it takes part in. Its *time between tokens* (TBT)
gaps are the differences of consecutive token times, ``output_tokens`` of them, the first
from the prefill's end to the end of its first decode iteration; a prefill stage that pauses
decoding falls inside a gap. Within one decode run of constant iteration time every gap is
that time, so the gaps of a whole run are kept as distinct values with counts
(:meth:`Schedule.tbt_distribution`), never one entry per token. A run whose iterations
lengthen (a context-aware model) has a gap value per iteration, each counted once per request
decoding in it: O(iterations) for the TBT percentiles of such a schedule, still not O(tokens).

Context: a request with ``p`` prompt tokens has ``p + j`` tokens in its cache when it decodes
its ``j``-th token (:meth:`Schedule.context_at` sums them over the requests decoding in an
iteration); the stage and run tables carry it so a context-aware cost model can price them.

``llmsched.validate`` checks a schedule against the system model; nothing here assumes it
is valid, but the metrics only mean something for a valid schedule.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from llmsched.core.cost import CostModel
from llmsched.core.memory import KVMemory
from llmsched.core.metrics import range_max
from llmsched.core.schedule import (
    DECODE,
    KIND_NAMES,
    PREFILL,
    EngineSchedule,
    NumberedRuns,
    context_at,
    frozen_array,
    read_only,
    run_holding,
    runs_from_iteration_end,
    sum_of_min,
)
from llmsched.core.workload import Workload

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from llmsched.core.violations import Violation

__all__ = ["Schedule"]


@dataclass(frozen=True, eq=False)
class Schedule(NumberedRuns, EngineSchedule):
    """Stages, decode runs and per-request placement of one execution (see the module docstring).

    It meets :class:`~llmsched.core.schedule.ScheduleLike`: one engine (machine 0) of
    ``clients`` clients.

    With ``request_parent`` set, the workload's rows are pieces of the user requests
    (``requests``). Per piece: the placement arrays, ``prefill_end``, ``finish``, the
    stage and segment tables and :meth:`piece_frame`. Per user request: ``ttft``,
    ``latency``, ``e2e``, ``normalized_latency``, ``tbt_mean``, ``tbt_max``, :meth:`meets_slo`,
    ``preemptions``, ``recomputed_tokens``, :meth:`request_frame`, :meth:`summary` and
    :meth:`tbt_distribution`. Without it, pieces and user requests are one.
    """

    mode: ClassVar[str] = "competition"

    workload: Workload
    cost: CostModel
    clients: int
    stage_kind: np.ndarray
    stage_start: np.ndarray
    stage_end: np.ndarray
    stage_first_iteration: np.ndarray
    stage_iterations: np.ndarray
    run_start: np.ndarray
    run_iterations: np.ndarray
    run_iteration_time: np.ndarray
    request_client: np.ndarray
    request_prefill_stage: np.ndarray
    request_decode_start: np.ndarray
    request_decode_end: np.ndarray
    makespan: float
    measured: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    # None: every run at constant speed (zeros); a schedule replaced with other runs keeps it.
    run_iteration_step: np.ndarray | None = None
    # None: each request is a user request of its own (no preemption).
    request_parent: np.ndarray | None = None
    memory: KVMemory | None = None

    def __post_init__(self) -> None:
        self._freeze_pieces()
        if self.run_iteration_step is not None:
            step = frozen_array("run_iteration_step", self.run_iteration_step, np.float64)
            object.__setattr__(self, "run_iteration_step", step)
        for name, dtype in (
            ("stage_kind", np.int8),
            ("stage_start", np.float64),
            ("stage_end", np.float64),
            ("stage_first_iteration", np.int64),
            ("stage_iterations", np.int64),
            ("run_start", np.float64),
            ("run_iterations", np.int64),
            ("run_iteration_time", np.float64),
            ("request_client", np.int64),
            ("request_prefill_stage", np.int64),
            ("request_decode_start", np.int64),
            ("request_decode_end", np.int64),
        ):
            object.__setattr__(self, name, frozen_array(name, getattr(self, name), dtype))
        object.__setattr__(self, "makespan", float(self.makespan))

    @classmethod
    def from_iteration_end(
        cls,
        workload: Workload,
        cost: CostModel,
        clients: int,
        stage_kind: Any,
        stage_start: Any,
        stage_end: Any,
        stage_first_iteration: Any,
        stage_iterations: Any,
        iteration_end: Any,
        request_client: Any,
        request_prefill_stage: Any,
        request_decode_start: Any,
        request_decode_end: Any,
        makespan: float,
        measured: bool = False,
        info: dict[str, Any] | None = None,
        request_parent: Any = None,
        memory: KVMemory | None = None,
    ) -> Schedule:
        """A schedule from the end time of every decode iteration, one run per iteration.

        For producers that time each iteration (the runtime's clock). The arguments are the
        constructor's, with ``iteration_end[g]``, when global decode iteration ``g`` ended,
        in place of the three run arrays (see :func:`runs_from_iteration_end`).
        """
        run_start, run_iterations, run_iteration_time = runs_from_iteration_end(
            stage_kind, stage_start, stage_first_iteration, stage_iterations, iteration_end
        )
        return cls(
            workload,
            cost,
            clients,
            stage_kind,
            stage_start,
            stage_end,
            stage_first_iteration,
            stage_iterations,
            run_start,
            run_iterations,
            run_iteration_time,
            request_client,
            request_prefill_stage,
            request_decode_start,
            request_decode_end,
            makespan,
            measured=measured,
            info={} if info is None else info,
            request_parent=request_parent,
            memory=memory,
        )

    # ------------------------------------------------------------------ sizes
    @property
    def num_stages(self) -> int:
        return int(self.stage_kind.size)

    @property
    def prefill_stages(self) -> int:
        """Prefill stages the engine ran."""
        return int(np.count_nonzero(self.stage_kind == PREFILL))

    @property
    def decode_iterations(self) -> int:
        """Decode iterations over all decode stages (:attr:`num_iterations`)."""
        return self.num_iterations

    @property
    def run_first_time(self) -> np.ndarray:
        """Each run's first iteration time (:attr:`run_iteration_time`, under the name the
        fused and disaggregated schedules use)."""
        return self.run_iteration_time

    @property
    def run_step(self) -> np.ndarray:
        """Each run's growth per iteration, zeros when the schedule gives none
        (:attr:`run_iteration_step`, under the name the other modes use)."""
        return self._step

    def __repr__(self) -> str:
        pieces = "" if self.request_parent is None else f", pieces={len(self.workload)}"
        return (
            f"Schedule(requests={len(self.requests)}{pieces}, clients={self.clients}, "
            f"stages={self.num_stages}, makespan={self.makespan:.3f}s, "
            f"utilization={self.utilization:.2%})"
        )

    # ---------------------------------------------------------------- timings
    # Everything below works from the runs, in O(stages + runs + requests) whatever the
    # number of iterations; only the materialised per-iteration arrays, and the TBT
    # distribution of runs whose iterations lengthen, are O(iterations).
    @cached_property
    def _step(self) -> np.ndarray:
        """Each run's growth per iteration (zeros when the schedule gives none)."""
        step = self.run_iteration_step
        return read_only(np.zeros(self.run_start.shape)) if step is None else step

    @cached_property
    def _constant_speed(self) -> bool:
        """Whether every run's iterations last alike (no context term)."""
        return not np.any(self._step)

    def _elapsed(self, run: np.ndarray, iterations: np.ndarray) -> np.ndarray:
        """Seconds taken by the first ``iterations`` iterations of each ``run``: the sum
        of an arithmetic series, ``tau * m + step * m (m - 1) / 2``."""
        m = np.asarray(iterations)
        out = self.run_iteration_time[run] * m
        if self._constant_speed:
            return out
        return out + self._step[run] * (m * (m - 1) / 2)

    def _duration_of_iteration(self, run: np.ndarray, offset: np.ndarray) -> np.ndarray:
        """How long iteration ``offset`` (0-based) of each ``run`` lasted."""
        tau = self.run_iteration_time[run]
        return tau if self._constant_speed else tau + self._step[run] * offset

    @cached_property
    def _decode_time_before_run(self) -> np.ndarray:
        """Decode seconds spent before each run starts (prefill pauses left out)."""
        spent = self._elapsed(np.arange(self.num_runs), self.run_iterations)
        return read_only(np.cumsum(spent) - spent)

    def _iteration_offsets(self) -> np.ndarray:
        return np.arange(self.num_iterations, dtype=np.int64) - np.repeat(
            self.run_first_iteration, self.run_iterations
        )

    @cached_property
    def iteration_end(self) -> np.ndarray:
        """When every decode iteration ended, materialised: O(iterations) time and memory.

        For users who want the per-iteration view of a schedule of modest length; the
        library's own metrics and checks work from the runs (see :meth:`iteration_end_at`).
        """
        run = np.repeat(np.arange(self.num_runs), self.run_iterations)
        return read_only(self.run_start[run] + self._elapsed(run, self._iteration_offsets() + 1))

    @cached_property
    def iteration_start(self) -> np.ndarray:
        """When every decode iteration started, materialised: O(iterations), like :attr:`iteration_end`."""
        run = np.repeat(np.arange(self.num_runs), self.run_iterations)
        return read_only(self.run_start[run] + self._elapsed(run, self._iteration_offsets()))

    @cached_property
    def iteration_time(self) -> np.ndarray:
        """Duration of every decode iteration, materialised: O(iterations)."""
        run = np.repeat(np.arange(self.num_runs), self.run_iterations)
        return read_only(np.asarray(self._duration_of_iteration(run, self._iteration_offsets()), dtype=float))

    def context_at(self, iterations: Any) -> np.ndarray:
        """Context tokens of the requests decoding in each of the given global iterations:
        the sum over them of ``prompt + tokens decoded before`` (int64; 0 where none decodes).

        O((requests + len(iterations)) log requests), whatever the schedule's iterations.
        """
        return context_at(
            self.request_decode_start,
            self.request_decode_end,
            self.workload.prompt_tokens,
            np.asarray(iterations, dtype=np.int64),
        )

    def active_runs(self) -> dict[str, np.ndarray]:
        """The runs cut wherever a request starts or stops decoding, with their active clients.

        Within each piece the set of decoding clients is constant, so a piece is what a
        cost model prices: ``iterations`` iterations of ``active`` clients, the first with
        ``context`` context tokens and lasting ``iteration_time``, each next one
        ``iteration_step`` longer (context grows by ``active`` tokens an iteration). A run that
        no request event crosses (all the simulator's runs, every run of a measured schedule)
        is one piece.

        Returns
        -------
        dict of arrays, one entry per piece in time order
            ``run`` (the run it belongs to), ``first_iteration``, ``iterations``, ``start``,
            ``iteration_time``, ``iteration_step``, ``active`` (clients decoding in it) and
            ``context`` (their context tokens in its first iteration).
        """
        total = self.num_iterations
        dstart, dend = self.request_decode_start, self.request_decode_end
        decoding = (dstart >= 0) & (dstart < total) & (dend > dstart)
        opens = np.sort(dstart[decoding])
        closes = np.sort(np.minimum(dend[decoding], total))
        cuts = np.unique(np.concatenate([self.run_first_iteration, opens, closes]))
        cuts = cuts[cuts < total]
        run, offset, _ = self._locate(cuts)
        return {
            "run": run,
            "first_iteration": cuts,
            "iterations": np.diff(np.append(cuts, total)),
            "start": self.run_start[run] + self._elapsed(run, offset),
            "iteration_time": np.asarray(self._duration_of_iteration(run, offset), dtype=np.float64),
            "iteration_step": self._step[run],
            "active": np.searchsorted(opens, cuts, side="right")
            - np.searchsorted(closes, cuts, side="right"),
            "context": self.context_at(cuts),
        }

    @cached_property
    def prefill_end(self) -> np.ndarray:
        """When each request's prefill stage ended."""
        return read_only(self.stage_end[self.request_prefill_stage])

    @cached_property
    def finish(self) -> np.ndarray:
        """When each request produced its last token (NaN for one that decodes nothing)."""
        return read_only(self.iteration_end_at(self.request_decode_end - 1))

    # ---------------------------------------------------- time between tokens
    @cached_property
    def _first_gap(self) -> np.ndarray:
        """Each piece's first gap: from its prefill's end to the end of its first decode
        iteration (NaN for a piece that decodes nothing)."""
        gap = self.iteration_end_at(self.request_decode_start) - self.prefill_end
        return read_only(np.where(self._decoding, gap, np.nan))

    @cached_property
    def _boundary_gap(self) -> np.ndarray:
        """For each run, the gap of a request decoding across its start: from the end of the
        previous run's last iteration to the end of this run's first (-inf for run 0)."""
        gap = np.full(self.num_runs, -np.inf)
        gap[1:] = self.run_start[1:] + self.run_iteration_time[1:] - self.run_end[:-1]
        return read_only(gap)

    @cached_property
    def _run_gap_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """For each run: how many gaps of its iteration time it holds (pairs of consecutive
        iterations of the run in which one request decodes), and how many gaps span its start
        (requests decoding in its first iteration and in the iteration before it)."""
        decoding = self._decoding
        opens = np.sort(self.request_decode_start[decoding])
        closes = np.sort(self.request_decode_end[decoding])
        # Prefix sums may wrap around in int64 for absurd sizes; the differences taken below
        # are exact all the same (arithmetic modulo 2**64 of a result that fits).
        open_prefix = np.concatenate([[0], np.cumsum(opens)])
        close_prefix = np.concatenate([[0], np.cumsum(closes)])
        first = self.run_first_iteration
        stop = first + self.run_iterations

        def tokens_before(t: np.ndarray) -> np.ndarray:
            # Tokens decoded in iterations < t: sum over requests of min(t, end) - min(t, start).
            return sum_of_min(closes, close_prefix, t) - sum_of_min(opens, open_prefix, t)

        tokens = tokens_before(stop) - tokens_before(first)
        # Requests decoding in the run: starting before its end and ending after its start.
        present = np.searchsorted(opens, stop, side="left") - np.searchsorted(closes, first, side="right")
        spanning = np.searchsorted(opens, first, side="left") - np.searchsorted(closes, first, side="right")
        return read_only(tokens - present), read_only(spanning)

    def tbt_distribution(self) -> tuple[np.ndarray, np.ndarray]:
        """Every time-between-tokens gap of every user request, as values with counts.

        The list in which ``values[k]`` appears ``counts[k]`` times is the list of all gaps
        (one per output token; the first gap of a piece resuming a preempted request runs
        from the previous piece's last token, see :mod:`llmsched.core.schedule`); its size
        is O(requests + runs), not O(tokens), when every run keeps its speed, and grows by one
        per iteration of each run whose iterations lengthen (a context-aware model:
        O(iterations), still not O(tokens)). Use
        :func:`llmsched.core.metrics.weighted_percentile` for its percentiles.

        Returns
        -------
        values, counts
            Float gaps in seconds (each request's first gap, the gaps spanning run starts, and
            each run's iteration time) and their int64 counts, all > 0; read-only.
        """
        within, spanning = self._run_gap_counts
        run_values, run_counts = self.run_iteration_time, within
        if not self._constant_speed:
            run_values, run_counts = self._gaps_within_varying_runs(within)
        values = np.concatenate([self._first_gap[self._decoding], self._boundary_gap[1:], run_values])
        counts = np.concatenate(
            [np.ones(int(self._decoding.sum()), dtype=np.int64), spanning[1:], run_counts]
        )
        keep = counts > 0
        return self._user_gaps(values[keep], counts[keep])

    def _gaps_within_varying_runs(self, within: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The gaps inside the runs when some runs speed up or slow down (a context term):
        a run of constant speed keeps one value with its count; in the others every
        iteration after the first is a value of its own, counted once per request decoding
        in it and in the iteration before (O(iterations of those runs))."""
        varying = (self._step != 0) & (self.run_iterations >= 2)
        runs = np.flatnonzero(varying)
        later = self.run_iterations[runs] - 1  # iterations after each run's first
        run = np.repeat(runs, later)
        offset = np.arange(run.size) - np.repeat(np.cumsum(later) - later, later) + 1
        g = self.run_first_iteration[run] + offset
        decoding = self._decoding
        opens = np.sort(self.request_decode_start[decoding])
        closes = np.sort(self.request_decode_end[decoding])
        # Decoding in g - 1 and in g: started by g - 1, not ended by g (an end <= g implies a
        # start <= g - 1, so the difference counts exactly those).
        pairs = np.searchsorted(opens, g - 1, side="right") - np.searchsorted(closes, g, side="right")
        values = np.concatenate([self.run_iteration_time[~varying], self._duration_of_iteration(run, offset)])
        return values, np.concatenate([within[~varying], pairs.astype(np.int64)])

    @cached_property
    def _piece_tbt_mean(self) -> np.ndarray:
        """Mean time between tokens of each piece: (finish - prefill end) / tokens.

        NaN for a piece that decodes nothing.
        """
        tokens = self.request_decode_end - self.request_decode_start
        decoding = self._decoding
        mean = (self.finish - self.prefill_end) / np.where(decoding, tokens, 1)
        return read_only(np.where(decoding, mean, np.nan))

    @cached_property
    def tbt_max(self) -> np.ndarray:
        """Largest time between tokens of each user request, the gaps across its preemptions
        included (NaN for one with a piece that decodes nothing)."""
        if self.request_parent is None:
            return self._piece_tbt_max
        longest = np.full(len(self.requests), -np.inf)
        # np.maximum keeps a NaN, so a request with a piece that decodes nothing stays NaN.
        np.maximum.at(longest, self.request_parent, self._tbt_max_from(self._user_first_gap))
        return read_only(longest)

    @cached_property
    def _piece_tbt_max(self) -> np.ndarray:
        """Largest time between tokens of each piece, from its own prefill's end (NaN for one
        that decodes nothing)."""
        return self._tbt_max_from(self._first_gap)

    def _tbt_max_from(self, first_gap: np.ndarray) -> np.ndarray:
        """Largest gap of each piece whose first gap is ``first_gap``'s."""
        decoding = self._decoding
        lo = np.where(decoding, self.request_decode_start, 0)
        hi = np.where(decoding, self.request_decode_end, 1)
        best = first_gap.copy()
        if not self.num_runs:
            return read_only(best)
        length, first = self.run_iterations, self.run_first_iteration
        boundary = self._boundary_gap
        run_lo, _, _ = self._locate(lo)
        run_hi, _, _ = self._locate(hi - 1)

        # A run's iteration times form an arithmetic series, so the longest of a stretch of
        # them is at one end of it.
        def longest(run: np.ndarray, lo_offset: Any, hi_offset: Any) -> np.ndarray:
            return np.maximum(
                self._duration_of_iteration(run, lo_offset), self._duration_of_iteration(run, hi_offset)
            )

        # The first run holds gaps of its iteration times when the request has two iterations
        # there: those of its second to its last iteration in the run.
        in_first = np.minimum(hi, first[run_lo] + length[run_lo]) - lo
        own_lo = lo - first[run_lo]
        best = np.where(
            in_first >= 2, np.maximum(best, longest(run_lo, own_lo + 1, own_lo + in_first - 1)), best
        )
        # The last run (when another): the gap across its start, and its own when two iterations.
        later = run_hi > run_lo
        best = np.where(later, np.maximum(best, boundary[run_hi]), best)
        best = np.where(
            later & (hi - first[run_hi] >= 2),
            np.maximum(best, longest(run_hi, 1, hi - 1 - first[run_hi])),
            best,
        )
        # Runs in between: all their gaps are the request's.
        every = np.arange(self.num_runs)
        inner = np.maximum(boundary, np.where(length >= 2, longest(every, 1, length - 1), -np.inf))
        best = np.maximum(best, range_max(inner, run_lo + 1, run_hi))
        return read_only(np.where(decoding, best, np.nan))

    # ---------------------------------------------------------------- metrics
    @cached_property
    def busy_time(self) -> float:
        """Client-seconds spent prefilling or decoding a request."""
        stage_len = self.stage_end - self.stage_start
        prefill = float(stage_len[self.request_prefill_stage].sum())
        # Each request decodes from the start of its first iteration to the end of its last,
        # less the prefill stages in between: the decode time elapsed between the two.
        lo, hi = self.request_decode_start, self.request_decode_end
        ranged = (lo >= 0) & (lo <= hi) & (hi <= self.num_iterations)
        decode = float((self._decode_time_before(hi[ranged]) - self._decode_time_before(lo[ranged])).sum())
        return prefill + decode

    def _decode_time_before(self, iterations: np.ndarray) -> np.ndarray:
        """Decode seconds before each iteration in ``0..num_iterations`` starts."""
        if not self.num_runs:
            return np.zeros(iterations.shape)
        # The run holding g, or for g == num_iterations the last run (its offset then is its length).
        run = run_holding(self.run_first_iteration, self.run_iterations, iterations)
        offset = iterations - self.run_first_iteration[run]
        return self._decode_time_before_run[run] + self._elapsed(run, offset)

    @property
    def utilization(self) -> float:
        """Busy client-time over ``clients * makespan`` (the coloured share of the Gantt chart)."""
        span = self.makespan
        return self.busy_time / (self.clients * span) if span > 0 else 0.0

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

    def summary(self, slo_ttft: float | None = None, slo_tbt: float | None = None) -> dict[str, Any]:
        """Headline figures of the run.

        Parameters
        ----------
        slo_ttft, slo_tbt
            Latency targets in seconds for goodput (see :meth:`meets_slo`); None: no target.

        Returns
        -------
        dict
            ``requests``, ``clients``, ``makespan_s``, ``utilization``, ``tokens_per_s``,
            ``prefill_stages``, ``decode_iterations``, ``prefill_time_s``, ``decode_time_s``;
            mean, p50, p90 and p99 (numpy's linear percentiles) of ``ttft``, ``latency`` and
            ``e2e`` (the same figures) over user requests, and of
            ``tbt`` over every gap between tokens of every user request (not over per-request
            means; ``tbt_mean_s`` is the token-weighted mean gap); p50, p90, p99 of ``normalized_latency``;
            ``requests_per_s`` (requests over makespan); ``goodput_rps`` (requests meeting
            both targets over makespan), ``slo_attainment`` (their share) and the targets
            ``slo_ttft_s``, ``slo_tbt_s`` (None when not given); ``mode`` (``competition``) and
            ``machines`` (1), the keys every mode's summary has
            (:data:`~llmsched.core.schedule.SUMMARY_KEYS`); last ``preemptions`` and
            ``recomputed_tokens``, totals over the user requests (0 without preemption).

        Raises
        ------
        TypeError, ValueError
            A target that is not None or a number > 0 (``inf`` allowed).
        """
        goodput = self.goodput_figures(slo_ttft, slo_tbt)  # the targets checked before the rest
        out: dict[str, Any] = {
            "requests": len(self.requests),
            "clients": self.clients,
            "makespan_s": self.makespan,
            "utilization": self.utilization,
            "tokens_per_s": self.tokens_per_s,
            "prefill_stages": self.prefill_stages,
            "decode_iterations": self.decode_iterations,
            "prefill_time_s": self.prefill_time_total,
            "decode_time_s": self.decode_time_total,
        }
        out.update(self.latency_figures())
        out.update(goodput)
        out["mode"] = self.mode
        out["machines"] = self.machines
        # Last, so that the keys summary() always had keep their order.
        out.update(self._preemption_figures())
        out["rejected"] = int(self.rejected.sum())
        return out

    # ------------------------------------------------------------ dataframes
    def request_frame(self, slo_ttft: float | None = None, slo_tbt: float | None = None) -> pd.DataFrame:
        """One row per user request: the columns of ``requests``, then ``machine`` (0),
        ``client``, ``prefill_stage`` and ``prefill_end`` (of its first piece), ``finish`` (of
        its last), ``ttft``, ``latency``, ``tbt_mean``, ``tbt_max``, ``e2e``,
        ``normalized_latency``, ``preemptions`` and ``recomputed_tokens`` (with pieces only)
        and ``meets_slo`` (against the targets, see :meth:`meets_slo`)."""
        frame = self._request_frame(self.meets_slo(slo_ttft, slo_tbt), **self._placement_columns())
        # The largest gap, which only this mode tracks, beside the mean one.
        frame.insert(list(frame.columns).index("tbt_mean") + 1, "tbt_max", self.tbt_max)
        return frame

    def memory_in_use(self) -> pd.DataFrame:
        """KV-cache memory in use over time, one row per run of decode iterations (``start``,
        ``end``, ``blocks`` in its last iteration, ``tokens``, ``share`` of the engine's): see
        :mod:`llmsched.engines.memory`.

        Raises
        ------
        ValueError
            When the schedule's engine has no KV-cache memory.
        """
        from llmsched.engines.memory import memory_in_use

        return memory_in_use(self)

    def piece_frame(self, slo_ttft: float | None = None, slo_tbt: float | None = None) -> pd.DataFrame:
        """One row per piece (index ``piece``): the workload's columns, ``parent`` (its user
        request), then the columns of :meth:`request_frame` for the piece as if it were a
        request of its own (without ``preemptions`` and ``recomputed_tokens``): without
        preemption, the request frame with a ``parent`` column.

        Raises
        ------
        TypeError, ValueError
            A target that is not None or a number > 0 (``inf`` allowed).
        """
        frame = self._piece_frame(slo_ttft, slo_tbt, **self._placement_columns())
        frame.insert(list(frame.columns).index("tbt_mean") + 1, "tbt_max", self._piece_tbt_max)
        return frame

    def _placement_columns(self) -> dict[str, np.ndarray]:
        """Where and when each piece was prefilled: the frames' mode columns."""
        return {
            "machine": self.request_machine,
            "client": self.request_client,
            "prefill_stage": self.request_prefill_stage,
            "prefill_end": self.prefill_end,
        }

    def stage_work(self) -> dict[str, np.ndarray]:
        """What each stage computed, as a cost model prices it (int64 arrays, one per stage).

        ``prompt_tokens`` and ``prompt_squares`` (the sum of the squared prompt lengths) of a
        prefill stage; ``iterations``, ``decoded_tokens`` (one per active client and
        iteration) and ``context_tokens`` (context read, summed over the stage's iterations)
        of a decode stage; zeros elsewhere. All exact: ``context_tokens`` holds Python ints
        (dtype object) in the rare schedule whose stages read more than about ``2**62``.
        Under :class:`~llmsched.ContextCostModel` a stage lasts ``a_p + b_p tokens + c_p
        squares`` or ``a_d iterations + b_d decoded + c_d context``.
        """
        n = self.num_stages
        prompt = self.workload.prompt_tokens
        placed = (self.request_prefill_stage >= 0) & (self.request_prefill_stage < n)
        # Exact integer sums (np.bincount would add in float64).
        tokens = np.zeros(n, dtype=np.int64)
        squares = np.zeros(n, dtype=np.int64)
        np.add.at(tokens, self.request_prefill_stage[placed], prompt[placed])
        np.add.at(squares, self.request_prefill_stage[placed], prompt[placed].astype(np.int64) ** 2)
        seg_req, seg_stage, it_lo, it_hi = self._decode_segments()
        count = it_hi - it_lo
        offset = prompt[seg_req] - self.request_decode_start[seg_req]
        decoded = np.zeros(n, dtype=np.int64)
        np.add.at(decoded, seg_stage, count)
        # sum over g in [lo, hi) of (prompt + g - decode_start) = count * (prompt + (lo + hi - 1) / 2
        # - decode_start), exact in int64 unless a stage reads more than about 2**62 tokens of
        # context (outputs near 2**31 tokens); then in Python ints.
        estimate = np.abs(count.astype(np.float64) * (offset + (it_lo + it_hi) / 2.0))
        exact_kind: Any = np.int64 if not estimate.size or estimate.sum() < 2.0**62 else object
        count_x, offset_x = count.astype(exact_kind), offset.astype(exact_kind)
        lo_x, hi_x = it_lo.astype(exact_kind), it_hi.astype(exact_kind)
        context = count_x * offset_x + (lo_x + hi_x - 1) * count_x // 2
        read = np.zeros(n, dtype=exact_kind)
        np.add.at(read, seg_stage, context)
        is_prefill = self.stage_kind == PREFILL
        return {
            "prompt_tokens": np.where(is_prefill, tokens, 0).astype(np.int64),
            "prompt_squares": np.where(is_prefill, squares, 0).astype(np.int64),
            "iterations": np.where(is_prefill, 0, self.stage_iterations).astype(np.int64),
            "decoded_tokens": np.where(is_prefill, 0, decoded).astype(np.int64),
            "context_tokens": np.where(is_prefill, 0, read),  # int64, or Python ints past 2**62
        }

    def stage_frame(self) -> pd.DataFrame:
        """One row per stage: ``machine`` (0), ``kind``, ``start``, ``end``, ``duration``,
        ``tokens`` (prompt tokens a prefill stage prefilled, output tokens a decode stage
        decoded), ``requests`` (prefilled or decoding in it), then what it computed
        (:meth:`stage_work`: ``prompt_tokens``, ``prompt_squares``, ``iterations``,
        ``decoded_tokens``, ``context_tokens``)."""
        import pandas as pd

        n = self.num_stages
        work = self.stage_work()
        placed = (self.request_prefill_stage >= 0) & (self.request_prefill_stage < n)
        _, seg_stage, _, _ = self._decode_segments()
        requests = np.bincount(self.request_prefill_stage[placed], minlength=n)[:n]
        requests = requests + np.bincount(seg_stage, minlength=n)[:n]
        return pd.DataFrame(
            {
                "machine": np.zeros(n, dtype=np.int64),
                "kind": KIND_NAMES[self.stage_kind],
                "start": self.stage_start,
                "end": self.stage_end,
                "duration": self.stage_end - self.stage_start,
                "tokens": work["prompt_tokens"] + work["decoded_tokens"],
                "requests": requests.astype(np.int64),
                **work,
            }
        ).rename_axis("stage")

    def _decode_segments(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every (request, decode stage) pair in which the request decoded: the request,
        the stage, and the half-open range of global iterations it decoded in there."""
        n = len(self.workload)
        decode_stages = np.flatnonzero(self.stage_kind == DECODE)
        firsts = self.stage_first_iteration[decode_stages]
        # Decode stage holding each request's first and last decode iteration.
        lo = np.searchsorted(firsts, self.request_decode_start, side="right") - 1
        hi = np.searchsorted(firsts, self.request_decode_end - 1, side="right") - 1
        counts = np.maximum(hi - lo + 1, 0)
        seg_req = np.repeat(np.arange(n), counts)
        offsets = np.arange(seg_req.size) - np.repeat(np.cumsum(counts) - counts, counts)
        seg_pos = np.repeat(lo, counts) + offsets
        seg_stage = decode_stages[seg_pos]
        stage_lo = self.stage_first_iteration[seg_stage]
        stage_hi = stage_lo + self.stage_iterations[seg_stage]
        it_lo = np.maximum(stage_lo, self.request_decode_start[seg_req])
        it_hi = np.minimum(stage_hi, self.request_decode_end[seg_req])
        return seg_req, seg_stage, it_lo, it_hi

    def segments(self) -> dict[str, np.ndarray]:
        """Every (stage, client) segment in which a client worked on a request, as arrays.

        Keys: ``stage``, ``kind``, ``request``, ``client``, ``start``, ``end``, ``tokens``
        (prompt tokens for a prefill segment, decoded tokens for a decode segment).
        """
        n = len(self.workload)
        req = np.arange(n)
        seg_req, seg_stage, it_lo, it_hi = self._decode_segments()
        return {
            "stage": np.concatenate([self.request_prefill_stage, seg_stage]),
            "kind": np.concatenate(
                [np.full(n, PREFILL, dtype=np.int8), np.full(seg_req.size, DECODE, dtype=np.int8)]
            ),
            "request": np.concatenate([req, seg_req]),
            "client": np.concatenate([self.request_client, self.request_client[seg_req]]),
            "start": np.concatenate(
                [self.stage_start[self.request_prefill_stage], self.iteration_start_at(it_lo)]
            ),
            "end": np.concatenate([self.prefill_end, self.iteration_end_at(it_hi - 1)]),
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
                "kind": KIND_NAMES[seg["kind"]],
                "request": seg["request"],
                "client": seg["client"],
                "start": seg["start"],
                "end": seg["end"],
                "tokens": seg["tokens"],
            }
        )
        return frame.sort_values(["start", "client"], kind="stable").reset_index(drop=True)

    # ---------------------------------------------------------------- checks
    def validate(self, **options: Any) -> list[Violation]:
        """Every way the schedule breaks the system model (:func:`llmsched.validate`, given
        ``options``: ``skip``, ``rtol``, ``atol``); empty when it is valid."""
        from llmsched.engines.competition.validate import validate

        return validate(self, **options)

    # ---------------------------------------------------------------- exports
    def chrome_trace(self) -> dict[str, Any]:
        """The schedule as a Chrome trace (Trace Event Format) for ui.perfetto.dev or
        chrome://tracing: an ``engine`` track with a slice per stage and a ``client J``
        track per client that worked, with a slice per prefill and decode segment
        (``prefill r123``, ``decode r123``); times in integer microseconds. See
        :mod:`llmsched.engines.competition.export` for the layout; :meth:`write_chrome_trace`
        writes it.

        Raises
        ------
        ValueError
            A stage or segment time that is not finite.
        """
        from llmsched.engines.competition.export import chrome_trace

        return chrome_trace(self)

    def to_chrome_trace(self, path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
        """:meth:`chrome_trace`, written to ``path`` as :meth:`write_chrome_trace` writes it
        when a path is given.

        Raises
        ------
        TypeError, ValueError
            A path that cannot be written (a folder, a missing folder, no permission),
            named in the message and checked before the trace is built.
        """
        return self.chrome_trace() if path is None else self.write_chrome_trace(path)

    # Older names of the writers, kept for the callers that use them.
    to_requests_csv = EngineSchedule.write_requests_csv
    to_stages_csv = EngineSchedule.write_stages_csv

    def plot(self, **kwargs: Any) -> Figure:
        """Gantt chart of clients over time; see :func:`llmsched.plot.gantt`."""
        from llmsched.plot import gantt

        return gantt(self, **kwargs)
