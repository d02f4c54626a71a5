"""Splitwise's mixed pool as SplitwiseSim runs it: every machine batches as Orca does, and each
request's two phases are routed as it arrives.

This is the cluster of SplitwiseSim's ``mixed_pool`` scheduler (Patel et al., ISCA 2024; the
simulator's ``MixedPoolScheduler``), beside llmsched's own disaggregated cluster
(:mod:`llmsched.fleet.disaggregated`, whose machines pause decoding for whole prefill stages and
whose mixed pool lends a machine stage by stage). Here:

* Every machine runs the one decision loop (:mod:`llmsched.engines.loop`) under Orca's rule
  (:class:`~llmsched.engines.orca.rule.OrcaRule`: prompts first, whole, then decoding requests
  up to ``max_batch_tokens`` an iteration), whatever its pool: a machine of the prompt pool
  decodes the requests whose phases both run on it, and one of the token pool prefills.
* As a request arrives, the cluster picks its prompt machine (the prompt pool's machine with
  the fewest pending tokens, unless its queue is long: requests wait there and its pending
  tokens plus the prompt pass ``prompt_backlog``; then the mixed pool's) and its token machine
  (the token pool's machine with the least memory reserved, unless the request would not fit;
  then the mixed pool's). When no prompt machine is found, the token pool's machine with the
  fewest pending tokens joins the mixed pool and takes it; when no token machine is found, the
  prompt pool's with the least memory reserved joins it. When still none is found, both phases
  run on the machine with the fewest pending tokens of all. A mixed machine goes back to its
  pool once it holds no request.
* A request whose phases run on two machines is a prefill-only request on the first
  (:data:`~llmsched.engines.rule.PREFILL_ONLY`), which leaves when its prompt's iteration ends;
  its keys and values then move at ``kv_bandwidth`` (``kv_bytes_per_token`` a prompt token, no
  contention), and it reaches the second as a decode-only request
  (:data:`~llmsched.engines.rule.DECODE_ONLY`), which joins the decoding requests there.

A machine fills its batches as SplitwiseSim's machines do. It takes the waiting prompts first,
first come first served, as many as the next iteration's cap holds (the first whatever its
size); then the requests that arrived prefilled, in the order their requests reached the
cluster, but none whose request came after a prompt left waiting. While it runs decode
iterations with a client free, an arrival cuts the run short at the next iteration's end if it
can join that iteration: a request arriving prefilled, or a prompt within the cap; a longer
prompt waits for the run to end.

A machine's pending tokens are the prompt tokens routed to it and not yet prefilled plus one a
request whose token phase it runs and that has not finished; its queue, which tells whether a
prompt machine's is long, holds the requests that have reached it and are in no iteration yet,
and the token phase of each request whose both phases run on it until that phase decodes.

A machine's reserved memory is the model's weights plus, for each request routed to it, the
keys and values of its prompt and first token (``prompt + 1`` tokens) and, where it decodes, of
its output tokens; a prompt machine frees a request's when its transfer ends, a token machine
when the request finishes. SplitwiseSim counts them so; its machines also admit requests by
memory and preempt decoding requests when it runs out, which the machines here do not.

The run is non-anticipative: the routing reads the requests that have arrived, and each
machine's queue the requests that have reached it.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmsched.core.checks import positive_int, real
from llmsched.core.cost import CostModel
from llmsched.core.workload import Workload
from llmsched.engines.loop import EngineStream, admits, open_engine, stream_schedule
from llmsched.engines.orca.rule import OrcaRule
from llmsched.engines.rule import DECODE_ONLY, PREFILL_ONLY, WHOLE
from llmsched.fleet.mixed_pool_schedule import MixedPoolSchedule
from llmsched.online.baselines import FCFS
from llmsched.policies import KnownRequests

__all__ = ["MixedPoolCluster", "MixedPoolSchedule", "simulate_mixed_pool"]


@dataclass(frozen=True)
class MixedPoolCluster:
    """A cluster under SplitwiseSim's mixed-pool rules (see the module's docstring).

    Parameters
    ----------
    prompt_machines, token_machines
        The machines of each pool (prompt machines numbered first).
    cost
        Every machine's cost model (an iteration is priced by
        :func:`~llmsched.engines.fusion.iteration.fused_iteration_time`).
    clients
        The most requests a machine holds at once (SplitwiseSim's ``max_batch_size``).
    max_batch_tokens
        Orca's cap on an iteration's tokens (a longer prompt runs alone).
    prompt_backlog
        A prompt machine whose queue holds a request and whose pending tokens plus a new
        prompt's pass this is long (SplitwiseSim's ``prompt_max_pending_batch_tokens``).
    kv_bytes_per_token
        Bytes of keys and values a token holds (all layers).
    kv_bandwidth
        GB/s (1e9 bytes) a transfer moves.
    machine_memory, weights
        Bytes of a machine's device memory and of the model's weights: a token machine takes a
        request only while its reserved memory plus the request's stays below the first.
    token_cost
        The token machines' cost model where they are another kind of machine than the prompt
        machines (Splitwise-HA's A100s beside H100s, Splitwise-HHcap's power-capped H100s);
        None: ``cost``. A token machine lent to the prompt pool runs at its own speed.
    """

    prompt_machines: int
    token_machines: int
    cost: CostModel
    clients: int = 512
    max_batch_tokens: int = 2048
    prompt_backlog: int = 8192
    kv_bytes_per_token: float = 2_621_440.0
    kv_bandwidth: float = 200 * 2**30 / 1e9
    machine_memory: float = 8 * 80 * 2**30
    weights: float = 135e9
    token_cost: CostModel | None = None

    def __post_init__(self) -> None:
        positive_int("prompt_machines", self.prompt_machines)
        positive_int("token_machines", self.token_machines)
        positive_int("clients", self.clients)
        if type(self.max_batch_tokens) is not int or self.max_batch_tokens < 2:
            raise ValueError(
                f"max_batch_tokens must be an integer of at least 2, got {self.max_batch_tokens!r}"
            )
        positive_int("prompt_backlog", self.prompt_backlog)
        for name in ("kv_bytes_per_token", "kv_bandwidth", "machine_memory", "weights"):
            real(name, getattr(self, name), low=0, low_open=True)
        if self.weights >= self.machine_memory:
            raise ValueError(
                f"the weights ({self.weights:.4g} B) leave no room in a machine's memory "
                f"({self.machine_memory:.4g} B)"
            )
        for name in ("cost", "token_cost"):
            model = getattr(self, name)
            if (model is not None or name == "cost") and not callable(getattr(model, "prefill_time", None)):
                raise TypeError(f"{name} must be a cost model, got {type(model).__name__}")

    @property
    def machines(self) -> int:
        return self.prompt_machines + self.token_machines

    def machine_cost(self, machine: int) -> CostModel:
        """Machine ``machine``'s cost model (prompt machines are numbered first)."""
        if machine >= self.prompt_machines and self.token_cost is not None:
            return self.token_cost
        return self.cost

    def transfer_seconds(self, prompt: Any) -> Any:
        """Seconds to move the keys and values of ``prompt`` tokens."""
        return np.asarray(prompt, dtype=np.float64) * self.kv_bytes_per_token / (self.kv_bandwidth * 1e9)


class _PhaseQueue(FCFS):
    """A machine's queue, as SplitwiseSim's machines fill a batch: the prompts first come first
    served, as many as the next iteration's token cap holds (the first whatever its size);
    then the requests that arrive prefilled (they need no prefill), in the order their requests
    arrived at the cluster, but none whose request arrived after a prompt left waiting."""

    name = "fcfs"

    def __init__(self, phase: bytearray, cap: int):
        super().__init__()
        self._phase = phase
        self._cap = cap
        self.rank: list[float] = []  # each request's arrival at the cluster, set by the driver
        self.decoding: Callable[[], int] = lambda: 0  # the machine's decoding requests, set by the driver

    def start(self, known: KnownRequests, clients: int) -> None:
        super().start(known, clients)
        self._joins: deque[int] = deque()

    def arrive(self, request: int) -> None:
        (self._joins if self._phase[request] == DECODE_ONLY else self._queue).append(request)

    def withdraw(self) -> int | None:  # pragma: no cover - the cluster has no backoff
        return None

    def ready(self) -> int:
        free = self._free_count
        if self._queue:  # a prompt can always be taken
            count = len(self._queue) + len(self._joins)
            return count if count < free else free
        # Requests arriving prefilled join while the decoding requests fill less than the cap.
        if not self._joins or not free:
            return 0
        return max(0, min(len(self._joins), free, self._cap - self.decoding()))

    def take(self, capacity: int) -> list[tuple[int, int]]:
        queue, joins, pop = self._queue, self._joins, self._free.pop_lowest
        pairs: list[tuple[int, int]] = []
        free = self._free_count
        limit = capacity if capacity < self._cap else self._cap
        room = limit
        if queue:
            prompt = self._prompt
            while queue and free and (prompt[queue[0]] <= room or not pairs):
                room -= prompt[queue[0]]
                pairs.append((queue.popleft(), pop()))
                free -= 1
        if joins and free:
            # Each request arriving prefilled decodes one token an iteration: they join while the
            # decoding requests and the prompts taken stay within the cap.
            room = min(free, self._cap - self.decoding() - (limit - room))
            if room > 0:
                rank = self.rank
                before = rank[queue[0]] if queue else math.inf
                if len(joins) == 1:  # the common case, without sorting
                    request = joins[0]
                    if rank[request] < before:
                        joins.clear()
                        pairs.append((request, pop()))
                        free -= 1
                else:
                    eligible = sorted((rank[j], j) for j in joins if rank[j] < before)
                    for _, request in eligible[:room]:
                        joins.remove(request)
                        pairs.append((request, pop()))
                        free -= 1
        self._free_count = free
        return pairs


class _MachineRule(OrcaRule):
    """Orca's rule as SplitwiseSim's machines run it, where an arrival cuts a run of decode
    iterations short only if it can join the next iteration: a request arriving prefilled, or a
    prompt within the token cap; a longer prompt waits for the run to end (or for another
    arrival to cut it)."""

    first_cut: Callable[[int, int], float] | None  # type: ignore[assignment]

    def __init__(self, max_batch_tokens: int, stream: EngineStream):
        super().__init__(max_batch_tokens)
        due, phase, prompt, cap = stream.due, stream.phase, stream.prompt, max_batch_tokens

        def first_cut(position: int, known: int) -> float:
            # A machine's requests come onto its stream in order of arrival: the i-th is i.
            for i in range(position, known):
                if phase[i] == DECODE_ONLY or prompt[i] <= cap:
                    return due[i]
            return math.inf

        self.first_cut = first_cut

    def decoding(self) -> int:
        """The requests decoding on the machine now."""
        return len(self._running)


# What the cluster's own heap holds, as (time, sequence, kind, who, what): the end of a transfer
# (who: the request), and finishes a machine reported ahead of the cluster's clock (who: the
# machine, what: its pieces).
_TRANSFER, _FINISHED = 0, 1


def simulate_mixed_pool(workload: Workload, cluster: MixedPoolCluster) -> MixedPoolSchedule:
    """Run ``workload`` on ``cluster`` (see the module's docstring); return its schedule.

    Raises
    ------
    TypeError, ValueError
        On a workload or cluster that is not one, before any work; on a prompt the cost model
        cannot prefill or an iteration it cannot price.
    """
    if not isinstance(workload, Workload):
        raise TypeError(f"workload must be a Workload, got {type(workload).__name__}")
    if not isinstance(cluster, MixedPoolCluster):
        raise TypeError(f"cluster must be a MixedPoolCluster, got {type(cluster).__name__}")
    n, P, M = len(workload), cluster.prompt_machines, cluster.machines
    cost, clients = cluster.cost, cluster.clients
    rule_check = OrcaRule(cluster.max_batch_tokens)
    for model in [cost] if cluster.token_cost is None else [cost, cluster.token_cost]:
        rule_check.check(workload, model, min(clients, max(n, 1)))
    prompt: list[int] = workload.prompt_tokens.tolist()
    output: list[int] = workload.output_tokens.tolist()
    arrival: list[float] = workload.arrival.tolist()
    kv = cluster.kv_bytes_per_token
    bandwidth = cluster.kv_bandwidth * 1e9
    limit, backlog = cluster.machine_memory, cluster.prompt_backlog

    streams: list[EngineStream] = []
    queues: list[_PhaseQueue] = []
    loops: list[Generator[float, None, Any]] = []
    for m in range(M):
        stream = EngineStream()
        stream.done = []
        queue = _PhaseQueue(stream.phase, cluster.max_batch_tokens)
        rule = _MachineRule(cluster.max_batch_tokens, stream)
        queue.decoding = rule.decoding
        queues.append(queue)
        engine = open_engine(
            cluster.machine_cost(m), clients, queue, None, stream, False, most_requests=n, rule=rule
        )
        loops.append(engine)
        streams.append(stream)
    members: list[list[int]] = [[] for _ in range(M)]  # each machine's pieces: their requests
    # Each request's machines and places there, and its transfer (lists while it runs).
    prompt_machine, prompt_index, token_machine, token_index = [-1] * n, [-1] * n, [-1] * n, [-1] * n
    transfer_start, transfer_end = [math.nan] * n, [math.nan] * n
    # The routing's counts (see the module's docstring).
    routed_pending = [0] * M  # prompt tokens plus token phases routed, ever
    left_early = [0] * M  # prefill-only pieces that have left
    token_done = [0] * M  # token phases finished, as the cluster's clock has reached them
    reserved = [cluster.weights] * M  # memory reserved
    prompt_pool = list(range(P))
    token_pool = list(range(P, M))
    mixed_pool: list[int] = []
    home = ["prompt"] * P + ["token"] * (M - P)
    mixed = [False] * M
    mixed_count = 0  # machines that joined the mixed pool, ever

    def pending(m: int) -> int:
        return routed_pending[m] - streams[m].prefilled_prompt - token_done[m]

    def queued(m: int) -> int:
        # SplitwiseSim's pending queue: the requests not yet in an iteration, and the token
        # phase of each request whose both phases run here until its decoding starts.
        s = streams[m]
        prefilling = whole_waiting[m]
        if prefilling:
            starts = s.decode_start
            for local in [local for local in prefilling if starts[local] >= 0]:
                prefilling.remove(local)
        return len(s.prompt) - s.started + len(prefilling)

    results: list[Any] = [None] * M
    whole_waiting: list[set[int]] = [set() for _ in range(M)]  # both phases here, not decoding yet
    idle = [True] * M  # waiting for a request (its last yield: inf)
    cap = cluster.max_batch_tokens
    version = [0] * M
    woken = [False] * M
    events: list[tuple[float, int, int, int]] = []  # the machines' wakes: (time, tie, machine, version)
    transit: list[tuple[float, int, int, int, list[int]]] = []
    tie = 0

    def put(m: int, request: int, phase: int, t: float) -> None:
        nonlocal tie
        s = streams[m]
        local = s.add(prompt[request], output[request], 0, t, phase)
        queues[m].rank.append(arrival[request])
        members[m].append(request)
        if phase == DECODE_ONLY:
            token_index[request] = local
        else:
            prompt_index[request] = local
            if phase == WHOLE:
                token_index[request] = local
                whole_waiting[m].add(local)
        # An idle machine wakes at any arrival; one decoding with a client free, at one that can
        # join its next iteration (see _MachineRule).
        if s.cuttable and not woken[m] and (idle[m] or phase == DECODE_ONLY or prompt[request] <= cap):
            woken[m] = True
            version[m] += 1
            tie += 1
            heapq.heappush(events, (t, tie, m, version[m]))

    def unmix(m: int) -> None:
        if mixed[m] and len(streams[m].prompt) == left_early[m] + token_done[m]:  # it holds no request
            mixed[m] = False
            mixed_pool.remove(m)
            (prompt_pool if home[m] == "prompt" else token_pool).append(m)

    def finished(m: int, pieces: list[int], at: float) -> None:
        """Pieces of machine ``m`` done at ``at`` (the cluster's clock there)."""
        nonlocal tie
        s = streams[m]
        for local in pieces:
            request = members[m][local]
            if s.phase[local] == PREFILL_ONLY:  # its keys and values leave
                left_early[m] += 1
                transfer_start[request] = at
                end = at + prompt[request] * kv / bandwidth
                transfer_end[request] = end
                tie += 1
                heapq.heappush(transit, (end, tie, _TRANSFER, request, []))
            else:  # its token phase finished here: its memory is free
                token_done[m] += 1
                reserved[m] -= (prompt[request] + 1 + output[request]) * kv
        unmix(m)

    def resume(m: int, now: float) -> None:
        nonlocal tie
        try:
            t = next(loops[m])
        except StopIteration as done:
            results[m] = done.value
            t = math.inf
        else:
            version[m] += 1
            woken[m] = False
            idle[m] = t == math.inf
            if t < math.inf:
                tie += 1
                heapq.heappush(events, (t, tie, m, version[m]))
        s = streams[m]
        assert s.done is not None
        if s.done:
            if admits(now, s.done_at):
                finished(m, s.done, s.done_at)
            else:  # a run cut short by an arrival ends later: the cluster learns of it then
                tie += 1
                heapq.heappush(transit, (s.done_at, tie, _FINISHED, m, list(s.done)))
            s.done.clear()

    def route(request: int, t: float) -> None:
        nonlocal mixed_count
        p, o = prompt[request], output[request]
        first, whole = (p + 1) * kv, (p + 1 + o) * kv
        to_prompt = to_token = -1
        for pool in (prompt_pool, mixed_pool):
            if pool:
                best = min(pool, key=pending)
                if not (queued(best) > 0 and pending(best) + p > backlog):
                    to_prompt = best
                    break
        for pool in (token_pool, mixed_pool):
            if pool:
                best = min(pool, key=reserved.__getitem__)
                if reserved[best] + whole < limit:
                    to_token = best
                    break
        if to_prompt < 0 and token_pool:
            to_prompt = min(token_pool, key=pending)
            token_pool.remove(to_prompt)
            mixed_pool.append(to_prompt)
            mixed[to_prompt] = True
            mixed_count += 1
        if to_token < 0 and prompt_pool:
            to_token = min(prompt_pool, key=reserved.__getitem__)
            prompt_pool.remove(to_token)
            mixed_pool.append(to_token)
            mixed[to_token] = True
            mixed_count += 1
        if to_prompt < 0 or to_token < 0:  # both phases on the least pending machine of all
            to_prompt = to_token = min(prompt_pool + mixed_pool + token_pool, key=pending)
        prompt_machine[request], token_machine[request] = to_prompt, to_token
        if to_prompt == to_token:
            reserved[to_prompt] += whole
            routed_pending[to_prompt] += p + 1
            put(to_prompt, request, WHOLE, t)
        else:
            reserved[to_prompt] += first
            reserved[to_token] += whole
            routed_pending[to_prompt] += p
            routed_pending[to_token] += 1
            put(to_prompt, request, PREFILL_ONLY, t)

    for m in range(M):
        resume(m, 0.0)  # primed: each waits for its first request
    order = np.argsort(workload.arrival, kind="stable").tolist()
    next_arrival = 0
    while True:
        ta = arrival[order[next_arrival]] if next_arrival < n else math.inf
        td = transit[0][0] if transit else math.inf
        while events and events[0][3] != version[events[0][2]]:
            heapq.heappop(events)  # stale: the machine moved on
        te = events[0][0] if events else math.inf
        if ta == td == te == math.inf:
            break
        # At one instant: transfers ending and finishes first, then arrivals, then the machines.
        first = ta if ta < td else td
        if first < math.inf and (te == math.inf or admits(te, first)):
            if td <= ta:
                _, _, kind, who, pieces = heapq.heappop(transit)
                if kind == _TRANSFER:
                    reserved[prompt_machine[who]] -= (prompt[who] + 1) * kv  # the prompt machine frees it
                    put(token_machine[who], who, DECODE_ONLY, td)
                else:
                    finished(who, pieces, td)
                continue
            request = order[next_arrival]
            next_arrival += 1
            route(request, ta)
            continue
        _, _, m, _ = heapq.heappop(events)
        resume(m, te)
    for m in range(M):
        streams[m].closed = True
        while results[m] is None:
            resume(m, math.inf)

    schedules = []
    for m in range(M):
        s = streams[m]
        local = Workload(
            s.prompt or [1],
            s.output or [1],
            arrival=s.arrival or [0.0],
            name=f"{workload.name} on machine {m}",
        )
        if not s.prompt:
            local = local.subset([])  # an idle machine: no request
        schedules.append(
            stream_schedule(local, cluster.machine_cost(m), clients, s, range(len(s.prompt)), results[m])
        )
    info = {
        "cluster": "mixed-pool",
        "prompt_machines": P,
        "token_machines": M - P,
        "max_batch_tokens": cluster.max_batch_tokens,
        "prompt_backlog": backlog,
        "machines_mixed": mixed_count,
    }
    return MixedPoolSchedule(
        workload,
        cluster,
        tuple(schedules),
        np.array(prompt_machine, dtype=np.int64),
        np.array(prompt_index, dtype=np.int64),
        np.array(token_machine, dtype=np.int64),
        np.array(token_index, dtype=np.int64),
        np.array(transfer_start, dtype=np.float64),
        np.array(transfer_end, dtype=np.float64),
        info,
    )
