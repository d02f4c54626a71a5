"""PD disaggregation (Splitwise): the transfer, the loop, the validator rule by rule, the
lower bound, the mixed pool and non-anticipation."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsched import LevelCostModel, LinearCostModel, Workload
from llmsched.engines.disaggregation.bounds import disaggregated_lower_bounds
from llmsched.engines.disaggregation.cluster import DisaggregatedCluster, kv_bytes_per_token
from llmsched.engines.disaggregation.validate import validate_disaggregated
from llmsched.online.simulate import simulate_disaggregated
from tests.strategies import cost_models

PAPER = LinearCostModel.paper()
LLAMA_65B = kv_bytes_per_token(80, 64, 128)  # float16


def _cluster(**kw) -> DisaggregatedCluster:
    base = {
        "prompt_machines": 1,
        "token_machines": 2,
        "prompt_cost": PAPER,
        "token_cost": PAPER,
        "token_clients": 8,
        "kv_bytes_per_token": LLAMA_65B,
        "kv_bandwidth": 25.0,
        "layers": 80,
        "overlap": True,
        "mixed": False,
    }
    return DisaggregatedCluster(**{**base, **kw})


def _workload(n: int = 40, seed: int = 0, spread: float = 6.0) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(
        rng.integers(5, 900, n), rng.integers(1, 80, n), arrival=np.sort(rng.uniform(0, spread, n)).round(3)
    )


def test_requests_move_from_prompt_to_token_machines() -> None:
    work = _workload()
    cluster = _cluster()
    s = simulate_disaggregated(work, cluster)
    assert validate_disaggregated(s) == []
    assert set(s.stage_machine.tolist()) == {0} and set(s.request_machine.tolist()) <= {1, 2}
    assert (s.transfer_time > 0).all()
    # The first gap holds the transfer: no earlier than it.
    assert (s.first_gap >= s.transfer_time - 1e-12).all()
    summary = s.summary()
    assert summary["mode"] == "disaggregated" and summary["transfer_mean_s"] == pytest.approx(
        s.transfer_time.mean()
    )
    assert 0 < summary["utilization_prompt"] <= 1 and 0 < summary["utilization_token"] <= 1
    # Without overlap each transfer is the whole x.
    flat = simulate_disaggregated(work, replace(cluster, overlap=False))
    x = work.prompt_tokens * LLAMA_65B / 25e9
    np.testing.assert_allclose(flat.transfer_time, x, rtol=1e-9)


@settings(max_examples=60, deadline=None)
@given(
    cost_models(),
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(1, 6),
    st.floats(0.5, 400),
    st.booleans(),
    st.booleans(),
    st.data(),
)
def test_every_disaggregated_schedule_validates_and_respects_the_bound(
    cost, prompts, tokens, clients, bandwidth, overlap, mixed, data
) -> None:
    """Over random workloads, arrivals, pool sizes, bandwidths, cost models, with and without
    overlap and the mixed pool: the schedule validates and no makespan is below the bound."""
    if isinstance(cost, LevelCostModel):
        cost = PAPER
    n = data.draw(st.integers(1, 25))
    cap = cost.prefill_capacity
    prompt = data.draw(st.lists(st.integers(1, cap), min_size=n, max_size=n))
    output = data.draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))
    arrival = data.draw(st.lists(st.floats(0, 10, allow_nan=False), min_size=n, max_size=n))
    work = Workload(prompt, output, arrival=arrival)
    cluster = _cluster(
        prompt_machines=prompts,
        token_machines=tokens,
        prompt_cost=cost,
        token_cost=cost,
        token_clients=clients,
        kv_bytes_per_token=LLAMA_65B / 100,
        kv_bandwidth=bandwidth,
        layers=data.draw(st.integers(1, 80)),
        overlap=overlap,
        mixed=mixed,
    )
    s = simulate_disaggregated(work, cluster)
    assert validate_disaggregated(s) == []
    assert s.makespan >= disaggregated_lower_bounds(work, cluster).strong * (1 - 1e-9) - 1e-12
    assert (np.bincount(s.request_stage, minlength=s.stage_start.size) >= 1).all()


def test_the_mixed_pool_lends_idle_token_machines_under_prompt_load() -> None:
    """A burst of long prompts on one prompt machine: with the mixed pool, idle token
    machines prefill some of them and decode them without a transfer; TTFT falls."""
    rng = np.random.default_rng(1)
    work = Workload(rng.integers(2000, 2500, 60), rng.integers(1, 10, 60), arrival=np.zeros(60))
    cluster = _cluster(token_machines=3, token_clients=16)
    plain = simulate_disaggregated(work, cluster)
    mixed = simulate_disaggregated(work, replace(cluster, mixed=True))
    assert validate_disaggregated(plain) == [] and validate_disaggregated(mixed) == []
    lent = ~cluster.is_prompt(mixed.stage_machine)
    assert lent.any() and plain.summary()["lent_stages"] == 0
    local = lent[mixed.request_stage]
    assert (mixed.transfer_time[local] == 0).all()
    assert np.percentile(mixed.ttft, 99) < np.percentile(plain.ttft, 99)


def test_the_mixed_pool_lends_idle_prompt_machines_when_token_machines_are_full() -> None:
    """One token machine of one client and two prompt machines: with the mixed pool, a
    request that finds the token machine full is decoded by the idle prompt machine (under
    the prompt pool's model), which prefills nothing until it is done; the run ends sooner."""
    work = Workload([50] * 6, [200] * 6, arrival=np.arange(6) * 0.5)
    cluster = _cluster(prompt_machines=2, token_machines=1, token_clients=1)
    plain = simulate_disaggregated(work, cluster)
    mixed = simulate_disaggregated(work, replace(cluster, mixed=True))
    assert validate_disaggregated(plain) == [] and validate_disaggregated(mixed) == []
    assert (plain.request_machine == 2).all()
    lent = mixed.request_machine < 2
    assert lent.any() and cluster.is_prompt(mixed.run_machine).any()
    assert mixed.makespan < plain.makespan
    # Without the mixed pool, decoding on a prompt machine breaks the pools rule alone.
    assert {v.rule for v in validate_disaggregated(replace(mixed, cluster=cluster))} == {"pools"}


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.5, 6))
def test_disaggregation_is_non_anticipative(seed, cut) -> None:
    """Requests arriving after T change no stage and no run that ends before T."""
    full = _workload(30, seed)
    early = full.arrival <= cut
    if not early.any():
        return
    part = Workload(full.prompt_tokens[early], full.output_tokens[early], arrival=full.arrival[early])
    cluster = _cluster(prompt_machines=2, token_machines=2, token_clients=4)
    a, b = simulate_disaggregated(full, cluster), simulate_disaggregated(part, cluster)
    for name in ("stage", "run"):
        ends_a = getattr(a, f"{name}_end")
        ends_b = getattr(b, f"{name}_end")
        before_a, before_b = np.flatnonzero(ends_a < cut), np.flatnonzero(ends_b < cut)
        assert before_a.size == before_b.size
        np.testing.assert_array_equal(ends_a[before_a], ends_b[before_b])
