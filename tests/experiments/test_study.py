"""The 100-case study: rows, summary, plot and its arguments."""

from __future__ import annotations

import pandas as pd
import pytest
from joblib import parallel_config, register_parallel_backend
from joblib._parallel_backends import ThreadingBackend

from llmsched.core.checks import MAX_REQUESTS
from llmsched.experiments.study import run_study


def test_request_count_is_bounded_before_any_case_runs() -> None:
    """A request count past MAX_REQUESTS is refused by name up front, not from inside a worker as 'n'."""
    with pytest.raises(ValueError, match=f"requests must be at most {MAX_REQUESTS:,}, got 1,000,000,000,000"):
        run_study(cases=1, requests=10**12, clients=2, n_jobs=1, progress=False)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_jobs": 0}, "n_jobs must be a nonzero integer"),
        ({"n_jobs": "1"}, "n_jobs must be a nonzero integer"),
        ({"n_jobs": 1.5}, "n_jobs must be a nonzero integer"),
        ({"cases": 10**12}, "cases must be at most 1,000,000"),
    ],
)
def test_bad_study_arguments_are_refused_before_any_case(kwargs, message) -> None:
    """Worker counts joblib would misread and a case count without end are refused by name."""
    args = {"cases": 1, "requests": 20, "clients": 2, "n_jobs": 1, "progress": False, **kwargs}
    with pytest.raises(ValueError, match=message):
        run_study(**args)


def test_study_rows_summary_and_bad_input(tmp_path) -> None:
    """The study runs every strategy per case (validated), summarises gains, and refuses bad input."""
    from llmsched.experiments.study import plot_study, run_study, study_summary

    frame = run_study(cases=3, requests=200, clients=16, n_jobs=1, progress=False)
    assert len(frame) == 12 and set(frame["method"]) == {"baseline", "offline", "online", "hybrid"}
    summary = study_summary(frame)
    assert summary["cases"] == 3 and 0 <= summary["wins"] <= 3
    wide = frame.pivot(index="case", columns="method", values="utilization")
    assert summary["utilization_gain_points"] == pytest.approx(
        100 * (wide["hybrid"] - wide["baseline"]).mean()
    )
    fig = plot_study(frame, tmp_path / "study.png")
    assert (tmp_path / "study.png").read_bytes()[:4] == b"\x89PNG"
    utilization, speed = fig.axes
    assert [line.get_label() for line in utilization.lines] == ["baseline", "offline", "online", "hybrid"]
    hybrid = frame[frame["method"] == "hybrid"].sort_values("case")
    assert list(speed.lines[3].get_ydata()) == pytest.approx(list(hybrid["tokens_per_s"]))
    with pytest.raises(ValueError, match="cases"):
        run_study(cases=0)
    with pytest.raises(ValueError, match="unknown predictor"):
        run_study(cases=2, predictor="psychic")


class _NoGenerators(ThreadingBackend):
    """A joblib backend that, like Ray's, cannot hand results back as a generator."""

    supports_return_generator = False


def test_the_study_runs_on_a_backend_without_generators() -> None:
    """Cases go through joblib as a plain list, so every backend can run them (Ray's cannot
    return a generator); the rows are those of the serial run."""
    register_parallel_backend("no-generators", _NoGenerators)
    serial = run_study(cases=2, requests=30, clients=6, n_jobs=1, progress=False)
    with parallel_config(backend="no-generators"):
        threaded = run_study(cases=2, requests=30, clients=6, n_jobs=2, progress=True)
    pd.testing.assert_frame_equal(serial, threaded)
