"""Tests of the command line, one module per command, and what they share: a command's JSON
report, and the check that a config file runs what the flags run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from llmsched.cli import main


def json_report(capsys: Any, argv: list[str], ok: tuple[int, ...] = (0,)) -> dict:
    """What ``llmsched <argv> --json`` prints, read back; the command must end with one of
    the statuses ``ok``."""
    status = main([*argv, "--json"])
    captured = capsys.readouterr()
    assert status in ok, captured.err
    return json.loads(captured.out)


def config_runs_as_flags(
    capsys: Any, tmp_path: Path, flags: list[str], toml: str, ok: tuple[int, ...] = (0,)
) -> Path:
    """Assert that the command of ``flags`` (its name first) given a config file holding
    ``toml`` reports what it reports given ``flags``; return the file's path."""
    from_flags = json_report(capsys, flags, ok)
    path = tmp_path / f"{flags[0]}.toml"
    path.write_text(toml)
    assert json_report(capsys, [flags[0], "--config", str(path)], ok) == from_flags
    return path
