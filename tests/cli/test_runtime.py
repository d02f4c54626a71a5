"""``llmsched runtime`` (llmsched.cli.runtime): what it does without torch and without an action."""

from __future__ import annotations

import pytest

import llmsched.runtime
from llmsched.cli import main


def test_without_torch_the_command_says_so(monkeypatch, capsys) -> None:
    """Without torch, runtime and runtime validate end with status 3 and the install hint."""
    monkeypatch.setattr(llmsched.runtime, "torch_available", lambda: False)
    for argv in (["runtime"], ["runtime", "validate", "--model", "tiny"]):
        assert main(argv) == 3
        assert capsys.readouterr().err.startswith("llmsched runtime: ")


def test_without_an_action_the_command_prints_its_help(capsys) -> None:
    """With torch, runtime alone prints its help (naming validate) and ends with status 2."""
    pytest.importorskip("torch")
    assert main(["runtime"]) == 2
    assert "validate" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--threads", "0"], r"argument --threads: must be an integer in \[1, 1024\], got 0"),
        (["--executions", "1001"], r"argument --executions: must be an integer in \[1, 1000\]"),
        (["--scale", "1.5"], r"argument --scale: must be a number in \(0, 1\], got 1.5"),
    ],
)
def test_validate_checks_its_flags(argv, message, capsys) -> None:
    """Sizes out of range are refused by flag before anything is profiled."""
    import re

    assert main(["runtime", "validate", *argv]) == 2
    assert re.search(message, capsys.readouterr().err)
