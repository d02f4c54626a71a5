"""``python -m llmsched``: the command as a module."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import llmsched

SRC = str(Path(llmsched.__file__).resolve().parents[1])


def _run_module(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, "-m", "llmsched", *args], capture_output=True, text=True, env=env, check=False
    )


def test_python_dash_m_runs_the_command() -> None:
    """python -m llmsched is the llmsched command: its help names it, its status is the command's."""
    help_run = _run_module("--help")
    assert help_run.returncode == 0, help_run.stderr
    assert help_run.stdout.startswith("usage: llmsched ") and "simulate" in help_run.stdout
    bad = _run_module("simulate", "--clients", "0")
    assert bad.returncode == 2
    assert "llmsched: error: argument --clients" in bad.stderr and "Traceback" not in bad.stderr
