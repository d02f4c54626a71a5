"""Lower bounds on the makespan of a fused engine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from llmsched.core.cost import (
    CostModel,
    context_rate,
    decode_seconds,
    is_context_aware,
    request_context,
)
from llmsched.core.table import decode_lines, prefill_lines
from llmsched.core.workload import Workload
from llmsched.engines.fusion.iteration import check_fused_instance
from llmsched.engines.fusion.schedule import fixed_cost

if TYPE_CHECKING:
    pass

__all__ = ["FusedBounds", "fused_lower_bounds"]


# ------------------------------------------------------------------ lower bound
@dataclass(frozen=True)
class FusedBounds:
    """Lower bounds on any fused schedule's makespan (seconds).

    ``iterations``: the fewest iterations any fused schedule needs; ``work``: the least time
    all of them take, from the earliest arrival; ``single_request``: the slowest request
    alone, from its arrival; ``strong``: the larger of the two.
    """

    iterations: int
    work: float
    single_request: float
    strong: float


def _iteration_lines(cost: Any, least: float) -> list[tuple[float, float, float]]:
    """``(m, beta, gamma)`` with every fused iteration at least ``m + beta * d + gamma * c``
    plus its context and squares terms (``d`` decoding requests, ``c`` chunk tokens), each
    ``>= 0``; ``least`` is the least decode time of any batch that can occur.

    For a decode line ``alpha + beta * k`` and a prefill line ``p + g * c``: decoding alone
    costs at least ``alpha + beta * d``; chunks alone ``p + g * c``; both, under the fused
    rule, their sum less the shared fixed cost ``fixed`` (so ``alpha + p - fixed`` in place
    of a base), and under a mixed factor ``f >= 1`` (SplitwiseSim's rule) ``f * (p + g * (c +
    d))``, whose slope in ``d`` is ``f * g``. ``m`` is the least of the bases and ``beta``
    the lesser slope in ``d``; a combination whose ``m`` is negative bounds nothing (the
    count of iterations is bounded from below only) and is left out. One flat line is always
    kept: ``m`` the lesser of ``least`` and the least prefill time (the largest base), as
    an iteration holding both takes at least its chunks' prefill time under either rule (the
    fused rule takes off no more than the decode batch's own time).
    """
    factor = getattr(cost, "mixed_factor", None)
    fixed = float(fixed_cost(cost)) if factor is None else 0.0
    decode = [*decode_lines(cost), (least, 0.0)]
    prefill = prefill_lines(cost)
    # Every prefill line has a slope >= 0, so a chunk of any size takes at least its base.
    chunk = max([base for base, gamma in prefill if gamma >= 0], default=0.0)
    out = [(max(0.0, min(least, chunk)), 0.0, 0.0)]
    for alpha, beta in decode:
        for base, gamma in prefill:
            if beta < 0 or gamma < 0:
                continue
            if factor is None:
                m = min(alpha, base, alpha + base - fixed)
                slope = beta
            else:
                m = min(alpha, base, factor * base)
                slope = min(beta, factor * gamma)
            if m >= 0:
                out.append((m, slope, gamma))
    return out


def fused_lower_bounds(workload: Workload, cost: CostModel, clients: int, token_budget: int) -> FusedBounds:
    """Lower bounds on the makespan of every fused schedule of the instance.

    Proof. An iteration holding ``d`` decoding requests at context ``x`` and ``c`` chunk
    tokens of ``q`` squared tokens takes at least ``m + beta * d + c_d * x + gamma * c +
    c_p * q`` for each ``(m, beta, gamma)`` of :func:`_iteration_lines` (all >= 0): a line
    below the decode time at every batch size (``a_d + b_d * k`` itself, or a line of a batch
    table's hull) and one below the prefill time of every chunk (``a_p + b_p * c``, or a line
    of a prefill table's hull), put together by the model's rule for an iteration holding
    both. Summed over the iterations, the decode tokens give ``sum N^d``, the contexts
    ``sum request_context`` (each request reads ``N^p + j`` at its j-th token, whenever that
    comes), the chunks ``sum N^p`` and their squares ``sum (N^p)^2`` (a prompt's chunks add
    up to its square). Every request needs ``ceil(N^p / B)`` iterations of chunks (at most
    ``B`` tokens each) and then ``N^d`` more, all distinct; an iteration serves at most ``J``
    requests and carries at most ``B`` tokens: so at least ``max_i (ceil(N^p_i / B) + N^d_i)``,
    ``ceil(sum_i (ceil(N^p_i / B) + N^d_i) / J)`` and ``ceil(sum (N^p + N^d) / B)`` iterations,
    each costing at least ``m``. No iteration starts before the first arrival. Alone, request
    i needs the same terms of its own after its arrival (every coefficient being >= 0, the
    other requests in its iterations only add).
    """
    budget = check_fused_instance(workload, cost, clients, token_budget)
    price: Any = cost
    c_p = float(price.prefill_per_square) if is_context_aware(cost) else 0.0
    c_d = context_rate(cost)
    # No batch holds more requests than there are: nothing is sized by idle clients.
    least = float(np.min(decode_seconds(cost, np.arange(1, min(clients, len(workload)) + 1), 0)))
    lines = _iteration_lines(cost, least)
    prompt, output = workload.prompt_tokens, workload.output_tokens
    per_request = -(-prompt // budget) + output
    iterations = max(
        int(per_request.max()),
        -(-int(per_request.sum()) // clients),
        -(-(int(prompt.sum()) + int(output.sum())) // budget),
    )
    squares = sum(p * p for p in prompt.tolist())
    contexts = sum(request_context(prompt, output).tolist())
    prompts, tokens = int(prompt.sum()), int(output.sum())
    work = max(iterations * m + beta * tokens + gamma * prompts for m, beta, gamma in lines)
    work += c_p * squares + c_d * contexts
    alone = [m * per_request + beta * output + gamma * prompt for m, beta, gamma in lines]  # each line
    alone_best = np.max(np.vstack(alone), axis=0) + c_p * prompt.astype(np.float64) ** 2
    alone_best = alone_best + c_d * request_context(prompt, output)
    single = float((workload.arrival + alone_best).max())
    work = float(workload.arrival.min()) + work
    return FusedBounds(iterations, work, single, max(work, single))
