"""Disaggregated execution: a prompt engine prefills, a token engine decodes, and each
request's keys and values are copied from one to the other, the copy timed.

:func:`execute_disaggregated` runs a :class:`~llmsched.engines.disaggregation.schedule.DisaggregatedSchedule`
of one prompt machine and one token machine on two :class:`~llmsched.runtime.engine.Engine`\\ s
(two in one process on the CPU, or one per device where there are two):

* the prompt machine runs the schedule's prefill stages, in order, each with the same requests,
  none before its requests arrive;
* after a stage, each of its requests' keys and values is copied into the token engine
  (:meth:`Engine.receive <llmsched.runtime.engine.Engine.receive>`), one after another on the
  one link, each copy timed; the request's keys and values arrive when its copy ends;
* the token machine decodes as the schedule says: each request on the schedule's client, each
  client taking its requests in the schedule's order, none before the schedule's iteration;
  a request whose measured copy ends later than predicted joins at a later iteration (the
  decoding requests do not wait for it: continuous batching), and every decoding request
  makes a token.

The executor chooses no request and no client: those are the schedule's, made by the
cluster's rule in the one decision loop
(:func:`~llmsched.fleet.disaggregated.simulate_disaggregated`); it only follows them on the
measured clock, as :func:`~llmsched.runtime.executor.execute_schedule` replays a competition
schedule. The two
machines work at once in the cluster; here one process runs their work one piece at a time (a
stage runs, with its copies, just before the first iteration one of its requests joins), and
each machine's timeline is its own work's measured durations back to back (a machine idles
only when it waits for a request to arrive or for its keys and values): work on one machine
never waits for the other's wall-clock time.

:func:`fit_link` times copies of several sizes and fits the link's bandwidth, which a
:class:`~llmsched.engines.disaggregation.cluster.DisaggregatedCluster` predicts copies with.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from llmsched.core.checks import positive_int
from llmsched.engines.clock import admits
from llmsched.engines.disaggregation.cluster import DisaggregatedCluster
from llmsched.engines.disaggregation.schedule import DisaggregatedSchedule
from llmsched.runtime.engine import Engine, KVCacheFull
from llmsched.runtime.executor import Execution, check_fit, make_prompts

__all__ = ["execute_disaggregated", "fit_link"]


def _timed_copy(prompt_engine: Engine, token_engine: Engine, source: int, slot: int) -> tuple[float, int]:
    start = max(prompt_engine.clock(), token_engine.clock())
    copied = token_engine.receive(prompt_engine, source, slot)
    return max(prompt_engine.clock(), token_engine.clock()) - start, copied


def fit_link(
    prompt_engine: Engine, token_engine: Engine, tokens: Sequence[int], repeats: int = 5, seed: int = 0
) -> dict[str, Any]:
    """Time copies of ``tokens[i]`` tokens' keys and values from ``prompt_engine`` to
    ``token_engine`` and fit the link by least squares: ``latency_s + bytes / (bandwidth_gbs *
    1e9)`` (a cluster's ``kv_latency`` and ``kv_bandwidth``; through the origin when the line's
    intercept would be negative). ``rows`` holds (tokens, bytes, seconds): the median of
    ``repeats`` copies per size.

    The copies go as a run's do: for each size, a prefill stage of ``repeats`` prompts of that
    many random tokens (seeded) on the prompt engine, then each prompt's keys and values copied
    into an empty slot of the token engine that the last copies did not use (its blocks, when
    paged, fresh from the pool). Copied again and again from and into the same warm memory, a
    copy runs about twice as fast as in a run on a CPU. Both engines are reset.
    """
    if not tokens or min(tokens) < 1:
        raise ValueError("tokens must be a non-empty sequence of positive token counts")
    repeats = positive_int("repeats", repeats)
    if repeats > prompt_engine.slots:
        raise ValueError(
            f"repeats={repeats} copies need as many slots; the prompt engine has {prompt_engine.slots}"
        )
    rng = np.random.default_rng(seed)
    vocab = prompt_engine.config.vocab_size
    rows = []
    target = 0
    for n in tokens:
        prompt_engine.reset()
        sources = list(range(repeats))
        prompt_engine.prefill([rng.integers(0, vocab, size=int(n)).tolist() for _ in sources], sources)
        times = []
        for source in sources:
            if target == token_engine.slots:
                token_engine.reset()
                target = 0
            try:
                seconds, copied = _timed_copy(prompt_engine, token_engine, source, target)
            except KVCacheFull:
                token_engine.reset()
                target = 0
                seconds, copied = _timed_copy(prompt_engine, token_engine, source, target)
            target += 1
            times.append(seconds)
        rows.append((int(n), copied, statistics.median(times)))
    prompt_engine.reset()
    token_engine.reset()
    x = np.array([r[1] for r in rows], dtype=np.float64)
    y = np.array([r[2] for r in rows], dtype=np.float64)
    slope, intercept = np.polyfit(x, y, 1) if len(set(x.tolist())) > 1 else (0.0, -1.0)
    if intercept < 0 or slope <= 0:
        slope, intercept = float(x @ y / (x @ x)), 0.0
    return {"bandwidth_gbs": 1e-9 / float(slope), "latency_s": float(intercept), "rows": rows}


def execute_disaggregated(
    schedule: DisaggregatedSchedule,
    prompt_engine: Engine,
    token_engine: Engine,
    prompts: Sequence[Sequence[int]] | None = None,
    seed: int = 0,
    probe: Callable[[], object] | None = None,
    probe_every: int = 10,
) -> Execution:
    """Run a disaggregated ``schedule`` (one prompt machine, one token machine, no lending) on a
    prompt engine and a token engine; see the module's docstring.

    The prompt engine needs a slot for every request of its largest stage; the token engine a
    slot for every request on it at once, decoding or arrived and waiting for a client (a paged
    token engine holds a waiting request's blocks only). ``prompts`` are the token ids
    (default: :func:`~llmsched.runtime.executor.make_prompts` with ``seed``). ``probe``, a
    measurement of the machine beside the work, runs after every ``probe_every`` stages and
    iterations (between two pieces of work, so no machine's timeline holds it).

    Returns
    -------
    Execution
        ``measured`` is the measured :class:`DisaggregatedSchedule` (it passes every rule of its
        validator but ``stage_time`` and ``transfer_time``, which compare times with the cost
        model and the link); ``tokens`` each request's tokens; ``predicted`` the schedule
        given; ``info`` holds ``copy_s`` and ``copy_bytes`` (each request's copy),
        ``predicted_copy_s`` (the cluster's transfer time for it), and the token engine's
        ``peak_blocks`` when paged.

    Raises
    ------
    ValueError
        Before any work: a cluster of other than one prompt and one token machine, or one that
        lends machines; engines of other models, or too few slots for the schedule's clients
        or stages; prompts that do not fit.
    """
    if not isinstance(schedule, DisaggregatedSchedule):
        raise TypeError(f"schedule must be a DisaggregatedSchedule, got {type(schedule).__name__}")
    cluster: DisaggregatedCluster = schedule.cluster
    if cluster.prompt_machines != 1 or cluster.token_machines != 1 or cluster.mixed:
        raise ValueError(
            "disaggregated execution runs one prompt machine and one token machine without lending; "
            f"the cluster has {cluster.prompt_machines} and {cluster.token_machines}"
            f"{' and a mixed pool' if cluster.mixed else ''}"
        )
    if cluster.token_memory is not None:
        raise ValueError(
            "disaggregated execution runs a cluster without token_memory (give a paged token engine)"
        )
    if prompt_engine is token_engine:
        raise ValueError("the prompt engine and the token engine must be two engines")
    if prompt_engine.config != token_engine.config or prompt_engine.dtype != token_engine.dtype:
        raise ValueError(
            "the prompt engine and the token engine must run the same model in the same precision"
        )
    workload = schedule.workload
    n = len(workload)
    if prompts is None:
        prompts = make_prompts(workload, prompt_engine.config.vocab_size, seed)
    check_fit(token_engine, workload, prompts)
    stages = np.argsort(schedule.stage_start, kind="stable")
    members = [np.flatnonzero(schedule.request_stage == k).tolist() for k in stages.tolist()]
    widest = max(len(m) for m in members)
    if widest > prompt_engine.slots:
        raise ValueError(
            f"a stage holds {widest} requests; the prompt engine has {prompt_engine.slots} slots"
        )
    if int(workload.prompt_tokens.max()) + 1 > prompt_engine.max_len:
        raise ValueError(f"a prompt needs more than the prompt engine's max_len={prompt_engine.max_len}")
    clients = cluster.token_clients
    if clients > token_engine.slots:
        raise ValueError(
            f"the cluster's token machine has {clients} clients; "
            f"the token engine has {token_engine.slots} slots"
        )
    prompt_engine.reset()
    token_engine.reset()
    prompt, output, arrival = workload.prompt_tokens, workload.output_tokens, workload.arrival
    # The schedule's decisions, followed: on which client each request decodes, and in which
    # order each client takes its requests (by the iteration the schedule has it join at).
    join_at = schedule.request_decode_start.astype(np.int64)
    client_of = schedule.request_client.astype(np.int64)
    queues: dict[int, deque[int]] = {}
    for request in np.argsort(join_at, kind="stable").tolist():
        queues.setdefault(int(client_of[request]), deque()).append(request)
    decode_start = np.full(n, -1, dtype=np.int64)
    copy_s = np.zeros(n)
    copy_bytes = np.zeros(n, dtype=np.int64)
    tokens: list[list[int]] = [[] for _ in range(n)]
    stage_start: list[float] = []
    stage_end: list[float] = []
    stage_of = np.full(n, -1, dtype=np.int64)
    transfer_end = np.full(n, np.nan)
    slot_of: dict[int, int] = {}  # request -> its token-engine slot
    free_slots = list(range(token_engine.slots - 1, -1, -1))
    running: dict[int, int] = {}  # client -> request
    runs: list[tuple[float, float, int, int]] = []  # (start, seconds, active, context)
    prompt_t = token_t = 0.0
    link_t = 0.0  # the link copies one request at a time
    pieces = 0
    probe_every = positive_int("probe_every", probe_every)
    wall = time.perf_counter()

    def piece_done() -> None:
        nonlocal pieces
        pieces += 1
        if probe is not None and pieces % probe_every == 0:
            probe()  # between two pieces of work: on no machine's timeline

    def run_stage() -> None:
        """The next prefill stage, then each of its requests' keys and values over the link."""
        nonlocal prompt_t, link_t
        requests = members[len(stage_start)]
        slots = list(range(len(requests)))
        for slot in slots:
            prompt_engine.release(slot)
        begin = max(prompt_t, float(arrival[requests].max()))  # not before its requests arrive
        mark = prompt_engine.clock()
        prompt_engine.prefill([prompts[r] for r in requests], slots)
        stage_start.append(begin)
        stage_end.append(begin + prompt_engine.clock() - mark)
        link_t = max(link_t, stage_end[-1])
        for slot, request in zip(slots, requests, strict=True):
            if not free_slots:
                raise ValueError(
                    f"the token engine's {token_engine.slots} slots are all taken by requests decoding "
                    "or waiting for a client; give it more slots"
                )
            slot_of[request] = free_slots.pop()
            copy_s[request], copy_bytes[request] = _timed_copy(
                prompt_engine, token_engine, slot, slot_of[request]
            )
            link_t += float(copy_s[request])
            transfer_end[request] = link_t
            stage_of[request] = len(stage_start) - 1
        prompt_t = stage_end[-1]
        piece_done()

    g = finished = 0
    while finished < n:
        # At this iteration boundary a free client takes its next request when the schedule has
        # it join by now and its keys and values have arrived (its stage runs, with its copies,
        # when first needed). A request whose copy ends later than predicted joins at a later
        # iteration: the decoding requests never wait for it (continuous batching).
        heads = [q[0] for c, q in queues.items() if q and c not in running]
        due = [r for r in heads if join_at[r] <= g] or (
            [] if running else [r for r in heads if join_at[r] == min(join_at[heads])]
        )
        for request in due:
            while np.isnan(transfer_end[request]):
                run_stage()
        if not running:  # idle: until the first of them has its keys and values
            token_t = max(token_t, min(float(transfer_end[r]) for r in due))
        joins = [r for r in due if admits(token_t, float(transfer_end[r]))]
        for request in joins:
            client = int(client_of[request])
            queues[client].popleft()
            running[client] = request
            decode_start[request] = g
        batch = sorted(running)
        context = sum(int(prompt[running[c]]) + g - int(decode_start[running[c]]) for c in batch)
        begin = token_engine.clock()
        fed = token_engine.decode([slot_of[running[c]] for c in batch])
        seconds = token_engine.clock() - begin
        runs.append((token_t, seconds, len(batch), context))
        token_t += seconds
        g += 1
        for client, token in zip(batch, fed, strict=True):
            request = running[client]
            tokens[request].append(token)
            if len(tokens[request]) == int(output[request]):
                del running[client]
                token_engine.release(slot_of[request])
                free_slots.append(slot_of.pop(request))
                finished += 1
        piece_done()
    run_start = np.array([r[0] for r in runs])
    run_time = np.array([r[1] for r in runs])
    ends = [*stage_end, *(run_start + run_time).tolist()]
    stage_count = len(stage_start)
    measured = DisaggregatedSchedule(
        workload,
        cluster,
        np.zeros(stage_count, dtype=np.int64),
        np.array(stage_start),
        np.array(stage_end),
        np.ones(len(runs), dtype=np.int64),
        run_start,
        np.ones(len(runs), dtype=np.int64),
        run_time,
        np.zeros(len(runs)),
        np.array([r[2] for r in runs], dtype=np.int64),
        np.array([r[3] for r in runs], dtype=np.int64),
        stage_of,
        np.ones(n, dtype=np.int64),
        client_of,
        transfer_end,
        decode_start,
        decode_start + output,
        max(ends),
        {
            **schedule.info,
            "executed": True,
            "device": f"{prompt_engine.device} -> {token_engine.device}",
        },
    )
    predicted_copy = np.asarray(cluster.transfer(prompt, 0.0), dtype=np.float64) * np.ones(n)
    info = {
        "copy_s": copy_s.tolist(),
        "copy_bytes": copy_bytes.tolist(),
        "predicted_copy_s": predicted_copy.tolist(),
        "peak_blocks": token_engine.peak_blocks if token_engine.paged else None,
    }
    return Execution(measured, tokens, schedule, time.perf_counter() - wall, info)
