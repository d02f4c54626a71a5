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

from llmsched.cost import CostModel
from llmsched.policies import PREFILL_NOW, EngineView
from llmsched.workload import Workload

__all__ = ["Lagrangian", "Threshold", "closed_form_k", "stage_overhead", "threshold_k"]


def stage_overhead(cost: CostModel, tokens: float) -> float:
    """What a prefill stage of ``tokens`` costs beyond its share of a full stage.

    ``prefill_time(x) - x * prefill_time(cap) / cap``: the part of the stage's time that
    batching more prompts into it would not add to (for the linear model, ``a_p (1 - x/cap)``).
    """
    cap = cost.prefill_capacity
    return max(0.0, float(cost.prefill_time(tokens)) - tokens * float(cost.prefill_time(cap)) / cap)


def _decode_split(cost: CostModel, clients: int) -> tuple[float, float]:
    """(a_d, b_d): a decode iteration's fixed and per-client time, linearised at J clients."""
    full = float(cost.decode_iteration_time(clients))
    per_client = full - float(cost.decode_iteration_time(clients - 1)) if clients > 1 else 0.0
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


def closed_form_k(workload: Workload, cost: CostModel, clients: int) -> int:
    """:func:`threshold_k` for ``workload``: its mean predicted output (or, without predictions,
    its mean output, as an operator would measure from past traffic) and mean prompt."""
    out = workload.predicted_output if workload.predicted_output is not None else workload.output_tokens
    return threshold_k(cost, clients, float(np.mean(out)), float(workload.prompt_tokens.mean()))


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

    If ``C_p > C_d`` the policy keeps decoding and answers with the number of iterations
    after which ``C_d`` would reach ``C_p`` at the current free count (the loop asks
    again earlier if a request finishes); otherwise it prefills. When every arrived request
    that has not started is ready, waiting cannot batch more of them, so it prefills.
    """

    name = "lagrangian"

    def start(self, workload: Workload, cost: CostModel, clients: int) -> None:
        self._cost = cost
        self._clients = clients
        self._mean_prompt = float(workload.prompt_tokens.mean())
        self._waited = 0.0
        self._since: float | None = None
        self._free = 0

    def decide(self, engine: EngineView) -> int:
        if engine.just_prefilled or self._since is None:
            self._waited = 0.0
        else:
            self._waited += (engine.now - self._since) * self._free / self._clients
        self._since, self._free = engine.now, engine.free
        if engine.ready >= engine.unstarted:
            return self._prefill()
        tokens = min(self._cost.prefill_capacity, engine.ready * self._mean_prompt)
        c_p = stage_overhead(self._cost, tokens)
        if self._waited >= c_p:
            return self._prefill()
        rate = engine.iteration_time * engine.free / self._clients
        return max(1, math.ceil((c_p - self._waited) / rate)) if rate > 0 else 1

    def _prefill(self) -> int:
        self._since = None
        return PREFILL_NOW


class Threshold:
    """Prefill when at least ``k`` free clients have requests waiting (or all that wait are ready).

    Parameters
    ----------
    k
        The batch size; ``None`` derives it in closed form from the cost model and the mean
        planned output (:func:`threshold_k`).
    """

    name = "threshold"

    def __init__(self, k: int | None = None):
        if k is not None:
            if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
                raise ValueError(f"k must be a positive integer or None, got {k!r}")
            k = int(k)
        self.k_given = k
        self.k = k

    def start(self, workload: Workload, cost: CostModel, clients: int) -> None:
        if self.k_given is None:
            self.k = closed_form_k(workload, cost, clients)
        else:
            self.k = min(self.k_given, clients)

    def decide(self, engine: EngineView) -> int:
        k = self.k if self.k is not None else 1
        if engine.ready >= k or engine.ready >= engine.unstarted:
            return PREFILL_NOW
        # Nothing changes until a request finishes: decode until the next event.
        return max(1, engine.iterations_to_finish)
