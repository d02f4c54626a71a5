"""The 100-case study of Pang et al. (Figs. 10-11): the strategies on many random cases.

Each case is a GSM8K-shaped workload (:func:`llmsched.workloads.gsm8k_like`, 1,319 requests
by default) run on 200 clients with the paper's cost model under the four strategies of
:mod:`llmsched.experiments.reproduce`, with oracle lengths or with a cross-fitted predictor. Cases run
through joblib: on every core here by default, or on a Dask or Ray cluster inside
``joblib.parallel_config(backend="dask")`` (or ``"ray"``) where a user has one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from llmsched.core.checks import MAX_REQUESTS, positive_int
from llmsched.core.checks import jobs as check_jobs
from llmsched.core.cost import LinearCostModel
from llmsched.experiments.reproduce import METHODS, STRATEGIES, run_method
from llmsched.workloads import gsm8k_like

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# More cases than this is a run without end, refused up front.
MAX_CASES = 1_000_000

__all__ = ["PAPER_STUDY", "format_study", "plot_study", "run_case", "run_study", "study_summary"]

# Mean gains of the hybrid over the baseline over the paper's 100 cases (Sec. V, Figs. 10-11).
PAPER_STUDY = {"utilization_gain_points": 8.0, "tokens_per_s_gain": 100.63}


def run_case(
    case: int, requests: int = 1319, clients: int = 200, predictor: str = "oracle"
) -> list[dict[str, Any]]:
    """One case: ``gsm8k_like(requests, seed=case)`` under every strategy; one row per strategy."""
    from llmsched.online import cross_fit, with_predictions

    workload = gsm8k_like(requests, seed=case)
    if predictor != "oracle":
        workload = with_predictions(workload, cross_fit(predictor, workload, seed=case))
    cost = LinearCostModel.paper()
    rows = []
    for method in METHODS:
        if method.name not in STRATEGIES:
            continue
        schedule = run_method(method, workload, cost, clients, predictor)
        rows.append(
            {
                "case": case,
                "method": method.name,
                "predictor": predictor,
                "makespan_s": schedule.makespan,
                "utilization": schedule.utilization,
                "tokens_per_s": schedule.tokens_per_s,
            }
        )
    return rows


def run_study(
    cases: int = 100,
    requests: int = 1319,
    clients: int = 200,
    predictor: str = "oracle",
    n_jobs: int = -1,
    progress: bool = True,
) -> pd.DataFrame:
    """Run ``cases`` random cases (seeds 0..cases-1) and return one row per case and strategy.

    Parameters
    ----------
    cases, requests, clients
        Number of cases, requests per case, clients.
    predictor
        ``"oracle"`` or a predictor name (cross-fitted within each case).
    n_jobs
        joblib workers (-1: every core, or a count >= 1); the active joblib backend decides where
        they run.
    progress
        Show a progress bar over the cases.

    Raises
    ------
    ValueError
        Non-positive sizes or an unknown predictor, before any case runs.
    """
    from joblib import delayed

    positive_int("cases", cases, maximum=MAX_CASES)
    check_jobs("n_jobs", n_jobs)
    positive_int("requests", requests, maximum=MAX_REQUESTS)
    positive_int("clients", clients)
    if predictor != "oracle":
        from llmsched.online import make_predictor

        make_predictor(predictor)
    from llmsched.core.progress import progress_parallel

    jobs = (delayed(run_case)(case, requests, clients, predictor) for case in range(cases))
    # A plain list back (not a generator, which Ray's joblib backend cannot give), with the
    # bar moved as batches finish.
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=cases, desc=f"cases ({predictor})", unit="case")
    try:
        results = progress_parallel(n_jobs, bar)(jobs)
    finally:
        if bar is not None:
            bar.close()
    return pd.DataFrame([row for rows in results for row in rows])


def study_summary(
    frame: pd.DataFrame, reference: str = "baseline", against: str = "hybrid"
) -> dict[str, Any]:
    """Mean figures per strategy and the gains of ``against`` over ``reference`` per case."""
    _check_frame(frame)
    wide = frame.pivot(index="case", columns="method", values=["makespan_s", "utilization", "tokens_per_s"])
    util_gain = (wide["utilization"][against] - wide["utilization"][reference]) * 100.0
    tps_gain = wide["tokens_per_s"][against] - wide["tokens_per_s"][reference]
    wins = int((wide["makespan_s"][against] < wide["makespan_s"][reference]).sum())
    means = frame.groupby("method")[["makespan_s", "utilization", "tokens_per_s"]].mean()
    return {
        "cases": int(wide.shape[0]),
        "wins": wins,
        "utilization_gain_points": float(util_gain.mean()),
        "utilization_gain_min_points": float(util_gain.min()),
        "tokens_per_s_gain": float(tps_gain.mean()),
        "means": {m: {k: float(v) for k, v in row.items()} for m, row in means.iterrows()},
        "paper": PAPER_STUDY,
    }


def format_study(frame: pd.DataFrame, summary: dict[str, Any]) -> str:
    """Per-strategy means and the hybrid's gains beside the paper's, as plain text."""
    means = frame.groupby("method")[["makespan_s", "utilization", "tokens_per_s"]].mean()
    paper = summary["paper"]
    return "\n".join(
        [
            means.loc[[m for m in STRATEGIES if m in means.index]].round(4).to_string(),
            f"hybrid beats baseline in {summary['wins']}/{summary['cases']} cases; mean utilization "
            f"gain {summary['utilization_gain_points']:+.2f} points "
            f"(min {summary['utilization_gain_min_points']:+.2f}; paper "
            f"{paper['utilization_gain_points']:+.2f}); mean tokens/s gain "
            f"{summary['tokens_per_s_gain']:+.2f} (paper {paper['tokens_per_s_gain']:+.2f})",
        ]
    )


def plot_study(frame: pd.DataFrame, path: str | Path | None = None) -> Figure:
    """Utilization and generation speed per case and strategy (as Figs. 10-11).

    Parameters
    ----------
    frame
        What :func:`run_study` returned.
    path
        Also write the figure to this file (PNG, SVG, PDF: by extension); None: do not.

    Returns
    -------
    matplotlib.figure.Figure
        A new figure (not registered with pyplot; the matplotlib backend is left alone).
    """
    _check_frame(frame)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 4), dpi=120, layout="constrained")
    axes = fig.subplots(1, 2)
    for method in STRATEGIES:
        part = frame[frame["method"] == method].sort_values("case")
        if part.empty:
            continue
        axes[0].plot(part["case"], 100 * part["utilization"], ".-", lw=0.8, label=method)
        axes[1].plot(part["case"], part["tokens_per_s"], ".-", lw=0.8, label=method)
    axes[0].set(xlabel="case", ylabel="utilization (%)", title="Utilization per case")
    axes[1].set(xlabel="case", ylabel="tokens / s", title="Generation speed per case")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if path is not None:
        fig.savefig(Path(path))
    return fig


def _check_frame(frame: pd.DataFrame) -> None:
    if frame.empty or not {"case", "method", "utilization"} <= set(frame.columns):
        raise ValueError("expected the DataFrame of run_study")
    if not np.all(np.isfinite(frame["makespan_s"])):
        raise ValueError("the study holds non-finite makespans")
