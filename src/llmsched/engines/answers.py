"""The checks of every answer a policy gives the decision loop, in one place.

Whatever batching rule runs (:mod:`llmsched.engines.rule`), a broken answer is refused here,
with the same exception and the same message: a :class:`TypeError` for an answer of the wrong
type (not an integer, not a list, not a pair of integers), a :class:`ValueError` for an answer
of the right type whose value is out of range (a negative count, a request that has not
arrived, a busy client, more prompt tokens than a prefill holds). Integers may be Python or
numpy integers; a bool or a float that happens to be whole is not an integer. Each message
names the policy's class and the call that answered.

The loop tests the common, well-formed answer inline (``type(x) is int``) and calls these
only when that quick test fails, so a well-behaved policy costs nothing here.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import NoReturn

from llmsched.policies import planned_ahead

__all__ = [
    "TAKEN",
    "UNARRIVED",
    "WAITING",
    "check_decision",
    "check_executor",
    "check_iteration_policy",
    "check_open_ended",
    "check_pair",
    "check_ready",
    "check_request_policy",
    "has_methods",
    "policy_name",
    "refuse_capacity",
    "refuse_idle",
    "refuse_pair",
    "refuse_step",
    "refuse_take",
]

#: A request's state in the loop: not arrived yet, arrived and waiting for a client, taken
#: by a client (or withdrawn by a fleet).
UNARRIVED, WAITING, TAKEN = 0, 1, 2

REQUEST_METHODS = ("start", "arrive", "release", "ready", "take")
ITERATION_METHODS = ("start", "decide")
EXECUTOR_METHODS = ("start", "now", "wait_until", "prefill", "decode", "mixed", "info")


def has_methods(obj: object, methods: Sequence[str]) -> bool:
    """Whether ``obj`` is an object (not a class) with every method in ``methods``.

    What ``isinstance(obj, SomeProtocol)`` checks, at an eighth of its cost; a class is a
    factory, not a policy, even though it has the methods.
    """
    return not isinstance(obj, type) and all(callable(getattr(obj, m, None)) for m in methods)


def policy_name(policy: object) -> str:
    """The name a schedule's ``info`` gives ``policy``: its ``name``, else its class name."""
    return str(getattr(policy, "name", type(policy).__name__))


def check_request_policy(policy: object) -> None:
    """Refuse (TypeError) an object without a request policy's methods."""
    if not has_methods(policy, REQUEST_METHODS):
        raise TypeError(
            "request_policy must be an object with start, arrive, release, ready and take methods, "
            f"got {type(policy).__name__}"
        )


def check_open_ended(policy: object, name: str | None = None) -> None:
    """Refuse (TypeError) a request policy that plans over the whole workload up front, for an
    engine with KV-cache memory: a preempted request continues as a new request, which only a
    policy that learns requests as they come (``open_ended``) can take. ``name``: how the
    message names the policy (default its own name)."""
    if planned_ahead(policy) or not getattr(policy, "open_ended", False):
        raise TypeError(
            f"request policy {name or policy_name(policy)} plans over the whole workload up front; "
            "under KV-cache memory a preempted request continues as a new request, which only a "
            "policy that learns requests as they come can take (an open_ended one: fcfs, batch-wise, "
            "shortest-first, longest-first)"
        )


def check_iteration_policy(policy: object) -> None:
    """Refuse (TypeError) an object without an iteration policy's methods."""
    if not has_methods(policy, ITERATION_METHODS):
        raise TypeError(
            f"iteration_policy must be an object with start and decide methods, got {type(policy).__name__}"
        )


def check_executor(executor: object) -> None:
    """Refuse (TypeError) an object without an executor's methods and ``measured``."""
    if not has_methods(executor, EXECUTOR_METHODS) or not hasattr(executor, "measured"):
        raise TypeError(
            "executor must be an object with start, now, wait_until, prefill, decode, mixed and info "
            "methods and a measured attribute (a CostClock or a device executor), got "
            f"{type(executor).__name__}"
        )


def _integer(value: object) -> int | None:
    """``value`` as an int if it is an integer (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return None
    return int(value)


def _count(answer: object, what: str, expected: str) -> int:
    """``answer`` as an int >= 0, or a TypeError (not an integer) / ValueError (negative)
    that names the policy's method (``what``) and says what it must return."""
    value = _integer(answer)
    if value is None or value < 0:
        raise (TypeError if value is None else ValueError)(f"{what} returned {answer!r}; expected {expected}")
    return value


def check_ready(answer: object, policy: object) -> int:
    """A request policy's ``ready()`` answer as an int >= 0: TypeError when it is not an
    integer, ValueError when it is negative."""
    return _count(
        answer,
        f"request policy {type(policy).__name__}.ready()",
        "an int >= 0 (the number of requests a prefill could take now)",
    )


def check_decision(answer: object, policy: object) -> int:
    """An iteration policy's ``decide`` answer as an int >= 0 (PREFILL_NOW or a number of
    decode iterations), refused as :func:`check_ready` refuses."""
    return _count(
        answer,
        f"iteration policy {type(policy).__name__}.decide",
        "PREFILL_NOW (0) or a number of decode iterations n >= 1",
    )


def check_pair(pair: object, policy: object, capacity: int) -> tuple[int, int]:
    """One entry of a ``take(capacity)`` answer as a ``(request, client)`` pair of ints.

    Raises
    ------
    TypeError
        When it is not a tuple or list of two integers.
    """
    if isinstance(pair, (tuple, list)) and len(pair) == 2:
        request, client = _integer(pair[0]), _integer(pair[1])
        if request is not None and client is not None:
            return request, client
    raise TypeError(
        f"request policy {type(policy).__name__}.take({capacity}) returned {pair!r} in its list; "
        "expected (request, client) pairs of ints"
    )


def refuse_take(pairs: object, policy: object, capacity: int, ready: int) -> NoReturn:
    """Refuse a ``take(capacity)`` answer that is not a non-empty list: TypeError for
    another type, ValueError for an empty list after a positive ``ready()``."""
    name = type(policy).__name__
    if type(pairs) is not list:
        raise TypeError(
            f"request policy {name}.take({capacity}) returned {type(pairs).__name__} {pairs!r}; "
            "expected a list of (request, client) pairs"
        )
    raise ValueError(
        f"request policy {name}.take({capacity}) returned no pair although ready() reported "
        f"{ready} ready request(s)"
    )


def refuse_pair(
    request: int,
    client: int,
    policy: object,
    capacity: int,
    known: int,
    clients: int,
    state: Sequence[int],
    taken_at: Sequence[int],
    take: int,
    holding: Mapping[int, int],
    arrival: Sequence[float],
    now: float,
) -> NoReturn:
    """Refuse (ValueError) a well-formed ``(request, client)`` pair the request may not take.

    ``known`` requests and ``clients`` clients exist; ``state`` holds each request's state
    (:data:`UNARRIVED`, :data:`WAITING`, :data:`TAKEN`), ``taken_at`` the number of the take
    that took it, ``take`` the number of this take, ``holding`` the request each busy client
    holds; ``arrival`` and ``now`` date a request that has not arrived.
    """
    if not 0 <= request < known:
        problem = f"request {request} is not in the workload (0..{known - 1})"
    elif state[request] == UNARRIVED:
        problem = (
            f"request {request} has not arrived (it arrives at {arrival[request]:.9g} s; now is {now:.9g} s)"
        )
    elif state[request] == TAKEN:
        again = taken_at[request] == take
        problem = f"request {request} appears twice" if again else f"request {request} was taken before"
    elif not 0 <= client < clients:
        problem = f"client {client} does not exist (clients are 0..{clients - 1})"
    elif taken_at[holding[client]] == take:
        problem = f"client {client} appears twice"
    else:
        problem = f"client {client} is busy with request {holding[client]}"
    raise ValueError(f"request policy {type(policy).__name__}.take({capacity}) is invalid: {problem}")


def refuse_capacity(tokens: int, capacity: int, policy: object) -> NoReturn:
    """Refuse (ValueError) a take whose requests hold more prompt tokens than ``capacity``."""
    raise ValueError(
        f"request policy {type(policy).__name__}.take({capacity}) is invalid: its requests hold "
        f"{tokens} prompt tokens, more than the capacity of {capacity}"
    )


def refuse_idle(policy: object, free: int, unstarted: int) -> NoReturn:
    """Refuse (ValueError) a request policy that offers nothing while ``free`` clients are
    free, nothing runs and every request has arrived, ``unstarted`` of them not started."""
    raise ValueError(
        f"request policy {type(policy).__name__}.ready() returned 0 with {free} free client(s), "
        f"nothing decoding and every request arrived, yet {unstarted} request(s) never started: "
        "the run cannot go on"
    )


def refuse_step(rule: object, step: object, ready: int) -> NoReturn:
    """Refuse an answer of a batching rule's ``plan`` or ``taken`` that names no step:
    TypeError for another type, ValueError for an int out of range (or a take, ``TAKE``,
    ``PREFILL_STAGE``, ``JOIN`` or ``HAND_OFF``, with no request ready; see
    :mod:`llmsched.engines.rule`)."""
    expected = (
        "expected TAKE, PREFILL_STAGE, JOIN or HAND_OFF (with requests ready), a MixedBatch tuple, "
        "or an int n >= 1 of decode iterations"
    )
    name = type(rule).__name__
    error = ValueError if type(step) is int else TypeError
    raise error(f"batching rule {name} answered {step!r} with {ready} request(s) ready; {expected}")
