"""Plans and schedules: a schedule's plan in the MIP's terms, and a plan replayed as a schedule.

A solution of the full MIP is a :class:`~llmsched.mip.full.model.Plan` (each bin's requests,
each decode stage's iterations). :func:`schedule_from_plan` runs it in the simulator with two
private policies that follow the plan, so the result is a :class:`~llmsched.Schedule` the
validator checks like any other; :func:`plan_from_schedule` goes the other way, for warm starts.
"""

from __future__ import annotations

import heapq

import numpy as np

from llmsched.core.cost import LevelCostModel
from llmsched.core.schedule import DECODE, PREFILL
from llmsched.core.workload import Workload
from llmsched.engines.competition.schedule import Schedule
from llmsched.mip.full.model import Plan
from llmsched.policies import KnownRequests

__all__ = ["plan_from_schedule", "schedule_from_plan"]


def plan_from_schedule(schedule: Schedule) -> tuple[Plan, np.ndarray]:
    """The MIP plan of a valid schedule (bins = its prefill stages) and each request's client
    (a read-only array).

    ``schedule.cost`` must be a :class:`LevelCostModel` (the MIP's semantics): each bin's
    level is the cheapest that holds its prompt tokens.
    """
    cost = schedule.cost
    if not isinstance(cost, LevelCostModel):
        raise TypeError(
            f"a plan needs a schedule under a LevelCostModel (the MIP's semantics), got {type(cost).__name__}"
        )
    kinds = schedule.stage_kind
    prefill_stages = np.flatnonzero(kinds == PREFILL)
    bin_of_stage = np.full(kinds.size, -1, dtype=np.int64)
    bin_of_stage[prefill_stages] = np.arange(prefill_stages.size)
    bins = prefill_stages.size
    # A bin's decode stage is the stage right after its prefill stage, if that one decodes.
    after = prefill_stages + 1
    has_decode = after < kinds.size
    has_decode[has_decode] = kinds[after[has_decode]] == DECODE
    iterations = np.zeros(bins, dtype=np.int64)
    first = np.zeros(bins, dtype=np.int64)
    iterations[has_decode] = schedule.stage_iterations[after[has_decode]]
    first[has_decode] = schedule.stage_first_iteration[after[has_decode]]
    # Tokens of request i in bin k: the overlap of its decode iterations with the bin's.
    start = schedule.request_decode_start[:, None]
    end = schedule.request_decode_end[:, None]
    tokens = np.maximum(0, np.minimum(first + iterations, end) - np.maximum(first, start))
    prefill_bin = bin_of_stage[schedule.request_prefill_stage]
    caps = np.array([lv.capacity for lv in cost.levels])
    stage_tokens = np.bincount(prefill_bin, weights=schedule.workload.prompt_tokens, minlength=bins)
    level = np.searchsorted(caps, stage_tokens, side="left")
    client = schedule.request_client.astype(np.int64)
    client.setflags(write=False)
    return Plan.make(prefill_bin, tokens, iterations, level), client


def schedule_from_plan(plan: Plan, workload: Workload, cost: LevelCostModel, clients: int) -> Schedule:
    """Replay a plan in the simulator: bins in order, each decode stage for its iterations.

    Bins that prefill nothing are skipped (their decode iterations belong to the stage
    before), and a stage whose requests all finish early ends there, so the schedule is
    never longer than the plan.
    """
    # The loop is imported here, on first use, so that importing the MIP does not load it.
    from llmsched.engines.loop import PlannedIterations, simulate_policies

    # Each bin's requests in index order, the bins in order (one stable sort, not a scan per bin).
    by_bin = np.argsort(plan.prefill_bin, kind="stable")
    bins_of = plan.prefill_bin[by_bin]
    order: list[list[int]] = []
    iterations: list[int] = []
    for k in range(plan.bins):
        group = by_bin[np.searchsorted(bins_of, k, "left") : np.searchsorted(bins_of, k, "right")].tolist()
        if group:
            order.append(group)
            iterations.append(int(plan.iterations[k]))
        elif iterations:
            iterations[-1] += int(plan.iterations[k])
    requests = _PlanRequests(order)
    return simulate_policies(
        workload, cost, clients, requests, PlannedIterations(requests, iterations, _PlanRequests.name)
    )


class _PlanRequests:
    """Request policy that prefills the plan's bins in order, each request on the lowest free client."""

    name = "mip-plan"
    # The MIP plans with every request and its true length before anything runs.
    planned_ahead = True
    sizes = "oracle"

    def __init__(self, order: list[list[int]]):
        self.order = order
        self.taken = 0  # bins prefilled so far: the next one is order[taken]
        self.free: list[int] = []  # heap of free clients
        self.arrived: set[int] = set()

    def start(self, known: KnownRequests, clients: int) -> None:
        # Lowest free first never reaches a client >= n (fewer than n others are busy), and
        # a group of g requests finds g free among the first n whenever it finds them among
        # all J: so the first min(J, n) clients behave as all J, whatever J is.
        self.free = list(range(min(clients, len(known.prompt_tokens))))
        self.arrived = set()
        self.taken = 0

    def arrive(self, request: int) -> None:
        self.arrived.add(request)

    def release(self, client: int) -> None:
        heapq.heappush(self.free, client)

    def ready(self) -> int:
        if self.taken >= len(self.order):
            return 0
        group = self.order[self.taken]
        if len(self.free) < len(group) or not all(i in self.arrived for i in group):
            return 0
        return len(group)

    def take(self, capacity: int) -> list[tuple[int, int]]:
        group = self.order[self.taken]
        self.taken += 1
        return [(i, heapq.heappop(self.free)) for i in group]
