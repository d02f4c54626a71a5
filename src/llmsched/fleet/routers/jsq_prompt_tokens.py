"""Join the shortest queue counted in prompt tokens: Splitwise's rule for its prompt pool."""

from __future__ import annotations

from llmsched.fleet.routers.base import BaseRouter, Loads

__all__ = ["JsqPromptTokensRouter"]


class JsqPromptTokensRouter(BaseRouter):
    """Sends each request to the engine holding the fewest prompt tokens
    (:attr:`~llmsched.fleet.routers.base.Loads.prompt_tokens`: on a disaggregated cluster's
    prompt machine, the prompt tokens queued or in prefill); ties to the lowest index.

    A prompt machine's wait is the prefill work ahead of a request, which grows with prompt
    tokens, not with requests: one 8,000-token prompt holds a machine longer than twenty short
    ones. Splitwise's cluster scheduler routes prompts by it.
    """

    name = "jsq-prompt-tokens"

    def route(self, request: int, loads: Loads) -> int:
        return int(loads.prompt_tokens.argmin())
