"""SplitwiseSim's token JSQ: the fewest prompt tokens still to prefill plus a token a request
held, ties to the lowest index; a prefilled prompt no longer weighs on its engine."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from llmsched import Engine, LinearCostModel, Workload, simulate_fleet
from llmsched.fleet.routers import REGISTRY, check_router, make_router
from llmsched.fleet.routers.token_jsq import TokenJsqRouter
from tests.fleet.routers import loads


def test_a_prefilled_prompt_weighs_no_more_than_its_token() -> None:
    """Engine 0 holds one 8,000-token request already decoding; engine 1 two waiting prompts
    of 300: token JSQ picks engine 0 (1 pending token against 602), JSQ by prompt tokens
    engine 1."""
    held = dataclasses.replace(
        loads(2, held=[1, 2], prompt_tokens=[8000, 600]), pending_prompt_tokens=np.array([0.0, 600.0])
    )
    assert TokenJsqRouter().route(0, held) == 0
    assert make_router("jsq-prompt-tokens").route(0, held) == 1
    # Without pending counts (a cluster's prompt machines) the prompt tokens held are pending.
    assert TokenJsqRouter().route(0, loads(2, held=[1, 2], prompt_tokens=[8000, 600])) == 1


@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 50)), min_size=1, max_size=9))
def test_picks_the_fewest_pending_tokens(engines) -> None:
    pending, held = zip(*engines, strict=True)
    view = dataclasses.replace(loads(len(engines), held=list(held)), pending_prompt_tokens=np.array(pending))
    chosen = TokenJsqRouter().route(3, view)
    assert type(chosen) is int
    assert chosen == min(range(len(engines)), key=lambda k: (pending[k] + held[k], k))


def test_a_fleet_counts_prompts_pending_until_their_prefill_ends() -> None:
    """A 3,000-token prompt at 0 (decoding long after 0.32 s), a short request at 1 (to the
    idle engine 1), another at 2: both engines then hold one decoding request and no prompt to
    prefill, so token JSQ ties and picks engine 0, where JSQ by prompt tokens held still
    counts the long prompt and picks engine 1."""
    workload = Workload([3000, 100, 100], [400, 400, 5], arrival=[0.0, 1.0, 2.0])
    cost = LinearCostModel(0.02, 1e-4, 0.03, 2e-4, prefill_capacity=4000)
    fleet = simulate_fleet(workload, [Engine(cost, 8)] * 2, router="token-jsq")
    assert fleet.validate() == []
    assert fleet.request_engine.tolist() == [0, 1, 0]
    held = simulate_fleet(workload, [Engine(cost, 8)] * 2, router="jsq-prompt-tokens")
    assert held.request_engine.tolist() == [0, 1, 1]


def test_is_a_registered_online_router() -> None:
    router = make_router("token-jsq")
    assert REGISTRY["token-jsq"] is TokenJsqRouter and check_router(router) is router
    assert not router.weighs and not router.closed_batch
