"""``llmsched provision`` (llmsched.cli.provision): the rate scale, the p99 target, the modes,
the config file."""

from __future__ import annotations

import pytest

from llmsched import LinearCostModel
from llmsched.cli import main
from llmsched.fleet.engine import Engine
from llmsched.fleet.provision import provision
from llmsched.workloads import exegpt_task, prepare
from tests.cli import config_runs_as_flags, json_report

PAPER = LinearCostModel.paper()
BASE = ["provision", "--workload", "exegpt:S", "--requests", "100", "--arrivals", "poisson:6"]
BASE += ["--max", "3", "--slo-ttft", "1", "--slo-tbt-p99", "0.2", "--no-progress"]


def _report(capsys, argv: list[str]) -> dict:
    return json_report(capsys, argv, ok=(0, 1))


def _library(rate_scale: float, mode: str = "competition") -> dict:
    workload = prepare(exegpt_task("S", 100, 0), arrivals="poisson:6", rate_scale=rate_scale, seed=0)
    result = provision(workload, [Engine(PAPER, 200, name="engine", mode=mode)], 3, slo_ttft=1.0, slo_tbt=0.2)
    return {"counts": result.counts, "rows": result.frame().to_dict(orient="records")}


def test_the_rate_scale_really_scales_the_load(capsys) -> None:
    """--rate-scale 3 searches for the load replayed three times as fast: the library's search
    on that workload, and a different load from the trace's own rate."""
    scaled = _report(capsys, [*BASE, "--rate-scale", "3"])
    plain = _report(capsys, BASE)
    assert {"counts": scaled["counts"], "rows": scaled["rows"]} == _library(3.0)
    assert {"counts": plain["counts"], "rows": plain["rows"]} == _library(1.0)
    assert scaled["rows"] != plain["rows"]
    assert scaled["rows"][0]["tokens_per_cost"] == pytest.approx(
        3 * plain["rows"][0]["tokens_per_cost"], rel=0.05
    )


def test_the_tbt_target_is_a_p99(capsys) -> None:
    """--slo-tbt-p99 bounds the p99 of every gap between tokens: a configuration meets the
    targets exactly when its p99 TTFT and p99 TBT are within them."""
    out = _report(capsys, BASE)
    for row in out["rows"]:
        assert row["meets_targets"] == (row["ttft_p99_s"] <= 1.0 and row["tbt_p99_s"] <= 0.2)
    assert out["feasible"] and out["tbt_p99_s"] <= 0.2
    assert main([*BASE, "--slo-tbt-mean", "0.2"]) == 2
    assert "unrecognized arguments: --slo-tbt-mean" in capsys.readouterr().err


def test_mode_fusion_provisions_fused_engines(capsys) -> None:
    """--mode fusion searches a fleet of fused engines (the library's search with fused kinds);
    --mode disaggregated sizes the two pools."""
    fused = _report(capsys, [*BASE, "--mode", "fusion"])
    assert {"counts": fused["counts"], "rows": fused["rows"]} == _library(1.0, "fusion")
    pools = _report(capsys, [*BASE[:-5], "--max", "2,2", "--slo-ttft", "1", "--mode", "disaggregated"])
    assert set(pools["counts"]) == {"prompt", "token"} and pools["grid"] == 9


def test_a_config_file_runs_the_search_its_flags_run(tmp_path, capsys) -> None:
    """Kinds, targets and the load from a file give the search the flags give."""
    flags = [*BASE, "--kind", "a:32:1", "--kind", "b:16:0.6"]
    toml = (
        'kind = ["a:32:1", "b:16:0.6"]\nmax = [3]\n[workload]\nspec = "exegpt:S"\nrequests = 100\n'
        'arrivals = "poisson:6"\n[slo]\nttft = 1.0\ntbt_p99 = 0.2\n[output]\nprogress = false\n'
    )
    path = config_runs_as_flags(capsys, tmp_path, flags, toml, ok=(0, 1))
    path.write_text('kind = ["a:32:1"]\nclients = 8\n')
    assert main(["provision", "--config", str(path), "--slo-ttft", "1"]) == 2
    assert "--clients applies only without --kind" in capsys.readouterr().err


def test_engines_with_memory_are_provisioned_with_it(capsys) -> None:
    """--memory gives every engine kind of the search its KV cache: the library's search with
    that memory; a memory too small for a request is refused before work."""
    from llmsched.core.memory import KVMemory

    out = _report(capsys, [*BASE, "--clients", "200", "--memory", "400", "--block-size", "4"])
    workload = prepare(exegpt_task("S", 100, 0), arrivals="poisson:6", seed=0)
    engine = Engine(PAPER, 200, name="engine", memory=KVMemory(400, 4))
    result = provision(workload, [engine], 3, slo_ttft=1.0, slo_tbt=0.2)
    assert {"counts": out["counts"], "rows": out["rows"]} == {
        "counts": result.counts,
        "rows": result.frame().to_dict(orient="records"),
    }
    assert main([*BASE, "--memory", "3"]) == 2
