"""The disaggregated mode's core (:mod:`llmsched.engines.disaggregation.schedule`): the helpers the
validator's tests build on, and the schedule contract (:class:`~llmsched.core.schedule.ScheduleLike`)
as a disaggregated schedule meets it."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched import ContextCostModel, Workload
from llmsched.core.schedule import ScheduleLike
from llmsched.engines.disaggregation.schedule import DisaggregatedSchedule
from llmsched.engines.disaggregation.validate import validate_disaggregated
from llmsched.fleet.disaggregated import simulate_disaggregated
from tests.fleet.test_disaggregated import PAPER, _cluster


def _valid() -> DisaggregatedSchedule:
    """A burst of long prompts and a tail of short ones: stages on the prompt machine and on
    lent token machines, transfers, runs under a context-aware model."""
    rng = np.random.default_rng(3)
    prompt = np.concatenate([rng.integers(2000, 2500, 20), rng.integers(5, 200, 20)])
    arrival = np.concatenate([np.zeros(20), np.sort(rng.uniform(0, 4, 20)).round(3)])
    work = Workload(prompt, rng.integers(1, 40, 40), arrival=arrival)
    cost = ContextCostModel.from_linear(PAPER, decode_per_context=1e-7)
    s = simulate_disaggregated(work, _cluster(token_cost=cost, token_clients=6, token_machines=3, mixed=True))
    assert validate_disaggregated(s) == []
    assert (~s.cluster.is_prompt(s.stage_machine)).any() and s.cluster.is_prompt(s.stage_machine).any()
    return s


def _rules(s: DisaggregatedSchedule) -> set[str]:
    return {v.rule for v in validate_disaggregated(s)}


def _set(arr: np.ndarray, index: int, value: object) -> np.ndarray:
    out = arr.copy()
    out[index] = value
    return out


# ------------------------------------------------------------ the contract every schedule meets
def test_a_disaggregated_schedule_is_schedule_like() -> None:
    """Its machines are the cluster's, a request's machine is its token machine, its clients
    are the token pool's; the competition schedule's names for the runs' times."""
    s = _valid()
    c = s.cluster
    assert isinstance(s, ScheduleLike) and s.mode == "disaggregated" and s.validate() == []
    assert (s.machines, s.clients) == (
        c.prompt_machines + c.token_machines,
        c.token_machines * c.token_clients,
    )
    assert s.run_iteration_time is s.run_first_time and s.run_iteration_step is s.run_step
    assert s.prefill_stages == s.stage_start.size and s.decode_iterations == s.run_iterations.sum()
    assert s.validate(skip="transfer") == validate_disaggregated(s, skip="transfer") == []


def test_utilization_is_the_pools_busy_share_weighed_by_their_sizes() -> None:
    """The cluster's utilization: its machines' busy seconds over machines x makespan, the
    pools' figures weighed by their machines."""
    s = _valid()
    c, summary = s.cluster, s.summary()
    weighed = (
        summary["utilization_prompt"] * c.prompt_machines + summary["utilization_token"] * c.token_machines
    )
    assert summary["utilization"] == pytest.approx(weighed / c.machines, rel=1e-12)
    assert s.utilization == s.machine_busy().sum() / (c.machines * s.makespan)


def test_decode_begins_after_the_keys_and_values_arrive() -> None:
    """decode_begin is the start of each request's first decode iteration on its token
    machine: its iteration's end less its time, no earlier than its transfer's end."""
    s = _valid()
    first = s.iteration_end_on(s.request_machine, s.request_decode_start)
    assert (s.decode_begin < first).all() and (s.decode_begin >= s.request_transfer_end - 1e-12).all()
    np.testing.assert_array_equal(
        s.decode_begin, s.iteration_start_on(s.request_machine, s.request_decode_start)
    )
    assert np.isnan(s.iteration_start_on([3, 3], [-1, 10**9])).all()


def test_tbt_mean_and_the_targets_are_the_summarys() -> None:
    """tbt_mean is a request's decode time over its tokens (its first gap, transfer included,
    counted); meets_slo, request_frame and the summary's goodput judge the targets alike."""
    s = _valid()
    np.testing.assert_array_equal(s.tbt_mean, (s.finish - s.prefill_end) / s.workload.output_tokens)
    meets = (s.ttft <= 1.0) & (s.tbt_mean <= 0.05)
    assert 0 < meets.sum() < len(s.workload)
    assert s.request_frame(slo_ttft=1.0, slo_tbt=0.05)["meets_slo"].tolist() == meets.tolist()
    summary = s.summary(slo_ttft=1.0, slo_tbt=0.05)
    assert summary["goodput_rps"] == int(meets.sum()) / s.makespan
    assert summary["slo_attainment"] == float(meets.mean())


def test_the_stage_frame_holds_stages_runs_and_transfers() -> None:
    """Row k is prefill stage k (its machine, its prompt tokens and requests), then the runs
    (active requests and tokens decoded), then each request's transfer from the machine that
    prefilled it to its token machine, from its prefill's end to its keys' and values' arrival."""
    s = _valid()
    frame = s.stage_frame()
    stages, runs, n = s.stage_start.size, s.run_start.size, len(s.workload)
    assert frame["kind"].tolist() == ["prefill"] * stages + ["decode"] * runs + ["transfer"] * n
    prefill, decode, transfer = (
        frame.iloc[:stages],
        frame.iloc[stages : stages + runs],
        frame.iloc[stages + runs :],
    )
    assert prefill["machine"].tolist() == s.stage_machine.tolist()
    assert prefill["tokens"].sum() == transfer["tokens"].sum() == s.workload.total_prompt_tokens
    assert prefill["requests"].sum() == n == len(transfer)
    assert decode["tokens"].sum() == s.workload.total_output_tokens
    assert decode["requests"].tolist() == s.run_active.tolist()
    assert decode["first_iteration"].tolist() == s.run_first_iteration.tolist()
    assert transfer["start"].tolist() == s.prefill_end.tolist()
    assert transfer["end"].tolist() == s.request_transfer_end.tolist()
    assert transfer["to_machine"].tolist() == s.request_machine.tolist()
    same = transfer["machine"].to_numpy() == transfer["to_machine"].to_numpy()
    assert same.any() and (transfer["duration"][same] == 0).all() and (transfer["duration"][~same] > 0).all()
