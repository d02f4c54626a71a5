"""KV-cache memory in a schedule: the check of an instance with memory, the blocks in use in
every run of iterations, and the validator rules ``memory`` and ``pieces``.

The model is :mod:`llmsched.core.memory`'s. In decode iteration ``g`` a piece decoding in it
(its decode range ``[s, e)`` holds ``g``) writes its ``(g - s + 1)``-th token and holds
``ceil((p + g - s + 1) / B)`` blocks, ``p`` its prompt; a piece taken and not decoding yet
(its prompt under way in chunks, or prefilled in a stage) holds ``ceil((p + 1) / B)``; an
iteration a piece sits out (Orca's rule) writes no token of it, so from then on it holds one
token fewer than its range says (never fewer than ``p + 1``, as when it waited). Within
a run of iterations no piece starts or stops, so the blocks in use peak in its last
iteration: that is the figure per run, and the ``memory`` rule asks it to be at most the
engine's blocks in every run.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from llmsched.core.memory import KVMemory
from llmsched.core.workload import Workload

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "check_memory",
    "memory_by_run",
    "memory_frame",
    "memory_in_use",
    "memory_violations",
    "piece_violations",
    "schedule_memory",
]


def check_memory(workload: Workload, memory: Any, clients: int, capacity: float = math.inf) -> None:
    """Refuse (TypeError, ValueError) a ``memory`` that is not a
    :class:`~llmsched.core.memory.KVMemory`, or one in which some request could never run:
    alone in the engine, each of its pieces must be admitted with the watermark kept and
    with room for the most requests one take may hold (its clients), and it must decode to
    its end. The message names the request and the memory it needs.

    ``capacity`` is the most prompt tokens one take may hold (the prefill capacity, or a
    rule's smaller cap). A request preempted after ``d`` tokens comes back with a prompt of
    ``p + d`` tokens, at most ``p + o - 1``: when memory may preempt at all (the blocks the
    largest requests an engine holds at once need at their ends pass the memory), every
    request's ``p + o - 1`` must fit ``capacity``, or its continuation could never be taken."""
    if not isinstance(memory, KVMemory):
        raise TypeError(
            f"memory must be a llmsched.core.memory.KVMemory or None, got {type(memory).__name__}"
        )
    most = min(int(clients), len(workload))
    room = max(0, (memory.blocks - memory.reserved_blocks - most) * memory.block_size)
    tokens = workload.prompt_tokens + workload.output_tokens
    worst = int(np.argmax(tokens))
    if tokens[worst] > room:
        raise ValueError(
            f"request {worst} holds {int(tokens[worst])} tokens (prompt and output), more than the "
            f"{room} the KV-cache memory of {memory.blocks} blocks of {memory.block_size} tokens "
            f"can promise one request ({memory.reserved_blocks} blocks kept free by the watermark, "
            f"a block for each of up to {most} requests taken at once); give the engine more memory "
            "or fewer clients, or clip the requests"
        )
    if capacity == math.inf:
        return
    ends = np.sort(-(-tokens // memory.block_size))[::-1]
    if int(ends[:most].sum()) <= memory.blocks:
        return  # the requests an engine holds at once always fit: nothing is ever preempted
    longest = tokens - 1
    over = np.flatnonzero(longest > capacity)
    if over.size:
        worst = int(over[np.argmax(longest[over])])
        raise ValueError(
            f"request {worst} may be preempted with {int(workload.output_tokens[worst]) - 1} of its "
            f"{int(workload.output_tokens[worst])} tokens decoded and come back with a prompt of "
            f"{int(longest[worst])} tokens, more than the {int(capacity)} one take may hold; under "
            "KV-cache memory a request's prompt and output less one must fit the prefill capacity "
            "(and max_num_batched_tokens without chunked prefill), as vLLM asks max_model_len to: "
            "raise it, give the engine more memory, or clip the requests"
        )


def _run_ranges(first_iteration: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each half-open range of iterations ``[lo, hi)`` (non-empty), the runs it covers, as
    (item, run) pairs: the runs start at ``first_iteration``."""
    r0 = np.searchsorted(first_iteration, lo, side="right") - 1
    r1 = np.searchsorted(first_iteration, hi - 1, side="right") - 1
    counts = r1 - r0 + 1
    item = np.repeat(np.arange(lo.size), counts)
    offset = np.arange(item.size) - np.repeat(np.cumsum(counts) - counts, counts)
    return item, r0[item] + offset


def memory_by_run(
    memory: KVMemory,
    prompt: np.ndarray,
    decode_start: np.ndarray,
    decode_end: np.ndarray,
    run_first_iteration: np.ndarray,
    run_iterations: np.ndarray,
    taken_iteration: np.ndarray | None = None,
    skip_piece: np.ndarray | None = None,
    skip_iteration: np.ndarray | None = None,
) -> np.ndarray:
    """Blocks in use in the last iteration of each run (int64, one per run).

    ``prompt``, ``decode_start`` and ``decode_end`` are per piece (a piece with an empty or
    negative range holds nothing while decoding); ``taken_iteration``, when given, is the
    first iteration in which each piece holds its prompt before it decodes (its first chunk;
    -1 for none): it then holds ``ceil((p + 1) / B)`` blocks up to its decode start.
    ``skip_piece`` and ``skip_iteration``, when given, are the iterations pieces sat out
    (Orca's rule): a piece writes no token in them, so it holds a token fewer from each on.
    """
    runs = run_first_iteration.size
    used = np.zeros(runs, dtype=np.int64)
    if not runs:
        return used
    last = run_first_iteration + run_iterations - 1
    size = memory.block_size
    decoding = (decode_start >= 0) & (decode_end > decode_start)
    pieces = np.flatnonzero(decoding)
    if pieces.size:
        item, run = _run_ranges(run_first_iteration, decode_start[pieces], decode_end[pieces])
        piece = pieces[item]
        tokens = prompt[piece] + last[run] - decode_start[piece] + 1
        if skip_piece is not None and skip_iteration is not None and skip_piece.size:
            width = int(max(int(last.max()), int(skip_iteration.max()))) + 2
            keys = np.sort(skip_piece * width + skip_iteration)
            # The piece's sit-outs up to the run's last iteration.
            tokens = tokens - (
                np.searchsorted(keys, piece * width + last[run], side="right")
                - np.searchsorted(keys, piece * width, side="left")
            )
            # Sitting out its first iterations it holds what a piece waiting to decode does.
            tokens = np.maximum(tokens, prompt[piece] + 1)
        np.add.at(used, run, -(-tokens // size))
    if taken_iteration is not None:
        waiting = np.flatnonzero((taken_iteration >= 0) & (decode_start > taken_iteration))
        if waiting.size:
            item, run = _run_ranges(run_first_iteration, taken_iteration[waiting], decode_start[waiting])
            piece = waiting[item]
            np.add.at(used, run, -(-(prompt[piece] + 1) // size))
    return used


def schedule_memory(schedule: Any, taken_iteration: np.ndarray | None = None) -> np.ndarray:
    """:func:`memory_by_run` of a competition or fused ``schedule`` with memory: the blocks in
    use in the last iteration of each of its runs."""
    iterations = np.asarray(schedule.run_iterations, dtype=np.int64)
    first = np.cumsum(iterations) - iterations
    skip_run = getattr(schedule, "skip_run", None)  # a fused schedule's sit-outs
    return memory_by_run(
        schedule.memory,
        schedule.workload.prompt_tokens,
        schedule.request_decode_start,
        schedule.request_decode_end,
        first,
        iterations,
        taken_iteration,
        None if skip_run is None else schedule.skip_request,
        None if skip_run is None else first[skip_run],
    )


def memory_in_use(schedule: Any, taken_iteration: np.ndarray | None = None) -> pd.DataFrame:
    """What ``schedule.memory_in_use()`` gives: :func:`memory_frame` of :func:`schedule_memory`.

    Raises
    ------
    ValueError
        When the schedule's engine has no KV-cache memory.
    """
    if schedule.memory is None:
        raise ValueError("this schedule's engine has no KV-cache memory (memory is None)")
    return memory_frame(schedule, schedule_memory(schedule, taken_iteration))


def memory_frame(schedule: Any, used: np.ndarray) -> pd.DataFrame:
    """Memory in use over time: one row per run of ``schedule`` (``start``, ``end``,
    ``blocks`` at its last iteration, ``tokens`` those blocks hold, ``share`` of all)."""
    import pandas as pd

    memory: KVMemory = schedule.memory
    return pd.DataFrame(
        {
            "start": schedule.run_start,
            "end": schedule.run_end,
            "blocks": used,
            "tokens": used * memory.block_size,
            "share": used / memory.blocks,
        }
    )


def memory_violations(memory: KVMemory, used: np.ndarray) -> list[tuple[int, str]]:
    """(run, description) for every run whose blocks in use exceed the memory's."""
    over = np.flatnonzero(used > memory.blocks)
    return [
        (int(r), f"run {int(r)} holds {int(used[r])} KV blocks, more than the engine's {memory.blocks}")
        for r in over
    ]


def piece_violations(
    workload: Workload,
    parent: np.ndarray,
    prefill_start: np.ndarray,
    finish: np.ndarray,
    decode_start: np.ndarray,
    decode_end: np.ndarray,
    sat_out: np.ndarray | None = None,
) -> list[tuple[int, str]]:
    """(piece, description) for every piece that does not continue its request as
    preemption by recompute does: the pieces of a request, in index order, run one after
    the other (a continuation is prefilled after the piece before it has made its last
    token), share its arrival, and a continuation's prompt is the first piece's prompt and
    every token decoded before it (``sat_out``: iterations each piece's range holds in which
    it made no token)."""
    out: list[tuple[int, str]] = []
    prompt, arrival = workload.prompt_tokens, workload.arrival
    decoded = np.where(decode_start >= 0, decode_end - decode_start, 0)
    if sat_out is not None:
        decoded = decoded - sat_out
    previous: dict[int, int] = {}
    done: dict[int, int] = {}  # tokens decoded by a request's pieces so far
    first: dict[int, int] = {}
    for piece, request in enumerate(parent.tolist()):
        if request in previous:
            before = previous[request]
            expected = prompt[first[request]] + done[request]
            if prompt[piece] != expected:
                out.append(
                    (piece, f"piece {piece} of request {request} prefills {prompt[piece]} tokens; its prompt "
                     f"and the {done[request]} tokens decoded before it are {expected}")
                )  # fmt: skip
            if arrival[piece] != arrival[first[request]]:
                out.append(
                    (piece, f"piece {piece} of request {request} arrives at another time than its request")
                )
            if not prefill_start[piece] >= finish[before] - 1e-9 * max(1.0, abs(finish[before])):
                out.append(
                    (piece, f"piece {piece} of request {request} starts at {prefill_start[piece]:.9g}s, "
                     f"before piece {before} made its last token at {finish[before]:.9g}s")
                )  # fmt: skip
        else:
            first[request] = piece
            done[request] = 0
        previous[request] = piece
        done[request] += int(decoded[piece])
    return out


def report_memory(report: Any, schedule: Any, prefill_start: np.ndarray, taken_iteration: Any) -> None:
    """Add the ``memory`` and ``pieces`` violations of ``schedule`` (a competition or fused
    schedule, well formed) to ``report``: nothing to check without memory and pieces.

    ``prefill_start`` is when each piece's prefill began (its stage, or its first chunk's
    run); ``taken_iteration`` as for :func:`memory_by_run` (None under competition, where a
    piece decodes right after its stage)."""
    memory = getattr(schedule, "memory", None)
    if memory is not None:
        found = memory_violations(memory, schedule_memory(schedule, taken_iteration))
        report.add("memory", [r for r, _ in found], dict(found).__getitem__)
    parent = getattr(schedule, "request_parent", None)
    if parent is not None:
        found = piece_violations(
            schedule.workload,
            np.asarray(parent),
            prefill_start,
            schedule.finish,
            schedule.request_decode_start,
            schedule.request_decode_end,
            getattr(schedule, "request_sat_out", None),
        )
        report.add("pieces", [p for p, _ in found], dict(found).__getitem__)
