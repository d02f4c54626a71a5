"""``llmsched exegpt`` (llmsched.cli.exegpt): the search's flags and the latency bound."""

from __future__ import annotations

import json

import pytest

from llmsched.cli import main
from llmsched.cli.exegpt import latency_bound


def test_the_latency_bound_is_seconds_or_inf() -> None:
    """A positive number of seconds or inf; anything else is refused by the flag's name."""
    assert latency_bound("11.5") == 11.5 and latency_bound("inf") == float("inf")
    for text, message in [
        ("soon", "must be a number of seconds or 'inf'"),
        ("0", "must be positive"),
        ("nan", "must be positive"),
    ]:
        with pytest.raises(ValueError, match=f"--latency-bound {message}"):
            latency_bound(text)


def test_the_search_is_the_librarys(capsys) -> None:
    """--schedules, --eps, --batch-max and --iterations-max reach optimize."""
    from llmsched.exegpt import XSimulator, optimize

    argv = [
        "exegpt",
        "--latency-bound",
        "6",
        "--schedules",
        "rra",
        "--batch-max",
        "8",
        "--iterations-max",
        "8",
    ]
    assert main([*argv, "--eps", "0.05", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    sim = XSimulator.for_task("opt-13b", "S")
    result = optimize(
        sim, 6.0, schedules=["RRA"], eps_throughput=0.05, eps_latency=0.05, batch_max=8, iterations_max=8
    )
    assert out["schedules"] == ["RRA"] and out["schedule"] == result.schedule
    assert out["throughput"] == result.throughput and out["evaluations"] == result.evaluations


def test_the_latency_bound_is_required(capsys) -> None:
    """Without --latency-bound the command stops with a usage error."""
    assert main(["exegpt"]) == 2
    assert "the following arguments are required: --latency-bound" in capsys.readouterr().err
