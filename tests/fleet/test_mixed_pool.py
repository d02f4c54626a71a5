"""Splitwise's mixed pool as SplitwiseSim runs it: Orca machines, each request's phases routed
at its arrival, keys and values moved between machines."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmsched import LinearCostModel, Workload
from llmsched.engines.rule import DECODE_ONLY, PREFILL_ONLY, WHOLE
from llmsched.fleet.mixed_pool import MixedPoolCluster, simulate_mixed_pool

COST = LinearCostModel(0.02, 1e-4, 0.03, 2e-4, prefill_capacity=5000)
KV = 1e6  # bytes a token


def cluster(prompt: int = 1, token: int = 1, **options: object) -> MixedPoolCluster:
    fields = {"kv_bytes_per_token": KV, "kv_bandwidth": 1.0, "machine_memory": 1e12, "weights": 1e9}
    return MixedPoolCluster(prompt, token, COST, **(fields | options))  # type: ignore[arg-type]


def test_a_request_prefills_on_the_prompt_machine_and_decodes_on_the_token_machine() -> None:
    """One request alone: its prompt runs on machine 0 (0.02 + 1e-4 x 100 = 0.03 s), its keys
    and values (100 tokens of 1 MB at 1 GB/s: 0.1 s) move to machine 1, where it decodes its 5
    tokens; its TTFT is the prompt's 0.03 s, and its end is after the transfer."""
    schedule = simulate_mixed_pool(Workload([100], [5]), cluster())
    assert schedule.validate() == []
    assert schedule.prompt_machine.tolist() == [0] and schedule.token_machine.tolist() == [1]
    assert schedule.ttft.tolist() == pytest.approx([0.03])
    assert schedule.transfer_start.tolist() == pytest.approx([0.03])
    assert schedule.transfer_end.tolist() == pytest.approx([0.13])
    first, second = schedule.schedules
    assert first.request_phase is not None and first.request_phase.tolist() == [PREFILL_ONLY]
    assert second.request_phase is not None and second.request_phase.tolist() == [DECODE_ONLY]
    assert second.workload.arrival.tolist() == pytest.approx([0.13])
    assert second.run_iterations.sum() == 5 and second.chunk_run.size == 0
    assert schedule.finish[0] == pytest.approx(second.makespan) and schedule.split.tolist() == [True]


def test_a_long_prompt_queue_sends_prompts_to_a_token_machine_which_mixes() -> None:
    """With a backlog of 200 tokens, a burst of prompts of 150 finds the prompt machine's queue
    long from the third on: the token machine joins the mixed pool and takes prompts, and one
    machine then runs both phases of some requests (no transfer)."""
    workload = Workload([150] * 6, [3] * 6)
    schedule = simulate_mixed_pool(workload, cluster(prompt_backlog=200))
    assert schedule.validate() == []
    assert schedule.info["machines_mixed"] >= 1
    assert 1 in schedule.prompt_machine.tolist()  # the token machine prefilled some
    assert not schedule.split.all()
    whole = ~schedule.split
    assert np.isnan(schedule.transfer_end[whole]).all()
    phases = {int(p) for s in schedule.schedules if s.request_phase is not None for p in s.request_phase}
    assert WHOLE in phases


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.integers(0, 20), st.integers(1, 400), st.integers(1, 12)), min_size=1, max_size=30),
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(50, 2000),
    st.integers(1, 6),
)
def test_every_run_validates_and_every_request_finishes_in_full(
    drawn: list[tuple[int, int, int]], prompt: int, token: int, backlog: int, clients: int
) -> None:
    """Any requests on any small cluster: the schedule validates, every request has a TTFT no
    earlier than its prompt alone and ends after it, and a split request's decode starts no
    earlier than its transfer's end."""
    arrival = [t / 10 for t, _, _ in drawn]
    workload = Workload([p for _, p, _ in drawn], [o for _, _, o in drawn], arrival=arrival)
    schedule = simulate_mixed_pool(workload, cluster(prompt, token, prompt_backlog=backlog, clients=clients))
    assert schedule.validate() == []
    alone = np.asarray(COST.prefill_time(workload.prompt_tokens))
    assert (schedule.ttft >= alone * (1 - 1e-9)).all()
    assert (schedule.finish > schedule.prefill_end).all()
    split = schedule.split
    assert (schedule.finish[split] >= schedule.transfer_end[split]).all()


def test_bad_clusters_are_refused() -> None:
    with pytest.raises(ValueError, match="prompt_machines"):
        MixedPoolCluster(0, 1, COST)
    with pytest.raises(ValueError, match="no room"):
        cluster(weights=2e12)
    with pytest.raises(TypeError, match="MixedPoolCluster"):
        simulate_mixed_pool(Workload([1], [1]), "cluster")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="token_cost must be a cost model"):
        cluster(token_cost="fast")


def test_token_machines_of_another_kind_decode_at_their_own_speed() -> None:
    """A cluster whose token machines are slower (Splitwise-HA's A100s beside H100s): the
    prompt runs as before; each decode iteration on the token machine takes its own model's
    time (0.06 + 4e-4 a request against 0.03 + 2e-4), and the schedule validates."""
    slow = LinearCostModel(0.02, 1e-4, 0.06, 4e-4, prefill_capacity=5000)
    same = simulate_mixed_pool(Workload([100], [5]), cluster())
    mixed = simulate_mixed_pool(Workload([100], [5]), cluster(token_cost=slow))
    assert mixed.validate() == []
    assert mixed.ttft.tolist() == pytest.approx(same.ttft.tolist())
    decode = mixed.finish[0] - mixed.transfer_end[0]
    assert decode == pytest.approx(5 * (0.06 + 4e-4))
    assert same.finish[0] - same.transfer_end[0] == pytest.approx(5 * (0.03 + 2e-4))
    assert mixed.cluster.machine_cost(0) is COST and mixed.cluster.machine_cost(1) is slow


def test_a_prompt_past_the_cap_waits_for_the_decode_run_as_splitwisesim_runs_it() -> None:
    """Request 0 decodes 50 tokens on machine 1 from about 0.13 s. Two 4,000-token prompts fill
    machine 0, so the 3,000-token prompt arriving at 0.52 s finds its queue long and goes to
    machine 1, which joins the mixed pool and runs both its phases. Longer than the 2,048-token
    cap, it does not cut request 0's run of decode iterations: it starts when request 0
    finishes (no other arrival cuts the run: the long prompts' keys and values take 4 s to
    move), and ends a prompt's time (0.02 + 3,000 x 1e-4 s) later."""
    workload = Workload([100, 4000, 4000, 3000], [50, 2, 2, 2], arrival=[0.0, 0.50, 0.51, 0.52])
    schedule = simulate_mixed_pool(workload, cluster(prompt_backlog=1000))
    assert schedule.validate() == []
    assert schedule.prompt_machine.tolist() == [0, 0, 0, 1] and schedule.token_machine[3] == 1
    assert schedule.info["machines_mixed"] == 1
    assert schedule.finish[0] < schedule.transfer_end[1]  # nothing else reached machine 1 before
    assert schedule.prefill_end[3] == pytest.approx(schedule.finish[0] + 0.02 + 3000 * 1e-4)


def _runs_before(schedule: Any, t: float) -> list[list[tuple]]:
    """Each machine's runs that end before ``t``: times, iterations, decoding requests, and
    the requests (of the cluster's workload) whose prompts they carry."""
    out = []
    for m, machine in enumerate(schedule.schedules):
        whose = np.full(len(machine.workload), -1)
        for request in range(len(schedule.workload)):
            for on, index in (
                (schedule.prompt_machine, schedule.prompt_index),
                (schedule.token_machine, schedule.token_index),
            ):
                if on[request] == m:
                    whose[index[request]] = request
        runs = []
        for r in np.flatnonzero(machine.run_end < t).tolist():
            chunks = sorted(whose[machine.chunk_request[machine.chunk_run == r]].tolist())
            runs.append(
                (float(machine.run_start[r]), float(machine.run_end[r]), int(machine.run_iterations[r]),
                 int(machine.run_decoding[r]), chunks)
            )  # fmt: skip
        out.append(runs)
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.integers(0, 20), st.integers(1, 400), st.integers(1, 12)), min_size=2, max_size=24),
    st.integers(50, 2000),
    st.data(),
)
def test_the_future_does_not_change_the_past(
    drawn: list[tuple[int, int, int]], backlog: int, data: st.DataObject
) -> None:
    """Removing the requests that arrive after a time T, or changing their sizes, leaves every
    routing decision before T and every machine's runs that end before T as they were."""
    drawn = sorted(drawn)
    arrival = np.array([t / 10 for t, _, _ in drawn])
    t = float(data.draw(st.sampled_from(sorted(set(arrival.tolist())))))
    keep = np.flatnonzero(arrival <= t)
    workload = Workload([p for _, p, _ in drawn], [o for _, _, o in drawn], arrival=arrival)
    changed = workload.replace(
        prompt_tokens=np.where(arrival > t, 401 - workload.prompt_tokens, workload.prompt_tokens),
        output_tokens=np.where(arrival > t, 13 - workload.output_tokens, workload.output_tokens),
    )
    setup = cluster(2, 1, prompt_backlog=backlog, clients=3)
    full = simulate_mixed_pool(workload, setup)
    past = _runs_before(full, t)
    for variant in (workload.subset(keep), changed):
        other = simulate_mixed_pool(variant, setup)
        assert other.validate() == []
        assert other.prompt_machine[keep].tolist() == full.prompt_machine[keep].tolist()
        assert other.token_machine[keep].tolist() == full.token_machine[keep].tolist()
        assert _runs_before(other, t) == past


def test_the_routing_reads_a_finish_only_once_it_has_happened() -> None:
    """Found by review: request 3 arrives at 0.268 s while token machine 1 holds requests 0, 1
    and 2 (24 + 44 + 122 of its 200 tokens of room; request 1 finishes at 0.277 s). A
    transfer landing at 0.259 s cut machine 1's decode run, which then ended at 0.277 s,
    after the arrival: the cluster must not count request 1 as finished before then, so
    request 3 (39 + 1 + 4 tokens) cannot go to machine 1."""
    workload = Workload(
        [13, 39, 94, 14, 51, 10, 64, 97, 2],
        [10, 4, 27, 24, 27, 2, 28, 2, 23],
        arrival=[0.032, 0.087, 0.124, 0.268, 0.333, 0.375, 0.381, 0.395, 0.464],
    )
    setup = dataclasses.replace(cluster(clients=4, machine_memory=1.2e9), cost=LinearCostModel.paper())
    schedule = simulate_mixed_pool(workload, setup)
    assert schedule.validate() == []
    assert schedule.token_machine[:3].tolist() == [1, 1, 1] and schedule.finish[1] > workload.arrival[3]
    assert schedule.token_machine[3] != 1


def test_requests_arriving_prefilled_join_within_the_token_cap() -> None:
    """Found by review: with a cap of 2 tokens an iteration and 4 clients, three requests
    arriving prefilled on one machine decode at most 2 at a time (each iteration within the
    cap, as the validator's budget rule checks)."""
    schedule = simulate_mixed_pool(Workload([1, 1, 1], [5, 5, 5]), cluster(clients=4, max_batch_tokens=2))
    assert schedule.validate() == []
    token = schedule.schedules[1]
    assert token.run_decoding.max() <= 2


def test_the_validator_checks_each_machine_is_priced_by_its_kind() -> None:
    """A machine's schedule priced by another cost model than the cluster gives it breaks the
    structure rule, and only it."""
    slow = LinearCostModel(0.02, 1e-4, 0.06, 4e-4, prefill_capacity=5000)
    schedule = simulate_mixed_pool(Workload([100, 50], [5, 3]), cluster(token_cost=slow))
    assert schedule.validate() == []
    swapped = dataclasses.replace(schedule, cluster=dataclasses.replace(schedule.cluster, token_cost=None))
    rules = {v.rule for v in swapped.validate()}
    assert "structure" in rules
    assert any("priced by another cost model" in v.message for v in swapped.validate())
