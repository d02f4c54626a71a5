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
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from llmsched._checks import positive_int
from llmsched.exegpt.search import SearchResult, Variable, branch_and_bound, exhaustive, grid_size
from llmsched.exegpt.xsim import Estimate, XSimulator

__all__ = [
    "SCHEDULES",
    "ExeGPTResult",
    "Run",
    "Space",
    "monotonicity",
    "optimize",
    "search_spaces",
]

SCHEDULES = ("RRA", "WAA-C", "WAA-M")


def _searched(est: Estimate) -> tuple[float, float]:
    """What the search sees of an estimate. A configuration out of memory cannot run (latency
    inf), and its throughput is reported as inf too: XSimulator's throughput is monotone
    where configurations fit, but not beyond the memory edge (large decode batches and
    frequent encodings collide in the pipeline), so a corner out of memory must not bound
    the throughput of a block; such blocks are split until their corners fit."""
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
                est = sim.rra(
                    config["B_E"], config["N_D"], fixed["TP_degree"], config.get("TP_gpus", fixed["TP_gpus"])
                )
                return _searched(est)

            return rra
        allocation: Literal["C", "M"] = "C" if self.schedule == "WAA-C" else "M"

        def waa(config: dict[str, int]) -> tuple[float, float]:
            est = sim.waa(
                config["B_E"],
                fixed["B_m"],
                fixed["TP_degree"],
                config.get("TP_gpus", fixed["TP_gpus"]),
                allocation,
            )
            return _searched(est)

        return waa


def search_spaces(
    sim: XSimulator,
    schedules: Sequence[str] = SCHEDULES,
    batch_max: int = 128,
    iterations_max: int | None = None,
    micro_batches_max: int = 8,
) -> list[Space]:
    """The runs :func:`optimize` makes: per schedule, TP degree (and WAA micro-batch count).

    ``B_E`` runs over ``1..batch_max``, ``N_D`` over ``1..iterations_max`` (default: the
    largest output length, at most 128), ``B_m`` over ``1..micro_batches_max``, and the
    tensor-parallel GPU count over the multiples of the degree (RRA: up to all GPUs; WAA: up
    to all but one, the decoder's share; fewer are used if the decoder has fewer).
    """
    if isinstance(schedules, str):
        schedules = [schedules]
    unknown = [s for s in schedules if s not in SCHEDULES]
    if unknown or not schedules:
        raise ValueError(f"schedules must be among {list(SCHEDULES)}, got {list(schedules)!r}")
    batch_max = positive_int("batch_max", batch_max)
    if iterations_max is None:
        iterations_max = min(sim.outputs.max, 128)
    iterations_max = positive_int("iterations_max", iterations_max)
    micro_batches_max = positive_int("micro_batches_max", micro_batches_max)
    batches = Variable("B_E", range(1, batch_max + 1))
    out: list[Space] = []
    for schedule in schedules:
        if schedule != "RRA" and sim.gpus < 2:
            continue  # WAA needs an encoder GPU and a decoder GPU
        span = sim.gpus if schedule == "RRA" else sim.gpus - 1
        for degree in sim.tp_degrees(span):
            counts = list(range(span - span % degree, 0, -degree)) if degree > 1 else []
            fixed = {"TP_degree": degree, "TP_gpus": 0}
            extra = (Variable("TP_gpus", counts),) if counts else ()
            if schedule == "RRA":
                iterations = Variable("N_D", range(iterations_max, 0, -1))
                out.append(Space(schedule, fixed, (batches, iterations, *extra)))
            else:
                for micro in range(1, micro_batches_max + 1):
                    out.append(Space(schedule, {**fixed, "B_m": micro}, (batches, *extra)))
    if not out:
        raise ValueError(f"no schedule of {list(schedules)} can run on {sim.gpus} GPU(s)")
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
        order = ["B_E", "N_D", "B_m", "TP_degree", "TP_gpus"]
        return {k: merged[k] for k in order if k in merged}


@dataclass(frozen=True)
class ExeGPTResult:
    """The best configuration over all runs, or none when the bound cannot be met."""

    latency_bound: float
    schedule: str | None
    variables: dict[str, int] | None
    throughput: float
    latency: float
    evaluations: int
    grid_size: int
    feasible: bool
    message: str
    runtime: float
    method: str
    runs: list[Run] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "latency_bound": None if math.isinf(self.latency_bound) else self.latency_bound,
            "feasible": self.feasible,
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
    schedules: Sequence[str] = SCHEDULES,
    eps_throughput: float = 0.01,
    eps_latency: float = 0.01,
    batch_max: int = 128,
    iterations_max: int | None = None,
    micro_batches_max: int = 8,
) -> ExeGPTResult:
    """Maximise throughput subject to ``latency <= latency_bound`` (seconds, or ``inf``).

    ``evaluations`` counts XSimulator calls (distinct configurations, summed over runs);
    ``grid_size`` is what the exhaustive search evaluates. When no configuration meets the
    bound the result has ``feasible=False`` and a message saying so.
    """
    if not isinstance(sim, XSimulator):
        raise TypeError(f"sim must be an XSimulator, got {type(sim).__name__}")
    if method not in ("bnb", "exhaustive"):
        raise ValueError(f"method must be 'bnb' or 'exhaustive', got {method!r}")
    if (
        isinstance(latency_bound, bool)
        or not isinstance(latency_bound, (int, float))
        or not latency_bound > 0
    ):
        raise ValueError(f"latency_bound must be a positive number of seconds or inf, got {latency_bound!r}")
    spaces = search_spaces(sim, schedules, batch_max, iterations_max, micro_batches_max)
    start = time.perf_counter()
    runs = []
    for space in spaces:
        perf = space.perf(sim)
        if method == "bnb":
            result = branch_and_bound(perf, space.variables, latency_bound, eps_throughput, eps_latency)
        else:
            result = exhaustive(perf, space.variables, latency_bound)
        runs.append(Run(space, result, grid_size(space.variables)))
    runtime = time.perf_counter() - start
    evaluations = sum(r.result.evaluations for r in runs)
    grid = sum(r.grid for r in runs)
    feasible = [r for r in runs if r.result.feasible]
    if not feasible:
        return ExeGPTResult(
            float(latency_bound),
            None,
            None,
            0.0,
            math.inf,
            evaluations,
            grid,
            False,
            f"no configuration meets the latency bound of {latency_bound:g} s "
            f"({sim.name or 'this setup'}; schedules {', '.join(schedules)})",
            runtime,
            method,
            runs,
        )
    best = max(feasible, key=lambda r: r.result.throughput)
    return ExeGPTResult(
        float(latency_bound),
        best.space.schedule,
        best.variables(),
        best.result.throughput,
        best.result.latency,
        evaluations,
        grid,
        True,
        "",
        runtime,
        method,
        runs,
    )


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
    tols = [float(t) for t in tolerances]
    if not tols or any(not 0 <= t < 1 for t in tols):
        raise ValueError(f"tolerances must be fractions in [0, 1), got {tols!r}")
    scale = sim.latency_bounds((70,))[0] if latency_scale is None else float(latency_scale)
    if iterations_max is None:
        iterations_max = min(sim.outputs.max, 128)
    batches = list(range(1, batch_max + 1))
    thin_batches = batches[::stride]
    iterations = list(range(iterations_max, 0, -1))
    thin_iterations = iterations[::stride]
    rows: list[dict[str, Any]] = []

    def record(schedule: str, variable: str, sweeps: list[list[tuple[float, float]]]) -> None:
        steps = []
        for sweep in sweeps:
            for (t0, l0), (t1, l1) in itertools.pairwise(sweep):
                if math.isfinite(l0) and math.isfinite(l1):
                    steps.append((t0, l0, t1, l1))
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

    def perf(est: Any) -> tuple[float, float]:
        return est.throughput, est.latency

    # RRA: tensor-parallel settings in the order of rising latency (more TP GPUs first).
    rra_tp = [(1, 0)] + [
        (d, k) for d in sim.tp_degrees() if d > 1 for k in range(sim.gpus - sim.gpus % d, 0, -d)
    ]
    record(
        "RRA",
        "B_E",
        [[perf(sim.rra(b, n, d, k)) for b in batches] for n in thin_iterations for d, k in rra_tp],
    )
    record(
        "RRA",
        "N_D",
        [[perf(sim.rra(b, n, d, k)) for n in iterations] for b in thin_batches for d, k in rra_tp],
    )
    degrees = [d for d in sim.tp_degrees() if d > 1]
    record(
        "RRA",
        "TP_gpus",
        [
            [perf(sim.rra(b, n, d, k)) for k in range(sim.gpus - sim.gpus % d, 0, -d)]
            for d in degrees
            for b in thin_batches
            for n in thin_iterations
        ],
    )
    if sim.gpus >= 2:
        span = sim.gpus - 1
        waa_tp = [(1, 0)] + [
            (d, k) for d in sim.tp_degrees(span) if d > 1 for k in range(span - span % d, 0, -d)
        ]
        micros = list(range(micro_batches_max, 0, -1))
        for allocation in ("C", "M"):
            name = f"WAA-{allocation}"
            record(
                name,
                "B_E",
                [[perf(sim.waa(b, m, d, k, allocation)) for b in batches] for m in micros for d, k in waa_tp],
            )
            record(
                name,
                "B_m",
                [[perf(sim.waa(b, m, d, k, allocation)) for m in micros] for b in batches for d, k in waa_tp],
            )
            record(
                name,
                "TP_gpus",
                [
                    [perf(sim.waa(b, m, d, k, allocation)) for k in range(span - span % d, 0, -d)]
                    for d in sim.tp_degrees(span)
                    if d > 1
                    for b in batches
                    for m in micros
                ],
            )
    return pd.DataFrame(
        rows, columns=["schedule", "variable", "tolerance", "points", "latency_pct", "throughput_pct"]
    )
