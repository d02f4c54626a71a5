"""Online iteration policies: when to interrupt decoding with a prefill stage.

Every prefill stage stalls all decoding clients; every decode iteration run while clients
are free and requests wait leaves those clients idle. Prefill-first (the baseline) pays a
stage's fixed overhead for almost every finished request; the policies here batch waiting
requests into fewer stages. Each decision is O(1): the answer is "prefill now" or "decode
n more iterations", and the loop jumps over those iterations.
"""

from __future__ import annotations

import math

import numpy as np

from llmsched.core.cost import CostModel, prefill_seconds
from llmsched.policies import DECODE_UNTIL_EVENT, PREFILL_NOW, EngineView, KnownRequests

__all__ = [
    "Lagrangian",
    "LagrangianAsWritten",
    "SLOAware",
    "Threshold",
    "known_k",
    "slo_iterations",
    "stage_overhead",
    "threshold_k",
]


def _check_slo(slo_ttft: float | None, required: bool = False) -> float | None:
    if slo_ttft is None and not required:
        return None
    if isinstance(slo_ttft, bool) or not isinstance(slo_ttft, (int, float, np.integer, np.floating)):
        raise TypeError(f"slo_ttft must be a number of seconds > 0, got {slo_ttft!r}")
    if not 0 < slo_ttft < math.inf:
        raise ValueError(f"slo_ttft must be a finite number of seconds > 0, got {slo_ttft!r}")
    return float(slo_ttft)


def _check_weight(ttft_weight: float) -> float:
    if isinstance(ttft_weight, bool) or not isinstance(ttft_weight, (int, float, np.integer, np.floating)):
        raise TypeError(f"ttft_weight must be a number >= 0, got {ttft_weight!r}")
    if not 0 <= ttft_weight < math.inf:
        raise ValueError(f"ttft_weight must be a finite number >= 0, got {ttft_weight!r}")
    return float(ttft_weight)


def slo_iterations(engine: EngineView, slo_ttft: float, mean_prompt: float) -> int:
    """Decode iterations the oldest waiting request can still afford before its prefill.

    It meets ``slo_ttft`` if a prefill stage of the ready prompts (estimated at
    ``mean_prompt`` each, at most a full stage) starts no later than
    ``oldest_arrival + slo_ttft - prefill time``; each decode iteration run before then
    takes ``engine.iteration_time``. 0 means prefill now (the target is missed by any
    further wait, or already missed). Under a context-aware model the stage's squared
    prompts are estimated as ``tokens * mean_prompt`` (prompts of the mean length).
    """
    cost = engine.cost
    tokens = min(cost.prefill_capacity, max(1.0, engine.ready * mean_prompt))
    seconds = float(prefill_seconds(cost, tokens, tokens * max(1.0, mean_prompt)))
    slack = engine.oldest_arrival + slo_ttft - seconds - engine.now
    tau = engine.iteration_time
    if not slack > tau or tau <= 0:  # NaN-safe: no slack, or nothing left to wait for
        return 0
    if slack == math.inf:  # nothing waits that the target could be missed for: decode on
        return DECODE_UNTIL_EVENT
    return int(slack // tau)


def stage_overhead(cost: CostModel, tokens: float) -> float:
    """What a prefill stage of ``tokens`` costs beyond its share of a full stage.

    ``prefill_time(x) - x * prefill_time(cap) / cap``: the part of the stage's time that
    batching more prompts into it would not add to (for the linear model, ``a_p (1 - x/cap)``).
    A context-aware model's ``c_p`` term adds ``p^2`` per prompt, which batching scales like
    the tokens, so it cancels here and counts alone are enough.
    """
    cap = cost.prefill_capacity
    return max(0.0, float(cost.prefill_time(tokens)) - tokens * float(cost.prefill_time(cap)) / cap)


def _decode_split(cost: CostModel, clients: int) -> tuple[float, float]:
    """(a_d, b_d): a decode iteration's fixed and per-client time, from the chord between
    1 and J clients (the line itself for a linear model; for a measured batch table, its
    trend rather than the step between the last two sizes)."""
    full = float(cost.decode_iteration_time(clients))
    per_client = (full - float(cost.decode_iteration_time(1))) / (clients - 1) if clients > 1 else 0.0
    per_client = max(0.0, per_client)
    return max(0.0, full - clients * per_client), per_client


def threshold_k(cost: CostModel, clients: int, mean_output: float, mean_prompt: float = 0.0) -> int:
    """The batch size k* that balances prefill overheads against idle clients (closed form).

    Batching k requests per prefill stage saves ``o_p * n (1 - 1/k)`` of stage overhead
    (``o_p``: :func:`stage_overhead` of one prompt) and leaves on average ``(k - 1) / 2``
    clients idle, which stretches the ``a_d * N_d / J`` of fixed decode-iteration time to
    ``a_d * N_d / (J - (k-1)/2)``. For n requests of mean output ``N_d / n`` the total is
    smallest at ``k* = J * sqrt(2 o_p / (a_d * mean_output))``, clipped to ``[1, J]``.
    """
    if clients < 1:
        raise ValueError(f"clients must be >= 1, got {clients}")
    if not mean_output > 0:
        raise ValueError(f"mean_output must be > 0, got {mean_output}")
    o_p = stage_overhead(cost, max(1.0, mean_prompt))
    a_d, _ = _decode_split(cost, clients)
    if a_d <= 0:
        return clients  # idle clients cost nothing: batch as much as possible
    k = clients * math.sqrt(2.0 * o_p / (a_d * mean_output))
    return int(min(clients, max(1, round(k))))


def known_k(known: KnownRequests, cost: CostModel, clients: int, sizes: str = "predicted") -> int:
    """:func:`threshold_k` from what is known so far: the mean planned output
    (:meth:`~llmsched.policies.KnownRequests.mean_planned_output`: predictions, revealed
    lengths, or the outputs of finished requests) and the mean prompt; 1 (prefill as soon
    as a request is ready) while nothing tells the mean output."""
    mean_output = known.mean_planned_output(sizes)
    if not len(known) or not mean_output > 0:
        return 1
    return threshold_k(cost, clients, mean_output, known.mean_prompt())


class Lagrangian:
    """Pang et al.'s rule (Eqs. 41-43): prefill once the waited decode cost reaches the prefill cost.

    Interpretation (the paper names the two costs but not their units):

    * ``C_p`` (Eq. 42), the cost of adding a prefill stage now, is the time the stage adds
      to t_max beyond what its prompts would cost anyway: :func:`stage_overhead` of the
      prompts waiting (estimated as ready requests times the mean prompt, at most a full
      stage). The per-token part is paid whenever the prompts run, so it does not count.
    * ``C_d`` (Eq. 43), the waited decode time, is the decode time the free clients have
      lost since requests started waiting: each decode iteration of length tau run with f
      free clients out of J loses ``tau * f / J`` of engine time.

    * What waiting costs the ready requests themselves (their TTFT) counts beside it,
      weighted by ``ttft_weight``: each second that ``r`` ready requests wait adds
      ``ttft_weight * r / J`` seconds to ``C_d`` (with weight 1 a request's waiting second
      counts as much as a client's idle second). 0 is the paper's rule.

    If ``C_p > C_d`` the policy keeps decoding and answers with the number of iterations
    after which ``C_d`` would reach ``C_p`` at the current free and ready counts (the loop
    asks again earlier if a request finishes or arrives); otherwise it prefills. When every
    arrived request that has not started is ready, waiting cannot batch more of them, so
    it prefills. With ``slo_ttft`` it also prefills once the oldest waiting request would
    otherwise miss that TTFT target (:func:`slo_iterations`).

    The mean prompt it estimates a stage with is the mean over the requests known so far.

    Parameters
    ----------
    ttft_weight
        Weight of the ready requests' waiting time (>= 0).
    slo_ttft
        TTFT target in seconds, or None.
    """

    name = "lagrangian"

    def __init__(self, ttft_weight: float = 0.0, slo_ttft: float | None = None):
        self.ttft_weight = _check_weight(ttft_weight)
        self.slo_ttft = _check_slo(slo_ttft)

    def start(self, known: KnownRequests, cost: CostModel, clients: int) -> None:
        self._cost = cost
        self._clients = clients
        self._known = known
        self._waited = 0.0
        self._since: float | None = None
        self._free = 0
        self._ready = 0

    def decide(self, engine: EngineView) -> int:
        if engine.just_prefilled or self._since is None:
            self._waited = 0.0
        else:
            lost = self._free + self.ttft_weight * self._ready
            self._waited += (engine.now - self._since) * lost / self._clients
        self._since, self._free, self._ready = engine.now, engine.free, engine.ready
        if engine.ready >= engine.unstarted:
            return self._prefill()
        mean_prompt = self._known.mean_prompt()
        allowed = DECODE_UNTIL_EVENT  # no cap from a TTFT target
        if self.slo_ttft is not None:
            allowed = slo_iterations(engine, self.slo_ttft, mean_prompt)
            if allowed < 1:
                return self._prefill()
        tokens = min(self._cost.prefill_capacity, engine.ready * mean_prompt)
        c_p = stage_overhead(self._cost, tokens)
        if self._waited >= c_p:
            return self._prefill()
        rate = engine.iteration_time * (engine.free + self.ttft_weight * engine.ready) / self._clients
        wait = max(1, math.ceil((c_p - self._waited) / rate)) if rate > 0 else 1
        return min(wait, allowed)

    def _prefill(self) -> int:
        self._since = None
        return PREFILL_NOW


class LagrangianAsWritten:
    """Pang et al.'s rule exactly as Eqs. 41-43 read: prefill once ``C_d >= C_p``.

    * ``C_p = sum_l T^p_l y_{k,l}`` (Eq. 42): the time of the prefill stage that would run now,
      at the level its tokens need (estimated, as :class:`Lagrangian` does, as the ready
      requests times the mean prompt, at most a full stage).
    * ``C_d = T^d sum_{i,j} N^d_i w_{i,j,k}`` (Eq. 43), the "waited decode time": the tokens the
      current decode stage has decoded since the last prefill stage (``stage_tokens``: the
      active clients of each of its iterations, added up) times ``T^d``, the decode time per
      token (0.21 ms in the paper's Table III; for any cost model the per-client slope of its
      decode iteration).

    If ``C_p > C_d`` it decodes on, answering with the iterations after which ``C_d`` would
    reach ``C_p`` at the current active count; otherwise it prefills. Nothing else: unlike
    :class:`Lagrangian` it does not weigh the stage's fixed overhead alone, nor the time the
    free clients lose, and does not prefill early when every waiting request is ready. With a
    decode time flat in the batch (``T^d = 0``) ``C_d`` stays 0 and it prefills only once
    nothing decodes (the loop prefills without asking then).
    """

    name = "lagrangian-as-written"

    def start(self, known: KnownRequests, cost: CostModel, clients: int) -> None:
        self._cost = cost
        self._known = known
        self._per_token = _decode_split(cost, clients)[1]

    def decide(self, engine: EngineView) -> int:
        mean_prompt = self._known.mean_prompt()
        tokens = min(self._cost.prefill_capacity, engine.ready * mean_prompt)
        c_p = float(prefill_seconds(self._cost, tokens, tokens * max(1.0, mean_prompt)))
        c_d = self._per_token * engine.stage_tokens
        if c_d >= c_p:
            return PREFILL_NOW
        rate = self._per_token * engine.active
        return max(1, math.ceil((c_p - c_d) / rate)) if rate > 0 else DECODE_UNTIL_EVENT


class Threshold:
    """Prefill when at least ``k`` free clients have requests waiting (or all that wait are ready).

    Parameters
    ----------
    k
        The batch size; ``None`` derives it in closed form from the cost model and the mean
        planned output and prompt of the requests known so far (:func:`known_k`, fixed once
        more requests are known than there are clients).
    slo_ttft
        TTFT target in seconds, or None: with one, it also prefills once the oldest waiting
        request would otherwise miss it (:func:`slo_iterations`).
    """

    name = "threshold"

    def __init__(self, k: int | None = None, slo_ttft: float | None = None):
        if k is not None:
            if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
                raise ValueError(f"k must be a positive integer or None, got {k!r}")
            k = int(k)
        self.k_given = k
        self.k = k
        self.slo_ttft = _check_slo(slo_ttft)

    def start(self, known: KnownRequests, cost: CostModel, clients: int) -> None:
        self._known = known
        self._cost = cost
        self._clients = clients
        self._settled = self.k_given is not None
        self.k = self.k_given if self.k_given is None else min(self.k_given, clients)

    def _current_k(self) -> int:
        if not self._settled:
            known = self._known
            self.k = known_k(known, self._cost, self._clients)
            # Enough is known for the means to settle: stop re-deriving k.
            told = known.predicted_output is not None
            self._settled = len(known) > self._clients and (told or known.finished > self._clients)
        return self.k if self.k is not None else 1

    def decide(self, engine: EngineView) -> int:
        k = self._current_k()
        if engine.ready >= k or engine.ready >= engine.unstarted:
            return PREFILL_NOW
        # Nothing changes until a request finishes (or arrives): decode until the next event.
        wait = DECODE_UNTIL_EVENT
        if self.slo_ttft is not None:
            allowed = slo_iterations(engine, self.slo_ttft, self._known.mean_prompt())
            if allowed < 1:
                return PREFILL_NOW
            wait = min(wait, allowed)
        return wait


class SLOAware:
    """Decode as long as the oldest waiting request can still meet a TTFT target; then prefill.

    Between prefills it batches as many requests as the target allows: it answers with
    the decode iterations left before the oldest waiting request's prefill must start
    (:func:`slo_iterations`) and prefills when none is left. Requests that arrive in the
    meantime join the stage. It trades TTFT (every request may wait up to the target) for
    fewer prefill stages; the Lagrangian and threshold rules take a ``slo_ttft`` too, as a
    cap on their own waiting.

    Parameters
    ----------
    slo_ttft
        The TTFT target in seconds (> 0).
    """

    name = "slo"

    def __init__(self, slo_ttft: float = 1.0):
        self.slo_ttft = _check_slo(slo_ttft, required=True)

    def start(self, known: KnownRequests, cost: CostModel, clients: int) -> None:
        self._known = known

    def decide(self, engine: EngineView) -> int:
        assert self.slo_ttft is not None
        allowed = slo_iterations(engine, self.slo_ttft, self._known.mean_prompt())
        return allowed if allowed >= 1 else PREFILL_NOW
