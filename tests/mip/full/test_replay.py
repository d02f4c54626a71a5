"""Plans and schedules: a schedule's plan, and a plan replayed in the simulator."""

from __future__ import annotations

import numpy as np
import pytest
from benchmarks.instances import tiny_instance

from llmsched import LinearCostModel, Workload, simulate, validate
from llmsched.core.cost import LevelCostModel
from llmsched.mip.full import Plan, plan_from_schedule, schedule_from_plan
from llmsched.online.warm_starts import heuristic_schedules


@pytest.mark.parametrize("seed", [2, 7])
def test_every_heuristic_schedule_replays_from_its_plan(seed: int) -> None:
    """A valid schedule's plan replays to the same stages and makespan, for every heuristic."""
    workload, cost, clients = tiny_instance(seed, max_requests=5)
    for name, schedule in heuristic_schedules(workload, cost, clients).items():
        plan, client = plan_from_schedule(schedule)
        assert plan.bins == np.count_nonzero(schedule.stage_kind == 0), name
        assert plan.tokens.sum(axis=1).tolist() == workload.output_tokens.tolist(), name
        again = schedule_from_plan(plan, workload, cost, clients)
        assert again.makespan == pytest.approx(schedule.makespan), name
        assert np.array_equal(again.request_prefill_stage, schedule.request_prefill_stage), name
        assert np.array_equal(client, schedule.request_client), name
        assert not client.flags.writeable, name


def test_empty_bins_merge_into_the_stage_before() -> None:
    """A bin that prefills nothing is no stage: its decode iterations go to the stage before,
    and the replay is valid and as long as the plan's time."""
    cost = LevelCostModel([(100, 0.01)], 0.1)
    workload = Workload(prompt_tokens=[10, 10], output_tokens=[4, 6])
    # Bin 0 prefills both and decodes 2 iterations, bin 1 is empty with 2 more, bin 2 the last 2.
    tokens = np.array([[2, 2, 0], [2, 2, 2]])
    plan = Plan.make([0, 0], tokens, [2, 2, 2], [0, -1, -1])
    schedule = schedule_from_plan(plan, workload, cost, 2)
    assert validate(schedule) == []
    assert np.count_nonzero(schedule.stage_kind == 0) == 1
    assert schedule.makespan == pytest.approx(0.01 + 6 * 0.1)


def test_idle_clients_cost_the_replay_nothing() -> None:
    """A plan replays on 10**12 clients as on 2: idle clients take no memory (a list of every
    client's index ran out of memory)."""
    cost = LevelCostModel([(100, 0.01)], 0.1)
    workload = Workload(prompt_tokens=[10, 10, 10], output_tokens=[4, 6, 2])
    plan = Plan.make([0, 0, 1], np.array([[4, 0], [4, 2], [0, 2]]), [4, 2], [0, 0])
    few, many = (schedule_from_plan(plan, workload, cost, clients) for clients in (2, 10**12))
    assert validate(many) == []
    assert np.array_equal(many.request_client, few.request_client)
    assert many.makespan == few.makespan


def test_a_plan_needs_the_mips_cost_model() -> None:
    """Prefill levels exist only under a LevelCostModel: a linear-cost schedule has no plan."""
    schedule = simulate(Workload(prompt_tokens=[10], output_tokens=[2]), LinearCostModel.paper(), 1)
    with pytest.raises(TypeError, match="LevelCostModel"):
        plan_from_schedule(schedule)
