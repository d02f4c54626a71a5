"""``llmsched sweep`` (llmsched.cli.sweep): every mode, the config file, the refusals."""

from __future__ import annotations

import math

import pytest

from llmsched import LinearCostModel
from llmsched.cli import main
from llmsched.cli.sweep import SweepConfig
from llmsched.experiments.sweep import sweep
from llmsched.workloads import exegpt_task, prepare
from tests.cli import config_runs_as_flags, json_report

PAPER = LinearCostModel.paper()
BASE = ["sweep", "--workload", "exegpt:S", "--requests", "60", "--clients", "8", "--arrivals", "poisson:3"]
BASE += ["--rates", "0.5,1", "--jobs", "1", "--no-progress"]


def _rows(frame) -> list[dict]:
    return [
        {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}
        for row in frame.to_dict(orient="records")
    ]


def _workload():
    return prepare(exegpt_task("S", 60, 0), arrivals="poisson:3", seed=0)


def test_mode_fusion_runs_a_fused_engine(capsys) -> None:
    """--mode fusion sweeps request policies (fcfs by default) on a fused engine of
    --token-budget: the rows are the library's fused sweep."""
    out = json_report(capsys, [*BASE, "--mode", "fusion", "--token-budget", "128"])
    frame = sweep(
        _workload(), PAPER, 8, ["fcfs"], [0.5, 1.0], progress=False, mode="fusion", token_budget=128
    )
    assert out["mode"] == "fusion" and out["policies"] == ["fcfs"] and out["rows"] == _rows(frame)
    assert all(row["iteration_policy"] is None for row in out["rows"])
    competition = json_report(capsys, BASE)
    assert competition["rows"][1]["makespan_s"] != out["rows"][1]["makespan_s"]
    assert main([*BASE, "--mode", "fusion", "--policy", "fcfs", "--policy", "longest-first-oracle"]) == 0
    text = capsys.readouterr().out
    assert "4 cases" in text and "longest-first-oracle" in text


def test_mode_disaggregated_runs_the_cluster_its_flags_describe(capsys) -> None:
    """--mode disaggregated sweeps a cluster of --prompt-machines and --token-machines: one row
    per rate, the library's, fcfs by default; a policy pair is refused (a cluster has no
    iteration policy)."""
    from llmsched.engines.disaggregation.cluster import DisaggregatedCluster

    flags = ["--mode", "disaggregated", "--prompt-machines", "2", "--kv-bandwidth", "10"]
    out = json_report(capsys, [*BASE, *flags])
    cluster = DisaggregatedCluster(2, 1, PAPER, PAPER, 8, 2621440.0, 10.0)
    frame = sweep(
        _workload(), PAPER, 8, ["fcfs"], [0.5, 1.0], progress=False, mode="disaggregated", cluster=cluster
    )
    assert out["policies"] == ["fcfs"] and out["rows"] == _rows(frame)
    assert main([*BASE, *flags, "--policy", "fcfs/prefill-first"]) == 2
    assert "a fused engine or a cluster has no iteration policy" in capsys.readouterr().err


def test_a_config_file_runs_the_sweep_its_flags_run(tmp_path, capsys) -> None:
    """The sweep's keys in a file (policies, rates, targets, the workload's table) give the
    report the flags give; a flag overrides the file."""
    flags = [
        "--policy",
        "fcfs/prefill-first",
        "--policy",
        "hybrid-oracle/lagrangian",
        "--slo-tbt-mean",
        "0.05",
    ]
    toml = (
        'clients = 8\npolicy = ["fcfs/prefill-first", "hybrid-oracle/lagrangian"]\nrates = [0.5, 1.0]\n'
        'jobs = 1\n[workload]\nspec = "exegpt:S"\nrequests = 60\narrivals = "poisson:3"\n'
        "[slo]\ntbt_mean = 0.05\n[output]\nprogress = false\n"
    )
    path = config_runs_as_flags(capsys, tmp_path, [*BASE, *flags], toml)
    assert json_report(capsys, ["sweep", "--config", str(path), "--rates", "2"])["rates"] == [2.0]
    with pytest.raises(ValueError, match=r"sweep.toml: unknown key 'rate' \(did you mean 'rates'\?\)"):
        path.write_text("rate = [1.0]\n")
        from llmsched.cli.config import load_config

        load_config(path, SweepConfig)


def test_the_rate_scale_compresses_the_arrivals_before_the_multipliers(capsys) -> None:
    """--rate-scale 2 replays the trace twice as fast: its rows at multiplier 0.5 are the
    plain sweep's rows at multiplier 1."""
    scaled = json_report(capsys, [*BASE, "--rate-scale", "2"])
    plain = json_report(capsys, BASE)
    assert scaled["rate_scale"] == 2.0
    for key in ("makespan_s", "ttft_p99_s", "offered_rps"):
        assert scaled["rows"][0][key] == pytest.approx(plain["rows"][1][key], rel=1e-12), key
    # The text says the rates multiply the replayed rate (its column shows the multiplier alone).
    assert main([*BASE, "--rate-scale", "2"]) == 0
    assert "replayed at 2x its rate; each rate multiplies the replayed rate" in capsys.readouterr().out


def test_a_real_engine_sweep_recommends_a_policy_at_each_rate(capsys) -> None:
    """--mode orca with a memory of blocks and three policies under targets: the table, the
    preemptions column when the memory ran out, and the best policy at each rate by goodput,
    which is one of the table's rows with the most goodput at that rate."""
    argv = [*BASE, "--mode", "orca", "--memory", "150", "--block-size", "4", "--predictor", "oracle"]
    argv += ["--policy", "fcfs", "--policy", "shortest-first", "--policy", "longest-first"]
    assert main([*argv, "--slo-ttft", "1", "--slo-tbt-mean", "0.2"]) == 0
    text = capsys.readouterr().out
    assert "best policy at each rate" in text
    best = [line for line in text.splitlines() if line.startswith("  x")]
    assert [line.split()[0] for line in best] == ["x0.5", "x1"]
    rows = json_report(capsys, [*argv, "--slo-ttft", "1", "--slo-tbt-mean", "0.2"])["rows"]
    for line in best:
        rate = float(line.split()[0][1:])
        top = max(row["goodput_rps"] for row in rows if row["rate_scale"] == rate)
        chosen = line.split(": ")[1].split(",")[0]
        row = next(r for r in rows if r["rate_scale"] == rate and r["request_policy"] == chosen)
        assert row["goodput_rps"] == top
    # Targets no policy meets: none is recommended.
    assert main([*argv, "--slo-ttft", "1e-6", "--slo-tbt-mean", "1e-6"]) == 0
    best = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  x")]
    assert len(best) == 2 and all("no policy serves a request within the targets" in line for line in best)


def test_a_sweep_of_the_papers_engine_takes_a_memory(capsys) -> None:
    """--memory in competition mode: each row counts its preemptions; a disaggregated sweep
    gives it to the token machines, with --max-output-tokens."""
    argv = [*BASE, "--memory", "150", "--block-size", "4"]
    rows = json_report(capsys, argv)["rows"]
    assert any(row["preemptions"] > 0 for row in rows)
    cluster = [*BASE, "--mode", "disaggregated", "--policy", "fcfs", "--memory", "400", "--block-size", "16"]
    assert main(cluster) == 2
    assert "give max_output_tokens" in capsys.readouterr().err
    assert len(json_report(capsys, [*cluster, "--max-output-tokens", "2048"])["rows"]) == 2
