"""solve_full on every backend: proven optima between the bounds and the heuristics, limits,
determinism, warm starts, and bad input."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
import pytest
from benchmarks.instances import tiny_instance
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsched import LinearCostModel, Workload, lower_bounds, simulate, validate, workloads
from llmsched.core.cost import LevelCostModel
from llmsched.core.result import Result
from llmsched.mip import FullResult, Status, solve_full
from llmsched.mip.backends import installed
from llmsched.online.warm_starts import heuristic_schedules

COST = LevelCostModel([(256, 0.03), (512, 0.05), (1024, 0.09)], 0.01)
Check = Callable[[FullResult], None]


@pytest.mark.parametrize("seed", range(6))
def test_strong_formulation_proves_an_optimum_between_bounds_and_heuristics(
    solver: str, seed: int, check: Check
) -> None:
    """On tiny instances the strong formulation's optimum is proven; it validates."""
    workload, cost, clients = tiny_instance(seed, max_requests=6, max_output=12)
    warm = heuristic_schedules(workload, cost, clients)
    result = solve_full(workload, cost, clients, time_limit=60, backend=solver, warm_starts=warm)
    assert result.status is Status.OPTIMAL
    assert result.gap == 0 and result.bound == result.objective
    check(result)


@pytest.mark.parametrize("formulation", ["strong", "literal"])
def test_both_formulations_reach_the_known_optimum(solver: str, formulation: str, check: Check) -> None:
    """tiny(4): both formulations prove the optimum 0.6063 s on each backend, with and without
    warm starts (without them K is the number of requests)."""
    workload, cost, clients = tiny_instance(4, max_requests=5, max_output=10)
    warm = heuristic_schedules(workload, cost, clients)
    for starts in (warm, None):
        result = solve_full(
            workload,
            cost,
            clients,
            time_limit=60,
            backend=solver,
            formulation=formulation,
            warm_starts=starts,
        )
        assert result.status is Status.OPTIMAL
        assert result.objective == pytest.approx(0.6063, abs=1e-9)
        assert (result.warm_start is None) == (starts is None)
        check(result)
    assert result.bins == len(workload)


@settings(max_examples=12, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 700), st.integers(1, 8)), min_size=1, max_size=4),
    st.integers(1, 2),
    st.sampled_from(["scip", "cpsat", "highs"]),
)
def test_optimum_is_never_above_a_heuristic_nor_below_a_bound(requests, clients, backend) -> None:
    """Over random tiny instances the proven optimum lies between the lower bound and every heuristic."""
    if not installed(backend):
        pytest.skip(f"{backend} is not installed")
    workload = Workload(prompt_tokens=[r[0] for r in requests], output_tokens=[r[1] for r in requests])
    warm = heuristic_schedules(workload, COST, clients)
    result = solve_full(workload, COST, clients, time_limit=60, backend=backend, warm_starts=warm)
    assert result.status is Status.OPTIMAL
    assert validate(result.schedule) == []
    assert lower_bounds(workload, COST, clients).strong <= result.objective + 1e-9
    assert result.objective <= min(s.makespan for s in warm.values()) + 1e-9


def test_the_mip_beats_the_heuristics_where_they_are_not_optimal(solver: str, check: Check) -> None:
    """On tiny(7) the proven optimum is 3.2% shorter than the best heuristic schedule
    (0.87688 s against 0.9063 s): the optimality gap is real. (With no time limit at all:
    ``inf`` is allowed on every backend.)"""
    workload, cost, clients = tiny_instance(7, max_requests=5, max_output=12)
    warm = heuristic_schedules(workload, cost, clients)
    result = solve_full(workload, cost, clients, time_limit=math.inf, backend=solver, warm_starts=warm)
    assert result.status is Status.OPTIMAL
    assert result.objective == pytest.approx(0.87688, abs=1e-9)
    assert min(s.makespan for s in warm.values()) == pytest.approx(0.9063, abs=1e-9)
    check(result)


def test_a_linear_cost_model_is_solved_at_its_levels(solver: str) -> None:
    """A LinearCostModel is turned into the paper's levels, for the MIP and its warm starts alike."""
    workload, _, clients = tiny_instance(2, max_requests=5)
    linear = LinearCostModel.paper()
    warm = heuristic_schedules(workload, linear, clients)
    result = solve_full(workload, linear, clients, time_limit=60, backend=solver, warm_starts=warm)
    assert result.cost == linear.to_levels(clients)
    assert result.status is Status.OPTIMAL and validate(result.schedule) == []


EIGHT = Workload(prompt_tokens=np.full(8, 60), output_tokens=[3, 17, 8, 20, 11, 5, 14, 19])


def test_the_time_limit_stops_the_search_with_the_best_schedule_and_bound(solver: str, check: Check) -> None:
    """Past its limit the search returns a valid schedule no worse than its start, a bound
    below it, and time_limit, within 10% + 0.5 s of the limit."""
    warm = heuristic_schedules(EIGHT, LinearCostModel.paper(), 2)
    result = solve_full(
        EIGHT,
        LinearCostModel.paper(),
        2,
        time_limit=0.2,
        backend=solver,
        formulation="literal",
        warm_starts=warm,
    )
    assert result.status is Status.TIME_LIMIT
    assert result.runtime <= 0.2 * 1.1 + 1.5  # slack for a loaded machine; the full build takes seconds
    assert result.warm_start is not None and result.objective <= result.warm_start[1] + 1e-9
    assert 0 < result.gap < 1
    check(result)
    assert not result.trace_frame().empty


def test_the_time_limit_stops_the_model_build(solver: str) -> None:
    """The literal model of 40 requests on 8 clients takes seconds to build: a 0.2 s limit stops
    the build in time and returns the warm start and the lower bound."""
    workload = workloads.gsm8k_like(40)
    cost = LinearCostModel.paper().to_levels(8)
    start = simulate(workload, cost, 8, "fcfs", "prefill-first")
    result = solve_full(
        workload, cost, 8, time_limit=0.2, backend=solver, formulation="literal", warm_starts={"fcfs": start}
    )
    assert result.runtime <= 0.2 * 1.1 + 1.5  # slack for a loaded machine; the full build takes seconds
    assert result.status is Status.TIME_LIMIT
    assert result.schedule is start and result.warm_start == ("fcfs", start.makespan)
    assert result.bound == lower_bounds(workload, cost, 8).strong
    # Without a warm start there is no schedule, only the bound.
    bare = solve_full(workload, cost, 8, time_limit=0.1, backend=solver, formulation="literal")
    assert bare.status is Status.TIME_LIMIT and bare.schedule is None
    assert bare.objective == math.inf and bare.gap == math.inf and bare.bound == result.bound


SIX = Workload(prompt_tokens=np.full(6, 60), output_tokens=[3, 17, 8, 20, 11, 5])
# Deterministic effort that stops each backend before its proof on SIX (optimum 1.52412 s,
# 4.2% below the best heuristic's 1.59086 s).
SMALL_WORK = {"scip": 1, "cpsat": 0.005, "highs": 1}


def test_a_work_limit_gives_the_same_answer_every_time(solver: str) -> None:
    """With a deterministic work limit (SCIP's or HiGHS's nodes, CP-SAT's deterministic time) the solve
    stops before its proof, as feasible, and twice gives the same status, objective and bound."""
    warm = heuristic_schedules(SIX, LinearCostModel.paper(), 2)
    runs = [
        solve_full(
            SIX,
            LinearCostModel.paper(),
            2,
            time_limit=math.inf,
            backend=solver,
            warm_starts=warm,
            work_limit=SMALL_WORK[solver],
        )
        for _ in range(2)
    ]
    first, second = runs
    assert first.status is Status.FEASIBLE
    assert first.bound < 1.52412 - 1e-6 and first.objective >= 1.52412 - 1e-9
    assert (first.status, first.objective, first.bound) == (second.status, second.objective, second.bound)


def test_the_default_stops_on_work_not_on_the_clock(solver: str) -> None:
    """Without a time limit or a work limit a solve stops on the backend's default work
    budget: the same status, objective and bound every time, with no clock involved."""
    from llmsched.mip.full.solve import DEFAULT_WORK_LIMIT

    warm = heuristic_schedules(SIX, LinearCostModel.paper(), 2)
    runs = [solve_full(SIX, LinearCostModel.paper(), 2, backend=solver, warm_starts=warm) for _ in range(2)]
    assert runs[0].status is Status.OPTIMAL and abs(runs[0].objective - 1.52412) < 1e-5
    assert (runs[0].objective, runs[0].bound) == (runs[1].objective, runs[1].bound)
    assert DEFAULT_WORK_LIMIT[solver] > SMALL_WORK[solver]
    # math.inf lifts the work limit; the proof is the same.
    free = solve_full(SIX, LinearCostModel.paper(), 2, backend=solver, warm_starts=warm, work_limit=math.inf)
    assert free.status is Status.OPTIMAL and free.objective == runs[0].objective


def test_infeasible_bins_and_bad_input(solver: str) -> None:
    """Too few bins is a ValueError; bins no schedule fits give 'infeasible'; bad arguments are refused."""
    workload = Workload(prompt_tokens=[600, 600, 600], output_tokens=[2, 2, 2])
    with pytest.raises(ValueError, match="bins=1 cannot hold"):
        solve_full(workload, COST, 3, bins=1, backend=solver)
    # 1,800 prompt tokens fit two stages of 1,024 by count, but no stage holds two prompts of 600.
    result = solve_full(workload, COST, 3, bins=2, time_limit=30, backend=solver)
    assert result.status is Status.INFEASIBLE and result.schedule is None
    assert result.objective == result.bound == result.gap == math.inf
    for kwargs, message in (
        ({"backend": "gurobi"}, "unknown backend 'gurobi'"),
        ({"formulation": "weak"}, "unknown formulation 'weak'"),
        ({"time_limit": -1}, "time_limit must be a number of seconds >= 0"),
        ({"time_limit": math.nan}, "time_limit"),
        ({"work_limit": 0}, "work_limit must be a positive number, math.inf for none or None"),
        ({"work_limit": -math.inf}, "work_limit"),
        ({"work_limit": math.nan}, "work_limit"),
        ({"backend": "scip", "work_limit": 2.5}, "whole number"),
        ({"backend": "highs", "work_limit": 2.5}, "HiGHS's branch-and-bound nodes: a whole number"),
        ({"backend": "scip", "workers": 2}, "workers=2"),
        ({"backend": "highs", "workers": 2}, "workers=2: HiGHS solves on one thread"),
        ({"warm_starts": {"x": simulate(workload, LinearCostModel.paper(), 3)}}, r"warm_starts\['x'\]"),
    ):
        with pytest.raises(ValueError, match=message):
            solve_full(workload, COST, 3, **{"backend": solver, **kwargs})
    with pytest.raises(TypeError, match="workers must be an integer"):
        solve_full(workload, COST, 3, backend=solver, workers=1.5)
    with pytest.raises(ValueError, match="capacity"):
        solve_full(Workload(prompt_tokens=[2000], output_tokens=[1]), COST, 1, backend=solver)
    with pytest.raises(ValueError, match="offline batch"):
        solve_full(
            Workload(prompt_tokens=[10, 10], output_tokens=[3, 5], arrival=[0.0, 1.0]),
            COST,
            1,
            backend=solver,
        )


def test_warm_starts_must_be_schedules_of_this_instance(solver: str) -> None:
    """A warm start of other requests, other clients, another cost model or no Schedule at all
    is refused before any work, naming the entry."""
    workload = Workload(prompt_tokens=[100, 200, 300], output_tokens=[2, 4, 6])
    other = Workload(prompt_tokens=[100, 200, 300], output_tokens=[2, 4, 7])
    for starts, error, message in (
        (
            {"a": simulate(other, COST, 2)},
            ValueError,
            r"warm_starts\['a'\] is a schedule of another instance",
        ),
        (
            {"b": simulate(workload, COST, 3)},
            ValueError,
            r"warm_starts\['b'\] is a schedule of another instance",
        ),
        (
            {"c": simulate(workload, LinearCostModel.paper(), 2)},
            ValueError,
            r"warm_starts\['c'\] was run under",
        ),
        ({"d": "fcfs"}, TypeError, r"warm_starts\['d'\] must be a Schedule"),
        ([simulate(workload, COST, 2)], TypeError, "warm_starts must map names to Schedules"),
    ):
        with pytest.raises(error, match=message):
            solve_full(workload, COST, 2, backend=solver, warm_starts=starts)


@pytest.mark.parametrize("formulation", ["strong", "literal"])
def test_given_bins_below_the_heuristics_still_solve(solver: str, formulation: str) -> None:
    """With fewer bins than every heuristic uses, both formulations find the same 2-bin optimum,
    and no heuristic of more bins is returned (the literal one's horizon must then hold any
    schedule of that many bins)."""
    cost = LevelCostModel([(100, 0.01)], 0.1)
    workload = Workload(prompt_tokens=[10, 10, 10, 10], output_tokens=[1, 30, 1, 1])
    warm = heuristic_schedules(workload, cost, 2)
    assert all(np.count_nonzero(s.stage_kind == 0) > 2 for s in warm.values())
    result = solve_full(
        workload, cost, 2, bins=2, time_limit=60, backend=solver, formulation=formulation, warm_starts=warm
    )
    assert result.status is Status.OPTIMAL and result.warm_start is None
    assert result.objective == pytest.approx(3.12)
    assert validate(result.schedule) == []
    assert np.count_nonzero(result.schedule.stage_kind == 0) <= 2


def test_the_result_is_a_frozen_result_of_the_common_vocabulary(solver: str) -> None:
    """FullResult is a Result: frozen, a tuple trace, ``bound`` is ``lower_bound``, and
    dataclasses.replace makes a changed copy."""
    workload, cost, clients = tiny_instance(4, max_requests=5, max_output=10)
    warm = heuristic_schedules(workload, cost, clients)
    result = solve_full(workload, cost, clients, time_limit=60, backend=solver, warm_starts=warm)
    assert isinstance(result, Result) and isinstance(result.trace, tuple)
    assert result.bound == result.lower_bound
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.objective = 0.0  # type: ignore[misc]
    changed = dataclasses.replace(result, lower_bound=0.5, gap=0.25)
    assert changed.bound == 0.5 and changed.gap == 0.25 and changed.schedule is result.schedule
    assert result.bound == result.objective
    assert list(result.trace_frame().columns) == ["time", "lower_bound", "upper_bound", "source"]


def test_a_context_aware_model_is_refused_with_the_conversion_to_use() -> None:
    """The MIP cannot see context: a ContextCostModel is refused, naming to_levels(context=N);
    the conversion it names solves, and its levels never charge a stage less than the model."""
    from llmsched import ContextCostModel

    workload = Workload([20, 30, 10], [3, 2, 4])
    context = ContextCostModel(0.03, 1e-4, 1e-6, 0.01, 1e-3, 1e-4, 64)
    with pytest.raises(TypeError, match=r"to_levels\(clients, context=N\)"):
        solve_full(workload, context, 2, time_limit=10, backend="highs")
    longest = int((workload.prompt_tokens + workload.output_tokens).max())
    result = solve_full(workload, context.to_levels(2, context=longest), 2, time_limit=30, backend="highs")
    assert result.status is Status.OPTIMAL and validate(result.schedule) == []
    # The MIP's plan replayed under the context model itself is no slower than the MIP said.
    from llmsched.engines.loop import CostClock, replay_policies, run_loop

    replayed = run_loop(workload, context, 2, *replay_policies(result.schedule), CostClock())
    assert validate(replayed) == []
    assert replayed.makespan <= result.objective + 1e-9
