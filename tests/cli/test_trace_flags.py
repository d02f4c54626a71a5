"""--trace, --requests-csv and --stages-csv on simulate in every mode and on fleet: the files
are what the schedule's own exports write.

The commands call ``schedule.write_chrome_trace(path)``, ``write_requests_csv(path, ...)`` and
``write_stages_csv(path)`` on whatever schedule the run made; a schedule class that does not
offer them yet raises AttributeError, so the tests that write the files are marked to expect
that until every class does (then they pass, and the mark can go).
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from llmsched import LinearCostModel
from llmsched.cli import main
from llmsched.workloads import exegpt_task, prepare

PAPER = LinearCostModel.paper()
LOAD = ["--workload", "exegpt:S", "--requests", "60", "--clients", "8", "--arrivals", "poisson:4"]
TARGETS = ["--slo-ttft", "0.5", "--slo-tbt-mean", "0.05"]


def _workload():
    return prepare(exegpt_task("S", 60, 0), arrivals="poisson:4", seed=0)


def _schedule(mode: str):
    """The run the command makes in ``mode`` (or a fleet of two engines), from the library."""
    import llmsched
    from llmsched.engines.disaggregation.cluster import DisaggregatedCluster
    from llmsched.fleet.engine import Engine
    from llmsched.fleet.simulate import simulate_fleet

    workload = _workload()
    if mode == "competition":
        return llmsched.simulate(workload, PAPER, 8, "fcfs", "prefill-first")
    if mode == "fusion":
        return llmsched.simulate_fusion(workload, PAPER, 8, "fcfs", 512)
    if mode == "disaggregated":
        return llmsched.simulate_disaggregated(
            workload, DisaggregatedCluster(1, 1, PAPER, PAPER, 8, 2621440.0, 25.0)
        )
    return simulate_fleet(workload, [Engine(PAPER, 8)] * 2, "round-robin")


def _argv(mode: str) -> list[str]:
    if mode == "fleet":
        return ["fleet", *LOAD, "--engines", "2"]
    return ["simulate", *LOAD, "--mode", mode]


@pytest.mark.parametrize("mode", ["competition", "fusion", "disaggregated", "fleet"])
def test_the_files_are_the_schedules_exports(mode: str, tmp_path, capsys) -> None:
    """The trace, the request CSV (meets_slo judged against the run's targets) and the stage CSV
    the command writes are, byte for byte, what the run's schedule writes itself; --json
    names them and the text report says where they went."""
    files = {flag: tmp_path / name for flag, name in [("--trace", "t.json"), ("--requests-csv", "r.csv")]}
    files["--stages-csv"] = tmp_path / "s.csv"
    outputs = [item for flag, path in files.items() for item in (flag, str(path))]
    assert main([*_argv(mode), *TARGETS, *outputs, "--json"]) == 0, capsys.readouterr().err
    out = json.loads(capsys.readouterr().out)
    assert (out["trace"], out["requests_csv"], out["stages_csv"]) == tuple(str(p) for p in files.values())
    schedule = _schedule(mode)
    mine = tmp_path / "mine.json"
    schedule.write_chrome_trace(mine)
    trace = json.loads(files["--trace"].read_text())
    assert trace == json.loads(mine.read_text()) and trace["traceEvents"]
    assert files["--requests-csv"].read_text() == schedule.write_requests_csv(
        None, slo_ttft=0.5, slo_tbt=0.05
    )
    assert files["--stages-csv"].read_text() == schedule.write_stages_csv(None)
    requests = pd.read_csv(files["--requests-csv"])
    assert len(requests) == 60 and requests["meets_slo"].mean() == pytest.approx(_attainment(out))
    assert main([*_argv(mode), *outputs]) == 0
    text = capsys.readouterr().out
    assert f"Chrome trace written to {files['--trace']}" in text
    assert f"per-request metrics written to {files['--requests-csv']}" in text
    assert f"per-stage table written to {files['--stages-csv']}" in text


def _attainment(out: dict) -> float:
    return out["summary"]["slo_attainment"] if "summary" in out else out["slo_attainment"]


@pytest.mark.parametrize("mode", ["fusion", "disaggregated", "fleet"])
@pytest.mark.parametrize("flag", ["--trace", "--requests-csv", "--stages-csv"])
def test_an_output_path_is_checked_before_the_run(
    mode: str, flag: str, tmp_path, capsys, monkeypatch
) -> None:
    """In every mode, a folder given for an output file is refused naming the flag before
    anything is simulated."""
    import llmsched
    import llmsched.fleet.simulate
    import llmsched.online.simulate

    def no_work(*args, **kwargs):
        raise AssertionError("the run started")

    for module, name in [
        (llmsched.online.simulate, "simulate_fusion"),
        (llmsched, "simulate_disaggregated"),
        (llmsched.fleet.simulate, "simulate_fleet"),
    ]:
        monkeypatch.setattr(module, name, no_work)
    assert main([*_argv(mode), flag, str(tmp_path)]) == 2
    assert f"llmsched: error: {flag} '{tmp_path}' is a folder" in capsys.readouterr().err


def test_a_config_file_writes_the_outputs_of_a_fused_run(tmp_path, capsys, monkeypatch) -> None:
    """The [output] keys of a config file write a fused run's files as the flags do."""
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "run.toml"
    config.write_text(
        'mode = "fusion"\nclients = 8\n[workload]\nspec = "exegpt:S"\nrequests = 60\narrivals = "poisson:4"\n'
        '[output]\ntrace = "t.json"\nstages_csv = "s.csv"\njson = true\n'
    )
    assert main(["simulate", "--config", str(config)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["trace"] == "t.json" and (tmp_path / "t.json").stat().st_size > 0
    assert (tmp_path / "s.csv").read_text() == _schedule("fusion").write_stages_csv(None)
