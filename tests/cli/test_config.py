"""Experiment configs: the TOML format, its checks, flags over the file, and the JSON echo's round trip."""

from __future__ import annotations

import json
import math
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import llmsched.cli.app as cli
from llmsched import LevelCostModel, LinearCostModel
from llmsched.cli import main
from llmsched.cli.config import (
    MAX_CLIENTS,
    PolicyConfig,
    RunConfig,
    config_from_dict,
    cost_model,
    dump_toml,
    load_config,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "run.toml"
SMALL = ["--workload", "exegpt:S", "--requests", "40", "--clients", "6"]


def _run(capsys, argv: list[str]) -> dict[str, Any]:
    assert main(["simulate", *argv]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_the_example_runs_and_writes_its_outputs(tmp_path, monkeypatch, capsys) -> None:
    """examples/run.toml runs (from the folder its relative output paths land in); what it
    says is what ran: its values echoed in the config, its outputs written."""
    monkeypatch.chdir(tmp_path)
    out = _run(capsys, ["--config", str(EXAMPLE), "--json"])
    assert out["valid"] is True and out["requests"] == 1319 and out["clients"] == 200
    assert (out["request_policy"], out["iteration_policy"], out["predictor"]) == (
        "hybrid",
        "lagrangian",
        "mico",
    )
    assert out["workload_options"]["arrivals"] == "poisson:7"
    assert (out["slo_ttft_s"], out["slo_tbt_s"]) == (5.0, 0.1)
    written = tomllib.loads(EXAMPLE.read_text())
    for section, table in written.items():
        if isinstance(table, dict):
            assert table.items() <= out["config"][section].items(), section
        else:
            assert out["config"][section] == table
    for key in ("trace", "requests_csv", "stages_csv"):
        assert (tmp_path / out[key]).stat().st_size > 0
    trace = json.loads((tmp_path / out["trace"]).read_text())
    assert sum(e["name"].startswith("prefill r") for e in trace["traceEvents"]) == 1319


def test_the_example_as_flags_gives_the_same_run(tmp_path, monkeypatch, capsys) -> None:
    """Every key means what its flag means: the example written as flags (the cost as a
    --cost spec) gives the same figures; only the cost's form in the echo differs."""
    monkeypatch.chdir(tmp_path)
    from_file = _run(capsys, ["--config", str(EXAMPLE), "--json"])
    flags = [
        "--workload", "gsm8k", "--seed", "0", "--arrivals", "poisson:7", "--max-output", "512",
        "--cost", "linear:0.025,0.00013,0.029,0.00021,5000", "--clients", "200", "--predictor", "mico",
        "--request-policy", "hybrid", "--iteration-policy", "lagrangian",
        "--slo-ttft", "5", "--slo-tbt-mean", "0.1", "--json",
    ]  # fmt: skip
    config = tmp_path / "weight.toml"
    _write(config, '[iteration_policy]\nname = "lagrangian"\nttft_weight = 0.5\n')
    from_flags = _run(capsys, ["--config", str(config), *flags])
    for out in (from_file, from_flags):
        del out["config"]
        for key in ("trace", "requests_csv", "stages_csv"):
            out.pop(key, None)
    assert from_flags == from_file


@pytest.mark.parametrize(
    "argv",
    [
        [*SMALL],
        [*SMALL, "--arrivals", "gamma:3,2", "--seed", "4", "--max-prompt", "900", "--rate-scale", "1.5"],
        [*SMALL, "--cost", "levels:500=0.1,2000=0.3;0.02", "--request-policy", "shortest-first-oracle"],
        [*SMALL, "--request-policy", "hybrid", "--predictor", "mico", "--iteration-policy", "lagrangian"],
        [*SMALL, "--iteration-policy", "slo", "--slo-ttft", "0.5", "--slo-tbt-mean", "0.05", "--clairvoyant"],
    ],
)
def test_the_echoed_config_written_as_toml_runs_the_same(argv, tmp_path, capsys) -> None:
    """--json echoes the resolved config; dump_toml of it, run with --config alone, prints the
    same JSON object (figures, outputs and the config itself)."""
    outputs = ["--trace", str(tmp_path / "t.json"), "--stages-csv", str(tmp_path / "s.csv")]
    first = _run(capsys, [*argv, *outputs, "--json"])
    path = _write(tmp_path / "echo.toml", dump_toml(first["config"]))
    again = _run(capsys, ["--config", str(path)])
    assert again == first
    assert load_config(path).as_dict() == first["config"]


def test_policy_parameters_from_the_file_are_used(tmp_path, capsys) -> None:
    """[iteration_policy] parameters reach the policy: threshold k=1 and k=6 schedule differently;
    the echo round-trips them; a flag naming the same policy keeps them, another drops them."""
    results = {}
    for k in (1, 6):
        path = _write(tmp_path / f"k{k}.toml", f'[iteration_policy]\nname = "threshold"\nk = {k}\n')
        results[k] = _run(capsys, ["--config", str(path), *SMALL, "--arrivals", "poisson:20", "--json"])
        assert results[k]["config"]["iteration_policy"] == {"name": "threshold", "k": k}
        echo = _write(tmp_path / "echo.toml", dump_toml(results[k]["config"]))
        assert _run(capsys, ["--config", str(echo)]) == results[k]
    assert results[1]["prefill_stages"] > results[6]["prefill_stages"]
    path = tmp_path / "k6.toml"
    same = _run(capsys, ["--config", str(path), *SMALL, "--iteration-policy", "threshold", "--json"])
    assert same["config"]["iteration_policy"] == {"name": "threshold", "k": 6}
    other = _run(capsys, ["--config", str(path), *SMALL, "--iteration-policy", "lagrangian", "--json"])
    assert other["config"]["iteration_policy"] == {"name": "lagrangian"}


def test_flags_override_the_file(tmp_path, capsys) -> None:
    """A flag given on the command line wins over the file, booleans included (--no-json)."""
    path = _write(
        tmp_path / "run.toml",
        'clients = 3\nclairvoyant = true\n[workload]\nspec = "exegpt:S"\nrequests = 30\n'
        '[request_policy]\nname = "hybrid-oracle"\n[output]\njson = true\n',
    )
    out = _run(capsys, ["--config", str(path)])
    assert (out["clients"], out["requests"], out["clairvoyant"]) == (3, 30, True)
    out = _run(capsys, ["--config", str(path), "--clients", "5", "--no-clairvoyant", "--requests", "12"])
    assert (out["clients"], out["requests"], out["clairvoyant"]) == (5, 12, False)
    assert out["config"]["workload"]["spec"] == "exegpt:S"
    assert main(["simulate", "--config", str(path), "--no-json"]) == 0
    assert capsys.readouterr().out.startswith("Workload(")


def test_the_slo_rule_serves_the_files_target(tmp_path, capsys) -> None:
    """As with --slo-ttft, [slo] ttft is the target the slo rule serves (a tighter one gives a
    lower p99 TTFT), unless the rule's own slo_ttft parameter is given."""
    p99 = {}
    for target in (0.05, 5.0):
        path = _write(tmp_path / "slo.toml", f'iteration_policy = "slo"\n[slo]\nttft = {target}\n')
        p99[target] = _run(capsys, ["--config", str(path), *SMALL, "--arrivals", "poisson:4", "--json"])
    assert p99[0.05]["ttft_p99_s"] < p99[5.0]["ttft_p99_s"]
    own = _write(
        tmp_path / "own.toml", '[iteration_policy]\nname = "slo"\nslo_ttft = 5.0\n[slo]\nttft = 0.05\n'
    )
    mine = _run(capsys, ["--config", str(own), *SMALL, "--arrivals", "poisson:4", "--json"])
    assert mine["ttft_p99_s"] == p99[5.0]["ttft_p99_s"]


LINEAR = "[cost]\nkind = 'linear'\ndecode_base = 1\ndecode_per_client = 0\n"
LAGRANGIAN = "[iteration_policy]\nname = 'lagrangian'\n"
BAD = [
    ("clients = 0\n", "clients must be at least 1, got 0"),
    ('clients = "8"\n', "clients must be an integer, got str '8'"),
    ("clients = 2.0\n", "clients must be an integer, got float 2.0"),
    (f"clients = {MAX_CLIENTS + 1}\n", "clients must be at most 1,000,000, got 1,000,001"),
    ("client = 8\n", r"unknown key 'client' \(did you mean 'clients'\?\)"),
    ("[workload]\nsede = 1\n", r"unknown key 'workload.sede' \(did you mean 'seed'\?\)"),
    ("[workload]\nseed = -1\n", "workload.seed must be an integer >= 0"),
    ("[workload]\nrate_scale = 0\n", r"workload.rate_scale must be a finite number > 0, got 0"),
    ("[workload]\nmax_prompt = true\n", "workload.max_prompt must be an integer, got bool True"),
    ('[workload]\narrivals = "poisson"\n', "workload.arrivals: unknown arrivals 'poisson'"),
    ("[workload]\nreplace_arrivals = true\n", r"replace_arrivals=True \(--replace-arrivals\) needs"),
    ("workload = 3\n", "workload must be a table, got int 3"),
    ("[cost]\nkind = 'quadratic'\n", r"cost.kind must be one of \['context', 'levels', 'linear', 'paper'\]"),
    ("[cost]\nkind = 'paper'\nprefill_base = 1.0\n", r"unknown key 'cost.prefill_base'; expected"),
    ("[cost]\nkind = 'linear'\nprefill_base = 1.0\n", "cost.prefill_per_token is missing: a linear"),
    (LINEAR + "prefill_base = 'a'\nprefill_per_token = 0\n", "cost.prefill_base must be a finite number"),
    (LINEAR + "prefill_base = 0\nprefill_per_token = 0\n", "cost: a prefill stage must take some time"),
    ("[cost]\nkind = 'levels'\nlevels = [[100, 0.1]]\n", "cost.decode_token_time is missing"),
    (
        "[cost]\nkind = 'levels'\nlevels = [[100]]\ndecode_token_time = 0.1\n",
        r"cost.levels\[0\] must be a \[tokens, seconds\] pair, got \[100\]",
    ),
    (
        "[cost]\nkind = 'levels'\nlevels = [[200, 0.2], [100, 0.1]]\ndecode_token_time = 0.1\n",
        "cost: level capacities must be positive and strictly increasing",
    ),
    ("cost = 'linear:1,2'\n", r"cost: bad cost model 'linear:1,2': linear needs 4 or 5"),
    ("request_policy = 'sjf'\n", "request_policy: unknown request policy 'sjf'"),
    ("[request_policy]\ninitial = 'offline'\n", "request_policy.name is missing"),
    (
        LAGRANGIAN + "weight = 1.0\n",
        "iteration_policy: iteration policy 'lagrangian' has no parameter 'weight'",
    ),
    (LAGRANGIAN + "ttft_weight = -1.0\n", "iteration_policy: ttft_weight must be"),
    ("[iteration_policy]\nname = 'threshold'\nk = {a = 1}\n", "k must be a string, number, boolean or"),
    ("predictor = 'psychic'\n", "unknown predictor 'psychic'"),
    ("predictor = 'mico'\nrequest_policy = 'hybrid-oracle'\n", "'hybrid-oracle' plans with the true"),
    ("[slo]\nttft = -1.0\n", r"slo.ttft must be a finite number > 0, got -1.0"),
    ("[slo]\nttft = inf\n", r"slo.ttft must be a finite number > 0, got inf"),
    ("[slo]\nlatency = 1.0\n", r"unknown key 'slo.latency'; expected one of \['tbt_mean', 'ttft'\]"),
    ("[output]\njson = 'yes'\n", "output.json must be True or False, got str 'yes'"),
    ("[output]\ntrace = 3\n", "output.trace must be a str, got int 3"),
    ("[output]\ntrace = '/nonexistent-folder/t.json'\n", "output.trace '/nonexistent-folder/t.json': folder"),
    ("[output]\nrequests_csv = '.'\n", "output.requests_csv '.' is a folder; give a file such as"),
    ("[output]\nplot = 'g.docx'\n", "output.plot: --plot 'g.docx': unknown image format 'docx'"),
    ("workload = 'nope'\n", "workload.spec: unknown workload 'nope'"),
    ("clients = \n", "is not valid TOML"),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_bad_configs_name_the_file_and_the_key_before_any_work(
    text, message, tmp_path, capsys, monkeypatch
) -> None:
    """Unknown keys, wrong types, bad values and bad combinations: exit 2 with an error that
    starts with the file and names the key, and nothing is simulated."""

    def no_work(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the run started")

    monkeypatch.setattr(sys.modules["llmsched.online.simulate"], "simulate", no_work)
    path = _write(tmp_path / "run.toml", text)
    assert main(["simulate", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"llmsched: error: {path}: ") or f"config {str(path)!r}" in err, err
    assert re.search(message, err), err


def test_a_config_that_is_not_there_or_a_folder(tmp_path, capsys) -> None:
    """A missing file or a folder given as --config is named in the error."""
    assert main(["simulate", "--config", str(tmp_path / "none.toml")]) == 2
    assert f"config '{tmp_path / 'none.toml'}' does not exist" in capsys.readouterr().err
    assert main(["simulate", "--config", str(tmp_path)]) == 2
    assert f"config '{tmp_path}' is a folder" in capsys.readouterr().err


def test_a_flag_error_is_not_blamed_on_the_file(tmp_path, capsys) -> None:
    """A bad --trace path given as a flag over a config file is named by its flag."""
    path = _write(tmp_path / "run.toml", "clients = 4\n")
    assert main(["simulate", "--config", str(path), "--trace", "/nonexistent-folder/t.json"]) == 2
    err = capsys.readouterr().err
    assert "llmsched: error: --trace '/nonexistent-folder/t.json': folder" in err and str(path) not in err


def test_cost_tables_build_the_models() -> None:
    """kind = paper, linear and levels build the models their flags' specs build."""
    assert cost_model({"kind": "paper"}) == LinearCostModel.paper() == cli.parse_cost("paper")
    linear = {
        "kind": "linear",
        "prefill_base": 0.025,
        "prefill_per_token": 0.00013,
        "decode_base": 0.029,
        "decode_per_client": 0.00021,
    }
    assert cost_model(linear) == cli.parse_cost("linear:0.025,0.00013,0.029,0.00021")
    context = {**linear, "kind": "context", "prefill_per_square": 2e-9, "decode_per_context": 2e-7}
    assert cost_model(context) == cli.parse_cost("context:0.025,0.00013,2e-9,0.029,0.00021,2e-7")
    with pytest.raises(ValueError, match=r"cost\.decode_per_context is missing: a context cost model needs"):
        cost_model({**linear, "kind": "context", "prefill_per_square": 0.0})
    levels = {"kind": "levels", "levels": [[1000, 0.155], [5000, 0.675]], "decode_token_time": 0.071}
    assert cost_model(levels) == LevelCostModel([(1000, 0.155), (5000, 0.675)], 0.071)
    assert cost_model(levels) == cli.parse_cost("levels:1000=0.155,5000=0.675;0.071")


def test_run_config_checks_itself_and_round_trips() -> None:
    """RunConfig's defaults are the flags'; a bad field is refused by name; as_dict read back
    by config_from_dict gives an equal config; policy parameters are read-only."""
    assert RunConfig() == config_from_dict({})
    assert MAX_CLIENTS == cli.MAX_CLIENTS
    config = config_from_dict(
        {
            "workload": "exegpt:T",
            "cost": {"kind": "levels", "levels": [[100, 0.1]], "decode_token_time": 0.01},
            "request_policy": {"name": "sorted-preemptive", "initial": "round-robin", "sizes": "oracle"},
            "slo": {"tbt_mean": 0.2},
        }
    )
    assert config.workload == "exegpt:T" and config.request_policy.params == {
        "initial": "round-robin",
        "sizes": "oracle",
    }
    assert config_from_dict(config.as_dict()) == config
    assert config_from_dict(tomllib.loads(dump_toml(config))) == config
    with pytest.raises(TypeError):
        config.request_policy.params["sizes"] = "predicted"  # type: ignore[index]
    with pytest.raises(ValueError, match="clients must be at least 1, got 0"):
        RunConfig(clients=0)
    with pytest.raises(ValueError, match="params may not hold 'name'"):
        PolicyConfig("fcfs", {"name": "x"})
    with pytest.raises(ValueError, match=r"my\.toml: unknown key 'x'"):
        config_from_dict({"x": 1}, source="my.toml")


def test_dump_toml_writes_what_tomllib_reads() -> None:
    """Escapes, quoted keys, floats to the bit, infinities, nested tables and arrays; None left out."""
    data = {
        "name": 'a "quoted" \\ back\nslash\t\x01\x7f é',
        "weird key": 1,
        "floats": [0.1, 1e-300, 1e300, -0.0, math.inf, -math.inf, 2.5e16],
        "pairs": [[100, 0.155], [5000, 0.675]],
        "flag": False,
        "unset": None,
        "table": {"inner": {"x": 1}, "y": "z", "gone": None},
        "empty": {},
    }
    text = dump_toml(data)
    back = tomllib.loads(text)
    expected = {k: v for k, v in data.items() if k != "unset"}
    expected["table"] = {"inner": {"x": 1}, "y": "z"}
    assert back == expected
    assert str(back["floats"][3]) == "-0.0"
    with pytest.raises(TypeError, match="cannot write"):
        dump_toml({"x": object()})


_keys = st.text(min_size=0, max_size=8)
_scalars = st.one_of(
    st.text(max_size=12),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.booleans(),
)
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3), max_leaves=6)
_tables = st.recursive(
    st.dictionaries(_keys, _values, max_size=4),
    lambda inner: st.dictionaries(_keys, st.one_of(_values, inner), max_size=4),
    max_leaves=8,
)


@given(_tables)
def test_dump_toml_round_trips_any_table(data) -> None:
    """tomllib.loads(dump_toml(d)) == d for tables of strings, 64-bit integers, floats
    (infinities included), booleans and arrays of them, nested."""
    assert tomllib.loads(dump_toml(data)) == data
