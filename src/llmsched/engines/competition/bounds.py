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
    The paper's bound with refinements, and beside it the slowest single request run
    alone (``arrival + prefill_time(N^p_i) + N^d_i * decode_iteration_time(1)``); the
    larger of the two. The refinements: the number of prefill stages is at least
    ``ceil(sum N^p / cap)``, the number of prompts longer than half the capacity (they
    cannot share a stage), and ``ceil(n / J)`` (a client prefills its requests in distinct
    stages); and release dates: for every arrival time a, no schedule ends before
    ``a`` plus the least work of the requests arriving at or after ``a``.

Context-aware cost models (``llmsched.core.cost.is_context_aware``): every bound above holds
with the context terms added, and the terms are exact rather than estimated. Proof: a
prefill stage's time is ``a_p + b_p * tokens + c_p * squares`` with all coefficients >= 0;
every prompt is prefilled whole in exactly one stage, so over all stages the tokens sum to
``sum N^p`` and the squares to ``sum (N^p)^2`` whatever the grouping, and the total is
``a_p * #stages + b_p * sum N^p + c_p * sum (N^p)^2``; only ``#stages`` depends on the
schedule and is bounded below as before. A decode iteration's time is ``a_d + b_d * active
+ c_d * context``; summed over iterations the active counts give ``sum N^d`` (one token per
active client) and the contexts give ``sum_i sum_{j < N^d_i} (N^p_i + j)``: request i reads
``N^p_i + j`` tokens at its j-th decode iteration whenever that iteration comes
(:func:`llmsched.core.cost.request_context`). Only ``#iterations`` depends on the schedule, and it
is at least the busiest client's tokens. Prefill and decode stages never overlap, so the two
totals add. A single request alone needs ``prefill_time(N^p, (N^p)^2)`` (no stage holding it
is faster, coefficients being >= 0) plus its decode iterations, each with at least one active
client and at least its own context. ``paper_literal`` stays the paper's arithmetic without
context (not a bound either way).

A measured batch table (``ContextCostModel.decode_by_batch``) replaces ``a_d + b_d * active``
by any function of the batch size, not always increasing. Each line below it at every batch
size still bounds the decode total (:meth:`llmsched.ContextCostModel.min_decode_time` takes
the best edge of the table's lower convex hull), and a single request's iterations are each at
least the least time of any batch size.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmsched.core.checks import positive_int, token_counts
from llmsched.core.cost import (
    BoundedCostModel,
    CostModel,
    context_rate,
    is_context_aware,
    prefill_seconds,
    request_context,
)
from llmsched.core.instance import check_instance
from llmsched.core.workload import Workload

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
    """The trivial lower bound of the bin packing: max(ceil(sum / J), largest job).

    Raises
    ------
    TypeError, ValueError
        If ``output_tokens`` is not a non-empty array of token counts or ``clients`` not a
        positive integer.
    """
    output = token_counts("output_tokens", output_tokens)
    if output.size == 0:
        raise ValueError("output_tokens is empty; the bound needs at least one request")
    clients = positive_int("clients", clients)
    total = int(output.sum())
    return max(-(-total // clients), int(output.max()))


def _work_bound(
    prompt: np.ndarray,
    output: np.ndarray,
    cost: BoundedCostModel,
    clients: int,
    tokens_makespan: int | None = None,
) -> float:
    """Least prefill plus decode time of a set of requests, prompts being indivisible."""
    capacity = int(cost.prefill_capacity)
    total_prompt = int(prompt.sum())
    stages = max(
        -(-total_prompt // capacity),  # tokens over full stages
        int(np.count_nonzero(2 * prompt > capacity)),  # a stage each for prompts over half
        -(-prompt.size // clients),  # a client prefills its requests in distinct stages
    )
    iterations = tokens_makespan or trivial_decode_tokens_makespan(output, clients)
    return _least_prefill(cost, prompt, stages) + _least_decode(cost, prompt, output, iterations)


def _least_prefill(cost: BoundedCostModel, prompt: np.ndarray, stages: int = 0) -> float:
    """Least total prefill time of these prompts in at least ``stages`` stages."""
    total = int(prompt.sum())
    if is_context_aware(cost):
        # Python ints: the sum may pass int64 (prompts up to 2**31 tokens each).
        squares = sum(p * p for p in prompt.tolist())
        return float(cost.min_prefill_time(total, stages, squares))  # type: ignore[call-arg]
    return float(cost.min_prefill_time(total, stages))


def _least_decode(cost: BoundedCostModel, prompt: np.ndarray, output: np.ndarray, iterations: int) -> float:
    """Least total decode time of these requests over at least ``iterations`` iterations."""
    total = int(output.sum())
    if is_context_aware(cost):
        context = sum(request_context(prompt, output).tolist())  # Python ints, as above
        return float(cost.min_decode_time(total, iterations, context))  # type: ignore[call-arg]
    return float(cost.min_decode_time(total, iterations))


def _release_date_bound(workload: Workload, cost: BoundedCostModel, clients: int) -> float:
    """max over arrival times a of (a + work of the requests arriving at or after a).

    Evaluated at every distinct arrival time (only the latest 200 are tried when there are
    more, which keeps it cheap and still a valid bound).
    """
    arrival = workload.arrival
    times = np.unique(arrival)[-200:]
    best = 0.0
    for a in times.tolist():
        late = arrival >= a
        work = _work_bound(workload.prompt_tokens[late], workload.output_tokens[late], cost, clients)
        best = max(best, a + work)
    return best


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
        (the bin packing of Eqs. 26-30). Defaults to the trivial bound
        ``max(ceil(sum N^d / J), max N^d)``, and may not be below it (no split does better).

    Raises
    ------
    TypeError, ValueError
        If the instance is invalid (see :func:`llmsched.simulate`), the cost model cannot
        bound stage times, or ``decode_tokens_makespan`` is not an integer at least the
        trivial bound.
    """
    check_instance(workload, cost, clients)
    clients = positive_int("clients", clients)
    if not isinstance(cost, BoundedCostModel):
        raise TypeError(
            f"lower_bounds needs a cost model with min_prefill_time and min_decode_time; "
            f"{type(cost).__name__} has not got them"
        )
    out = workload.output_tokens
    trivial = trivial_decode_tokens_makespan(out, clients)
    if decode_tokens_makespan is None:
        tokens_makespan = trivial
    else:
        tokens_makespan = positive_int("decode_tokens_makespan", decode_tokens_makespan)
        if tokens_makespan < trivial:
            raise ValueError(
                f"decode_tokens_makespan={tokens_makespan} is below the trivial bound {trivial}: "
                "no assignment of the output tokens to the clients does that well"
            )
    prompt = workload.prompt_tokens
    t_p = _least_prefill(cost, prompt)
    t_d = _least_decode(cost, prompt, out, tokens_makespan)
    # Alone, a request's prefill stage holds its prompt only, and its decode iterations read
    # its own context (request_context; no context term for a model blind to it).
    first = np.asarray(prefill_seconds(cost, prompt, prompt.astype(np.int64) ** 2), dtype=np.float64)
    # An iteration of any batch size is at least the least of them (1 client, unless a
    # measured batch table makes a larger batch faster).
    least = float(np.min(cost.decode_iteration_time(np.arange(1, min(clients, len(workload)) + 1))))
    alone = workload.arrival + first + out * least
    if context_rate(cost):
        alone = alone + context_rate(cost) * request_context(prompt, out)
    single = float(alone.max())
    paper = t_p + t_d
    capacity = int(cost.prefill_capacity)
    everything = float(workload.arrival.min()) + _work_bound(
        workload.prompt_tokens, out, cost, clients, tokens_makespan
    )
    strong = max(single, everything, _release_date_bound(workload, cost, clients))
    # The paper's arithmetic: every stage full, every decode token at the full batch's rate.
    literal = (
        float(cost.prefill_time(capacity)) * -(-workload.total_prompt_tokens // capacity)
        + float(cost.decode_iteration_time(clients)) * tokens_makespan
    )
    return LowerBounds(t_p, t_d, tokens_makespan, single, paper, strong, literal)
