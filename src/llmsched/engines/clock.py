"""The executor under the one decision loop, and the simulator's: the cost-model clock.

An executor runs what the loop decides an iteration holds and tells the time
(:class:`Executor`); whichever batching rule the loop asks, its iterations reach the
executor through the same three calls: a prefill stage, a run of decode iterations, or one
mixed iteration (decoding requests plus prompt chunks). :class:`CostClock` is the simulator's
executor: every stage takes what the cost model says, and a run of decode iterations over
which nothing can change is one arithmetic step. The torch engine's executor is
:class:`llmsched.runtime.executor.EngineExecutor`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from llmsched.core.cost import CostModel, context_rate, is_context_aware
from llmsched.core.instance import check_stage_time
from llmsched.core.workload import Workload
from llmsched.engines.fusion.iteration import fused_iteration_time, mixed_terms, padded_iteration_time

__all__ = ["Chunk", "CostClock", "DecodeRun", "Executor", "admits", "iteration_times"]

#: (start, iterations, first iteration time, step): ``iterations`` consecutive decode
#: iterations from ``start``, the first ``first iteration time`` seconds long and each next
#: one ``step`` seconds longer (0 unless the cost model prices context).
DecodeRun = tuple[float, int, float, float]

#: (request, client, start, tokens): ``tokens`` prompt tokens of ``request``, from position
#: ``start`` of its prompt, into the cache of ``client``.
Chunk = tuple[int, int, int, int]

_INF = math.inf


def admits(now: float, due: float) -> bool:
    """Whether a request due at ``due`` has arrived at ``now``.

    Within a few ulps counts: ``now`` is a sum of iteration times that may fall a rounding
    error short of an arrival a decode run was sized to reach.
    """
    return due <= now + 8 * math.ulp(now)


def iteration_times(cost: CostModel, most_active: int) -> list[float]:
    """``cost.decode_iteration_time(a)`` for ``a`` from 0 to ``most_active``, each checked.

    Raises
    ------
    ValueError
        When a time for one or more active clients is not finite or is negative, naming
        the cost model and the value.
    """
    times = np.asarray(cost.decode_iteration_time(np.arange(most_active + 1)), dtype=np.float64)
    if times.shape != (most_active + 1,):
        times = np.broadcast_to(times, (most_active + 1,))
    used = times[1:]
    # NaN fails both comparisons; a NaN or inf anywhere makes the max not < inf.
    if used.size and not (used.min() >= 0 and used.max() < math.inf):
        active = int(np.flatnonzero(~(np.isfinite(used) & (used >= 0)))[0]) + 1
        check_stage_time(cost, f"decode_iteration_time({active})", times[active])
    return times.tolist()


@runtime_checkable
class Executor(Protocol):
    """What runs the iterations the loop decides on, and tells the time.

    The loop calls ``start`` once, then any sequence of the others; an executor needs no
    knowledge of the policies or of the batching rule: every rule's iterations come as a
    prefill stage, a run of decode iterations or one mixed iteration.

    Under KV-cache memory, an executor that holds requests' keys and values may define
    ``preempt(victims)``: the loop calls it with ``(client, request, continuation)`` for each
    request it preempts before the next iteration (all of one round at once, before any is
    released), so the executor frees their memory; ``continuation`` is the request number of
    what is left of it, whose prompt is its prompt and the tokens it has decoded.

    Attributes
    ----------
    measured
        True when the times are measured on a clock (the schedule is then marked measured
        and its times are not the cost model's).
    """

    measured: bool

    def start(self, workload: Workload, cost: CostModel, clients: int) -> None:
        """Prepare a run: time 0 is now."""
        ...

    def now(self) -> float:
        """Seconds since ``start``. The loop asks once; then it takes the time from what
        ``prefill``, ``decode``, ``mixed`` and ``wait_until`` return."""
        ...

    def wait_until(self, time: float) -> float:
        """Idle (nothing decodes, nothing can be prefilled) until ``time``; return the time
        now (at least ``time``)."""
        ...

    def prefill(self, pairs: Sequence[tuple[int, int]], tokens: int) -> tuple[float, float]:
        """Run one prefill stage of ``(request, client)`` pairs holding ``tokens`` prompt
        tokens, decoding paused; return its (start, end)."""
        ...

    def decode(
        self, running: Mapping[int, int], iterations: int, due: float, context: int
    ) -> list[DecodeRun]:
        """Run decode iterations of the requests in ``running`` (client -> request).

        Run ``iterations`` of them, or fewer: stop after the first iteration whose end
        admits ``due`` (an arrival the loop must see; ``inf`` when none). Run at least one.
        ``context`` is the context tokens of the running requests at the first iteration
        (it grows by ``len(running)`` an iteration). Return what ran as :data:`DecodeRun`
        tuples in time order; the last one's end (its start plus the sum of its iteration
        times) is the time now.
        """
        ...

    def mixed(
        self, running: Mapping[int, int], chunks: Sequence[Chunk], tokens: int, squares: int, context: int
    ) -> DecodeRun:
        """Run one iteration of every request in ``running`` (one token each, at ``context``
        context tokens in all) plus the prompt ``chunks`` (:data:`Chunk` tuples), which hold
        ``tokens`` prompt tokens of ``squares`` squared tokens (a chunk of ``c`` tokens from
        position ``s`` counts ``(s + c)^2 - s^2``). Return it as a :data:`DecodeRun` of one
        iteration: (start, 1, seconds, step), ``step`` being what a next iteration of the same
        decoding requests would add (0 unless the cost model prices context)."""
        ...

    def padded(self, running: Mapping[int, int], chunks: Sequence[Chunk], context: int) -> DecodeRun:
        """Run one padded iteration: the whole prompts ``chunks`` and the next token of every
        request in ``running`` (at ``context`` context tokens in all), each row padded to the
        longest prompt; return it as a :data:`DecodeRun` of one iteration, like :meth:`mixed`."""
        ...

    def info(self) -> dict[str, Any]:
        """What the schedule's ``info`` should say about this executor."""
        ...


class CostClock:
    """The simulator's executor: iterations take the cost model's times, with no device.

    A run of decode iterations is one step of arithmetic: ``k`` iterations of ``tau``
    seconds end at ``start + tau * k``. Under a context-aware cost model the context grows
    by one token per active request and iteration, so iteration ``i`` of the run lasts
    ``tau + step * i`` (``step = c_d * active``) and ``k`` of them end at
    ``start + tau * k + step * k (k - 1) / 2``. An arrival the loop must see cuts the run at
    the first iteration end at or after it. A mixed iteration is priced by
    :func:`~llmsched.engines.fusion.iteration.fused_iteration_time`.
    """

    __slots__ = (
        "_cost",
        "_mixed_terms",
        "_mixed_time",
        "_per_context",
        "_prefill_time",
        "_prompt",
        "_tau",
        "_time",
    )
    measured = False

    def __init__(self) -> None:
        self._time = 0.0
        self._tau: list[float] = []
        self._cost: Any = None
        self._prefill_time: Any = None
        self._per_context = 0.0
        self._prompt: list[int] | None = None  # prompt lengths, for a model that prices squares
        # (prefill base, per token, per square, shared fixed cost) of a model whose mixed
        # iterations the clock prices itself (see ``mixed``), else None.
        self._mixed_terms: tuple[float, float, float, float] | None = None
        # A model that prices a mixed iteration itself (a measured table), else None.
        self._mixed_time: Any = None

    def start(self, workload: Workload, cost: CostModel, clients: int) -> None:
        # At most min(J, n) clients are ever active.
        self.open(cost, min(clients, len(workload)), workload.prompt_tokens.tolist())

    def open(self, cost: CostModel, most_active: int, prompt: list[int]) -> None:
        """Start a run in which at most ``most_active`` requests decode together; ``prompt``
        holds each request's prompt length (a list that may grow as requests join)."""
        self._time = 0.0
        self._cost = cost
        self._prefill_time = cost.prefill_time
        self._tau = iteration_times(cost, most_active)
        aware = is_context_aware(cost)
        self._per_context = context_rate(cost)
        self._prompt = prompt if aware else None
        if aware and not (0.0 <= self._per_context < _INF):
            check_stage_time(cost, "decode_per_context", self._per_context)
        self._mixed_terms = mixed_terms(cost)
        self._mixed_time = getattr(cost, "mixed_iteration_time", None)

    def run_end(self, active: int, iterations: int, context: int) -> float:
        """When ``iterations`` decode iterations of ``active`` requests holding ``context``
        tokens would end if nothing cut them short (what :meth:`decode` returns with no due)."""
        tau = self._tau[active]
        if self._per_context:
            first = tau + self._per_context * context
            growth = self._per_context * active
            return self._time + (first * iterations + growth * (iterations * (iterations - 1) / 2))
        return self._time + tau * iterations

    def now(self) -> float:
        return self._time

    def wait_until(self, time: float) -> float:
        self._time = max(self._time, time)
        return self._time

    def prefill(self, pairs: Sequence[tuple[int, int]], tokens: int) -> tuple[float, float]:
        start = self._time
        prompt = self._prompt
        if prompt is None:
            seconds = float(self._prefill_time(tokens))
        else:
            squares = sum(prompt[request] ** 2 for request, _ in pairs)
            seconds = float(self._prefill_time(tokens, squares))
        if not 0.0 <= seconds < _INF:
            check_stage_time(self._cost, f"prefill_time({tokens})", seconds)
        end = self._time = start + seconds
        return start, end

    def decode(
        self, running: Mapping[int, int], iterations: int, due: float, context: int = 0
    ) -> list[DecodeRun]:
        start = self._time
        tau = self._tau[len(running)]
        if self._per_context:
            return self._decode_growing(start, tau, len(running), iterations, due, context)
        step = iterations
        if due < _INF and tau > 0:
            # The fewest iterations after which the arrival counts as arrived.
            until = max(1, math.ceil((due - start) / tau))
            if until > 1 and admits(start + tau * (until - 1), due):
                until -= 1
            step = min(step, until)
        self._time = start + tau * step
        return [(start, step, tau, 0.0)]

    def _decode_growing(
        self, start: float, tau: float, active: int, iterations: int, due: float, context: int
    ) -> list[DecodeRun]:
        """A run whose iterations grow by ``c_d * active`` each (a context-aware model)."""
        first = tau + self._per_context * context
        growth = self._per_context * active

        def elapsed(k: int) -> float:
            return first * k + growth * (k * (k - 1) / 2)

        step = iterations
        if due < _INF and (first > 0 or growth > 0):
            # The fewest iterations k with start + elapsed(k) >= due: the positive root of
            # growth/2 k^2 + (first - growth/2) k - (due - start), then corrected for rounding.
            # Written 2 span / (linear + sqrt(...)), which does not cancel when growth is tiny
            # next to first (linear = first - growth/2 >= 0, the context holding one token per
            # active request at least).
            span = max(due - start, 0.0)
            half = growth / 2
            linear = first - half
            root = 2 * span / (linear + math.sqrt(linear * linear + 4 * half * span))
            until = max(1, min(iterations, math.ceil(root)))
            while until > 1 and admits(start + elapsed(until - 1), due):
                until -= 1
            while until < iterations and not admits(start + elapsed(until), due):
                until += 1
            step = min(step, until)
        self._time = start + elapsed(step)
        return [(start, step, first, growth)]

    def mixed(
        self, running: Mapping[int, int], chunks: Sequence[Chunk], tokens: int, squares: int, context: int
    ) -> DecodeRun:
        start = self._time
        active = len(running)
        terms = self._mixed_terms
        if terms is not None:
            # fused_iteration_time's sum, term by term in its order (the same floats), without
            # its checks and dispatch: the loop calls this once an iteration.
            base, per_token, per_square, fixed = terms
            decode = self._tau[active]
            if self._per_context:
                decode = decode + self._per_context * context
            if not tokens:
                seconds = decode
            else:
                prefill = base + per_token * tokens
                if per_square:
                    prefill = prefill + per_square * squares
                if not active:
                    seconds = prefill
                else:
                    shared = self._tau[active]
                    seconds = decode + prefill - (fixed if fixed < shared else shared)
        elif self._mixed_time is not None:  # what fused_iteration_time asks of such a model
            seconds = float(self._mixed_time(active, context, tokens, squares))
        else:
            seconds = float(fused_iteration_time(self._cost, active, context, tokens, squares))
        if not 0.0 <= seconds < _INF:
            call = f"fused_iteration_time({active}, {context}, {tokens}, {squares})"
            check_stage_time(self._cost, call, seconds)
        self._time = start + seconds
        return start, 1, seconds, self._per_context * active

    def padded(self, running: Mapping[int, int], chunks: Sequence[Chunk], context: int) -> DecodeRun:
        start = self._time
        active = len(running)
        width = max(chunk[3] for chunk in chunks)
        seconds = float(padded_iteration_time(self._cost, active + len(chunks), width, context))
        if not 0.0 <= seconds < _INF:
            call = f"padded_iteration_time({active + len(chunks)}, {width}, {context})"
            check_stage_time(self._cost, call, seconds)
        self._time = start + seconds
        return start, 1, seconds, self._per_context * active

    def info(self) -> dict[str, Any]:
        return {}
