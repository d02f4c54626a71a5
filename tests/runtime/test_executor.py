"""Policies and schedules on the torch engine."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from llmsched import Workload, simulate, validate  # noqa: E402
from llmsched.runtime import Engine, execute_schedule, run_policies  # noqa: E402
from tests.runtime.conftest import COST, WORKLOAD  # noqa: E402


@pytest.mark.parametrize(("rp", "ip"), [("fcfs", "prefill-first"), ("hybrid-oracle", "lagrangian")])
def test_executed_schedules_pass_the_validator(
    engine: Engine, prompts, alone: list[list[int]], rp: str, ip: str
) -> None:
    """A simulated schedule run on the engine, and the same policies driven live, give
    measured schedules that pass every rule but stage_time, with the same tokens."""
    predicted = simulate(WORKLOAD, COST, 3, rp, ip)
    run = execute_schedule(predicted, engine, prompts)
    assert run.measured.measured and validate(run.measured, skip=("stage_time",)) == []
    assert run.tokens == alone
    assert np.array_equal(run.measured.request_client, predicted.request_client)
    assert np.array_equal(run.measured.stage_iterations, predicted.stage_iterations)
    live = run_policies(WORKLOAD, engine, COST, 3, rp, ip, prompts)
    assert validate(live.measured, skip=("stage_time",)) == []
    assert live.tokens == alone and live.measured.makespan > 0


def test_live_policies_follow_the_simulator_and_arrivals(model, prompts) -> None:
    """Driven live, time-independent policies make the simulator's decisions (same stages,
    clients and iterations as the prediction returned beside the measurement); requests
    that arrive later are prefilled only after they arrive, and the schedule validates."""
    engine = Engine(model, 3, 128)
    run = run_policies(WORKLOAD, engine, COST, 3, "fcfs", "prefill-first", prompts)
    assert run.predicted is not None
    for field in ("stage_kind", "stage_iterations", "request_client", "request_prefill_stage"):
        assert np.array_equal(getattr(run.measured, field), getattr(run.predicted, field)), field
    late = Workload(
        WORKLOAD.prompt_tokens, WORKLOAD.output_tokens, arrival=[0, 0, 0.05, 0.05, 0.1, 0.1, 0.12, 0.3]
    )
    for execution in (
        run_policies(late, engine, COST, 3, "fcfs", "prefill-first", prompts),
        execute_schedule(simulate(late, COST, 3), engine, prompts),
    ):
        assert validate(execution.measured, skip=("stage_time",)) == []
        starts = execution.measured.stage_start[execution.measured.request_prefill_stage]
        assert np.all(starts >= late.arrival)


def test_bad_arguments_are_refused(engine: Engine, prompts) -> None:
    """A non-schedule, more clients than slots and wrong prompts are refused before work."""
    with pytest.raises(TypeError, match=r"schedule must be a llmsched\.Schedule"):
        execute_schedule("schedule", engine, prompts)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="uses 4 clients; the engine has 3 slots"):
        execute_schedule(simulate(WORKLOAD, COST, 4), engine, prompts)
    with pytest.raises(ValueError, match=r"clients must be an integer in 1..3"):
        run_policies(WORKLOAD, engine, COST, 4, prompts=prompts)
    with pytest.raises(ValueError, match="7 prompts for 8 requests"):
        run_policies(WORKLOAD, engine, COST, 3, prompts=prompts[:7])
