"""The fleet's data and its validator (each rule broken alone is found), and the schedule contract
as a fleet meets it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from llmsched import LinearCostModel, Workload
from llmsched.core.schedule import STAGE_COLUMNS, ScheduleLike
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


def test_a_fleet_is_schedule_like() -> None:
    """Its machines are its engines, a request's machine and client are where its engine ran
    it; stage counts and clients add up over the engines."""
    fleet = _fleet(Backoff(delay=0.05))
    assert isinstance(fleet, ScheduleLike) and fleet.mode == "fleet" and fleet.validate() == []
    assert fleet.request_machine is fleet.request_engine and fleet.machines == 2 and fleet.clients == 3
    for i in range(len(fleet.workload)):
        engine = fleet.schedules[fleet.request_engine[i]]
        assert fleet.request_client[i] == engine.request_client[fleet.request_index[i]]
    summary = fleet.summary()
    assert summary["prefill_stages"] == sum(s.summary()["prefill_stages"] for s in fleet.schedules)
    assert summary["decode_iterations"] == sum(s.summary()["decode_iterations"] for s in fleet.schedules)
    assert fleet.validate(skip="engine") == validate_fleet(fleet, skip="engine") == []


def test_the_stage_frame_is_every_engines_then_the_pulls() -> None:
    """Engine k's rows are its own stage frame's first columns on machine k; each pull leaves
    its donor the backoff delay before it reaches the engine that pulled it."""
    workload = Workload([50] * 40, [400 if i % 2 == 0 else 5 for i in range(40)])
    fleet = simulate_fleet(workload, [Engine(PAPER, 4), Engine(PAPER, 4)], "round-robin", Backoff(delay=0.1))
    frame = fleet.stage_frame()
    stages = frame[frame["kind"] != "pull"]
    for k, s in enumerate(fleet.schedules):
        own = s.stage_frame()[list(STAGE_COLUMNS[1:])]
        mine = stages[stages["machine"] == k]
        assert mine["id"].tolist() == list(range(len(own)))
        pd.testing.assert_frame_equal(mine[own.columns].reset_index(drop=True), own.reset_index(drop=True))
    pulls = frame[frame["kind"] == "pull"]
    pulled = np.flatnonzero(fleet.request_pulled_from >= 0)
    assert fleet.pulled > 0 and pulls["id"].tolist() == pulled.tolist()
    assert (
        pulls["machine"].tolist() == [0] * fleet.pulled and pulls["to_machine"].tolist() == [1] * fleet.pulled
    )
    np.testing.assert_allclose(pulls["end"] - pulls["start"], 0.1, rtol=1e-9)
    assert pulls["end"].tolist() == fleet.request_reached[pulled].tolist()
