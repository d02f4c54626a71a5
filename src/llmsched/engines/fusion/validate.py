"""The fused mode's validator: every rule of PD fusion a :class:`FusedSchedule` must keep."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from llmsched.core.cost import (
    context_rate,
)
from llmsched.core.violations import Report, Violation, size_mismatches, skipped_rules
from llmsched.engines.fusion.iteration import chunk_squares, fused_iteration_time, padded_iteration_time
from llmsched.engines.fusion.schedule import FusedSchedule, sit_out_corrections
from llmsched.engines.memory import report_memory
from llmsched.engines.rule import DECODE_ONLY, PREFILL_ONLY, WHOLE

if TYPE_CHECKING:
    pass

__all__ = ["FUSED_RULES", "validate_fused"]


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
    "memory",
    "pieces",
    "sit_outs",
)


def validate_fused(
    schedule: FusedSchedule, skip: str | Iterable[str] = (), rtol: float = 1e-9, atol: float = 1e-9
) -> list[Violation]:
    """Every way ``schedule`` breaks the fused mode's rules; empty when it is valid.

    Rules (:data:`FUSED_RULES`), each checked on its own from the arrays and the workload:

    * ``structure``: array lengths and index ranges (cannot be skipped);
    * ``timeline``: runs in time order without overlap, none empty (an iteration decodes or
      prefills something), and no pause while requests decode (a run with decoding
      requests, or one that requests decoding across it sit out, starts when the run
      before it ends);
    * ``budget``: decoding requests plus chunk tokens at most ``token_budget`` in every
      iteration (with ``whole_prompts``, but in an iteration whose one chunk is a whole
      prompt running alone, no request decoding in it; each prompt is then one chunk); a
      padded schedule's prompt tokens alone are within it, but for an iteration of one prompt;
    * ``chunks``: a run with chunks has one iteration; its chunk tokens and squared tokens
      are those of its chunks (squares recomputed from each chunk's place in its prompt);
      a request has at most one chunk per run, each of at least one token;
    * ``prompt``: each request's chunks add up to its prompt (one chunk with ``whole_prompts``),
      but a decode-only request's (``request_phase``), which has none;
    * ``arrival``: no chunk of a request before it arrives, and no token of a decode-only
      request from an iteration that starts before its keys and values arrive;
    * ``decode_start``: a request decodes from the iteration right after its last chunk on;
    * ``decoding``: each run's decoding count is the number of requests whose decode range
      covers it less those sitting it out, and no decode range starts or ends inside a run;
    * ``context``: each run's context is the sum of ``prompt + tokens decoded`` over the
      requests decoding in its first iteration;
    * ``stage_time``: each run's first iteration takes :func:`fused_iteration_time` (a
      padded schedule's runs with prompts :func:`padded_iteration_time`), and
      each next one ``c_d * decoding`` longer;
    * ``one_per_client``: clients in range, and a client holds one request at a time, from
      its first chunk to its last token;
    * ``tokens``: each request decodes exactly its output tokens (its decode range less the
      iterations it sat out), a prefill-only request none;
    * ``makespan``: the end of the last run;
    * ``memory``: with KV-cache memory, no iteration holds more blocks than the engine has
      (a piece holds its prompt's blocks from its first chunk; :mod:`llmsched.engines.memory`);
    * ``pieces``: with pieces (requests preempted by recompute), each continuation starts
      after the piece before it finished, with its request's prompt and the tokens decoded;
    * ``sit_outs``: a request sits out only a mixed iteration (a run of one iteration with
      chunks) inside its decode range, never its last one (which makes its last token), and
      each iteration at most once.
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
    # run_start and chunk_run say how many runs and chunks there are.
    run_arrays = (
        "run_iterations",
        "run_first_time",
        "run_step",
        "run_decoding",
        "run_context",
        "run_chunk_tokens",
        "run_chunk_squares",
    )
    broken = size_mismatches(
        s,
        (
            ("runs", runs, run_arrays),
            ("chunks", chunks, ("chunk_request", "chunk_tokens")),
            ("requests", n, ("request_client", "request_decode_start", "request_decode_end")),
            ("sit-outs", int(s.skip_run.size), ("skip_request",)),
        ),
    )
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
        if s.skip_run.size and not (
            (s.skip_request.min() >= 0) & (s.skip_request.max() < n)
            & (s.skip_run.min() >= 0) & (s.skip_run.max() < runs)
        ):  # fmt: skip
            broken.append("a sit-out names a request or a run that does not exist")
        lo, hi = s.request_decode_start, s.request_decode_end
        if n and not ((lo >= 0) & (lo <= hi) & (hi <= s.num_iterations)).all():
            broken.append("a request's decode range is not a range of the schedule's iterations")
        if s.request_phase is not None:
            if s.request_phase.shape != (n,):
                broken.append(f"request_phase has {s.request_phase.size} entries for {n} requests")
            elif n and not np.isin(s.request_phase, (WHOLE, PREFILL_ONLY, DECODE_ONLY)).all():
                broken.append("request_phase holds a value that is not WHOLE, PREFILL_ONLY or DECODE_ONLY")
            if s.memory is not None:
                broken.append("a schedule whose requests split their phases has no KV-cache memory")
    if broken:
        return [Violation("structure", b) for b in broken]

    cost, budget = s.cost, s.token_budget
    prompt, output = wl.prompt_tokens, wl.output_tokens
    scale = max(1.0, float(np.max(s.run_end, initial=0.0)))
    tol = atol + 64 * math.ulp(scale)
    first, ends = s.run_first_iteration, s.run_end
    phase = s.request_phase if s.request_phase is not None else np.zeros(n, dtype=np.int64)
    decode_only = phase == DECODE_ONLY
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
        # A run that requests decoding across its start decode in or sit out (their decode
        # ranges hold it), or that holds the first token of a request prefilled here, follows
        # the run before it at once (a request prefilled elsewhere may start a run after a
        # pause: it decodes once its keys and values are here).
        lo, hi = np.sort(s.request_decode_start), np.sort(s.request_decode_end)
        across = np.searchsorted(lo, first[1:], side="left") - np.searchsorted(hi, first[1:], side="right")
        begins = np.sort(
            s.request_decode_start[~decode_only & (s.request_decode_start < s.request_decode_end)]
        )
        starting = np.searchsorted(begins, first[1:], side="right") - np.searchsorted(
            begins, first[1:], side="left"
        )
        decoding = (across > 0) | ((s.run_decoding[1:] > 0) & (starting > 0))
        paused = np.flatnonzero(decoding & (s.run_start[1:] > ends[:-1] + tol)) + 1
        add(
            "timeline",
            paused,
            lambda r: (
                f"run {r} has decoding requests but starts {s.run_start[r] - ends[r - 1]:.9g}s "
                f"after run {r - 1}"
            ),
        )
    # A padded schedule runs whole prompts, and every decoding request writes its token.
    if s.padded and not s.whole_prompts:
        add("structure", [0], lambda _: "a padded schedule must run whole prompts (whole_prompts is False)")
    if s.padded and s.skip_request.size:
        add("structure", [0], lambda _: f"a padded schedule has {s.skip_request.size} sit-outs; it has none")
    # budget
    # Padded insertion caps the prompts' tokens alone (the decoding rows are padding's).
    over = (0 if s.padded else s.run_decoding) + s.run_chunk_tokens > budget
    if s.padded and chunks:
        # Its first prompt always joins, whatever its length.
        per_run = np.bincount(s.chunk_run, minlength=runs)
        over &= per_run > 1
    elif s.whole_prompts and chunks:
        # One chunk, a whole prompt, may run over the budget alone, every decoding request
        # sitting the iteration out (checked whole under ``prompt``).
        per_run = np.bincount(s.chunk_run, minlength=runs)
        over &= ~((per_run == 1) & (s.run_chunk_tokens > 0) & (s.run_decoding == 0))
    over = np.flatnonzero(over)
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
    # prompt (none of a decode-only request's, prefilled elsewhere)
    total = np.zeros(n, dtype=np.int64)
    np.add.at(total, c_req, c_tok)
    short = np.flatnonzero((total != prompt) & ~decode_only)
    add("prompt", short, lambda i: f"request {i}'s chunks hold {total[i]} of its {prompt[i]} prompt tokens")
    add(
        "prompt",
        np.flatnonzero(decode_only & (total > 0)),
        lambda i: f"request {i} arrives prefilled (decode only), yet its chunks hold {total[i]} tokens here",
    )
    if s.whole_prompts:
        pieces = np.bincount(c_req, minlength=n)
        split = np.flatnonzero(pieces > 1)
        add("prompt", split, lambda i: f"request {i}'s prompt is in {pieces[i]} chunks (whole prompts)")
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
    if decode_only.any() and runs:
        # A decode-only request's first iteration starts once its keys and values are here.
        joined_at = s.iteration_start_at(np.minimum(lo, s.num_iterations - 1))
        early_join = np.flatnonzero(decode_only & (joined_at < wl.arrival - tol))
        add(
            "arrival",
            early_join,
            lambda i: (
                f"request {i}'s keys and values arrive at {wl.arrival[i]:.9g}s; it decodes from "
                f"{joined_at[i]:.9g}s"
            ),
        )
    expected = np.where(has_chunks, first[np.maximum(last_run, 0)] + 1 if runs else 0, -1)
    late = np.flatnonzero(has_chunks & (lo != expected))
    add(
        "decode_start",
        late,
        lambda i: f"request {i}'s last chunk is in iteration {expected[i] - 1}; it decodes from {lo[i]}",
    )
    # sit_outs: inside the request's range, not its last iteration, in a mixed iteration, once
    sk_req, sk_run = s.skip_request, s.skip_run
    sk_iter = first[sk_run] if runs else sk_run
    outside = np.flatnonzero((sk_iter < lo[sk_req]) | (sk_iter >= hi[sk_req] - 1))
    add(
        "sit_outs",
        outside,
        lambda k: (
            f"request {sk_req[k]} sits out iteration {sk_iter[k]}, not one of its decode range "
            f"[{lo[sk_req[k]]}, {hi[sk_req[k]]}) before its last"
        ),
    )
    not_mixed = np.flatnonzero((s.run_iterations[sk_run] != 1) | (s.run_chunk_tokens[sk_run] == 0))
    add("sit_outs", not_mixed, lambda k: f"request {sk_req[k]} sits out run {sk_run[k]}, not mixed")
    pairs = np.unique(sk_req * max(runs, 1) + sk_run, return_counts=True)
    twice_out = np.flatnonzero(pairs[1] > 1)
    add(
        "sit_outs",
        twice_out,
        lambda k: f"request {pairs[0][k] // max(runs, 1)} sits out run {pairs[0][k] % max(runs, 1)} twice",
    )
    # The sit-outs inside their ranges count for the other rules (the rest are this rule's).
    inside_range = (sk_iter >= lo[sk_req]) & (sk_iter < hi[sk_req])
    sat_out = np.bincount(sk_req[inside_range], minlength=n)
    # decoding: counts at each run's first iteration; ranges begin and end on run boundaries
    decoding = lo < hi
    opens, closes = np.sort(lo[decoding]), np.sort(hi[decoding])
    count = np.searchsorted(opens, first, side="right") - np.searchsorted(closes, first, side="right")
    fewer, fewer_tokens = sit_out_corrections(
        first, prompt, lo, hi, sk_req[inside_range], sk_run[inside_range]
    )
    count = count - fewer
    wrong_count = np.flatnonzero(count != s.run_decoding)
    add(
        "decoding",
        wrong_count,
        lambda r: (
            f"run {r} says {s.run_decoding[r]} decoding requests; {count[r]} decode ranges cover it "
            "(less the requests sitting it out)"
        ),
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
        context = started - ended + (count + fewer) * first - fewer_tokens
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
        if s.padded and s.chunk_run.size:
            # Padded insertion: a run with prompts is one iteration of its prompts and its
            # decoding requests, every row as wide as its longest prompt.
            placed = (s.chunk_run >= 0) & (s.chunk_run < runs)
            rows = np.bincount(s.chunk_run[placed], minlength=runs)
            width = np.zeros(runs, dtype=np.int64)
            np.maximum.at(width, s.chunk_run[placed], np.maximum(s.chunk_tokens[placed], 0))
            mixed = rows > 0
            want[mixed] = padded_iteration_time(
                cost, count[mixed] + rows[mixed], width[mixed], np.maximum(context[mixed], 0)
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
    held = (has_chunks | decode_only) & (client >= 0) & (client < s.clients)
    if held.any() and runs:
        begin = np.where(decode_only, lo, first[np.minimum(first_run, runs - 1)])
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
    made = hi - lo - sat_out
    owed = np.where(phase == PREFILL_ONLY, 0, output)  # a prefill-only request decodes elsewhere
    wrong_tok = np.flatnonzero(made != owed)
    add("tokens", wrong_tok, lambda i: f"request {i} decodes {made[i]} tokens, not {owed[i]}")
    # makespan
    end = float(ends[-1]) if runs else 0.0
    if abs(s.makespan - end) > tol:
        add("makespan", [0], lambda _: f"the makespan is {s.makespan:.9g}s; the last run ends at {end:.9g}s")
    if s.memory is not None or s.request_parent is not None:
        began = np.where(has_chunks, s.run_start[np.minimum(first_run, max(runs - 1, 0))], np.nan)
        report_memory(report, s, began, s.first_chunk_iteration)
    return report.items
