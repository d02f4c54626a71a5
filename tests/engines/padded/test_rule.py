"""Padded insertion: new whole prompts and every decoding request in one iteration, each row
padded to the longest new prompt; its schedules are padded fused schedules, which the fused
validator prices by padded_iteration_time."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmsched import ContextCostModel, LinearCostModel, Workload
from llmsched.engines.batching import batching_rule
from llmsched.engines.fusion.iteration import padded_iteration_time
from llmsched.engines.fusion.schedule import FusedSchedule
from llmsched.engines.fusion.validate import validate_fused
from llmsched.engines.loop import CostClock, run_loop
from llmsched.engines.orca.rule import OrcaRule
from llmsched.engines.padded.rule import PaddedRule
from llmsched.online import FCFS

COST = LinearCostModel(1.0, 0.1, 1.0, 0.01)


def run(workload: Workload, rule: object, clients: int = 2, cost: object = COST) -> FusedSchedule:
    schedule = run_loop(workload, cost, clients, FCFS(), None, CostClock(), False, rule)  # type: ignore[arg-type]
    assert isinstance(schedule, FusedSchedule)
    return schedule


def test_worked_by_hand_the_running_request_pays_for_the_new_prompt_s_width() -> None:
    """Prompts 3 and 5 join together: 2 rows of 5 positions, 1 + 0.1 * 10 = 2 s. A decode
    iteration of two: 1.02 s. The third prompt (2 tokens) joins beside the one request still
    decoding: 2 rows of 2, 1.4 s, in which that request decodes too; then it decodes alone."""
    schedule = run(Workload([3, 5, 2], [2, 4, 1]), PaddedRule())
    assert validate_fused(schedule) == []
    assert schedule.padded and schedule.whole_prompts and schedule.info["batching"] == "padded"
    assert schedule.run_first_time.tolist() == pytest.approx([2.0, 1.02, 1.4, 1.02])
    assert schedule.run_decoding.tolist() == [0, 2, 1, 2]
    assert schedule.chunk_run.tolist() == [0, 0, 2]


def test_the_validator_prices_a_padded_run_and_refuses_the_unpadded_price() -> None:
    schedule = run(Workload([3, 5, 2], [2, 4, 1]), PaddedRule())
    unpadded = dataclasses.replace(schedule, padded=False)
    rules = {v.rule for v in validate_fused(unpadded)}
    assert rules == {"stage_time"}
    cheap = schedule.run_first_time.copy()
    cheap[2] = 1.0 + 0.1 * 2 + 0.01  # the insertion priced as Orca prices it
    broken = dataclasses.replace(schedule, run_first_time=cheap)
    # (and the runs after it no longer start where it ends)
    assert {v.rule for v in validate_fused(broken)} == {"stage_time", "timeline"}


def test_a_cap_lets_prompts_join_first_come_first_served_over_iterations() -> None:
    """Under a 6-token cap the 5-token prompt joins first, alone; the 3 and the 2 join in the
    next iteration together; the first always joins, whatever its length."""
    schedule = run(Workload([5, 3, 2, 9], [3, 3, 3, 3]), PaddedRule(6), clients=4)
    assert validate_fused(schedule) == []
    runs = dict(zip(schedule.chunk_request.tolist(), schedule.chunk_run.tolist(), strict=True))
    assert runs[0] < runs[1] == runs[2] < runs[3]
    with pytest.raises(ValueError, match="chunked_prefill applies to vllm"):
        batching_rule("padded", chunked_prefill=True)
    assert isinstance(batching_rule("padded", 4096), PaddedRule)


def test_under_a_context_model_a_decoding_row_reads_its_cache_once() -> None:
    cost = ContextCostModel.from_linear(COST, prefill_per_square=1e-4, decode_per_context=1e-3)
    schedule = run(Workload([3, 5, 2], [2, 4, 1]), PaddedRule(), cost=cost)
    assert validate_fused(schedule) == []
    # The insertion: 2 rows of 2 positions, the decoding request holding 5 + 2 tokens.
    want = cost.prefill_time(4, 8) + 1e-3 * 7
    assert schedule.run_first_time[2] == pytest.approx(want)
    assert padded_iteration_time(cost, 2, 2, 7) == pytest.approx(want)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prompts=st.lists(st.integers(1, 60), min_size=1, max_size=12),
    outputs=st.lists(st.integers(1, 30), min_size=12, max_size=12),
    clients=st.integers(1, 4),
    seed=st.integers(0, 10),
)
def test_padding_never_beats_orca_and_costs_nothing_with_one_client(
    prompts: list[int], outputs: list[int], clients: int, seed: int
) -> None:
    """Offline (the same iterations under both rules, decided by counts, not times) padded
    insertion never ends before Orca's selective batching: each of its iterations is as dear
    or dearer under this cost. With one client, where no request decodes beside an insertion,
    the two are the same schedule, arrivals or not; every padded schedule validates."""
    offline = Workload(prompts, outputs[: len(prompts)])
    padded = run(offline, PaddedRule(), clients)
    assert validate_fused(padded) == []
    assert padded.makespan >= run(offline, OrcaRule(1 << 30), clients).makespan - 1e-9
    rng = np.random.default_rng(seed)
    arrival = np.sort(rng.uniform(0.0, 20.0, len(prompts)))
    online = Workload(prompts, outputs[: len(prompts)], arrival=arrival)
    padded = run(online, PaddedRule(), clients)
    assert validate_fused(padded) == []
    if clients == 1:
        orca = run(online, OrcaRule(1 << 30), clients)
        assert padded.makespan == pytest.approx(orca.makespan, rel=1e-12)
        assert np.array_equal(padded.chunk_run, orca.chunk_run)


def test_the_validators_hold_a_padded_schedule_to_its_flags() -> None:
    """A padded schedule marked as chunking prompts, or a padded engine's schedule not marked
    padded in a fleet, is refused; an executor without a padded method is refused before work."""
    from llmsched.fleet.engine import Engine
    from llmsched.fleet.simulate import simulate_fleet
    from llmsched.fleet.validate import validate_fleet

    schedule = run(Workload([3, 5, 2], [2, 4, 1]), PaddedRule())
    rules = [v.message for v in validate_fused(dataclasses.replace(schedule, whole_prompts=False))]
    assert any("must run whole prompts" in m for m in rules)
    fleet = simulate_fleet(Workload([3, 5, 2], [2, 4, 1]), [Engine(COST, 2, mode="padded")])
    assert validate_fleet(fleet) == []
    unmarked = dataclasses.replace(fleet, schedules=(dataclasses.replace(fleet.schedules[0], padded=False),))
    assert any("is not padded" in v.message for v in validate_fleet(unmarked))

    class NoPadding(CostClock):
        padded = None  # type: ignore[assignment]

    with pytest.raises(ValueError, match="has no padded method"):
        run_loop(Workload([3], [2]), COST, 2, FCFS(), None, NoPadding(), False, PaddedRule())  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prompts=st.lists(st.integers(1, 200), min_size=2, max_size=15),
    seed=st.integers(0, 1000),
    policy=st.sampled_from(["fcfs", "batch-wise", "shortest-first-oracle"]),
)
def test_padded_insertion_is_non_anticipative(prompts: list[int], seed: int, policy: str) -> None:
    """Requests arriving after a time T change nothing that ends before T."""
    from llmsched.online.simulate import simulate_batching

    rng = np.random.default_rng(seed)
    n = len(prompts)
    full = Workload(prompts, rng.integers(1, 40, n), arrival=rng.uniform(0.0, 5.0, n))
    cut = float(rng.uniform(0.0, 5.0))
    early = np.flatnonzero(full.arrival <= cut)
    if not early.size:
        return
    a = simulate_batching(full, COST, 3, "padded", policy, 1 << 20)
    b = simulate_batching(full.subset(early), COST, 3, "padded", policy, 1 << 20)
    k = int((a.run_end < cut).sum())
    assert k == int((b.run_end < cut).sum())
    for name in ("run_start", "run_iterations", "run_first_time", "run_decoding", "run_chunk_tokens"):
        np.testing.assert_array_equal(getattr(a, name)[:k], getattr(b, name)[:k])
