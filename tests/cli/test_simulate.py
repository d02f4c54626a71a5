"""``llmsched simulate`` (llmsched.cli.simulate): one report for every mode, from the
schedule's own figures."""

from __future__ import annotations

import json

import pytest

from llmsched.cli import main
from llmsched.cli.config import RunConfig
from llmsched.cli.simulate import OPTIONS

BASE = ["simulate", "--workload", "exegpt:S", "--requests", "60", "--clients", "8", "--arrivals", "poisson:4"]
MODES = {
    "competition": [],
    "fusion": ["--mode", "fusion", "--token-budget", "128"],
    "disaggregated": ["--mode", "disaggregated", "--token-machines", "2"],
}


def test_run_config_is_the_declarations() -> None:
    """RunConfig's fields are simulate's declared options, in order, with their defaults;
    it lives where it has always been imported from."""
    import dataclasses

    fields = dataclasses.fields(RunConfig)
    assert [f.name for f in fields] == [option.name for option in OPTIONS]
    assert RunConfig.__module__ == "llmsched.cli.config"
    config = RunConfig()
    assert all(getattr(config, option.name) == option.default for option in OPTIONS)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_mode_reports_the_same_keys(mode: str, capsys) -> None:
    """--json holds the workload's preparation, the policies, the schedule's summary, the bound,
    the validity and the config in every mode (the bound's parts where the mode has them)."""
    assert main([*BASE, *MODES[mode], "--slo-ttft", "0.5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    head = ["workload", "workload_options", "prompts_clipped", "outputs_clipped", "predictions_clipped"]
    head += ["predictor", "request_policy", "iteration_policy", "clairvoyant", "oracle_lengths"]
    assert list(out)[: len(head)] == head
    for key in (
        "makespan_s",
        "ttft_p99_s",
        "tbt_p99_s",
        "goodput_rps",
        "lower_bound_s",
        "gap_to_lb",
        "config",
    ):
        assert key in out, key
    assert out["valid"] and out["makespan_s"] >= out["lower_bound_s"] and out["slo_ttft_s"] == 0.5
    assert ("lower_bounds" in out) == (mode == "competition")
    assert out["config"]["mode"] == mode


@pytest.mark.parametrize(
    ("mode", "lines"),
    [
        ("competition", ["strong lower bound", "utilization", "goodput", "valid         True"]),
        ("fusion", ["fused (chunked prefill, 128 tokens", "the engine busy", "iterations", "goodput"]),
        ("disaggregated", ["2 token machines", "KV transfer", "prompt pool", "stages", "goodput"]),
    ],
)
def test_the_text_report_shows_what_the_summary_holds(mode: str, lines: list[str], capsys) -> None:
    """The text report prints a line for each figure the mode's summary holds."""
    assert main([*BASE, *MODES[mode]]) == 0
    text = capsys.readouterr().out
    for line in lines:
        assert line in text, line
    assert ("KV transfer" in text) == (mode == "disaggregated")
    assert ("mixing decode and prompt chunks" in text) == (mode == "fusion")


def test_a_fused_run_plans_with_a_predictor(capsys) -> None:
    """--predictor applies to a fused engine's request policy as to a competition engine's,
    and the report says so."""
    argv = [*BASE, *MODES["fusion"], "--request-policy", "shortest-first", "--predictor", "mico"]
    assert main(argv) == 0
    assert "predictor     mico" in capsys.readouterr().out
    assert main([*BASE, *MODES["fusion"], "--request-policy", "shortest-first"]) == 2
    assert "no predicted_output" in capsys.readouterr().err
