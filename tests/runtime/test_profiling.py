"""The profiler, the cost fit, and measured rows of a schedule for fitting."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from llmsched import LinearCostModel, Workload, simulate  # noqa: E402
from llmsched.runtime import Engine, fit_cost, profile, stage_errors  # noqa: E402
from llmsched.runtime.profiling import schedule_stage_times  # noqa: E402
from tests.strategies import per_iteration_twin  # noqa: E402

SMALL_COST = LinearCostModel(1.0, 0.1, 0.5, 0.25, prefill_capacity=100)


def test_profile_fit_and_errors(engine: Engine) -> None:
    """The profiler returns one row per measurement; the fit is a valid linear model; the
    error of an exact model on synthetic rows is zero and of a doubled one is 100%."""
    rows = profile(engine, [8, 24, 40], [1, 2, 3], prompt_len=16, context=20, repeats=2)
    assert len(rows) == 12 and set(rows.kind) == {"prefill", "decode"} and (rows.seconds > 0).all()
    cost = fit_cost(rows, 48)
    assert cost.prefill_capacity == 48 and stage_errors(cost, rows)["mape"] >= 0
    exact = LinearCostModel(0.01, 1e-3, 0.02, 1e-3, 100)
    synthetic = rows.copy()
    synthetic["seconds"] = np.where(
        synthetic.kind == "prefill",
        exact.prefill_time(synthetic["size"].to_numpy(float)),
        exact.decode_iteration_time(synthetic["size"].to_numpy(float)),
    )
    assert stage_errors(exact, synthetic)["mape"] == pytest.approx(0.0, abs=1e-12)
    doubled = LinearCostModel(0.02, 2e-3, 0.04, 2e-3, 100)
    assert stage_errors(doubled, synthetic)["mape"] == pytest.approx(1.0)
    refit = fit_cost(synthetic, 100)
    assert refit.prefill_per_token == pytest.approx(1e-3) and refit.decode_base == pytest.approx(0.02)


def test_stage_times_have_one_decode_row_per_run_and_per_iteration_when_measured() -> None:
    """A simulated schedule gives a decode row per run; its per-iteration twin, one per iteration,
    with the same active counts and times once the runs are spread over their iterations."""
    schedule = simulate(Workload([10, 20, 30], [2, 1, 3]), SMALL_COST, 2)
    rows = schedule_stage_times(schedule)
    assert rows["kind"].tolist() == ["prefill", "prefill", "decode", "decode", "decode"]
    assert rows["size"].tolist() == [30, 30, 2, 2, 1]
    assert rows["seconds"].tolist() == [4.0, 4.0, 1.0, 1.0, 0.75]
    measured = schedule_stage_times(per_iteration_twin(schedule))
    decode = measured[measured["kind"] == "decode"]
    assert decode["size"].tolist() == [2, 2, 1, 1]
    np.testing.assert_allclose(decode["seconds"], [1.0, 1.0, 0.75, 0.75])
    spread = np.repeat(rows["size"].to_numpy()[2:], schedule.run_iterations)
    assert spread.tolist() == decode["size"].tolist()
