"""The published experiments: argument checks before any work."""

from __future__ import annotations

import pytest

from llmsched.reproduce import reproduce_gsm8k


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"clients": 0}, ValueError, "clients must be at least 1"),
        ({"seed": -1}, ValueError, "seed"),
        ({"plot_dir": 3}, TypeError, "plot_dir must be a file path"),
        ({"predictor": "oracle"}, ValueError, "predictor"),
        ({"predictor": "psychic"}, ValueError, "psychic"),
    ],
)
def test_bad_arguments_are_refused_before_the_experiment_runs(kwargs, error, message) -> None:
    """Each bad argument is named at once (the experiment itself takes seconds)."""
    with pytest.raises(error, match=message):
        reproduce_gsm8k(**kwargs)


def test_a_plot_folder_that_cannot_be_made_is_refused_up_front(tmp_path) -> None:
    """A plot folder under a file fails before the experiment, naming plot_dir."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ValueError, match=r"plot_dir .* cannot be made a folder"):
        reproduce_gsm8k(plot_dir=blocker / "charts")
