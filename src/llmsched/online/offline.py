"""Offline request scheduling (Pang et al., Sec. IV-B and Algorithm 1's sorting).

Requests are assigned to clients so that every client's estimated decode work is balanced
(the minimising-makespan bin packing of Eqs. 26-30, solved by
:func:`llmsched.mip.solve_pcmax`), and each client's queue is sorted by N^p + N^d, longest
first. The resulting per-client queues run through the static-queue request policy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from llmsched._checks import time_limit as check_time_limit
from llmsched.online.baselines import StaticQueues
from llmsched.workload import Workload

if TYPE_CHECKING:
    from llmsched.mip.pcmax import PcmaxResult

__all__ = ["OfflineQueues", "check_overhead", "check_sizes", "decode_sizes", "offline_queues"]

SIZES = ("predicted", "oracle")


def check_sizes(sizes: str) -> str:
    """``sizes`` if it names what a scheduler plans with (``predicted`` or ``oracle``)."""
    if sizes not in SIZES:
        raise ValueError(f"sizes must be one of {list(SIZES)}, got {sizes!r}")
    return sizes


def check_overhead(overhead: int) -> int:
    """``overhead`` as an int if it is a whole number of tokens >= 0 (see :func:`offline_queues`)."""
    if isinstance(overhead, bool) or not isinstance(overhead, (int, np.integer)) or overhead < 0:
        raise ValueError(f"overhead must be a whole number of tokens >= 0, got {overhead!r}")
    return int(overhead)


def decode_sizes(workload: Workload, sizes: str = "predicted") -> np.ndarray:
    """The output lengths a scheduler plans with: the predictions, or the truth (``oracle``).

    ``predicted`` needs ``workload.predicted_output``; a scheduler never sees the truth
    unless asked for the oracle explicitly.
    """
    if check_sizes(sizes) == "oracle":
        return workload.output_tokens
    if workload.predicted_output is None:
        raise ValueError("the workload has no predicted_output; attach predictions or use sizes='oracle'")
    return workload.predicted_output


def offline_queues(
    workload: Workload,
    clients: int,
    sizes: str = "predicted",
    time_limit: float = 10.0,
    overhead: int = 0,
) -> tuple[dict[int, list[int]], PcmaxResult]:
    """Per-client request queues from the balanced assignment, longest N^p + N^d first.

    The assignment balances each client's decode tokens plus ``overhead`` per request: the
    decode iterations a client loses every time it waits for (and sits through) the prefill
    stage of its next request. With ``overhead=0`` it is the paper's model (Eqs. 26-30).

    Returns
    -------
    queues
        ``queues[j]`` is client ``j``'s queue, for the clients given a request only (a
        client left out has none), so the size does not grow with idle clients.
    result
        The assignment's :class:`~llmsched.mip.PcmaxResult`. With more clients than
        requests it is solved on as many machines as requests: the clients beyond would
        stay empty in any assignment, and the optimum (every request alone) is the same.
    """
    from llmsched.mip.pcmax import solve_pcmax  # the solver pipeline loads only when asked for

    overhead = check_overhead(overhead)
    decode = decode_sizes(workload, sizes)
    machines = min(int(clients), len(workload)) if isinstance(clients, (int, np.integer)) else clients
    result = solve_pcmax(decode + overhead, machines, time_limit=time_limit)
    total = workload.prompt_tokens + decode
    # Group by client, longest N^p + N^d first within a client (ties by request index).
    order = np.lexsort((np.arange(len(workload)), -total, result.assignment))
    owners = result.assignment[order]
    cuts = np.flatnonzero(np.diff(owners)) + 1
    queues = {
        int(group_owners[0]): group.tolist()
        for group, group_owners in zip(np.split(order, cuts), np.split(owners, cuts), strict=True)
        if group.size
    }
    return queues, result


class OfflineQueues(StaticQueues):
    """Static per-client queues computed at the start of a run by :func:`offline_queues`.

    Parameters
    ----------
    sizes
        Plan with the workload's predictions (``"predicted"``) or the true lengths
        (``"oracle"``, a clairvoyant run).
    time_limit
        Seconds for the offline assignment.
    """

    name = "offline"

    def __init__(self, sizes: str = "predicted", time_limit: float = 10.0):
        super().__init__()
        self.sizes = check_sizes(sizes)
        self.time_limit = check_time_limit("time_limit", time_limit)
        self.result: PcmaxResult | None = None

    def start(self, workload: Workload, clients: int) -> None:
        queues, self.result = offline_queues(workload, clients, self.sizes, self.time_limit)
        self._given = queues
        super().start(workload, clients)
