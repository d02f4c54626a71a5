"""Lower bounds on the makespan of a disaggregated cluster."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from typing import TYPE_CHECKING, Any

import numpy as np

from llmsched.core.cost import (
    context_rate,
    decode_seconds,
    is_context_aware,
    prefill_seconds,
    request_context,
)
from llmsched.core.table import prefill_lines
from llmsched.core.workload import Workload
from llmsched.engines.disaggregation.cluster import DisaggregatedCluster

if TYPE_CHECKING:
    pass

__all__ = ["DisaggregatedBounds", "disaggregated_lower_bounds"]


# ------------------------------------------------------------------ lower bound
@dataclass(frozen=True)
class DisaggregatedBounds:
    """Lower bounds on a disaggregated schedule's makespan (seconds): ``prefill`` (the
    prompt pool's least work, from the first arrival), ``single_request`` (the slowest
    request alone), ``strong`` (the larger)."""

    prefill: float
    single_request: float
    strong: float


def disaggregated_lower_bounds(workload: Workload, cluster: DisaggregatedCluster) -> DisaggregatedBounds:
    """Lower bounds on the makespan of any disaggregated schedule.

    Without lent machines every prompt is prefilled on a prompt machine in stages of at most
    its capacity, at least ``ceil(sum N^p / capacity)`` of them; the pool's least work is the
    model's own least prefill time of all the tokens (``min_prefill_time``: ``a_p`` a stage
    plus the tokens' and squares' terms under a linear or context model, the convex hull of
    a table). Spread over ``P`` machines, some machine works at least the total over ``P``
    after the first arrival. (With ``mixed`` a token machine may take a stage, so the pool's
    work is spread over every machine and priced by a line below both models' prefill times:
    for each pair of their lines, the lesser base and the lesser slope, and the cheaper
    squares' term.) Alone, request ``i`` needs its own prefill stage (no stage holding it is
    faster), its transfer (with overlap, at least ``x / layers``; none when a lent machine
    may decode what it prefilled), and ``N^d`` iterations of at least the least time of any
    batch, plus its context's reads (under the cheaper pool's model when prompt machines may
    decode).
    """
    cluster.check(workload)
    prompt, output = workload.prompt_tokens, workload.output_tokens
    # LinearCostModel, ContextCostModel or TableCostModel (the cluster checks it).
    costs: list[Any] = [cluster.prompt_cost, cluster.token_cost] if cluster.mixed else [cluster.prompt_cost]
    machines = cluster.machines if cluster.mixed else cluster.prompt_machines
    squares = sum(p * p for p in prompt.tolist())
    total = int(prompt.sum())
    stages = -(-total // max(int(cost.prefill_capacity) for cost in costs))
    if len(costs) == 1:
        (cost,) = costs
        if is_context_aware(cost):
            least = float(cost.min_prefill_time(total, stages, squares))
        else:
            least = float(cost.min_prefill_time(total, stages))
    else:
        c_p = min(float(getattr(cost, "prefill_per_square", 0.0)) for cost in costs)
        pairs = product(*(prefill_lines(cost) for cost in costs))
        least = max(
            min(a for a, _ in pair) * stages + min(b for _, b in pair) * total
            for pair in pairs
            if min(a for a, _ in pair) >= 0
        )
        least += c_p * squares
    prefill = float(workload.arrival.min()) + least / machines
    alone_prefill = np.min(
        np.vstack(
            [
                np.asarray(prefill_seconds(cost, prompt, prompt.astype(np.int64) ** 2), dtype=np.float64)
                for cost in costs
            ]
        ),
        axis=0,
    )
    # A longer stage overlaps more of the transfer; with overlap at least the last layer's remains.
    sent = prompt * cluster.kv_bytes_per_token / (cluster.kv_bandwidth * 1e9)
    transfer = sent / cluster.layers if cluster.overlap else sent
    if cluster.mixed:
        transfer = np.zeros_like(transfer)  # a lent machine decodes its own prefill
    decoders = [cluster.prompt_cost, cluster.token_cost] if cluster.mixed else [cluster.token_cost]
    # No batch holds more requests than there are: nothing is sized by idle clients.
    batches = np.arange(1, min(cluster.token_clients, len(workload)) + 1)
    tau = min(float(np.min(decode_seconds(cost, batches, 0))) for cost in decoders)
    reads = min(context_rate(cost) for cost in decoders)
    alone = (
        workload.arrival + alone_prefill + transfer + output * tau + reads * request_context(prompt, output)
    )
    single = float(alone.max())
    return DisaggregatedBounds(prefill, single, max(prefill, single))
