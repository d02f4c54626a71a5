"""A disaggregated cluster's batching rule: what a prompt or token machine's iterations hold.

Every machine of a cluster (:mod:`llmsched.engines.disaggregation.cluster` has the model) runs
the one decision loop (:mod:`llmsched.engines.loop`) under :class:`PoolRule`; the cluster
(:mod:`llmsched.fleet.disaggregated`) drives the machines on one clock and routes requests
between them. A machine holds three kinds of request, which its :class:`MachineQueue` (the
request policy its loop asks) tells apart:

* ``PROMPT``: a request routed to a prompt machine as it arrives. It waits in the machine's
  request policy (:class:`~llmsched.policies.RequestPolicy`, the user's), which fills each
  stage: the machine takes again, with the room left, until the policy has nothing more that
  fits, prefills the stage (:data:`~llmsched.engines.rule.HAND_OFF`), and the requests leave
  for the machines that decode them. A policy's client is a place in the hand-over to a
  stage, free again as soon as its request is in the stage. A prompt machine takes a stage
  only while it decodes nothing and expects nothing to decode.
* ``HANDED``: a request whose keys and values have arrived (prefilled on a prompt machine). It
  waits, in order of arrival, for a client free at an iteration boundary and then decodes
  (:data:`~llmsched.engines.rule.JOIN`): continuous batching. Clients are taken the last
  released first, else the lowest never used.
* ``LENT``: a request of a stage lent to an idle token machine from a prompt machine's queue
  (the mixed pool). The machine prefills the stage itself, as a stage that hands its requests
  off (:data:`~llmsched.engines.rule.HAND_OFF`), and the cluster hands them back to it at the
  stage's end, as requests whose keys and values have arrived: they join behind those that
  arrived during the stage.

A prompt request does not cut a run of decode iterations short (a prompt machine lent to
decoding takes no stage until its decoding is done); only a request that can join does.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from llmsched.core.cost import CostModel
from llmsched.core.workload import Workload
from llmsched.engines.answers import check_pair, check_ready, refuse_capacity, refuse_take
from llmsched.engines.loop import EngineStream
from llmsched.engines.rule import HAND_OFF, JOIN, LoopView, RuleStart, RunRecord
from llmsched.policies import DECODE_UNTIL_EVENT, KnownRequests, RequestPolicy

__all__ = ["HANDED", "LENT", "PROMPT", "MachineQueue", "PoolRule", "Prompts"]

#: The kinds of request a machine holds (see the module docstring).
PROMPT, HANDED, LENT = 0, 1, 2

#: A prompt machine's request policy and what it knows.
Prompts = tuple[RequestPolicy, KnownRequests]


class MachineQueue:
    """The request policy a cluster machine's loop asks: the user's policy over the prompts
    routed to the machine, the requests that arrive prefilled, in order, and a lent stage.

    Parameters
    ----------
    index
        The machine (cluster numbering: prompt machines first).
    clients
        The machine's clients (a token machine's; a prompt machine's policy has as many
        places in the hand-over to a stage).
    stream
        The machine's :class:`~llmsched.engines.loop.EngineStream`; :meth:`add` puts a
        request on it.
    prompts
        A prompt machine's request policy and what it knows (a
        :class:`~llmsched.policies.KnownRequests` of the whole workload, whose requests it
        reveals as they reach the machine); None for a token machine. The policy names
        requests by their index in the workload, the loop by their index on the machine.
    """

    def __init__(
        self,
        index: int,
        clients: int,
        stream: EngineStream,
        prompts: Prompts | None = None,
        batch_tokens: int | None = None,
    ):
        self.index, self.clients, self.stream = index, clients, stream
        # The most prompt tokens a stage of several prompts holds (a longer one runs alone).
        self.batch_tokens = batch_tokens
        self.own_view = True  # the loop's view of the requests is not read: see start
        policy, known = prompts if prompts is not None else (None, None)
        self.policy, self.known = policy, known
        self.requests = len(known.prompt_tokens) if known is not None else 0
        self.name = str(getattr(policy, "name", type(policy).__name__)) if policy is not None else "fifo"
        self.kind: list[int] = []  # per request on the machine
        self.member: list[int] = []  # each one's index in the workload
        self.incoming = 0  # requests expected here to decode, not yet arrived
        self.step = 0  # what the last ready() > 0 offers: JOIN or HAND_OFF
        self._start_state()

    def _start_state(self) -> None:
        self.joins: deque[int] = deque()
        self.lent: list[int] = []
        self.released: list[int] = []
        self.fresh = 0
        self.waiting: dict[int, int] = {}  # prompts waiting: workload index -> index here
        # Prompts the policy knows of and the loop has not yet seen arrive: no stage is taken
        # before the loop's clock has reached them.
        self.unseen = 0
        self.seen = bytearray()
        self._ready = 0

    # -- what the cluster tells it ---------------------------------------------------------
    def add(self, request: int, kind: int, prompt: int, output: int, planned: int, now: float) -> int:
        """Put ``request`` (its index in the workload) on the machine's stream at ``now``;
        return its index here. A prompt's policy learns of it at once (the loop learns of it
        at its next decision point, and a stage may be lent from the policy before)."""
        local = self.stream.add(prompt, output, planned, now)
        self.kind.append(kind)
        self.member.append(request)
        self.seen.append(0)
        if kind == PROMPT:
            self.unseen += 1  # the policy learns of it now, as it is routed here
            assert self.known is not None and self.policy is not None
            self.known.reveal(request, prompt, planned, output, now)
            self.waiting[request] = local
            self.policy.arrive(request)
        return local

    def expect(self) -> None:
        """A request will arrive here prefilled, to decode (the cluster says so when it routes
        one here, before it arrives)."""
        self.incoming += 1

    @property
    def load(self) -> int:
        """Requests decoding here, waiting to join or expected."""
        return self.incoming + len(self.joins) + self.fresh - len(self.released)

    def lend(self, capacity: int, now: float) -> list[int]:
        """One take of the user's policy for a stage of at most ``capacity`` tokens lent to a
        token machine at ``now``; the requests leave this machine (their indices in the
        workload)."""
        if self.known is not None:
            self.known.now = now  # the user's policy reads the time it is asked at
        batch = self._take(capacity, False)
        stream, waiting, seen = self.stream, self.waiting, self.seen
        for request in batch:
            local = waiting.pop(request)
            stream.withdrawn.append(local)
            if not seen[local]:  # the loop will not see it arrive
                seen[local] = 1
                self.unseen -= 1
        return batch

    # -- the request policy the loop asks --------------------------------------------------
    def start(self, known: KnownRequests, clients: int) -> None:
        self._start_state()
        self.incoming = 0
        self._clock = known  # the loop's view: the time of each decision point (known.now)
        if self.policy is not None:
            self.policy.start(self.known, self.clients)  # type: ignore[arg-type]

    def arrive(self, local: int) -> None:
        kind = self.kind[local]
        if kind == HANDED:
            self.incoming -= 1
            self.joins.append(local)
        elif kind == LENT:
            self.lent.append(local)
        else:  # a prompt: its policy learnt of it when it was routed here (see add)
            self.seen[local] = 1
            self.unseen -= 1

    def release(self, client: int) -> None:
        self.released.append(client)

    def ready(self) -> int:
        if self.lent:
            self.step = HAND_OFF
            return len(self.lent)
        if self.joins:
            free = len(self.released) + self.clients - self.fresh
            self.step = JOIN
            return min(len(self.joins), free)
        policy = self.policy
        if (
            policy is None
            or not self.waiting
            or self.unseen
            or self.incoming
            or self.fresh > len(self.released)
        ):
            return 0  # nothing waits, or it decodes or expects to (see load)
        assert self.known is not None
        self.known.now = self._clock.now  # the user's policy reads the time it is asked at
        ready = policy.ready()
        if type(ready) is not int or ready < 0:
            ready = check_ready(ready, policy)
        self.step = HAND_OFF
        self._ready = ready
        return ready

    def take(self, capacity: int) -> list[tuple[int, int]]:
        step = self.step
        if step == JOIN:
            joins = self.joins
            count = min(len(joins), len(self.released) + self.clients - self.fresh)
            return [(joins.popleft(), self._client()) for _ in range(count)]
        if self.lent:  # a lent stage: prefilled here, then handed back to decode (see the cluster)
            lent, self.lent = self.lent, []
            return [(local, 0) for local in lent]
        waiting = self.waiting
        # The user's policy names places in the hand-over, free again at once: none is held here.
        return [(waiting.pop(request), 0) for request in self._take(capacity, True)]

    def _client(self) -> int:
        if self.released:
            return self.released.pop()
        self.fresh += 1
        return self.fresh - 1

    def _take(self, capacity: int, whole: bool) -> list[int]:
        """The waiting prompts the user's policy gives a stage of ``capacity`` tokens: one
        take, or, ``whole``, takes until the policy has nothing more that fits. Every answer
        is checked as the decision loop checks it (:mod:`llmsched.engines.answers`), with
        the same messages."""
        policy = self.policy
        assert policy is not None
        prompt, waiting = self.stream.prompt, self.waiting
        batch: list[int] = []
        room = capacity
        cap = self.batch_tokens
        capped = cap is not None and cap < capacity
        if cap is not None and capped:
            room = cap
        ready = self._ready if whole else -1  # asked just before a stage of its own
        self._ready = 0
        while room > 0:  # a prompt holds a token at least
            if ready < 0:
                ready = policy.ready()
                if type(ready) is not int or ready < 0:
                    ready = check_ready(ready, policy)
            if not ready:
                break
            answered, ready = ready, -1
            asked = room
            pairs = policy.take(asked)
            if type(pairs) is list and not pairs and capped and not batch:
                # The policy's next prompt is longer than a batch may hold: it runs alone. Asked
                # for a room of each waiting prompt's size in turn, the policy answers first
                # at its own prompt's size, which leaves no room for another (an empty answer
                # removes nothing).
                for size in sorted({prompt[local] for local in waiting.values()}):
                    if room < size <= capacity:
                        asked = size
                        pairs = policy.take(asked)
                        if type(pairs) is not list or pairs:
                            break
                room = asked
            if type(pairs) is not list or not pairs:
                if type(pairs) is list and batch:
                    break  # nothing more fits in the room left
                refuse_take(pairs, policy, asked, answered)
            for pair in pairs:
                if type(pair) is tuple and len(pair) == 2 and type(pair[0]) is int and type(pair[1]) is int:
                    request, client = pair
                else:
                    request, client = check_pair(pair, policy, asked)
                if not (request in waiting and request not in batch and 0 <= client < self.clients):
                    raise ValueError(
                        f"request policy {type(policy).__name__}.take({asked}) is invalid: "
                        + self._problem(request, client, batch)
                    )
                room -= prompt[waiting[request]]
                batch.append(request)
            if room < 0:
                refuse_capacity(asked - room, asked, policy)
            if len(pairs) > 1 and len({client for _, client in pairs}) < len(pairs):
                raise ValueError(
                    f"request policy {type(policy).__name__}.take({asked}) is invalid: a client appears twice"
                )
            release = policy.release
            for _, client in pairs:
                release(client)  # its request is in the stage: the place in the hand-over is free
            if not whole:
                break
        return batch

    def _problem(self, request: int, client: int, batch: list[int]) -> str:
        """What is wrong with a pair that failed the quick check (worded as the loop's)."""
        n = self.requests
        if not 0 <= request < n:
            return f"request {request} is not in the workload (0..{n - 1})"
        if request in batch:
            return f"request {request} appears twice"
        if request not in self.waiting:
            return (
                f"request {request} does not wait on prompt machine {self.index} "
                "(not arrived, taken or routed elsewhere)"
            )
        return f"client {client} does not exist (clients are 0..{self.clients - 1})"


class PoolRule:
    """A cluster machine's iterations: what its :class:`MachineQueue` offers (a stage that
    hands its requests off, requests joining, a lent stage), else decoding on.

    The cluster builds the schedule from every machine's record, so the rule's ``schedule``
    gives the record back as it is.
    """

    mode = "disaggregated"
    view: LoopView | None = None  # no iteration policy: no machine chooses between the phases
    admit_below = math.inf
    under_way: tuple[()] = ()
    first_cut: Callable[[int, int], float] | None

    def __init__(self, queue: MachineQueue):
        self.queue = queue
        if queue.policy is None:  # a token machine: every request may cut a run short
            self.first_cut = None
            return
        stream = queue.stream
        kind, due = queue.kind, stream.due

        def first_cut(position: int, known: int) -> float:
            # Requests come onto the stream in order of arrival: the i-th to arrive is i.
            for i in range(position, known):
                if kind[i] != PROMPT:
                    return due[i]
            return math.inf

        self.first_cut = first_cut

    def check(self, workload: Workload, cost: CostModel, clients: int) -> None:
        pass  # the cluster checks the instance (DisaggregatedCluster.check)

    def start(self, engine: RuleStart) -> None:
        pass

    def plan(self, ready: int, active: int, iteration: int) -> int:
        return self.queue.step if ready else DECODE_UNTIL_EVENT

    def taken(self, pairs: list[tuple[int, int]], active: int) -> int:
        # After a join: the queue gave every request that could join, and a machine that
        # decodes takes no stage, so it decodes on.
        return DECODE_UNTIL_EVENT

    def info(self, facts: dict[str, Any]) -> dict[str, Any]:
        return facts

    def schedule(
        self, workload: Workload, cost: CostModel, clients: int, record: RunRecord, measured: bool
    ) -> RunRecord:
        return record


def stage_requests(pairs: Sequence[tuple[int, int]], queue: MachineQueue) -> list[int]:
    """The workload's indices of a stage's ``(request, client)`` pairs on ``queue``'s machine."""
    member = queue.member
    return [member[local] for local, _ in pairs]
