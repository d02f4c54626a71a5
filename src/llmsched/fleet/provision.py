"""Provisioning: how many engines of each kind a load needs.

:func:`provision` chooses the number of engines of each kind (each an
:class:`~llmsched.fleet.engine.Engine`: a machine with its cost model, clients and price) that
serves a workload at the most output tokens per unit of cost while the fleet's p99 TTFT
and p99 time between tokens stay within their targets. Every configuration is a fleet run
(:func:`llmsched.simulate_fleet`) of the whole workload.

The counts are monotone control variables in ExeGPT's sense: fewer engines cost less, so
throughput per cost rises (the same tokens, or nearly, for less) while latency rises too.
Listed from the most engines down, they fit :func:`llmsched.exegpt.search.branch_and_bound`
as they are; ``method="exhaustive"`` evaluates the whole grid instead, through joblib (on
local cores, or on a Dask or Ray cluster with ``backend``), to check the search. A fleet of
no engine cannot run: it meets no target and bounds nothing.

:func:`provision_disaggregated` does the same for a Splitwise cluster
(:class:`~llmsched.engines.disaggregation.cluster.DisaggregatedCluster`): how many prompt and
token machines, each
pool at its own price, through :func:`llmsched.simulate_disaggregated`.

The branch-and-bound is exact when more machines never raise the p99 latencies and never
raise throughput per cost. That holds for machines of one speed (a fleet of kinds that
differ in price and clients; a cluster's pools); a kind slower than the rest can raise the
fleet's p99 time between tokens by taking work, and the search is then a heuristic
(``benchmarks/provision_check.py`` measures it against the exhaustive search).
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llmsched.core.checks import choice, flag, instance, positive_int, real, text
from llmsched.core.checks import jobs as check_jobs
from llmsched.core.workload import Workload
from llmsched.engines.disaggregation.cluster import DisaggregatedCluster
from llmsched.exegpt.search import Variable, branch_and_bound, exhaustive, grid_size
from llmsched.fleet.engine import Backoff, Engine
from llmsched.fleet.simulate import check_fleet, simulate_fleet

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "ProvisionResult",
    "evaluate_disaggregated",
    "evaluate_fleet",
    "load_seconds",
    "provision",
    "provision_disaggregated",
]

#: Configurations a search may cover; a larger grid is refused up front.
MAX_GRID = 1_000_000


@dataclass(frozen=True)
class ProvisionResult:
    """The fleet chosen, its figures, and every configuration evaluated.

    ``counts`` maps each kind's name to its number of engines (None when no configuration
    meets the targets, ``feasible`` then False and ``message`` saying so). ``evaluations``
    counts distinct fleets simulated, ``grid`` the configurations there are.
    """

    counts: dict[str, int] | None
    feasible: bool
    tokens_per_cost: float
    tokens_per_s: float
    price_per_hour: float
    ttft_p99_s: float
    tbt_p99_s: float
    evaluations: int
    grid: int
    method: str
    message: str = ""
    history: list[dict[str, Any]] = field(default_factory=list, repr=False)

    def frame(self) -> pd.DataFrame:
        """One row per configuration evaluated, in the order evaluated: each kind's count,
        ``price_per_hour``, ``tokens_per_s``, ``tokens_per_cost``, ``ttft_p99_s``,
        ``tbt_p99_s``, ``latency_ratio`` (the worse of p99 over its target) and
        ``meets_targets``."""
        import pandas as pd

        return pd.DataFrame(self.history)


def _kind_names(kinds: Sequence[Engine]) -> list[str]:
    names = [kind.name or f"kind {k}" for k, kind in enumerate(kinds)]
    if len(set(names)) != len(names):
        raise ValueError(f"engine kinds need distinct names, got {names}")
    return names


def evaluate_fleet(
    workload: Workload,
    kinds: Sequence[Engine],
    counts: Sequence[int],
    router: str = "jsq",
    backoff: Backoff | None = None,
    slo_ttft: float = math.inf,
    slo_tbt: float = math.inf,
    seed: int = 0,
) -> dict[str, Any]:
    """Run ``workload`` on ``counts[k]`` engines of each kind; return the fleet's figures.

    The dict holds ``price_per_hour``, ``tokens_per_s``, ``tokens_per_cost``,
    ``ttft_p99_s``, ``tbt_p99_s``, ``latency_ratio`` (max of each p99 over its target) and
    ``meets_targets``. A fleet of no engine has infinite figures and meets nothing.
    """
    engines = [kind for kind, count in zip(kinds, counts, strict=True) for _ in range(count)]
    if not engines:
        return _cannot_run()
    fleet = simulate_fleet(workload, engines, router, backoff, seed=seed)
    summary = fleet.summary()
    return _figures(workload, summary, fleet.price_per_hour, fleet.makespan, slo_ttft, slo_tbt)


def _cannot_run() -> dict[str, Any]:
    return {
        "price_per_hour": 0.0,
        "tokens_per_s": 0.0,
        "tokens_per_cost": math.inf,  # bounds nothing: a block holding it is searched
        "ttft_p99_s": math.inf,
        "tbt_p99_s": math.inf,
        "latency_ratio": math.inf,
        "meets_targets": False,
    }


def load_seconds(workload: Workload, makespan: float) -> float:
    """The seconds a load lasts: its arrivals' span, or for a closed batch the makespan."""
    span = float(workload.arrival.max() - workload.arrival.min()) if len(workload) else 0.0
    return span if span > 0 else makespan


def _figures(
    workload: Workload,
    summary: dict[str, Any],
    price: float,
    makespan: float,
    slo_ttft: float,
    slo_tbt: float,
) -> dict[str, Any]:
    ratio = max(summary["ttft_p99_s"] / slo_ttft, summary["tbt_p99_s"] / slo_tbt)
    # Throughput per cost at the load: its output tokens over the seconds it lasts, per
    # unit of cost an hour (a fleet that keeps up serves them at that rate; one that
    # does not breaks the latency targets).
    spent = price * load_seconds(workload, makespan) / 3600
    tokens = workload.total_output_tokens
    return {
        "price_per_hour": price,
        "tokens_per_s": summary["tokens_per_s"],
        "tokens_per_cost": tokens / spent if spent > 0 else math.inf,
        "ttft_p99_s": summary["ttft_p99_s"],
        "tbt_p99_s": summary["tbt_p99_s"],
        "latency_ratio": ratio,
        "meets_targets": bool(ratio <= 1.0),
    }


def evaluate_disaggregated(
    workload: Workload,
    cluster: DisaggregatedCluster,
    counts: Sequence[int],
    prices: Sequence[float] = (1.0, 1.0),
    slo_ttft: float = math.inf,
    slo_tbt: float = math.inf,
) -> dict[str, Any]:
    """Run ``workload`` on ``cluster`` with ``counts = (prompt machines, token machines)``,
    each machine of a pool at its ``prices`` entry an hour; the figures of
    :func:`evaluate_fleet`. A cluster without a machine in either pool cannot run."""
    from dataclasses import replace

    from llmsched.fleet.disaggregated import simulate_disaggregated

    prompt, token = counts
    if prompt < 1 or token < 1:
        return _cannot_run()
    sized = replace(cluster, prompt_machines=prompt, token_machines=token)
    schedule = simulate_disaggregated(workload, sized)
    price = prompt * prices[0] + token * prices[1]
    return _figures(workload, schedule.summary(), price, schedule.makespan, slo_ttft, slo_tbt)


def provision(
    workload: Workload,
    kinds: Sequence[Engine],
    max_counts: int | Sequence[int],
    *,
    slo_ttft: float | None = None,
    slo_tbt: float | None = None,
    router: str = "jsq",
    backoff: Backoff | None = None,
    method: str = "bnb",
    eps_latency: float = 0.1,
    seed: int = 0,
    n_jobs: int = 1,
    backend: str | None = None,
    progress: bool = False,
) -> ProvisionResult:
    """The number of engines of each kind that serves ``workload`` at the most output tokens
    per unit of cost with p99 TTFT <= ``slo_ttft`` and p99 time between tokens <= ``slo_tbt``.

    Parameters
    ----------
    workload
        The load: requests with their arrival times.
    kinds
        The engine kinds (:class:`~llmsched.fleet.engine.Engine`, each with its price per hour),
        with distinct names.
    max_counts
        Most engines of each kind (one number for every kind, or one per kind); counts run
        from 0 up.
    slo_ttft, slo_tbt
        Targets in seconds for the fleet's p99 TTFT and p99 time between tokens; at least
        one must be given.
    router, backoff, seed
        As for :func:`llmsched.simulate_fleet`.
    method
        ``bnb``: ExeGPT's monotone branch-and-bound; ``exhaustive``: every configuration,
        through joblib.
    eps_latency
        The branch-and-bound keeps a block while its most machines' latency is within this
        fraction above the target: it absorbs small violations of monotonicity (a faster
        prompt pool feeds token machines larger batches), as ExeGPT's tolerance does. It
        never lets a configuration past the target. No tolerance on throughput per cost,
        which is exactly monotone.
    n_jobs, backend
        joblib workers (-1: every core, or a count >= 1; checked whatever the method) and
        backend (``loky``, ``dask`` on the caller's ``distributed.Client``, ``ray`` once Ray's
        joblib backend is registered; None: the active joblib configuration) for
        ``exhaustive``.
    progress
        Show a progress bar over the configurations evaluated.

    Raises
    ------
    TypeError, ValueError
        Before any work: no kinds, kinds without distinct names, bad counts or targets, a
        grid of more than :data:`MAX_GRID` configurations, an unknown router or method, a
        worker count other than -1 or a count >= 1, or a fleet run that
        :func:`llmsched.fleet.simulate.check_fleet` refuses (a prompt a kind cannot hold, times
        beyond double precision, a policy a fleet cannot run).
    """
    instance("workload", workload, Workload, "a Workload")
    if isinstance(kinds, Engine) or not isinstance(kinds, Sequence) or not kinds:
        raise ValueError("kinds must be a non-empty sequence of llmsched.Engine")
    for k, kind in enumerate(kinds):
        instance(f"kinds[{k}]", kind, Engine, "a llmsched.Engine")
    names = _kind_names(kinds)
    counts: Any = [max_counts] * len(kinds) if isinstance(max_counts, numbers.Integral) else max_counts
    if isinstance(counts, (str, bytes)) or not hasattr(counts, "__len__") or len(counts) != len(kinds):
        raise ValueError(f"max_counts needs one count per kind ({len(kinds)}), got {max_counts!r}")
    tops = [positive_int(f"max_counts[{k}]", c) for k, c in enumerate(counts)]
    ttft, tbt = _targets(slo_ttft, slo_tbt)
    # The run every configuration is, checked once for all of them: every kind's engine holds
    # the workload, and the largest fleet's times stay within double precision.
    router = check_fleet(workload, kinds, router, backoff, seed)[1]
    return _search(
        names,
        tops,
        evaluate_fleet,
        lambda counts: (workload, kinds, counts, router, backoff, ttft, tbt, seed),
        method,
        n_jobs,
        backend,
        progress,
        eps_latency,
    )


def _targets(slo_ttft: float | None, slo_tbt: float | None) -> tuple[float, float]:
    if slo_ttft is None and slo_tbt is None:
        raise ValueError("give a latency target: slo_ttft, slo_tbt or both (seconds)")
    ttft = math.inf if slo_ttft is None else real("slo_ttft", slo_ttft, low=0.0, low_open=True)
    tbt = math.inf if slo_tbt is None else real("slo_tbt", slo_tbt, low=0.0, low_open=True)
    return ttft, tbt


def _search(
    names: list[str],
    tops: list[int],
    evaluate: Callable[..., dict[str, Any]],
    arguments: Callable[[tuple[int, ...]], tuple[Any, ...]],
    method: str,
    n_jobs: int,
    backend: str | None,
    progress: bool,
    eps_latency: float,
) -> ProvisionResult:
    """Search counts ``0..tops[k]`` of each named variable, evaluating ``evaluate(*arguments(counts))``."""
    from llmsched.core.progress import progress_bar

    method = choice("method", method, ("bnb", "exhaustive"))
    n_jobs = check_jobs("n_jobs", n_jobs)
    eps_latency = real("eps_latency", eps_latency, low=0.0, high=1.0, high_open=True)
    progress = flag("progress", progress)
    if backend is not None:
        text("backend", backend)
    # Most machines first: each step along a variable saves cost and adds latency.
    variables = [Variable(name, list(range(top, -1, -1))) for name, top in zip(names, tops, strict=True)]
    grid = grid_size(variables)
    if grid > MAX_GRID:
        raise ValueError(f"the grid has {grid:,} configurations; at most {MAX_GRID:,} are searched")
    figures: dict[tuple[int, ...], dict[str, Any]] = {}
    history: list[dict[str, Any]] = []

    def record(counts: tuple[int, ...], out: dict[str, Any]) -> None:
        figures[counts] = out
        history.append({**dict(zip(names, counts, strict=True)), **out})

    with progress_bar(progress, None if method == "bnb" else grid, "provision", unit="config") as bar:

        def perf(config: dict[str, int]) -> tuple[float, float]:
            counts = tuple(config[name] for name in names)
            if counts not in figures:
                record(counts, evaluate(*arguments(counts)))
                bar.update(1)
            out = figures[counts]
            return out["tokens_per_cost"], out["latency_ratio"]

        if method == "exhaustive":
            from joblib import delayed, parallel_config

            from llmsched.core.progress import progress_parallel

            configs = [tuple(c) for c in itertools.product(*(v.values for v in variables))]
            jobs = [delayed(evaluate)(*arguments(c)) for c in configs]
            with parallel_config(backend=backend) if backend is not None else nullcontext():
                outs = progress_parallel(n_jobs, bar if progress else None)(jobs)
            for c, out in zip(configs, outs, strict=True):
                record(c, out)
            found = exhaustive(perf, variables, 1.0)
        else:
            found = branch_and_bound(perf, variables, 1.0, eps_throughput=0.0, eps_latency=eps_latency)
    if not found.feasible or found.config is None:
        return ProvisionResult(
            None,
            False,
            0.0,
            0.0,
            0.0,
            math.inf,
            math.inf,
            len(figures),
            grid,
            method,
            "no configuration in the grid meets the targets: allow more machines or loosen the targets",
            history,
        )
    best = tuple(found.config[name] for name in names)
    out = figures[best]
    return ProvisionResult(
        dict(zip(names, best, strict=True)),
        True,
        out["tokens_per_cost"],
        out["tokens_per_s"],
        out["price_per_hour"],
        out["ttft_p99_s"],
        out["tbt_p99_s"],
        len(figures),
        grid,
        method,
        "",
        history,
    )


def provision_disaggregated(
    workload: Workload,
    cluster: DisaggregatedCluster,
    max_prompt: int,
    max_token: int,
    *,
    prompt_price: float = 1.0,
    token_price: float = 1.0,
    slo_ttft: float | None = None,
    slo_tbt: float | None = None,
    method: str = "bnb",
    eps_latency: float = 0.1,
    n_jobs: int = 1,
    backend: str | None = None,
    progress: bool = False,
) -> ProvisionResult:
    """How many prompt and token machines (up to ``max_prompt`` and ``max_token``) serve
    ``workload`` on a Splitwise cluster like ``cluster`` (its pool sizes are replaced) at
    the most output tokens per unit of cost within the p99 targets; each machine of a pool
    costs ``prompt_price`` or ``token_price`` an hour. ``counts`` names them ``prompt`` and
    ``token``. The other arguments and the errors are :func:`provision`'s."""
    instance("workload", workload, Workload, "a Workload")
    instance("cluster", cluster, DisaggregatedCluster, "a llmsched.DisaggregatedCluster")
    tops = [positive_int("max_prompt", max_prompt), positive_int("max_token", max_token)]
    prices = (real("prompt_price", prompt_price, low=0.0), real("token_price", token_price, low=0.0))
    ttft, tbt = _targets(slo_ttft, slo_tbt)
    cluster.check(workload)
    return _search(
        ["prompt", "token"],
        tops,
        evaluate_disaggregated,
        lambda counts: (workload, cluster, counts, prices, ttft, tbt),
        method,
        n_jobs,
        backend,
        progress,
        eps_latency,
    )
