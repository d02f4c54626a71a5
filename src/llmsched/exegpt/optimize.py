"""XScheduler: the best RRA or WAA configuration under a latency bound.

For each schedule (RRA, WAA-C, WAA-M) and each tensor-parallel degree, the degree is fixed
and :func:`~llmsched.exegpt.search.branch_and_bound` searches the monotone variables (RRA:
``B_E``, ``N_D``, the tensor-parallel GPU count; WAA: ``B_E`` and the GPU count); the best
configuration over all runs wins, as ExeGPT does (Sec. 5.1). WAA's decoder micro-batch count
``B_m`` is enumerated like the degree: in our timeline a round takes
``pass(B_D / B_m) + (B_m - 1) * tick(B_D / B_m)``, which first falls and then rises with
``B_m`` (more micro-batches shorten each pass but fill the pipeline more often), so it has no
direction a branch-and-bound could use (:func:`monotonicity` measures this).

:func:`optimize` with ``method="exhaustive"`` evaluates every configuration of the same
grid, to verify the search.
"""

from __future__ import annotations

import itertools
import math
import numbers
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from llmsched.core.checks import flag, positive_int
from llmsched.core.progress import progress_bar
from llmsched.core.result import Result, Status
from llmsched.exegpt.search import SearchResult, Variable, branch_and_bound, exhaustive, grid_size
from llmsched.exegpt.xsim import MAX_BATCH, MAX_ITERATIONS, MAX_MICRO_BATCHES, Estimate, XSimulator

__all__ = [
    "FIG6_MODELS",
    "FIG6_TASKS",
    "SCHEDULES",
    "ExeGPTResult",
    "Run",
    "Space",
    "against_fixed_batch",
    "monotonicity",
    "optimize",
    "search_spaces",
]

SCHEDULES = ("RRA", "WAA-C", "WAA-M")


def _searched(est: Estimate) -> tuple[float, float]:
    """What the search sees of an estimate. A configuration out of memory cannot run (latency
    inf), and its throughput is reported as inf too: beyond the memory edge RRA's throughput
    is not monotone in ``N_D`` (large decode batches and frequent encodings collide in the
    pipeline), so a corner out of memory must not bound the throughput of a block; such
    blocks are split until their corners fit."""
    if not est.fits:
        return math.inf, math.inf
    return est.throughput, est.latency


@dataclass(frozen=True)
class Space:
    """One branch-and-bound run: a schedule, fixed values, and the variables searched."""

    schedule: str
    fixed: dict[str, int]
    variables: tuple[Variable, ...]

    def perf(self, sim: XSimulator) -> Any:
        """``perf(config) -> (throughput, latency)`` of this space on ``sim``."""
        fixed = self.fixed
        if self.schedule == "RRA":

            def rra(config: dict[str, int]) -> tuple[float, float]:
                est = sim.rra(config["B_E"], config["N_D"], fixed["TP_degree"], fixed["TP_gpus"])
                return _searched(est)

            return rra
        allocation: Literal["C", "M"] = "C" if self.schedule == "WAA-C" else "M"

        def waa(config: dict[str, int]) -> tuple[float, float]:
            est = sim.waa(config["B_E"], fixed["B_m"], fixed["TP_degree"], fixed["TP_gpus"], allocation)
            return _searched(est)

        return waa


def _schedule_list(schedules: Sequence[str] | str) -> list[str]:
    if not isinstance(schedules, (str, Sequence)):
        raise TypeError(
            f"schedules must be a schedule name or a sequence of them among {list(SCHEDULES)}, "
            f"got {type(schedules).__name__} {schedules!r}"
        )
    chosen = [schedules] if isinstance(schedules, str) else list(schedules)
    unknown = [s for s in chosen if s not in SCHEDULES]
    if unknown or not chosen:
        raise ValueError(f"schedules must be among {list(SCHEDULES)}, got {chosen!r}")
    return chosen


def _tp_settings(sim: XSimulator, gpus: int, max_stages: int) -> list[tuple[int, list[int]]]:
    """(degree, tensor-parallel GPU counts) on ``gpus`` GPUs, most GPUs first, keeping only
    pipelines of at most ``max_stages`` stages."""
    out = []
    for degree in sim.tp_degrees(gpus):
        if degree == 1:
            counts = [0] if gpus <= max_stages else []
        else:
            counts = [
                k for k in range(gpus - gpus % degree, 0, -degree) if gpus - k + k // degree <= max_stages
            ]
        if counts:
            out.append((degree, counts))
    return out


def search_spaces(
    sim: XSimulator,
    schedules: Sequence[str] | str = SCHEDULES,
    batch_max: int = 128,
    iterations_max: int | None = None,
    micro_batches_max: int = 8,
) -> list[Space]:
    """The runs :func:`optimize` makes.

    ``B_E`` runs over ``1..batch_max``, ``N_D`` over ``1..iterations_max`` (default: the
    largest output length, at most 128), ``B_m`` over ``1..micro_batches_max``.

    RRA: one run per tensor-parallel degree and count of tensor-parallel GPUs (a multiple
    of the degree), searching ``B_E`` and ``N_D``. The paper fixes the degree and searches
    the count, which it finds monotone; in XSimulator it is not (fewer, deeper pipeline
    stages leave fewer bubbles, which can outweigh the all-reduces: see
    :func:`monotonicity`), and with the count searched the branch-and-bound missed the
    optimum by 2.4-2.6% in 2 of 80 checks on GPT-3 39B and 101B, so the count is enumerated.

    WAA: the allocation rule gives the encoder a number of GPUs that depends on ``B_E``; one
    run per stretch of ``B_E`` with the same split, per degree, tensor-parallel GPU count
    (up to the decoder's GPUs) and ``B_m``, searching ``B_E``. The GPU count and ``B_m`` are
    enumerated because neither is monotone in WAA: more tensor-parallel decoder GPUs shorten
    the decoder's pass and so raise throughput as well as lowering latency, and memory need
    not fall with them; a round's time first falls and then rises with ``B_m``.
    """
    chosen = _schedule_list(schedules)
    batch_max = positive_int("batch_max", batch_max, maximum=MAX_BATCH)
    if iterations_max is None:
        iterations_max = min(sim.outputs.max, 128)
    iterations_max = positive_int("iterations_max", iterations_max, maximum=MAX_ITERATIONS)
    micro_batches_max = positive_int("micro_batches_max", micro_batches_max, maximum=MAX_MICRO_BATCHES)
    if "WAA-M" in chosen and sim.model is None:
        raise ValueError("WAA-M needs a memory model (an XSimulator with model and gpu_memory_gb)")
    out: list[Space] = []
    for schedule in chosen:
        if schedule == "RRA":
            batches = Variable("B_E", range(1, batch_max + 1))
            iterations = Variable("N_D", range(iterations_max, 0, -1))
            for degree, counts in _tp_settings(sim, sim.gpus, sim.enc_layers):
                for count in counts:
                    fixed = {"TP_degree": degree, "TP_gpus": count}
                    out.append(Space(schedule, fixed, (batches, iterations)))
            continue
        if sim.gpus < 2:
            continue  # WAA needs an encoder GPU and a decoder GPU
        allocation: Literal["C", "M"] = "C" if schedule == "WAA-C" else "M"
        split = [sim.encoder_gpus(b, allocation) for b in range(1, batch_max + 1)]
        b = 1
        while b <= batch_max:
            n_e = split[b - 1]
            last = b
            while last < batch_max and split[last] == n_e:
                last += 1
            n_dec = sim.gpus - n_e
            if n_e <= sim.enc_layers:
                stretch = Variable("B_E", range(b, last + 1))
                for degree, counts in _tp_settings(sim, n_dec, sim.dec_layers):
                    for count in counts:
                        for micro in range(1, micro_batches_max + 1):
                            fixed = {"TP_degree": degree, "TP_gpus": count, "B_m": micro, "encoder_gpus": n_e}
                            out.append(Space(schedule, fixed, (stretch,)))
            b = last + 1
    if not out:
        raise ValueError(f"no schedule of {chosen} can run on {sim.gpus} GPU(s) ({sim.name or 'this setup'})")
    return out


@dataclass(frozen=True)
class Run:
    """One search run and its result."""

    space: Space
    result: SearchResult
    grid: int

    def variables(self) -> dict[str, int] | None:
        if self.result.config is None:
            return None
        merged = {**self.space.fixed, **self.result.config}
        order = ["B_E", "N_D", "B_m", "TP_degree", "TP_gpus", "encoder_gpus"]
        return {k: merged[k] for k in order if k in merged}


@dataclass(frozen=True, kw_only=True)
class ExeGPTResult(Result):
    """The best configuration over all runs, in the vocabulary of :class:`~llmsched.core.result.Result`.

    The search *maximises* throughput, so the vocabulary reads as follows.

    Attributes
    ----------
    status
        ``optimal`` for the exhaustive search (every configuration of the grid evaluated);
        ``feasible`` for the branch-and-bound when it found a configuration (its pruning
        assumes that throughput and latency are monotone, which XSimulator does not
        guarantee, so it proves nothing); ``infeasible`` when the exhaustive search found
        no configuration of the grid that meets the latency bound; ``unknown`` when the
        branch-and-bound found none (its pruning may have skipped one).
    objective
        Throughput of the best configuration (sequences/s), the quantity maximised; 0.0 when
        no configuration meets the bound (nothing runs). ``throughput`` is the same number.
    upper_bound
        A proven upper bound on the best throughput over the grid: the objective when the
        search is exhaustive, ``inf`` for the branch-and-bound (nothing proven).
    lower_bound
        The vocabulary's bound is the dual bound of a minimisation; for this maximisation
        that is ``upper_bound``. ``lower_bound`` holds the objective when the search proved
        it optimal (then it is both bounds) and ``nan`` otherwise, so that code reading
        ``lower_bound`` and ``gap`` never takes an unproven result for a closed one.
    gap
        (upper_bound - objective) / upper_bound: 0 when optimal, ``nan`` for the
        branch-and-bound (not known), ``inf`` without a configuration.
    runtime
        Seconds of search (wall clock, for information).
    latency_bound
        The bound searched under (seconds, or ``inf``).
    schedule, variables
        The best configuration's schedule (``RRA``, ``WAA-C``, ``WAA-M``) and variables
        (None without one).
    latency
        Its latency (seconds; ``inf`` without one).
    evaluations, grid_size
        XSimulator calls made, and the configurations of the grid.
    message
        Why there is no configuration ("" when there is one).
    method
        ``bnb`` or ``exhaustive``.
    runs
        Every search run (a schedule and fixed values) and its result.
    """

    upper_bound: float
    latency_bound: float
    schedule: str | None
    variables: dict[str, int] | None
    latency: float
    evaluations: int
    grid_size: int
    message: str
    method: str
    runs: tuple[Run, ...] = field(default=(), repr=False)

    @property
    def throughput(self) -> float:
        """Throughput of the best configuration (sequences/s): the objective."""
        return self.objective

    @property
    def feasible(self) -> bool:
        """True when a configuration meets the latency bound."""
        return self.status in (Status.OPTIMAL, Status.FEASIBLE)

    def to_dict(self) -> dict[str, Any]:
        return {
            "latency_bound": None if math.isinf(self.latency_bound) else self.latency_bound,
            "feasible": self.feasible,
            "status": str(self.status),
            "message": self.message,
            "schedule": self.schedule,
            "variables": self.variables,
            "throughput": self.throughput,
            "latency": None if math.isinf(self.latency) else self.latency,
            "evaluations": self.evaluations,
            "grid_size": self.grid_size,
            "runtime_s": self.runtime,
        }


def optimize(
    sim: XSimulator,
    latency_bound: float,
    *,
    method: Literal["bnb", "exhaustive"] = "bnb",
    schedules: Sequence[str] | str = SCHEDULES,
    eps_throughput: float = 0.01,
    eps_latency: float = 0.01,
    batch_max: int = 128,
    iterations_max: int | None = None,
    micro_batches_max: int = 8,
    progress: bool = False,
) -> ExeGPTResult:
    """Maximise throughput subject to ``latency <= latency_bound`` (seconds, or ``inf``).

    ``evaluations`` counts XSimulator calls (distinct configurations, summed over runs);
    ``grid_size`` is what the exhaustive search evaluates. When no configuration meets the
    bound the result has ``feasible=False`` and a message saying so. The status says what
    was proven (see :class:`ExeGPTResult`): ``optimal`` or ``infeasible`` for the exhaustive
    search, ``feasible`` or ``unknown`` for the branch-and-bound. With ``progress`` a bar on
    stderr counts the XSimulator evaluations (out of the grid for the exhaustive search).
    """
    if not isinstance(sim, XSimulator):
        raise TypeError(f"sim must be an XSimulator, got {type(sim).__name__}")
    if method not in ("bnb", "exhaustive"):
        raise ValueError(f"method must be 'bnb' or 'exhaustive', got {method!r}")
    if (
        isinstance(latency_bound, bool)
        or not isinstance(latency_bound, numbers.Real)
        or not latency_bound > 0
    ):
        raise ValueError(f"latency_bound must be a positive number of seconds or inf, got {latency_bound!r}")
    latency_bound = float(latency_bound)
    for name, eps in (("eps_throughput", eps_throughput), ("eps_latency", eps_latency)):
        if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not 0 <= eps < 1:
            raise ValueError(f"{name} must be a fraction in [0, 1), got {eps!r}")
    progress = flag("progress", progress)
    schedules = _schedule_list(schedules)
    spaces = search_spaces(sim, schedules, batch_max, iterations_max, micro_batches_max)
    total = sum(grid_size(space.variables) for space in spaces) if method == "exhaustive" else None
    start = time.perf_counter()
    runs = []
    with progress_bar(progress, total, f"ExeGPT {method}", unit="config") as bar:
        for space in spaces:
            perf = space.perf(sim)
            if progress:
                bar.set_postfix_str(space.schedule, refresh=False)
                perf = _counted(perf, bar)
            if method == "bnb":
                result = branch_and_bound(perf, space.variables, latency_bound, eps_throughput, eps_latency)
            else:
                result = exhaustive(perf, space.variables, latency_bound)
            runs.append(Run(space, result, grid_size(space.variables)))
    runtime = time.perf_counter() - start
    evaluations = sum(r.result.evaluations for r in runs)
    grid = sum(r.grid for r in runs)
    exhaustive_search = method == "exhaustive"
    feasible = [r for r in runs if r.result.feasible]
    if feasible:
        best = max(feasible, key=lambda r: r.result.throughput)
        throughput = best.result.throughput
        status = Status.OPTIMAL if exhaustive_search else Status.FEASIBLE
        # Only the exhaustive search proves a bound (see ExeGPTResult).
        upper = throughput if exhaustive_search else math.inf
        lower, gap = (throughput, 0.0) if exhaustive_search else (math.nan, math.nan)
        schedule, variables, latency, message = best.space.schedule, best.variables(), best.result.latency, ""
    else:
        where = f"({sim.name or 'this setup'}; schedules {', '.join(schedules)})"
        throughput, lower, gap = 0.0, math.nan, math.inf
        # Only the exhaustive search proves that nothing meets the bound.
        status = Status.INFEASIBLE if exhaustive_search else Status.UNKNOWN
        upper = 0.0 if exhaustive_search else math.inf
        schedule, variables, latency = None, None, math.inf
        message = (
            f"no configuration meets the latency bound of {latency_bound:g} s {where}"
            if exhaustive_search
            else f"no configuration meets the latency bound of {latency_bound:g} s as far as the "
            f"branch-and-bound searched {where}; it assumes monotone latency, so "
            "method='exhaustive' can make sure"
        )
    return ExeGPTResult(
        status=status,
        objective=throughput,
        upper_bound=upper,
        lower_bound=lower,
        gap=gap,
        runtime=runtime,
        latency_bound=latency_bound,
        schedule=schedule,
        variables=variables,
        latency=latency,
        evaluations=evaluations,
        grid_size=grid,
        message=message,
        method=method,
        runs=tuple(runs),
    )


def _counted(perf: Any, bar: Any) -> Any:
    """``perf`` moving ``bar`` one step per evaluation."""

    def counted(config: dict[str, int]) -> tuple[float, float]:
        bar.update()
        return perf(config)

    return counted


def monotonicity(
    sim: XSimulator,
    tolerances: Iterable[float] = (0.02, 0.05, 0.10),
    latency_scale: float | None = None,
    batch_max: int = 128,
    iterations_max: int | None = None,
    micro_batches_max: int = 8,
    stride: int = 4,
) -> Any:
    """Table 5: the share of non-monotone points per schedule and variable.

    Each variable is swept over its values (in the order that should raise throughput and
    latency) with the others fixed, for every combination of the others (``stride`` thins
    the fixed values of ``B_E`` and ``N_D``). A step is non-monotone in latency when the
    latency drops by more than ``tol * latency_scale`` (default: the 70th-percentile bound
    of :meth:`XSimulator.latency_bounds`, as in the paper), and in throughput when it drops
    by more than ``tol`` of the throughput before the step. Steps out of memory are skipped.
    Returns a DataFrame: ``schedule, variable, tolerance, points, latency_pct, throughput_pct``.
    """
    import pandas as pd

    stride = positive_int("stride", stride)
    batch_max = positive_int("batch_max", batch_max, maximum=MAX_BATCH)
    micro_batches_max = positive_int("micro_batches_max", micro_batches_max, maximum=MAX_MICRO_BATCHES)
    tols = [float(t) for t in tolerances]
    if not tols or any(not 0 <= t < 1 for t in tols):
        raise ValueError(f"tolerances must be fractions in [0, 1), got {tols!r}")
    scale = sim.latency_bounds((70,))[0] if latency_scale is None else latency_scale
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not 0 < scale < math.inf:
        raise ValueError(f"latency_scale must be a positive number of seconds, got {latency_scale!r}")
    if iterations_max is None:
        iterations_max = min(sim.outputs.max, 128)
    iterations_max = positive_int("iterations_max", iterations_max, maximum=MAX_ITERATIONS)
    batches = list(range(1, batch_max + 1))
    thin_batches = batches[::stride]
    iterations = list(range(iterations_max, 0, -1))
    thin_iterations = iterations[::stride]
    rows: list[dict[str, Any]] = []
    Point = tuple[float, float] | None

    def record(schedule: str, variable: str, sweeps: list[list[Point]]) -> None:
        steps = []
        for sweep in sweeps:
            for a, b in itertools.pairwise(sweep):
                if a is not None and b is not None and math.isfinite(a[1]) and math.isfinite(b[1]):
                    steps.append((*a, *b))
        if not steps:
            return
        arr = np.asarray(steps)
        for tol in tols:
            lat_bad = np.mean(arr[:, 3] < arr[:, 1] - tol * scale)
            thr_bad = np.mean(arr[:, 2] < arr[:, 0] * (1 - tol))
            rows.append(
                {
                    "schedule": schedule,
                    "variable": variable,
                    "tolerance": tol,
                    "points": len(arr),
                    "latency_pct": 100 * float(lat_bad),
                    "throughput_pct": 100 * float(thr_bad),
                }
            )

    def rra(b: int, n: int, d: int, k: int) -> Point:
        try:
            est = sim.rra(b, n, d, k)
        except ValueError:  # more stages than layers
            return None
        return est.throughput, est.latency

    def waa(b: int, m: int, d: int, k: int, allocation: Literal["C", "M"]) -> Point:
        try:
            est = sim.waa(b, m, d, k, allocation)
        except ValueError:  # the tensor-parallel GPUs do not fit in this B_E's decoder
            return None
        return est.throughput, est.latency

    def counts(gpus: int, degree: int) -> list[int]:
        return list(range(gpus - gpus % degree, 0, -degree))

    # Tensor-parallel settings in the order of rising latency (more TP GPUs first).
    rra_tp = [(1, 0)] + [(d, k) for d in sim.tp_degrees() if d > 1 for k in counts(sim.gpus, d)]
    record("RRA", "B_E", [[rra(b, n, d, k) for b in batches] for n in thin_iterations for d, k in rra_tp])
    record("RRA", "N_D", [[rra(b, n, d, k) for n in iterations] for b in thin_batches for d, k in rra_tp])
    record(
        "RRA",
        "TP_gpus",
        [
            [rra(b, n, d, k) for k in counts(sim.gpus, d)]
            for d in sim.tp_degrees()
            if d > 1
            for b in thin_batches
            for n in thin_iterations
        ],
    )
    if sim.gpus >= 2 and sim.model is not None:
        span = sim.gpus - 1
        waa_tp = [(1, 0)] + [(d, k) for d in sim.tp_degrees(span) if d > 1 for k in counts(span, d)]
        micros = list(range(micro_batches_max, 0, -1))
        allocations: tuple[Literal["C", "M"], ...] = ("C", "M")
        for allocation in allocations:
            name = f"WAA-{allocation}"
            record(
                name,
                "B_E",
                [[waa(b, m, d, k, allocation) for b in batches] for m in micros for d, k in waa_tp],
            )
            record(
                name,
                "B_m",
                [[waa(b, m, d, k, allocation) for m in micros] for b in batches for d, k in waa_tp],
            )
            record(
                name,
                "TP_gpus",
                [
                    [waa(b, m, d, k, allocation) for k in counts(span, d)]
                    for d in sim.tp_degrees(span)
                    if d > 1
                    for b in batches
                    for m in micros
                ],
            )
    columns = ["schedule", "variable", "tolerance", "points", "latency_pct", "throughput_pct"]
    return pd.DataFrame(rows, columns=columns)


#: The settings of ExeGPT's Fig. 6: small and mid-sized models on their A40 clusters (T5-11B
#: on 8, OPT-13B on 4, GPT-3 39B on 16), tasks S, T and C1.
FIG6_MODELS = ("t5-11b", "opt-13b", "gpt3-39b")
FIG6_TASKS = ("S", "T", "C1")


def against_fixed_batch(sim: XSimulator, bounds: Sequence[float] | None = None) -> list[dict[str, Any]]:
    """ExeGPT against FasterTransformer (Fig. 6): for each latency bound, the best fixed batch
    that meets it (:meth:`~llmsched.exegpt.xsim.XSimulator.fixed_batch`, batch sizes in steps
    of four while they fit, as the paper sweeps FT) and ExeGPT's search (:func:`optimize`).

    ``bounds`` defaults to the paper's: the 10th, 30th and 70th percentiles of the fixed-batch
    sweep's latencies, and inf (:meth:`~llmsched.exegpt.xsim.XSimulator.latency_bounds`).
    Returns one dict per bound: ``bound`` (s), ``fixed_batch`` (the fixed batch's size),
    ``fixed_throughput`` (sequences/s; 0.0 when no fixed batch meets the bound),
    ``exegpt_throughput``, ``schedule``, ``exegpt_latency`` and ``gain`` (ExeGPT's throughput
    over the fixed batch's; None when the fixed batch meets no bound).
    """
    sweep = sim.fixed_batch_sweep()
    if bounds is None:
        bounds = sim.latency_bounds()
    rows: list[dict[str, Any]] = []
    for bound in bounds:
        if isinstance(bound, bool) or not isinstance(bound, numbers.Real) or math.isnan(bound) or bound <= 0:
            raise ValueError(f"each bound must be a number of seconds > 0 (inf allowed), got {bound!r}")
        met = [e for e in sweep if e.latency <= bound]
        best = max(met, key=lambda e: e.throughput) if met else None
        found = optimize(sim, float(bound))
        fixed = best.throughput if best is not None else 0.0
        rows.append(
            {
                "bound": float(bound),
                "fixed_batch": int(best.encode_batch) if best is not None else None,
                "fixed_throughput": float(fixed),
                "exegpt_throughput": float(found.throughput) if found.feasible else 0.0,
                "schedule": found.schedule,
                "exegpt_latency": float(found.latency) if found.feasible else math.inf,
                "gain": float(found.throughput / fixed) if fixed > 0 and found.feasible else None,
            }
        )
    return rows
