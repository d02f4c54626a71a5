"""simulate(): the decision loop on the cost clock with policies given by name."""

from __future__ import annotations

import time

import numpy as np
import pytest

from llmsched import LinearCostModel, Workload, lower_bounds, simulate, validate, workloads
from llmsched.online import FCFS, iteration_policy_names, request_policy_names

SMALL_COST = LinearCostModel(1.0, 0.1, 0.5, 0.25, prefill_capacity=100)


def test_gsm8k_baseline_reproduces_its_figures() -> None:
    """The vLLM-like baseline on gsm8k(0) with the paper's costs ends at 200.42 s, within 5%
    of the paper's 201.00 s, and above both lower bounds."""
    wl = workloads.gsm8k(0)
    cost = LinearCostModel.paper()
    s = simulate(wl, cost, 200)
    assert validate(s) == []
    assert round(s.makespan, 2) == 200.42
    assert s.makespan == pytest.approx(201.00, rel=0.05)
    assert s.utilization == pytest.approx(0.802, abs=0.03)
    lb = lower_bounds(wl, cost, 200)
    assert lb.paper <= lb.strong <= s.makespan


def test_simulation_is_deterministic() -> None:
    """Two runs of the same instance give identical schedules."""
    wl = workloads.gsm8k(1)
    a = simulate(wl, LinearCostModel.paper(), 200)
    b = simulate(wl, LinearCostModel.paper(), 200)
    for runs in ("run_start", "run_iterations", "run_iteration_time"):
        assert np.array_equal(getattr(a, runs), getattr(b, runs))
    assert np.array_equal(a.request_client, b.request_client)


def test_names_and_objects_give_the_same_schedule() -> None:
    """A policy name runs exactly what the object it names runs."""
    wl = workloads.gsm8k_like(300, seed=2)
    by_name = simulate(wl, LinearCostModel.paper(), 40, "fcfs", "threshold")
    from llmsched.online import Threshold

    by_object = simulate(wl, LinearCostModel.paper(), 40, FCFS(), Threshold())
    assert np.array_equal(by_name.iteration_end, by_object.iteration_end)
    assert (
        by_name.info
        == by_object.info
        == {
            "request_policy": "fcfs",
            "iteration_policy": "threshold",
            "clairvoyant": False,
            "oracle_lengths": False,
        }
    )


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        ((Workload([5], [1]), SMALL_COST, 0), {}, ValueError, "clients must be at least 1"),
        ((Workload([500], [1]), SMALL_COST, 1), {}, ValueError, "more than the prefill capacity of 100"),
        ((Workload([5], [1]), "paper", 1), {}, TypeError, "cost must be a cost model"),
        ((Workload([5], [1]), SMALL_COST, 1), {"request_policy": "sjf"}, ValueError, "unknown request"),
        ((Workload([5], [1]), SMALL_COST, 1), {"iteration_policy": "nope"}, ValueError, "unknown iteration"),
        ((Workload([5], [1]), SMALL_COST, 1), {"iteration_policy": 3}, TypeError, "iteration_policy must be"),
        ((Workload([5], [1]), SMALL_COST, 1), {"request_policy": FCFS}, TypeError, "request_policy must be"),
    ],
)
def test_bad_input_is_rejected_before_work(args, kwargs, error, message) -> None:
    """Invalid instances and unknown policies raise a clear error naming the problem."""
    with pytest.raises(error, match=message):
        simulate(*args, **kwargs)


def test_every_registered_policy_ignores_idle_clients() -> None:
    """Three requests on ten million clients run fast and validate under every pair of
    registered policies: time and memory do not grow with idle clients."""
    wl = Workload([10, 20, 30], [5, 6, 7], predicted_output=[4, 6, 9])
    cost = LinearCostModel.paper()
    for request in request_policy_names():
        for iteration in iteration_policy_names():
            start = time.perf_counter()
            s = simulate(wl, cost, 10**7, request, iteration)
            seconds = time.perf_counter() - start
            assert validate(s) == [], (request, iteration)
            # Measured: at most 25 ms a pair; anything that walks the clients takes seconds.
            assert seconds < 2.0, (request, iteration, seconds)
            assert len(set(s.request_client.tolist())) == 3


def test_simulate_batching_runs_a_real_engine_with_its_memory() -> None:
    """vLLM with a measured machine's memory admits and preempts by blocks; the schedules of
    every named engine validate and speak of the workload's requests."""
    import llmsched
    from llmsched.engines.fusion.validate import validate_fused

    workload = Workload([200] * 30, [300] * 30, arrival=np.linspace(0, 1.0, 30))
    cost = LinearCostModel(0.02, 1e-4, 0.03, 2e-4, prefill_capacity=4000)
    memory = llmsched.KVMemory(120, block_size=16, watermark=0.01)
    schedule = llmsched.simulate_batching(workload, cost, 16, "vllm", memory=memory)
    assert validate(schedule) == [] and int(schedule.preemptions.sum()) > 0
    assert schedule.requests.output_tokens.tolist() == [300] * 30
    for name, chunked in (("vllm", True), ("sarathi", False), ("orca", False)):
        fused = llmsched.simulate_batching(workload, cost, 16, name, chunked_prefill=chunked, memory=memory)
        assert validate_fused(fused) == [] and fused.info["batching"] == name
    with pytest.raises(ValueError, match="unknown batching rule"):
        llmsched.simulate_batching(workload, cost, 16, "tgi")


def test_simulate_and_simulate_fusion_take_a_memory() -> None:
    """A memory too small for the batch: both engines preempt by recompute, their schedules
    validate, and every request finishes whole; without memory the schedule is the same as
    simulate without the argument."""
    from llmsched import simulate_fusion
    from llmsched.core.memory import KVMemory
    from llmsched.engines.fusion.validate import validate_fused

    cost = LinearCostModel.paper()
    workload = Workload([40] * 12, [60] * 12, arrival=np.linspace(0, 0.2, 12))
    memory = KVMemory(120, block_size=4)
    for schedule, check in (
        (simulate(workload, cost, 8, memory=memory), validate),
        (simulate_fusion(workload, cost, 8, token_budget=128, memory=memory), validate_fused),
    ):
        assert check(schedule) == [] and schedule.summary()["preemptions"] > 0
        assert schedule.requests.output_tokens.tolist() == [60] * 12
    plain = simulate(workload, cost, 8)
    assert (
        plain.request_parent is None and plain.makespan < simulate(workload, cost, 8, memory=memory).makespan
    )
    unlimited = simulate(workload, cost, 8, memory=None)
    np.testing.assert_array_equal(unlimited.stage_end, plain.stage_end)
    np.testing.assert_array_equal(unlimited.request_client, plain.request_client)
    # A cost model that prices the prompts' squares reads each continuation's prompt too.
    from llmsched import preset

    table = preset("llama2-70b/h100/tp8").cost()
    for schedule, check in (
        (simulate(workload, table, 8, memory=memory), validate),
        (simulate_fusion(workload, table, 8, token_budget=128, memory=memory), validate_fused),
    ):
        assert check(schedule) == [] and schedule.summary()["preemptions"] > 0
