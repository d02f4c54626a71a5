"""The fused validator: each rule of PD fusion caught alone; bad numbers are violations, not errors."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from llmsched import Workload
from llmsched.core.memory import KVMemory
from llmsched.engines.batching import batching_rule
from llmsched.engines.fusion.iteration import fused_iteration_time
from llmsched.engines.fusion.schedule import FusedSchedule
from llmsched.engines.fusion.validate import FUSED_RULES, validate_fused
from llmsched.engines.loop import CostClock, run_loop
from llmsched.online import FCFS
from tests.engines.fusion.test_rule import PAPER
from tests.engines.fusion.test_schedule import _decode_run, _rules, _set, _valid


def test_each_rule_is_caught_alone() -> None:
    s = _valid()
    r = _decode_run(s)
    broken = {
        "timeline": replace(s, run_start=_set(s.run_start, r, s.run_start[r] - 0.01)),
        "budget": replace(s, token_budget=int((s.run_decoding + s.run_chunk_tokens).max()) - 1),
        "chunks": replace(
            s,
            run_chunk_squares=_set(
                s.run_chunk_squares, int(np.flatnonzero(s.run_chunk_tokens)[0]), s.run_chunk_squares.max() + 1
            ),
        ),
        "decoding": replace(s, run_decoding=_set(s.run_decoding, r, s.run_decoding[r] + 1)),
        "context": replace(s, run_context=_set(s.run_context, r, s.run_context[r] + 1)),
        "makespan": replace(s, makespan=s.makespan + 1.0),
        "tokens": replace(
            s,
            workload=Workload(
                s.workload.prompt_tokens, _set(s.workload.output_tokens, 3, 999), arrival=s.workload.arrival
            ),
        ),
    }
    # Last run slower (the makespan follows, so only the time is wrong).
    last = s.num_runs - 1
    slow = replace(s, run_first_time=_set(s.run_first_time, last, s.run_first_time[last] * 1.5))
    broken["stage_time"] = replace(slow, makespan=float(slow.run_end[-1]))
    # A request arriving after its first chunk.
    first_chunk_run = int(s.chunk_run[np.flatnonzero(s.chunk_request == 5)[0]])
    late = _set(s.workload.arrival, 5, s.run_start[first_chunk_run] + 1e-3)
    broken["arrival"] = replace(
        s, workload=Workload(s.workload.prompt_tokens, s.workload.output_tokens, arrival=late)
    )
    # Two requests that overlap in time put on one client.
    lo = s.request_decode_start
    a, b = (int(i) for i in np.argsort(lo)[:2])
    broken["one_per_client"] = replace(s, request_client=_set(s.request_client, b, s.request_client[a]))
    # A prompt one token longer than its chunks (the context follows, so only the prompt is wrong).
    i = 7
    prompt = _set(s.workload.prompt_tokens, i, s.workload.prompt_tokens[i] + 1)
    runs_of_i = (s.run_first_iteration >= lo[i]) & (s.run_first_iteration < s.request_decode_end[i])
    broken["prompt"] = replace(
        s,
        workload=Workload(prompt, s.workload.output_tokens, arrival=s.workload.arrival),
        run_context=s.run_context + runs_of_i,
    )
    # Orca's rule under a memory small enough to preempt: against fewer blocks, the memory rule
    # alone; a continuation said to be another request's, the pieces rule alone.
    memory = KVMemory(24, block_size=8, watermark=0.0)
    rule = batching_rule("orca", 512, memory=memory)
    pieced = run_loop(Workload([20] * 4, [60] * 4), PAPER, 4, FCFS(), None, CostClock(), False, rule)
    assert validate_fused(pieced) == [] and pieced.request_parent is not None
    broken["memory"] = replace(pieced, memory=KVMemory(16, block_size=8, watermark=0.0))
    parent = pieced.request_parent.copy()
    parent[-1] = (parent[-1] + 1) % 4
    broken["pieces"] = replace(pieced, request_parent=parent)
    # Orca's rule with sit-outs: a request said to sit out the iteration of its own prompt,
    # before its decode range, breaks the sit_outs rule alone.
    work = Workload([10, 10, 10, 254, 255], [30, 30, 30, 5, 5], arrival=[0, 0, 0, 0.5, 0.5])
    sat = run_loop(work, PAPER, 5, FCFS(), None, CostClock(), False, batching_rule("orca", 256))
    assert validate_fused(sat) == [] and sat.skip_request.size
    own = int(sat.chunk_run[sat.chunk_request == 3][0])
    broken["sit_outs"] = replace(
        sat, skip_request=np.append(sat.skip_request, 3), skip_run=np.append(sat.skip_run, own)
    )
    for rule_name, schedule in broken.items():
        assert _rules(schedule) == {rule_name}, (rule_name, validate_fused(schedule)[:3])
    assert set(broken) | {"structure", "decode_start"} == set(FUSED_RULES)


def test_a_late_decode_start_is_caught_alone() -> None:
    """Hand-built: request B's prompt ends in iteration 0, yet it decodes from iteration 2
    (every other figure consistent with that)."""
    work = Workload([2, 2], [3, 1])
    cost, budget = PAPER, 10

    def build(b_start: int) -> FusedSchedule:
        iterations = 4
        lo = np.array([1, b_start])
        hi = lo + work.output_tokens
        count = np.array([((lo <= g) & (g < hi)).sum() for g in range(iterations)])
        on = [(lo <= g) & (g < hi) for g in range(iterations)]
        context = np.array([int((work.prompt_tokens + g - lo)[m].sum()) for g, m in enumerate(on)])
        times = [fused_iteration_time(cost, 0, 0, 4, 8)] + [
            fused_iteration_time(cost, int(c), 0, 0, 0) for c in count[1:]
        ]
        starts = np.concatenate([[0.0], np.cumsum(times)[:-1]])
        return FusedSchedule(
            work,
            cost,
            2,
            budget,
            starts,
            np.ones(iterations, dtype=np.int64),
            np.array(times),
            np.zeros(iterations),
            count,
            context,
            np.array([4] + [0] * (iterations - 1)),
            np.array([8] + [0] * (iterations - 1)),
            np.array([0, 1]),
            np.array([0, 0]),
            np.array([2, 2]),
            np.array([0, 1]),
            lo,
            hi,
            float(np.sum(times)),
        )

    assert validate_fused(build(1)) == []
    assert _rules(build(2)) == {"decode_start"}


def test_the_structure_rule_stops_the_rest() -> None:
    s = _valid()
    bad = replace(s, chunk_tokens=s.chunk_tokens[:-1])
    assert _rules(bad) == {"structure"}
    with pytest.raises(ValueError, match="cannot be skipped"):
        validate_fused(s, skip="structure")
    with pytest.raises(ValueError, match="unknown rule"):
        validate_fused(s, skip="speed")


def test_bad_numbers_are_violations_not_errors() -> None:
    """A chunk of -1 tokens is reported (chunks), and a time that is not finite breaks the
    structure rule, without raising."""
    s = _valid()
    assert "chunks" in _rules(replace(s, chunk_tokens=_set(s.chunk_tokens, 0, -1)))
    assert _rules(replace(s, makespan=float("nan"))) == {"structure"}
    assert _rules(replace(s, run_first_time=np.full(s.num_runs, np.nan))) == {"structure"}
