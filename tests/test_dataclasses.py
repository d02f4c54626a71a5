"""Every frozen data class of the package works with ``dataclasses.replace`` and hands out
read-only arrays; a new frozen class without a factory here fails the inventory test."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import llmsched
from llmsched import (
    ContextCostModel,
    LevelCostModel,
    LinearCostModel,
    Workload,
    lower_bounds,
    simulate,
    validate,
    workloads,
)


def _schedule() -> Any:
    return simulate(Workload([10, 20, 30], [3, 1, 4], arrival=[0.0, 0.0, 0.1]), LinearCostModel.paper(), 2)


def _violation() -> Any:
    broken = dataclasses.replace(_schedule(), makespan=1e9)
    return validate(broken)[0]


def _exegpt(method: str) -> Any:
    from llmsched.exegpt import XSimulator, optimize

    sim = XSimulator.for_task("opt-13b", "S")
    return optimize(sim, 6.0, method=method, batch_max=4, iterations_max=4, micro_batches_max=2)


def _space() -> Any:
    from llmsched.exegpt import XSimulator, search_spaces

    return search_spaces(XSimulator.for_task("opt-13b", "S"), batch_max=4, iterations_max=4)[0]


def _search_result() -> Any:
    from llmsched.exegpt.search import Variable, branch_and_bound

    return branch_and_bound(lambda c: (c["x"], c["x"] / 10), [Variable("x", [1, 2, 3])], 0.25)


def _full() -> Any:
    from llmsched.mip import solve_full

    cost = LevelCostModel([(100, 0.01)], 0.1)
    return solve_full(Workload([10, 10, 10], [1, 3, 1]), cost, 2, time_limit=10, backend="highs")


def _plan() -> Any:
    from llmsched.mip.full.replay import plan_from_schedule

    cost = LevelCostModel([(100, 0.01)], 0.1)
    return plan_from_schedule(simulate(Workload([10, 20, 30], [3, 1, 4]), cost, 2))[0]


def _full_data() -> Any:
    from llmsched.mip.full.model import FullData

    cost = LevelCostModel([(100, 0.01)], 0.1)
    return FullData(
        workload=Workload([10, 10], [1, 3]),
        cost=cost,
        clients=1,
        bins=2,
        upper_bound=10.0,
        lower_bound=0.0,
        min_decode_iterations=4,
    )


def _solve_job() -> Any:
    from llmsched.core.result import Tracer
    from llmsched.mip.full.model import SolveJob

    return SolveJob(_full_data(), "strong", Tracer(1.0), work_limit=10)


def _pcmax() -> Any:
    from llmsched.mip import solve_pcmax

    return solve_pcmax([5, 3, 9, 1, 2, 7], 3, time_limit=5)


def _milp_outcome() -> Any:
    from llmsched.mip.milp import MilpModel

    model = MilpModel()
    x, y = model.variable(0, 3, True, "x"), model.variable(0, 3, False, "y")
    model.add(x + y >= 2.5, "cover")
    model.minimize(2 * x + y)
    return model.solve(10.0)


def _search_outcome() -> Any:
    from llmsched.mip.pcmax.search import bin_completion_search

    return bin_completion_search(np.array([5, 3, 9, 1, 2, 7]), 3, 10)


def _pattern_lp() -> Any:
    from llmsched.mip.pcmax.exact import pattern_lp

    return pattern_lp(np.repeat([9, 7, 5, 3], 30), 20)


def _registry_entry() -> Any:
    from llmsched.online.registry import _REQUEST

    return _REQUEST.entries["hybrid-oracle"]


def _insertion() -> Any:
    torch = pytest.importorskip("torch")
    from llmsched.runtime import PRESETS, Engine, LlamaModel
    from llmsched.runtime.insertion import run_insertion

    torch.set_num_threads(1)
    engine = Engine(LlamaModel(PRESETS["tiny"], seed=0), slots=2, max_len=64)
    return run_insertion(engine, Workload([4, 5], [2, 3]), "apart")


def _profile_plan() -> Any:
    pytest.importorskip("torch")
    from llmsched.runtime.profiling import plan_profile

    return plan_profile(8, 64, (4, 20), (4, 60))


def _llama_config() -> Any:
    pytest.importorskip("torch")
    from llmsched.runtime import PRESETS

    return PRESETS["tiny"]


def _fused() -> Any:
    return llmsched.simulate_fusion(
        Workload([10, 20, 30], [3, 1, 4], arrival=[0.0, 0.0, 0.1]),
        LinearCostModel.paper(),
        2,
        token_budget=16,
    )


def _cluster() -> Any:
    from llmsched.engines.disaggregation.cluster import DisaggregatedCluster

    paper = LinearCostModel.paper()
    return DisaggregatedCluster(1, 2, paper, paper, 2, 1e6, 25.0)


def _disaggregated() -> Any:
    from llmsched.fleet.disaggregated import simulate_disaggregated

    return simulate_disaggregated(Workload([10, 20, 30], [3, 1, 4], arrival=[0.0, 0.0, 0.1]), _cluster())


def _mixed_pool() -> Any:
    from llmsched.fleet.mixed_pool import MixedPoolCluster, simulate_mixed_pool

    cluster = MixedPoolCluster(1, 1, LinearCostModel.paper(), clients=2, machine_memory=1e12, weights=1e9)
    return simulate_mixed_pool(Workload([10, 20, 30], [3, 1, 4], arrival=[0.0, 0.0, 0.1]), cluster)


def _fleet() -> Any:
    from llmsched.fleet.engine import Engine
    from llmsched.fleet.simulate import simulate_fleet

    engines = [Engine(LinearCostModel.paper(), 2), Engine(LinearCostModel.paper(), 1, price=2.0)]
    return simulate_fleet(Workload([10, 20, 30], [3, 1, 4], arrival=[0.0, 0.0, 0.1]), engines, "jsq")


FACTORIES: dict[str, Callable[[], Any]] = {
    "llmsched.fleet.engine.Engine": lambda: _fleet().engines[1],
    "llmsched.cli.sweep.SweepConfig": lambda: importlib.import_module("llmsched.cli.sweep").SweepConfig(
        mode="fusion", policy=("fcfs",), rates=(0.5, 1.0)
    ),
    "llmsched.cli.fleet.FleetConfig": lambda: importlib.import_module("llmsched.cli.fleet").FleetConfig(
        engine=("a:8:1", "b:4:0.5"), router="jsq"
    ),
    "llmsched.cli.provision.ProvisionConfig": lambda: importlib.import_module(
        "llmsched.cli.provision"
    ).ProvisionConfig(kind=("a:8:1",), max=(3,), slo_ttft=1.0),
    "llmsched.fleet.routers.base.RouterSetup": lambda: importlib.import_module(
        "llmsched.fleet.routers.base"
    ).RouterSetup(
        2, 3, np.array([10, 20, 30]), np.array([3, 1, 4]), np.arange(3), speeds=np.array([1.0, 2.0])
    ),
    "llmsched.fleet.engine.Backoff": lambda: importlib.import_module("llmsched.fleet.engine").Backoff(0.1, 2),
    "llmsched.fleet.schedule.FleetSchedule": _fleet,
    "llmsched.fleet.provision.ProvisionResult": lambda: importlib.import_module(
        "llmsched.fleet.provision"
    ).provision(
        Workload([10, 20, 30], [3, 1, 4], arrival=[0.0, 0.5, 1.0]),
        [llmsched.Engine(LinearCostModel.paper(), 2)],
        2,
        slo_ttft=5.0,
    ),
    "llmsched.engines.fusion.schedule.FusedSchedule": _fused,
    "llmsched.engines.fusion.bounds.FusedBounds": lambda: llmsched.fused_lower_bounds(
        _fused().workload, LinearCostModel.paper(), 2, 16
    ),
    "llmsched.engines.disaggregation.cluster.DisaggregatedCluster": _cluster,
    "llmsched.fleet.mixed_pool.MixedPoolCluster": lambda: _mixed_pool().cluster,
    "llmsched.fleet.mixed_pool_schedule.MixedPoolSchedule": _mixed_pool,
    "llmsched.engines.disaggregation.schedule.DisaggregatedSchedule": _disaggregated,
    "llmsched.engines.disaggregation.bounds.DisaggregatedBounds": lambda: importlib.import_module(
        "llmsched.engines.disaggregation.bounds"
    ).disaggregated_lower_bounds(_disaggregated().workload, _cluster()),
    "llmsched.engines.competition.bounds.LowerBounds": lambda: lower_bounds(
        workloads.gsm8k_like(20), LinearCostModel.paper(), 4
    ),
    "llmsched.cli.config.PolicyConfig": lambda: importlib.import_module("llmsched.cli.config").PolicyConfig(
        "threshold", {"k": 4}
    ),
    "llmsched.cli.config.RunConfig": lambda: importlib.import_module("llmsched.cli.config").config_from_dict(
        {"cost": {"kind": "levels", "levels": [[100, 0.1]], "decode_token_time": 0.01}, "slo": {"ttft": 2.0}}
    ),
    "llmsched.core.cost.PrefillLevel": lambda: LevelCostModel([(100, 0.1)], 0.01).levels[0],
    "llmsched.core.cost.LinearCostModel": LinearCostModel.paper,
    "llmsched.core.cost.ContextCostModel": lambda: ContextCostModel(0.01, 1e-4, 1e-8, 0.02, 2e-4, 1e-7, 800),
    "llmsched.core.cost.LevelCostModel": lambda: LevelCostModel([(100, 0.1), (200, 0.2)], 0.01),
    "llmsched.core.table.TableCostModel": lambda: llmsched.preset("llama2-70b/h100/tp8").cost(),
    "llmsched.core.hardware.Preset": lambda: llmsched.preset("bloom-176b/a100/tp8"),
    "llmsched.core.memory.KVMemory": lambda: llmsched.core.memory.KVMemory(1000, 16, 0.01),
    "llmsched.exegpt.layers.ModelSpec": lambda: __import__("llmsched.exegpt.layers").exegpt.layers.model_spec(
        "opt-13b"
    ),
    "llmsched.exegpt.layers.GPUSpec": lambda: __import__("llmsched.exegpt.layers").exegpt.layers.gpu_spec(
        "a40"
    ),
    "llmsched.exegpt.layers.LayerCostModel": lambda: (
        __import__("llmsched.exegpt").exegpt.XSimulator.for_task("opt-13b", "S").cost
    ),
    "llmsched.exegpt.optimize.Space": _space,
    "llmsched.exegpt.optimize.Run": lambda: _exegpt("bnb").runs[0],
    "llmsched.exegpt.optimize.ExeGPTResult": lambda: _exegpt("exhaustive"),
    "llmsched.exegpt.search.Variable": lambda: __import__("llmsched.exegpt.search").exegpt.search.Variable(
        "x", [1, 2]
    ),
    "llmsched.exegpt.search.Evaluation": lambda: _search_result().history[0],
    "llmsched.exegpt.search.SearchResult": _search_result,
    "llmsched.exegpt.xsim.LengthDistribution": lambda: __import__(
        "llmsched.exegpt.xsim"
    ).exegpt.xsim.LengthDistribution.truncated_normal(40.0, 10.0, 80),
    "llmsched.exegpt.xsim.Estimate": lambda: (
        __import__("llmsched.exegpt").exegpt.XSimulator.for_task("opt-13b", "S").rra(4, 4, 1, 1)
    ),
    "llmsched.mip.full.model.FullData": _full_data,
    "llmsched.mip.full.model.Plan": _plan,
    "llmsched.mip.full.model.SolveJob": _solve_job,
    "llmsched.mip.full.solve.FullResult": _full,
    "llmsched.mip.milp.MilpOutcome": _milp_outcome,
    "llmsched.mip.pcmax.result.PcmaxResult": _pcmax,
    "llmsched.mip.pcmax.search.SearchOutcome": _search_outcome,
    "llmsched.mip.pcmax.exact.PatternLP": _pattern_lp,
    "llmsched.online.registry._Entry": _registry_entry,
    "llmsched.experiments.reproduce.Method": lambda: importlib.import_module(
        "llmsched.experiments.reproduce"
    ).METHODS[0],
    "llmsched.core.result.TracePoint": lambda: _pcmax().trace[0],
    "llmsched.core.result.Result": lambda: llmsched.core.result.Result(
        status=llmsched.core.result.Status.FEASIBLE, objective=3.0, lower_bound=2.0, gap=1 / 3, runtime=0.1
    ),
    "llmsched.runtime.insertion.InsertionResult": _insertion,
    "llmsched.runtime.model.LlamaConfig": _llama_config,
    "llmsched.runtime.profiling.ProfilePlan": _profile_plan,
    "llmsched.engines.competition.schedule.Schedule": _schedule,
    "llmsched.core.violations.Violation": _violation,
    "llmsched.core.workload.Workload": lambda: workloads.gsm8k_like(5),
    "llmsched.workloads.LengthSpec": lambda: __import__("llmsched.workloads").workloads.EXEGPT_TASKS["S"][0],
    "llmsched.workloads.ArrivalProcess": lambda: workloads.ArrivalProcess("gamma", 2.0, 3.0),
    "llmsched.workloads.PrepareOptions": lambda: workloads.PrepareOptions(
        rate_scale=2.0, max_prompt=5000, arrivals=workloads.ArrivalProcess("poisson", 1.0)
    ),
    "llmsched.experiments.splitwise.Design": lambda: __import__(
        "llmsched.experiments.splitwise", fromlist=["DESIGNS"]
    ).DESIGNS["splitwise-ha"],
    "llmsched.workloads.PrepareReport": lambda: workloads.prepare_report(
        Workload([10, 6000], [3, 4]), max_prompt=5000
    )[1],
}


# Modules that import an optional solver at load (the solvers extra): left out without it.
_SOLVER_MODULES = {"llmsched.mip.full.scip": "pyscipopt", "llmsched.mip.full.cpsat": "ortools"}


def _frozen_dataclasses() -> set[str]:
    found = set()
    for info in pkgutil.walk_packages(llmsched.__path__, "llmsched."):
        if info.name.startswith("llmsched.runtime") and importlib.util.find_spec("torch") is None:
            continue
        if info.name in _SOLVER_MODULES and importlib.util.find_spec(_SOLVER_MODULES[info.name]) is None:
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (
                isinstance(obj, type)
                and dataclasses.is_dataclass(obj)
                and obj.__module__ == info.name
                and obj.__dataclass_params__.frozen  # type: ignore[attr-defined]
            ):
                found.add(f"{info.name}.{name}")
    return found


def test_every_frozen_dataclass_has_a_factory_here() -> None:
    """The inventory: each frozen data class of the package is exercised below."""
    missing = _frozen_dataclasses() - set(FACTORIES)
    assert not missing, f"frozen data classes without a replace test: {sorted(missing)}"


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=np.asarray(a).dtype.kind == "f")
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    return a is b or a == b


@pytest.mark.parametrize("qualname", sorted(FACTORIES))
def test_replace_rebuilds_an_equal_object_and_arrays_are_read_only(qualname: str) -> None:
    """``dataclasses.replace`` with no change gives an object of the same class whose every
    field equals the original's; every array field is read-only."""
    obj = FACTORIES[qualname]()
    assert f"{type(obj).__module__}.{type(obj).__name__}" == qualname
    copy = dataclasses.replace(obj)
    assert type(copy) is type(obj)
    for f in dataclasses.fields(obj):
        if not f.init:
            continue
        value = getattr(obj, f.name)
        assert _same(getattr(copy, f.name), value), f"{qualname}.{f.name} changed under replace"
        if isinstance(value, np.ndarray):
            assert not value.flags.writeable, f"{qualname}.{f.name} is a writable array"
