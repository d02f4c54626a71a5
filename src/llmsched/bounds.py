"""Lower bounds on the makespan of any schedule of a workload.

Two bounds, both valid for every schedule the system model allows:

``paper``
    Eqs. 31-32 of Pang et al.: T_LB = t_p + t_d, with prefill and decode separated. t_p is
    the least time the prefill stages can take for all prompt tokens (the paper's
    ``T^p_L * ceil(sum N^p / N^cap_L)``, every stage full); t_d is the decode time of the
    busiest client when the decode tokens are spread over the clients as evenly as
    possible (the minimizing-makespan bin packing of Eqs. 26-30). Without an exact bin
    packing we use its trivial bound ``max(ceil(sum N^d / J), max N^d)`` tokens; pass
    ``decode_tokens_makespan`` to use an exact or better value.

    For the paper's own semantics (one prefill level, a constant T^d per decode token)
    this is exactly its formula. For a linear cost model, charging every stage as full or
    every token at the full batch's rate can overestimate (a stage with fewer tokens, or an
    iteration with fewer clients, is faster), so we charge each term at its least possible
    cost: prefill ``a_p * #stages + b_p * sum N^p`` and decode
    ``a_d * #iterations + b_d * sum N^d``, where the busiest client needs at least t_d's
    token count of iterations. On a full GSM8K batch the difference is small (see the
    ``reproduce`` report).

``paper_literal`` (reported, not a bound)
    Eqs. 31-32 with the paper's arithmetic: ``prefill_time(cap) * ceil(sum N^p / cap)
    + decode_iteration_time(J) * C``. It can exceed the optimum (one request on 200
    clients decodes at batch-1 speed), so nothing treats it as a bound; it is printed to
    compare with the paper's 180 s.

``strong``
    The paper's bound with two refinements, and beside it the slowest single request
    run alone (``arrival + prefill_time(N^p_i) + N^d_i * decode_iteration_time(1)``); the
    larger of the two. The refinements: no work starts before the earliest arrival, and
    prompts are indivisible, so prompts longer than half the capacity need a stage each
    (the number of stages is at least the larger of that count and ``ceil(sum N^p / cap)``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmsched.cost import CostModel
from llmsched.simulate import check_instance
from llmsched.workload import Workload

__all__ = ["LowerBounds", "lower_bounds", "trivial_decode_tokens_makespan"]


@dataclass(frozen=True)
class LowerBounds:
    """Lower bounds on the makespan (seconds) with their parts."""

    prefill: float  # t_p: least total prefill time
    decode: float  # t_d: least total decode time, from the balanced token load
    decode_tokens_makespan: int  # tokens on the busiest client (the bin packing's makespan)
    single_request: float  # the slowest request run alone
    paper: float  # Eqs. 31-32: t_p + t_d
    strong: float  # the largest valid bound here
    paper_literal: float  # Eqs. 31-32 evaluated as the paper does; NOT a valid bound in general

    def as_dict(self) -> dict[str, float]:
        return {
            "prefill_s": self.prefill,
            "decode_s": self.decode,
            "decode_tokens_makespan": float(self.decode_tokens_makespan),
            "single_request_s": self.single_request,
            "paper_s": self.paper,
            "strong_s": self.strong,
            "paper_literal_s": self.paper_literal,
        }


def trivial_decode_tokens_makespan(output_tokens: np.ndarray, clients: int) -> int:
    """The trivial lower bound of the bin packing: max(ceil(sum / J), largest job)."""
    total = int(output_tokens.sum())
    return max(-(-total // clients), int(output_tokens.max()))


def lower_bounds(
    workload: Workload,
    cost: CostModel,
    clients: int,
    decode_tokens_makespan: int | None = None,
) -> LowerBounds:
    """Both makespan lower bounds of ``workload`` on ``clients`` clients under ``cost``.

    Parameters
    ----------
    decode_tokens_makespan
        A lower bound (ideally the optimum) on the largest number of decode tokens any one
        client must produce when the requests' output tokens are split over the clients
        (the bin packing of Eqs. 26-30). Defaults to the trivial bound. It must not be
        below the trivial bound's largest request, or it would not be a bound at all.
    """
    check_instance(workload, cost, clients)
    out = workload.output_tokens
    trivial = trivial_decode_tokens_makespan(out, clients)
    if decode_tokens_makespan is None:
        tokens_makespan = trivial
    else:
        tokens_makespan = int(decode_tokens_makespan)
        if tokens_makespan < trivial:
            raise ValueError(
                f"decode_tokens_makespan={tokens_makespan} is below the trivial bound {trivial}: "
                "no assignment of the output tokens to the clients does that well"
            )
    t_p = float(cost.min_prefill_time(workload.total_prompt_tokens))
    t_d = float(cost.min_decode_time(workload.total_output_tokens, tokens_makespan))
    alone = (
        workload.arrival
        + np.asarray(cost.prefill_time(workload.prompt_tokens), dtype=np.float64)
        + out * float(cost.decode_iteration_time(1))
    )
    single = float(alone.max())
    paper = t_p + t_d
    capacity = int(cost.prefill_capacity)
    stages = max(
        -(-workload.total_prompt_tokens // capacity),
        int(np.count_nonzero(2 * workload.prompt_tokens > capacity)),
    )
    t_p_strong = float(cost.min_prefill_time(workload.total_prompt_tokens, stages))
    strong = max(float(workload.arrival.min()) + t_p_strong + t_d, single)
    # The paper's arithmetic: every stage full, every decode token at the full batch's rate.
    literal = (
        float(cost.prefill_time(capacity)) * -(-workload.total_prompt_tokens // capacity)
        + float(cost.decode_iteration_time(clients)) * tokens_makespan
    )
    return LowerBounds(t_p, t_d, tokens_makespan, single, paper, strong, literal)
