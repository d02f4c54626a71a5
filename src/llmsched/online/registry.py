"""Named policies: what ``simulate(..., request_policy="hybrid")`` means.

A name maps to a factory (a policy class, or a function returning a policy) and keyword
parameters: defaults the caller may override, e.g.
``make_request_policy("sorted-preemptive", initial="round-robin")``, or, for an *alias*,
parameters the name fixes: ``"hybrid-oracle"`` is ``"hybrid"`` with ``sizes="oracle"``, and
``"sorted-preemptive-rr"`` is ``"sorted-preemptive"`` with ``initial="round-robin"``.

Request policies:

================================  ==============================================================
``fcfs``                          :class:`~llmsched.online.baselines.FCFS` (``max_batch``)
``batch-wise``                    :class:`~llmsched.online.baselines.BatchWise` (``max_batch``;
                                  a batch only when every client is free: no insertion)
``static``                        :class:`~llmsched.online.baselines.StaticQueues` (``queues``)
``offline``                       :class:`~llmsched.online.offline.OfflineQueues` (``sizes``,
                                  ``time_limit``; rolling-horizon balanced queues, no
                                  stealing); ``offline-oracle``: ``sizes="oracle"``
``sorted-preemptive``             :class:`~llmsched.online.requests.SortedPreemptive` (``initial``,
                                  ``sizes``, ``time_limit``, ``overhead``); ``-oracle``,
                                  ``-rr`` (``initial="round-robin"``) and ``-rr-oracle`` aliases
``hybrid``                        ``SortedPreemptive`` over offline queues balanced with
                                  ``overhead=HYBRID_OVERHEAD``; ``hybrid-oracle``
``shortest-first``,               :class:`~llmsched.online.requests.ShortestFirst`,
``longest-first``                 :class:`~llmsched.online.requests.LongestFirst` (``sizes``);
                                  ``-oracle`` aliases
``aged-shortest-first``           :class:`~llmsched.online.priority.AgedShortestFirst`
                                  (``seconds_per_token``, ``output_weight``, ``sizes``): shortest
                                  predicted work first, with aging; ``-oracle`` alias
``deadline-first``                :class:`~llmsched.online.priority.DeadlineFirst` (``ttft_base``,
                                  ``ttft_per_token``, ``defer``): earliest TTFT deadline first,
                                  requests past their deadline deferred
================================  ==============================================================

Iteration policies: ``prefill-first`` (:class:`~llmsched.online.baselines.PrefillFirst`),
``lagrangian`` (:class:`~llmsched.online.iteration.Lagrangian`, ``ttft_weight``, ``slo_ttft``),
``lagrangian-as-written`` (:class:`~llmsched.online.iteration.LagrangianAsWritten`: Eqs. 41-43 read
literally),
``threshold`` (:class:`~llmsched.online.iteration.Threshold`, ``k``, ``slo_ttft``), ``slo``
(:class:`~llmsched.online.iteration.SLOAware`, ``slo_ttft``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from llmsched.online.baselines import FCFS, BatchWise, PrefillFirst, StaticQueues
from llmsched.online.iteration import Lagrangian, LagrangianAsWritten, SLOAware, Threshold
from llmsched.online.offline import OfflineQueues
from llmsched.online.priority import AgedShortestFirst, DeadlineFirst
from llmsched.online.requests import HYBRID_OVERHEAD, LongestFirst, ShortestFirst, SortedPreemptive
from llmsched.policies import IterationPolicy, RequestPolicy

__all__ = [
    "iteration_policy_names",
    "make_iteration_policy",
    "make_request_policy",
    "register_iteration_policy",
    "register_request_policy",
    "request_policy_names",
]


@dataclass(frozen=True)
class _Entry:
    """A name's factory, the defaults it adds, and (for an alias) the parameters it fixes."""

    factory: Callable[..., Any]
    defaults: Mapping[str, Any] = field(default_factory=dict)
    fixed: Mapping[str, Any] = field(default_factory=dict)
    alias_of: str | None = None


class _Registry:
    def __init__(self, kind: str, protocol: type, methods: str):
        self.kind = kind
        self.protocol = protocol
        self.methods = methods
        self.entries: dict[str, _Entry] = {}

    def register(self, name: str, factory: Callable[..., Any], **defaults: Any) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"a {self.kind} policy name must be a non-empty str, got {name!r}")
        if not callable(factory):
            raise TypeError(f"the factory of {self.kind} policy {name!r} must be callable, got {factory!r}")
        if name in self.entries:
            raise ValueError(f"a {self.kind} policy named {name!r} is already registered")
        self.entries[name] = _Entry(factory, dict(defaults))

    def alias(self, name: str, of: str, **fixed: Any) -> None:
        base = self.entries[of]
        if name in self.entries:
            raise ValueError(f"a {self.kind} policy named {name!r} is already registered")
        self.entries[name] = _Entry(base.factory, {**base.defaults, **fixed}, dict(fixed), of)

    def names(self) -> list[str]:
        return sorted(self.entries)

    def make(self, policy: Any, params: dict[str, Any]) -> Any:
        if not isinstance(policy, str):
            if params:
                raise TypeError(
                    f"keyword parameters go with a {self.kind} policy name, not with a policy object "
                    f"({type(policy).__name__})"
                )
            if isinstance(policy, type) or not isinstance(policy, self.protocol):
                raise TypeError(
                    f"{self.kind}_policy must be a name or an object with {self.methods} methods, "
                    f"got {type(policy).__name__}"
                )
            return policy
        entry = self.entries.get(policy)
        if entry is None:
            raise ValueError(f"unknown {self.kind} policy {policy!r}; choose one of {self.names()}")
        clash = sorted(params.keys() & entry.fixed.keys())
        if clash:
            key = clash[0]
            raise ValueError(
                f"{self.kind} policy {policy!r} fixes {key}={entry.fixed[key]!r}; ask for "
                f"{entry.alias_of!r} with {key}={params[key]!r} instead"
            )
        if params:  # reading a signature costs more than a simulation of a few requests
            self._check_params(policy, entry.factory, params)
        return entry.factory(**{**entry.defaults, **params}) if entry.defaults else entry.factory(**params)

    def _check_params(self, name: str, factory: Callable[..., Any], params: dict[str, Any]) -> None:
        try:
            signature = inspect.signature(factory)
        except (TypeError, ValueError):  # no signature to read: let the call say what is wrong
            return
        accepts = [
            p.name
            for p in signature.parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        ]
        if any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
            return
        unknown = sorted(params.keys() - set(accepts))
        if unknown:
            takes = ", ".join(accepts) if accepts else "no parameters"
            raise TypeError(f"{self.kind} policy {name!r} has no parameter {unknown[0]!r}; it takes {takes}")


_REQUEST = _Registry("request", RequestPolicy, "start, arrive, release, ready and take")
_ITERATION = _Registry("iteration", IterationPolicy, "start and decide")

_REQUEST.register("fcfs", FCFS)
_REQUEST.register("batch-wise", BatchWise)
_REQUEST.register("static", StaticQueues)
_REQUEST.register("offline", OfflineQueues)
_REQUEST.alias("offline-oracle", "offline", sizes="oracle")
_REQUEST.register("sorted-preemptive", SortedPreemptive, initial="offline")
_REQUEST.alias("sorted-preemptive-oracle", "sorted-preemptive", sizes="oracle")
_REQUEST.alias("sorted-preemptive-rr", "sorted-preemptive", initial="round-robin")
_REQUEST.alias("sorted-preemptive-rr-oracle", "sorted-preemptive", initial="round-robin", sizes="oracle")
# Algorithm 1 over offline queues balanced with the hybrid's per-request overhead.
_REQUEST.register("hybrid", SortedPreemptive, initial="offline", overhead=HYBRID_OVERHEAD)
_REQUEST.alias("hybrid-oracle", "hybrid", sizes="oracle")
_REQUEST.register("shortest-first", ShortestFirst)
_REQUEST.alias("shortest-first-oracle", "shortest-first", sizes="oracle")
_REQUEST.register("longest-first", LongestFirst)
_REQUEST.alias("longest-first-oracle", "longest-first", sizes="oracle")
_REQUEST.register("aged-shortest-first", AgedShortestFirst)
_REQUEST.alias("aged-shortest-first-oracle", "aged-shortest-first", sizes="oracle")
_REQUEST.register("deadline-first", DeadlineFirst)

_ITERATION.register("prefill-first", PrefillFirst)
_ITERATION.register("lagrangian", Lagrangian)
_ITERATION.register("lagrangian-as-written", LagrangianAsWritten)
_ITERATION.register("threshold", Threshold)
_ITERATION.register("slo", SLOAware)


def register_request_policy(name: str, factory: Callable[..., RequestPolicy]) -> None:
    """Make ``factory(**params)`` available under ``name`` to :func:`make_request_policy`
    (and so to :func:`llmsched.simulate`).

    Raises
    ------
    ValueError
        When ``name`` is taken (registered names cannot be redefined).
    TypeError
        When ``name`` is not a non-empty str or ``factory`` is not callable.
    """
    _REQUEST.register(name, factory)


def register_iteration_policy(name: str, factory: Callable[..., IterationPolicy]) -> None:
    """Make ``factory(**params)`` available under ``name`` to :func:`make_iteration_policy`.

    Raises as :func:`register_request_policy` does.
    """
    _ITERATION.register(name, factory)


def request_policy_names() -> list[str]:
    """Every registered request-policy name (aliases included), sorted."""
    return _REQUEST.names()


def iteration_policy_names() -> list[str]:
    """Every registered iteration-policy name, sorted."""
    return _ITERATION.names()


def make_request_policy(policy: str | RequestPolicy, **params: Any) -> RequestPolicy:
    """A fresh request policy from its name and keyword parameters, or the object itself.

    Raises
    ------
    ValueError
        An unknown name, or a parameter the name (an alias) fixes.
    TypeError
        A parameter the policy does not take, parameters with an object, or an object that
        is not a request policy.
    """
    return _REQUEST.make(policy, params)


def make_iteration_policy(policy: str | IterationPolicy, **params: Any) -> IterationPolicy:
    """A fresh iteration policy from its name and keyword parameters, or the object itself.

    Raises as :func:`make_request_policy` does.
    """
    return _ITERATION.make(policy, params)
