"""A cluster machine's batching rule (:mod:`llmsched.engines.disaggregation.rule`): the one
decision loop runs a token machine's continuous batching (requests arriving prefilled join at
an iteration boundary), a prompt machine's stages (taken until nothing more fits, then handed
off) and a lent stage, and a prompt arriving at a machine that decodes cuts nothing short."""

from __future__ import annotations

import math

import pytest

import llmsched.fleet.disaggregated as disaggregated
from llmsched import LinearCostModel, Workload
from llmsched.engines.disaggregation.rule import HANDED, LENT, PROMPT, MachineQueue, PoolRule
from llmsched.engines.loop import EngineStream, open_engine
from llmsched.engines.rule import HAND_OFF, JOIN
from llmsched.online.baselines import FCFS
from llmsched.policies import KnownRequests

# 10 ms a decode iteration whatever the batch; a stage 100 ms + 1 ms a token, 100 tokens at most.
COST = LinearCostModel(0.1, 0.001, 0.01, 0.0, 100)


def _machine(clients: int, policy: FCFS | None = None, requests: int = 10):
    stream = EngineStream()
    stream.done = []
    prompts = (policy, KnownRequests(requests, False, False, False, "test")) if policy is not None else None
    queue = MachineQueue(0, clients, stream, prompts)
    engine = open_engine(COST, clients, queue, None, stream, False, "test", requests, PoolRule(queue))
    return stream, queue, engine


def test_requests_arriving_prefilled_join_in_order_the_last_released_client_first() -> None:
    stream, queue, engine = _machine(clients=2)
    assert next(engine) == math.inf  # idle, waiting for a request
    for request, output in enumerate((3, 5, 2)):
        queue.expect()
        queue.add(request, HANDED, 10, output, 0, 0.0)
    assert queue.load == 3
    wake = engine.send(None)  # two join at once (two clients); the third waits for a client
    assert queue.step == JOIN
    assert stream.client_of[:3] == [0, 1, -1] and stream.decode_start[:3] == [0, 0, -1]
    assert wake == pytest.approx(0.03)  # request 0's three iterations
    wake = engine.send(None)
    # Request 0 left client 0; request 2 took it (the last released), from iteration 3 on.
    assert stream.done == [0] and stream.done_at == pytest.approx(0.03)
    assert stream.client_of[2] == 0 and stream.decode_start[2] == 3
    assert wake == pytest.approx(0.05)


def test_a_request_joins_at_the_first_iteration_boundary_after_it_arrives() -> None:
    stream, queue, engine = _machine(clients=2)
    next(engine)
    queue.expect()
    queue.add(0, HANDED, 10, 10, 0, 0.0)
    assert engine.send(None) == pytest.approx(0.1)  # ten iterations, a client free: cuttable
    assert stream.cuttable
    queue.expect()
    queue.add(1, HANDED, 10, 4, 0, 0.034)  # during the fourth iteration
    wake = engine.send(None)
    # The run is cut at the end of that iteration (0.04), where the engine waits to go on.
    assert wake == pytest.approx(0.04) and stream.decode_start[1] == -1
    engine.send(None)
    assert stream.decode_start[1] == 4 and stream.client_of[1] == 1


def test_a_prompt_stage_takes_until_nothing_more_fits_then_hands_its_requests_off() -> None:
    stream, queue, engine = _machine(clients=4, policy=FCFS())
    next(engine)
    for request, prompt in enumerate((60, 30, 20, 5)):
        queue.add(request, PROMPT, prompt, 1, 0, 0.0)
    end = engine.send(None)
    assert queue.step == HAND_OFF
    start, stage_end, pairs = stream.stage
    # fcfs takes 60 and 30, then 20 does not fit the 10 tokens left, and fcfs stops there.
    assert [queue.member[local] for local, _ in pairs] == [0, 1]
    assert (start, stage_end, end) == (0.0, pytest.approx(0.19), pytest.approx(0.19))
    assert stream.decode_start[:2] == [-1, -1]  # they decode elsewhere
    stream.stage = None
    engine.send(None)  # the next stage: the rest
    assert [queue.member[local] for local, _ in stream.stage[2]] == [2, 3]


def test_a_prompt_machine_that_decodes_takes_no_stage_and_a_prompt_cuts_nothing_short() -> None:
    stream, queue, engine = _machine(clients=2, policy=FCFS())
    next(engine)
    queue.expect()
    queue.add(0, HANDED, 10, 10, 0, 0.0)
    assert engine.send(None) == pytest.approx(0.1)
    queue.add(1, PROMPT, 50, 1, 0, 0.02)  # a prompt arrives while it decodes
    assert stream.cuttable and queue.load == 1
    # Woken at the run's end (a cut would have stopped at 0.03), it takes the prompt's stage
    # once its decoding is done: 0.1 to 0.25.
    assert engine.send(None) == pytest.approx(0.25)
    assert stream.done == [0] and stream.done_at == pytest.approx(0.1)
    assert stream.stage is not None and [queue.member[r] for r, _ in stream.stage[2]] == [1]
    assert stream.stage[0] == pytest.approx(0.1)


def test_a_lent_stage_is_prefilled_here_as_a_stage_that_hands_its_requests_off() -> None:
    stream, queue, engine = _machine(clients=2)
    next(engine)
    for request in (0, 1):
        queue.add(request, LENT, 40, 2, 0, 0.0)
    end = engine.send(None)
    assert queue.step == HAND_OFF and end == pytest.approx(0.18)
    assert [queue.member[local] for local, _ in stream.stage[2]] == [0, 1]
    assert stream.decode_start[:2] == [-1, -1]  # the cluster hands them back at the stage's end


def test_a_request_whose_keys_and_values_arrive_during_a_lent_stage_decodes_first() -> None:
    """One client on each token machine. Request 1 is lent to token machine 2 (a 0.3 s stage);
    request 3's keys and values reach that machine at 0.061 s, during the stage: it takes the
    client first, and request 1 decodes once it is done."""
    from llmsched import DisaggregatedCluster, simulate_disaggregated, validate_disaggregated

    prompt_cost = LinearCostModel(0.01, 1e-4, 0.01, 0.0, 100)
    token_cost = LinearCostModel(0.3, 0.0, 0.01, 0.0, 100)
    cluster = DisaggregatedCluster(1, 2, prompt_cost, token_cost, 1, 0.0, 1.0, 4, True, True)
    work = Workload([60, 60, 50, 60], [3, 1, 1, 1], arrival=[0, 0, 0, 0.0446731])
    schedule = simulate_disaggregated(work, cluster)
    assert schedule.request_machine[1] == schedule.request_machine[3] == 2
    assert schedule.stage_machine[schedule.request_stage[1]] == 2  # lent
    assert schedule.request_decode_start.tolist() == [0, 1, 3, 0]
    assert validate_disaggregated(schedule) == []


def test_every_machine_of_a_cluster_runs_the_one_loop(monkeypatch) -> None:
    """Every machine of a cluster is an engine of the decision loop under a PoolRule."""
    rules: list[PoolRule] = []
    opened = disaggregated.open_engine

    def spy(*args, **kwargs):
        rules.append(args[-1])
        return opened(*args, **kwargs)

    monkeypatch.setattr(disaggregated, "open_engine", spy)
    from llmsched import DisaggregatedCluster, simulate_disaggregated, validate_disaggregated

    cluster = DisaggregatedCluster(2, 3, COST, COST, 4, 1e6, 25.0)
    work = Workload([30, 60, 90, 20] * 5, [3, 1, 7, 2] * 5, arrival=[0.05 * i for i in range(20)])
    schedule = simulate_disaggregated(work, cluster)
    assert len(rules) == 5 and all(isinstance(rule, PoolRule) for rule in rules)
    assert validate_disaggregated(schedule) == []
