"""Hypothesis strategies shared by the tests: cost models and instances of the system model."""

from __future__ import annotations

from hypothesis import strategies as st

from llmsched import ContextCostModel, LevelCostModel, LinearCostModel, Schedule, Workload

__all__ = ["cost_models", "instances", "predicted_instances"]


CostModels = LinearCostModel | LevelCostModel | ContextCostModel


@st.composite
def cost_models(draw: st.DrawFn) -> CostModels:
    """A linear, a level (the MIP's) or a context-aware cost model, each as likely; a
    context-aware model has a batch table (any times, shorter or longer than the batch,
    not always increasing) half of the time."""
    capacity = draw(st.integers(1, 300))
    kind = draw(st.sampled_from(["linear", "levels", "context"]))
    if kind == "context":
        table = draw(st.one_of(st.none(), st.lists(st.floats(1e-4, 0.08), min_size=1, max_size=12)))
        return ContextCostModel(
            prefill_base=max(draw(st.floats(0, 0.1)), 1e-4),
            prefill_per_token=draw(st.floats(0, 1e-3)),
            prefill_per_square=draw(st.one_of(st.just(0.0), st.floats(0, 1e-5))),
            decode_base=max(draw(st.floats(0, 0.05)), 1e-4),
            decode_per_client=draw(st.floats(0, 1e-3)),
            decode_per_context=draw(st.one_of(st.just(0.0), st.floats(0, 1e-4))),
            prefill_capacity=capacity,
            decode_by_batch=None if table is None else tuple(table),
        )
    if kind == "linear":
        return LinearCostModel(
            prefill_base=max(draw(st.floats(0, 0.1)), 1e-4),
            prefill_per_token=draw(st.floats(0, 1e-3)),
            decode_base=max(draw(st.floats(0, 0.05)), 1e-4),
            decode_per_client=draw(st.floats(0, 1e-3)),
            prefill_capacity=capacity,
        )
    caps = sorted(draw(st.sets(st.integers(1, capacity), min_size=1, max_size=4)) | {capacity})
    times = sorted(draw(st.lists(st.floats(0.01, 1.0), min_size=len(caps), max_size=len(caps))))
    return LevelCostModel(list(zip(caps, times, strict=True)), draw(st.floats(0.001, 0.1)))


@st.composite
def instances(draw: st.DrawFn) -> tuple[Workload, CostModels, int]:
    cost = draw(cost_models())
    cap = cost.prefill_capacity
    n = draw(st.integers(1, 30))
    # Prompts anywhere in [1, capacity], with a fair chance of exactly the capacity.
    prompt = draw(st.lists(st.one_of(st.integers(1, cap), st.just(cap)), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(1, 60), min_size=n, max_size=n))
    arrivals = draw(
        st.one_of(
            st.just([0.0] * n),
            st.lists(st.floats(0, 5, allow_nan=False), min_size=n, max_size=n),
            st.lists(st.sampled_from([0.0, 0.5, 0.5, 3.0]), min_size=n, max_size=n),
        )
    )
    clients = draw(st.one_of(st.just(1), st.integers(1, n + 5)))
    return Workload(prompt, output, arrival=arrivals), cost, clients


@st.composite
def predicted_instances(draw: st.DrawFn) -> tuple[Workload, CostModels, int]:
    """An instance of :func:`instances` whose workload carries predicted outputs, near the
    true ones or not (what policies planning with predictions need)."""
    workload, cost, clients = draw(instances())
    n = len(workload)
    predicted = draw(st.lists(st.integers(1, 80), min_size=n, max_size=n))
    return workload.replace(predicted_output=predicted), cost, clients


def per_iteration_twin(schedule: Schedule) -> Schedule:
    """``schedule`` as a measured producer gives it: one decode run per iteration."""
    return Schedule.from_iteration_end(
        schedule.workload,
        schedule.cost,
        schedule.clients,
        schedule.stage_kind,
        schedule.stage_start,
        schedule.stage_end,
        schedule.stage_first_iteration,
        schedule.stage_iterations,
        schedule.iteration_end,
        schedule.request_client,
        schedule.request_prefill_stage,
        schedule.request_decode_start,
        schedule.request_decode_end,
        schedule.makespan,
        measured=True,
    )
