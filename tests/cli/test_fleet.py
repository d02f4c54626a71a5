"""``llmsched fleet`` (llmsched.cli.fleet): the load's options, the modes, the config file."""

from __future__ import annotations

import json

from llmsched import LinearCostModel, TTFTAdmission
from llmsched.cli import main
from llmsched.fleet.engine import Engine
from llmsched.fleet.simulate import simulate_fleet
from llmsched.workloads import exegpt_task, prepare
from tests.cli import config_runs_as_flags, json_report

PAPER = LinearCostModel.paper()
BASE = ["fleet", "--workload", "exegpt:S", "--requests", "80", "--clients", "8", "--engines", "2"]


def test_the_load_options_reach_the_fleet(capsys) -> None:
    """--arrivals, --rate-scale and --max-output prepare the load as for simulate: the summary
    is the library's fleet on that workload."""
    out = json_report(capsys, [*BASE, "--arrivals", "poisson:5", "--rate-scale", "2", "--max-output", "20"])
    workload = prepare(exegpt_task("S", 80, 0), arrivals="poisson:5", rate_scale=2.0, max_output=20, seed=0)
    fleet = simulate_fleet(workload, [Engine(PAPER, 8)] * 2, "round-robin")
    assert out["summary"] == json.loads(json.dumps(fleet.summary(), default=float))


def test_mode_fusion_runs_fused_engines_and_a_cluster_is_refused(capsys) -> None:
    """--mode fusion makes every engine fused (at --token-budget); a fleet cannot be a
    disaggregated cluster, and says which commands run one."""
    out = json_report(capsys, [*BASE, "--arrivals", "poisson:5", "--mode", "fusion", "--token-budget", "64"])
    workload = prepare(exegpt_task("S", 80, 0), arrivals="poisson:5", seed=0)
    fused = simulate_fleet(workload, [Engine(PAPER, 8, mode="fusion", token_budget=64)] * 2, "round-robin")
    assert out["summary"]["makespan_s"] == fused.makespan and out["valid"]
    assert main([*BASE, "--mode", "disaggregated"]) == 2
    assert "simulate, sweep and provision run a disaggregated cluster" in capsys.readouterr().err


def test_a_config_file_names_the_engines(tmp_path, capsys) -> None:
    """Engine kinds, the router and the load from a file give the run the flags give; a flag
    overrides the file; the file's clients beside its kinds are refused, as the flag is."""
    flags = ["fleet", "--workload", "exegpt:S", "--requests", "80", "--arrivals", "poisson:5"]
    flags += ["--engine", "a:8:1", "--engine", "b:4:0.5", "--router", "jsq", "--slo-ttft", "0.5"]
    toml = (
        'engine = ["a:8:1", "b:4:0.5"]\nrouter = "jsq"\n[workload]\nspec = "exegpt:S"\nrequests = 80\n'
        'arrivals = "poisson:5"\n[slo]\nttft = 0.5\n'
    )
    path = config_runs_as_flags(capsys, tmp_path, flags, toml)
    other = json_report(capsys, ["fleet", "--config", str(path), "--router", "round-robin"])
    assert other["summary"]["router"] == "round-robin"
    path.write_text('engine = ["a:8"]\nclients = 4\n')
    assert main(["fleet", "--config", str(path)]) == 2
    assert "--clients applies only without --engine" in capsys.readouterr().err


def test_engines_with_memory_preempt_and_the_fleet_validates(capsys) -> None:
    """--memory gives every engine a KV cache of that many blocks, in any mode: the fleet is
    valid, its summary counts the preemptions; backoff with memory is refused before work."""
    argv = [*BASE, "--arrivals", "poisson:8", "--router", "jsq", "--memory", "250", "--block-size", "4"]
    for mode in (["--mode", "vllm"], ["--mode", "fusion"], []):
        assert main([*argv, *mode, "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["valid"] and out["summary"]["preemptions"] > 0, mode
    assert main([*argv, "--mode", "vllm"]) == 0
    assert "preemptions" in capsys.readouterr().out
    assert main([*argv, "--backoff"]) == 2
    assert "without backoff or without memory" in capsys.readouterr().err


def test_admission_turns_requests_away_and_the_report_counts_them(capsys) -> None:
    """--admission-ttft (and its per-token part and margin) give the fleet the library's
    TTFTAdmission: the summary is the library's, its rejected counted; a margin without a
    target is refused before work."""
    argv = [
        *BASE,
        "--arrivals",
        "poisson:40",
        "--admission-ttft",
        "0.5",
        "--admission-ttft-per-token",
        "0.001",
    ]
    out = json_report(capsys, [*argv, "--admission-margin", "0.8"])
    workload = prepare(exegpt_task("S", 80, 0), arrivals="poisson:40", seed=0)
    fleet = simulate_fleet(
        workload, [Engine(PAPER, 8)] * 2, "round-robin", admission=TTFTAdmission(0.5, 0.001, 0.8)
    )
    assert out["valid"] and out["summary"] == json.loads(json.dumps(fleet.summary(), default=float))
    assert out["summary"]["rejected"] == int(fleet.rejected.sum()) > 0 and out["info"]["admission"] == "ttft"
    assert main(argv) == 0
    assert "turned away by admission" in capsys.readouterr().out
    assert main([*BASE, "--admission-margin", "0.8"]) == 2
    assert "--admission-margin needs --admission-ttft" in capsys.readouterr().err
