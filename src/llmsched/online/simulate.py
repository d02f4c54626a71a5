"""``simulate``: the decision loop on the cost-model clock, with policies given by name.

The loop itself (and :func:`~llmsched.engines.loop.simulate_policies`, which takes policy objects
only) is :mod:`llmsched.engines.loop`; this module adds what the names mean
(:mod:`llmsched.online.registry`).
"""

from __future__ import annotations

from llmsched.core.cost import CostModel
from llmsched.core.instance import check_instance
from llmsched.core.memory import KVMemory
from llmsched.core.workload import Workload
from llmsched.engines.answers import check_open_ended
from llmsched.engines.batching import batching_rule
from llmsched.engines.competition.schedule import Schedule
from llmsched.engines.fusion.rule import DEFAULT_TOKEN_BUDGET, simulate_fusion_policies
from llmsched.engines.fusion.schedule import FusedSchedule
from llmsched.engines.loop import CostClock, run_loop, simulate_policies
from llmsched.online.registry import make_iteration_policy, make_request_policy
from llmsched.policies import EngineView, IterationPolicy, RequestPolicy

# check_instance and EngineView live in the core (llmsched.core.instance, llmsched.policies);
# they stay importable from here, where they used to be.
__all__ = ["EngineView", "check_instance", "simulate", "simulate_batching", "simulate_fusion"]


def simulate(
    workload: Workload,
    cost: CostModel,
    clients: int,
    request_policy: str | RequestPolicy = "fcfs",
    iteration_policy: str | IterationPolicy = "prefill-first",
    clairvoyant: bool = False,
    memory: KVMemory | None = None,
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
    memory
        The engine's KV-cache memory (:class:`~llmsched.core.memory.KVMemory`), as
        :func:`simulate_batching` takes it: admission by free blocks, preemption by recompute
        (the schedule then holds pieces). None: the clients alone bound the batch.

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
    requests = _request_policy(request_policy, memory)
    iterations = make_iteration_policy(iteration_policy)
    return simulate_policies(workload, cost, clients, requests, iterations, clairvoyant, memory)


def simulate_fusion(
    workload: Workload,
    cost: CostModel,
    clients: int,
    request_policy: str | RequestPolicy = "fcfs",
    token_budget: int = DEFAULT_TOKEN_BUDGET,
    clairvoyant: bool = False,
    memory: KVMemory | None = None,
) -> FusedSchedule:
    """Run ``workload`` on a fused engine (chunked prefill, :mod:`llmsched.engines.fusion.schedule`) of
    ``clients`` clients and return its :class:`~llmsched.engines.fusion.schedule.FusedSchedule`.

    Every iteration carries every decoding request and prompt chunks up to ``token_budget``
    tokens in all; ``request_policy`` (a registered name or an object, as for
    :func:`simulate`) decides which waiting requests free clients take. There is no
    iteration policy: decoding never pauses. ``llmsched.engines.fusion.validate.validate_fused`` checks the
    schedule. ``memory``: the engine's KV-cache memory, as :func:`simulate` takes it.

    Raises
    ------
    TypeError, ValueError
        On an unknown policy name, an invalid instance, a cost model that does not price
        prompt tokens (a ``LevelCostModel``) or a budget below 2, before any work.
    """
    requests = _request_policy(request_policy, memory)
    return simulate_fusion_policies(workload, cost, clients, requests, token_budget, clairvoyant, memory)


def simulate_batching(
    workload: Workload,
    cost: CostModel,
    clients: int,
    batching: str = "vllm",
    request_policy: str | RequestPolicy = "fcfs",
    max_num_batched_tokens: int = 2048,
    chunked_prefill: bool = False,
    memory: KVMemory | None = None,
    clairvoyant: bool = False,
) -> Schedule | FusedSchedule:
    """Run ``workload`` on an engine that batches as a real one does
    (:mod:`llmsched.engines.batching`): ``"vllm"`` (prefill-first; with ``chunked_prefill``,
    chunked prefill), ``"sarathi"`` (chunked prefill), ``"orca"`` (mixed iterations of
    whole prompts) or ``"padded"`` (padded insertion), with ``clients`` batch slots (vLLM's ``max_num_seqs``).

    Parameters
    ----------
    workload, cost, clients
        The instance.
    batching, max_num_batched_tokens, chunked_prefill
        The engine and its knobs: vLLM's prompt-batch cap (its chunk budget with chunked
        prefill, Sarathi-Serve's chunk budget, Orca's and SplitwiseSim's batch token cap).
    request_policy
        A registered name or a request-policy object; with ``memory``, one that learns
        requests as they come (fcfs, batch-wise, shortest-first, longest-first).
    memory
        The engine's KV-cache memory (:class:`~llmsched.core.memory.KVMemory`; a measured
        machine's is ``llmsched.core.hardware.preset(name).memory()``): requests are admitted
        by free blocks and preempted by recompute when decoding runs out (the schedule then
        holds pieces: see ``request_parent``). None: the clients alone bound the batch.
    clairvoyant
        Reveal every request to the policy before the run starts.

    Returns
    -------
    Schedule or FusedSchedule
        ``vllm`` without chunking builds a competition :class:`~llmsched.Schedule`, the others
        a :class:`~llmsched.engines.fusion.schedule.FusedSchedule`; both validate.

    Raises
    ------
    TypeError, ValueError
        On an unknown name or knob, an invalid instance, a prompt the engine cannot run, a
        memory some request cannot fit, or a policy memory cannot run, before any work.
    """
    rule = batching_rule(batching, max_num_batched_tokens, chunked_prefill, memory)
    requests = _request_policy(request_policy, memory)
    schedule: Schedule | FusedSchedule = run_loop(
        workload, cost, clients, requests, None, CostClock(), clairvoyant, rule
    )
    return schedule


def _request_policy(name: str | RequestPolicy, memory: KVMemory | None) -> RequestPolicy:
    """The request policy ``name`` makes; with ``memory``, one that plans over the whole
    workload is refused naming ``name`` as the caller gave it (``hybrid`` is a
    ``sorted-preemptive`` policy, which the engine's own refusal would name)."""
    requests = make_request_policy(name)
    if memory is not None and isinstance(name, str):
        check_open_ended(requests, repr(name))
    return requests
