"""Progress bars: shown on stderr when asked for, silent (with the same methods) otherwise."""

from __future__ import annotations

from llmsched.core.progress import progress_bar


def test_a_bar_counts_its_steps_on_stderr(capsys) -> None:
    """With progress on, the bar names its work and runs to its total on stderr."""
    with progress_bar(True, 3, "work", unit="step") as bar:
        for _ in range(3):
            bar.set_postfix_str("a step")
            bar.update()
    captured = capsys.readouterr()
    assert captured.out == "" and "work: 100%" in captured.err and "3/3" in captured.err


def test_without_progress_nothing_is_shown(capsys) -> None:
    """With progress off the stand-in takes the same calls, counts them, and writes nothing."""
    with progress_bar(False, 3, "work") as bar:
        bar.set_postfix_str("a step")
        bar.update()
        bar.update(2)
    assert bar.n == 3
    assert capsys.readouterr() == ("", "")
