"""The published experiments: argument checks before any work, and the README's figures
exactly as the command computes them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llmsched import LinearCostModel, Workload
from llmsched.experiments.reproduce import reproduce_gsm8k


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"clients": 0}, ValueError, "clients must be at least 1"),
        ({"seed": -1}, ValueError, "seed"),
        ({"plot_dir": 3}, TypeError, "plot_dir must be a file path"),
        ({"predictor": "oracle"}, ValueError, "predictor"),
        ({"predictor": "psychic"}, ValueError, "psychic"),
        ({"progress": "yes"}, TypeError, "progress must be True or False"),
    ],
)
def test_bad_arguments_are_refused_before_the_experiment_runs(kwargs, error, message) -> None:
    """Each bad argument is named at once (the experiment itself takes seconds)."""
    with pytest.raises(error, match=message):
        reproduce_gsm8k(**kwargs)


def test_a_plot_folder_that_cannot_be_made_is_refused_up_front(tmp_path) -> None:
    """A plot folder under a file fails before the experiment, naming plot_dir."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ValueError, match=r"plot_dir .* cannot be made a folder"):
        reproduce_gsm8k(plot_dir=blocker / "charts")


README = Path(__file__).resolve().parents[2] / "README.md"


def _readme_gsm8k_rows() -> list[dict[str, str]]:
    """The rows of the README's GSM8K tables: method, lengths and the printed figures."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## The GSM8K experiment", 1)[1].split("\n## ", 1)[0]
    rows = []
    for table in section.split("\n\n"):
        lines = [line for line in table.splitlines() if line.startswith("|")]
        if not lines or not lines[0].startswith(("| strategy |", "| more rows |")):
            continue
        header = [cell.strip() for cell in lines[0].strip("|").split("|")]
        for line in lines[2:]:
            cells = [cell.strip().strip("*") for cell in line.strip("|").split("|")]
            row = dict(zip(header, cells, strict=True))
            row["method"] = cells[0].split(":")[0]
            rows.append(row)
    return rows


def _close(printed: str, value: float, scale: float = 1.0) -> bool:
    """Whether ``value`` rounds to the figure the README prints (to its last digit)."""
    number = printed.rstrip("s%").strip().lstrip("+")
    decimals = len(number.split(".")[1]) if "." in number else 0
    return abs(float(number) - value * scale) <= 0.5 * 10.0**-decimals + 1e-9


@pytest.fixture(scope="module")
def gsm8k_report() -> dict:
    return reproduce_gsm8k()


def test_the_readme_prints_what_reproduce_gsm8k_computes(gsm8k_report) -> None:
    """Every row of the README's GSM8K tables (oracle and mico) is the command's output to the
    printed digit: makespan, utilization, tokens/s and gap to the bound."""
    rows = {(r["method"], r["predictor"]): r for r in gsm8k_report["rows"]}
    printed = _readme_gsm8k_rows()
    assert len(printed) >= 12
    covered = set()
    for row in printed:
        predictor = "oracle" if row["lengths"] == "–" else row["lengths"]
        ours = rows[row["method"], predictor]
        covered.add((row["method"], predictor))
        assert _close(row["makespan"], ours["makespan_s"]), (row, ours["makespan_s"])
        assert _close(row["utilization"], ours["utilization"], 100), (row, ours["utilization"])
        assert _close(row["tokens/s"], ours["tokens_per_s"]), (row, ours["tokens_per_s"])
        assert _close(row["gap"], ours["gap_to_lb"], 100), (row, ours["gap_to_lb"])
    for method in ("baseline", "offline", "online", "hybrid"):
        assert {(method, "oracle"), (method, "mico")} & covered
    assert f"strong lower bound, {gsm8k_report['lower_bound_s']:.2f} s" in README.read_text(encoding="utf-8")


def test_the_decode_packing_behind_the_bound_is_proven(gsm8k_report) -> None:
    """t_d comes from a proven P||Cmax optimum, never from an unproven incumbent; the report
    holds no seconds of work unless asked (it is the same on any machine)."""
    packing = gsm8k_report["decode_packing"]
    assert packing["proven_optimal"] and packing["status"] == "optimal"
    assert packing["lower_bound_tokens"] == packing["makespan_tokens"] == 2277
    assert "timings" not in gsm8k_report and "runtime_s" not in packing


def test_the_context_model_without_context_reproduces_the_paper_to_the_millisecond(gsm8k_report) -> None:
    """ContextCostModel with c_p = c_d = 0 goes through the context-aware code paths (squares
    and context passed, runs as arithmetic series) and gives every row of the paper's run."""
    from llmsched import ContextCostModel, LinearCostModel

    zero = ContextCostModel.from_linear(LinearCostModel.paper())
    report = reproduce_gsm8k(cost=zero)
    assert len(report["rows"]) == len(gsm8k_report["rows"])
    for mine, paper in zip(report["rows"], gsm8k_report["rows"], strict=True):
        assert (mine["method"], mine["predictor"]) == (paper["method"], paper["predictor"])
        assert abs(mine["makespan_s"] - paper["makespan_s"]) < 5e-4
        assert abs(mine["utilization"] - paper["utilization"]) < 1e-9
    assert abs(report["lower_bound_s"] - gsm8k_report["lower_bound_s"]) < 5e-4


def test_a_context_aware_model_moves_every_row_and_keeps_the_bound_below() -> None:
    """With context priced, every schedule is slower than under the linear model and still
    no faster than the strong bound, which grows by the exact context sums."""
    from llmsched import ContextCostModel, LinearCostModel

    context = ContextCostModel.from_linear(LinearCostModel.paper(), 1e-8, 2e-7)
    report = reproduce_gsm8k(cost=context)
    assert all(row["gap_to_lb"] >= 0 for row in report["rows"])
    hybrid = next(r for r in report["rows"] if r["method"] == "hybrid" and r["predictor"] == "oracle")
    assert 0 <= hybrid["gap_to_lb"] < 0.03


def test_mico_table1_ratios_lie_between_1_3_and_3() -> None:
    """Every setting of Mico's Table 1 (2, 3, 6, 9 engines; batches 2-10; 800 queries): Mico's
    scheme over the baseline, beside the paper's ratio, every fleet valid."""
    from llmsched.experiments.reproduce import PAPER_MICO_TABLE1, reproduce_mico

    report = reproduce_mico(seeds=2)
    assert report["invalid"] == 0
    rows = report["rows"]
    assert len(rows) == 36
    for row in rows:
        assert 1.3 <= row["ratio"] <= 3.0, row
        assert row["paper_ratio"] == PAPER_MICO_TABLE1[row["engines"]][row["batch"] - 2]
        # Insertion alone gains, and Mico's scheme is at least as good as insertion alone.
        assert row["i_ratio"] > 1.2
        assert row["ratio"] >= 0.97 * row["i_ratio"]
    # Larger batches waste more on batch-wise inference: the ratio grows from batch 2 to 10.
    by = {(r["engines"], r["batch"]): r["ratio"] for r in rows}
    assert all(by[m, 10] > by[m, 2] + 0.4 for m in (2, 3, 6, 9))


def test_mico_outside_table1_and_bad_input() -> None:
    from llmsched.experiments.reproduce import format_mico, reproduce_mico

    report = reproduce_mico(engines=4, batches=[3], queries=[200], seeds=1, seed=5)
    (row,) = report["rows"]
    assert row["paper_ratio"] is None and row["queries"] == 200 and report["seeds"] == [5]
    text = format_mico(report)
    assert "paper_ratio" in text and " - " in text.splitlines()[-1] and "None" not in text
    with pytest.raises(ValueError, match="engines"):
        reproduce_mico(engines=[])
    with pytest.raises(ValueError, match="batches"):
        reproduce_mico(batches=[0])


def test_mico_gains_nothing_when_every_output_is_the_same_length() -> None:
    """With equal outputs a batch's requests end together and counting queries balances tokens:
    Mico's scheme and both ablations equal the baseline; spread outputs gain."""
    from llmsched.experiments.reproduce import format_mico_sensitivity, mico_sensitivity

    study = mico_sensitivity(("constant", "lognormal"), engines=(2,), batches=(4,), seeds=1)
    assert study["invalid"] == 0
    constant, spread = study["rows"]
    assert constant["outputs"] == "constant" and constant["output_sd"] == 0
    for key in ("ratio_mean", "q_ratio_mean", "i_ratio_mean"):
        assert constant[key] == pytest.approx(1.0, abs=1e-9)
    assert spread["ratio_mean"] > 1.3 and spread["paper_mean"] == pytest.approx(1.98)
    assert "constant" in format_mico_sensitivity(study)
    with pytest.raises(ValueError, match="outputs must be among"):
        mico_sensitivity(("uniform",))
    with pytest.raises(ValueError, match="empirical"):
        mico_sensitivity(("empirical",))


def test_kv_cache_series_pads_insertions_and_keeps_a_batch_s_finished_rows() -> None:
    """Worked by hand. Batch-wise: one prefill of prompts 3 and 5 (length 5), then four decode
    iterations with both rows kept (6-9; tokens 10, 12, 14, 16). Insertion: a third request
    (prompt 2) replaces the first when it ends after two tokens; its prefill pads the running
    row by 2 (7 -> 9) and writes no token of it, then the rows grow to 10, and 11 alone
    (tokens 5 + 2 + 2, then 8 + 3, then 9)."""
    from llmsched.experiments.reproduce import kv_cache_series
    from llmsched.fleet.engine import Engine
    from llmsched.fleet.simulate import simulate_fleet

    cost = LinearCostModel(1.0, 0.0, 1.0, 0.0)
    pair = Workload([3, 5], [2, 4], name="pair")
    batch = simulate_fleet(pair, [Engine(cost, 2, request_policy="batch-wise")], "round-robin")
    series = kv_cache_series(batch, retain_finished=True)
    assert list(series["kind"]) == ["prefill"] + ["decode"] * 4
    assert list(series["length"]) == [5, 6, 7, 8, 9]
    assert list(series["tokens"]) == [8, 10, 12, 14, 16]
    three = Workload([3, 5, 2], [2, 4, 1], name="three")
    inserted = simulate_fleet(three, [Engine(cost, 2, request_policy="fcfs")], "round-robin")
    series = kv_cache_series(inserted)
    assert list(series["kind"]) == ["prefill", "decode", "decode", "prefill", "decode", "decode"]
    assert list(series["length"]) == [5, 6, 7, 9, 10, 11]
    assert list(series["tokens"]) == [8, 10, 12, 9, 11, 9]
    assert np.all(np.diff(series["start"]) > 0)


def test_mico_s_kv_cache_experiment_runs_valid_fleets_and_reports_both_measures() -> None:
    from llmsched.experiments.reproduce import PAPER_MICO_KV, reproduce_mico_kv

    report = reproduce_mico_kv(queries=60, seeds=1)
    assert report["invalid"] == 0 and report["paper"]["system"] == PAPER_MICO_KV["system"]
    assert len(report["saved_engines"]) == 3 and report["throughput"] > 1.0
    # Insertion finishes the same tokens sooner: the real tokens held shrink.
    assert report["saved_tokens"] > 0
    with pytest.raises(ValueError, match="batch"):
        reproduce_mico_kv(batch=0)


def test_mico_with_its_insertion_as_written_runs_padded_engines() -> None:
    """Mico's insertion as written (padded, every running query writing its token in the
    insertion's iteration) is never slower than a prefill stage that pauses decoding under
    Mico's flat iteration cost; the baseline does not insert, so its throughput is the same."""
    from llmsched.experiments.reproduce import reproduce_mico

    stage = reproduce_mico(engines=3, batches=(4,), queries=(200,), seeds=1)
    padded = reproduce_mico(engines=3, batches=(4,), queries=(200,), seeds=1, insertion="padded")
    assert padded["invalid"] == 0 and padded["insertion"] == "padded"
    assert padded["rows"][0]["baseline_qps"] == pytest.approx(stage["rows"][0]["baseline_qps"])
    assert padded["rows"][0]["mico_qps"] >= stage["rows"][0]["mico_qps"] * (1 - 1e-9)
    with pytest.raises(ValueError, match="insertion must be 'stage' or 'padded'"):
        reproduce_mico(engines=2, batches=(2,), queries=(10,), seeds=1, insertion="pad")
