"""SplitwiseSim's token JSQ: the fewest prompt tokens still to prefill, and a token a request."""

from __future__ import annotations

from llmsched.fleet.routers.base import BaseRouter, Loads

__all__ = ["TokenJsqRouter"]


class TokenJsqRouter(BaseRouter):
    """Sends each request to the engine with the fewest *pending tokens*: the prompt tokens not
    yet prefilled (:attr:`~llmsched.fleet.routers.base.Loads.pending_prompt_tokens`) plus one for
    each request it holds (each has a token to make); ties to the lowest index.

    It is SplitwiseSim's ``token_jsq`` scheduler: a request adds its prompt and one token to
    its machine's count, the prompt leaves it when the prefill ends, the token when the
    request finishes. Unlike ``jsq-prompt-tokens``, a long prompt stops weighing on its engine
    once it is prefilled, while its request decodes.
    """

    name = "token-jsq"

    def route(self, request: int, loads: Loads) -> int:
        pending = loads.prompt_tokens if loads.pending_prompt_tokens is None else loads.pending_prompt_tokens
        return int((pending + loads.requests).argmin())
