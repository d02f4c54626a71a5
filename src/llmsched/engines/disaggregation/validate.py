"""The disaggregated mode's validator: every rule a :class:`DisaggregatedSchedule` must keep."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from llmsched.core.cost import (
    context_rate,
    decode_seconds,
    prefill_seconds,
)
from llmsched.core.violations import Report, Violation, size_mismatches, skipped_rules
from llmsched.engines.disaggregation.schedule import (
    REQUEST_ARRAYS,
    RUN_ARRAYS,
    STAGE_ARRAYS,
    TIME_ARRAYS,
    DisaggregatedSchedule,
)

if TYPE_CHECKING:
    pass

__all__ = ["DISAGGREGATED_RULES", "validate_disaggregated"]


# ------------------------------------------------------------------- validator
DISAGGREGATED_RULES = (
    "structure",
    "pools",
    "capacity",
    "arrival",
    "stage_time",
    "timeline",
    "transfer",
    "transfer_time",
    "memory",
    "decoding",
    "context",
    "one_per_client",
    "tokens",
    "makespan",
)


def validate_disaggregated(
    schedule: DisaggregatedSchedule, skip: str | Iterable[str] = (), rtol: float = 1e-9, atol: float = 1e-9
) -> list[Violation]:
    """Every way ``schedule`` breaks the disaggregated mode's rules; empty when valid.

    Rules (:data:`DISAGGREGATED_RULES`), each recomputed from the arrays and the workload:

    * ``structure``: lengths and index ranges (cannot be skipped);
    * ``pools``: prefill stages on prompt machines and decode runs on token machines, each
      on the other pool's machines only when the cluster lends them (``mixed``); a request
      prefilled by a token machine decodes there;
    * ``capacity``: a stage's prompt tokens within its machine's prefill capacity;
    * ``arrival``: no request's stage starts before it arrives;
    * ``stage_time``: stages and runs take their machine's cost model's times (a stage by
      its tokens and squared prompts; a run's first iteration by its active count and
      context, each next one ``c_d * active`` longer);
    * ``timeline``: on each machine, stages and runs do not overlap, and a run with
      decoding requests starts where the machine's previous run ended when a request
      decodes across both, or, in a cluster that lends busy token machines
      (``lend_busy_above``), where the stages run in between end, back to back;
    * ``transfer``: keys and values arrive no earlier than the stage ends (and, under
      ``token_memory``, than the transfer starts, which is not before the stage starts), and
      the request's first decode iteration starts no earlier than they arrive;
    * ``transfer_time``: they arrive :meth:`DisaggregatedCluster.transfer` after the stage
      ends (at the stage's end on the same machine); under ``token_memory`` a transfer that
      started after its stage began (``request_transfer_start``) arrives its whole transfer
      time after that start or the stage's end, whichever is later (a schedule measured on
      devices, whose copies take the clock's time, skips it as it does ``stage_time``);
    * ``memory``: under ``token_memory``, the blocks reserved on a machine that decodes (each
      request's prompt and ``max_output_tokens``, from its transfer's start, or its lent
      stage's, to its last token) never exceed the machine's;
    * ``decoding``: each run's active count equals the decode ranges covering it on its
      machine, and no range starts or ends inside a run;
    * ``context``: each run's context equals ``prompt + tokens decoded`` over its requests;
    * ``one_per_client``: a token machine's client holds one request at a time (from its
      first decode iteration to its last), clients within ``token_clients``;
    * ``tokens``: each request decodes its output tokens;
    * ``makespan``: the last stage's or run's end.
    """
    skip_set = skipped_rules(skip, DISAGGREGATED_RULES)
    if not isinstance(schedule, DisaggregatedSchedule):
        raise TypeError(
            f"validate_disaggregated expects a DisaggregatedSchedule, got {type(schedule).__name__}"
        )
    report = Report(skip_set)

    def add(rule: str, where: Any, describe: Any) -> None:
        report.add(rule, np.asarray(where).ravel(), describe)

    s, wl, c = schedule, schedule.workload, schedule.cluster
    n, stages, runs = len(wl), s.stage_start.size, s.run_start.size
    # stage_start and run_start say how many stages and runs there are.
    broken = size_mismatches(
        s, (("stages", stages, STAGE_ARRAYS), ("runs", runs, RUN_ARRAYS), ("requests", n, REQUEST_ARRAYS))
    )
    if not broken:
        if n and not ((s.request_stage >= 0) & (s.request_stage < stages)).all():
            broken.append("a request's stage does not exist")
        for name in ("stage_machine", "run_machine", "request_machine"):
            arr = getattr(s, name)
            if arr.size and not ((arr >= 0) & (arr < c.machines)).all():
                broken.append(f"{name} names a machine that does not exist")
        broken += [
            f"{a} holds a value that is not finite"
            for a in TIME_ARRAYS
            if not np.isfinite(getattr(s, a)).all()
        ]
        if not math.isfinite(s.makespan):
            broken.append(f"the makespan {s.makespan!r} is not finite")
        starts = s.request_transfer_start
        if (starts is None) != (c.token_memory is None):
            broken.append(
                "request_transfer_start is given exactly when the cluster has token_memory "
                f"({'none' if starts is None else 'given'}, token_memory {c.token_memory!r})"
            )
        elif starts is not None and (starts.shape != (n,) or not np.isfinite(starts).all()):
            broken.append(f"request_transfer_start must hold {n} finite times")
        counts = ("run_active", "run_context")
        broken += [
            f"{a} holds a negative count" for a in counts if getattr(s, a).size and getattr(s, a).min() < 0
        ]
        if runs and s.run_iterations.min() < 1:
            broken.append("a run has fewer than one iteration")
        if not broken and n:
            totals = np.zeros(c.machines, dtype=np.int64)
            np.add.at(totals, s.run_machine, s.run_iterations)
            lo, hi = s.request_decode_start, s.request_decode_end
            if not ((lo >= 0) & (lo <= hi) & (hi <= totals[s.request_machine])).all():
                broken.append("a request's decode range is not a range of its machine's iterations")
    if broken:
        return [Violation("structure", b) for b in broken]

    prompt, output, arrival = wl.prompt_tokens, wl.output_tokens, wl.arrival
    scale = max(1.0, float(np.max(np.concatenate([s.stage_end, s.run_end]), initial=0.0)))
    tol = atol + 64 * math.ulp(scale)
    lo, hi = s.request_decode_start, s.request_decode_end
    stage_of = s.request_stage
    # pools
    lent_stage = ~c.is_prompt(s.stage_machine)
    if not c.mixed:
        add(
            "pools",
            np.flatnonzero(lent_stage),
            lambda k: f"stage {k} runs on token machine {s.stage_machine[k]}, which is not lent",
        )
    if not c.mixed:
        add(
            "pools",
            np.flatnonzero(c.is_prompt(s.run_machine)),
            lambda r: f"run {r} decodes on prompt machine {s.run_machine[r]}, which is not lent",
        )
        add(
            "pools",
            np.flatnonzero(c.is_prompt(s.request_machine)),
            lambda i: f"request {i} decodes on prompt machine {s.request_machine[i]}, which is not lent",
        )
    # Decoded where it was prefilled: no transfer (a lent token machine's own stage; a prompt
    # machine lent to the token pool decodes requests other machines prefilled).
    local = s.stage_machine[stage_of] == s.request_machine
    add(
        "pools",
        np.flatnonzero(local & c.is_prompt(s.request_machine)),
        lambda i: f"request {i} decodes on prompt machine {s.request_machine[i]}, which prefilled it",
    )
    add(
        "pools",
        np.flatnonzero(lent_stage[stage_of] & ~local),
        lambda i: (
            f"request {i} is prefilled by lent machine {s.stage_machine[stage_of[i]]} "
            f"but decodes on {s.request_machine[i]}"
        ),
    )
    # capacity and stage times
    tokens = np.zeros(stages, dtype=np.int64)
    squares = np.zeros(stages, dtype=np.int64)
    np.add.at(tokens, stage_of, prompt)
    np.add.at(squares, stage_of, prompt * prompt)
    empty = np.flatnonzero(np.bincount(stage_of, minlength=stages) == 0)
    add("capacity", empty, lambda k: f"stage {k} holds no request")
    for k in range(stages):
        cap = int(c.cost_of(int(s.stage_machine[k])).prefill_capacity)
        if tokens[k] > cap:
            add(
                "capacity",
                [k],
                lambda k, cap=cap: f"stage {k} holds {tokens[k]} prompt tokens > capacity {cap}",
            )
    if c.prompt_batch_tokens is not None:
        # A stage of several prompts holds at most the cap; a longer prompt runs alone.
        count = np.bincount(stage_of, minlength=stages)
        capped = np.flatnonzero((count > 1) & (tokens > c.prompt_batch_tokens))
        add(
            "capacity",
            capped,
            lambda k: (
                f"stage {k} holds {count[k]} prompts of {tokens[k]} tokens > prompt_batch_tokens "
                f"{c.prompt_batch_tokens}"
            ),
        )
    starts_of = s.stage_start[stage_of]
    add(
        "arrival",
        np.flatnonzero(starts_of < arrival - tol),
        lambda i: f"request {i} arrives at {arrival[i]:.9g}s, after its stage starts at {starts_of[i]:.9g}s",
    )
    stage_len = s.stage_end - s.stage_start
    for pool, cost in ((True, c.prompt_cost), (False, c.token_cost)):
        on = np.flatnonzero(c.is_prompt(s.stage_machine) == pool)
        if on.size:
            want = np.asarray(prefill_seconds(cost, tokens[on], squares[on]), dtype=np.float64)
            off = np.flatnonzero(np.abs(stage_len[on] - want) > tol + rtol * want)
            add(
                "stage_time",
                on[off],
                lambda k: f"stage {k} takes {stage_len[k]:.9g}s, not the model's time for {tokens[k]} tokens",
            )
    # decoding counts and context, per token machine
    count = np.zeros(runs, dtype=np.int64)
    context = np.zeros(runs, dtype=np.int64)
    first = s.run_first_iteration
    for m in np.unique(np.concatenate([s.run_machine, s.request_machine])).tolist():
        on = np.flatnonzero(s.run_machine == m)
        mine = np.flatnonzero((s.request_machine == m) & (lo < hi))
        opens, closes = np.sort(lo[mine]), np.sort(hi[mine])
        g = first[on]
        count[on] = np.searchsorted(opens, g, side="right") - np.searchsorted(closes, g, side="right")
        key = (prompt - lo)[mine]
        o_pref = np.concatenate([[0], np.cumsum(key[np.argsort(lo[mine], kind="stable")])])
        c_pref = np.concatenate([[0], np.cumsum(key[np.argsort(hi[mine], kind="stable")])])
        context[on] = (
            o_pref[np.searchsorted(opens, g, side="right")]
            - c_pref[np.searchsorted(closes, g, side="right")]
            + count[on] * g
        )
        total = int(s.run_iterations[on].sum())
        bounds = np.concatenate([g, [total]])
        cut = mine[~np.isin(lo[mine], bounds) | ~np.isin(hi[mine], bounds)]
        add("decoding", cut, lambda i: f"request {i}'s decode range [{lo[i]}, {hi[i]}) cuts a run")
    add(
        "decoding",
        np.flatnonzero(count != s.run_active),
        lambda r: f"run {r} says {s.run_active[r]} decoding; {count[r]} ranges cover it",
    )
    add(
        "context",
        np.flatnonzero((count > 0) & (context != s.run_context)),
        lambda r: f"run {r} says context {s.run_context[r]}; its requests hold {context[r]}",
    )
    if runs:
        on_prompt = c.is_prompt(s.run_machine)
        want = np.where(
            on_prompt,
            np.asarray(decode_seconds(c.prompt_cost, count, context), dtype=np.float64),
            np.asarray(decode_seconds(c.token_cost, count, context), dtype=np.float64),
        )
        off = np.flatnonzero((count > 0) & (np.abs(s.run_first_time - want) > tol + rtol * want))
        add(
            "stage_time",
            off,
            lambda r: f"run {r}'s first iteration takes {s.run_first_time[r]:.9g}s, not {want[r]:.9g}s",
        )
        step = np.where(on_prompt, context_rate(c.prompt_cost), context_rate(c.token_cost)) * count
        off = np.flatnonzero((s.run_iterations > 1) & (np.abs(s.run_step - step) > tol + rtol * want))
        add(
            "stage_time",
            off,
            lambda r: f"run {r}'s iterations lengthen by {s.run_step[r]:.9g}s, not {step[r]:.9g}s",
        )
        add("decoding", np.flatnonzero(count == 0), lambda r: f"run {r} decodes nothing")
    # timeline per machine: nothing before time 0, a machine's runs listed in time order (its
    # iterations are numbered in that order), and stages and runs without overlap
    add(
        "timeline",
        np.flatnonzero(s.stage_start < -tol),
        lambda k: f"stage {k} starts at {s.stage_start[k]:.9g}s, before time 0",
    )
    add(
        "timeline",
        np.flatnonzero(s.run_start < -tol),
        lambda r: f"run {r} starts at {s.run_start[r]:.9g}s, before time 0",
    )
    for m in np.unique(s.run_machine).tolist():
        on = np.flatnonzero(s.run_machine == m)
        back = on[1:][s.run_start[on[1:]] < s.run_start[on[:-1]]]
        add("timeline", back, lambda r: f"run {r} is listed after a run of its machine that starts later")
    kinds = np.concatenate([np.zeros(stages, dtype=np.int64), np.ones(runs, dtype=np.int64)])
    idx = np.concatenate([np.arange(stages), np.arange(runs)])
    begin = np.concatenate([s.stage_start, s.run_start])
    end = np.concatenate([s.stage_end, s.run_end])
    machine = np.concatenate([s.stage_machine, s.run_machine])
    order = np.lexsort((kinds, begin, machine))
    same = machine[order[1:]] == machine[order[:-1]]
    clash = np.flatnonzero(same & (begin[order[1:]] < end[order[:-1]] - tol))
    add(
        "timeline",
        order[clash + 1],
        lambda j: (
            f"{'run' if kinds[j] else 'stage'} {idx[j]} on machine {machine[j]} starts at {begin[j]:.9g}s "
            "before the work before it ends"
        ),
    )
    # A request decoding across two consecutive runs of its machine: no pause between them,
    # but for stages the machine runs in between, back to back (a token machine lent a stage
    # while it decodes pauses its decoding for it, as a competition engine does).
    for m in np.unique(s.run_machine).tolist():
        on = np.flatnonzero(s.run_machine == m)
        if on.size < 2:
            continue
        mine = np.flatnonzero(s.request_machine == m)
        across = first[on[1:]]
        spanning = np.searchsorted(np.sort(lo[mine]), across, side="left") - np.searchsorted(
            np.sort(hi[mine]), across, side="right"
        )
        paused = np.flatnonzero((spanning > 0) & (s.run_start[on[1:]] > s.run_end[on[:-1]] + tol))
        if paused.size and c.lend_busy_above is not None:
            staged = np.flatnonzero(s.stage_machine == m)
            begins, ends = s.stage_start[staged], s.stage_end[staged]
            idle = []
            for k in paused.tolist():
                a, b = float(s.run_end[on[k]]), float(s.run_start[on[k + 1]])
                inside = (begins >= a - tol) & (ends <= b + tol)
                covered = float(np.sum(ends[inside] - begins[inside]))
                if abs((b - a) - covered) > tol * (1 + int(inside.sum())) + rtol * (b - a):
                    idle.append(k)
            paused = np.asarray(idle, dtype=np.int64)
        add("timeline", on[1:][paused], lambda r: f"run {r} pauses requests decoding across it")
    # transfer: with its stage (overlapped layer by layer), or, under token memory, from when
    # its target had room, no earlier than the stage's end
    expected = np.where(
        local,
        s.stage_end[stage_of],
        s.stage_end[stage_of] + np.asarray(c.transfer(prompt, stage_len[stage_of])),
    )
    reserved_at = s.request_transfer_start
    if reserved_at is not None:
        late = ~local & (reserved_at != s.stage_start[stage_of])
        whole = np.maximum(reserved_at, s.stage_end[stage_of]) + np.asarray(c.transfer(prompt, 0.0))
        expected = np.where(late, whole, expected)
        early = np.flatnonzero(~local & (reserved_at < s.stage_start[stage_of] - tol))
        add(
            "transfer",
            early,
            lambda i: f"request {i}'s transfer starts at {reserved_at[i]:.9g}s, before its stage",
        )
        # A lent stage's request holds its blocks on the machine that prefills it from the
        # stage's start (reserved when the stage was lent).
        off = np.flatnonzero(local & (np.abs(reserved_at - s.stage_start[stage_of]) > tol))
        add(
            "transfer",
            off,
            lambda i: (
                f"request {i}, prefilled where it decodes, reserves its blocks at {reserved_at[i]:.9g}s, "
                f"not at its stage's start {s.stage_start[stage_of[i]]:.9g}s"
            ),
        )
    after = s.stage_end[stage_of] if reserved_at is None else np.maximum(s.stage_end[stage_of], reserved_at)
    add(
        "transfer",
        np.flatnonzero(s.request_transfer_end < after - tol - rtol * np.abs(after)),
        lambda i: (
            f"request {i}'s keys and values arrive at {s.request_transfer_end[i]:.9g}s, before they "
            f"are all computed and sent ({after[i]:.9g}s)"
        ),
    )
    add(
        "transfer_time",
        np.flatnonzero(np.abs(s.request_transfer_end - expected) > tol + rtol * np.abs(expected)),
        lambda i: (
            f"request {i}'s keys and values arrive at {s.request_transfer_end[i]:.9g}s, "
            f"not {expected[i]:.9g}s"
        ),
    )
    if reserved_at is not None and n:
        # memory: on each machine that decodes, the blocks reserved (from a transfer's start, or
        # a lent stage's, to its request's last token) never exceed its token_memory
        memory = c.token_memory
        assert memory is not None
        need = np.asarray(c.reserved_blocks(prompt), dtype=np.int64)
        finish = s.finish
        for m in np.unique(s.request_machine).tolist():
            mine = np.flatnonzero(s.request_machine == m)
            times = np.concatenate([reserved_at[mine], finish[mine]])
            delta = np.concatenate([need[mine], -need[mine]])
            # at one instant a release comes before a reservation (it frees the room)
            order = np.lexsort((delta, times))
            held = np.cumsum(delta[order])
            over = np.flatnonzero(held > memory.blocks)
            if over.size:
                k = int(over[0])
                add(
                    "memory",
                    [m],
                    lambda machine, k=k, held=held, order=order, times=times: (
                        f"machine {machine} holds {int(held[k])} blocks at {times[order[k]]:.9g}s, "
                        f"more than its {memory.blocks}"
                    ),
                )
    if n:
        first_start = s.iteration_end_on(s.request_machine, lo)
        run_of = np.zeros(n, dtype=np.int64)
        starts_at = first_start.copy()
        for m in np.unique(s.request_machine).tolist():
            on = np.flatnonzero(s.run_machine == m)
            mine = np.flatnonzero(s.request_machine == m)
            if not on.size:
                continue
            pos = on[
                np.searchsorted(
                    first[on], np.minimum(lo[mine], max(int(s.run_iterations[on].sum()) - 1, 0)), side="right"
                )
                - 1
            ]
            run_of[mine] = pos
            offset = lo[mine] - first[pos]
            starts_at[mine] = s.run_start[pos] + s._elapsed(pos, offset)
        early = np.flatnonzero((hi > lo) & (starts_at < s.request_transfer_end - tol))
        add(
            "transfer",
            early,
            lambda i: f"request {i} decodes from {starts_at[i]:.9g}s, before its keys and values arrive",
        )
    # one_per_client
    client = s.request_client
    add(
        "one_per_client",
        np.flatnonzero((client < 0) | (client >= c.token_clients)),
        lambda i: f"request {i} is on client {client[i]}, not one of 0..{c.token_clients - 1}",
    )
    order = np.lexsort((lo, client, s.request_machine))
    same = (s.request_machine[order[1:]] == s.request_machine[order[:-1]]) & (
        client[order[1:]] == client[order[:-1]]
    )
    clash = np.flatnonzero(same & (lo[order[1:]] < hi[order[:-1]]))
    add(
        "one_per_client",
        order[clash + 1],
        lambda i: f"request {i} shares client {client[i]} of machine {s.request_machine[i]}",
    )
    # tokens
    add(
        "tokens",
        np.flatnonzero(hi - lo != output),
        lambda i: f"request {i} decodes {hi[i] - lo[i]} tokens, not {output[i]}",
    )
    last = float(np.max(end, initial=0.0))
    if abs(s.makespan - last) > tol:
        add(
            "makespan", [0], lambda _: f"the makespan is {s.makespan:.9g}s; the last work ends at {last:.9g}s"
        )
    return report.items
