"""The llmsched command."""

from __future__ import annotations

import json

import pytest

from llmsched.cli import main, parse_cost, parse_workload


def test_simulate_json(capsys) -> None:
    """llmsched simulate --json prints one object with the schedule's figures and its validity."""
    assert main(["simulate", "--workload", "exegpt:S", "--requests", "300", "--clients", "32", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] is True and out["violations"] == []
    assert out["requests"] == 300 and out["clients"] == 32
    assert out["makespan_s"] >= out["lower_bound_s"] > 0


def test_simulate_text_and_plot(capsys, tmp_path) -> None:
    """The text report names the figures and --plot writes a PNG."""
    png = tmp_path / "gantt.png"
    assert main(["simulate", "--clients", "200", "--request-policy", "static", "--plot", str(png)]) == 0
    text = capsys.readouterr().out
    assert "makespan" in text and "utilization" in text and "valid         True" in text
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_reproduce_gsm8k_json(capsys, tmp_path) -> None:
    """reproduce gsm8k --json: every strategy with oracle and predicted lengths; --plot writes charts."""
    assert main(["reproduce", "gsm8k", "--json", "--plot", str(tmp_path)]) == 0
    report = json.loads(capsys.readouterr().out)
    rows = {(row["method"], row["predictor"]): row for row in report["rows"]}
    strategies = ("baseline", "offline", "online", "hybrid")
    assert {(m, p) for m in strategies for p in ("oracle", "mico")} <= set(rows)
    assert all(row["valid"] for row in report["rows"])
    base = rows["baseline", "oracle"]
    assert {"method", "predictor", "makespan_s", "utilization", "tokens_per_s", "gap_to_lb"} <= set(base)
    assert base["makespan_s"] == pytest.approx(201.0, rel=0.05)
    assert base["gap_to_lb"] == pytest.approx(base["makespan_s"] / report["lower_bound_s"] - 1)
    # With true and with predicted lengths, the baseline is the slowest and the hybrid the
    # fastest strategy; with the true lengths the hybrid ends within 3% of the strong bound.
    for predictor in ("oracle", "mico"):
        span = {m: rows[m, predictor]["makespan_s"] for m in strategies}
        assert max(span, key=span.get) == "baseline" and min(span, key=span.get) == "hybrid"
    assert rows["hybrid", "oracle"]["gap_to_lb"] < 0.03
    assert report["paper"]["lower_bound_s"] == 180.0
    assert {"mico", "bucket", "mean"} <= set(report["prediction_accuracy"])
    assert (tmp_path / "gsm8k_baseline_oracle.png").is_file() and (
        tmp_path / "gsm8k_hybrid_mico.png"
    ).is_file()


def test_study_json_and_plot(capsys, tmp_path) -> None:
    """llmsched study --json: one row per case and strategy, the summary, and the figure."""
    argv = ["study", "--cases", "2", "--requests", "120", "--clients", "8", "--jobs", "1"]
    assert main([*argv, "--no-progress", "--json", "--plot", str(tmp_path / "s.png")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["cases"] == 2 and len(report["rows"]) == 8
    assert {row["method"] for row in report["rows"]} == {"baseline", "offline", "online", "hybrid"}
    assert (tmp_path / "s.png").is_file()
    assert main(["study", "--cases", "0"]) == 2
    assert "cases" in capsys.readouterr().err


def test_reproduce_text(capsys) -> None:
    """The text report shows our figures beside the paper's."""
    assert main(["reproduce", "gsm8k", "--seed", "1"]) == 0
    text = capsys.readouterr().out
    assert "201.00" in text and "80.20%" in text and "paper bound" in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "--clients", "0"], "clients must be at least 1"),
        (["simulate", "--request-policy", "sjf"], "unknown request policy 'sjf'"),
        (["simulate", "--workload", "nope"], "unknown workload"),
        (["simulate", "--workload", "csv:/nonexistent.csv"], "does not exist"),
        (["simulate", "--cost", "linear:1,2"], "bad cost model"),
        (["simulate", "--cost", "linear:-1,0,1,0"], "prefill_base"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(argv, message, capsys) -> None:
    """Bad arguments exit with status 2 and a one-line error, not a traceback."""
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_spec_parsers() -> None:
    """Workload and cost specs parse into the right objects."""
    assert len(parse_workload("gsm8k-answers")) == 1319
    cost = parse_cost("levels:1000=0.155,5000=0.675;0.071")
    assert cost.prefill_capacity == 5000 and cost.decode_token_time == 0.071
    assert parse_cost("linear:0.025,0.00013,0.029,0.00021,4000").prefill_capacity == 4000
