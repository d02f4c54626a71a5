"""Lower bounds on the makespan of a fused engine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from llmsched.core.cost import (
    ContextCostModel,
    CostModel,
    context_rate,
    decode_seconds,
    is_context_aware,
    request_context,
)
from llmsched.core.workload import Workload
from llmsched.engines.fusion.iteration import check_fused_instance

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


def fused_lower_bounds(workload: Workload, cost: CostModel, clients: int, token_budget: int) -> FusedBounds:
    """Lower bounds on the makespan of every fused schedule of the instance.

    Proof. An iteration holding ``d`` decoding requests at context ``x`` and ``c`` chunk
    tokens of ``q`` squared tokens takes at least ``m + beta * d + c_d * x + b_p * c + c_p * q``
    with ``m = min(alpha, a_p)``, for any line ``alpha + beta * k`` (``alpha, beta >= 0``)
    below the context-free decode time at every batch size (``a_d + b_d * k`` itself, or a
    line of a batch table's hull): decoding alone costs the decode iteration, chunks alone
    the prefill stage, both their sum less the smaller fixed cost, and every coefficient is
    >= 0. Summed over the iterations, the decode tokens give ``sum N^d``, the contexts
    ``sum request_context`` (each request reads ``N^p + j`` at its j-th token, whenever that
    comes), the chunks ``sum N^p`` and their squares ``sum (N^p)^2`` (a prompt's chunks add
    up to its square). Every request needs ``ceil(N^p / B)`` iterations of chunks (at most
    ``B`` tokens each) and then ``N^d`` more, all distinct; an iteration serves at most ``J``
    requests and carries at most ``B`` tokens: so at least ``max_i (ceil(N^p_i / B) + N^d_i)``,
    ``ceil(sum_i (ceil(N^p_i / B) + N^d_i) / J)`` and ``ceil(sum (N^p + N^d) / B)`` iterations,
    each costing at least ``m``. No iteration starts before the first arrival. Alone, request
    i needs the same terms of its own after its arrival.
    """
    budget = check_fused_instance(workload, cost, clients, token_budget)
    price: Any = cost
    a_p, b_p = float(price.prefill_base), float(price.prefill_per_token)
    c_p = float(price.prefill_per_square) if is_context_aware(cost) else 0.0
    c_d = context_rate(cost)
    if isinstance(cost, ContextCostModel):
        lines = [(alpha, beta) for alpha, beta in cost.batch_hull() if alpha >= 0 and beta >= 0]
    else:
        lines = [(float(price.decode_base), float(price.decode_per_client))]
    # No batch holds more requests than there are: nothing is sized by idle clients.
    least = float(np.min(decode_seconds(cost, np.arange(1, min(clients, len(workload)) + 1), 0)))
    lines.append((least, 0.0))  # below every batch size that can occur
    prompt, output = workload.prompt_tokens, workload.output_tokens
    per_request = -(-prompt // budget) + output
    iterations = max(
        int(per_request.max()),
        -(-int(per_request.sum()) // clients),
        -(-(int(prompt.sum()) + int(output.sum())) // budget),
    )
    squares = sum(p * p for p in prompt.tolist())
    contexts = sum(request_context(prompt, output).tolist())
    fixed = b_p * int(prompt.sum()) + c_p * squares + c_d * contexts
    tokens = int(output.sum())
    work = max(iterations * min(alpha, a_p) + beta * tokens for alpha, beta in lines) + fixed
    alone = [min(alpha, a_p) * per_request + beta * output for alpha, beta in lines]  # per request, each line
    alone_best = np.max(np.vstack(alone), axis=0) + b_p * prompt + c_p * prompt.astype(np.float64) ** 2
    alone_best = alone_best + c_d * request_context(prompt, output)
    single = float((workload.arrival + alone_best).max())
    work = float(workload.arrival.min()) + work
    return FusedBounds(iterations, work, single, max(work, single))
