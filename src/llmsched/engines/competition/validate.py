"""Check a schedule against every rule of the system model.

The validator shares no code with the simulator: it recomputes everything (stage token
totals, active clients per decode iteration, finish times, client occupancy) from the
schedule's arrays and the workload, and compares. It works on decode runs, cut where
requests start or stop decoding, so its time and memory grow with stages, runs and
requests, never with the number of iterations.

Rules (``Violation.rule``):

``structure``
    arrays of consistent sizes and indices in range; decode runs of at
    least one iteration that together cover the decode stages' iterations,
    none crossing from one decode stage into the next (checked first; the
    other rules run only on a well-formed schedule)
``prefill_once``
    each request is prefilled exactly once, in a prefill stage, onto one
    existing client
``capacity``
    a prefill stage holds at most ``cost.prefill_capacity`` prompt tokens, and at most
    ``max_num_batched_tokens`` where the schedule's ``info`` names one (vLLM's rule)
``stage_time``
    prefill stages last ``cost.prefill_time(tokens)``; decode iterations
    last ``cost.decode_iteration_time(active)`` (a run's iteration time,
    wherever in the run requests start or stop decoding); a decode stage's
    runs follow one another without gap from its start to its end. Under
    a context-aware cost model (``llmsched.core.cost.is_context_aware``) prefill
    stages last ``prefill_time(tokens, squares)`` and each decode iteration
    ``decode_iteration_time(active, context)``, with ``squares`` and
    ``context`` recomputed here from the workload: a run's iterations then
    lengthen by ``decode_per_context * active`` each
``alternation``
    stages alternate prefill, decode, prefill, ... starting with a prefill,
    and never overlap
``decode_continuity``
    a request decodes from the first iteration after its prefill stage in
    every iteration until it is done
``no_idle_work``
    no prefill stage without a request, no decode iteration without one
``one_per_client``
    a client holds one request at a time, from its prefill to its last token
``arrival``
    no request is prefilled in a stage that starts before it arrives
``tokens``
    every request decodes exactly its output tokens
``makespan``
    the reported makespan is the end of the last stage, which is when the
    last request finishes
``memory``
    with KV-cache memory (``schedule.memory``), no decode iteration holds
    more blocks than the engine has (:mod:`llmsched.engines.memory`)
``pieces``
    with pieces (``schedule.request_parent``: requests preempted by
    recompute), each continuation is prefilled after the piece before it
    finished, with its request's prompt and every token decoded before it
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from llmsched.core.cost import context_rate, decode_seconds, is_context_aware, prefill_seconds
from llmsched.core.schedule import DECODE, PREFILL, run_holding
from llmsched.core.violations import Report, Violation, skipped_rules
from llmsched.engines.competition.schedule import Schedule
from llmsched.engines.memory import report_memory

__all__ = ["RULES", "Violation", "validate"]

RULES = (
    "structure",
    "prefill_once",
    "capacity",
    "stage_time",
    "alternation",
    "decode_continuity",
    "no_idle_work",
    "one_per_client",
    "arrival",
    "tokens",
    "makespan",
    "memory",
    "pieces",
)


def validate(
    schedule: Schedule, skip: str | Iterable[str] = (), rtol: float = 1e-9, atol: float = 1e-9
) -> list[Violation]:
    """Every way ``schedule`` breaks the system model; an empty list when it is valid.

    Parameters
    ----------
    schedule
        The schedule to check.
    skip
        Rule names not to check, e.g. ``("stage_time",)`` for a measured schedule whose
        times come from a clock rather than the cost model. ``structure`` cannot be skipped.
    rtol, atol
        Two instants are equal within ``atol`` seconds plus 64 units in the last place of
        the schedule's latest time (what float arithmetic on absolute times can lose); a
        duration may differ from the cost model's by that much plus ``rtol`` of itself.
    """
    for name, value in (("rtol", rtol), ("atol", atol)):
        if not (isinstance(value, (int, float)) and np.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    skip_set = skipped_rules(skip, RULES)
    if not isinstance(schedule, Schedule):
        raise TypeError(f"validate expects a llmsched.Schedule, got {type(schedule).__name__}")
    report = Report(skip_set)
    if not _check_structure(schedule, report):
        return report.items

    s, wl, cost = schedule, schedule.workload, schedule.cost
    n, num_stages = len(wl), s.num_stages
    if num_stages == 0:
        report.add("prefill_once", np.arange(n), lambda i: f"request {i} is never prefilled (no stages)")
        if s.makespan != 0.0:
            report.add(
                "makespan", [0], lambda _: f"the makespan is {s.makespan:.9g}s but there are no stages"
            )
        return report.items
    latest = max(float(np.max(np.abs(s.stage_end), initial=0.0)), abs(s.makespan))
    tol = atol + 64 * float(np.spacing(latest))  # for instants and durations alike
    kind, start, end = s.stage_kind, s.stage_start, s.stage_end
    is_prefill, is_decode = kind == PREFILL, kind == DECODE

    # prefill_once -----------------------------------------------------------
    pst, client = s.request_prefill_stage, s.request_client
    unscheduled = pst < 0
    report.add(
        "prefill_once",
        np.flatnonzero(unscheduled),
        lambda i: f"request {i} is never prefilled",
    )
    wrong_kind = ~unscheduled & ~is_prefill[np.where(unscheduled, 0, pst)]
    report.add(
        "prefill_once",
        np.flatnonzero(wrong_kind),
        lambda i: f"request {i} is prefilled in stage {pst[i]}, which is a decode stage",
    )
    bad_client = ~unscheduled & ((client < 0) | (client >= s.clients))
    report.add(
        "prefill_once",
        np.flatnonzero(bad_client),
        lambda i: f"request {i} is placed on client {client[i]}, but clients are 0..{s.clients - 1}",
    )
    placed = ~unscheduled & ~wrong_kind & ~bad_client

    # capacity and prefill stage times ----------------------------------------
    aware = is_context_aware(cost)
    tokens = np.zeros(num_stages, dtype=np.int64)
    squares = np.zeros(num_stages, dtype=np.int64)
    members = np.zeros(num_stages, dtype=np.int64)
    np.add.at(tokens, pst[placed], wl.prompt_tokens[placed])
    if aware:
        np.add.at(squares, pst[placed], wl.prompt_tokens[placed] ** 2)
    np.add.at(members, pst[placed], 1)

    def stage_seconds(stages: Any) -> Any:
        return prefill_seconds(cost, tokens[stages], squares[stages])

    capacity = int(cost.prefill_capacity)
    report.add(
        "capacity",
        np.flatnonzero(is_prefill & (tokens > capacity)),
        lambda k: f"prefill stage {k} holds {tokens[k]} prompt tokens, above the capacity of {capacity}",
    )
    cap = (getattr(schedule, "info", None) or {}).get("max_num_batched_tokens")
    if cap is not None and int(cap) < capacity:  # vLLM's batch cap, where the engine ran under one
        report.add(
            "capacity",
            np.flatnonzero(is_prefill & (tokens > int(cap))),
            lambda k: f"prefill stage {k} holds {tokens[k]} prompt tokens, over max_num_batched_tokens {cap}",
        )
    report.add(
        "no_idle_work",
        np.flatnonzero(is_prefill & (members == 0)),
        lambda k: f"prefill stage {k} prefills no request",
    )
    pf = np.flatnonzero(is_prefill & (members > 0) & (tokens <= capacity))
    if pf.size:
        expected = np.asarray(stage_seconds(pf), dtype=np.float64)
        actual = end[pf] - start[pf]
        off = np.flatnonzero(np.abs(actual - expected) > tol + rtol * np.abs(expected))
        report.add(
            "stage_time",
            pf[off],
            lambda k: (
                f"prefill stage {k} ({tokens[k]} tokens"
                + (f", squares summing to {squares[k]}" if aware else "")
                + f") lasts {end[k] - start[k]:.9g}s but the cost model gives "
                + f"{float(stage_seconds(k)):.9g}s"
            ),
        )

    # alternation and overlap --------------------------------------------------
    if num_stages and kind[0] != PREFILL:
        report.add("alternation", [0], lambda k: "the first stage is a decode stage; it must be a prefill")
    same = np.flatnonzero(kind[1:] == kind[:-1]) + 1
    report.add(
        "alternation",
        same,
        lambda k: f"stages {k - 1} and {k} are both {'prefill' if kind[k] == PREFILL else 'decode'} stages",
    )
    report.add(
        "alternation",
        np.flatnonzero(end < start - tol),
        lambda k: f"stage {k} ends ({end[k]:.9g}s) before it starts ({start[k]:.9g}s)",
    )
    overlap = np.flatnonzero(start[1:] < end[:-1] - tol) + 1
    report.add(
        "alternation",
        overlap,
        lambda k: f"stage {k} starts at {start[k]:.9g}s, before stage {k - 1} ends at {end[k - 1]:.9g}s",
    )

    # decode runs: active clients and times ------------------------------------
    # Cut the runs wherever a request starts or stops decoding: within a piece the active
    # set is constant, so its iterations must each last decode_iteration_time(active).
    # Everything is per piece or per run, never per iteration.
    num_it = s.num_iterations
    dstart, dend = s.request_decode_start, s.request_decode_end
    ranged = (dstart >= 0) & (dend > dstart) & (dend <= num_it)
    # Count a range that runs past the last iteration in the iterations it does reach (the
    # overrun itself is a ``tokens`` violation).
    counted = (dstart >= 0) & (dstart < num_it) & (dend > dstart)
    run_len, run_tau = s.run_iterations, s.run_iteration_time
    run_step = s.run_iteration_step if s.run_iteration_step is not None else np.zeros(run_len.size)

    def run_elapsed(run: np.ndarray, m: np.ndarray) -> np.ndarray:
        # The first m iterations of a run: an arithmetic series of iteration times.
        return run_tau[run] * m + run_step[run] * (m * (m - 1) / 2)

    run_first = np.cumsum(run_len) - run_len
    run_end = s.run_start + run_elapsed(np.arange(run_len.size), run_len)
    # Each decoding request adds prompt - decode_start to the context of every iteration g
    # it decodes in, on top of g itself: context(g) = that sum + active(g) * g.
    offset = wl.prompt_tokens[counted] - dstart[counted]
    cuts, piece_run, active, offset_sum = _cut_runs(
        run_first, run_len, num_it, dstart[counted], np.minimum(dend[counted], num_it), offset
    )
    context = offset_sum + active * cuts
    piece_len = np.diff(np.append(cuts, num_it))
    report.add(
        "no_idle_work",
        np.flatnonzero(active == 0),
        lambda p: f"{_iterations(cuts[p], piece_len[p], ('runs', 'run'))} with no client decoding",
    )
    expected_tau = np.asarray(decode_seconds(cost, active, context), dtype=np.float64)
    expected_step = context_rate(cost) * active.astype(np.float64)
    # A piece may start inside its run: its first iteration lasts tau + step * offset.
    piece_offset = cuts - run_first[piece_run]
    actual_tau = run_tau[piece_run] + run_step[piece_run] * piece_offset
    actual_step = run_step[piece_run]
    off_time = np.abs(actual_tau - expected_tau) > tol + rtol * np.abs(expected_tau)
    # Growth matters only over several iterations; it is checked by where the piece ends.
    growth_error = np.abs(actual_step - expected_step) * (piece_len * (piece_len - 1) / 2)
    off_step = (piece_len > 1) & (growth_error > tol + rtol * np.abs(expected_tau) * piece_len)
    off = np.flatnonzero(off_time | off_step)

    def wrong_run_time(p: int) -> str:
        many = piece_len[p] > 1
        what = f"{_iterations(cuts[p], piece_len[p])} with {active[p]} active clients"
        if aware:
            what += f" and {context[p]} context tokens"
        if not aware and off_time[p]:
            return (
                f"{what} {'last' if many else 'lasts'} {actual_tau[p]:.9g}s{' each' if many else ''} "
                f"but the cost model gives {expected_tau[p]:.9g}s"
            )
        if off_time[p] or not many:
            return (
                f"{what} {'start with an iteration of' if many else 'lasts'} {actual_tau[p]:.9g}s"
                f" but the cost model gives {expected_tau[p]:.9g}s"
            )
        return (
            f"{what} lengthen by {actual_step[p]:.9g}s an iteration but the cost model gives "
            f"{expected_step[p]:.9g}s"
        )

    report.add("stage_time", off, wrong_run_time)
    # Runs tile their decode stage: the first starts with the stage, each next one where
    # the one before ended, and the last ends with the stage.
    dec = np.flatnonzero(is_decode)
    nonempty = dec[s.stage_iterations[dec] > 0]
    stage_of_run = nonempty[np.searchsorted(s.stage_first_iteration[nonempty], run_first, side="right") - 1]
    opens_stage = run_first == s.stage_first_iteration[stage_of_run]
    previous_end = np.append(np.nan, run_end[:-1])
    expected_run_start = np.where(opens_stage, start[stage_of_run], previous_end)
    report.add(
        "stage_time",
        np.flatnonzero(np.abs(s.run_start - expected_run_start) > tol),
        lambda r: (
            f"decode run {r} ({_iterations(run_first[r], run_len[r])}) starts at {s.run_start[r]:.9g}s but "
            + (
                f"its decode stage {stage_of_run[r]} starts at {start[stage_of_run[r]]:.9g}s"
                if opens_stage[r]
                else f"the run before it ends at {run_end[r - 1]:.9g}s"
            )
        ),
    )
    closes_stage = np.ones(run_len.size, dtype=bool)
    closes_stage[:-1] = opens_stage[1:]
    last_run = np.flatnonzero(closes_stage)
    last_end = np.full(num_stages, np.nan)
    last_end[stage_of_run[last_run]] = run_end[last_run]
    report.add(
        "stage_time",
        nonempty[np.abs(end[nonempty] - last_end[nonempty]) > tol],
        lambda k: f"decode stage {k} ends at {end[k]:.9g}s but its last iteration ends at {last_end[k]:.9g}s",
    )
    report.add(
        "no_idle_work",
        dec[s.stage_iterations[dec] == 0],
        lambda k: f"decode stage {k} runs no iteration",
    )

    # decode continuity and tokens ----------------------------------------------
    # The first iteration a request may decode in: the first of the decode stage after its prefill.
    next_stage = np.minimum(np.where(placed, pst + 1, 0), num_stages - 1)
    follows = placed & (pst + 1 < num_stages) & (kind[next_stage] == DECODE)
    expected_start = np.where(follows, s.stage_first_iteration[next_stage], -1)
    report.add(
        "decode_continuity",
        np.flatnonzero(placed & ~follows),
        lambda i: f"request {i} is prefilled in stage {pst[i]}, but no decode stage follows it",
    )
    late = np.flatnonzero(follows & (dstart != expected_start))
    report.add(
        "decode_continuity",
        late,
        lambda i: (
            f"request {i} starts decoding at iteration {dstart[i]}, not at iteration "
            f"{expected_start[i]}, the first after its prefill stage {pst[i]}"
        ),
    )
    decoded = dend - dstart
    report.add(
        "tokens",
        np.flatnonzero(placed & (decoded != wl.output_tokens)),
        lambda i: f"request {i} decodes {decoded[i]} tokens but its output has {wl.output_tokens[i]}",
    )
    report.add(
        "tokens",
        np.flatnonzero(placed & (dend > num_it)),
        lambda i: f"request {i} would decode until iteration {dend[i] - 1}, but the schedule has {num_it}",
    )

    # client occupancy ----------------------------------------------------------
    ok = placed & ranged
    hold_from = start[np.where(ok, pst, 0)]
    # A request holds its client until its last iteration ends (found in the run holding it).
    last_it = np.where(ok, dend - 1, 0)
    last_run_of = np.where(ok, run_holding(run_first, run_len, last_it), 0)
    hold_to = np.zeros(n)
    if run_len.size:
        run_last_end = s.run_start[last_run_of] + run_elapsed(
            last_run_of, last_it - run_first[last_run_of] + 1
        )
        hold_to = np.where(ok, run_last_end, 0.0)
    idx = np.flatnonzero(ok)
    if idx.size > 1:
        # Per client, in order of start: a request must not start before every earlier one ended.
        order = idx[np.lexsort((hold_from[idx], client[idx]))].tolist()
        holder: dict[int, int] = {}
        clashes: dict[int, int] = {}
        for i in order:
            j = holder.get(int(client[i]))
            if j is not None and hold_from[i] < hold_to[j] - tol:
                clashes[i] = j
            if j is None or hold_to[i] > hold_to[j]:
                holder[int(client[i])] = i
        report.add(
            "one_per_client",
            list(clashes),
            lambda i: (
                f"client {client[i]} takes request {i} at {hold_from[i]:.9g}s while request "
                f"{clashes[i]} holds it until {hold_to[clashes[i]]:.9g}s"
            ),
        )

    # arrivals ------------------------------------------------------------------
    stage_begin = start[np.where(placed, pst, 0)]
    report.add(
        "arrival",
        np.flatnonzero(placed & (stage_begin < wl.arrival - tol)),
        lambda i: (
            f"request {i} arrives at {wl.arrival[i]:.9g}s but is prefilled in stage {pst[i]}, which "
            f"starts at {start[pst[i]]:.9g}s"
        ),
    )

    # makespan ----------------------------------------------------------------
    last_stage_end = float(end.max()) if num_stages else 0.0
    if abs(s.makespan - last_stage_end) > tol:
        report.add(
            "makespan",
            [0],
            lambda _: f"the makespan is {s.makespan:.9g}s but the last stage ends at {last_stage_end:.9g}s",
        )
    if num_stages and n and ok.all():
        last_finish = float(hold_to.max())
        if abs(last_stage_end - last_finish) > tol:
            report.add(
                "makespan",
                [0],
                lambda _: (
                    f"the last stage ends at {last_stage_end:.9g}s but the last request finishes at "
                    f"{last_finish:.9g}s"
                ),
            )
    report_memory(report, s, s.stage_start[s.request_prefill_stage], None)
    return report.items


def _cut_runs(
    run_first: np.ndarray,
    run_len: np.ndarray,
    total: int,
    opens: np.ndarray,
    closes: np.ndarray,
    weights: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Cut the runs wherever a request starts or stops decoding.

    ``opens`` and ``closes`` (any order) are each decoding request's first iteration and the
    iteration after its last, at most ``total``; ``weights`` one integer per request.
    Returns each piece's first iteration, its run, its active clients and the sum of the
    weights of those clients' requests. Nothing is sorted: events are placed among the runs
    (see ``run_holding``), and only those strictly inside a run (none, in a simulated
    schedule) add a cut.
    """
    events = np.concatenate([opens, closes])
    run_of = run_holding(run_first, run_len, events)
    inside = (events < total) & (events != run_first[run_of])
    if inside.any():
        cuts = np.union1d(run_first, events[inside])
        piece_run = np.searchsorted(run_first, cuts, side="right") - 1
        piece_of = np.searchsorted(cuts, events)  # total lands past the last piece
    else:
        cuts, piece_run = run_first, np.arange(run_first.size)
        piece_of = np.where(events < total, run_of, run_first.size)
    change = np.bincount(piece_of[: opens.size], minlength=cuts.size + 1) - np.bincount(
        piece_of[opens.size :], minlength=cuts.size + 1
    )
    weight = np.zeros(cuts.size + 1, dtype=np.int64)
    np.add.at(weight, piece_of[: opens.size], weights)
    np.subtract.at(weight, piece_of[opens.size :], weights)
    return cuts, piece_run, np.cumsum(change)[: cuts.size], np.cumsum(weight)[: cuts.size]


def _iterations(first: Any, count: Any, verb: tuple[str, str] = ("", "")) -> str:
    """Names ``count`` consecutive decode iterations from ``first`` in a message, followed by
    ``verb`` agreeing with their number (its singular and plural forms)."""
    first, count = int(first), int(count)
    if count == 1:
        return f"decode iteration {first} {verb[0]}".rstrip()
    return f"decode iterations {first}-{first + count - 1} {verb[1]}".rstrip()


def _check_structure(s: Schedule, report: Report) -> bool:
    """Sizes and index ranges; other rules cannot run if these fail."""
    problems: list[str] = []
    n = len(s.workload)
    stages = s.stage_kind.size
    for name in ("stage_start", "stage_end", "stage_first_iteration", "stage_iterations"):
        if getattr(s, name).shape != (stages,):
            problems.append(f"{name} has shape {getattr(s, name).shape}, expected ({stages},)")
    runs = s.run_start.size
    for name in ("run_iterations", "run_iteration_time", "run_iteration_step"):
        if getattr(s, name) is not None and getattr(s, name).shape != (runs,):
            problems.append(f"{name} has shape {getattr(s, name).shape}, expected ({runs},) (one per run)")
    for name in ("request_client", "request_prefill_stage", "request_decode_start", "request_decode_end"):
        if getattr(s, name).shape != (n,):
            problems.append(f"{name} has shape {getattr(s, name).shape}, expected ({n},) (one per request)")
    if not problems:
        if not np.isin(s.stage_kind, (PREFILL, DECODE)).all():
            problems.append("stage_kind holds values other than PREFILL (0) and DECODE (1)")
        if not (np.isfinite(s.stage_start).all() and np.isfinite(s.stage_end).all()):
            problems.append("stage times must be finite")
        step = s.run_iteration_step
        if not (
            np.isfinite(s.run_start).all()
            and np.isfinite(s.run_iteration_time).all()
            and (step is None or np.isfinite(step).all())
        ):
            problems.append("run times must be finite")
        if (s.run_iterations < 1).any():
            problems.append("run_iterations must be >= 1: every run covers at least one iteration")
        if (s.stage_iterations < 0).any() or (s.stage_iterations[s.stage_kind == PREFILL] != 0).any():
            problems.append("stage_iterations must be >= 0, and 0 for prefill stages")
        dec = np.flatnonzero(s.stage_kind == DECODE)
        counts = s.stage_iterations[dec]
        expected_first = np.cumsum(counts) - counts
        if not np.array_equal(s.stage_first_iteration[dec], expected_first):
            problems.append(
                "decode stages must number their iterations consecutively: stage_first_iteration "
                "of each decode stage must be the previous decode stages' iteration total"
            )
        covered = int(s.run_iterations.sum())
        if int(counts.sum()) != covered:
            problems.append(f"decode stages have {int(counts.sum())} iterations but the runs cover {covered}")
        elif not problems:
            # Every decode stage's first iteration must open a run: a run lies in one stage.
            # Both sequences are increasing here, so a binary search finds each opening's run.
            run_first = np.append(np.cumsum(s.run_iterations) - s.run_iterations, -1)
            opened = dec[counts > 0]
            opening = s.stage_first_iteration[opened]
            crossing = np.flatnonzero(run_first[np.searchsorted(run_first[:-1], opening)] != opening)
            if crossing.size:
                problems.append(
                    f"a run crosses into decode stage {int(opened[crossing[0]])}: its first "
                    f"iteration {int(opening[crossing[0]])} does not start a run"
                )
        if (s.request_prefill_stage >= stages).any():
            problems.append("request_prefill_stage refers to a stage that does not exist")
        if (s.request_decode_end < s.request_decode_start).any():
            problems.append("a request's decode range ends before it starts")
        if s.clients < 1:
            problems.append(f"clients is {s.clients}; it must be at least 1")
    for p in problems:
        report.items.append(Violation("structure", p))
    return not problems
