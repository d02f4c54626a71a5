"""The 100-case study: rows, summary and bad input."""

from __future__ import annotations

import pytest


def test_study_rows_summary_and_bad_input(tmp_path) -> None:
    """The study runs every strategy per case (validated), summarises gains, and refuses bad input."""
    from llmsched.study import plot_study, run_study, study_summary

    frame = run_study(cases=3, requests=200, clients=16, n_jobs=1, progress=False)
    assert len(frame) == 12 and set(frame["method"]) == {"baseline", "offline", "online", "hybrid"}
    summary = study_summary(frame)
    assert summary["cases"] == 3 and 0 <= summary["wins"] <= 3
    wide = frame.pivot(index="case", columns="method", values="utilization")
    assert summary["utilization_gain_points"] == pytest.approx(
        100 * (wide["hybrid"] - wide["baseline"]).mean()
    )
    plot_study(frame, tmp_path / "study.png")
    assert (tmp_path / "study.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="cases"):
        run_study(cases=0)
    with pytest.raises(ValueError, match="unknown predictor"):
        run_study(cases=2, predictor="psychic")
