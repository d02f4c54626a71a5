"""What one fused iteration is and costs: the token budget, the chunk's attention squares, the
iteration time under a cost model, and the check of a fused instance."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from llmsched.core.checks import positive_int
from llmsched.core.cost import (
    ContextCostModel,
    CostModel,
    LinearCostModel,
    context_rate,
    decode_seconds,
    prefill_seconds,
)
from llmsched.core.instance import check_cost_model, check_instance
from llmsched.core.table import TableCostModel
from llmsched.core.workload import Workload
from llmsched.engines.fusion.schedule import fixed_cost

if TYPE_CHECKING:
    pass

__all__ = [
    "MAX_TOKEN_BUDGET",
    "check_fused_instance",
    "check_token_budget",
    "chunk_squares",
    "fused_iteration_time",
    "mixed_terms",
    "padded_iteration_time",
]


# The most tokens one fused iteration may carry.
MAX_TOKEN_BUDGET = 1 << 31


def check_fused_instance(workload: Workload, cost: CostModel, clients: int, token_budget: int) -> int:
    """Check a fused instance before any work; return ``token_budget`` as an int.

    The instance must be valid as under competition (:func:`~llmsched.core.instance.check_instance`,
    the prefill's work bounded as the budget's chunks), the cost model must price stages per
    token (a :class:`~llmsched.LinearCostModel`, a :class:`~llmsched.ContextCostModel` or a
    :class:`~llmsched.TableCostModel`: a chunk's time follows from its tokens), and the budget
    must be at least 2 (a decode token and a prompt token, :func:`check_token_budget`). A
    budget below the clients still runs: while the decoding requests fill it, no chunk is
    added until one finishes.
    """
    if not isinstance(cost, (LinearCostModel, ContextCostModel, TableCostModel)):
        raise TypeError(
            "fusion prices a chunk by its tokens: it needs a LinearCostModel, a ContextCostModel or a "
            f"TableCostModel, got {type(cost).__name__} (a LevelCostModel prices whole prefill levels)"
        )
    check_cost_model(workload, cost, clients)
    budget = check_token_budget(token_budget)
    check_instance(workload, cost, clients, token_budget=budget)
    return budget


def check_token_budget(token_budget: Any) -> int:
    """``token_budget`` as an int if it is a fused engine's budget: an integer in
    ``[2, 2**31]`` (a decode token and a prompt token at least)."""
    budget = positive_int("token_budget", token_budget, maximum=MAX_TOKEN_BUDGET)
    if budget < 2:
        raise ValueError(f"token_budget must be at least 2 (a decode token and a prompt token), got {budget}")
    return budget


def chunk_squares(start: Any, tokens: Any) -> Any:
    """Squared tokens of a chunk of ``tokens`` prompt tokens from position ``start``:
    ``(start + tokens)^2 - start^2`` (a prompt's chunks add up to its square)."""
    start = np.asarray(start, dtype=np.int64)
    tokens = np.asarray(tokens, dtype=np.int64)
    return tokens * (2 * start + tokens)


def fused_iteration_time(
    cost: CostModel, decoding: Any, context: Any, chunk_tokens: Any, squares: Any
) -> Any:
    """Seconds of fused iterations with ``decoding`` requests at ``context`` tokens and
    ``chunk_tokens`` prompt tokens of ``squares`` squared tokens (scalars or arrays).

    A cost model that prices a mixed iteration itself (it has
    ``mixed_iteration_time(decoding, context, chunk_tokens, squares)``, as
    :class:`~llmsched.TableCostModel` does) answers; for the others: decoding alone, the
    decode iteration's time; chunks alone, the prefill stage's time; both, their sum less the
    fixed cost they share (one pass, not two): the smaller of the prefill stage's and the
    decode iteration's fixed costs, and never more than the decode batch's own time at no
    context (a batch table may price a batch below ``a_d``), so an iteration never costs less
    than either of its parts alone.
    """
    mixed = getattr(cost, "mixed_iteration_time", None)
    if mixed is not None:
        return mixed(decoding, context, chunk_tokens, squares)
    decode = decode_seconds(cost, decoding, context)
    prefill = prefill_seconds(cost, chunk_tokens, squares)
    price: Any = cost  # LinearCostModel or ContextCostModel: hashable
    shared = np.minimum(fixed_cost(price), decode_seconds(cost, decoding, 0))
    if np.ndim(decoding) == 0 and np.ndim(chunk_tokens) == 0:  # the loop's path: no arrays
        if chunk_tokens == 0:
            return float(decode)
        return float(prefill) if decoding == 0 else float(decode + prefill - shared)
    d, c = np.asarray(decoding), np.asarray(chunk_tokens)
    return np.where(c == 0, decode, np.where(d == 0, prefill, decode + prefill - shared)).astype(np.float64)


def padded_iteration_time(cost: CostModel, rows: Any, width: Any, context: Any) -> Any:
    """Seconds of a padded iteration (Mico's and Baton's insertion): ``rows`` sequences, the new
    prompts and the decoding requests' next tokens, each padded to ``width`` positions (the
    longest new prompt), run through the model together, the decoding requests reading
    ``context`` cached tokens in all.

    Every position costs what a prompt token does: the iteration is priced as a prefill stage
    of ``rows * width`` tokens of ``rows * width^2`` squared tokens, plus, under a model that
    prices context, what a decode iteration pays to read ``context`` cached tokens (once: the
    positions of a row read its cache together). Scalars or arrays.
    """
    rows = np.asarray(rows, dtype=np.int64)
    width = np.asarray(width, dtype=np.int64)
    positions = rows * width
    seconds = prefill_seconds(cost, positions, positions * width)
    per_context = context_rate(cost)
    if per_context:
        seconds = seconds + per_context * np.asarray(context, dtype=np.float64)
    if np.ndim(seconds) == 0:
        return float(seconds)
    return np.asarray(seconds, dtype=np.float64)


def mixed_terms(cost: CostModel) -> tuple[float, float, float, float] | None:
    """The terms that price a fused iteration under the library's linear and context models
    (no batch table), for a caller that sums them itself, in :func:`fused_iteration_time`'s
    order: the prefill stage's base, its price per token and per squared token (0.0 for the
    linear model), and the fixed cost the two phases share (:func:`fixed_cost`). None for any
    other model (a table among them: the caller then asks :func:`fused_iteration_time`)."""
    if type(cost) is LinearCostModel:
        per_square = 0.0
    elif type(cost) is ContextCostModel and cost.decode_by_batch is None:
        per_square = float(cost.prefill_per_square)
    else:
        return None
    return float(cost.prefill_base), float(cost.prefill_per_token), per_square, fixed_cost(cost)
