"""The 100-case study: its arguments."""

from __future__ import annotations

import pytest

from llmsched._checks import MAX_REQUESTS
from llmsched.study import run_study


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
