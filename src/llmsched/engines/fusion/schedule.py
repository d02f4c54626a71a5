"""The fused engine's schedule (PD fusion, chunked prefill): iterations that carry every decoding
request and prompt chunks up to a token budget, and each request's placement in them."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from llmsched.core.cost import (
    CostModel,
    decode_seconds,
    prefill_seconds,
)
from llmsched.core.memory import KVMemory
from llmsched.core.schedule import EngineSchedule, NumberedRuns, SteppedRuns, read_only
from llmsched.core.workload import Workload
from llmsched.engines.rule import DECODE_ONLY

if TYPE_CHECKING:
    import pandas as pd

    from llmsched.core.violations import Violation

__all__ = ["FusedSchedule", "frozen_array", "sit_out_corrections"]


@functools.lru_cache(maxsize=64)
def fixed_cost(cost: Any) -> float:
    """The smaller of a prefill stage's and a decode iteration's fixed costs, once per model
    (the models fusion takes are frozen dataclasses, hashable)."""
    return min(float(prefill_seconds(cost, 0, 0)), float(decode_seconds(cost, 0, 0)))


def frozen_array(name: str, values: Any, dtype: Any) -> np.ndarray:
    arr = np.array(values, dtype=dtype, copy=True)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    return read_only(arr)


def sit_out_corrections(
    first_iteration: np.ndarray,
    prompt: np.ndarray,
    decode_start: np.ndarray,
    decode_end: np.ndarray,
    skip_request: np.ndarray,
    skip_run: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """What sit-outs take from each run's decoding count and context, against the counts of
    the decode ranges alone (:func:`~llmsched.core.schedule.decoding_at`): ``(requests,
    tokens)``, one each per run (int64).

    A request sitting run ``k`` out is not among its decoding requests (one fewer; its
    ``prompt + first_iteration[k] - decode_start`` fewer context tokens, less the iterations
    it sat out before, which the ranges counted as tokens); in every later run of its range
    its context is one token smaller per iteration it sat out before. The skips must name
    requests and runs that exist, each within its request's decode range (as the validator
    checks first).
    """
    runs = first_iteration.size
    count = np.zeros(runs, dtype=np.int64)
    tokens = np.zeros(runs, dtype=np.int64)
    if not skip_request.size:
        return count, tokens
    order = np.lexsort((skip_run, skip_request))
    request, run = skip_request[order], skip_run[order]
    # Each skip's rank among its request's earlier skips: the iterations it had sat out before.
    earlier = np.arange(request.size) - np.searchsorted(request, request, side="left")
    np.add.at(count, run, 1)
    held = prompt[request] + first_iteration[run] - decode_start[request] - earlier
    np.add.at(tokens, run, held)
    # From the run after each skip to the last run of its request's range: one token fewer.
    end_run = np.searchsorted(first_iteration, decode_end[request], side="left")
    fewer = np.zeros(runs + 1, dtype=np.int64)
    np.add.at(fewer, run + 1, 1)
    np.add.at(fewer, end_run, -1)
    tokens += np.cumsum(fewer[:runs])
    return count, tokens


@dataclass(frozen=True, eq=False)
class FusedSchedule(NumberedRuns, SteppedRuns, EngineSchedule):
    """What a fused engine ran: runs of iterations, the prompt chunks in them, and each
    request's client and decode range.

    Runs, in time order: run ``r`` is ``run_iterations[r] >= 1`` consecutive iterations from
    ``run_start[r]``, each with ``run_decoding[r]`` decoding requests and ``run_chunk_tokens[r]``
    prompt tokens of ``run_chunk_squares[r]`` squared tokens (a run with chunks has one
    iteration). Its first iteration reads ``run_context[r]`` context tokens and lasts
    ``run_first_time[r]``; each next one lasts ``run_step[r]`` longer (``c_d`` per decoding
    request: the context grows by one token per decoding request and iteration). Iterations
    are numbered 0, 1, ... over the runs.

    Chunks: chunk ``k`` gives ``chunk_tokens[k]`` tokens of request ``chunk_request[k]``'s
    prompt in run ``chunk_run[k]``. Requests: ``request_client`` and the half-open range
    ``[request_decode_start, request_decode_end)`` of iterations in which each decodes.

    ``whole_prompts`` marks an engine that never splits a prompt (Orca's mixed iterations,
    :mod:`llmsched.engines.orca.rule`): each prompt is one chunk, and an iteration whose one
    chunk is a whole prompt may hold more than the budget (a prompt longer than the budget
    runs alone, every decoding request sitting the iteration out).

    ``padded`` marks padded insertion (:mod:`llmsched.engines.padded.rule`): whole prompts,
    and a mixed iteration runs its new prompts and its decoding requests' next tokens padded
    to its longest prompt, priced by
    :func:`~llmsched.engines.fusion.iteration.padded_iteration_time`.

    Sit-outs (``skip_request``, ``skip_run``; empty but under Orca's rule): request
    ``skip_request[s]`` decoded no token in mixed iteration ``skip_run[s]``, though it held
    its client and its cache (its decode range covers the iteration). A request's decode
    range then holds its output tokens and the iterations it sat out; ``run_decoding`` and
    ``run_context`` count the requests that decoded.

    ``request_phase`` (None, or per request one of :data:`~llmsched.engines.rule.WHOLE`,
    :data:`~llmsched.engines.rule.PREFILL_ONLY` and :data:`~llmsched.engines.rule.DECODE_ONLY`)
    comes from an engine of a cluster that splits a request's phases between machines: a
    prefill-only request has chunks and an empty decode range (its prompt's first token is its
    work here; it holds its client to the end of its last chunk's iteration), a decode-only
    request no chunk (its prompt was prefilled elsewhere; its ``prefill_end`` is its arrival,
    when its keys and values are here) and decodes its output tokens from the iteration it was
    taken in on.

    ``request_parent`` (None, or the user request of each request, then called a *piece*)
    and ``memory`` (the engine's KV-cache memory, or None) come from an engine with memory,
    which preempts by recompute: each stretch of a request's work is then a piece of the
    workload, prefilled in chunks of its own (a later piece's prompt holds the tokens decoded
    before). Per piece: the placement arrays, ``prefill_end``, ``finish``, the run and chunk
    tables and :meth:`piece_frame`. Per user request (``requests``): ``ttft``,
    ``latency``, ``e2e``, ``normalized_latency``, ``tbt_mean``, :meth:`meets_slo`,
    ``preemptions``, ``recomputed_tokens``, :meth:`request_frame`, :meth:`summary` and
    :meth:`tbt_distribution` (see :mod:`llmsched.core.schedule`).

    It meets :class:`~llmsched.core.schedule.ScheduleLike`: one engine (machine 0) of
    ``clients`` clients, whose runs are its stages.
    """

    mode: ClassVar[str] = "fusion"

    workload: Workload
    cost: CostModel
    clients: int
    token_budget: int
    run_start: np.ndarray
    run_iterations: np.ndarray
    run_first_time: np.ndarray
    run_step: np.ndarray
    run_decoding: np.ndarray
    run_context: np.ndarray
    run_chunk_tokens: np.ndarray
    run_chunk_squares: np.ndarray
    chunk_request: np.ndarray
    chunk_run: np.ndarray
    chunk_tokens: np.ndarray
    request_client: np.ndarray
    request_decode_start: np.ndarray
    request_decode_end: np.ndarray
    makespan: float
    info: dict[str, Any] = field(default_factory=dict)
    whole_prompts: bool = False
    # None: each request is a user request of its own (no preemption).
    request_parent: np.ndarray | None = None
    memory: KVMemory | None = None
    skip_request: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    skip_run: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    # None: every request does both phases here.
    request_phase: np.ndarray | None = None
    padded: bool = False

    def __post_init__(self) -> None:
        self._freeze_pieces()
        if self.request_phase is not None:
            object.__setattr__(
                self, "request_phase", frozen_array("request_phase", self.request_phase, np.int64)
            )
        object.__setattr__(self, "whole_prompts", bool(self.whole_prompts))
        object.__setattr__(self, "padded", bool(self.padded))
        for name, dtype in (
            ("run_start", np.float64),
            ("run_iterations", np.int64),
            ("run_first_time", np.float64),
            ("run_step", np.float64),
            ("run_decoding", np.int64),
            ("run_context", np.int64),
            ("run_chunk_tokens", np.int64),
            ("run_chunk_squares", np.int64),
            ("chunk_request", np.int64),
            ("chunk_run", np.int64),
            ("chunk_tokens", np.int64),
            ("request_client", np.int64),
            ("request_decode_start", np.int64),
            ("request_decode_end", np.int64),
            ("skip_request", np.int64),
            ("skip_run", np.int64),
        ):
            object.__setattr__(self, name, frozen_array(name, getattr(self, name), dtype))
        object.__setattr__(self, "makespan", float(self.makespan))

    def __repr__(self) -> str:
        pieces = "" if self.request_parent is None else f", pieces={len(self.workload)}"
        return (
            f"FusedSchedule(requests={len(self.requests)}{pieces}, clients={self.clients}, "
            f"token_budget={self.token_budget}, iterations={self.num_iterations}, "
            f"makespan={self.makespan:.3f}s)"
        )

    # ------------------------------------------------------------------ runs
    @property
    def prefill_stages(self) -> int:
        """Prefill stages: none, the chunks ride in the iterations."""
        return 0

    @property
    def decode_iterations(self) -> int:
        """Iterations in which some request decodes."""
        return int(self.run_iterations[self.run_decoding > 0].sum())

    # -------------------------------------------------------------- requests
    @cached_property
    def prefill_end(self) -> np.ndarray:
        """When each request's last chunk ended: its first token (NaN without chunks)."""
        last = np.full(len(self.workload), -1, dtype=np.int64)
        if self.chunk_run.size:
            np.maximum.at(last, self.chunk_request, self.chunk_run)
        ends = np.where(last >= 0, self.run_end[np.maximum(last, 0)] if self.num_runs else np.nan, np.nan)
        if self.request_phase is not None:  # a decode-only request's keys and values arrived ready
            ends = np.where(self.request_phase == DECODE_ONLY, self.workload.arrival, ends)
        return read_only(ends)

    @cached_property
    def finish(self) -> np.ndarray:
        return read_only(self.iteration_end_at(self.request_decode_end - 1))

    @cached_property
    def request_sat_out(self) -> np.ndarray:
        """How many iterations each piece sat out while decoding (0 but under Orca's rule)."""
        return read_only(np.bincount(self.skip_request, minlength=len(self.workload)).astype(np.int64))

    @cached_property
    def _token_iterations(self) -> tuple[np.ndarray, np.ndarray]:
        """The iterations in which the pieces made their tokens, as ``(piece, iteration)``
        arrays in piece and time order: each decoding piece's range without its sit-outs."""
        pieces = np.flatnonzero(self._decoding)
        lo, hi = self.request_decode_start[pieces], self.request_decode_end[pieces]
        lengths = hi - lo
        piece = np.repeat(pieces, lengths)
        iteration = np.repeat(lo, lengths) + (
            np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        )
        if self.skip_request.size:
            width = self.num_iterations + 1
            skipped = self.skip_request * width + self.run_first_iteration[self.skip_run]
            keep = ~np.isin(piece * width + iteration, skipped)
            piece, iteration = piece[keep], iteration[keep]
        return read_only(piece), read_only(iteration)

    @cached_property
    def _token_heads(self) -> np.ndarray:
        """Whether each token of :attr:`_token_iterations` is its piece's first."""
        piece, _ = self._token_iterations
        head = np.ones(piece.size, dtype=bool)
        head[1:] = piece[1:] != piece[:-1]
        return read_only(head)

    @cached_property
    def _token_gaps(self) -> np.ndarray:
        """Each token's gap (in :attr:`_token_iterations`' order) with sit-outs: from the
        piece's previous token, or its first chunk's end, to its iteration's end."""
        return read_only(self.token_gaps()[1])

    def token_gaps(self, since: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Every token's gap, as ``(piece, seconds)`` arrays in piece and time order: from the
        piece's token before it, or, for its first token, from ``since[piece]`` (by default
        its ``prefill_end``), to the end of the iteration that makes it; iterations a piece
        sat out add to its next gap. A cluster that moved a piece's keys and values gives the
        end of its prompt on the machine that prefilled it."""
        piece, iteration = self._token_iterations
        ends = self.iteration_end_at(iteration)
        before = np.empty_like(ends)
        if ends.size:
            before[1:] = ends[:-1]
            head = self._token_heads
            first = self.prefill_end if since is None else np.asarray(since, dtype=np.float64)
            before[head] = first[piece[head]]
        return piece, ends - before

    def tbt_distribution(self) -> tuple[np.ndarray, np.ndarray]:
        """Every gap between tokens of every user request, as values with counts: a piece
        decodes in every iteration from its first token on, so each iteration's time is a gap
        of each piece decoding in it (a run of constant time is one value; a lengthening run
        one value per iteration); but the first gap of a piece resuming a preempted request
        runs from the previous piece's last token to the end of its first decode iteration.
        With sit-outs each token's gap is counted on its own, from the piece's token before
        it (or its prompt's end) to the end of its iteration."""
        if self.skip_request.size:
            gaps, tally = np.unique(self._token_gaps, return_counts=True)
            return self._user_gaps(gaps, tally.astype(np.int64))
        decoding = self.run_decoding > 0
        constant = decoding & ((self.run_step == 0) | (self.run_iterations == 1))
        values = [self.run_first_time[constant]]
        counts = [self.run_decoding[constant] * self.run_iterations[constant]]
        for r in np.flatnonzero(decoding & ~constant).tolist():
            k = np.arange(int(self.run_iterations[r]))
            values.append(self.run_first_time[r] + self.run_step[r] * k)
            counts.append(np.full(k.size, int(self.run_decoding[r]), dtype=np.int64))
        return self._user_gaps(np.concatenate(values), np.concatenate(counts).astype(np.int64))

    @cached_property
    def _first_gap(self) -> np.ndarray:
        """Each piece's first gap as :meth:`tbt_distribution` counts it: the time of its first
        decode iteration, computed as that method computes it (NaN for a piece that decodes
        nothing)."""
        if not self.num_runs:
            return read_only(np.full(len(self.workload), np.nan))
        if self.skip_request.size:
            gap = np.full(len(self.workload), np.nan)
            piece, head = self._token_iterations[0], self._token_heads
            gap[piece[head]] = self._token_gaps[head]
            return read_only(gap)
        run, offset, _ = self._locate(self.request_decode_start)
        gap = self.run_first_time[run] + self.run_step[run] * offset
        return read_only(np.where(self._decoding, gap, np.nan))

    @cached_property
    def _first_token(self) -> np.ndarray:
        """The iteration of each piece's first token: its decode start, but for the
        iterations it sat out right then."""
        if not self.skip_request.size:
            return self.request_decode_start
        first = self.request_decode_start.copy()
        (piece, iteration), head = self._token_iterations, self._token_heads
        first[piece[head]] = iteration[head]
        return read_only(first)

    @cached_property
    def _piece_tbt_mean(self) -> np.ndarray:
        """Each piece's mean gap between tokens (its decode time over its tokens)."""
        start, end = self.request_decode_start, self.request_decode_end
        tokens = end - start - self.request_sat_out
        return read_only((self.iteration_end_at(end - 1) - self.prefill_end) / np.maximum(tokens, 1))

    # ---------------------------------------------------------------- totals
    @cached_property
    def busy_time(self) -> float:
        """Seconds the engine spent running iterations."""
        return float((self.run_end - self.run_start).sum())

    @property
    def busy(self) -> float:
        """Share of the makespan the engine spent running iterations."""
        return self.busy_time / self.makespan if self.makespan > 0 else 0.0

    @cached_property
    def utilization(self) -> float:
        """Client-time held by requests (from the start of a request's first chunk to its
        last token) over ``clients * makespan``, as ``Schedule.utilization``."""
        if not self.makespan > 0 or not self.chunk_run.size:
            return 0.0
        first = np.full(len(self.workload), self.num_runs, dtype=np.int64)
        np.minimum.at(first, self.chunk_request, self.chunk_run)
        start = self.run_start[np.minimum(first, self.num_runs - 1)]
        if self.request_phase is not None:  # a decode-only request holds its client from its first token
            joined = self.request_phase == DECODE_ONLY
            start = np.where(joined, self.iteration_start_at(self.request_decode_start), start)
        return float(np.nansum(self.finish - start)) / (self.clients * self.makespan)

    def summary(self, slo_ttft: float | None = None, slo_tbt: float | None = None) -> dict[str, Any]:
        """Headline figures, with the keys of :meth:`llmsched.Schedule.summary` where they
        mean the same (every key of :data:`~llmsched.core.schedule.SUMMARY_KEYS`;
        ``prefill_stages`` is 0: chunks ride in the iterations; ``decode_iterations`` counts
        the iterations with decoding requests), and ``token_budget``, ``busy`` (the engine's
        busy share of the makespan), ``iterations`` (all of them), ``chunks``,
        ``mixed_iterations`` (iterations holding both decoding and chunks), ``sit_outs`` (an
        iteration a decoding request sat out, under Orca's rule; 0 else), ``preemptions``
        and ``recomputed_tokens`` (totals over the user requests; 0 without preemption).
        ``requests`` and the latency and goodput figures are over the user requests.

        Raises
        ------
        TypeError, ValueError
            A target that is not None or a number > 0 (``inf`` allowed).
        """
        goodput = self.goodput_figures(slo_ttft, slo_tbt)  # the targets checked before the rest
        mixed = (self.run_decoding > 0) & (self.run_chunk_tokens > 0)
        out: dict[str, Any] = {
            "mode": self.mode,
            "requests": len(self.requests),
            "machines": self.machines,
            "clients": self.clients,
            "token_budget": self.token_budget,
            "makespan_s": self.makespan,
            "utilization": self.utilization,
            "busy": self.busy,
            "tokens_per_s": self.tokens_per_s,
            "prefill_stages": self.prefill_stages,
            "iterations": self.num_iterations,
            "decode_iterations": self.decode_iterations,
            "chunks": int(self.chunk_run.size),
            "mixed_iterations": int(self.run_iterations[mixed].sum()),
            "sit_outs": int(self.skip_run.size),
        }
        out.update(self.latency_figures())
        out.update(goodput)
        out.update(self._preemption_figures())
        out["rejected"] = int(self.rejected.sum())
        return out

    def to_frame(self) -> pd.DataFrame:
        """One row per run: ``start``, ``end``, ``iterations``, ``decoding``, ``context``,
        ``chunk_tokens``, ``chunk_squares``, ``first_iteration_s``, ``step_s``."""
        import pandas as pd

        return pd.DataFrame(
            {
                "start": self.run_start,
                "end": self.run_end,
                "iterations": self.run_iterations,
                "decoding": self.run_decoding,
                "context": self.run_context,
                "chunk_tokens": self.run_chunk_tokens,
                "chunk_squares": self.run_chunk_squares,
                "first_iteration_s": self.run_first_time,
                "step_s": self.run_step,
            }
        )

    @cached_property
    def run_chunks(self) -> np.ndarray:
        """How many chunks each run carries (each of another request)."""
        return read_only(
            np.bincount(self.chunk_run, minlength=self.num_runs)[: self.num_runs].astype(np.int64)
        )

    @property
    def run_kind(self) -> np.ndarray:
        """Each run's kind: ``prefill`` (chunks alone), ``decode`` (decoding alone) or
        ``fused`` (both)."""
        chunks, decoding = self.run_chunk_tokens > 0, self.run_decoding > 0
        return np.where(chunks & decoding, "fused", np.where(chunks, "prefill", "decode"))

    def stage_frame(self) -> pd.DataFrame:
        """One row per run (the fused engine's stages), in time order: ``machine`` (0),
        ``kind`` (:attr:`run_kind`), ``start``, ``end``, ``duration``, ``tokens`` (prompt
        tokens of its chunks plus the tokens decoded in it), ``requests`` (decoding or
        prefilling a chunk in it), then ``iterations``, ``first_iteration``, ``decoding``,
        ``chunks``, ``chunk_tokens``, ``chunk_squares``, ``context`` (at its first
        iteration), ``first_iteration_s`` and ``step_s``."""
        import pandas as pd

        return pd.DataFrame(
            {
                "machine": np.zeros(self.num_runs, dtype=np.int64),
                "kind": self.run_kind,
                "start": self.run_start,
                "end": self.run_end,
                "duration": self.run_end - self.run_start,
                "tokens": self.run_chunk_tokens + self.run_decoding * self.run_iterations,
                "requests": self.run_decoding + self.run_chunks,
                "iterations": self.run_iterations,
                "first_iteration": self.run_first_iteration,
                "decoding": self.run_decoding,
                "chunks": self.run_chunks,
                "chunk_tokens": self.run_chunk_tokens,
                "chunk_squares": self.run_chunk_squares,
                "context": self.run_context,
                "first_iteration_s": self.run_first_time,
                "step_s": self.run_step,
            }
        ).rename_axis("stage")

    def request_frame(self, slo_ttft: float | None = None, slo_tbt: float | None = None) -> pd.DataFrame:
        """One row per user request: the columns of ``requests``, then ``machine`` (0),
        ``client`` and ``prefill_end`` (of its first piece), ``finish`` (of its last),
        ``ttft``, ``latency``, ``tbt_mean``, ``e2e``, ``normalized_latency``,
        ``preemptions`` and ``recomputed_tokens`` (with pieces only) and ``meets_slo``
        (against the targets, see :meth:`meets_slo`).

        Raises
        ------
        TypeError, ValueError
            A target that is not None or a number > 0 (``inf`` allowed).
        """
        return self._request_frame(self.meets_slo(slo_ttft, slo_tbt), **self._placement_columns())

    def memory_in_use(self) -> pd.DataFrame:
        """KV-cache memory in use over time, one row per run (``start``, ``end``, ``blocks``
        in its last iteration, ``tokens``, ``share`` of the engine's); a request holds its
        prompt's blocks from its first chunk on (see :mod:`llmsched.engines.memory`).

        Raises
        ------
        ValueError
            When the schedule's engine has no KV-cache memory.
        """
        from llmsched.engines.memory import memory_in_use

        return memory_in_use(self, self.first_chunk_iteration)

    @cached_property
    def first_chunk_iteration(self) -> np.ndarray:
        """The iteration of each piece's first chunk (-1 for a piece without chunks): from it
        on the piece holds its prompt's cache."""
        runs = self.num_runs
        first_run = np.full(len(self.workload), runs, dtype=np.int64)
        np.minimum.at(first_run, self.chunk_request, self.chunk_run)
        if not runs:
            return read_only(np.full(len(self.workload), -1, dtype=np.int64))
        taken = np.where(first_run < runs, self.run_first_iteration[np.minimum(first_run, runs - 1)], -1)
        return read_only(taken.astype(np.int64))

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
        return self._piece_frame(slo_ttft, slo_tbt, **self._placement_columns())

    def _placement_columns(self) -> dict[str, np.ndarray]:
        """Where and when each piece was prefilled: the frames' mode columns."""
        return {
            "machine": self.request_machine,
            "client": self.request_client,
            "prefill_end": self.prefill_end,
        }

    def validate(self, **options: Any) -> list[Violation]:
        """Every rule of PD fusion the schedule breaks (:func:`llmsched.validate_fused`, given
        ``options``: ``skip``, ``rtol``, ``atol``); empty when it is valid."""
        from llmsched.engines.fusion.validate import validate_fused

        return validate_fused(self, **options)

    def chrome_trace(self) -> dict[str, Any]:
        """The schedule as a Chrome trace (Trace Event Format): an ``engine`` track with a slice
        per run and a track per client with its chunks and its decode; see
        :mod:`llmsched.engines.fusion.export`. :meth:`write_chrome_trace` writes it.

        Raises
        ------
        ValueError
            A time that is not finite.
        """
        from llmsched.engines.fusion.export import chrome_trace

        return chrome_trace(self)
