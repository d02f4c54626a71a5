"""PD fusion (chunked prefill): the fused iteration's cost, its schedule, its validator and
its lower bound.

In a *fused* engine (Sarathi-Serve's chunked prefill, vLLM's default) there are no prefill
stages. Every iteration carries every decoding request (one token each) and chunks of
prompts, ``decoding + chunk tokens <= token_budget``. A prompt may span iterations; the
request's first token comes at the end of the iteration that holds its last chunk, and it
decodes in every iteration after that until its last token. A request holds its client
(its slot of KV cache) from its first chunk to its last token.

Cost of a fused iteration (:func:`fused_iteration_time`): an iteration with both a decode
batch and prompt chunks costs the decode iteration plus the prefill stage of its chunks,
less the fixed cost they share (one forward pass instead of two: the smaller of the two
fixed costs, ``min(prefill_time(0), decode_iteration_time(0))``, and no more than the decode
batch's time at no context). An iteration of chunks
alone is a prefill stage, and one of decoding alone a decode iteration, as under
competition. A context-aware model prices a chunk of ``c`` tokens starting at position
``s`` of its prompt by ``(s + c)^2 - s^2`` squared tokens: the chunks of a prompt add up
to its ``p^2``, what it costs prefilled whole.

:class:`FusedSchedule` stores runs of iterations (a run of pure decoding, over which
nothing but the context changes, is one entry however long) and the chunks; the metrics
work from them. :func:`validate_fused` checks every rule of the mode independently of the
simulator (:mod:`llmsched.engines.fusion.rule`), and :func:`fused_lower_bounds` bounds any fused
schedule's makespan from below.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from llmsched.core.checks import positive_int
from llmsched.core.cost import (
    ContextCostModel,
    CostModel,
    LinearCostModel,
    context_rate,
    decode_seconds,
    is_context_aware,
    prefill_seconds,
    request_context,
)
from llmsched.core.instance import check_cost_model, check_instance
from llmsched.core.schedule import RequestTimes, latency_figures, percentiles, read_only
from llmsched.core.violations import Report, Violation, skipped_rules
from llmsched.core.workload import Workload

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "FUSED_RULES",
    "FusedBounds",
    "FusedSchedule",
    "check_fused_instance",
    "check_token_budget",
    "chunk_squares",
    "fused_iteration_time",
    "fused_lower_bounds",
    "validate_fused",
]

# The most tokens one fused iteration may carry.
MAX_TOKEN_BUDGET = 1 << 31


def check_fused_instance(workload: Workload, cost: CostModel, clients: int, token_budget: int) -> int:
    """Check a fused instance before any work; return ``token_budget`` as an int.

    The instance must be valid as under competition (:func:`~llmsched.core.instance.check_instance`,
    the prefill's work bounded as the budget's chunks), the cost model must price stages per
    token (a :class:`~llmsched.LinearCostModel` or a :class:`~llmsched.ContextCostModel`: a
    chunk's time follows from its tokens), and the budget must be at least 2 (a decode token
    and a prompt token, :func:`check_token_budget`). A budget below the clients
    still runs: while the decoding requests fill it, no chunk is added until one finishes.
    """
    if not isinstance(cost, (LinearCostModel, ContextCostModel)):
        raise TypeError(
            f"fusion prices a chunk by its tokens: it needs a LinearCostModel or a ContextCostModel, "
            f"got {type(cost).__name__} (a LevelCostModel prices whole prefill levels)"
        )
    check_cost_model(workload, cost, clients)
    budget = check_token_budget(token_budget)
    check_instance(workload, cost, clients, token_budget=budget)
    return budget


def check_token_budget(token_budget: Any) -> int:
    """``token_budget`` as an int if it is a fused engine's budget: an integer in
    ``[2, 2**31]`` (a decode token and a prompt token at least)."""
    budget = positive_int("token_budget", token_budget, maximum=MAX_TOKEN_BUDGET)
    if budget < 2:
        raise ValueError(f"token_budget must be at least 2 (a decode token and a prompt token), got {budget}")
    return budget


def chunk_squares(start: Any, tokens: Any) -> Any:
    """Squared tokens of a chunk of ``tokens`` prompt tokens from position ``start``:
    ``(start + tokens)^2 - start^2`` (a prompt's chunks add up to its square)."""
    start = np.asarray(start, dtype=np.int64)
    tokens = np.asarray(tokens, dtype=np.int64)
    return tokens * (2 * start + tokens)


def fused_iteration_time(
    cost: CostModel, decoding: Any, context: Any, chunk_tokens: Any, squares: Any
) -> Any:
    """Seconds of fused iterations with ``decoding`` requests at ``context`` tokens and
    ``chunk_tokens`` prompt tokens of ``squares`` squared tokens (scalars or arrays).

    Decoding alone: the decode iteration's time; chunks alone: the prefill stage's time;
    both: their sum less the fixed cost they share (one pass, not two): the smaller of the
    prefill stage's and the decode iteration's fixed costs, and never more than the decode
    batch's own time at no context (a batch table may price a batch below ``a_d``), so an
    iteration never costs less than either of its parts alone.
    """
    decode = decode_seconds(cost, decoding, context)
    prefill = prefill_seconds(cost, chunk_tokens, squares)
    price: Any = cost  # LinearCostModel or ContextCostModel: hashable
    shared = np.minimum(_fixed_cost(price), decode_seconds(cost, decoding, 0))
    if np.ndim(decoding) == 0 and np.ndim(chunk_tokens) == 0:  # the loop's path: no arrays
        if chunk_tokens == 0:
            return float(decode)
        return float(prefill) if decoding == 0 else float(decode + prefill - shared)
    d, c = np.asarray(decoding), np.asarray(chunk_tokens)
    return np.where(c == 0, decode, np.where(d == 0, prefill, decode + prefill - shared)).astype(np.float64)


@functools.lru_cache(maxsize=64)
def _fixed_cost(cost: Any) -> float:
    """The smaller of a prefill stage's and a decode iteration's fixed costs, once per model
    (the models fusion takes are frozen dataclasses, hashable)."""
    return min(float(prefill_seconds(cost, 0, 0)), float(decode_seconds(cost, 0, 0)))


def frozen_array(name: str, values: Any, dtype: Any) -> np.ndarray:
    arr = np.array(values, dtype=dtype, copy=True)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    return read_only(arr)


@dataclass(frozen=True, eq=False)
class FusedSchedule(RequestTimes):
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
    """

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

    def __post_init__(self) -> None:
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
        ):
            object.__setattr__(self, name, frozen_array(name, getattr(self, name), dtype))
        object.__setattr__(self, "makespan", float(self.makespan))

    def __repr__(self) -> str:
        return (
            f"FusedSchedule(requests={len(self.workload)}, clients={self.clients}, "
            f"token_budget={self.token_budget}, iterations={self.num_iterations}, "
            f"makespan={self.makespan:.3f}s)"
        )

    # ------------------------------------------------------------------ runs
    @property
    def num_runs(self) -> int:
        return int(self.run_start.size)

    @cached_property
    def num_iterations(self) -> int:
        return int(self.run_iterations.sum())

    @cached_property
    def run_first_iteration(self) -> np.ndarray:
        return read_only(np.concatenate([[0], np.cumsum(self.run_iterations)[:-1]]).astype(np.int64))

    def _elapsed(self, run: np.ndarray, iterations: np.ndarray) -> np.ndarray:
        """Seconds of the first ``iterations`` iterations of each ``run``."""
        k = iterations.astype(np.float64)
        return k * self.run_first_time[run] + self.run_step[run] * (k * (k - 1) / 2)

    @cached_property
    def run_end(self) -> np.ndarray:
        runs = np.arange(self.num_runs)
        return read_only(self.run_start + self._elapsed(runs, self.run_iterations))

    def iteration_end_at(self, iterations: Any) -> np.ndarray:
        """When each given iteration ended (NaN for an index outside the schedule)."""
        g = np.asarray(iterations, dtype=np.int64)
        inside = (g >= 0) & (g < self.num_iterations)
        safe = np.where(inside, g, 0)
        if not self.num_runs:
            return np.full(g.shape, np.nan)
        run = np.searchsorted(self.run_first_iteration, safe, side="right") - 1
        offset = safe - self.run_first_iteration[run]
        end = self.run_start[run] + self._elapsed(run, offset + 1)
        return np.where(inside, end, np.nan)

    # -------------------------------------------------------------- requests
    @cached_property
    def prefill_end(self) -> np.ndarray:
        """When each request's last chunk ended: its first token (NaN without chunks)."""
        last = np.full(len(self.workload), -1, dtype=np.int64)
        if self.chunk_run.size:
            np.maximum.at(last, self.chunk_request, self.chunk_run)
        ends = np.where(last >= 0, self.run_end[np.maximum(last, 0)] if self.num_runs else np.nan, np.nan)
        return read_only(ends)

    @cached_property
    def finish(self) -> np.ndarray:
        return read_only(self.iteration_end_at(self.request_decode_end - 1))

    def tbt_distribution(self) -> tuple[np.ndarray, np.ndarray]:
        """Every gap between tokens, as values with counts: a request decodes in every
        iteration from its first token on, so each iteration's time is a gap of each request
        decoding in it (a run of constant time is one value; a lengthening run one value per
        iteration)."""
        decoding = self.run_decoding > 0
        constant = decoding & ((self.run_step == 0) | (self.run_iterations == 1))
        values = [self.run_first_time[constant]]
        counts = [self.run_decoding[constant] * self.run_iterations[constant]]
        for r in np.flatnonzero(decoding & ~constant).tolist():
            k = np.arange(int(self.run_iterations[r]))
            values.append(self.run_first_time[r] + self.run_step[r] * k)
            counts.append(np.full(k.size, int(self.run_decoding[r]), dtype=np.int64))
        return read_only(np.concatenate(values)), read_only(np.concatenate(counts).astype(np.int64))

    @cached_property
    def tbt_mean(self) -> np.ndarray:
        """Each request's mean gap between tokens (its decode time over its tokens)."""
        start, end = self.request_decode_start, self.request_decode_end
        return read_only((self.iteration_end_at(end - 1) - self.prefill_end) / np.maximum(end - start, 1))

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
        return float(np.nansum(self.finish - start)) / (self.clients * self.makespan)

    @property
    def tokens_per_s(self) -> float:
        return self.workload.total_output_tokens / self.makespan if self.makespan > 0 else 0.0

    def meets_slo(self, slo_ttft: float | None = None, slo_tbt: float | None = None) -> np.ndarray:
        """Requests whose TTFT and mean TBT are within the targets (None: no target)."""
        meets = np.ones(len(self.workload), dtype=bool)
        if slo_ttft is not None:
            meets &= self.ttft <= slo_ttft
        if slo_tbt is not None:
            meets &= self.tbt_mean <= slo_tbt
        return meets

    def summary(self, slo_ttft: float | None = None, slo_tbt: float | None = None) -> dict[str, Any]:
        """Headline figures, with the keys of :meth:`llmsched.Schedule.summary` where they
        mean the same (``prefill_stages`` is 0: chunks ride in the iterations;
        ``decode_iterations`` counts the iterations with decoding requests), and ``mode``,
        ``token_budget``, ``busy`` (the engine's busy share of the makespan), ``iterations``
        (all of them), ``chunks``, ``mixed_iterations`` (iterations holding both decoding and
        chunks)."""
        n, span = len(self.workload), self.makespan
        mixed = (self.run_decoding > 0) & (self.run_chunk_tokens > 0)
        out: dict[str, Any] = {
            "mode": "fusion",
            "requests": n,
            "clients": self.clients,
            "token_budget": self.token_budget,
            "makespan_s": span,
            "utilization": self.utilization,
            "busy": self.busy,
            "tokens_per_s": self.tokens_per_s,
            "prefill_stages": 0,
            "iterations": self.num_iterations,
            "decode_iterations": int(self.run_iterations[self.run_decoding > 0].sum()),
            "chunks": int(self.chunk_run.size),
            "mixed_iterations": int(self.run_iterations[mixed].sum()),
        }
        out.update(latency_figures(self.ttft, self.latency, *self.tbt_distribution()))
        p50, p90, p99 = percentiles(self.normalized_latency)
        out["normalized_latency_p50_s"], out["normalized_latency_p90_s"] = p50, p90
        out["normalized_latency_p99_s"] = p99
        good = int(np.count_nonzero(self.meets_slo(slo_ttft, slo_tbt)))
        out["requests_per_s"] = n / span if span > 0 else 0.0
        out["goodput_rps"] = good / span if span > 0 else 0.0
        out["slo_attainment"] = good / n if n else 0.0
        out["slo_ttft_s"], out["slo_tbt_s"] = slo_ttft, slo_tbt
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

    def request_frame(self) -> pd.DataFrame:
        """One row per request: the workload's columns, ``client``, ``prefill_end``,
        ``finish``, ``ttft``, ``latency``, ``tbt_mean``."""
        frame = self.workload.to_frame()
        frame["client"] = self.request_client
        frame["prefill_end"] = self.prefill_end
        frame["finish"] = self.finish
        frame["ttft"] = self.ttft
        frame["latency"] = self.latency
        frame["tbt_mean"] = self.tbt_mean
        return frame


# ------------------------------------------------------------------- validator
FUSED_RULES = (
    "structure",
    "timeline",
    "budget",
    "chunks",
    "prompt",
    "arrival",
    "decode_start",
    "decoding",
    "context",
    "stage_time",
    "one_per_client",
    "tokens",
    "makespan",
)


def validate_fused(
    schedule: FusedSchedule, skip: str | Iterable[str] = (), rtol: float = 1e-9, atol: float = 1e-9
) -> list[Violation]:
    """Every way ``schedule`` breaks the fused mode's rules; empty when it is valid.

    Rules (:data:`FUSED_RULES`), each checked on its own from the arrays and the workload:

    * ``structure``: array lengths and index ranges (cannot be skipped);
    * ``timeline``: runs in time order without overlap, none empty (an iteration decodes or
      prefills something), and no pause while requests decode (a run with decoding
      requests starts when the run before it ends);
    * ``budget``: decoding requests plus chunk tokens at most ``token_budget`` in every
      iteration;
    * ``chunks``: a run with chunks has one iteration; its chunk tokens and squared tokens
      are those of its chunks (squares recomputed from each chunk's place in its prompt);
      a request has at most one chunk per run, each of at least one token;
    * ``prompt``: each request's chunks add up to its prompt;
    * ``arrival``: no chunk of a request before it arrives;
    * ``decode_start``: a request decodes from the iteration right after its last chunk on;
    * ``decoding``: each run's decoding count is the number of requests whose decode range
      covers it, and no decode range starts or ends inside a run;
    * ``context``: each run's context is the sum of ``prompt + tokens decoded`` over the
      requests decoding in its first iteration;
    * ``stage_time``: each run's first iteration takes :func:`fused_iteration_time`, and
      each next one ``c_d * decoding`` longer;
    * ``one_per_client``: clients in range, and a client holds one request at a time, from
      its first chunk to its last token;
    * ``tokens``: each request decodes exactly its output tokens;
    * ``makespan``: the end of the last run.
    """
    skip_set = skipped_rules(skip, FUSED_RULES)
    if not isinstance(schedule, FusedSchedule):
        raise TypeError(f"validate_fused expects a FusedSchedule, got {type(schedule).__name__}")
    report = Report(skip_set)

    def add(rule: str, where: Any, describe: Any) -> None:
        report.add(rule, np.asarray(where).ravel(), describe)

    s, wl = schedule, schedule.workload
    n, runs, chunks = len(wl), s.num_runs, int(s.chunk_run.size)
    # structure
    broken = []
    run_arrays = (
        "run_iterations",
        "run_first_time",
        "run_step",
        "run_decoding",
        "run_context",
        "run_chunk_tokens",
        "run_chunk_squares",
    )
    broken += [
        f"{a} has {getattr(s, a).size} entries for {runs} runs"
        for a in run_arrays
        if getattr(s, a).size != runs
    ]
    broken += [
        f"{a} has {getattr(s, a).size} entries for {chunks} chunks"
        for a in ("chunk_request", "chunk_tokens")
        if getattr(s, a).size != chunks
    ]
    broken += [
        f"{a} has {getattr(s, a).size} entries for {n} requests"
        for a in ("request_client", "request_decode_start", "request_decode_end")
        if getattr(s, a).size != n
    ]
    if not broken:
        floats = ("run_start", "run_first_time", "run_step")
        broken += [
            f"{a} holds a value that is not finite" for a in floats if not np.isfinite(getattr(s, a)).all()
        ]
        if not math.isfinite(s.makespan):
            broken.append(f"the makespan {s.makespan!r} is not finite")
        counts = ("run_decoding", "run_context", "run_chunk_tokens", "run_chunk_squares")
        broken += [
            f"{a} holds a negative count" for a in counts if getattr(s, a).size and getattr(s, a).min() < 0
        ]
        if runs and s.run_iterations.min() < 1:
            broken.append("a run has fewer than one iteration")
        if chunks and not (s.chunk_request.min() >= 0 and s.chunk_request.max() < n):
            broken.append("a chunk names a request that does not exist")
        if chunks and not (s.chunk_run.min() >= 0 and s.chunk_run.max() < runs):
            broken.append("a chunk names a run that does not exist")
        lo, hi = s.request_decode_start, s.request_decode_end
        if n and not ((lo >= 0) & (lo <= hi) & (hi <= s.num_iterations)).all():
            broken.append("a request's decode range is not a range of the schedule's iterations")
    if broken:
        return [Violation("structure", b) for b in broken]

    cost, budget = s.cost, s.token_budget
    prompt, output = wl.prompt_tokens, wl.output_tokens
    scale = max(1.0, float(np.max(s.run_end, initial=0.0)))
    tol = atol + 64 * math.ulp(scale)
    first, ends = s.run_first_iteration, s.run_end
    # timeline
    if runs:
        overlap = np.flatnonzero(s.run_start[1:] < ends[:-1] - tol) + 1
        add(
            "timeline", overlap, lambda r: f"run {r} starts at {s.run_start[r]:.9g}s, before run {r - 1} ends"
        )
        if s.run_start[0] < -tol:
            add("timeline", [0], lambda _: f"run 0 starts at {s.run_start[0]:.9g}s, before time 0")
        empty = np.flatnonzero((s.run_decoding == 0) & (s.run_chunk_tokens == 0))
        add("timeline", empty, lambda r: f"run {r} neither decodes nor prefills")
        paused = np.flatnonzero((s.run_decoding[1:] > 0) & (s.run_start[1:] > ends[:-1] + tol)) + 1
        add(
            "timeline",
            paused,
            lambda r: (
                f"run {r} has decoding requests but starts {s.run_start[r] - ends[r - 1]:.9g}s "
                f"after run {r - 1}"
            ),
        )
    # budget
    over = np.flatnonzero(s.run_decoding + s.run_chunk_tokens > budget)
    add(
        "budget",
        over,
        lambda r: (
            f"run {r} carries {s.run_decoding[r]} decoding + {s.run_chunk_tokens[r]} chunk tokens "
            f"> budget {budget}"
        ),
    )
    # chunks: per run totals, one chunk per request and run, sizes >= 1
    order = np.lexsort((s.chunk_run, s.chunk_request))
    c_req, c_run, c_tok = s.chunk_request[order], s.chunk_run[order], s.chunk_tokens[order]
    small = np.flatnonzero(c_tok < 1)
    add("chunks", small, lambda k: f"a chunk of request {c_req[k]} in run {c_run[k]} has {c_tok[k]} tokens")
    twice = np.flatnonzero((c_req[1:] == c_req[:-1]) & (c_run[1:] == c_run[:-1])) + 1
    add("chunks", twice, lambda k: f"request {c_req[k]} has two chunks in run {c_run[k]}")
    # Each chunk's start in its prompt: the tokens of the request's earlier chunks.
    before = np.cumsum(c_tok) - c_tok
    request_first = np.searchsorted(c_req, c_req, side="left")
    start = before - before[request_first]
    squares = chunk_squares(start, c_tok)
    run_tokens = np.zeros(runs, dtype=np.int64)
    run_squares = np.zeros(runs, dtype=np.int64)
    np.add.at(run_tokens, c_run, c_tok)
    np.add.at(run_squares, c_run, squares)
    multi = np.flatnonzero((s.run_chunk_tokens > 0) & (s.run_iterations != 1))
    add(
        "chunks", multi, lambda r: f"run {r} holds chunks over {s.run_iterations[r]} iterations (one allowed)"
    )
    wrong = np.flatnonzero(run_tokens != s.run_chunk_tokens)
    add(
        "chunks",
        wrong,
        lambda r: f"run {r} says {s.run_chunk_tokens[r]} chunk tokens; its chunks hold {run_tokens[r]}",
    )
    wrong_sq = np.flatnonzero(run_squares != s.run_chunk_squares)
    add(
        "chunks",
        wrong_sq,
        lambda r: (
            f"run {r} says {s.run_chunk_squares[r]} squared chunk tokens; its chunks give {run_squares[r]}"
        ),
    )
    # prompt
    total = np.zeros(n, dtype=np.int64)
    np.add.at(total, c_req, c_tok)
    short = np.flatnonzero(total != prompt)
    add("prompt", short, lambda i: f"request {i}'s chunks hold {total[i]} of its {prompt[i]} prompt tokens")
    has_chunks = total > 0
    first_run = np.full(n, runs, dtype=np.int64)
    last_run = np.full(n, -1, dtype=np.int64)
    np.minimum.at(first_run, c_req, c_run)
    np.maximum.at(last_run, c_req, c_run)
    # arrival
    if chunks:
        early = np.flatnonzero(has_chunks & (s.run_start[np.minimum(first_run, runs - 1)] < wl.arrival - tol))
        add(
            "arrival",
            early,
            lambda i: (
                f"request {i} arrives at {wl.arrival[i]:.9g}s; its first chunk starts at "
                f"{s.run_start[first_run[i]]:.9g}s"
            ),
        )
    # decode_start: the iteration after the last chunk's (runs with chunks hold one iteration)
    lo, hi = s.request_decode_start, s.request_decode_end
    expected = np.where(has_chunks, first[np.maximum(last_run, 0)] + 1 if runs else 0, -1)
    late = np.flatnonzero(has_chunks & (lo != expected))
    add(
        "decode_start",
        late,
        lambda i: f"request {i}'s last chunk is in iteration {expected[i] - 1}; it decodes from {lo[i]}",
    )
    # decoding: counts at each run's first iteration; ranges begin and end on run boundaries
    decoding = lo < hi
    opens, closes = np.sort(lo[decoding]), np.sort(hi[decoding])
    count = np.searchsorted(opens, first, side="right") - np.searchsorted(closes, first, side="right")
    wrong_count = np.flatnonzero(count != s.run_decoding)
    add(
        "decoding",
        wrong_count,
        lambda r: f"run {r} says {s.run_decoding[r]} decoding requests; {count[r]} decode ranges cover it",
    )
    boundaries = np.concatenate([first, [s.num_iterations]])
    inside = decoding & (~np.isin(lo, boundaries) | ~np.isin(hi, boundaries))
    add(
        "decoding",
        np.flatnonzero(inside),
        lambda i: f"request {i}'s decode range [{lo[i]}, {hi[i]}) cuts a run",
    )
    # context at each run's first iteration: sum over decoding requests of prompt - start, plus count * g
    if decoding.any():
        key = (prompt - lo)[decoding]
        by_open, by_close = np.argsort(lo[decoding], kind="stable"), np.argsort(hi[decoding], kind="stable")
        open_prefix = np.concatenate([[0], np.cumsum(key[by_open])])
        close_prefix = np.concatenate([[0], np.cumsum(key[by_close])])
        started = open_prefix[np.searchsorted(opens, first, side="right")]
        ended = close_prefix[np.searchsorted(closes, first, side="right")]
        context = started - ended + count * first
    else:
        context = np.zeros(runs, dtype=np.int64)
    wrong_ctx = np.flatnonzero((s.run_context != context) & (s.run_decoding > 0))
    add(
        "context",
        wrong_ctx,
        lambda r: f"run {r} says context {s.run_context[r]}; its requests hold {context[r]}",
    )
    # stage_time
    if runs:
        # From the recomputed counts, context and chunks: a wrong stated figure is its own rule's.
        want = np.asarray(
            # Chunks of fewer than one token are the chunks rule's; price the rest.
            fused_iteration_time(
                cost, count, np.maximum(context, 0), np.maximum(run_tokens, 0), np.maximum(run_squares, 0)
            ),
            dtype=np.float64,
        )
        off = np.flatnonzero(np.abs(s.run_first_time - want) > tol + rtol * np.abs(want))
        add(
            "stage_time",
            off,
            lambda r: f"run {r}'s first iteration takes {s.run_first_time[r]:.9g}s, not {want[r]:.9g}s",
        )
        step = context_rate(cost) * count.astype(np.float64)
        long = s.run_iterations >= 2
        off_step = np.flatnonzero(long & (np.abs(s.run_step - step) > tol + rtol * np.abs(want)))
        add(
            "stage_time",
            off_step,
            lambda r: f"run {r}'s iterations lengthen by {s.run_step[r]:.9g}s, not {step[r]:.9g}s",
        )
    # one_per_client: [first chunk iteration, decode end) per client, disjoint
    client = s.request_client
    bad = np.flatnonzero((client < 0) | (client >= s.clients))
    add(
        "one_per_client",
        bad,
        lambda i: f"request {i} is on client {client[i]}, not one of 0..{s.clients - 1}",
    )
    held = has_chunks & (client >= 0) & (client < s.clients)
    if held.any() and runs:
        begin = first[np.minimum(first_run, runs - 1)]
        idx = np.flatnonzero(held)
        by = idx[np.lexsort((begin[idx], client[idx]))]
        same = client[by[1:]] == client[by[:-1]]
        clash = np.flatnonzero(same & (begin[by[1:]] < np.maximum(hi[by[:-1]], begin[by[:-1]] + 1)))
        add(
            "one_per_client",
            by[clash + 1],
            lambda i: f"request {i} starts on client {client[i]} while another request holds it",
        )
    # tokens
    wrong_tok = np.flatnonzero(hi - lo != output)
    add("tokens", wrong_tok, lambda i: f"request {i} decodes {hi[i] - lo[i]} tokens, not {output[i]}")
    # makespan
    end = float(ends[-1]) if runs else 0.0
    if abs(s.makespan - end) > tol:
        add("makespan", [0], lambda _: f"the makespan is {s.makespan:.9g}s; the last run ends at {end:.9g}s")
    return report.items


# ------------------------------------------------------------------ lower bound
@dataclass(frozen=True)
class FusedBounds:
    """Lower bounds on any fused schedule's makespan (seconds).

    ``iterations``: the fewest iterations any fused schedule needs; ``work``: the least time
    all of them take, from the earliest arrival; ``single_request``: the slowest request
    alone, from its arrival; ``strong``: the larger of the two.
    """

    iterations: int
    work: float
    single_request: float
    strong: float


def fused_lower_bounds(workload: Workload, cost: CostModel, clients: int, token_budget: int) -> FusedBounds:
    """Lower bounds on the makespan of every fused schedule of the instance.

    Proof. An iteration holding ``d`` decoding requests at context ``x`` and ``c`` chunk
    tokens of ``q`` squared tokens takes at least ``m + beta * d + c_d * x + b_p * c + c_p * q``
    with ``m = min(alpha, a_p)``, for any line ``alpha + beta * k`` (``alpha, beta >= 0``)
    below the context-free decode time at every batch size (``a_d + b_d * k`` itself, or a
    line of a batch table's hull): decoding alone costs the decode iteration, chunks alone
    the prefill stage, both their sum less the smaller fixed cost, and every coefficient is
    >= 0. Summed over the iterations, the decode tokens give ``sum N^d``, the contexts
    ``sum request_context`` (each request reads ``N^p + j`` at its j-th token, whenever that
    comes), the chunks ``sum N^p`` and their squares ``sum (N^p)^2`` (a prompt's chunks add
    up to its square). Every request needs ``ceil(N^p / B)`` iterations of chunks (at most
    ``B`` tokens each) and then ``N^d`` more, all distinct; an iteration serves at most ``J``
    requests and carries at most ``B`` tokens: so at least ``max_i (ceil(N^p_i / B) + N^d_i)``,
    ``ceil(sum_i (ceil(N^p_i / B) + N^d_i) / J)`` and ``ceil(sum (N^p + N^d) / B)`` iterations,
    each costing at least ``m``. No iteration starts before the first arrival. Alone, request
    i needs the same terms of its own after its arrival.
    """
    budget = check_fused_instance(workload, cost, clients, token_budget)
    price: Any = cost
    a_p, b_p = float(price.prefill_base), float(price.prefill_per_token)
    c_p = float(price.prefill_per_square) if is_context_aware(cost) else 0.0
    c_d = context_rate(cost)
    if isinstance(cost, ContextCostModel):
        lines = [(alpha, beta) for alpha, beta in cost.batch_hull() if alpha >= 0 and beta >= 0]
    else:
        lines = [(float(price.decode_base), float(price.decode_per_client))]
    # No batch holds more requests than there are: nothing is sized by idle clients.
    least = float(np.min(decode_seconds(cost, np.arange(1, min(clients, len(workload)) + 1), 0)))
    lines.append((least, 0.0))  # below every batch size that can occur
    prompt, output = workload.prompt_tokens, workload.output_tokens
    per_request = -(-prompt // budget) + output
    iterations = max(
        int(per_request.max()),
        -(-int(per_request.sum()) // clients),
        -(-(int(prompt.sum()) + int(output.sum())) // budget),
    )
    squares = sum(p * p for p in prompt.tolist())
    contexts = sum(request_context(prompt, output).tolist())
    fixed = b_p * int(prompt.sum()) + c_p * squares + c_d * contexts
    tokens = int(output.sum())
    work = max(iterations * min(alpha, a_p) + beta * tokens for alpha, beta in lines) + fixed
    alone = [min(alpha, a_p) * per_request + beta * output for alpha, beta in lines]  # per request, each line
    alone_best = np.max(np.vstack(alone), axis=0) + b_p * prompt + c_p * prompt.astype(np.float64) ** 2
    alone_best = alone_best + c_d * request_context(prompt, output)
    single = float((workload.arrival + alone_best).max())
    work = float(workload.arrival.min()) + work
    return FusedBounds(iterations, work, single, max(work, single))
