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
    "vllm": ["--mode", "vllm", "--max-num-batched-tokens", "4096", "--memory", "400", "--block-size", "8"],
    "sarathi": ["--mode", "sarathi", "--max-num-batched-tokens", "256"],
    "orca": ["--mode", "orca", "--max-num-batched-tokens", "1024", "--memory", "400"],
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


def test_a_real_engine_with_memory_reports_its_preemptions(capsys) -> None:
    """vLLM in a memory too small for the load preempts; the report says how often, what was
    recomputed and the most blocks in use, and --json carries the counts."""
    argv = [*BASE, "--mode", "vllm", "--memory", "300", "--block-size", "4"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "vllm (prefill first, at most 2048 prompt tokens an iteration, 1,200 tokens of KV cache)" in text
    assert "KV memory" in text and "of 300 blocks in use" in text
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] and out["preemptions"] > 0 and out["recomputed_tokens"] > 0
    assert out["config"]["memory"] == 300


def test_a_csv_of_ones_own_column_names_and_a_presets_memory(tmp_path, capsys) -> None:
    """--columns reads a CSV of other names (date-time arrivals); --memory preset is the
    --cost preset's machine; either without the other is refused with what to give."""
    path = tmp_path / "mine.csv"
    path.write_text(
        "when,input_len,output_len,user\n"
        "2024-03-01 10:00:00.000,512,100,a\n2024-03-01 10:00:00.250,1024,20,b\n2024-03-01 10:00:01,80,300,c\n"
    )
    columns = "prompt_tokens=input_len,output_tokens=output_len,arrival=when"
    argv = ["simulate", "--workload", f"csv:{path}", "--columns", columns, "--clients", "16", "--json"]
    assert main([*argv, "--cost", "preset:llama2-70b/h100/tp8", "--mode", "vllm", "--memory", "preset"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["requests"] == 3 and out["valid"] and out["preemptions"] == 0
    assert main([*argv, "--mode", "vllm", "--memory", "preset"]) == 2
    assert "--memory preset takes the memory of a measured machine" in capsys.readouterr().err
    assert main(["simulate", "--workload", "gsm8k", "--columns", columns]) == 2
    assert "--columns names the columns of a csv:PATH workload" in capsys.readouterr().err


@pytest.mark.parametrize(
    "mode", [[], ["--mode", "fusion", "--token-budget", "256"]], ids=["competition", "fusion"]
)
def test_the_papers_engines_take_a_memory_too(capsys, mode) -> None:
    """--memory works in competition and fusion as in the real engines: preemptions counted,
    the schedule valid; a disaggregated cluster's token machines take it with
    --max-output-tokens (the reservation of each request), and refuse it without."""
    argv = [*BASE, *mode, "--memory", "300", "--block-size", "4", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] and out["preemptions"] > 0 and out["config"]["memory"] == 300
    cluster = [*BASE, "--mode", "disaggregated", "--memory", "3000", "--block-size", "4"]
    assert main(cluster) == 2
    assert "give max_output_tokens" in capsys.readouterr().err
    assert main([*cluster, "--max-output-tokens", "2048", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] and out["config"]["max_output_tokens"] == 2048
    assert main([*cluster, "--memory", "300", "--max-output-tokens", "2048"]) == 2
    assert "more than a token machine's token_memory of 300" in capsys.readouterr().err
    plain = [*BASE, "--mode", "disaggregated"]
    assert main([*plain, "--max-output-tokens", "2048"]) == 2
    assert "--max-output-tokens applies only with --memory" in capsys.readouterr().err
    assert main([*plain, "--block-size", "4"]) == 2
    assert "--block-size applies only with --memory" in capsys.readouterr().err


def test_a_cluster_lends_busy_token_machines_past_a_backlog(capsys) -> None:
    """--lend-busy-above with --mixed-pool reaches the cluster: stages run on token machines,
    the schedule is valid; without --mixed-pool it is refused before work, naming it."""
    argv = [*BASE, "--mode", "disaggregated", "--token-machines", "2", "--arrivals", "poisson:20"]
    argv += ["--requests", "120", "--prompt-batch-tokens", "512", "--json"]
    assert main([*argv, "--mixed-pool", "--lend-busy-above", "0"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (
        out["valid"] and out["config"]["lend_busy_above"] == 0 and out["config"]["prompt_batch_tokens"] == 512
    )
    assert main([*argv, "--lend-busy-above", "0"]) == 2
    assert "needs mixed=True" in capsys.readouterr().err
