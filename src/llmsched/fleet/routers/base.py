"""What a router is: the contract every router of the registry meets, and its checks.

A router sends each arriving request to one of several engines (a fleet's engines, or a pool of
a disaggregated cluster's machines). The loop that runs the engines on one clock calls
:meth:`Router.start` once, then :meth:`Router.route` for each request, in order of arrival (ties by
index), when the request arrives, with a :class:`Loads` view of the engines at that moment. A
router must not read a request that has not arrived (:attr:`Loads` holds only what the engines
hold now); a closed-batch router (one that plans from every request's size at the start) says so
with ``closed_batch = True``, and the loop refuses it on requests that arrive over time.

The loop checks a router once (:func:`check_router`) and every answer it gives
(:func:`engine_index`), so a router of the user's own is held to the same contract as the
registered ones.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["BaseRouter", "Loads", "Router", "RouterSetup", "check_router", "engine_index", "read_only_view"]


@dataclass
class Loads:
    """The engines' loads when a request arrives, one entry per engine (read-only to a router).

    The loop updates these arrays in place between two calls of :meth:`Router.route`; a router
    reads them during the call and neither writes them nor keeps them for later.

    Attributes
    ----------
    requests
        Requests routed to each engine and not finished nor pulled away (waiting, in prefill,
        decoding, or on their way to it).
    clients
        Each engine's clients (batch slots).
    work
        Each engine's predicted seconds of work left (prompt tokens times its seconds per prompt
        token plus planned output tokens times its seconds per output token); zeros unless the
        router ``weighs`` requests.
    prompt_tokens
        The prompt tokens of the requests counted in ``requests``. A prompt machine of a
        disaggregated cluster holds a request until its prefill ends, so there these are the
        prompt tokens queued or in prefill.
    rates
        Each engine's (seconds per prompt token, seconds per output token), shape (engines, 2).
    pending_prompt_tokens
        The prompt tokens of the requests counted in ``requests`` whose prefill has not ended
        (queued or in prefill), or None where ``prompt_tokens`` are those already (a
        disaggregated cluster's prompt machines).
    """

    requests: np.ndarray
    clients: np.ndarray
    work: np.ndarray
    prompt_tokens: np.ndarray
    rates: np.ndarray
    pending_prompt_tokens: np.ndarray | None = None


@dataclass(frozen=True)
class RouterSetup:
    """What a router may know before the first request arrives.

    Attributes
    ----------
    engines
        The number of engines it routes to.
    requests
        The number of requests that will arrive.
    prompt, weight
        Each request's prompt tokens and the size a weighing router counts it by (planned output
        tokens: predicted, or the truth for a clairvoyant run; empty unless the router
        ``weighs``); a router reads request ``i``'s entries only from the call that routes ``i``
        on, unless it is ``closed_batch``.
    order
        The requests in order of arrival (ties by index).
    seed
        Seeds a randomised router's draws: an integer, a ``numpy.random.Generator`` (drawn
        from as it is) or None (fresh entropy); :func:`llmsched.core.checks.rng` turns it into
        a generator.
    speeds
        Each engine's output tokens a second with every client decoding
        (:attr:`~llmsched.fleet.engine.Engine.tokens_per_s`), for routers that weigh engines.
    time_limit
        Wall-clock seconds a router's solver may take (``inf``: none, so that it stops on its
        deterministic work budget).
    """

    engines: int
    requests: int
    prompt: np.ndarray
    weight: np.ndarray
    order: np.ndarray
    seed: Any = 0
    speeds: np.ndarray | None = None
    time_limit: float = math.inf

    def __post_init__(self) -> None:
        # Views of the caller's arrays (often the workload's own), which a router only reads.
        for name in ("prompt", "weight", "order", "speeds"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, read_only_view(np.asarray(value)))


@runtime_checkable
class Router(Protocol):
    """Sends each arriving request to an engine.

    A router may also say ``seeded = True`` when it draws from ``RouterSetup.seed`` (a fleet's
    ``info`` then records the seed); without it, it is taken not to.

    Attributes
    ----------
    name
        The router's registered name (or a name of the user's own).
    weighs
        Whether it reads request sizes (``RouterSetup.weight``; a fleet then needs predictions or
        ``sizes="oracle"``).
    closed_batch
        Whether it plans from every request at the start (allowed only when all arrive at one
        instant).
    """

    name: str
    weighs: bool
    closed_batch: bool

    def start(self, setup: RouterSetup) -> None:
        """Prepare a run (draws, a static plan), forgetting any earlier one."""
        ...

    def route(self, request: int, loads: Loads) -> int:
        """The engine (0 .. engines - 1) that ``request``, arriving now, goes to."""
        ...


class BaseRouter:
    """A router's defaults: online (not ``closed_batch``), not weighing, not seeded, nothing to
    prepare. A router subclasses it, names itself and routes."""

    name = ""
    weighs = False
    closed_batch = False
    seeded = False

    def start(self, setup: RouterSetup) -> None:
        """Nothing to prepare."""

    def route(self, request: int, loads: Loads) -> int:
        raise NotImplementedError(f"{type(self).__name__} must define route(request, loads)")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def read_only_view(array: np.ndarray) -> np.ndarray:
    """A view of ``array`` that cannot be written through (its owner still writes ``array``)."""
    view = array.view()
    view.flags.writeable = False
    return view


_ATTRIBUTES = (("name", str), ("weighs", bool), ("closed_batch", bool))
_METHODS = ("start", "route")


def check_router(router: object) -> Router:
    """``router`` if it meets :class:`Router`; a TypeError naming what it lacks otherwise."""
    if isinstance(router, type):
        name = router.__name__
        raise TypeError(f"a router must be an object, not a class: pass {name}(), not {name}")
    missing = [f"a {what} method" for what in _METHODS if not callable(getattr(router, what, None))]
    for what, kind in _ATTRIBUTES:
        value = getattr(router, what, None)
        if not isinstance(value, (kind, np.bool_) if kind is bool else kind):
            shown = "none" if value is None else f"{type(value).__name__} {value!r}"
            missing.append(f"a {kind.__name__} {what} (has {shown})")
    if missing:
        raise TypeError(
            f"a router must be a registered name or an object meeting llmsched.fleet.routers.Router; "
            f"{type(router).__name__} lacks {', '.join(missing)}"
        )
    return router  # type: ignore[return-value]


def engine_index(router: Router, request: int, answer: object, engines: int) -> int:
    """``answer``, the engine ``router`` chose for ``request``, as an int, if it is an engine's
    index (an integer in ``[0, engines)``); a ValueError naming the router, the request and the
    answer otherwise."""
    if isinstance(answer, numbers.Integral) and not isinstance(answer, (bool, np.bool_)):
        index = int(answer)
        if 0 <= index < engines:
            return index
    raise ValueError(
        f"router {router.name!r} sent request {request} to {answer!r}, which is not an engine: "
        f"a router answers an integer in [0, {engines})"
    )
