"""``llmsched study`` (llmsched.cli.study): the study's flags reach run_study."""

from __future__ import annotations

import json

from llmsched.cli import main


def test_study_reports_the_librarys_rows(capsys) -> None:
    """--cases, --requests, --clients and --predictor reach run_study; --json adds its rows to
    the summary, and --plot writes the figure."""
    from llmsched.experiments.study import run_study, study_summary

    argv = ["study", "--cases", "1", "--requests", "30", "--clients", "4", "--jobs", "1", "--no-progress"]
    assert main([*argv, "--predictor", "mean", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    frame = run_study(1, requests=30, clients=4, predictor="mean", n_jobs=1, progress=False)
    summary = json.loads(json.dumps(study_summary(frame), default=float))
    assert out["rows"] == json.loads(json.dumps(frame.to_dict(orient="records"), default=float))
    assert {k: out[k] for k in summary} == summary and out["predictor"] == "mean"


def test_study_refuses_a_plot_it_cannot_write(tmp_path, capsys) -> None:
    """A --plot in a folder that does not exist is refused before any case."""
    path = tmp_path / "missing" / "s.png"
    assert main(["study", "--cases", "1", "--plot", str(path)]) == 2
    assert f"--plot '{path}': folder" in capsys.readouterr().err
