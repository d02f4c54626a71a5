"""``llmsched cost list`` and ``llmsched cost fit``, and the ``--cost preset:`` and ``--cost table:``
specs that read what they show and write."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

import llmsched
from llmsched import TableCostModel, preset
from llmsched.cli.app import main
from llmsched.cli.cost import parse_columns
from llmsched.cli.options import parse_cost
from llmsched.core.hardware import measurements


def write_rows(
    path, names=("prompt_size", "batch_size", "token_size", "prompt_time", "token_time"), scale=1.0
):
    """Llama-2-70B on H100 at TP 8, SplitwiseSim's rows, under column ``names``, times x ``scale``."""
    rows = measurements()[("llama2-70b", "h100-80gb", 8)]
    keys = ("prompt_size", "batch_size", "token_size", "prompt_time", "token_time")
    lines = [",".join(names)]
    for i in range(len(rows["prompt_size"])):
        values = [rows[k][i] * (scale if k.endswith("_time") else 1) for k in keys]
        lines.append(
            ",".join(
                repr(float(v)) if k.endswith("_time") else str(int(v))
                for k, v in zip(keys, values, strict=True)
            )
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def test_cost_list_shows_every_preset(capsys) -> None:
    """A row per preset with its GPUs, memory and times; --json the same figures as the presets."""
    assert main(["cost", "list"]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0].startswith("preset") and "prefill 1,024" in lines[0]
    assert len([line for line in lines if "/tp" in line]) == 12
    h100 = next(line for line in lines if line.startswith("llama2-70b/h100/tp8 "))
    assert re.search(r"\b8\s+514\.3\s+210,640\s+2\.500\s+10,200\s+77\.9\s+844\.9\s+811\.9", h100), h100
    assert main(["cost", "list", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["decode_context_tokens"] == 1024 and len(out["presets"]) == 12
    row = next(r for r in out["presets"] if r["name"] == "bloom-176b/a100/tp8")
    cost = preset("bloom-176b/a100/tp8").cost()
    assert row["kv_tokens"] == preset("bloom-176b/a100/tp8").kv_tokens()
    assert row["prefill_8192_ms"] == pytest.approx(1e3 * cost.prefill_time(8192, 8192**2))
    assert row["prefill_16x512_ms"] == pytest.approx(1e3 * cost.prefill_time(8192, 16 * 512**2))
    assert row["decode_64_ms"] == pytest.approx(1e3 * cost.decode_iteration_time(64, 64 * 1024))
    small = next(r for r in out["presets"] if r["name"] == "llama2-70b/a100/tp2")
    assert small["decode_64_ms"] is not None and small["max_batch"] == 64  # 32 measured, priced to 64


def test_cost_fit_reports_the_held_out_error_and_writes_the_table(tmp_path, capsys) -> None:
    """fit on SplitwiseSim's columns: the held-out MAPE of both times (seed 0, 21 rows held
    out), and a TOML file that --cost table: reads back as the table fitted on every row."""
    csv = write_rows(tmp_path / "runs.csv")
    out = tmp_path / "cost.toml"
    assert main(["cost", "fit", str(csv), "--out", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["rows"] == 105 and report["held_out_rows"] == 21 and report["seed"] == 0
    assert 0 < report["prefill_mape"] < 0.03 and 0 < report["decode_mape"] < 0.02
    assert report["batched_prompt"] == 512 and report["batched_knots"] == 7
    table = TableCostModel.from_toml(out)
    # As the presets read their rows: mixed iterations at 1.1, batches to twice the largest.
    largest = 2 * TableCostModel.fit(csv).max_batch
    assert table == TableCostModel.fit(csv, mixed_factor=1.1, max_batch=largest) == parse_cost(f"table:{out}")
    assert (
        main(["cost", "fit", str(csv), "--out", str(out), "--mixed-factor", "fused", "--max-batch", "80"])
        == 0
    )
    assert TableCostModel.from_toml(out) == TableCostModel.fit(csv, max_batch=80)
    assert main(["cost", "fit", str(csv), "--seed", "1", "--holdout", "0.5"]) == 0
    text = capsys.readouterr().out
    assert "52 held out (seed 1)" in text and "held-out MAPE  prefill" in text
    assert "keyed by tokens and prompt count: 7 knots of batches of 512-token prompts" in text
    # By tokens alone, as SplitwiseSim: a larger error on the same split.
    assert main(["cost", "fit", str(csv), "--prefill-by", "tokens", "--json"]) == 0
    tokens = json.loads(capsys.readouterr().out)
    assert tokens["batched_prompt"] is None and tokens["prefill_mape"] > report["prefill_mape"]


def test_cost_fit_reads_other_column_names_and_units(tmp_path, capsys) -> None:
    """--columns names each role's column, --time-unit their unit; without an output column the
    fit still runs (context batch x prompt)."""
    names = ("p", "b", "o", "ttft", "tbt")
    csv = write_rows(tmp_path / "runs.csv", names, scale=1e-3)
    columns = "prompt=p,batch=b,output=o,prefill_time=ttft,decode_time=tbt"
    assert main(["cost", "fit", str(csv), "--columns", columns, "--time-unit", "s", "--json"]) == 0
    seconds = json.loads(capsys.readouterr().out)
    plain = write_rows(tmp_path / "plain.csv")
    assert main(["cost", "fit", str(plain), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["prefill_mape"] == pytest.approx(seconds["prefill_mape"])
    no_output = columns.replace("output=o", "output=")
    assert main(["cost", "fit", str(csv), "--columns", no_output, "--time-unit", "s", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["decode_mape"] < 0.05
    # A role left out keeps SplitwiseSim's column name, which this file lacks.
    assert main(["cost", "fit", str(csv), "--columns", columns.replace(",output=o", "")]) == 2
    assert "no column 'token_size'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--columns", "prompt"], "--columns takes ROLE=COLUMN pairs, got 'prompt'"),
        (["--columns", "prompt=a,prompt=b"], "--columns gives prompt twice"),
        (["--columns", "tokens=p"], "unknown role 'tokens'"),
        (["--columns", "prompt=nothing"], "no column 'nothing'"),
        (["--holdout", "1"], "must be a number in"),
        (["--time-unit", "h"], "invalid choice"),
        (["--mixed-factor", "0.5"], "must be fused or a factor >= 1"),
        (["--max-batch", "1000"], "max_batch may be at most 2 x the last decode knot"),
        (["--where", "model"], "--where must be COLUMN=VALUE"),
        (["--where", "gpu=h100"], "--where: "),
        (["--where", "prompt_size=3"], "no row of"),
        (["--holdout", "0.99"], "hold out fewer (--holdout)"),
        (["--prefill-by", "prompts"], "invalid choice"),
    ],
)
def test_cost_fit_refuses_bad_arguments_naming_them(tmp_path, capsys, argv, message) -> None:
    csv = write_rows(tmp_path / "runs.csv")
    assert main(["cost", "fit", str(csv), *argv]) == 2
    assert message in capsys.readouterr().err


def test_cost_fit_refuses_an_output_it_cannot_write_before_the_work(tmp_path, capsys) -> None:
    csv = write_rows(tmp_path / "runs.csv")
    assert main(["cost", "fit", str(csv), "--out", str(tmp_path / "no" / "cost.toml")]) == 2
    assert "--out" in capsys.readouterr().err
    assert main(["cost", "fit", str(tmp_path / "missing.csv")]) == 2
    assert "missing.csv" in capsys.readouterr().err


def test_cost_alone_prints_its_help_and_fails(capsys) -> None:
    assert main(["cost"]) == 2
    assert "{list,fit}" in capsys.readouterr().err


@pytest.mark.parametrize("action", ["list", "fit"])
def test_every_flag_says_its_default(action, capsys) -> None:
    assert main(["cost", action, "--help"]) == 0
    text = capsys.readouterr().out
    options = text.split("options:", 1)[1]
    for flag in re.split(r"\n  (?=--)", options)[1:]:
        assert "(default: " in " ".join(flag.split()), flag


def test_simulate_runs_on_a_preset_and_on_a_fitted_table(tmp_path, capsys) -> None:
    """--cost preset:NAME and --cost table:FILE run like any cost model; an unknown preset is
    one error line listing the presets; a missing file is named."""
    argv = ["simulate", "--clients", "32", "--json", "--max-output", "100"]
    assert main([*argv, "--cost", "preset:llama2-70b/h100/tp8"]) == 0
    by_preset = json.loads(capsys.readouterr().out)
    assert by_preset["valid"] is True and by_preset["requests"] == 1319
    path = tmp_path / "cost.toml"
    preset("llama2-70b/h100/tp8").cost().to_toml(path)
    assert main([*argv, "--cost", f"table:{path}"]) == 0
    assert json.loads(capsys.readouterr().out)["makespan_s"] == by_preset["makespan_s"]
    assert main([*argv, "--cost", "preset:llama2-70b/h200/tp8"]) == 2
    assert "no preset 'llama2-70b/h200/tp8'; the presets are llama2-70b/a100/tp2" in capsys.readouterr().err
    assert main([*argv, "--cost", f"table:{tmp_path / 'none.toml'}"]) == 2
    assert "none.toml" in capsys.readouterr().err
    (tmp_path / "half.toml").write_text("[decode]\nbatch = [1]\n")
    assert main([*argv, "--cost", f"table:{tmp_path / 'half.toml'}"]) == 2
    err = capsys.readouterr().err
    assert "[prefill] is missing" in err and "expected paper" not in err  # the file's error, not the grammar
    assert main([*argv, "--cost", "preset:llama2-70b/h100/tp8", "--clients", "200"]) == 2
    assert "up to 128 requests: give an engine at most 128 clients" in capsys.readouterr().err


def test_a_preset_gives_its_price_and_its_models_keys_and_values(capsys) -> None:
    """Engines of a preset cost its price (relative to a DGX-A100) unless an option names one;
    a disaggregated cluster of a preset moves its model's keys and values over its layers."""
    fleet = ["fleet", "--requests", "60", "--arrivals", "poisson:4", "--max-output", "32", "--json"]
    fleet += ["--cost", "preset:llama2-70b/h100/tp8", "--clients", "32", "--engines", "2"]
    assert main(fleet) == 0
    price = preset("llama2-70b/h100/tp8").price
    assert [e["price"] for e in json.loads(capsys.readouterr().out)["engines"]] == [price, price]
    assert main([*fleet[:-4], "--engine", "a:32", "--engine", "b:32:1"]) == 0
    assert [e["price"] for e in json.loads(capsys.readouterr().out)["engines"]] == [price, 1.0]
    plan = [
        "provision",
        "--requests",
        "60",
        "--arrivals",
        "poisson:2",
        "--max-output",
        "32",
        "--clients",
        "32",
    ]
    plan += ["--cost", "preset:llama2-70b/h100/tp8", "--slo-ttft", "50", "--slo-tbt-p99", "5", "--json"]
    assert main([*plan, "--max", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["price_per_hour"] == price  # one engine serves it
    assert main([*plan, "--max", "1", "--mode", "disaggregated"]) == 0
    assert json.loads(capsys.readouterr().out)["price_per_hour"] == 2 * price  # a prompt and a token machine
    bloom = preset("bloom-176b/h100/tp8")
    split = ["simulate", "--requests", "60", "--arrivals", "poisson:2", "--max-output", "32"]
    split += ["--clients", "32", "--cost", "preset:bloom-176b/h100/tp8", "--mode", "disaggregated"]
    assert main(split) == 0
    assert f"{bloom.kv_bytes_per_token:,} bytes a token over {bloom.layers} layers" in capsys.readouterr().out
    assert main([*split, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["kv_bytes_per_token"], out["layers"]) == (bloom.kv_bytes_per_token, bloom.layers)
    assert main([*split, "--kv-bytes-per-token", "1000", "--layers", "10"]) == 0
    assert "1,000 bytes a token over 10 layers" in capsys.readouterr().out


def test_a_fleet_of_presets_at_a_speed_and_fusion_on_a_preset(capsys) -> None:
    """A fleet kind's SPEED scales a table's times; fusion runs on a measured table."""
    argv = ["fleet", "--requests", "200", "--arrivals", "poisson:4", "--max-output", "64", "--json"]
    kinds = ["--engine", "fast:32:2.5", "--engine", "slow:32:1:0.5"]
    assert main([*argv, "--cost", "preset:llama2-70b/h100/tp8", *kinds]) == 0
    assert json.loads(capsys.readouterr().out)["valid"] is True
    run = ["simulate", "--mode", "fusion", "--token-budget", "2048", "--clients", "32", "--json"]
    assert main([*run, "--max-output", "64", "--cost", "preset:bloom-176b/h100/tp8"]) == 0
    assert json.loads(capsys.readouterr().out)["valid"] is True


def test_parse_columns_keeps_an_empty_column_as_none() -> None:
    assert parse_columns("prompt=p, output= ") == {"prompt": "p", "output": None}


def test_cost_fit_on_splitwisesims_file_keeps_one_setup_and_gives_its_preset(tmp_path, capsys) -> None:
    """SplitwiseSim's own file holds twelve setups: fitted whole it is refused, naming --where;
    with --where keeping one, the table is that preset's."""
    data = Path(llmsched.__file__).parent / "data" / "splitwise_perf_model.csv"
    assert main(["cost", "fit", str(data)]) == 2
    assert "holds measurements of 12 setups" in capsys.readouterr().err
    out = tmp_path / "h100.toml"
    where = "model=llama2-70b,hardware=h100-80gb,tensor_parallel=8"
    assert main(["cost", "fit", str(data), "--where", where, "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == 105
    assert TableCostModel.from_toml(out) == replace(preset("llama2-70b/h100/tp8").cost(), name="")
