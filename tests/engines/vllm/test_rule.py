"""vLLM's rules: prefill stages capped by max_num_batched_tokens apart from the prefill
capacity, prompts first; with chunked prefill, the fused rule at that budget."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import llmsched
from llmsched import LinearCostModel, Workload
from llmsched.core.schedule import DECODE, PREFILL
from llmsched.engines.fusion.validate import validate_fused
from llmsched.engines.loop import CostClock, run_loop
from llmsched.engines.vllm.rule import VLLMChunkedRule, VLLMRule
from llmsched.online import FCFS

COST = LinearCostModel(0.02, 1e-4, 0.03, 2e-4, prefill_capacity=5000)


def run(workload: Workload, rule: Any, clients: int = 8) -> Any:
    return run_loop(workload, COST, clients, FCFS(), None, CostClock(), False, rule)


def stage_tokens(schedule: llmsched.Schedule) -> np.ndarray:
    """Prompt tokens of each prefill stage, from the requests' stages."""
    tokens = np.zeros(schedule.stage_kind.size, dtype=np.int64)
    np.add.at(tokens, schedule.request_prefill_stage, schedule.workload.prompt_tokens)
    return tokens[schedule.stage_kind == PREFILL]


def test_a_prefill_stage_holds_at_most_the_token_cap_not_the_capacity() -> None:
    """Ten prompts of 100 tokens, all at once, under a cap of 250: stages of two prompts, though
    the cost model's capacity would hold all ten."""
    workload = Workload([100] * 10, [5] * 10)
    schedule = run(workload, VLLMRule(250), clients=10)
    assert llmsched.validate(schedule) == []
    assert stage_tokens(schedule).tolist() == [200] * 5
    assert schedule.info["batching"] == "vllm" and schedule.info["max_num_batched_tokens"] == 250
    assert schedule.info["iteration_policy"] == "prefill-first"
    # The validator holds the cap: checked against a smaller one, the capacity rule alone breaks.
    tighter = dataclasses.replace(schedule, info={**schedule.info, "max_num_batched_tokens": 150})
    assert {v.rule for v in llmsched.validate(tighter)} == {"capacity"}


def test_waiting_prompts_go_first_then_one_decode_iteration_between_stages() -> None:
    """Prefill-first: with prompts still waiting after a stage, the running requests decode
    exactly one iteration before the next stage (the competition model's alternation)."""
    schedule = run(Workload([100] * 6, [50] * 6), VLLMRule(200), clients=6)
    decode = schedule.stage_iterations[schedule.stage_kind == DECODE]
    assert decode.tolist()[:2] == [1, 1]
    assert decode.tolist()[2] == 50  # the last pair decodes all its 50 tokens in the last stage


def test_a_prompt_longer_than_the_cap_is_refused_before_any_work() -> None:
    with pytest.raises(ValueError, match=r"longer than max_num_batched_tokens=64.*chunked prefill"):
        run(Workload([10, 65], [1, 1]), VLLMRule(64))
    with pytest.raises(ValueError, match="max_num_batched_tokens must be"):
        VLLMRule(0)


def test_chunked_prefill_is_the_fused_rule_at_that_budget() -> None:
    """With chunking a 300-token prompt runs in chunks of the budget left by decoding."""
    workload = Workload([300, 20], [30, 30], arrival=[0.0, 0.0])
    schedule = run(workload, VLLMChunkedRule(128), clients=2)
    assert validate_fused(schedule) == []
    assert schedule.token_budget == 128 and schedule.info["chunked_prefill"] is True
    assert int(schedule.chunk_tokens.max()) <= 128 and schedule.chunk_tokens.size > 2


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prompts=st.lists(st.integers(1, 120), min_size=1, max_size=25),
    outputs=st.data(),
    cap=st.integers(120, 400),
    clients=st.integers(1, 12),
)
def test_every_vllm_schedule_validates_and_keeps_the_cap(
    prompts: list[int], outputs: st.DataObject, cap: int, clients: int
) -> None:
    n = len(prompts)
    output = outputs.draw(st.lists(st.integers(1, 30), min_size=n, max_size=n))
    arrival = outputs.draw(st.lists(st.sampled_from([0.0, 0.1, 0.7, 2.0]), min_size=n, max_size=n))
    workload = Workload(prompts, output, arrival=arrival)
    schedule = run(workload, VLLMRule(cap), clients)
    assert llmsched.validate(schedule) == []
    assert int(stage_tokens(schedule).max()) <= cap
