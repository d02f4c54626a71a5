"""Join the shortest queue counted in prompt tokens: the fewest prompt tokens held, ties to the
lowest index, whatever the request counts."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from llmsched.fleet.routers import REGISTRY, check_router, make_router
from llmsched.fleet.routers.base import Loads
from llmsched.fleet.routers.jsq_prompt_tokens import JsqPromptTokensRouter
from tests.fleet.routers import loads


def _loads(tokens: list[int], held: list[int]) -> Loads:
    return loads(len(tokens), held=held, prompt_tokens=tokens)


def test_counts_tokens_not_requests_and_breaks_ties_low() -> None:
    """One 8,000-token prompt weighs more than twenty short ones; equal tokens go low."""
    router = JsqPromptTokensRouter()
    assert router.route(0, _loads([8000, 20 * 50], [1, 20])) == 1
    assert router.route(0, _loads([300, 100, 100], [0, 9, 1])) == 1
    assert router.route(0, _loads([0, 0], [5, 0])) == 0


@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 50)), min_size=1, max_size=9))
def test_picks_the_fewest_prompt_tokens(engines) -> None:
    tokens, held = zip(*engines, strict=True)
    chosen = JsqPromptTokensRouter().route(3, _loads(list(tokens), list(held)))
    assert type(chosen) is int
    assert chosen == min(range(len(engines)), key=lambda k: (tokens[k], k))


def test_is_a_registered_online_router() -> None:
    router = make_router("jsq-prompt-tokens")
    assert REGISTRY["jsq-prompt-tokens"] is JsqPromptTokensRouter and check_router(router) is router
    assert router.name == "jsq-prompt-tokens"
    assert not router.weighs and not router.closed_batch
