"""The measurement protocol of ``llmsched runtime validate --rule``: every rule on a paged
engine, judged where the machine held steady, with the preemption scenario."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from llmsched import LinearCostModel, simulate, simulate_batching  # noqa: E402
from llmsched.cli import main  # noqa: E402
from llmsched.engines.disaggregation.cluster import DisaggregatedCluster  # noqa: E402
from llmsched.fleet.disaggregated import simulate_disaggregated  # noqa: E402
from llmsched.runtime.protocol import STEADY, executed_errors, reading, validate_rules  # noqa: E402
from tests.runtime.conftest import COST, WORKLOAD  # noqa: E402


@pytest.fixture(scope="module")
def report() -> dict:
    return validate_rules("tiny", rules=("competition", "orca", "disaggregated"), runs=2)


def test_every_rule_runs_exact_and_valid_with_its_drift_beside_each_run(report) -> None:
    """Each rule's runs give every request its tokens alone and valid schedules (the memory
    rule included: the engine is paged); each run carries the references taken inside it (off
    its clock), its speed against the fitted one, and is steady exactly when that drift is
    under the stated bound; its corrected error is its raw error with the prediction scaled by
    the run's own speed."""
    assert report["runs"] == 2 and report["steady_within"] == STEADY == 0.02
    machine = report["machine"]
    assert machine["probe_samples_during_profile"] > 20 and machine["probe_spread_during_profile"] >= 0
    for rule, row in report["rules"].items():
        assert row["tokens_exact"] and row["valid"], (rule, row["violations"])
        assert len(row["runs"]) == 2
        for run in row["runs"]:
            assert run["probes"] >= 1  # tiny runs are short: a reference every 10 steps
            assert run["drift"] == pytest.approx(abs(run["speed"] - 1))
            assert len(run["reference_s"]) == run["probes"]
            assert run["speed"] == pytest.approx(reading(run["reference_s"]) / machine["fitted_speed_s"])
            assert run["steady"] == (run["drift"] < STEADY)
            for m in ("context", "linear"):
                predicted = run["predicted_makespan_s"][m]
                assert run["error"][m] == pytest.approx(run["measured_makespan_s"] / predicted - 1)
                assert run["corrected_error"][m] == pytest.approx(
                    run["measured_makespan_s"] / (predicted * run["speed"]) - 1
                )
        steady = [r for r in row["runs"] if r["steady"]]
        assert row["steady_runs"] == len(steady)
        for m in ("context", "linear"):
            verdict = row["within_5pct_when_steady"][m]
            assert verdict == (all(abs(r["error"][m]) <= 0.05 for r in steady) if steady else None)
        assert row["preemptions"] == {"measured": 0, "predicted": 0}
        for figure in ("ttft_p50_s", "tbt_p90_s"):
            assert row["latency"]["measured"][figure] > 0 and row["latency"]["context"][figure] > 0
    # The competition and orca engines hold what their memory model says; the token engine's
    # peak is its own (the cluster runs without token memory).
    for rule in ("competition", "orca"):
        peak = report["rules"][rule]["peak_blocks"]
        assert peak["measured"] == peak["predicted"] > 0
    copy = report["rules"]["disaggregated"]["copy"]
    assert copy["measured_s"] > 0 and copy["predicted_s"] > 0
    assert report["link"]["bandwidth_gbs"] > 0 and len(report["link"]["rows"]) >= 3
    json.dumps(report)  # every figure is plain JSON


def test_the_reading_sees_a_slow_spell_but_not_one_stalled_reference() -> None:
    """A run's time is a sum, so a slow spell over a fifth of its references moves the reading
    (a median would not); one stalled reference among many does not; too few to trim are
    averaged whole; none is an error."""
    calm = [1.0] * 80
    assert reading(calm) == pytest.approx(1.0)
    spell = [1.0] * 80 + [1.5] * 20
    assert float(np.median(spell)) == 1.0 and reading(spell) > 1.05
    assert reading([1.0] * 99 + [50.0]) == pytest.approx(1.0)
    assert reading([1.0, 2.0, 3.0]) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="at least one"):
        reading([])


def test_the_preemption_scenario_preempts_as_predicted(report) -> None:
    """On a pool of about half the blocks the batch needs, vllm preempts by recompute on the
    engine as often as the simulator predicted, and every request still ends with its tokens."""
    scene = report["preemption"]
    assert scene["blocks"] < scene["blocks_needed_at_once"]
    assert scene["tokens_exact"] and scene["valid"]
    assert scene["preemptions"] == scene["predicted_preemptions"]["context"] > 0
    assert scene["recomputed_tokens"] > 0 and scene["peak_blocks"] <= scene["blocks"]


def test_a_schedule_s_own_model_prices_it_exactly() -> None:
    """executed_errors of a simulated schedule under the model that made it is 0 in every mode
    (competition, fused, disaggregated): the error it reports for a measured one is the model's."""
    cluster = DisaggregatedCluster(1, 1, COST, COST, 3, 64.0, 1.0, layers=2, overlap=False)
    for schedule in (
        simulate(WORKLOAD, COST, 3),
        simulate_batching(WORKLOAD, COST, 3, "sarathi", max_num_batched_tokens=16),
        simulate_batching(WORKLOAD, COST, 3, "orca", max_num_batched_tokens=24),
        simulate_disaggregated(WORKLOAD, cluster),
    ):
        errors = executed_errors(schedule, COST)
        assert errors["mape"] == pytest.approx(0.0, abs=1e-12), type(schedule).__name__
        assert errors["decode_mape"] == pytest.approx(0.0, abs=1e-12)
    twice = LinearCostModel(0.004, 4e-5, 0.003, 2e-4, 64)  # every time doubled
    assert executed_errors(simulate(WORKLOAD, COST, 3), twice)["mape"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="padded"):
        executed_errors(simulate_batching(WORKLOAD, COST, 3, "padded", max_num_batched_tokens=64), COST)
    with pytest.raises(TypeError, match="measured schedule"):
        executed_errors("schedule", COST)
    decoding_only = executed_errors(simulate(WORKLOAD, COST, 3), COST)
    assert not np.isnan(decoding_only["prefill_mape"]) and not np.isnan(decoding_only["decode_mape"])


def test_bad_rules_are_refused_before_any_work() -> None:
    with pytest.raises(ValueError, match="rules must be names from"):
        validate_rules("tiny", rules=("fastest",))
    with pytest.raises(ValueError, match="runs"):
        validate_rules("tiny", runs=0)
    with pytest.raises(ValueError, match="unknown model"):
        validate_rules("huge")


def test_the_command_runs_a_rule(capsys) -> None:
    """``llmsched runtime validate --rule vllm`` prints each run with its drift and ends 0."""
    argv = [
        "runtime",
        "validate",
        "--model",
        "tiny",
        "--rule",
        "vllm",
        "--executions",
        "1",
        "--no-preemption",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "vllm: tokens exact, valid" in out and "drift" in out and "preemption (" not in out
    assert main(["runtime", "validate", "--rule", "fastest"]) == 2


def test_a_reading_of_a_stalled_clock_is_refused() -> None:
    with pytest.raises(ValueError, match="finite"):
        reading([0.01, float("nan"), 0.01])
