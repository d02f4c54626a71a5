"""The fleet validator: routing, arrival at the engine and each engine's rules, each caught alone."""

from __future__ import annotations

import dataclasses

import pytest

from llmsched.fleet.engine import Backoff, Engine
from llmsched.fleet.validate import FLEET_RULES, validate_fleet
from tests.fleet.test_schedule import PAPER, _fleet, _rules


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
    assert set(FLEET_RULES) == {"structure", "routing", "reached", "rejected", "engine"}
