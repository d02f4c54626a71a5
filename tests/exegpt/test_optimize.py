"""The ExeGPT search over RRA and WAA, the monotonicity report and the CLI."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from llmsched.cli import main
from llmsched.core.result import Result, Status
from llmsched.exegpt import XSimulator, monotonicity, optimize, search_spaces

SMALL = {"batch_max": 24, "iterations_max": 20, "micro_batches_max": 3}
TINY = {"batch_max": 8, "iterations_max": 8, "micro_batches_max": 2}


@pytest.mark.parametrize("task", ["S", "C1"])
def test_branch_and_bound_matches_exhaustive_on_a_small_grid(task: str) -> None:
    """At each of the paper's four kinds of bound the search is within eps_T of the
    exhaustive optimum, meets the bound, and evaluates fewer configurations."""
    sim = XSimulator.for_task("opt-13b", task)
    for bound in sim.latency_bounds():
        exact = optimize(sim, bound, method="exhaustive", **SMALL)
        found = optimize(sim, bound, **SMALL)
        assert found.feasible == exact.feasible
        assert exact.evaluations == exact.grid_size == found.grid_size
        assert found.evaluations < exact.evaluations
        if exact.feasible:
            assert math.isfinite(found.throughput) and math.isfinite(found.latency)
            assert found.latency <= bound
            assert found.throughput >= exact.throughput / 1.01
            assert found.schedule in ("RRA", "WAA-C", "WAA-M")
            assert found.variables is not None and found.variables["B_E"] <= SMALL["batch_max"]


def test_result_variables_reproduce_the_reported_figures() -> None:
    """The chosen variables, fed back to XSimulator, give the reported throughput and latency."""
    sim = XSimulator.for_task("opt-13b", "S")
    result = optimize(sim, 6.0, **SMALL)
    v = result.variables
    assert v is not None
    if result.schedule == "RRA":
        est = sim.rra(v["B_E"], v["N_D"], v["TP_degree"], v["TP_gpus"])
    else:
        est = sim.waa(v["B_E"], v["B_m"], v["TP_degree"], v["TP_gpus"], result.schedule[-1])  # type: ignore[arg-type]
    assert (est.throughput, est.latency) == (result.throughput, result.latency)
    assert result.latency <= 6.0


def test_an_impossible_bound_is_a_result_not_an_error() -> None:
    """0.05 s cannot be met by any configuration: feasible False and a clear message."""
    result = optimize(XSimulator.for_task("opt-13b", "S"), 0.05, **SMALL)
    assert not result.feasible and result.schedule is None and result.variables is None
    assert "no configuration meets the latency bound of 0.05 s" in result.message
    assert result.to_dict()["latency"] is None


def test_progress_counts_the_evaluations_on_stderr(capsys) -> None:
    """progress=True draws a bar on stderr that counts XSimulator evaluations, out of the grid
    for the exhaustive search; the default draws nothing; a non-bool is refused."""
    sim = XSimulator.for_task("opt-13b", "S")
    exact = optimize(sim, 6.0, method="exhaustive", progress=True, **TINY)
    err = capsys.readouterr().err
    assert "ExeGPT exhaustive: 100%" in err and f"{exact.grid_size}/{exact.grid_size}" in err
    found = optimize(sim, 6.0, progress=True, **TINY)
    assert f"ExeGPT bnb: {found.evaluations}config" in " ".join(capsys.readouterr().err.split())
    silent = optimize(sim, 6.0, method="exhaustive", **TINY)
    assert dataclasses.replace(silent, runtime=exact.runtime) == exact
    assert capsys.readouterr().err == ""
    with pytest.raises(TypeError, match="progress must be True or False"):
        optimize(sim, 6.0, progress="yes", **TINY)


def test_results_say_what_each_search_proves() -> None:
    """Throughput is maximised: the exhaustive search is optimal (both bounds are its
    objective, gap 0); the branch-and-bound is only feasible (no bound: nan lower bound and
    gap, infinite upper bound). An impossible bound is proven infeasible only exhaustively."""
    sim = XSimulator.for_task("opt-13b", "S")
    exact = optimize(sim, 6.0, method="exhaustive", **TINY)
    found = optimize(sim, 6.0, **TINY)
    assert exact.status is Status.OPTIMAL and exact.feasible
    assert exact.objective == exact.throughput == exact.lower_bound == exact.upper_bound and exact.gap == 0
    assert found.status is Status.FEASIBLE and found.feasible
    assert found.objective == found.throughput > 0
    assert math.isnan(found.lower_bound) and math.isnan(found.gap) and found.upper_bound == math.inf
    assert found.throughput <= exact.upper_bound
    never = optimize(sim, 0.05, method="exhaustive", **TINY)
    unfound = optimize(sim, 0.05, **TINY)
    assert never.status is Status.INFEASIBLE and unfound.status is Status.UNKNOWN
    for result in (never, unfound):
        assert not result.feasible and result.objective == 0.0 and result.gap == math.inf
    assert never.upper_bound == 0.0 and unfound.upper_bound == math.inf
    assert "method='exhaustive' can make sure" in unfound.message


def test_the_result_is_a_frozen_result_with_the_cli_keys() -> None:
    """ExeGPTResult is a Result (frozen, runs as a tuple, replace makes a changed copy) and its
    dict keeps the keys the CLI prints."""
    result = optimize(XSimulator.for_task("opt-13b", "S"), 6.0, **TINY)
    assert isinstance(result, Result) and isinstance(result.runs, tuple) and result.trace == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.objective = 1.0  # type: ignore[misc]
    changed = dataclasses.replace(result, objective=1.5)
    assert changed.throughput == 1.5 and changed.variables == result.variables
    out = result.to_dict()
    for key in ("schedule", "variables", "throughput", "latency", "evaluations", "feasible", "status"):
        assert key in out
    assert out["throughput"] == result.objective and out["feasible"] is True and out["status"] == "feasible"
    json.dumps(out)


def test_search_spaces() -> None:
    """RRA: one run per tensor-parallel setting, searching B_E and N_D. WAA: one run per
    encoder/decoder split, setting and B_m, searching B_E over the stretch with that split;
    the tensor-parallel GPUs always fit in the decoder."""
    sim = XSimulator.for_task("opt-13b", "S")
    spaces = search_spaces(sim, micro_batches_max=2)
    rra = [s for s in spaces if s.schedule == "RRA"]
    assert [(s.fixed["TP_degree"], s.fixed["TP_gpus"]) for s in rra] == [(1, 0), (2, 4), (2, 2), (4, 4)]
    assert all([v.name for v in s.variables] == ["B_E", "N_D"] for s in rra)
    for schedule in ("WAA-C", "WAA-M"):
        waa = [s for s in spaces if s.schedule == schedule]
        covered = set()
        for s in waa:
            (batch,) = s.variables
            assert s.fixed["TP_gpus"] <= sim.gpus - s.fixed["encoder_gpus"]
            for b in batch.values:
                assert sim.encoder_gpus(b, schedule[-1]) == s.fixed["encoder_gpus"]  # type: ignore[arg-type]
                covered.add(b)
        assert covered == set(range(1, 129))


@pytest.mark.parametrize(
    ("model", "task", "gpus", "schedules"),
    [("opt-13b", "S", 6, "WAA-M"), ("gpt3-39b", "G", None, "WAA-C,WAA-M"), ("t5-11b", "C1", None, "RRA")],
)
def test_search_matches_exhaustive_off_the_paper_setup(
    model: str, task: str, gpus: int | None, schedules: str
) -> None:
    """Other GPU counts, models and schedules: the search finds the exhaustive optimum, and
    the configuration it reports can run (finite latency within the bound)."""
    sim = XSimulator.for_task(model, task, gpus=gpus)
    grid = {"batch_max": 32, "iterations_max": 24, "micro_batches_max": 4, "schedules": schedules.split(",")}
    for bound in (sim.latency_bounds()[1], math.inf):
        exact = optimize(sim, bound, method="exhaustive", **grid)  # type: ignore[arg-type]
        found = optimize(sim, bound, **grid)  # type: ignore[arg-type]
        assert found.feasible == exact.feasible
        if exact.feasible:
            assert math.isfinite(found.throughput) and math.isfinite(found.latency) and found.latency <= bound
            assert found.throughput >= exact.throughput / 1.01


def test_bad_search_arguments_raise() -> None:
    """Bounds, methods and schedule names are checked before any work."""
    sim = XSimulator.for_task("opt-13b", "S")
    for bound in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="latency_bound"):
            optimize(sim, bound)
    with pytest.raises(ValueError, match="method"):
        optimize(sim, 5.0, method="random")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="schedules"):
        optimize(sim, 5.0, schedules=["FIFO"])
    with pytest.raises(TypeError, match="schedules must be a schedule name or a sequence"):
        optimize(sim, 5.0, schedules=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="batch_max"):
        optimize(sim, 5.0, batch_max=0)


def test_monotonicity_report() -> None:
    """Shares of non-monotone points per schedule and variable, non-increasing in the tolerance."""
    frame = monotonicity(
        XSimulator.for_task("opt-13b", "S"), batch_max=16, iterations_max=12, micro_batches_max=3
    )
    assert set(frame.variable) == {"B_E", "N_D", "TP_gpus", "B_m"}
    assert set(frame.schedule) == {"RRA", "WAA-C", "WAA-M"}
    assert frame.latency_pct.between(0, 100).all() and frame.throughput_pct.between(0, 100).all()
    for _, group in frame.groupby(["schedule", "variable"]):
        group = group.sort_values("tolerance")
        assert np.all(np.diff(group.latency_pct) <= 1e-12)
        assert np.all(np.diff(group.throughput_pct) <= 1e-12)


def test_cli_json_and_verify(capsys) -> None:
    """--json prints the schedule, variables, throughput, latency and evaluations; --verify
    adds the exhaustive optimum, which the search matches."""
    args = ["exegpt", "--model", "opt-13b", "--task", "S", "--latency-bound", "5", "--batch-max", "16"]
    assert main([*args, "--iterations-max", "16", "--verify", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["schedule"] in ("RRA", "WAA-C", "WAA-M") and out["variables"]["B_E"] <= 16
    assert out["latency"] <= 5 and out["throughput"] > 0 and out["evaluations"] > 0
    exh = out["exhaustive"]
    assert exh["evaluations"] > out["evaluations"]
    assert out["throughput"] >= exh["throughput"] / 1.01 and set(exh) >= {"throughput", "variables"}


def test_cli_infeasible_and_bad_bounds(capsys) -> None:
    """An impossible bound prints the clear message; a non-number is an error, not a trace."""
    assert main(["exegpt", "--latency-bound", "0.01", "--batch-max", "8"]) == 1
    assert "no configuration meets the latency bound" in capsys.readouterr().out
    assert main(["exegpt", "--latency-bound", "soon"]) == 2
    assert "--latency-bound must be a number of seconds or 'inf'" in capsys.readouterr().err
    assert main(["exegpt", "--latency-bound", "inf", "--task", "X"]) == 2
    assert (
        main(["exegpt", "--latency-bound", "inf", "--batch-max", "8", "--iterations-max", "8", "--json"]) == 0
    )
    assert json.loads(capsys.readouterr().out)["latency_bound"] is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_max": 10**9}, "batch_max must be at most 4,096, got 1,000,000,000"),
        ({"iterations_max": 10**12}, "iterations_max must be at most 10,000"),
        ({"micro_batches_max": 10**6}, "micro_batches_max must be at most 64"),
    ],
)
def test_search_grid_sizes_are_bounded(kwargs, message) -> None:
    """A grid too large to enumerate is refused with its limit up front (it hung or ran out of memory)."""
    sim = XSimulator.for_task("opt-13b", "S")
    with pytest.raises(ValueError, match=message):
        search_spaces(sim, **kwargs)


def test_against_fixed_batch_compares_exegpt_with_the_best_fixed_batch_under_each_bound() -> None:
    """Fig. 6's comparison: under each bound the fixed batch is the sweep's best that meets it,
    ExeGPT's pick meets the bound too and here serves more; a bound no fixed batch meets gives
    no gain."""
    from llmsched.exegpt.optimize import against_fixed_batch

    sim = XSimulator.for_task("opt-13b", "S")
    sweep = sim.fixed_batch_sweep()
    rows = against_fixed_batch(sim, [sweep[2].latency, math.inf])
    assert rows[0]["fixed_batch"] == 12 and rows[0]["fixed_throughput"] == pytest.approx(sweep[2].throughput)
    assert rows[1]["fixed_throughput"] == pytest.approx(max(e.throughput for e in sweep))
    for row in rows:
        assert row["exegpt_latency"] <= row["bound"]
        assert row["gain"] == pytest.approx(row["exegpt_throughput"] / row["fixed_throughput"])
        assert row["gain"] > 1.0
    none = against_fixed_batch(sim, [0.5 * sweep[0].latency])[0]
    assert none["fixed_batch"] is None and none["gain"] is None and none["fixed_throughput"] == 0.0
    with pytest.raises(ValueError, match="each bound must be a number of seconds > 0"):
        against_fixed_batch(sim, [0.0])
