"""An RRA configuration as event-simulator policies, and the cross-check of XSimulator against them."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched import ContextCostModel, LevelCostModel, LinearCostModel, simulate, validate, workloads
from llmsched.core.schedule import DECODE, PREFILL
from llmsched.exegpt import LayerCostModel, crosscheck, rra_policies


def test_rra_policies_run_in_the_event_simulator() -> None:
    """Prefill stages hold at most B_E requests, decode stages between prefills run at most
    N_D iterations while requests wait, and the schedule validates."""
    workload = workloads.exegpt_task("S", 400, seed=3)
    cost = LinearCostModel(0.025, 0.13e-3, 0.029, 0.21e-3, prefill_capacity=12 * 512)
    request_policy, iteration_policy = rra_policies(12, 5)
    schedule = simulate(workload, cost, 200, request_policy=request_policy, iteration_policy=iteration_policy)
    assert validate(schedule) == []
    prefills = np.flatnonzero(schedule.stage_kind == PREFILL)
    sizes = np.bincount(schedule.request_prefill_stage, minlength=schedule.num_stages)[prefills]
    assert sizes.max() == 12 and sizes[:-1].min() == 12  # all full but the last
    decodes = schedule.stage_iterations[schedule.stage_kind == DECODE]
    assert decodes[: len(prefills) - 1].max() <= 5


def test_xsimulator_agrees_with_the_event_simulator() -> None:
    """RRA throughput from the distributions is within 10% of the event simulator's."""
    frame = crosscheck([(16, 8), (49, 7), (4, 64)], task="S", requests=1500, seeds=(0,))
    assert (frame.error_pct.abs() <= 10).all(), frame
    assert (abs(frame.xsim_decode_batch / frame.event_decode_batch - 1) <= 0.05).all(), frame


@pytest.mark.parametrize(
    "cost",
    [
        ContextCostModel.from_linear(LinearCostModel.paper(), 0.0, 2e-7),
        LayerCostModel.from_specs("opt-13b", "a40").engine_cost(40, tp=4),
    ],
    ids=["paper+context", "opt-13b-tp4"],
)
def test_xsimulator_agrees_with_the_event_simulator_on_context(cost: ContextCostModel) -> None:
    """With a context-aware model (decode reads p + j tokens per request in both simulators)
    the RRA throughputs agree within the linear cross-check's 10% and the decode batches
    within 5%; the context term makes every configuration slower than without it."""
    configs = [(16, 8), (49, 7), (4, 64)]
    frame = crosscheck(configs, task="S", cost=cost, requests=1500, seeds=(0,))
    assert (frame.error_pct.abs() <= 10).all(), frame
    assert (abs(frame.xsim_decode_batch / frame.event_decode_batch - 1) <= 0.05).all(), frame
    plain = crosscheck(configs, task="S", cost=cost.linear(), requests=1500, seeds=(0,))
    assert (frame.event_throughput < plain.event_throughput).all()
    assert (frame.xsim_throughput < plain.xsim_throughput).all()


def test_crosscheck_of_a_context_model_without_context_is_the_linear_one() -> None:
    """A ContextCostModel with no context terms gives the linear model's figures exactly."""
    linear = LinearCostModel.paper()
    args = {"configs": [(16, 8), (4, 64)], "task": "S", "requests": 400, "seeds": (1,)}
    assert crosscheck(cost=ContextCostModel.from_linear(linear), **args).equals(
        crosscheck(cost=linear, **args)
    )


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"cost": LevelCostModel([(100, 0.1)], 0.01)},
            TypeError,
            "cost must be a LinearCostModel or a ContextCostModel, got LevelCostModel",
        ),
        (
            {"cost": LayerCostModel(1e-4, 2e-6, 3e-4, 5e-6, 1e-8)},
            TypeError,
            "cost must be a LinearCostModel or a ContextCostModel, got LayerCostModel",
        ),
        (
            {"cost": ContextCostModel.from_linear(LinearCostModel.paper(), 1e-8, 2e-7)},
            ValueError,
            "the layer model's encoding is linear in tokens",
        ),
        ({"task": "X"}, ValueError, r"unknown ExeGPT task 'X'; choose one of \['C1'"),
        ({"seeds": ()}, ValueError, "crosscheck needs at least one seed"),
        ({"requests": 49}, ValueError, "requests must be at least 50 .* got 49"),
    ],
)
def test_crosscheck_refuses_bad_arguments_up_front(kwargs, error, message) -> None:
    """A cost model XSimulator cannot read (a level or layer model, a context model pricing
    prompts by their squares), an unknown task, no seed or too few requests to measure a
    steady throughput is refused, naming the argument, before any simulation."""
    with pytest.raises(error, match=message):
        crosscheck([(4, 8)], **kwargs)
