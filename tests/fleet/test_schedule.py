"""The fleet's data and its validator: each rule broken alone is found."""

from __future__ import annotations

import dataclasses

from llmsched import LinearCostModel, Workload
from llmsched.fleet.engine import Backoff, Engine
from llmsched.fleet.simulate import simulate_fleet
from llmsched.fleet.validate import validate_fleet

PAPER = LinearCostModel.paper()


def _fleet(backoff: Backoff | None = None):
    workload = Workload([10, 20, 30, 40, 50, 60], [30, 1, 40, 2, 50, 3], arrival=[0, 0, 0.1, 0.1, 0.2, 0.2])
    return simulate_fleet(workload, [Engine(PAPER, 2), Engine(PAPER, 1, price=2.0)], "round-robin", backoff)


def _rules(fleet) -> set[str]:
    return {v.rule for v in validate_fleet(fleet)}


def test_pulled_from_below_minus_one_and_an_equal_cost_model() -> None:
    fleet = _fleet()
    pulled = fleet.request_pulled_from.copy()
    pulled[1] = -2
    assert _rules(dataclasses.replace(fleet, request_pulled_from=pulled)) == {"reached"}
    # An equal cost model built anew is the engine's cost model still.
    same = dataclasses.replace(fleet.engines[0], cost=LinearCostModel.paper())
    assert validate_fleet(dataclasses.replace(fleet, engines=(same, fleet.engines[1]))) == []
