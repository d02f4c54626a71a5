"""Routers: one small class per file, registered here by name.

A new router is one file in this folder (a class meeting :class:`~llmsched.fleet.routers.base.Router`,
most simply a subclass of :class:`~llmsched.fleet.routers.base.BaseRouter`) and one line in
:data:`REGISTRY`.
"""

from __future__ import annotations

from typing import Any

from llmsched.core.checks import choice
from llmsched.fleet.routers.base import BaseRouter, Loads, Router, RouterSetup, check_router, engine_index
from llmsched.fleet.routers.jsq import JsqRouter
from llmsched.fleet.routers.jsq_prompt_tokens import JsqPromptTokensRouter
from llmsched.fleet.routers.jsq_requests import JsqRequestsRouter
from llmsched.fleet.routers.least_work import LeastWorkRouter
from llmsched.fleet.routers.mico import MicoRouter
from llmsched.fleet.routers.power_of_two import PowerOfTwoRouter
from llmsched.fleet.routers.qcmax import QcmaxRouter
from llmsched.fleet.routers.random_choice import RandomRouter
from llmsched.fleet.routers.round_robin import RoundRobinRouter
from llmsched.fleet.routers.token_jsq import TokenJsqRouter

__all__ = [
    "REGISTRY",
    "BaseRouter",
    "Loads",
    "Router",
    "RouterSetup",
    "as_router",
    "check_router",
    "engine_index",
    "make_router",
    "router_names",
]

#: name -> router class, in the order the documentation lists them. One line a router.
REGISTRY: dict[str, type[Router]] = {
    "round-robin": RoundRobinRouter,
    "random": RandomRouter,
    "jsq": JsqRouter,
    "jsq-prompt-tokens": JsqPromptTokensRouter,
    "jsq-requests": JsqRequestsRouter,
    "token-jsq": TokenJsqRouter,
    "power-of-two": PowerOfTwoRouter,
    "least-work": LeastWorkRouter,
    "qcmax": QcmaxRouter,
    "mico": MicoRouter,
}


def router_names() -> tuple[str, ...]:
    """The registered routers' names, in registry order."""
    return tuple(REGISTRY)


def make_router(name: str, **params: Any) -> Router:
    """A fresh router of the registered ``name``; ValueError naming the registered ones otherwise."""
    return REGISTRY[choice("router", name, REGISTRY)](**params)


def as_router(router: str | Router) -> Router:
    """A fresh registered router for a name (:func:`make_router`), or ``router`` itself once it
    is seen to meet :class:`~llmsched.fleet.routers.base.Router` (:func:`check_router`)."""
    if isinstance(router, str):
        return make_router(router)
    return check_router(router)
