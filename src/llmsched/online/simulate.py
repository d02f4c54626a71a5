"""``simulate``: the decision loop on the cost-model clock, with policies given by name.

The loop itself (and :func:`~llmsched.engines.loop.simulate_policies`, which takes policy objects
only) is :mod:`llmsched.engines.loop`; this module adds what the names mean
(:mod:`llmsched.online.registry`).
"""

from __future__ import annotations

from llmsched.core.cost import CostModel
from llmsched.core.instance import check_instance
from llmsched.core.workload import Workload
from llmsched.engines.competition.schedule import Schedule
from llmsched.engines.fusion.rule import DEFAULT_TOKEN_BUDGET, simulate_fusion_policies
from llmsched.engines.fusion.schedule import FusedSchedule
from llmsched.engines.loop import simulate_policies
from llmsched.online.registry import make_iteration_policy, make_request_policy
from llmsched.policies import EngineView, IterationPolicy, RequestPolicy

# check_instance and EngineView live in the core (llmsched.core.instance, llmsched.policies);
# they stay importable from here, where they used to be.
__all__ = ["EngineView", "check_instance", "simulate", "simulate_fusion"]


def simulate(
    workload: Workload,
    cost: CostModel,
    clients: int,
    request_policy: str | RequestPolicy = "fcfs",
    iteration_policy: str | IterationPolicy = "prefill-first",
    clairvoyant: bool = False,
) -> Schedule:
    """Run ``workload`` on ``clients`` clients under the two policies and return the schedule.

    Parameters
    ----------
    workload
        The requests (true output lengths decide when each finishes).
    cost
        Cost model of prefill stages and decode iterations.
    clients
        Number of clients J (batch slots).
    request_policy
        A registered name (``"fcfs"``, ``"hybrid"``, ...; see
        :func:`~llmsched.online.registry.request_policy_names`) or a request-policy object.
        For a name with parameters, pass ``make_request_policy(name, **params)``.
    iteration_policy
        A registered name (``"prefill-first"``, ``"lagrangian"``, ``"threshold"``) or an
        iteration-policy object.
    clairvoyant
        Reveal every request to the policies before the run starts (a study of planning
        ahead, as the paper's offline schedule does). By default the run is
        non-anticipative: a policy learns of a request (its prompt length and prediction)
        when it arrives. The schedule's ``info`` says which (``clairvoyant``), and whether
        the policies were told the true output lengths (``oracle_lengths``).

    Returns
    -------
    Schedule
        Every stage and every request's placement; ``llmsched.validate`` accepts it.

    Raises
    ------
    ValueError
        On an unknown policy name or an invalid instance (no requests, fewer than one client,
        a prompt longer than the prefill capacity, a cost model giving a time that is not
        finite and >= 0), before any work; on a policy answer that breaks its contract.
    """
    requests = make_request_policy(request_policy)
    iterations = make_iteration_policy(iteration_policy)
    return simulate_policies(workload, cost, clients, requests, iterations, clairvoyant)


def simulate_fusion(
    workload: Workload,
    cost: CostModel,
    clients: int,
    request_policy: str | RequestPolicy = "fcfs",
    token_budget: int = DEFAULT_TOKEN_BUDGET,
    clairvoyant: bool = False,
) -> FusedSchedule:
    """Run ``workload`` on a fused engine (chunked prefill, :mod:`llmsched.engines.fusion.schedule`) of
    ``clients`` clients and return its :class:`~llmsched.engines.fusion.schedule.FusedSchedule`.

    Every iteration carries every decoding request and prompt chunks up to ``token_budget``
    tokens in all; ``request_policy`` (a registered name or an object, as for
    :func:`simulate`) decides which waiting requests free clients take. There is no
    iteration policy: decoding never pauses. ``llmsched.engines.fusion.validate.validate_fused`` checks the
    schedule.

    Raises
    ------
    TypeError, ValueError
        On an unknown policy name, an invalid instance, a cost model that does not price
        prompt tokens (a ``LevelCostModel``) or a budget below 2, before any work.
    """
    requests = make_request_policy(request_policy)
    return simulate_fusion_policies(workload, cost, clients, requests, token_budget, clairvoyant)
