"""Progress bars of long work: a tqdm bar on stderr when asked for, else a silent stand-in."""

from __future__ import annotations

from typing import Any

__all__ = ["progress_bar", "progress_parallel"]


class _Silent:
    """What a tqdm bar offers the library's long work, doing nothing."""

    n = 0

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix_str(self, text: str = "", refresh: bool = True) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> _Silent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress_bar(progress: bool, total: int | None, desc: str, unit: str = "it") -> Any:
    """A tqdm bar (``tqdm.auto``: a widget in a notebook, text on stderr elsewhere) of ``total``
    steps when ``progress`` is true, else a stand-in with the same ``update``,
    ``set_postfix_str`` and ``close`` that shows nothing (and does not import tqdm).

    Use it as a context manager, so that the bar is closed however the work ends.
    """
    if not progress:
        return _Silent()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit)


def progress_parallel(n_jobs: int, bar: Any) -> Any:
    """A ``joblib.Parallel`` that moves ``bar`` (a tqdm bar, or None) as cases finish.

    joblib calls ``print_progress`` in this process after every finished batch, whatever the
    backend, and the call still returns a plain list (not every backend, Ray's among them,
    can hand results back as a generator).
    """
    from joblib import Parallel

    if bar is None:
        return Parallel(n_jobs=n_jobs)

    class _Progress(Parallel):
        def print_progress(self) -> None:
            bar.update(self.n_completed_tasks - bar.n)

    return _Progress(n_jobs=n_jobs)
