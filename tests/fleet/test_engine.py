"""A fleet's engine and backoff check their fields; an engine's speeds come from its cost model."""

from __future__ import annotations

import math

import pytest

from llmsched import LevelCostModel
from llmsched.fleet.engine import Backoff, Engine
from tests.fleet.test_schedule import PAPER


def test_engine_and_backoff_check_their_fields() -> None:
    with pytest.raises(ValueError, match="clients"):
        Engine(PAPER, 0)
    with pytest.raises(ValueError, match="price"):
        Engine(PAPER, 2, price=-1.0)
    with pytest.raises(TypeError, match="cost"):
        Engine("paper", 2)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="request_policy"):
        Engine(PAPER, 2, request_policy=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="delay"):
        Backoff(delay=-1)
    with pytest.raises(ValueError, match="threshold"):
        Backoff(threshold=0)
    with pytest.raises(ValueError, match="share"):
        Backoff(share=0)


def test_engine_speeds() -> None:
    engine = Engine(PAPER, 200)
    assert engine.tokens_per_s == pytest.approx(200 / 0.071)
    prefill, decode = engine.seconds_per_token
    assert prefill == pytest.approx(0.00013) and decode == pytest.approx(0.071 / 200)
    levels = Engine(LevelCostModel([(100, 0.1), (200, 0.15)], 0.01), 4)
    assert levels.tokens_per_s > 0 and all(math.isfinite(x) for x in levels.seconds_per_token)
