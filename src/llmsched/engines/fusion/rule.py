"""The fused engine's loop (PD fusion, chunked prefill) on the cost model's clock.

Each iteration carries every decoding request and prompt chunks up to the token budget
(see :mod:`llmsched.engines.fusion.schedule` for the model). The request policy decides which waiting
requests free clients take, through the same contract as under competition
(:class:`~llmsched.policies.RequestPolicy`): when clients are free and the budget has room
beyond the chunks already under way, the loop asks it for a group (``take`` with the cost
model's prefill capacity); their prompts are then chunked, first come first served, into the
room each iteration leaves after its decoding requests (decode first, as vLLM and Sarathi-
Serve schedule). With no prompt under way the iterations are pure decoding and the loop jumps
over them in closed form, to the next finish or to the first iteration end after an arrival
that a free client could take.

Policies are non-anticipative as under competition: a request is revealed to the policy when
it arrives (all of them before the start in a clairvoyant run).
"""

from __future__ import annotations

import heapq
import math
import sys
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from llmsched.core.cost import CostModel, context_rate
from llmsched.core.workload import Workload
from llmsched.engines.fusion.iteration import check_fused_instance, fused_iteration_time
from llmsched.engines.fusion.schedule import FusedSchedule
from llmsched.engines.loop import CostClock, EngineStream, _has_methods, _name, _Requests, admits
from llmsched.policies import KnownRequests, RequestPolicy, oracle_lengths, planned_ahead

__all__ = ["DEFAULT_TOKEN_BUDGET", "fused_stream_schedule", "open_fused_engine", "simulate_fusion_policies"]

#: Sarathi-Serve's and vLLM's usual chunk budget (tokens per iteration).
DEFAULT_TOKEN_BUDGET = 512


def simulate_fusion_policies(
    workload: Workload,
    cost: CostModel,
    clients: int,
    request_policy: RequestPolicy,
    token_budget: int = DEFAULT_TOKEN_BUDGET,
    clairvoyant: bool = False,
) -> FusedSchedule:
    """Simulate a fused engine under a request-policy object; return its schedule.

    Parameters
    ----------
    workload, cost, clients
        The instance; ``cost`` a :class:`~llmsched.LinearCostModel` or
        :class:`~llmsched.ContextCostModel` (a chunk is priced by its tokens).
    request_policy
        Which waiting requests free clients take (an object; names are resolved by
        :func:`llmsched.simulate_fusion`).
    token_budget
        Decoding requests plus chunk tokens per iteration (Sarathi-Serve's chunk size).
    clairvoyant
        Reveal every request to the policy before the run starts.

    Raises
    ------
    TypeError, ValueError
        On an invalid instance or budget, before any work; on a policy answer that breaks
        its contract.
    """
    budget = check_fused_instance(workload, cost, clients, token_budget)
    if not _has_methods(request_policy, ("start", "arrive", "release", "ready", "take")):
        raise TypeError(
            "request_policy must be an object with start, arrive, release, ready and take methods, "
            f"got {type(request_policy).__name__}"
        )
    if not isinstance(clairvoyant, (bool, np.bool_)):
        raise TypeError(f"clairvoyant must be True or False, got {clairvoyant!r}")
    n = len(workload)
    lists = _Requests.of(workload)
    body = _fused_decisions(
        lists,
        n,
        workload.predicted_output is not None,
        workload.name,
        cost,
        int(clients),
        request_policy,
        budget,
        bool(clairvoyant),
        None,
    )
    try:
        next(body)
    except StopIteration as done:
        result = done.value
    else:  # pragma: no cover - a closed run never yields
        raise RuntimeError("the fused loop yielded in a closed run")
    return _fused_schedule(workload, cost, int(clients), budget, lists, range(n), result)


def open_fused_engine(
    cost: CostModel,
    clients: int,
    request_policy: RequestPolicy,
    token_budget: int,
    stream: EngineStream,
    predictions: bool,
    name: str = "stream",
    most_requests: int | None = None,
) -> Any:
    """The fused loop of one engine whose requests arrive through ``stream``, as a generator
    driven as :func:`llmsched.engines.loop.open_engine`'s is; its result goes to
    :func:`fused_stream_schedule`."""
    budget = check_fused_instance(Workload([1], [1]), cost, clients, token_budget)
    stream.most_active = int(clients) if most_requests is None else min(int(clients), int(most_requests))
    return _fused_decisions(
        stream, sys.maxsize, predictions, name, cost, int(clients), request_policy, budget, False, stream
    )


def fused_stream_schedule(
    workload: Workload,
    cost: CostModel,
    clients: int,
    token_budget: int,
    stream: EngineStream,
    kept: Sequence[int],
    result: Any,
) -> FusedSchedule:
    """The schedule of an engine run by :func:`open_fused_engine`: ``workload`` holds the
    requests it kept, whose indices in the stream are ``kept``, in order."""
    return _fused_schedule(workload, cost, clients, token_budget, stream, kept, result)


def _fused_schedule(
    workload: Workload,
    cost: CostModel,
    clients: int,
    budget: int,
    lists: _Requests,
    kept: Sequence[int],
    result: Any,
) -> FusedSchedule:
    runs, chunk_request, chunk_run, chunk_tokens, makespan, info = result
    position = {old: new for new, old in enumerate(kept)}
    start = np.asarray([lists.decode_start[i] for i in kept], dtype=np.int64)
    return FusedSchedule(
        workload,
        cost,
        clients,
        budget,
        np.asarray(runs["start"], dtype=np.float64),
        np.asarray(runs["iterations"], dtype=np.int64),
        np.asarray(runs["first"], dtype=np.float64),
        np.asarray(runs["step"], dtype=np.float64),
        np.asarray(runs["decoding"], dtype=np.int64),
        np.asarray(runs["context"], dtype=np.int64),
        np.asarray(runs["tokens"], dtype=np.int64),
        np.asarray(runs["squares"], dtype=np.int64),
        np.asarray([position[r] for r in chunk_request], dtype=np.int64),
        np.asarray(chunk_run, dtype=np.int64),
        np.asarray(chunk_tokens, dtype=np.int64),
        np.asarray([lists.client_of[i] for i in kept], dtype=np.int64),
        start,
        np.where(start >= 0, start + workload.output_tokens, -1),
        makespan,
        info,
    )


def _fused_decisions(
    lists: _Requests,
    n: int,
    predictions: bool,
    name_of_workload: str,
    cost: CostModel,
    clients: int,
    policy: RequestPolicy,
    budget: int,
    clairvoyant: bool,
    stream: EngineStream | None,
) -> Any:
    """The fused loop's body, a generator that yields only with a ``stream`` (see
    :class:`~llmsched.engines.loop.EngineStream`); closed, ``n`` is the number of requests."""
    name = type(policy).__name__
    prompt, output, arrival, planned = lists.prompt, lists.output, lists.arrival, lists.planned
    order, due_in_order, waiting = lists.order, lists.due, lists.state  # state 1: arrived, not taken
    client_of, decode_start = lists.client_of, lists.decode_start
    size = len(prompt)
    capacity = int(cost.prefill_capacity)
    lengths = clairvoyant or oracle_lengths(policy)
    known = KnownRequests(size, predictions, lengths, clairvoyant, name_of_workload)
    if clairvoyant:
        for request in order:
            known.reveal(request, prompt[request], planned[request], output[request], arrival[request])
    policy.start(known, clients)
    clock = CostClock()
    clock.open(
        cost, max(1, stream.most_active or clients) if stream is not None else min(clients, size), prompt
    )
    if stream is not None:
        stream.knowns = (known,)
    per_context = context_rate(cost)

    running: dict[int, int] = {}  # client -> request decoding on it
    holding: set[int] = set()  # clients holding a request (prompt under way or decoding)
    heap: list[tuple[int, int, int]] = []  # (decode end, client, request)
    prefilling: deque[list[int]] = deque()  # [request, tokens done] in the order taken
    pending = 0  # prompt tokens not yet chunked, over ``prefilling``
    context_offset = 0  # sum of prompt - decode start over the decoding requests
    runs: dict[str, list[Any]] = {
        k: [] for k in ("start", "iterations", "first", "step", "decoding", "context", "tokens", "squares")
    }
    chunk_request: list[int] = []
    chunk_run: list[int] = []
    chunk_tokens: list[int] = []
    g = 0
    free = clients
    known_n = size
    next_arrival = finished = started = 0
    now = 0.0

    def add_run(start: float, count: int, first: float, step: float, decoding: int, context: int) -> None:
        runs["start"].append(start)
        runs["iterations"].append(count)
        runs["first"].append(first)
        runs["step"].append(step)
        runs["decoding"].append(decoding)
        runs["context"].append(context)
        runs["tokens"].append(0)
        runs["squares"].append(0)

    def sync() -> None:
        assert stream is not None
        stream.started, stream.finished, stream.free = started, finished, free

    while finished < n:
        if stream is not None:
            known_n = len(due_in_order)
            if stream.withdrawn:
                for request in stream.withdrawn:
                    waiting[request] = 0  # it left
                    started += 1
                stream.withdrawn.clear()
        if next_arrival < known_n and admits(now, due_in_order[next_arrival]):
            horizon = now + 8 * math.ulp(now)
            while next_arrival < known_n and due_in_order[next_arrival] <= horizon:
                request = order[next_arrival]
                waiting[request] = 1
                if not clairvoyant:
                    known.reveal(
                        request, prompt[request], planned[request], output[request], arrival[request]
                    )
                policy.arrive(request)
                next_arrival += 1
        active = len(heap)
        room = budget - active
        # Admit a group when clients are free and the budget has room beyond the chunks under way.
        if free and room > pending:
            ready = policy.ready()
            if type(ready) is not int or ready < 0:
                raise TypeError(f"request policy {name}.ready() returned {ready!r}; expected an int >= 0")
            if ready:
                pairs = policy.take(capacity)
                if type(pairs) is not list or not pairs:
                    raise ValueError(
                        f"request policy {name}.take({capacity}) returned {pairs!r}; expected a non-empty "
                        "list of (request, client) pairs"
                    )
                tokens = 0
                for pair in pairs:
                    try:
                        request, client = (int(pair[0]), int(pair[1]))
                    except (TypeError, ValueError, IndexError):
                        raise TypeError(
                            f"request policy {name}.take({capacity}) returned {pair!r}; expected (request, "
                            "client) pairs of ints"
                        ) from None
                    if not (0 <= request < known_n and waiting[request] == 1 and 0 <= client < clients) or (
                        client in holding
                    ):
                        raise ValueError(
                            f"request policy {name}.take({capacity}) is invalid: request {request} on "
                            f"client {client} (the request must have arrived and not been taken; the client "
                            "must be free)"
                        )
                    waiting[request] = 0
                    holding.add(client)
                    client_of[request] = client
                    prefilling.append([request, 0])
                    pending += prompt[request]
                    tokens += prompt[request]
                if tokens > capacity:
                    raise ValueError(
                        f"request policy {name}.take({capacity}) is invalid: its requests hold {tokens} "
                        f"prompt tokens, more than the capacity of {capacity}"
                    )
                free -= len(pairs)
                started += len(pairs)
        context = context_offset + active * g
        if not prefilling or room <= 0:
            if not active:
                if next_arrival >= known_n and stream is not None and not stream.closed:
                    sync()
                    stream.cuttable = True
                    yield math.inf  # until the fleet routes a request here, or closes the stream
                    stream.cuttable = False
                    continue
                if next_arrival >= known_n:
                    if stream is not None and started == known_n:
                        break  # closed, and every request it got has finished or left
                    raise ValueError(
                        f"request policy {name}.ready() returned 0 with {free} free client(s), nothing "
                        f"running and every request arrived, yet {known_n - finished} request(s) never "
                        "finished"
                    )
                now = clock.wait_until(due_in_order[next_arrival])
                continue
            # Pure decoding until the next finish, or the first iteration end after an
            # arrival a free client could take.
            step = heap[0][0] - g
            cut = False
            if stream is not None:
                # Wait for the run's end on the fleet's clock first (nothing it changes is seen
                # before it happens); with a client free an arrival may cut it short.
                sync()
                stream.cuttable = bool(free)
                yield clock.run_end(active, step, context)
                stream.cuttable = False
                known_n = len(due_in_order)
                cut = bool(free) and next_arrival < known_n
            due = due_in_order[next_arrival] if free and next_arrival < known_n else math.inf
            ran = 0
            for start, count, first, growth in clock.decode(running, step, due, context):
                add_run(start, count, first, growth, active, context + active * ran)
                ran += count
                now = start + (first * count + growth * (count * (count - 1) / 2))
            g += ran
        else:
            # One fused iteration: every decoding request, then chunks first come first served.
            tokens = squares = 0
            run = len(runs["start"])
            done: list[int] = []
            for entry in prefilling:
                if room <= 0:
                    break
                request, offset = entry
                size = min(prompt[request] - offset, room)
                squares += size * (2 * offset + size)
                tokens += size
                room -= size
                entry[1] = offset + size
                chunk_request.append(request)
                chunk_run.append(run)
                chunk_tokens.append(size)
                if entry[1] == prompt[request]:
                    done.append(request)
            pending -= tokens
            seconds = float(fused_iteration_time(cost, active, context, tokens, squares))
            if not 0.0 <= seconds < math.inf:
                raise ValueError(
                    f"cost model {type(cost).__name__} gave a fused iteration time of {seconds!r}"
                )
            start = now
            if stream is not None:
                sync()
                yield start + seconds  # the iteration's end on the fleet's clock, before its effects
            add_run(start, 1, seconds, per_context * active, active, context)
            runs["tokens"][-1] = tokens
            runs["squares"][-1] = squares
            now = clock.wait_until(start + seconds)
            g += 1
            for request in done:  # decode from the next iteration on
                prefilling.popleft()
                decode_start[request] = g
                running[client_of[request]] = request
                context_offset += prompt[request] - g
                heapq.heappush(heap, (g + output[request], client_of[request], request))
            cut = False  # arrivals during the iteration were routed before the engine resumed
        while heap and heap[0][0] == g:
            _, client, request = heapq.heappop(heap)
            del running[client]
            holding.discard(client)
            context_offset -= prompt[request] - decode_start[request]
            known.finish(output[request])
            policy.release(client)
            free += 1
            finished += 1
            if stream is not None:
                stream.finished_planned += planned[request]
                stream.finished_prompt += prompt[request]
        if cut and stream is not None:
            sync()
            yield now

    if stream is not None:
        sync()
    starts = runs["start"]
    makespan = now if starts else 0.0
    info = {
        "mode": "fusion",
        "request_policy": _name(policy),
        "token_budget": budget,
        "clairvoyant": clairvoyant or planned_ahead(policy),
        "oracle_lengths": lengths,
    }
    return runs, chunk_request, chunk_run, chunk_tokens, makespan, info
