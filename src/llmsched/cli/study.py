"""``llmsched study``: the 100-case study (Figs. 10-11), the strategies on random cases."""

from __future__ import annotations

from typing import Any

from llmsched.cli.config import MAX_CLIENTS
from llmsched.cli.options import (
    JOBS,
    JSON,
    PLOT_FILE,
    PROGRESS,
    TEXT,
    TIMINGS,
    Command,
    Option,
    check_plot_file,
    integer,
    print_json,
    progress,
    resolve,
    with_timings,
)
from llmsched.core.checks import MAX_REQUESTS

__all__ = ["COMMAND", "OPTIONS", "run"]

#: The command's options, each declared once: its flag and its TOML key.
#:
#: :meta hide-value:
OPTIONS = (
    Option("cases", integer(1, 1_000_000), 100, "random cases, seeds 0.."),
    Option("requests", integer(1, MAX_REQUESTS), 1319, "requests per case"),
    Option("clients", integer(1, MAX_CLIENTS), 200, "number of clients"),
    Option("predictor", TEXT, "oracle", "oracle, mico, noisy, bucket or mean"),
    Option("jobs", JOBS, -1, "joblib workers (-1: every core)"),
    Option("plot", PLOT_FILE, None, "write the per-case figure to this file"),
    JSON,
    PROGRESS,
    TIMINGS,
)


def run(args: Any) -> int:
    """Run ``llmsched study``."""
    import time

    from llmsched.experiments.study import format_study, plot_study, run_study, study_summary

    config = resolve(args, COMMAND).config
    check_plot_file(config.plot)
    start = time.perf_counter()
    frame = run_study(
        config.cases,
        requests=config.requests,
        clients=config.clients,
        predictor=config.predictor,
        n_jobs=config.jobs,
        progress=progress(config),
    )
    summary = study_summary(frame)
    wall = time.perf_counter() - start
    summary["predictor"] = config.predictor
    if config.plot:
        plot_study(frame, config.plot)
        summary["plot"] = config.plot
    if config.json:
        print_json(with_timings({**summary, "rows": frame.to_dict(orient="records")}, config, wall_s=wall))
    else:
        print(f"{summary['cases']} cases, predictor {config.predictor}, {wall:.1f} s")
        print(format_study(frame, summary))
        if config.plot:
            print(f"figure written to {config.plot}")
    return 0


COMMAND = Command("study", "the 100-case study (Figs. 10-11): strategies on random cases", "", OPTIONS, run)
