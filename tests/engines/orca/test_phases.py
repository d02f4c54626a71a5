"""Requests that do one phase on an engine (a cluster splitting prefill and decode between
machines): a prefill-only request leaves when its prompt's iteration ends, a decode-only one
decodes with no chunk from its take on; the fused validator checks both."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmsched import LinearCostModel, Workload
from llmsched.engines.competition.rule import CompetitionRule
from llmsched.engines.fusion.rule import FusionRule
from llmsched.engines.fusion.schedule import FusedSchedule
from llmsched.engines.fusion.validate import validate_fused
from llmsched.engines.loop import EngineStream, admits, open_engine, stream_schedule
from llmsched.engines.orca.rule import OrcaRule
from llmsched.engines.rule import DECODE_ONLY, PREFILL_ONLY, WHOLE
from llmsched.online import FCFS, PrefillFirst

COST = LinearCostModel(1.0, 0.1, 0.5, 0.25, prefill_capacity=100)

Request = tuple[float, int, int, int]  # arrival, prompt, output, phase


def run(
    requests: list[Request], clients: int = 2, rule: object | None = None
) -> tuple[FusedSchedule, list[tuple[float, int]]]:
    """Feed ``requests`` (in arrival order) to an engine through a stream, as a cluster does;
    return its schedule and each request the stream listed as done, with the time it said."""
    stream = EngineStream()
    stream.done = []
    loop = open_engine(COST, clients, FCFS(), None, stream, False, rule=rule or OrcaRule(16))  # type: ignore[arg-type]
    done: list[tuple[float, int]] = []

    def step() -> float:
        wake = next(loop)
        done.extend((stream.done_at, request) for request in stream.done)  # type: ignore[union-attr]
        stream.done.clear()  # type: ignore[union-attr]
        return wake

    wake = step()
    for t in sorted({r[0] for r in requests}):
        while not admits(wake, t):
            wake = step()
        for arrival, prompt, output, phase in requests:
            if arrival == t:
                stream.add(prompt, output, 0, t, phase)
        if stream.cuttable:
            wake = step()
    stream.closed = True
    result = None
    while result is None:
        try:
            step()
        except StopIteration as end:
            result = end.value
    done.extend((stream.done_at, request) for request in stream.done)
    workload = Workload([r[1] for r in requests], [r[2] for r in requests], arrival=[r[0] for r in requests])
    schedule = stream_schedule(workload, COST, clients, stream, range(len(requests)), result)
    assert isinstance(schedule, FusedSchedule)
    return schedule, done


def test_a_prefill_only_request_leaves_and_a_decode_only_one_decodes_unprefilled() -> None:
    """Worked by hand (Orca, cap 16, two clients): requests 0 (whole, 5 tokens, 3 out) and 1
    (prefill only, 6 tokens) share iteration 0 (1 + 0.1 x 11 = 2.1 s); request 1 leaves then,
    listed as done at 2.1 s, and request 2 (decode only, its 8 tokens prefilled elsewhere, here
    at 1.0 s) joins request 0's decoding from iteration 1 on, with no chunk."""
    schedule, done = run([(0.0, 5, 3, WHOLE), (0.0, 6, 4, PREFILL_ONLY), (1.0, 8, 2, DECODE_ONLY)])
    assert validate_fused(schedule) == []
    assert schedule.request_phase is not None and schedule.request_phase.tolist() == [0, 1, 2]
    assert schedule.chunk_request.tolist() == [0, 1] and schedule.chunk_run.tolist() == [0, 0]
    assert schedule.run_start.tolist() == [0.0, 2.1, 4.1]
    assert schedule.run_decoding.tolist() == [0, 2, 1]
    assert schedule.request_decode_start.tolist() == [1, 1, 1]
    assert schedule.request_decode_end.tolist() == [4, 1, 3]  # request 1 decodes nothing here
    assert done[0] == (2.1, 1)  # it left at its prompt's iteration's end
    assert schedule.finish.tolist() == [4.85, 2.1, 4.1]
    assert schedule.prefill_end.tolist() == [2.1, 2.1, 1.0]  # a decode-only one's: its arrival
    # Its client is free again at once: a request arriving at 2.5 s takes it while request 0
    # decodes, and joins it in the next iteration (2.85 s).
    schedule, done = run([(0.0, 5, 3, WHOLE), (0.0, 6, 4, PREFILL_ONLY), (2.5, 4, 1, WHOLE)])
    assert validate_fused(schedule) == []
    assert schedule.request_client.tolist() == [0, 1, 1]
    assert schedule.run_start.tolist() == [0.0, 2.1, 2.85, 4.5]
    assert done == [(2.1, 1), (5.5, 0), (5.5, 2)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.integers(0, 6),
            st.integers(1, 40),
            st.integers(1, 6),
            st.sampled_from([WHOLE, PREFILL_ONLY, DECODE_ONLY]),
        ),
        min_size=1,
        max_size=12,
    ),
    st.integers(1, 4),
    st.sampled_from(["orca", "fusion"]),
)
def test_any_mix_of_phases_validates_and_does_each_requests_work(
    drawn: list[tuple[int, int, int, int]], clients: int, kind: str
) -> None:
    """For any requests and phases, on Orca's rule and on chunked fusion: the schedule
    validates, a decode-only request has no chunk and decodes its output, a prefill-only one
    has its whole prompt and decodes nothing, and the stream lists every request done (the
    prefill-only ones at their prompts' ends)."""
    requests = sorted((float(t) / 2, p, o, phase) for t, p, o, phase in drawn)
    rule = OrcaRule(48) if kind == "orca" else FusionRule(48)
    schedule, done = run(requests, clients, rule)
    assert validate_fused(schedule) == []
    phase = np.array([r[3] for r in requests])
    chunked = np.bincount(schedule.chunk_request, weights=schedule.chunk_tokens, minlength=len(requests))
    prompt = np.array([r[1] for r in requests])
    assert np.array_equal(chunked, np.where(phase == DECODE_ONLY, 0, prompt))
    decoded = schedule.request_decode_end - schedule.request_decode_start - schedule.request_sat_out
    assert np.array_equal(decoded, np.where(phase == PREFILL_ONLY, 0, [r[2] for r in requests]))
    assert sorted(request for _, request in done) == list(range(len(requests)))
    for at, request in done:
        assert at == pytest.approx(schedule.finish[request])


def test_the_validator_catches_a_phase_broken() -> None:
    """Each way to break a phase breaks its rule, and only that rule: a decode-only request
    with a chunk (``prompt``), a prefill-only request that decodes (``tokens``), a decode-only
    request decoding before its keys and values arrive (``arrival``)."""
    schedule, _ = run([(0.0, 5, 3, WHOLE), (0.0, 6, 4, PREFILL_ONLY), (1.0, 8, 2, DECODE_ONLY)])
    assert schedule.request_phase is not None

    def broken(**changes: object) -> set[str]:
        return {v.rule for v in validate_fused(dataclasses.replace(schedule, **changes))}

    as_whole = schedule.request_phase.copy()
    as_whole[2] = WHOLE  # it then owes its prompt's chunks
    assert broken(request_phase=as_whole) == {"prompt"}
    decodes = schedule.request_phase.copy()
    decodes[1] = WHOLE  # it then owes its 4 tokens
    assert broken(request_phase=decodes) == {"tokens"}
    late = schedule.workload.replace(arrival=np.array([0.0, 0.0, 2.5]))
    assert broken(workload=late) == {"arrival"}
    assert broken(request_phase=np.array([0, 1, 7])) == {"structure"}


def test_only_a_fused_engine_splits_phases() -> None:
    """A request that does one phase on an engine under competition's rule is refused: it
    would be prefilled in a stage of its own."""
    with pytest.raises(TypeError, match="only an engine of a fused rule"):
        run([(0.0, 5, 3, PREFILL_ONLY)], rule=CompetitionRule(PrefillFirst()))
    with pytest.raises(ValueError, match="phase must be"):
        EngineStream().add(5, 3, 0, 0.0, 3)
