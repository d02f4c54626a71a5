"""The llmsched command."""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import llmsched
from llmsched.cli.app import main, parse_cost, parse_workload


def test_simulate_json(capsys) -> None:
    """llmsched simulate --json prints one object with the schedule's figures and its validity."""
    assert main(["simulate", "--workload", "exegpt:S", "--requests", "300", "--clients", "32", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] is True and out["violations"] == []
    assert out["requests"] == 300 and out["clients"] == 32
    assert out["makespan_s"] >= out["lower_bound_s"] > 0


def test_simulate_in_each_engine_mode(capsys, tmp_path) -> None:
    """--mode fusion and --mode disaggregated run, validate, and report their own figures in
    --json and in text; a config file carries the same keys; the Gantt chart they lack is
    refused (their traces and CSVs: tests/cli/test_trace_flags.py)."""
    base = [
        "simulate",
        "--workload",
        "exegpt:S",
        "--requests",
        "200",
        "--clients",
        "16",
        "--arrivals",
        "poisson:4",
    ]
    assert main([*base, "--mode", "fusion", "--token-budget", "256", "--json"]) == 0
    fused = json.loads(capsys.readouterr().out)
    assert fused["mode"] == "fusion" and fused["token_budget"] == 256 and fused["valid"] is True
    assert fused["makespan_s"] >= fused["lower_bound_s"] > 0 and fused["config"]["token_budget"] == 256
    split = [
        "--mode",
        "disaggregated",
        "--prompt-machines",
        "1",
        "--token-machines",
        "2",
        "--kv-bandwidth",
        "10",
    ]
    assert main([*base, *split, "--no-kv-overlap", "--json"]) == 0
    apart = json.loads(capsys.readouterr().out)
    assert apart["mode"] == "disaggregated" and apart["valid"] is True and apart["token_machines"] == 2
    assert apart["transfer_mean_s"] > 0 and apart["makespan_s"] >= apart["lower_bound_s"] > 0
    assert main([*base, *split, "--mixed-pool"]) == 0
    text = capsys.readouterr().out
    assert "KV transfer" in text and "prompt pool" in text and "valid         True" in text
    config = tmp_path / "run.toml"
    config.write_text(
        'mode = "fusion"\ntoken_budget = 64\nclients = 8\n[workload]\nspec = "exegpt:S"\nrequests = 50\n'
    )
    assert main(["simulate", "--config", str(config), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["token_budget"] == 64
    assert main([*base, "--mode", "fusion", "--plot", str(tmp_path / "g.png")]) == 2
    assert "--plot applies to --mode competition only" in capsys.readouterr().err
    assert main([*base, "--mode", "sideways"]) == 2


def test_simulate_text_and_plot(capsys, tmp_path) -> None:
    """The text report names the figures and --plot writes a PNG."""
    png = tmp_path / "gantt.png"
    assert main(["simulate", "--clients", "200", "--request-policy", "static", "--plot", str(png)]) == 0
    text = capsys.readouterr().out
    assert "makespan" in text and "utilization" in text and "valid         True" in text
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_simulate_writes_a_trace_and_csvs(capsys, tmp_path) -> None:
    """--trace, --requests-csv and --stages-csv write their files, reported in --json and in
    the text report; the trace and the CSVs hold every request and stage of the run."""
    files = {flag: tmp_path / name for flag, name in (("--trace", "t.json"), ("--requests-csv", "r.csv"))}
    files["--stages-csv"] = tmp_path / "s.csv"
    argv = ["simulate", "--workload", "exegpt:S", "--requests", "50", "--clients", "8", "--slo-ttft", "1"]
    argv += [item for flag, path in files.items() for item in (flag, str(path))]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["trace"], out["requests_csv"], out["stages_csv"]) == tuple(str(p) for p in files.values())
    trace = json.loads(files["--trace"].read_text())
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    engine = [e for e in slices if e["tid"] == 1]
    assert sum(e["name"] == "prefill" for e in engine) == out["prefill_stages"]
    assert sorted(e["args"]["request"] for e in slices if e["cat"] == "prefill") == list(range(50))
    requests = files["--requests-csv"].read_text().splitlines()
    assert len(requests) == 51 and "meets_slo" in requests[0]
    assert sum(row.endswith(",True") for row in requests[1:]) == round(out["slo_attainment"] * 50)
    stages = files["--stages-csv"].read_text().splitlines()
    assert len(stages) - 1 == len(engine) and stages[0].startswith("stage,") and "kind,start,end" in stages[0]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert f"Chrome trace written to {files['--trace']}" in text and "ui.perfetto.dev" in text
    assert f"per-request metrics written to {files['--requests-csv']}" in text
    assert f"per-stage table written to {files['--stages-csv']}" in text


@pytest.mark.parametrize("flag", ["--trace", "--requests-csv", "--stages-csv"])
def test_simulate_output_paths_are_checked_before_the_run(flag, tmp_path, capsys, monkeypatch) -> None:
    """A folder, or a file in a folder that does not exist: exit 2 naming the flag and the path,
    before anything is simulated."""
    import sys

    def no_work(*args, **kwargs):
        raise AssertionError("the run started")

    monkeypatch.setattr(sys.modules["llmsched.online.simulate"], "simulate", no_work)
    assert main(["simulate", flag, str(tmp_path)]) == 2
    assert f"llmsched: error: {flag} '{tmp_path}' is a folder; give a file such as" in capsys.readouterr().err
    missing = tmp_path / "no" / "out"
    assert main(["simulate", flag, str(missing)]) == 2
    assert f"{flag} '{missing}': folder '{missing.parent}' does not exist" in capsys.readouterr().err


def test_fleet_json_and_text(capsys) -> None:
    """fleet: the fleet's figures and one row per engine; every engine's schedule valid."""
    base = ["fleet", "--arrivals", "poisson:8", "--clients", "32", "--engines", "3", "--router", "jsq"]
    assert main([*base, "--backoff", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] and out["summary"]["engines"] == 3 and out["info"]["backoff"]
    assert [e["engine"] for e in out["engines"]] == ["engine 0", "engine 1", "engine 2"]
    assert sum(e["requests"] for e in out["engines"]) == out["summary"]["requests"] == 1319
    kinds = ["fleet", "--arrivals", "poisson:8", "--engine", "big:64:1", "--engine", "slow:32:0.4:0.5"]
    assert main([*kinds, "--cost", "linear:0.025,0.00013,0.029,0.00021,5000", "--router", "round-robin"]) == 0
    text = capsys.readouterr().out
    assert (
        "router round-robin" in text and "big" in text and "slow" in text and "valid           True" in text
    )
    assert main([*base, "--mode", "fusion", "--token-budget", "256", "--json"]) == 0
    fused = json.loads(capsys.readouterr().out)
    assert fused["valid"] and fused["summary"]["requests"] == 1319


def test_provision_text_json_and_dask(capsys) -> None:
    """provision: the chosen fleet and its evaluations; the exhaustive search on a local Dask
    cluster chooses the same."""
    base = [
        "provision",
        "--requests",
        "300",
        "--arrivals",
        "poisson:6",
        "--kind",
        "a:32:1",
        "--kind",
        "b:16:0.6",
    ]
    base += ["--max", "4", "--slo-ttft", "1", "--slo-tbt-p99", "0.12", "--no-progress"]
    assert main(base) == 0
    text = capsys.readouterr().out
    assert "chosen" in text and "evaluations" in text and "(bnb)" in text
    assert main([*base, "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["feasible"] and found["grid"] == 25 and found["evaluations"] == len(found["rows"])
    pytest.importorskip("distributed")
    assert main([*base, "--json", "--method", "exhaustive", "--backend", "dask", "--jobs", "2"]) == 0
    every = json.loads(capsys.readouterr().out)
    assert every["counts"] == found["counts"] and every["evaluations"] == 25
    pools = ["provision", "--mode", "disaggregated", "--requests", "300", "--arrivals", "poisson:10"]
    assert (
        main([*pools, "--clients", "32", "--max", "3,3", "--slo-ttft", "1", "--json", "--no-progress"]) == 0
    )
    assert set(json.loads(capsys.readouterr().out)["counts"]) == {"prompt", "token"}


def test_reproduce_mico_json(capsys) -> None:
    """reproduce mico --json: one row per setting with the paper's ratio beside ours."""
    assert main(["reproduce", "mico", "--json", "--engines", "2,9", "--batches", "2-3", "--seeds", "1"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(r["engines"], r["batch"]) for r in report["rows"]] == [(2, 2), (2, 3), (9, 2), (9, 3)]
    for row in report["rows"]:
        assert {"engines", "batch", "queries", "ratio", "paper_ratio"} <= set(row)
        assert row["queries"] == 800 and 1.3 <= row["ratio"] <= 3
    assert [r["paper_ratio"] for r in report["rows"]] == [1.67, 1.88, 1.77, 1.89]
    assert main(["reproduce", "mico", "--engines", "3", "--batches", "4", "--seeds", "1"]) == 0
    text = capsys.readouterr().out
    assert "paper_ratio" in text and "2.01" in text


def test_reproduce_baton(capsys) -> None:
    """reproduce baton: both tables, the paper's figures beside ours; --json the rows; options of
    another experiment are refused before any work."""
    assert main(["reproduce", "baton", "--json", "--seeds", "1"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["batch"] for r in report["table2"]] == [2, 4, 6, 8, 10] and report["seeds"] == [0]
    assert main(["reproduce", "baton", "--seeds", "1"]) == 0
    assert "Benchmark/Baton" in capsys.readouterr().out
    assert main(["reproduce", "baton", "--engines", "2"]) == 2
    assert "--engines does not apply to reproduce baton" in capsys.readouterr().err


def test_reproduce_gsm8k_json(capsys, tmp_path) -> None:
    """reproduce gsm8k --json: every strategy with oracle and predicted lengths; --plot writes charts.
    With stderr not a terminal (here captured) no progress bar is drawn."""
    assert main(["reproduce", "gsm8k", "--json", "--plot", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    report = json.loads(captured.out)
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


def test_json_outputs_hold_timings_only_when_asked(capsys) -> None:
    """Without --timings a command's JSON holds no seconds of work (so it is the same on any
    machine); with it, a 'timings' object holds them."""
    study = ["study", "--cases", "1", "--requests", "40", "--clients", "4", "--jobs", "1", "--no-progress"]
    sweep = ["sweep", "--workload", "exegpt:S", "--requests", "20", "--clients", "4", "--rates", "1"]
    sweep += ["--jobs", "1", "--no-progress"]
    exegpt = ["exegpt", "--model", "opt-13b", "--task", "S", "--latency-bound", "11.5"]
    for argv, keys in ((study, {"wall_s"}), (sweep, {"wall_s"}), (exegpt, {"search_s"})):
        assert main([*argv, "--json"]) == 0
        plain = capsys.readouterr().out
        assert "timings" not in json.loads(plain) and "wall_s" not in plain and "runtime_s" not in plain
        assert main([*argv, "--json", "--timings"]) == 0
        timed = json.loads(capsys.readouterr().out)
        assert set(timed.pop("timings")) == keys and all(v >= 0 for v in timed.get("timings", {}).values())
        assert timed == json.loads(plain)
    assert main(["reproduce", "mico", "--timings"]) == 2
    assert "--timings" in capsys.readouterr().err


def test_reproduce_text(capsys, monkeypatch) -> None:
    """The text report shows our figures beside the paper's; on a terminal a progress bar on
    stderr counts the steps (the bound, and each of the 11 methods with both kinds of lengths)."""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["reproduce", "gsm8k", "--seed", "1"]) == 0
    captured = capsys.readouterr()
    text = captured.out
    assert "201.00" in text and "80.20%" in text and "paper bound" in text
    assert "gsm8k: 100%" in captured.err and "23/23" in captured.err


SIM = ["simulate", "--workload", "exegpt:S", "--requests", "20", "--clients", "4", "--json"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "--clients", "0"], r"argument --clients: must be an integer in \[1, 1000000\], got 0"),
        (
            ["simulate", "--clients", "2.5"],
            r"argument --clients: must be an integer in \[1, 1000000\], got '2.5'",
        ),
        (["simulate", "--seed", "-1"], "argument --seed: must be an integer >= 0, got -1"),
        (
            ["simulate", "--requests", str(10**12)],
            r"argument --requests: must be an integer in \[1, 10000000\]",
        ),
        (["simulate", "--request-policy", "sjf"], "unknown request policy 'sjf'"),
        (["simulate", "--workload", "nope"], "unknown workload 'nope'"),
        (["simulate", "--workload", "exegpt:X"], "unknown ExeGPT task 'X'"),
        (["simulate", "--workload", "csv:/nonexistent.csv"], "path '/nonexistent.csv' does not exist"),
        (["simulate", "--cost", "linear:1,2"], "linear needs 4 or 5 comma-separated numbers"),
        (["simulate", "--cost", "linear:-1,0,1,0"], "prefill_base must be a finite number >= 0, got -1.0"),
        (["simulate", "--cost", "linear:nan,0,1,0"], "prefill_base must be a finite number >= 0, got nan"),
        (["simulate", "--plot", "/nonexistent-folder/g.png"], "--plot '/nonexistent-folder/g.png': folder"),
        (["simulate", "--plot", "g.docx"], "--plot 'g.docx': unknown image format 'docx'"),
        (["simulate", "--bogus"], "unrecognized arguments: --bogus"),
        (["simulate", "--rate-scale", "0"], "argument --rate-scale: must be a finite number > 0, got 0"),
        (["simulate", "--rate-scale", "nan"], "argument --rate-scale: must be a finite number > 0, got nan"),
        (
            ["simulate", "--max-prompt", "0"],
            r"argument --max-prompt: must be an integer in \[1, 2147483647\]",
        ),
        (["simulate", "--max-output", "1.5"], "argument --max-output: must be an integer in"),
        (["simulate", "--arrivals", "poisson"], "argument --arrivals: unknown arrivals 'poisson'; expected"),
        (
            ["simulate", "--arrivals", "gamma:1"],
            "argument --arrivals: bad arrivals 'gamma:1': gamma takes RATE,CV",
        ),
        (["simulate", "--arrivals", "poisson:0"], "argument --arrivals: .*rate must be a finite number > 0"),
        (["simulate", "--replace-arrivals"], r"replace_arrivals=True \(--replace-arrivals\) needs arrivals="),
        (["simulate", "--predictor", "psychic"], "unknown predictor 'psychic'"),
        (
            ["simulate", "--predictor", "mico", "--request-policy", "hybrid-oracle"],
            "request policy 'hybrid-oracle' plans with the true output lengths, so --predictor mico would go "
            "unused; choose 'hybrid'",
        ),
        (["simulate", "--slo-ttft", "-1"], "argument --slo-ttft: must be a finite number > 0, got -1"),
        (
            ["simulate", "--slo-tbt-mean", "x"],
            "argument --slo-tbt-mean: must be a finite number > 0, got 'x'",
        ),
        (["reproduce", "gsm8k", "--seed", "x"], "argument --seed: must be an integer >= 0, got 'x'"),
        (["reproduce", "gsm8k", "--predictor", "psychic"], "unknown predictor 'psychic'"),
        (["reproduce", "mmlu"], "argument EXPERIMENT: invalid choice: 'mmlu'"),
        (["reproduce", "mico", "--engines", "2,x"], "argument --engines: must be comma-separated integers"),
        (["reproduce", "mico", "--batches", "0-3"], r"argument --batches: each value must lie in \[1, 1000"),
        (["reproduce", "mico", "--plot", "out"], "reproduce mico has none"),
        (["reproduce", "gsm8k", "--outputs", "normal"], "--outputs applies to reproduce mico, not gsm8k"),
        (["reproduce", "mico", "--outputs", "normal,uniform"], "argument --outputs: outputs must name"),
        (["reproduce", "mico", "--outputs", "normal,constant", "--seed", "1"], "800 queries from seed 0"),
        (["reproduce", "all", "--engines", "2"], "reproduce all runs each experiment as published; --engin"),
        (["reproduce", "all", "--plot", "out", "--seed", "2"], "--seed, --plot applies to reproduce gsm8k"),
        (["fleet", "--backoff-delay", "1"], "--backoff-delay and --backoff-threshold need --backoff"),
        (["fleet", "--engine", "a:2", "--engines", "2"], "not both"),
        (["fleet", "--engine", "a:x"], "argument --engine: must be NAME:CLIENTS"),
        (["fleet", "--router", "nearest"], "argument --router: invalid choice"),
        (["fleet", "--router", "least-work"], "no predicted_output"),
        (["provision", "--max", "2"], "give a latency target"),
        (["provision", "--mode", "disaggregated", "--kind", "a:2", "--slo-ttft", "1"], "--kind names fleet"),
        (["provision", "--slo-ttft", "1", "--dask-address", "x:1"], "--dask-address needs --backend dask"),
        (["provision", "--slo-ttft", "1", "--ray-address", "x:1"], "--ray-address needs --backend ray"),
        (["provision", "--slo-ttft", "1", "--kind", "a:2:1:2", "--cost", "levels:100=0.1;0.01"], "SPEED"),
        (["study", "--cases", "0"], r"argument --cases: must be an integer in \[1, 1000000\], got 0"),
        (["study", "--jobs", "0"], r"argument --jobs: must be a nonzero integer \(-1: every core\), got 0"),
        (["study", "--requests", "-5"], "argument --requests: must be an integer in"),
        (
            ["exegpt", "--latency-bound", "inf", "--gpus", "1000000"],
            r"argument --gpus: must be an integer in \[1, 1024\]",
        ),
        (
            ["exegpt", "--latency-bound", "inf", "--batch-max", str(10**9)],
            "argument --batch-max: must be an integer in",
        ),
        (["exegpt", "--latency-bound", "inf", "--iterations-max", "0"], "argument --iterations-max: must be"),
        (
            ["exegpt", "--latency-bound", "inf", "--eps", "nan"],
            r"argument --eps: must be a number in \[0, 1\), got nan",
        ),
        (["exegpt", "--latency-bound", "inf", "--gpu", "h100"], "unknown GPU 'h100'"),
        (["exegpt", "--latency-bound", "-1"], "--latency-bound must be positive"),
        (
            ["runtime", "validate", "--clients", "1"],
            r"argument --clients: must be an integer in \[2, 1024\], got 1",
        ),
        (
            ["runtime", "validate", "--clients", "1000000"],
            r"argument --clients: must be an integer in \[2, 1024\]",
        ),
        (
            ["runtime", "validate", "--requests", "0"],
            r"argument --requests: must be an integer in \[1, 100000\]",
        ),
        (["runtime", "validate", "--scale", "0"], r"argument --scale: must be a number in \(0, 1\], got 0"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(argv, message, capsys) -> None:
    """Bad arguments exit with status 2 and an 'llmsched: error:' line naming the argument, no traceback."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert re.search(message, err), err
    assert "llmsched: error: " in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("linear:a,0,1,0", "A_P must be a number, got 'a'"),
        ("linear:1,1,1,1,2.5", "CAPACITY must be an integer, got '2.5'"),
        ("linear:1,1,1,1,0", "prefill_capacity must be at least 1, got 0"),
        ("linear:1e400,0,1,0", "prefill_base must be a finite number >= 0, got inf"),
        ("linear:0,0,0,0", "a prefill stage must take some time"),
        ("levels:100=0.1", "levels needs the levels, one ';', then TD"),
        ("levels:100=0.1;0.1;0.2", "levels needs the levels, one ';', then TD"),
        ("levels:100;0.1", "a level must be CAP=T .*, got '100'"),
        ("levels:x=1;0.1", "CAP must be an integer, got 'x'"),
        ("levels:100=nan;0.1", r"levels\[0\] time \(seconds\) must be a finite number > 0, got nan"),
        ("levels:200=0.2,100=0.1;0.1", "capacities must be positive and strictly increasing"),
        ("levels:100=0.1;-1", "decode_token_time must be a finite number > 0, got -1.0"),
        ("paper:1", "unknown cost model 'paper:1'"),
        ("context:1,2,3", r"context needs 6 or 7 comma-separated numbers \(A_P,B_P,C_P,A_D,B_D,C_D"),
        ("context:0.1,0,x,0.1,0,0", "C_P must be a number, got 'x'"),
        ("context:0.1,0,0,0.1,0,-1", "decode_per_context must be a finite number >= 0, got -1.0"),
    ],
)
def test_cost_specs_name_the_bad_field(spec: str, message: str) -> None:
    """The --cost mini-grammars say which field is wrong, and the model's own checks name the parameter."""
    with pytest.raises(ValueError, match=message) as info:
        parse_cost(spec)
    assert f"cost model {spec!r}" in str(info.value)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "the file is empty"),
        (b"prompt_tokens,output_tokens\n\xff\xfe,1\n", "not UTF-8 text"),
        (b"prompt_tokens,output_tokens\n", "the table has a header but no requests"),
        (b"prompt_tokens,output_tokens\n0,1\n", r"prompt_tokens\[0\] is 0"),
    ],
)
def test_csv_workloads_name_the_file(tmp_path, capsys, data: bytes, message: str) -> None:
    """--workload csv:PATH with an empty, non-UTF-8, row-less or bad file names the file and the fault."""
    path = tmp_path / "w.csv"
    path.write_bytes(data)
    assert main(["simulate", "--workload", f"csv:{path}", "--clients", "2"]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and re.search(message, err), err


def test_help_exits_0(capsys) -> None:
    """--help prints the usage and returns 0 rather than raising SystemExit."""
    assert main(["simulate", "--help"]) == 0
    assert "--workload" in capsys.readouterr().out


def test_spec_parsers() -> None:
    """Workload and cost specs parse into the right objects."""
    assert len(parse_workload("gsm8k-answers")) == 1319
    with pytest.raises(ValueError, match="unknown workload 'azure:'"):
        parse_workload("azure:")
    cost = parse_cost("levels:1000=0.155,5000=0.675;0.071")
    assert cost.prefill_capacity == 5000 and cost.decode_token_time == 0.071
    assert parse_cost("linear:0.025,0.00013,0.029,0.00021,4000").prefill_capacity == 4000


AZURE = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 18:17:03.9799600,4808,10\n"
    "2023-11-16 18:17:04.0319600,6180,8\n"
    "2023-11-16 18:17:05.5000000,110,27\n"
    "2023-11-16 18:17:09.9799600,7433,14\n"
)


def test_simulate_azure_trace_with_options_reports_them(tmp_path, capsys) -> None:
    """azure:PATH with --max-prompt, --max-output and --rate-scale: the JSON names the options
    used and how many prompts and outputs were clipped; the clipped trace fits the paper's capacity."""
    trace = tmp_path / "azure.csv"
    trace.write_text(AZURE)
    argv = ["simulate", "--workload", f"azure:{trace}", "--clients", "2", "--json"]
    assert main([*argv, "--max-prompt", "5000", "--max-output", "12", "--rate-scale", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["workload_options"] == {
        "rate_scale": 2.0,
        "max_prompt": 5000,
        "max_output": 12,
        "arrivals": None,
        "replace_arrivals": False,
        "seed": 0,
    }
    assert (out["prompts_clipped"], out["outputs_clipped"], out["predictions_clipped"]) == (2, 2, 0)
    assert out["requests"] == 4 and out["valid"] is True and out["predictor"] is None


def test_a_prompt_above_the_capacity_names_the_flags_that_fix_it(tmp_path, capsys) -> None:
    """Without --max-prompt the Azure prompts of 6,180 and 7,433 tokens do not fit the paper's
    5,000-token stage: the error says to clip them or to give a larger capacity."""
    trace = tmp_path / "azure.csv"
    trace.write_text(AZURE)
    assert main(["simulate", "--workload", f"azure:{trace}", "--clients", "2"]) == 2
    err = capsys.readouterr().err
    assert "prompt of 7433 tokens, more than the prefill capacity of 5000 tokens" in err
    assert "--max-prompt 5000" in err and "--cost linear:A_P,B_P,A_D,B_D,7433" in err
    assert (
        main(
            [
                "simulate",
                "--workload",
                f"azure:{trace}",
                "--clients",
                "2",
                "--cost",
                "linear:0.025,0.00013,0.029,0.00021,7433",
            ]
        )
        == 0
    )


def test_simulate_draws_arrivals_for_a_length_only_trace(tmp_path, capsys) -> None:
    """--arrivals gives a length-only Vidur trace arrival times (seeded); the text report says so;
    over a trace that has times it is refused without --replace-arrivals."""
    lengths = tmp_path / "lengths.csv"
    lengths.write_text(
        "num_prefill_tokens,num_decode_tokens\n" + "".join(f"{10 + i},{5 + i}\n" for i in range(40))
    )
    base = ["simulate", "--workload", f"vidur:{lengths}", "--clients", "4"]
    assert main([*base, "--json"]) == 0
    offline = json.loads(capsys.readouterr().out)
    assert main([*base, "--json", "--arrivals", "gamma:0.5,2", "--seed", "3"]) == 0
    online = json.loads(capsys.readouterr().out)
    assert online["workload_options"]["arrivals"] == "gamma:0.5,2" and online["workload_options"]["seed"] == 3
    assert online["makespan_s"] > offline["makespan_s"]
    assert main([*base, "--arrivals", "poisson:2"]) == 0
    assert "workload      arrivals poisson:2 (seed 0)" in capsys.readouterr().out
    timed = tmp_path / "timed.csv"
    timed.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,3\n1.5,20,4\n")
    timed_run = ["simulate", "--workload", f"vidur:{timed}", "--clients", "2", "--arrivals", "poisson:2"]
    assert main(timed_run) == 2
    assert "has its own arrival times (up to 1.5 s)" in capsys.readouterr().err
    assert main([*timed_run, "--replace-arrivals"]) == 0


def test_simulate_plans_with_a_predictor(tmp_path, capsys) -> None:
    """--predictor attaches cross-fitted predictions that a sizes-taking policy plans with; the
    oracle predictor plans with the true lengths as the -oracle policy does."""
    base = ["simulate", "--workload", "exegpt:T", "--requests", "60", "--clients", "8", "--json"]
    results = {}
    for extra in (
        ["--request-policy", "hybrid", "--predictor", "mico"],
        ["--request-policy", "hybrid", "--predictor", "oracle"],
        ["--request-policy", "hybrid-oracle"],
    ):
        assert main([*base, *extra]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["valid"] is True
        results[out["predictor"]] = out
    assert results["mico"]["predictor"] == "mico"
    assert results["oracle"]["makespan_s"] == results[None]["makespan_s"]
    assert main([*base, "--request-policy", "hybrid"]) == 2
    assert "no predicted_output" in capsys.readouterr().err


def test_real_azure_trace_on_the_command_line(shared_azure_code, capsys) -> None:
    """The 2023 code trace runs once clipped to the paper's capacity: 906 prompts clipped."""
    argv = ["simulate", "--workload", f"azure:{shared_azure_code}", "--max-prompt", "5000", "--json"]
    assert main([*argv, "--clients", "64", "--rate-scale", "4"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["requests"] == 8819 and out["prompts_clipped"] == 906 and out["valid"] is True


SUBCOMMANDS = [
    ["simulate"],
    ["reproduce"],
    ["study"],
    ["sweep"],
    ["fleet"],
    ["provision"],
    ["exegpt"],
    ["runtime", "validate"],
]


@pytest.mark.parametrize("command", SUBCOMMANDS, ids=" ".join)
def test_every_flag_of_every_subcommand_says_its_default(command, capsys) -> None:
    """Each option of each subcommand's --help has help text ending with its default (or
    saying that it is required), and each positional argument has help text."""
    assert main([*command, "--help"]) == 0
    text = capsys.readouterr().out
    sections = re.split(r"\n(?=\S[^\n]*:\n)", text)
    options = [section for section in sections if section.startswith("options:")]
    assert len(options) == 1, text
    flags = re.split(r"\n  (?=-)", options[0])[1:]
    assert len(flags) >= (17 if command == ["simulate"] else 3)
    for flag in flags:
        if flag.startswith("-h"):
            continue
        words = " ".join(flag.split())
        name, *described = re.split(r"\s{2,}|\n\s+", flag.strip(), maxsplit=1)
        assert described, f"{command}: {name} has no help text"
        assert "(default: " in words or words.endswith("(required)"), words
    for section in sections:
        if section.startswith("positional arguments:"):
            for line in section.splitlines()[1:]:
                assert len(line.split(None, 1)) == 2, f"{command}: positional {line.strip()} has no help"


def test_simulate_reports_serving_metrics_and_what_the_policies_knew(capsys) -> None:
    """--json carries the serving metrics beside today's keys, the SLO targets and their
    goodput, and whether the run was clairvoyant; a clairvoyant run says so."""
    args = ["simulate", "--workload", "exegpt:S", "--requests", "60", "--clients", "8", "--json"]
    assert main([*args, "--arrivals", "poisson:4", "--slo-ttft", "5", "--slo-tbt-mean", "0.2"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in (
        "tbt_p50_s",
        "tbt_p99_s",
        "e2e_p50_s",
        "e2e_p99_s",
        "goodput_rps",
        "ttft_p99_s",
        "latency_p99_s",
    ):
        assert key in out and out[key] >= 0
    assert out["slo_ttft_s"] == 5 and out["slo_tbt_s"] == 0.2
    assert out["goodput_rps"] <= out["requests_per_s"]
    assert out["clairvoyant"] is False and out["oracle_lengths"] is False
    assert main([*args, "--request-policy", "hybrid-oracle", "--clairvoyant"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["clairvoyant"] is True and out["oracle_lengths"] is True
    assert out["slo_ttft_s"] is None and out["goodput_rps"] == out["requests_per_s"]


def test_the_slo_rule_serves_simulates_ttft_target(capsys) -> None:
    """--slo-ttft is the goodput target and, for the slo rule, the target it serves."""
    args = ["simulate", "--workload", "exegpt:S", "--requests", "60", "--clients", "8", "--json"]
    args += ["--arrivals", "poisson:4", "--iteration-policy", "slo"]
    p99 = {}
    for target in ("0.05", "5"):
        assert main([*args, "--slo-ttft", target]) == 0
        p99[target] = json.loads(capsys.readouterr().out)["ttft_p99_s"]
    assert p99["0.05"] < p99["5"]


def test_version_comes_from_the_package_metadata(capsys, monkeypatch) -> None:
    """--version prints the installed distribution's version and exits 0; without an installed
    distribution it still answers (with the version the package itself carries)."""
    import importlib.metadata

    import llmsched

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"llmsched {importlib.metadata.version('llmsched')}\n"

    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"llmsched {llmsched.__version__}\n"


def _command_env() -> dict[str, str]:
    """The environment of a subprocess that imports this source tree's llmsched."""
    src = str(Path(llmsched.__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}


@pytest.mark.parametrize(
    "args",
    [
        ["simulate", "--workload", "exegpt:S", "--requests", "30", "--clients", "4", "--json"],
        ["exegpt", "--latency-bound", "inf", "--batch-max", "8", "--iterations-max", "8"],
    ],
)
def test_a_reader_that_stops_early_ends_the_command_quietly(args) -> None:
    """Output into a pipe whose reader has gone (llmsched ... | head -1) ends the command with
    status 141, as one killed by SIGPIPE, and nothing on stderr: no traceback, no error line."""
    command = [sys.executable, "-m", "llmsched", *args]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_command_env())
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the command writes a byte
    err = proc.stderr.read().decode()
    assert proc.wait() == 141 and err == "", err
    piped = subprocess.run(
        f"{shlex.join(command)} | head -1",
        shell=True,
        capture_output=True,
        text=True,
        env=_command_env(),
        check=False,
    )
    assert piped.stderr == "" and piped.stdout.startswith(("{\n", "OPT-13B on 4xA40"))


PLOTTING_COMMANDS = {
    "simulate": ["simulate", "--workload", "exegpt:S", "--requests", "20", "--clients", "2", "--json"],
    "study": ["study", "--cases", "1", "--requests", "20", "--clients", "2", "--jobs", "1", "--json"],
    "sweep": [
        *("sweep", "--workload", "exegpt:S", "--requests", "20", "--clients", "2", "--arrivals", "poisson:1"),
        *("--rates", "1", "--jobs", "1", "--json"),
    ],
}


@pytest.mark.parametrize("command", sorted(PLOTTING_COMMANDS))
def test_a_plot_name_without_a_suffix_reports_the_file_written(command, tmp_path, capsys) -> None:
    """--plot NAME makes matplotlib write NAME.png; the report names that file, not NAME."""
    assert main([*PLOTTING_COMMANDS[command], "--plot", str(tmp_path / "chart")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["plot"] == str(tmp_path / "chart.png")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["chart.png"]


# Where each command's work starts: a test replaces it to see that a bad output path is refused
# before it.
WORK = {
    "simulate": ("llmsched.online.simulate", "simulate"),
    "study": ("llmsched.experiments.study", "run_study"),
    "sweep": ("llmsched.experiments.sweep", "sweep"),
    "reproduce": ("llmsched.experiments.reproduce", "reproduce_gsm8k"),
}


def _bad_output(case: str, folder: Path, want_folder: bool) -> Path:
    """An output path that cannot be written, of the kind ``case`` names."""
    name = "charts" if want_folder else "chart.png"
    if case == "missing folder":
        return folder / "missing" / name
    if case == "under a file":
        blocker = folder / "file"
        blocker.write_text("")
        return blocker / name
    if case == "name too long":
        return folder / ("x" * 300 + ("" if want_folder else ".png"))
    read_only = folder / "read-only"
    read_only.mkdir()
    read_only.chmod(0o555)
    try:
        (read_only / "probe").touch()
    except PermissionError:
        return read_only if want_folder else read_only / name
    pytest.skip("this user writes into read-only folders (root)")


@pytest.mark.parametrize("case", ["missing folder", "under a file", "name too long", "read-only folder"])
@pytest.mark.parametrize("command", sorted(WORK))
def test_an_output_that_cannot_be_written_is_refused_before_the_work(
    command, case, tmp_path, monkeypatch, capsys
) -> None:
    """--plot into a missing folder, under a file, with a name too long or into a read-only
    folder fails with one 'llmsched: error:' line and status 2 before the command's work
    starts (reproduce makes its missing folder, so that case is no error there)."""
    if command == "reproduce" and case == "missing folder":
        pytest.skip("reproduce makes a missing --plot folder")
    module, name = WORK[command]

    def work(*args, **kwargs):
        raise AssertionError(f"{command}'s work started")

    monkeypatch.setattr(importlib.import_module(module), name, work)
    argv = ["reproduce", "gsm8k"] if command == "reproduce" else PLOTTING_COMMANDS[command]
    path = _bad_output(case, tmp_path, want_folder=command == "reproduce")
    assert main([*argv, "--plot", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"llmsched: error: --plot {str(path)!r}") and err.count("\n") == 1, err


def test_an_os_error_in_the_work_is_one_line_naming_the_file(tmp_path, monkeypatch, capsys) -> None:
    """An OSError the work meets (here writing the chart) is reported as 'PATH: reason' in one
    'llmsched: error:' line with status 2, not as a traceback or an errno."""
    import llmsched.plot

    def refuse(schedule, path, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(llmsched.plot, "save_gantt", refuse)
    png = tmp_path / "g.png"
    assert main([*PLOTTING_COMMANDS["simulate"], "--plot", str(png)]) == 2
    assert capsys.readouterr().err == f"llmsched: error: {png}: Permission denied\n"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("unbuffered", [False, True])
def test_an_output_that_cannot_be_written_is_one_error_line(unbuffered) -> None:
    """llmsched simulate --json > /dev/full (a full disk): one 'llmsched: error:' line and
    status 2, not Python's 'Exception ignored' report at exit, whether stdout is buffered (the
    write fails as main flushes it) or not (it fails as the command prints)."""
    command = [sys.executable, "-m", "llmsched", *PLOTTING_COMMANDS["simulate"]]
    env = {key: value for key, value in _command_env().items() if key != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    with open("/dev/full", "w") as full:
        proc = subprocess.run(command, stdout=full, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.returncode == 2
    assert re.fullmatch(
        r"llmsched: error: (cannot write the output: )?No space left on device\n", proc.stderr
    )


EXEGPT_VERIFY = ["exegpt", "--latency-bound", "inf", "--batch-max", "8", "--iterations-max", "8", "--verify"]
PROGRESS_COMMANDS = {
    "exegpt --verify": ([*EXEGPT_VERIFY, "--json"], "ExeGPT exhaustive"),
    "study": (PLOTTING_COMMANDS["study"], "cases (oracle)"),
    "sweep": (PLOTTING_COMMANDS["sweep"], "sweep"),
}


@pytest.mark.parametrize("command", sorted(PROGRESS_COMMANDS))
def test_long_work_shows_a_progress_bar_on_a_terminal(command, monkeypatch, capsys) -> None:
    """A command that can take long draws a progress bar on stderr when stderr is a terminal,
    none with --no-progress, and none when stderr is a file or a pipe (here captured)."""
    argv, name = PROGRESS_COMMANDS[command]
    assert main(argv) == 0
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(argv) == 0
    assert f"{name}: 100%" in capsys.readouterr().err
    assert main([*argv, "--no-progress"]) == 0
    assert capsys.readouterr().err == ""


def test_an_interrupted_command_ends_with_one_line_and_status_130(monkeypatch, capsys) -> None:
    """Ctrl-C during the work ends the command with 'llmsched: interrupted' and status 130 (as a
    shell reports SIGINT), not a KeyboardInterrupt traceback."""

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib.import_module("llmsched.experiments.study"), "run_study", interrupted)
    assert main(PLOTTING_COMMANDS["study"]) == 130
    assert capsys.readouterr().err == "llmsched: interrupted\n"


def test_any_output_file_flag_is_checked_the_same_way(tmp_path) -> None:
    """The check behind --plot serves any output file flag (a JSON report, a trace): a missing
    folder, a folder given for a file, a name too long are refused naming the flag; a writable
    path is left as it was (no empty file behind)."""
    from llmsched.cli.app import _check_output_file

    for path, message in [
        (tmp_path / "missing" / "r.json", "folder .* does not exist"),
        (tmp_path, "is a folder; give a file such as out.json"),
        (tmp_path / ("x" * 300 + ".json"), "cannot write the file"),
    ]:
        with pytest.raises(ValueError, match=f"^--report '.*'.* {message}"):
            _check_output_file(path, "--report")
    _check_output_file(tmp_path / "r.json", "--report")
    assert list(tmp_path.iterdir()) == []


def test_a_context_cost_spec_simulates_and_prints_the_context_aware_bound(capsys) -> None:
    """--cost context:... runs the simulator with context terms: the schedule validates and
    the bound printed beside it is the context-aware one (above the linear model's)."""
    spec = "context:0.025,0.00013,2e-9,0.029,0.00021,2e-7"
    run = ["simulate", "--workload", "exegpt:S", "--requests", "200", "--clients", "50", "--json"]
    assert main([*run, "--cost", spec]) == 0
    context = json.loads(capsys.readouterr().out)
    assert main(run) == 0
    linear = json.loads(capsys.readouterr().out)
    assert context["valid"] and linear["valid"]
    assert context["makespan_s"] > linear["makespan_s"]
    assert context["lower_bound_s"] > linear["lower_bound_s"]
    assert context["makespan_s"] >= context["lower_bound_s"]
