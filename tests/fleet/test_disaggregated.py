"""The disaggregated cluster on one clock (:mod:`llmsched.fleet.disaggregated`): prompt and
token machines, the transfer, the mixed pool, the request policies of the prompt machines, the
routers of the pools, what is refused before any work, and non-anticipation. Every schedule
validates and meets the lower bound."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import llmsched.fleet.disaggregated as disaggregated
from llmsched import LevelCostModel, LinearCostModel, Workload
from llmsched.core.memory import KVMemory
from llmsched.engines.disaggregation.bounds import disaggregated_lower_bounds
from llmsched.engines.disaggregation.cluster import DisaggregatedCluster, kv_bytes_per_token
from llmsched.engines.disaggregation.schedule import (
    REQUEST_ARRAYS,
    RUN_ARRAYS,
    STAGE_ARRAYS,
    DisaggregatedSchedule,
)
from llmsched.engines.disaggregation.validate import validate_disaggregated
from llmsched.fleet.disaggregated import simulate_disaggregated
from llmsched.fleet.routers import Loads, RouterSetup, make_router
from llmsched.fleet.routers.base import BaseRouter
from llmsched.online import make_request_policy, request_policy_names
from llmsched.online.baselines import FCFS
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


def _draw_workload(data, least: int, prompt: int, output: tuple[int, int], spread: float) -> Workload:
    """A drawn workload of ``least``-25 requests: prompts of 1-``prompt`` tokens, outputs in
    ``output``, arrivals in [0, ``spread``]."""
    n = data.draw(st.integers(least, 25))
    prompts = data.draw(st.lists(st.integers(1, prompt), min_size=n, max_size=n))
    outputs = data.draw(st.lists(st.integers(*output), min_size=n, max_size=n))
    arrival = data.draw(st.lists(st.floats(0, spread, allow_nan=False), min_size=n, max_size=n))
    return Workload(prompts, outputs, arrival=arrival)


def _valid_and_bounded(work: Workload, cluster: DisaggregatedCluster) -> DisaggregatedSchedule:
    """The cluster's schedule of ``work``, checked: it validates, no makespan is below the
    bound, and the gaps between tokens add up to each request's time from first token to last
    (a token machine's pause for a lent stage included)."""
    s = simulate_disaggregated(work, cluster)
    assert validate_disaggregated(s) == []
    assert s.makespan >= disaggregated_lower_bounds(work, cluster).strong * (1 - 1e-9) - 1e-12
    values, counts = s.tbt_distribution()
    assert counts.sum() == work.output_tokens.sum()
    assert float(values @ counts) == pytest.approx(
        float(np.sum(s.finish - s.prefill_end)), rel=1e-9, abs=1e-9
    )
    return s


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
    overlap and the mixed pool (lending busy token machines or only idle ones): the schedule
    validates, no makespan is below the bound, and the gaps between tokens add up."""
    if isinstance(cost, LevelCostModel):
        cost = PAPER
    cap = cost.prefill_capacity
    work = _draw_workload(data, 1, cap, (1, 40), 10.0)
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
        lend_busy_above=data.draw(st.sampled_from([None, 0, 0, cap])) if mixed else None,
    )
    s = _valid_and_bounded(work, cluster)
    assert (np.bincount(s.request_stage, minlength=s.stage_start.size) >= 1).all()
    # Each transfer is the cluster's, to the bit, from its stage's end.
    sent = cluster.is_prompt(s.stage_machine[s.request_stage])
    stage = s.request_stage[sent]
    seconds = s.stage_end[stage] - s.stage_start[stage]
    expected = cluster.transfer(work.prompt_tokens[sent], seconds) + s.stage_end[stage]
    assert s.request_transfer_end[sent].tolist() == np.asarray(expected).tolist()


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


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 2), st.integers(1, 2), st.integers(1, 6), st.integers(0, 600), st.data())
def test_busy_token_machines_lent_stages_validate_and_respect_the_bound(
    prompts, tokens, clients, above, data
):
    """Busy lending over random instances (long outputs, prompts arriving while others decode,
    backlog thresholds from 0): the schedule validates, no makespan is below the bound, and
    the gaps between tokens add up to each request's first-to-last token time."""
    work = _draw_workload(data, 2, 2000, (30, 200), 1.0)
    cluster = _cluster(
        prompt_machines=prompts,
        token_machines=tokens,
        token_clients=clients,
        mixed=True,
        lend_busy_above=above,
    )
    _valid_and_bounded(work, cluster)


def test_a_busy_token_machine_is_lent_stages_past_the_backlog_threshold() -> None:
    """SplitwiseSim's mixed pool: long decodes keep the token machines busy while prompts pile
    up on the prompt machine; with lend_busy_above, a token machine takes stages anyway,
    pausing its decoding for them (the validator accepts a pause filled by stages, and no
    other), and TTFT falls; the gaps between tokens count the pauses."""
    rng = np.random.default_rng(2)
    n = 80
    work = Workload(
        rng.integers(1500, 2500, n), rng.integers(100, 200, n), arrival=np.sort(rng.uniform(0, 4, n))
    )
    cluster = _cluster(token_machines=2, token_clients=32, mixed=True)
    idle_only = simulate_disaggregated(work, cluster)
    busy = simulate_disaggregated(work, replace(cluster, lend_busy_above=4096))
    assert validate_disaggregated(idle_only) == [] and validate_disaggregated(busy) == []
    lent = ~cluster.is_prompt(busy.stage_machine)
    assert lent.sum() > (~cluster.is_prompt(idle_only.stage_machine)).sum()
    # Some lent stage pauses requests decoding on its machine.
    paused = [
        k
        for k in np.flatnonzero(lent).tolist()
        for m in [busy.stage_machine[k]]
        if np.any(
            (busy.request_machine == m)
            & (busy.decode_begin < busy.stage_start[k])
            & (busy.finish > busy.stage_end[k])
        )
    ]
    assert paused
    assert np.percentile(busy.ttft, 50) < np.percentile(idle_only.ttft, 50)
    values, counts = busy.tbt_distribution()
    assert float(values @ counts) == pytest.approx(float(np.sum(busy.finish - busy.prefill_end)), rel=1e-9)
    # A pause that no stage fills is still refused: a paused stage ended early leaves a gap.
    k = paused[0]
    early = busy.stage_end.copy()
    early[k] = (busy.stage_start[k] + busy.stage_end[k]) / 2
    broken = validate_disaggregated(replace(busy, stage_end=early))
    assert any("pauses requests decoding across it" in v.message for v in broken)
    # In a cluster that lends idle machines only, a pause even filled by stages is refused.
    idle_rules = validate_disaggregated(replace(busy, cluster=replace(cluster, lend_busy_above=None)))
    assert any("pauses requests decoding across it" in v.message for v in idle_rules)
    # A busy machine with no client free is not lent a stage it could not start: a long decode
    # on the one client of the one token machine does not hold later prompts there.
    work = Workload([100, 1500, 1500, 1500, 1500], [3000, 5, 5, 5, 5], arrival=[0, 1, 1, 1, 1])
    one = _cluster(token_machines=1, token_clients=1, mixed=True)
    lent = simulate_disaggregated(work, replace(one, lend_busy_above=0))
    assert (
        validate_disaggregated(lent) == [] and lent.ttft.max() <= simulate_disaggregated(work, one).ttft.max()
    )
    with pytest.raises(ValueError, match="needs mixed=True"):
        replace(cluster, mixed=False, lend_busy_above=10)


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


# ------------------------------------------------------------------ request policies
ARRAYS = (*STAGE_ARRAYS, *RUN_ARRAYS, *REQUEST_ARRAYS)


def _same(a: DisaggregatedSchedule, b: DisaggregatedSchedule) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f), equal_nan=True) for f in ARRAYS)


@st.composite
def _instances(draw: st.DrawFn, mixed: bool | None = None) -> tuple[Workload, DisaggregatedCluster]:
    """A small workload with predictions and arrivals (ties included) on a drawn cluster."""
    cost = draw(cost_models())
    if isinstance(cost, LevelCostModel):
        cost = PAPER
    n = draw(st.integers(1, 20))
    prompt = draw(st.lists(st.integers(1, cost.prefill_capacity), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(1, 30), min_size=n, max_size=n))
    predicted = draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))
    arrival = draw(
        st.one_of(
            st.just([0.0] * n),
            st.lists(st.sampled_from([0.0, 0.5, 0.5, 3.0]), min_size=n, max_size=n),
            st.lists(st.floats(0, 8, allow_nan=False), min_size=n, max_size=n),
        )
    )
    cluster = _cluster(
        prompt_machines=draw(st.integers(1, 3)),
        token_machines=draw(st.integers(1, 3)),
        prompt_cost=cost,
        token_cost=cost,
        token_clients=draw(st.integers(1, 5)),
        kv_bytes_per_token=LLAMA_65B / 100,
        kv_bandwidth=draw(st.floats(0.5, 400)),
        mixed=draw(st.booleans()) if mixed is None else mixed,
    )
    return Workload(prompt, output, predicted_output=predicted, arrival=arrival), cluster


@pytest.mark.parametrize("name", request_policy_names())
@settings(max_examples=10, deadline=None)
@given(_instances())
def test_every_registered_request_policy_runs_validates_and_meets_the_bound(name, instance) -> None:
    """Each prompt machine fills its stages through its own policy of the name; whatever the
    policy, every request is prefilled once, the schedule validates and no makespan is below the
    bound; the schedule's info names the policy and whether it planned with the true lengths."""
    work, cluster = instance
    s = simulate_disaggregated(work, cluster, name)
    assert validate_disaggregated(s) == []
    assert s.makespan >= disaggregated_lower_bounds(work, cluster).strong * (1 - 1e-9) - 1e-12
    assert (s.request_stage >= 0).all() and (
        s.request_decode_end - s.request_decode_start == work.output_tokens
    ).all()
    assert s.info["request_policy"] == name and s.info["oracle_lengths"] == name.endswith("-oracle")


@pytest.mark.parametrize("name", request_policy_names())
def test_a_policy_that_plans_with_predictions_is_refused_before_work_without_them(name, monkeypatch) -> None:
    """Without predictions, exactly the policies that plan with them (sizes="predicted") are
    refused, with a ValueError that says so, before the clock starts; the others run."""

    def no_work(self):
        raise AssertionError("the run started")

    work, cluster = _workload(12, seed=4), _cluster(prompt_machines=2)
    needs = getattr(make_request_policy(name), "sizes", None) == "predicted"
    if needs:
        monkeypatch.setattr(disaggregated.ClusterClock, "run", no_work)
        with pytest.raises(ValueError, match="predicted_output"):
            simulate_disaggregated(work, cluster, name)
    else:
        assert validate_disaggregated(simulate_disaggregated(work, cluster, name)) == []


def test_the_policy_decides_the_order_of_the_stages() -> None:
    """Five requests at once on a prompt machine whose stage holds one prompt: fcfs prefills them
    in order of index, shortest-first in order of predicted output, longest-first the reverse."""
    cost = LinearCostModel(0.025, 0.00013, 0.029, 0.00021, 100)
    predicted = np.array([5, 1, 4, 2, 3])
    work = Workload([100] * 5, [3] * 5, predicted_output=predicted)
    cluster = _cluster(prompt_cost=cost, token_cost=cost)
    for name, order in (
        ("fcfs", [0, 1, 2, 3, 4]),
        ("shortest-first", np.argsort(predicted).tolist()),
        ("longest-first", np.argsort(-predicted).tolist()),
    ):
        s = simulate_disaggregated(work, cluster, name)
        assert np.argsort(s.request_stage).tolist() == order
        assert validate_disaggregated(s) == []


def test_a_prompt_machines_stage_is_not_capped_by_the_clients_a_lent_stage_is() -> None:
    """A policy's clients are places in the hand-over to a stage (the token machines' clients):
    a prompt machine's own stage takes until nothing more fits, so 12 short prompts share one
    stage with 2 clients; a token machine lent to the prompt pool takes one hand-over, at most
    its 2 clients."""
    work = Workload([10] * 12, [3] * 12)
    s = simulate_disaggregated(work, _cluster(token_clients=2))
    assert s.stage_start.size == 1 and (s.request_stage == 0).all()
    burst = Workload([2000] * 30, [2] * 30)
    mixed = simulate_disaggregated(burst, _cluster(token_machines=3, token_clients=2, mixed=True))
    lent = ~mixed.cluster.is_prompt(mixed.stage_machine)
    assert lent.any()
    sizes = np.bincount(mixed.request_stage, minlength=mixed.stage_start.size)
    assert sizes[lent].max() <= 2 and validate_disaggregated(mixed) == []


def test_one_policy_per_prompt_machine() -> None:
    """A sequence gives each prompt machine its own policy, names or objects; the info lists
    them. An object serves one prompt machine only."""
    work = _workload(20, seed=2).replace(predicted_output=np.arange(1, 21))
    cluster = _cluster(prompt_machines=2)
    s = simulate_disaggregated(work, cluster, ["fcfs", make_request_policy("shortest-first")])
    assert validate_disaggregated(s) == [] and s.info["request_policy"] == ("fcfs", "shortest-first")
    one = simulate_disaggregated(work, _cluster(), FCFS())
    assert _same(one, simulate_disaggregated(work, _cluster()))
    with pytest.raises(ValueError, match="serves one prompt machine"):
        simulate_disaggregated(work, cluster, FCFS())
    with pytest.raises(ValueError, match="1 policies for 2 prompt machines"):
        simulate_disaggregated(work, cluster, ["fcfs"])
    shared = FCFS()
    with pytest.raises(ValueError, match="one policy object to several"):
        simulate_disaggregated(work, cluster, [shared, shared])


class _Greedy(FCFS):
    """Takes a request that is not waiting on its machine."""

    def take(self, capacity: int) -> list[tuple[int, int]]:
        return [(10**6, 0)]


class _Idle(FCFS):
    """Never ready."""

    def ready(self) -> int:
        return 0


def test_refused_before_any_work() -> None:
    """Names that do not exist, policies planned ahead over every request, routers that weigh
    requests or are not routers, one router for both pools, a bad seed: each refused, saying why."""
    work, cluster = _workload(6), _cluster()
    with pytest.raises(ValueError, match="unknown request policy"):
        simulate_disaggregated(work, cluster, "no-such-policy")
    with pytest.raises(ValueError, match="planned ahead"):
        simulate_disaggregated(
            work, cluster, make_request_policy("static", queues=[list(range(6))] + [[]] * 7)
        )
    with pytest.raises(ValueError, match="router"):
        simulate_disaggregated(work, cluster, prompt_router="no-such-router")
    with pytest.raises(ValueError, match="weighs requests"):
        simulate_disaggregated(work, cluster, token_router="least-work")
    with pytest.raises(TypeError, match="router"):
        simulate_disaggregated(work, cluster, prompt_router=object())  # type: ignore[arg-type]
    router = make_router("round-robin")
    with pytest.raises(ValueError, match="each pool needs its own router"):
        simulate_disaggregated(work, cluster, prompt_router=router, token_router=router)
    with pytest.raises(ValueError, match="seed"):
        simulate_disaggregated(work, cluster, seed=-1)
    with pytest.raises(TypeError):
        simulate_disaggregated(work, cluster, iteration_policy="lagrangian")  # type: ignore[call-arg]


def test_a_policy_answer_that_breaks_the_contract_is_an_error() -> None:
    """A take of a request that does not wait there, or a policy that never gets ready while
    requests wait: a ValueError naming the policy, as the decision loop words it."""
    work, cluster = _workload(6), _cluster()
    with pytest.raises(
        ValueError, match=r"request policy _Greedy.take\(\d+\) is invalid: request \d+ is not in the workload"
    ):
        simulate_disaggregated(work, cluster, _Greedy())
    with pytest.raises(ValueError, match=r"request policy _Idle.ready\(\) returned 0 .*cannot go on"):
        simulate_disaggregated(work, cluster, _Idle())


# ------------------------------------------------------------------ routers
def test_the_routers_decide_the_machines() -> None:
    """Round robin on each pool: the k-th request to arrive is prefilled on prompt machine
    k mod P and decoded on token machine P + k mod T; the info names the routers."""
    work = _workload(30, seed=5)
    cluster = _cluster(prompt_machines=3, token_machines=2)
    s = simulate_disaggregated(work, cluster, prompt_router="round-robin", token_router="round-robin")
    place = np.empty(30, dtype=np.int64)
    place[np.argsort(work.arrival, kind="stable")] = np.arange(30)
    assert s.stage_machine[s.request_stage].tolist() == (place % 3).tolist()
    assert s.request_machine.tolist() == (3 + place % 2).tolist()
    assert validate_disaggregated(s) == []
    assert (s.info["prompt_router"], s.info["token_router"], s.info["seed"]) == ("round-robin",) * 2 + (None,)


@settings(max_examples=40, deadline=None)
@given(_instances())
def test_jsq_on_the_token_pool_chooses_as_the_default(instance) -> None:
    """The token machines share their clients, so jsq (requests per client) and the default
    (requests) choose alike, mixed pool or not: the same schedule."""
    work, cluster = instance
    s = simulate_disaggregated(work, cluster)
    assert s.info["prompt_router"] == "jsq-prompt-tokens" and s.info["token_router"] == "jsq-requests"
    assert _same(s, simulate_disaggregated(work, cluster, token_router="jsq"))


@settings(max_examples=20, deadline=None)
@given(
    _instances(mixed=False),
    st.sampled_from(["random", "power-of-two", "jsq", "round-robin"]),
    st.integers(0, 9),
)
def test_seeded_routers_repeat_and_every_router_validates(instance, name, seed) -> None:
    """Any online router on either pool: the schedule validates; the same seed, the same run."""
    work, cluster = instance
    a = simulate_disaggregated(work, cluster, "fcfs", name, name, seed=seed)
    assert validate_disaggregated(a) == []
    assert _same(a, simulate_disaggregated(work, cluster, "fcfs", name, name, seed=seed))
    assert a.info["seed"] == (seed if name in ("random", "power-of-two") else None)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.5, 6), st.sampled_from(["shortest-first", "static", "offline"]))
def test_policies_and_routers_are_non_anticipative(seed, cut, name) -> None:
    """With a policy that plans with predictions and a seeded router: requests arriving after T
    change no stage and no run that ends before T."""
    predicted = np.random.default_rng(seed).integers(1, 80, 30)
    full = _workload(30, seed).replace(predicted_output=predicted)
    early = full.arrival <= cut
    if not early.any():
        return
    part = Workload(
        full.prompt_tokens[early],
        full.output_tokens[early],
        predicted_output=predicted[early],
        arrival=full.arrival[early],
    )
    cluster = _cluster(prompt_machines=2, token_machines=2, token_clients=4)
    runs = [
        simulate_disaggregated(w, cluster, name, "jsq-prompt-tokens", "power-of-two", seed=3)
        for w in (full, part)
    ]
    for kind in ("stage", "run"):
        ends_a, ends_b = (getattr(r, f"{kind}_end") for r in runs)
        before_a, before_b = np.flatnonzero(ends_a < cut), np.flatnonzero(ends_b < cut)
        assert before_a.size == before_b.size
        np.testing.assert_array_equal(ends_a[before_a], ends_b[before_b])


@pytest.mark.parametrize(
    ("case", "digest"),
    [
        (
            (0, 80, 4.0, "linear", 1, 2, 8, False, "fcfs", "jsq-prompt-tokens", "jsq-requests"),
            "db7c628941298261",
        ),
        (
            (1, 120, 2.0, "linear", 2, 2, 4, True, "fcfs", "jsq-prompt-tokens", "jsq-requests"),
            "a304bcab1b42d5b5",
        ),
        ((2, 100, 6.0, "context", 2, 1, 6, True, "shortest-first", "round-robin", "jsq"), "368ab6956b8b15d5"),
        (
            (3, 150, 1.0, "context", 1, 3, 3, True, "longest-first", "power-of-two", "random"),
            "65df7ad5db8905e7",
        ),
        (
            (4, 60, 0.0, "linear", 3, 2, 16, False, "batch-wise", "jsq-prompt-tokens", "jsq-requests"),
            "8130ac5994214f44",
        ),
    ],
)
def test_cluster_schedules_are_what_they_were(case, digest) -> None:
    """The cluster's schedules are bit for bit those of the simulator it had before its machines
    ran the decision loop (digests of every array, the makespan and the info, recorded then):
    linear and context-aware models, with and without overlap and the mixed pool (case 2 lends
    prompt machines to decoding, case 3 token machines to prefilling), five policies and
    several routers."""
    from tests.engines.test_loop import COSTS, fingerprint, seeded_workload

    seed, n, horizon, cost, prompt, token, clients, mixed, policy, prompt_router, token_router = case
    model = COSTS[cost]
    cluster = DisaggregatedCluster(
        prompt, token, model, model, clients, 2.6e6, 25.0, 80, seed % 2 == 0, mixed
    )
    work = seeded_workload(seed, n, horizon)
    schedule = simulate_disaggregated(work, cluster, policy, prompt_router, token_router, seed=seed)
    assert validate_disaggregated(schedule) == []
    assert fingerprint(schedule) == digest


@settings(max_examples=40, deadline=None)
@given(
    prompts=st.lists(st.integers(1, 600), min_size=1, max_size=25),
    cap=st.integers(1, 700),
    mixed=st.booleans(),
    policy=st.sampled_from(["fcfs", "shortest-first-oracle", "longest-first-oracle"]),
)
def test_a_prompt_batch_cap_holds_every_stage_of_several_prompts(
    prompts: list[int], cap: int, mixed: bool, policy: str
) -> None:
    """With prompt_batch_tokens, a prompt stage of several prompts holds at most the cap; a
    prompt longer than the cap is prefilled alone; every schedule validates."""
    n = len(prompts)
    workload = Workload(prompts, [3] * n, arrival=np.linspace(0.0, 0.2, n))
    cluster = replace(_cluster(mixed=mixed), prompt_batch_tokens=cap)
    schedule = simulate_disaggregated(workload, cluster, policy)
    assert validate_disaggregated(schedule) == []
    tokens = np.zeros(schedule.stage_start.size, dtype=np.int64)
    count = np.zeros(schedule.stage_start.size, dtype=np.int64)
    np.add.at(tokens, schedule.request_stage, workload.prompt_tokens)
    np.add.at(count, schedule.request_stage, 1)
    assert np.all((tokens <= cap) | (count == 1))
    several = np.flatnonzero(count > 1)
    if several.size:  # the validator holds the cap: checked against a smaller one, only it breaks
        tighter = replace(
            schedule, cluster=replace(cluster, prompt_batch_tokens=int(tokens[several].max()) - 1)
        )
        assert {v.rule for v in validate_disaggregated(tighter)} == {"capacity"}


def test_a_prompt_batch_cap_is_a_positive_token_count() -> None:
    with pytest.raises(ValueError, match="prompt_batch_tokens must be"):
        replace(_cluster(), prompt_batch_tokens=0)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 6), st.sampled_from([1, 4, 16]), st.data())
def test_token_memory_makes_transfers_wait_and_is_never_exceeded(prompts, tokens, clients, block_size, data):
    """Machines with KV-cache memory, from just enough for the longest request to plenty,
    with the mixed pool (idle or busy token machines lent stages) or without: every schedule
    validates (its memory rule included), no makespan is below the bound, every request
    finishes once with all its tokens, and with room for everything the schedule is the one
    without memory."""
    work = _draw_workload(data, 1, 900, (1, 60), 3.0)
    output = work.output_tokens.tolist()
    most = max(output)
    least = -(-(int(work.prompt_tokens.max()) + most) // block_size)
    blocks = data.draw(st.integers(least, 4 * least))
    mixed = data.draw(st.booleans())
    busy = data.draw(st.sampled_from([None, 0, 400])) if mixed else None
    plain = _cluster(
        prompt_machines=prompts,
        token_machines=tokens,
        token_clients=clients,
        mixed=mixed,
        lend_busy_above=busy,
    )
    cluster = replace(plain, token_memory=KVMemory(blocks, block_size), max_output_tokens=most)
    s = simulate_disaggregated(work, cluster)
    assert validate_disaggregated(s) == []
    assert s.makespan >= disaggregated_lower_bounds(work, cluster).strong * (1 - 1e-9) - 1e-12
    assert np.all(np.isfinite(s.finish)) and (s.request_decode_end - s.request_decode_start == output).all()
    roomy = simulate_disaggregated(work, replace(cluster, token_memory=KVMemory(10**7, block_size)))
    without = simulate_disaggregated(work, plain)
    assert roomy.request_transfer_end.tolist() == without.request_transfer_end.tolist()
    assert roomy.finish.tolist() == without.finish.tolist()


class _SeenLoads(BaseRouter):
    """Routes as jsq-prompt-tokens does, recording the prompt tokens it is shown."""

    name = "seen-loads"

    def start(self, setup: RouterSetup) -> None:
        self.seen: list[tuple[int, list[int]]] = []

    def route(self, request: int, loads: Loads) -> int:
        self.seen.append((request, loads.prompt_tokens.tolist()))
        return int(np.argmin(loads.prompt_tokens))


def test_a_lent_prompt_machine_shows_the_router_nothing_of_requests_to_come() -> None:
    """With a prompt machine lent to the token pool, the prompt router sees the same loads
    before the last request arrives whatever that request's prompt."""
    cluster = _cluster(prompt_machines=2, token_machines=1, token_clients=2, mixed=True)
    arrival = [0.0] * 5 + [0.3, 0.35, 50.0]
    seen = []
    for last in (100, 3000):
        spy = _SeenLoads()
        s = simulate_disaggregated(
            Workload([100] * 7 + [last], [400] * 8, arrival=arrival), cluster, "fcfs", spy
        )
        assert validate_disaggregated(s) == [] and s.request_machine.min() < 2  # a prompt machine decodes
        seen.append([loads for request, loads in spy.seen if arrival[request] < 50.0])
    assert seen[0] == seen[1]


def test_a_lent_stages_requests_reserve_their_blocks_from_the_stage() -> None:
    """A request a lent machine prefills and decodes holds its blocks there from its stage's
    start: a schedule that says it reserved them later (so that a smaller memory would seem to
    hold) breaks the transfer rule."""
    cluster = _cluster(mixed=True, lend_busy_above=0, token_memory=KVMemory(3000, 16), max_output_tokens=80)
    rng = np.random.default_rng(0)
    work = Workload(rng.integers(500, 2000, 60), rng.integers(1, 80, 60), arrival=np.zeros(60))
    s = simulate_disaggregated(work, cluster)
    assert validate_disaggregated(s) == []
    local = s.stage_machine[s.request_stage] == s.request_machine
    assert s.request_transfer_start is not None and local.sum() > 0
    later = s.request_transfer_start.copy()
    later[local] = s.finish[local]
    assert {v.rule for v in validate_disaggregated(replace(s, request_transfer_start=later))} == {"transfer"}


def test_a_transfer_waits_for_memory_and_the_memory_rule_alone_breaks_when_it_shrinks() -> None:
    """Long prompts on one token machine with room for two requests at a time: later
    transfers start when a request there finishes, in full, after their stage; the schedule
    checked against a smaller memory breaks the memory rule and no other. Bad settings are
    refused before work."""
    work = Workload([800] * 6, [40] * 6, arrival=np.zeros(6))
    cluster = _cluster(token_machines=1, token_memory=KVMemory(110, 16), max_output_tokens=40)
    s = simulate_disaggregated(work, cluster)
    assert validate_disaggregated(s) == []
    late = s.request_transfer_start > s.stage_start[s.request_stage]
    assert late.sum() >= 3
    whole = np.asarray(cluster.transfer(work.prompt_tokens, 0.0))
    stage_end = s.stage_end[s.request_stage]
    np.testing.assert_allclose(
        s.request_transfer_end[late], np.maximum(s.request_transfer_start, stage_end)[late] + whole[late]
    )
    small = replace(s, cluster=replace(cluster, token_memory=KVMemory(60, 16)))
    assert {v.rule for v in validate_disaggregated(small)} == {"memory"}
    with pytest.raises(ValueError, match="give max_output_tokens"):
        _cluster(token_memory=KVMemory(100, 16))
    with pytest.raises(ValueError, match="more than max_output_tokens=30"):
        simulate_disaggregated(work, replace(cluster, max_output_tokens=30))
    with pytest.raises(ValueError, match="more than a token machine's token_memory of 40"):
        simulate_disaggregated(work, replace(cluster, token_memory=KVMemory(40, 16)))
