"""Latency against load: policies run at several arrival rates, as serving papers plot them.

:func:`sweep` runs each pair of a request policy and an iteration policy on a workload whose
arrivals are compressed by each rate multiplier (``k = 2`` doubles the arrival rate), through
the simulator, validates every schedule, and returns one row of serving metrics per
(rate, policy): TTFT, time between tokens, end-to-end latency, throughput and goodput under
latency targets. Cases run through joblib: in this process, on local cores, or on a Dask
cluster the caller has connected to (``backend="dask"`` with a ``distributed.Client``).
:func:`plot_sweep` draws a metric against the load, one line per policy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import numpy as np

from llmsched.core.checks import choice, flag, instance, positive_int, real, real_array, text
from llmsched.core.checks import jobs as check_jobs
from llmsched.core.cost import CostModel
from llmsched.core.progress import progress_parallel
from llmsched.core.workload import Workload
from llmsched.engines.batching import BATCHING

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "COLUMNS",
    "MODES",
    "PLOT_METRICS",
    "case_policies",
    "offered_rps",
    "parse_policy",
    "plot_sweep",
    "progress_parallel",
    "run_case",
    "sweep",
]

# Cases beyond this are a run without end, refused up front.
MAX_CASES = 1_000_000

#: The engine modes a sweep runs: the paper's three, and the batching rules of vLLM,
#: Sarathi-Serve and Orca (:mod:`llmsched.engines.batching`).
MODES = ("competition", "fusion", "disaggregated", "vllm", "sarathi", "orca")

# The summary figures each row carries (see Schedule.summary), after the case's own columns.
SUMMARY_COLUMNS = (
    "requests",
    "makespan_s",
    "utilization",
    "tokens_per_s",
    "requests_per_s",
    "ttft_mean_s",
    "ttft_p50_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "tbt_mean_s",
    "tbt_p50_s",
    "tbt_p90_s",
    "tbt_p99_s",
    "e2e_mean_s",
    "e2e_p50_s",
    "e2e_p90_s",
    "e2e_p99_s",
    "normalized_latency_p50_s",
    "normalized_latency_p90_s",
    "normalized_latency_p99_s",
    "goodput_rps",
    "slo_attainment",
    "preemptions",
    "slo_ttft_s",
    "slo_tbt_s",
)
# Columns plot_sweep can draw (the numeric summary figures but the echoed targets).
PLOT_METRICS = tuple(c for c in SUMMARY_COLUMNS if c not in ("requests", "slo_ttft_s", "slo_tbt_s"))
#: Every column of a sweep's frame, in order.
#:
#: :meta hide-value:
COLUMNS = ("rate_scale", "request_policy", "iteration_policy", "offered_rps", *SUMMARY_COLUMNS)

# x axes plot_sweep offers, and their labels.
_X_LABELS = {
    "rate_scale": "arrival rate (multiple of the trace's)",
    "offered_rps": "offered load (requests/s)",
}


def parse_policy(spec: Any) -> tuple[str, str]:
    """A (request policy, iteration policy) pair from a pair of names or a ``"request/iteration"`` spec.

    Raises
    ------
    TypeError, ValueError
        Neither a pair of str nor such a spec, or a name no policy is registered under (the
        message lists the registered ones).
    """
    from llmsched.online.registry import make_iteration_policy, make_request_policy

    if isinstance(spec, str):
        parts = spec.split("/")
        if len(parts) != 2 or not all(parts):
            raise ValueError(f"a policy spec is 'REQUEST/ITERATION' (as 'fcfs/prefill-first'), got {spec!r}")
        request, iteration = parts
    elif isinstance(spec, (tuple, list)) and len(spec) == 2:
        request = text("request policy", spec[0])
        iteration = text("iteration policy", spec[1])
    else:
        raise TypeError(
            "a policy must be a (request, iteration) pair of names or a 'REQUEST/ITERATION' spec, "
            f"got {spec!r}"
        )
    make_request_policy(request)
    make_iteration_policy(iteration)
    return request, iteration


def case_policies(policies: Any, mode: str = "competition") -> list[tuple[str, str | None]]:
    """The policies of a sweep's cases in ``mode``: (request, iteration) pairs from pairs or
    specs; under fusion and on a disaggregated cluster (whose prompt machines take their stages
    through a request policy), request policies alone (iteration None).

    Raises
    ------
    TypeError, ValueError
        Policies of the wrong shape, unknown names, one given twice, an iteration policy for a
        fused engine or a cluster.
    """
    if isinstance(policies, str):
        policies = [policies]
    if not isinstance(policies, Sequence) or isinstance(policies, bytes):
        raise TypeError(f"policies must be a list of (request, iteration) pairs or specs, got {policies!r}")
    if not policies:
        raise ValueError("policies is empty; give at least one (request, iteration) pair")
    parse: Callable[[Any], tuple[str, str | None]] = parse_policy if mode == "competition" else _fused_policy
    pairs = [parse(spec) for spec in policies]
    seen: set[tuple[str, str | None]] = set()
    for pair in pairs:
        if pair in seen:
            raise ValueError(f"policy {_label(*pair)!r} is given twice")
        seen.add(pair)
    return pairs


def _fused_policy(spec: Any) -> tuple[str, None]:
    """A fused engine's or a cluster's request policy, by name: neither has an iteration
    policy (a fused engine never pauses decoding; a cluster's machines each do one phase)."""
    from llmsched.online.registry import make_request_policy

    if not isinstance(spec, str) or "/" in spec:
        raise ValueError(
            "a fused engine or a cluster has no iteration policy (no prefill-or-decode choice): give "
            f"each request policy alone, as 'fcfs', got {spec!r}"
        )
    make_request_policy(spec)
    return spec, None


def _label(request: str, iteration: str | None) -> str:
    """A case's policies as a label: ``request/iteration``, or the request policy alone."""
    return request if iteration is None else f"{request}/{iteration}"


def _rates(rates: Any) -> list[float]:
    if isinstance(rates, (int, float, np.number)):
        rates = [rates]
    values = real_array("rates", rates, low=0.0, low_open=True, nonempty=True)
    if np.unique(values).size != values.size:
        raise ValueError(f"rates holds a multiplier twice: {values.tolist()}")
    return [float(v) for v in values]


def _target(name: str, value: Any) -> float | None:
    return None if value is None else real(name, value, low=0.0, low_open=True, finite=False)


def _n_jobs(n_jobs: Any) -> int:
    return check_jobs("n_jobs", n_jobs)


def offered_rps(arrival: np.ndarray) -> float:
    """Mean arrival rate of a trace: arrivals after the first over the time from the first to
    the last (NaN when they all arrive at once)."""
    span = float(arrival.max() - arrival.min()) if arrival.size else 0.0
    return (arrival.size - 1) / span if span > 0 else float("nan")


def run_case(
    workload: Workload,
    cost: CostModel,
    clients: int,
    request_policy: str,
    iteration_policy: str | None,
    rate_scale: float,
    slo_ttft: float | None = None,
    slo_tbt: float | None = None,
    *,
    mode: str = "competition",
    token_budget: int = 512,
    cluster: Any = None,
    max_num_batched_tokens: int = 2048,
    chunked_prefill: bool = False,
    memory: Any = None,
) -> dict[str, Any]:
    """One case of a sweep: arrivals divided by ``rate_scale``, simulated, validated, summarised.

    The ``slo`` iteration rule runs with ``slo_ttft`` as its target when one is given. In
    ``mode="fusion"`` the engine is fused (``token_budget`` tokens an iteration) and
    ``iteration_policy`` is None; in ``mode="disaggregated"`` the case
    runs on ``cluster`` (a :class:`~llmsched.engines.disaggregation.cluster.DisaggregatedCluster`)
    and the request policy is each prompt machine's; in ``mode="vllm"``, ``"sarathi"`` or
    ``"orca"`` the engine batches as that one does (:func:`llmsched.simulate_batching`, with
    ``max_num_batched_tokens``, ``chunked_prefill`` and its KV-cache ``memory``).

    Returns
    -------
    dict
        The row: :data:`COLUMNS`; a figure the mode's summary lacks (a cluster's single
        ``utilization``) is NaN.

    Raises
    ------
    RuntimeError
        If the schedule fails validation (a bug, never expected).
    """
    scaled = workload.replace(arrival=workload.arrival / rate_scale)
    knobs = (max_num_batched_tokens, chunked_prefill, memory)
    schedule, violations = _simulate(
        scaled, cost, clients, request_policy, iteration_policy, slo_ttft, mode, token_budget, cluster, knobs
    )
    if violations:
        shown = "; ".join(str(v) for v in violations[:3])
        raise RuntimeError(
            f"{_label(request_policy, iteration_policy)} at rate x{rate_scale:g}: invalid schedule "
            f"({len(violations)} violations): {shown}"
        )
    summary = schedule.summary(slo_ttft=slo_ttft, slo_tbt=slo_tbt)
    return {
        "rate_scale": rate_scale,
        "request_policy": request_policy,
        "iteration_policy": iteration_policy,
        "offered_rps": offered_rps(scaled.arrival),
        **{name: summary.get(name, math.nan) for name in SUMMARY_COLUMNS},
    }


def _simulate(
    workload: Workload,
    cost: CostModel,
    clients: int,
    request_policy: str,
    iteration_policy: str | None,
    slo_ttft: float | None,
    mode: str,
    token_budget: int,
    cluster: Any,
    knobs: tuple[int, bool, Any] = (2048, False, None),
) -> tuple[Any, list[Any]]:
    """The case's schedule on the mode's engine, and what the mode's validator finds in it."""
    if mode in BATCHING:
        from llmsched.online.simulate import simulate_batching

        tokens, chunked, memory = knobs
        real = simulate_batching(
            workload, cost, clients, mode, request_policy, tokens, chunked and mode == "vllm", memory
        )
        return real, real.validate()
    memory = knobs[2]
    if mode == "fusion":
        from llmsched.engines.fusion.validate import validate_fused
        from llmsched.online.simulate import simulate_fusion

        fused = simulate_fusion(workload, cost, clients, request_policy, token_budget, memory=memory)
        return fused, validate_fused(fused)
    if mode == "disaggregated":
        from llmsched import simulate_disaggregated
        from llmsched.engines.disaggregation.validate import validate_disaggregated

        split = simulate_disaggregated(workload, cluster, request_policy)
        return split, validate_disaggregated(split)
    from llmsched.engines.competition.validate import validate
    from llmsched.online.registry import make_iteration_policy
    from llmsched.online.simulate import simulate

    # The SLO-aware rule serves the run's TTFT target.
    iteration: Any = iteration_policy
    if iteration_policy == "slo" and slo_ttft is not None and math.isfinite(slo_ttft):
        iteration = make_iteration_policy("slo", slo_ttft=slo_ttft)
    schedule = simulate(workload, cost, clients, request_policy, iteration, memory=memory)
    return schedule, validate(schedule)


def sweep(
    workload: Workload,
    cost: CostModel,
    clients: int,
    policies: Any,
    rates: Any,
    *,
    slo_ttft: float | None = None,
    slo_tbt: float | None = None,
    n_jobs: int = 1,
    backend: str | None = None,
    progress: bool = True,
    mode: str = "competition",
    token_budget: int = 512,
    cluster: Any = None,
    max_num_batched_tokens: int = 2048,
    chunked_prefill: bool = False,
    memory: Any = None,
) -> pd.DataFrame:
    """Run every policy pair at every arrival-rate multiplier; one row per (rate, policy).

    Parameters
    ----------
    workload
        The requests with their arrival times (for a workload without any, see
        :func:`llmsched.workloads.prepare` with ``arrivals="poisson:RATE"``).
    cost, clients
        Cost model and number of clients (of each token machine, in ``mode="disaggregated"``).
    policies
        A list of ``(request policy, iteration policy)`` name pairs or ``"request/iteration"``
        specs (``"fcfs/prefill-first"``), or one spec. In ``mode="fusion"``, request policy
        names alone (``"fcfs"``), as in ``mode="disaggregated"`` (each prompt machine's policy).
    rates
        Arrival-rate multipliers ``k > 0``: arrivals are ``workload.arrival / k``, so 1 is the
        trace's own rate and 2 twice as many requests per second.
    slo_ttft, slo_tbt
        Latency targets in seconds for goodput and SLO attainment: each request's TTFT and
        its mean time between tokens (see
        :meth:`~llmsched.engines.competition.schedule.Schedule.meets_slo`); None: no target.
    n_jobs
        joblib workers (-1: every core, or a count >= 1).
    backend
        A joblib backend name for ``joblib.parallel_config`` (``"loky"``, ``"threading"``,
        ``"dask"`` on the Dask cluster of the caller's ``distributed.Client``, ...); None: the
        active joblib configuration.
    progress
        Show a progress bar over finished cases.
    mode
        The engine: ``competition`` (a prefill stage pauses decoding), ``fusion`` (chunked
        prefill, ``token_budget`` tokens an iteration, as a fleet's engine has by default) or
        ``disaggregated`` (``cluster``, a
        :class:`~llmsched.engines.disaggregation.cluster.DisaggregatedCluster` whose token
        machines have ``cost`` and ``clients``), or a real engine's batching rule, ``vllm``,
        ``sarathi`` or ``orca`` (:mod:`llmsched.engines.batching`).
    max_num_batched_tokens, chunked_prefill, memory
        The real engines' knobs (:func:`llmsched.simulate_batching`): the token cap of an
        iteration, vLLM's chunked prefill, and the KV-cache memory
        (:class:`~llmsched.core.memory.KVMemory`, or None).

    Returns
    -------
    pandas.DataFrame
        Columns :data:`COLUMNS`: ``rate_scale``, ``request_policy``, ``iteration_policy``,
        ``offered_rps`` (the scaled trace's mean arrival rate), then the summary figures.
        Rows run over ``rates`` in the order given, and within each rate over ``policies``;
        neither the rows nor their order depend on ``n_jobs`` or ``backend``. A fused
        engine's rows have no iteration policy (None); a cluster's are one per rate, its
        request policy ``"jsq"`` (its routing) and its ``utilization`` NaN (its summary gives
        each pool's).

    Raises
    ------
    TypeError, ValueError
        Bad arguments, before any case runs: an unknown mode, unknown policy names (or, for a
        fused engine, an iteration policy; for a cluster, any policy), rate multipliers that
        are not finite and > 0 or repeat, a target that is not > 0, a workload whose requests
        all arrive at once (scaling its rate would change nothing) with a multiplier other
        than 1, a fused engine the cost model or the budget cannot make, or a cluster that is
        missing, cannot run the workload or does not have ``cost`` and ``clients``.
    RuntimeError
        If a schedule fails validation (a bug, never expected).
    """
    import pandas as pd
    from joblib import delayed, parallel_config

    instance("workload", workload, Workload, "a Workload")
    instance("cost", cost, CostModel, "a CostModel")
    clients = positive_int("clients", clients)
    mode = choice("mode", mode, MODES)
    if memory is not None and mode == "disaggregated":
        raise ValueError(
            "a disaggregated cluster's machines have no KV-cache memory here; give memory to an "
            "engine of another mode (competition, fusion, vllm, sarathi, orca, padded)"
        )
    pairs = case_policies(policies, mode)
    scales = _rates(rates)
    ttft_target, tbt_target = _target("slo_ttft", slo_ttft), _target("slo_tbt", slo_tbt)
    n_jobs = _n_jobs(n_jobs)
    if backend is not None:
        text("backend", backend)
    progress = flag("progress", progress)
    _check_engine(workload, cost, clients, mode, token_budget, cluster)
    from llmsched.engines.batching import check_chunked_prefill

    check_chunked_prefill(mode, flag("chunked_prefill", chunked_prefill))
    if mode in BATCHING:
        from llmsched.engines.batching import batching_rule

        rule = batching_rule(mode, max_num_batched_tokens, flag("chunked_prefill", chunked_prefill), memory)
        rule.check(workload, cost, clients)
    if memory is not None:
        from llmsched.engines.memory import check_memory
        from llmsched.online.registry import make_request_policy

        check_memory(workload, memory, clients, cost.prefill_capacity)
        for request, _ in pairs:
            if not getattr(make_request_policy(request), "open_ended", False):
                raise ValueError(
                    f"request policy {request!r} plans over the whole workload up front; with "
                    "KV-cache memory a preempted request comes back as a new one: use fcfs, "
                    "batch-wise, shortest-first or longest-first"
                )
    if len(pairs) * len(scales) > MAX_CASES:
        raise ValueError(f"{len(pairs)} policies x {len(scales)} rates is more than {MAX_CASES:,} cases")
    arrival = workload.arrival
    if arrival.size and arrival.max() == arrival.min() and any(k != 1 for k in scales):
        raise ValueError(
            "the workload's requests all arrive at once, so scaling their arrival rate changes "
            "nothing; give it arrival times (llmsched.workloads.prepare(workload, arrivals='poisson:RATE'), "
            "or --arrivals poisson:RATE on the command line) or sweep rates=[1] only"
        )
    if workload.predicted_output is None:
        from llmsched.online.registry import make_request_policy

        for request, _ in pairs:
            if getattr(make_request_policy(request), "sizes", None) == "predicted":
                raise ValueError(
                    f"request policy {request!r} plans with predicted lengths and the workload has "
                    "no predicted_output: attach predictions (llmsched.online.with_predictions, or "
                    "--predictor NAME on the command line) or use its -oracle variant"
                )

    engine = {
        "mode": mode,
        "token_budget": token_budget,
        "cluster": cluster,
        "max_num_batched_tokens": max_num_batched_tokens,
        "chunked_prefill": chunked_prefill,
        "memory": memory,
    }
    cases = [(k, request, iteration) for k in scales for request, iteration in pairs]
    jobs = [
        delayed(run_case)(workload, cost, clients, request, iteration, k, ttft_target, tbt_target, **engine)
        for k, request, iteration in cases
    ]
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(jobs), desc="sweep", unit="case")
    try:
        with parallel_config(backend=backend) if backend is not None else nullcontext():
            rows = progress_parallel(n_jobs, bar)(jobs)
    finally:
        if bar is not None:
            bar.close()
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _check_engine(
    workload: Workload, cost: CostModel, clients: int, mode: str, token_budget: int, cluster: Any
) -> None:
    """Refuse an engine the mode cannot make from the arguments, before any case runs."""
    if mode == "fusion":
        from llmsched.engines.fusion.iteration import check_fused_instance

        check_fused_instance(workload, cost, clients, token_budget)
    if mode == "disaggregated":
        from llmsched.engines.disaggregation.cluster import DisaggregatedCluster

        instance("cluster", cluster, DisaggregatedCluster, "a DisaggregatedCluster (mode='disaggregated')")
        if cluster.token_cost != cost or cluster.token_clients != clients:
            raise ValueError(
                "cost and clients must be the cluster's token machines' (token_cost, token_clients): "
                f"got {clients} clients against the cluster's {cluster.token_clients}"
                + ("" if cluster.token_cost == cost else ", and another cost model")
            )
        cluster.check(workload)
    elif cluster is not None:
        raise ValueError(f"cluster is a disaggregated sweep's; this sweep is mode={mode!r}")


def plot_sweep(
    frame: pd.DataFrame,
    metric: str = "ttft_p99_s",
    x: str = "rate_scale",
    ax: Axes | None = None,
    title: str | None = None,
    log_y: bool = False,
) -> Figure:
    """``metric`` against the load, one line per policy pair (a latency-load curve).

    Parameters
    ----------
    frame
        What :func:`sweep` returned.
    metric
        A numeric column of the frame (``"ttft_p99_s"``, ``"tbt_p99_s"``, ``"e2e_p50_s"``,
        ``"goodput_rps"``, ...). A TTFT or TBT metric gets the sweep's target, when it had
        one, as a dashed line.
    x
        ``"rate_scale"`` (the multiplier) or ``"offered_rps"`` (requests per second offered).
    ax
        Axes to draw on; by default a new ``matplotlib.figure.Figure`` (not registered with
        pyplot, and the matplotlib backend is left alone).
    title
        The title (default: the metric).
    log_y
        A logarithmic y axis (latency near saturation grows by orders of magnitude).

    Returns
    -------
    matplotlib.figure.Figure
        The figure drawn on (``ax``'s when given).

    Raises
    ------
    ValueError
        A frame without the sweep's columns, an unknown or non-numeric metric, an unknown
        ``x``, or ``offered_rps`` for a workload without arrival spread.
    """
    import pandas as pd

    from llmsched.plot import figure_axes

    instance("frame", frame, pd.DataFrame, "a DataFrame from sweep()")
    missing = {"rate_scale", "request_policy", "iteration_policy", "offered_rps"} - set(frame.columns)
    if frame.empty or missing:
        raise ValueError(f"expected the DataFrame of sweep(); it lacks {sorted(missing) or 'rows'}")
    numeric = [c for c in frame.columns if c not in COLUMNS[:4] and pd.api.types.is_numeric_dtype(frame[c])]
    if not isinstance(metric, str) or metric not in numeric:
        raise ValueError(f"metric must be a numeric column of the sweep, one of {numeric}, got {metric!r}")
    if not isinstance(x, str) or x not in _X_LABELS:
        raise ValueError(f"x must be one of {list(_X_LABELS)}, got {x!r}")
    if not np.isfinite(frame[x].to_numpy(dtype=float)).any():
        raise ValueError(
            f"{x} is undefined for this sweep (its requests all arrive at once); use x='rate_scale'"
        )
    log_y = flag("log_y", log_y)

    fig, ax = figure_axes(ax, (7, 4.5), "constrained")
    labels = [
        _label(request, iteration if isinstance(iteration, str) else None)
        for request, iteration in zip(frame["request_policy"], frame["iteration_policy"], strict=True)
    ]
    for line, part in frame.groupby(labels, sort=False):
        part = part.sort_values(x)
        ax.plot(part[x], part[metric], marker="o", label=line)
    target_column = {"ttft": "slo_ttft_s", "tbt": "slo_tbt_s"}.get(metric.split("_")[0])
    if target_column in frame.columns:
        targets = frame[target_column].dropna().unique()
        if len(targets) == 1 and np.isfinite(float(targets[0])):
            label = "TTFT target" if target_column == "slo_ttft_s" else "TBT target"
            ax.axhline(float(targets[0]), color="grey", linestyle="--", linewidth=1, label=label)
    ax.set_xlabel(_X_LABELS[x])
    ax.set_ylabel(metric)
    if log_y:
        ax.set_yscale("log")
    ax.set_title(title if title is not None else metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig
