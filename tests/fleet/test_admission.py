"""Admission at a fleet's door: a rejected request reaches no engine, is reported, and counts
in no latency figure; the fleet stays valid and non-anticipative."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsched import LinearCostModel, Workload
from llmsched.fleet.admission import Admission, TTFTAdmission
from llmsched.fleet.engine import Backoff, Engine
from llmsched.fleet.routers import Loads
from llmsched.fleet.simulate import simulate_fleet
from llmsched.fleet.validate import validate_fleet
from tests.fleet.test_simulate import ONLINE_ROUTERS, fleets

PAPER = LinearCostModel.paper()


def _loads(pending: list[float], rate: float) -> Loads:
    m = len(pending)
    return Loads(
        requests=np.zeros(m),
        clients=np.ones(m),
        work=np.zeros(m),
        prompt_tokens=np.array(pending, dtype=float),
        rates=np.tile([rate, 0.0], (m, 1)),
        pending_prompt_tokens=np.array(pending, dtype=float),
    )


def test_ttft_admission_compares_the_expected_wait_with_the_target() -> None:
    """Expected TTFT (pending prompt tokens and its own, at the engine's seconds per prompt
    token) against ``ttft_base + ttft_per_token * prompt``, scaled by ``margin``."""
    rule = TTFTAdmission(ttft_base=0.5, ttft_per_token=0.001, margin=1.0)
    loads = _loads([0.0, 900.0], rate=0.001)
    assert rule.target(100) == pytest.approx(0.6)
    assert rule.admit(100, 0, loads, 0.0)  # 0.1 s expected
    assert not rule.admit(100, 1, loads, 0.0)  # 1.0 s expected
    assert TTFTAdmission(0.5, 0.001, margin=2.0).admit(100, 1, loads, 0.0)
    assert not TTFTAdmission(0.5, 0.001).admit(600, 0, loads, 0.0)  # 0.6 s > half of 1.1 s
    assert isinstance(rule, Admission)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ttft_base": -1.0}, "ttft_base"),
        ({"ttft_base": 0.0, "ttft_per_token": 0.0}, "both 0"),
        ({"margin": 0.0}, "margin"),
        ({"ttft_per_token": float("nan")}, "ttft_per_token"),
    ],
)
def test_bad_parameters_are_refused(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        TTFTAdmission(**kwargs)


def test_a_fleet_refuses_an_admission_that_is_not_one() -> None:
    workload = Workload([10, 10], [5, 5])
    with pytest.raises(TypeError, match="admission must be None or an object"):
        simulate_fleet(workload, [Engine(PAPER, 2)], admission=lambda *a: True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="admission"):
        simulate_fleet(workload, [Engine(PAPER, 2)], admission=TTFTAdmission)  # type: ignore[arg-type]


def _overload(n: int = 300, seed: int = 0) -> Workload:
    """Long prompts and short answers, ten a second: more prefill than the engine can do."""
    rng = np.random.default_rng(seed)
    return Workload(
        rng.integers(1000, 4000, n), rng.integers(2, 10, n), arrival=np.sort(rng.uniform(0, n / 10, n))
    )


def test_past_saturation_admission_keeps_the_served_on_time_and_reports_the_rest() -> None:
    """Ten requests a second on one engine whose prefill serves about three: without admission
    the backlog grows and few meet a 2 s TTFT target; with it, the requests taken meet it far
    more often, the others are reported rejected, and every request is in the accounts."""
    workload = _overload()
    engine = Engine(PAPER, 64)
    all_in = simulate_fleet(workload, [engine])
    door = simulate_fleet(workload, [engine], admission=TTFTAdmission(ttft_base=2.0))
    assert validate_fleet(all_in) == [] and validate_fleet(door) == []
    rejected = door.rejected
    assert 0 < rejected.sum() < len(workload) and not all_in.rejected.any()
    assert door.summary()["rejected"] == int(rejected.sum()) and all_in.summary()["rejected"] == 0
    met_all_in = int(all_in.meets_slo(slo_ttft=2.0).sum())
    met_door = int(door.meets_slo(slo_ttft=2.0).sum())
    assert met_door > 2 * met_all_in
    assert not door.meets_slo()[rejected].any()  # a rejected request meets no target
    frame = door.request_frame()
    assert frame["rejected"].tolist() == rejected.tolist()
    assert np.isnan(frame.loc[rejected, "ttft"]).all() and (frame.loc[rejected, "engine"] == -1).all()
    served = ~rejected
    assert np.isfinite(door.ttft[served]).all()
    assert door.summary()["ttft_p99_s"] == pytest.approx(np.percentile(door.ttft[served], 99))
    assert door.tokens_per_s == pytest.approx(workload.output_tokens[served].sum() / door.makespan)
    assert door.info["admission"] == "ttft" and all_in.info["admission"] is None
    assert door.info["deferred"] == all_in.info["deferred"] == 0  # fcfs defers nothing
    trace = door.chrome_trace()  # a rejected request has no engine track to arrive on
    arrivals = [e for e in trace["traceEvents"] if e.get("cat") == "arrival"]
    assert len(arrivals) == int(served.sum()) and trace["otherData"]["rejected"] == int(rejected.sum())


def test_the_validator_catches_a_rejected_request_that_ran() -> None:
    workload = _overload(120)
    door = simulate_fleet(workload, [Engine(PAPER, 64)], admission=TTFTAdmission(ttft_base=1.0))
    rejected = door.rejected
    assert rejected.any() and validate_fleet(door) == []
    ran = rejected.copy()
    ran[np.flatnonzero(rejected)[0]] = False  # says it ran, but no engine has it
    rules = {v.rule for v in validate_fleet(dataclasses.replace(door, request_rejected=ran))}
    assert "structure" in rules
    claims = rejected.copy()
    claims[np.flatnonzero(~rejected)[0]] = True  # says it was turned away, but an engine ran it
    rules = {v.rule for v in validate_fleet(dataclasses.replace(door, request_rejected=claims))}
    assert rules == {"rejected", "routing"}
    # Skipping the rule skips no other: the engines still ran a request the fleet says it turned away.
    skipped = validate_fleet(dataclasses.replace(door, request_rejected=claims), skip="rejected")
    assert {v.rule for v in skipped} == {"routing"}


@settings(max_examples=40, deadline=None)
@given(fleets(), st.sampled_from(ONLINE_ROUTERS), st.floats(0.01, 2.0), st.booleans())
def test_every_fleet_with_admission_validates_and_loses_no_request(case, router, base, backoff) -> None:
    """Whatever the engines, router and target: the schedule validates, and every request is
    either served whole by one engine or rejected."""
    workload, engines = case
    plan = Backoff(0.05) if backoff and all(e.memory is None for e in engines) else None
    fleet = simulate_fleet(workload, engines, router, plan, seed=1, admission=TTFTAdmission(ttft_base=base))
    assert validate_fleet(fleet) == []
    served = ~fleet.rejected
    assert np.all((fleet.request_engine >= 0) == served)
    ran = sum(len(s.requests) for s in fleet.schedules)
    assert ran == int(served.sum())
    assert np.isfinite(fleet.finish[served]).all() and np.isnan(fleet.finish[~served]).all()
    summary = fleet.summary()
    assert summary["rejected"] + ran == len(workload)


@settings(max_examples=40, deadline=None)
@given(fleets(), st.sampled_from(ONLINE_ROUTERS), st.floats(0.1, 4.0), st.floats(0.01, 2.0))
def test_admission_is_non_anticipative(case, router, cut, base) -> None:
    """Dropping every request that arrives after T changes no admission before T, and nothing
    that happened before T."""
    workload, engines = case
    order = np.argsort(workload.arrival, kind="stable")
    workload = workload.subset(order)
    early = workload.arrival <= cut
    if not early.any() or early.all():
        return
    door = TTFTAdmission(ttft_base=base)
    whole = simulate_fleet(workload, engines, router, seed=1, admission=door)
    part = simulate_fleet(workload.subset(np.flatnonzero(early)), engines, router, seed=1, admission=door)
    np.testing.assert_array_equal(whole.rejected[early], part.rejected)
    done = np.flatnonzero(whole.finish[early] < cut)
    np.testing.assert_array_equal(whole.request_engine[early][done], part.request_engine[done])
    np.testing.assert_allclose(whole.finish[early][done], part.finish[done], rtol=1e-9)
