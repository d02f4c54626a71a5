"""``llmsched reproduce`` (llmsched.cli.reproduce): the experiment's flags and the chart folder."""

from __future__ import annotations

import json

import pytest

from llmsched.cli import main
from llmsched.cli.reproduce import check_plot_dir


def test_reproduce_mico_reports_the_librarys_rows(capsys) -> None:
    """--engines, --batches, --queries and --seeds reach reproduce_mico as lists."""
    from llmsched.experiments.reproduce import reproduce_mico

    argv = ["reproduce", "mico", "--engines", "2", "--batches", "2-3", "--queries", "200", "--seeds", "1"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    expected = reproduce_mico(engines=[2], batches=[2, 3], queries=[200], seeds=1)
    assert out == json.loads(json.dumps(expected, default=float))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--plot", "charts"], "reproduce mico has none"),
        (["--timings"], "reproduce mico runs no solver"),
        (["--queries", "0"], "argument --queries: each value must lie in [1, 1000000], got '0'"),
    ],
)
def test_reproduce_mico_refuses_what_it_cannot_do(argv, message, capsys) -> None:
    """Gantt charts and timings belong to the GSM8K experiment; values are checked by flag."""
    assert main(["reproduce", "mico", *argv]) == 2
    assert message in capsys.readouterr().err


def test_the_chart_folder_is_made_or_refused_before_the_work(tmp_path) -> None:
    """A missing folder is made; a file where the folder should be is refused by name."""
    folder = tmp_path / "a" / "b"
    check_plot_dir(folder)
    assert folder.is_dir() and list(folder.iterdir()) == []
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ValueError, match=f"--plot '{blocker}' is a file; give a folder"):
        check_plot_dir(blocker)
