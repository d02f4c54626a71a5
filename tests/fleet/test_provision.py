"""Provisioning: the branch-and-bound finds what the exhaustive search finds, with fewer fleets."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmsched import DisaggregatedCluster, Engine, LinearCostModel, Workload
from llmsched.fleet.provision import evaluate_fleet, load_seconds, provision, provision_disaggregated
from llmsched.workloads import gsm8k_like, poisson_arrivals

PAPER = LinearCostModel.paper()


def _load(n: int, rate: float, seed: int) -> Workload:
    g = gsm8k_like(n, seed)
    return Workload(g.prompt_tokens, g.output_tokens, None, poisson_arrivals(n, rate, seed))


@pytest.mark.parametrize(
    ("rate", "clients", "prices", "slo"),
    [
        (10.0, (32, 16), (1.0, 0.45), (1.0, 0.12)),
        (6.0, (16, 16), (1.0, 0.8), (2.0, 0.1)),
        (14.0, (64, 32), (0.7, 0.5), (0.8, 0.11)),
    ],
)
def test_branch_and_bound_equals_exhaustive_on_fleets(rate, clients, prices, slo) -> None:
    workload = _load(400, rate, 3)
    kinds = [
        Engine(PAPER, c, price=p, name=f"k{i}") for i, (c, p) in enumerate(zip(clients, prices, strict=True))
    ]
    found = provision(workload, kinds, 9, slo_ttft=slo[0], slo_tbt=slo[1])
    every = provision(workload, kinds, 9, slo_ttft=slo[0], slo_tbt=slo[1], method="exhaustive", n_jobs=2)
    assert every.evaluations == every.grid == 100
    assert found.feasible and every.feasible
    assert found.tokens_per_cost == every.tokens_per_cost
    assert found.evaluations < every.grid / 2
    # The chosen fleet meets both targets, and no cheaper one in the grid does.
    frame = every.frame()
    assert found.ttft_p99_s <= slo[0] and found.tbt_p99_s <= slo[1]
    cheaper = frame[frame["price_per_hour"] < found.price_per_hour - 1e-12]
    assert not cheaper["meets_targets"].any()


def test_branch_and_bound_equals_exhaustive_on_a_splitwise_cluster() -> None:
    workload = _load(400, 20.0, 1)
    cluster = DisaggregatedCluster(1, 1, PAPER, PAPER, 32, 2_621_440.0, 25.0)
    args = {"prompt_price": 1.0, "token_price": 0.6, "slo_ttft": 1.0, "slo_tbt": 0.08}
    found = provision_disaggregated(workload, cluster, 7, 7, **args)
    every = provision_disaggregated(workload, cluster, 7, 7, method="exhaustive", **args)
    assert found.feasible and found.tokens_per_cost == every.tokens_per_cost
    assert set(found.counts or {}) == {"prompt", "token"}
    assert found.evaluations < every.grid


def test_throughput_per_cost_is_the_load_over_the_price() -> None:
    workload = _load(200, 8.0, 0)
    out = evaluate_fleet(workload, [Engine(PAPER, 32, price=2.0)], [3], slo_ttft=5.0, slo_tbt=1.0)
    seconds = load_seconds(workload, math.nan)
    assert seconds == pytest.approx(float(workload.arrival.max() - workload.arrival.min()))
    assert out["price_per_hour"] == 6.0
    assert out["tokens_per_cost"] == pytest.approx(workload.total_output_tokens / (6.0 * seconds / 3600))
    assert out["latency_ratio"] == max(out["ttft_p99_s"] / 5.0, out["tbt_p99_s"] / 1.0)
    none = evaluate_fleet(workload, [Engine(PAPER, 32)], [0])
    assert not none["meets_targets"] and math.isinf(none["latency_ratio"])
    batch = Workload([10, 10], [5, 5])
    assert load_seconds(batch, 3.5) == 3.5


def test_no_fleet_meets_the_targets() -> None:
    workload = _load(200, 30.0, 0)
    result = provision(workload, [Engine(PAPER, 4)], 2, slo_ttft=0.01)
    assert not result.feasible and result.counts is None
    assert "no configuration" in result.message
    assert len(result.frame()) == result.evaluations


def test_bad_input_is_refused() -> None:
    workload = _load(50, 5.0, 0)
    kind = Engine(PAPER, 8)
    with pytest.raises(ValueError, match="latency target"):
        provision(workload, [kind], 3)
    with pytest.raises(ValueError, match="distinct names"):
        provision(workload, [Engine(PAPER, 8, name="x"), Engine(PAPER, 4, name="x")], 3, slo_ttft=1.0)
    assert provision(workload, [kind], np.int64(2), slo_ttft=5.0).grid == 3
    with pytest.raises(ValueError, match="one count per kind"):
        provision(workload, [kind], [3, 4], slo_ttft=1.0)
    with pytest.raises(ValueError, match="method"):
        provision(workload, [kind], 3, slo_ttft=1.0, method="guess")
    with pytest.raises(ValueError, match="router"):
        provision(workload, [kind], 3, slo_ttft=1.0, router="nearest")
    with pytest.raises(ValueError, match="grid has"):
        provision(workload, [Engine(PAPER, 8, name=str(i)) for i in range(4)], 100, slo_ttft=1.0)
    with pytest.raises(ValueError, match="capacity"):
        provision(Workload([6000], [1]), [kind], 3, slo_ttft=1.0)
    with pytest.raises(ValueError, match="non-empty"):
        provision(workload, [], 3, slo_ttft=1.0)
    with pytest.raises(TypeError, match="cluster"):
        provision_disaggregated(workload, kind, 3, 3, slo_ttft=1.0)  # type: ignore[arg-type]


def test_exhaustive_runs_unchanged_on_a_dask_cluster() -> None:
    distributed = pytest.importorskip("distributed")
    workload = _load(150, 8.0, 2)
    kinds = [Engine(PAPER, 16, name="a"), Engine(PAPER, 8, price=0.5, name="b")]
    here = provision(workload, kinds, 3, slo_ttft=1.0, method="exhaustive")
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster),
    ):
        there = provision(workload, kinds, 3, slo_ttft=1.0, method="exhaustive", n_jobs=2, backend="dask")
    assert there.counts == here.counts
    np.testing.assert_array_equal(there.frame().to_numpy(), here.frame().to_numpy())


def test_exhaustive_runs_unchanged_on_ray() -> None:
    ray = pytest.importorskip("ray")
    from ray.util.joblib import register_ray

    workload = _load(150, 8.0, 2)
    kinds = [Engine(PAPER, 16, name="a"), Engine(PAPER, 8, price=0.5, name="b")]
    here = provision(workload, kinds, 3, slo_ttft=1.0, method="exhaustive")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        register_ray()
        there = provision(workload, kinds, 3, slo_ttft=1.0, method="exhaustive", n_jobs=2, backend="ray")
    finally:
        ray.shutdown()
    assert there.counts == here.counts
    np.testing.assert_array_equal(there.frame().to_numpy(), here.frame().to_numpy())
