"""The fleet's data and its validator: each rule broken alone is found."""

from __future__ import annotations

import dataclasses
import math

import pytest

from llmsched import LevelCostModel, LinearCostModel, Workload
from llmsched.fleet.schedule import FLEET_RULES, Backoff, Engine, validate_fleet
from llmsched.fleet.simulate import simulate_fleet

PAPER = LinearCostModel.paper()


def _fleet(backoff: Backoff | None = None):
    workload = Workload([10, 20, 30, 40, 50, 60], [30, 1, 40, 2, 50, 3], arrival=[0, 0, 0.1, 0.1, 0.2, 0.2])
    return simulate_fleet(workload, [Engine(PAPER, 2), Engine(PAPER, 1, price=2.0)], "round-robin", backoff)


def _rules(fleet) -> set[str]:
    return {v.rule for v in validate_fleet(fleet)}


def test_a_simulated_fleet_is_valid() -> None:
    assert validate_fleet(_fleet()) == []
    assert validate_fleet(_fleet(Backoff(0.5))) == []


def test_structure() -> None:
    fleet = _fleet()
    assert _rules(dataclasses.replace(fleet, request_engine=fleet.request_engine[:-1])) == {"structure"}
    assert _rules(dataclasses.replace(fleet, schedules=fleet.schedules[:1])) == {"structure"}
    far = fleet.request_engine.copy()
    far[0] = 5
    assert _rules(dataclasses.replace(fleet, request_engine=far)) == {"structure"}
    other = dataclasses.replace(fleet, engines=(fleet.engines[0], Engine(PAPER, 3)))
    assert _rules(other) == {"structure"}
    fused = dataclasses.replace(fleet.engines[1], mode="fusion")
    assert _rules(dataclasses.replace(fleet, engines=(fleet.engines[0], fused))) == {"structure"}
    with pytest.raises(ValueError, match="structure"):
        validate_fleet(fleet, skip="structure")
    with pytest.raises(TypeError, match="FleetSchedule"):
        validate_fleet(fleet.schedules[0])  # type: ignore[arg-type]


def test_routing() -> None:
    fleet = _fleet()
    index = fleet.request_index.copy()
    # Requests 0 and 2 both on engine 0; point request 2 at request 0's place.
    assert fleet.request_engine[0] == fleet.request_engine[2] == 0
    index[2] = index[0]
    assert "routing" in _rules(dataclasses.replace(fleet, request_index=index))
    workload = fleet.workload.replace(output_tokens=fleet.workload.output_tokens + 1)
    assert _rules(dataclasses.replace(fleet, workload=workload)) == {"routing"}
    assert validate_fleet(dataclasses.replace(fleet, workload=workload), skip="routing") == []


def test_reached() -> None:
    fleet = _fleet()
    early = fleet.request_reached.copy()
    early[2] -= 0.05
    assert _rules(dataclasses.replace(fleet, request_reached=early)) == {"reached"}
    pulled = fleet.request_pulled_from.copy()
    pulled[0] = fleet.request_engine[0]
    assert _rules(dataclasses.replace(fleet, request_pulled_from=pulled)) == {"reached"}
    moved = _fleet(Backoff(0.5))
    if moved.pulled:
        delay = dict(moved.info, backoff_delay=10.0)
        assert _rules(dataclasses.replace(moved, info=delay)) == {"reached"}


def test_engine() -> None:
    fleet = _fleet()
    broken = dataclasses.replace(fleet.schedules[0], makespan=fleet.schedules[0].makespan + 1)
    out = validate_fleet(dataclasses.replace(fleet, schedules=(broken, fleet.schedules[1])))
    assert {v.rule for v in out} == {"engine"} and out[0].message.startswith("engine 0: [makespan]")
    assert set(FLEET_RULES) == {"structure", "routing", "reached", "engine"}


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


def test_pulled_from_below_minus_one_and_an_equal_cost_model() -> None:
    fleet = _fleet()
    pulled = fleet.request_pulled_from.copy()
    pulled[1] = -2
    assert _rules(dataclasses.replace(fleet, request_pulled_from=pulled)) == {"reached"}
    # An equal cost model built anew is the engine's cost model still.
    same = dataclasses.replace(fleet.engines[0], cost=LinearCostModel.paper())
    assert validate_fleet(dataclasses.replace(fleet, engines=(same, fleet.engines[1]))) == []
