"""The event-driven simulator and its baseline policies."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched import LinearCostModel, Workload, lower_bounds, simulate, validate, workloads
from llmsched.policies import PREFILL_NOW, StaticQueues
from llmsched.schedule import DECODE
from llmsched.schedule import PREFILL as PREFILL_STAGE

SMALL_COST = LinearCostModel(1.0, 0.1, 0.5, 0.25, prefill_capacity=100)


def test_hand_computed_schedule() -> None:
    """A three-request, two-client run matches a schedule worked out by hand."""
    wl = Workload([10, 20, 30], [2, 1, 3])
    s = simulate(wl, SMALL_COST, 2)
    # P[0,4] holds requests 0 and 1; one decode iteration with 2 active (1 s) ends request 1;
    # P[5,9] prefills request 2 onto client 1; then 2 active (1 s) and 1 active (0.75 s) x 2.
    assert s.stage_kind.tolist() == [PREFILL_STAGE, DECODE, PREFILL_STAGE, DECODE]
    assert s.stage_start.tolist() == [0.0, 4.0, 5.0, 9.0]
    assert s.stage_end.tolist() == [4.0, 5.0, 9.0, 11.5]
    assert s.stage_iterations.tolist() == [0, 1, 0, 3]
    assert s.iteration_end.tolist() == [5.0, 10.0, 10.75, 11.5]
    assert s.request_client.tolist() == [0, 1, 1]
    assert s.finish.tolist() == [10.0, 5.0, 11.5]
    assert s.ttft.tolist() == [4.0, 4.0, 9.0]
    assert s.makespan == 11.5
    assert s.utilization == pytest.approx(17.5 / 23.0)
    assert s.tokens_per_s == pytest.approx(6 / 11.5)
    assert validate(s) == []


def test_capacity_limited_prefills_alternate_with_single_iterations() -> None:
    """When the waiting prompts exceed one stage, prefill-first runs one decode iteration between stages."""
    wl = Workload([60, 60, 60], [5, 5, 5])
    s = simulate(wl, SMALL_COST, 3)
    kinds = s.stage_kind.tolist()
    assert kinds[:5] == [PREFILL_STAGE, DECODE, PREFILL_STAGE, DECODE, PREFILL_STAGE]
    assert s.stage_iterations[1] == 1 and s.stage_iterations[3] == 1
    assert validate(s) == []


def test_fcfs_keeps_arrival_order_and_idles_until_arrivals() -> None:
    """Requests are prefilled in arrival order; the engine waits idle for a late arrival."""
    wl = Workload([5, 5, 5], [1, 1, 1], arrival=[10.0, 0.0, 3.0])
    s = simulate(wl, SMALL_COST, 1)
    assert np.argsort(s.stage_start[s.request_prefill_stage]).tolist() == [1, 2, 0]
    assert s.stage_start[s.request_prefill_stage[0]] == 10.0
    assert s.stage_start[s.request_prefill_stage[2]] == 3.0
    assert validate(s) == []


def test_arrival_during_decode_starts_a_prefill_at_the_next_iteration_boundary() -> None:
    """A request arriving mid-decode with a client free is prefilled at the first iteration end after it."""
    wl = Workload([5, 5], [100, 3], arrival=[0.0, 2.2])
    s = simulate(wl, SMALL_COST, 2)
    start = s.stage_start[s.request_prefill_stage[1]]
    # Prefill of request 0 ends at 1.5; iterations of 0.75 s end at 2.25, 3.0, ...
    assert start == pytest.approx(2.25)
    assert validate(s) == []


def test_static_queues_round_robin_and_given() -> None:
    """Round-robin static queues put request i on client i mod J; given queues are followed in order."""
    wl = Workload([5] * 6, [3, 1, 4, 1, 5, 9])
    s = simulate(wl, SMALL_COST, 2, "static")
    assert s.request_client.tolist() == [0, 1, 0, 1, 0, 1]
    queues = [[5, 0], [1, 2, 3, 4]]
    s = simulate(wl, SMALL_COST, 2, StaticQueues(queues))
    assert s.request_client.tolist() == [0, 1, 1, 1, 1, 0]
    # Client 1 runs 1, 2, 3, 4 in that order.
    order = np.argsort(s.stage_start[s.request_prefill_stage[[1, 2, 3, 4]]])
    assert order.tolist() == [0, 1, 2, 3]
    assert validate(s) == []
    with pytest.raises(ValueError, match="exactly once"):
        simulate(wl, SMALL_COST, 2, StaticQueues([[0, 1], [2, 3]]))
    with pytest.raises(ValueError, match="3 queues but there are 2 clients"):
        simulate(wl, SMALL_COST, 2, StaticQueues([[0, 1], [2, 3], [4, 5]]))


def test_decide_is_asked_only_with_a_real_choice() -> None:
    """The iteration policy sees ready and active work whenever it is asked, and decode-n is honoured."""
    seen: list[tuple[int, int, int]] = []

    class DecodeFour:
        name = "decode-four"

        def start(self, workload, cost, clients) -> None:
            pass

        def decide(self, engine) -> int:
            seen.append((engine.ready, engine.active, engine.free))
            return 4 if engine.stage_iterations < 4 else PREFILL_NOW

    wl = Workload([5] * 4, [10, 2, 10, 10])
    s = simulate(wl, SMALL_COST, 3, "fcfs", DecodeFour())
    assert seen and all(r > 0 and a > 0 for r, a, _ in seen)
    # Request 1 frees a client after 2 iterations; asked then, the policy decodes 4 more before
    # the prefill of request 3.
    assert s.stage_iterations[s.request_prefill_stage[3] - 1] == 6
    assert seen[0] == (1, 2, 1)
    assert validate(s) == []


def test_gsm8k_baseline_is_within_five_percent_of_the_paper() -> None:
    """The vLLM-like baseline on gsm8k(0) with the paper's costs ends within 5% of 201.00 s."""
    wl = workloads.gsm8k(0)
    cost = LinearCostModel.paper()
    s = simulate(wl, cost, 200)
    assert validate(s) == []
    assert s.makespan == pytest.approx(201.00, rel=0.05)
    assert s.utilization == pytest.approx(0.802, abs=0.03)
    lb = lower_bounds(wl, cost, 200)
    assert lb.paper <= lb.strong <= s.makespan


def test_simulation_is_deterministic() -> None:
    """Two runs of the same instance give identical schedules."""
    wl = workloads.gsm8k(1)
    a = simulate(wl, LinearCostModel.paper(), 200)
    b = simulate(wl, LinearCostModel.paper(), 200)
    for runs in ("run_start", "run_iterations", "run_iteration_time"):
        assert np.array_equal(getattr(a, runs), getattr(b, runs))
    assert np.array_equal(a.request_client, b.request_client)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        ((Workload([5], [1]), SMALL_COST, 0), {}, ValueError, "clients must be at least 1"),
        ((Workload([5], [1]), SMALL_COST, -3), {}, ValueError, "clients must be at least 1"),
        ((Workload([5], [1]), SMALL_COST, 2.5), {}, TypeError, "clients must be an integer"),
        ((Workload([500], [1]), SMALL_COST, 1), {}, ValueError, "more than the prefill capacity of 100"),
        ((Workload([], []), SMALL_COST, 1), {}, ValueError, "no requests"),
        ((Workload([5], [1]), "paper", 1), {}, TypeError, "cost must be a cost model"),
        (([5], SMALL_COST, 1), {}, TypeError, "workload must be a llmsched.Workload"),
        ((Workload([5], [1]), SMALL_COST, 1), {"request_policy": "sjf"}, ValueError, "unknown request"),
        ((Workload([5], [1]), SMALL_COST, 1), {"iteration_policy": "nope"}, ValueError, "unknown iteration"),
        ((Workload([5], [1]), SMALL_COST, 1), {"iteration_policy": 3}, TypeError, "iteration_policy must be"),
    ],
)
def test_bad_input_is_rejected_before_work(args, kwargs, error, message) -> None:
    """Invalid instances and unknown policies raise a clear error naming the problem."""
    with pytest.raises(error, match=message):
        simulate(*args, **kwargs)


def test_broken_policy_is_reported() -> None:
    """A request policy that claims ready work but takes none is reported, not looped on."""

    class Liar:
        def start(self, workload, clients) -> None:
            pass

        def arrive(self, request) -> None:
            pass

        def release(self, client) -> None:
            pass

        def ready(self) -> int:
            return 1

        def take(self, capacity):
            return []

    with pytest.raises(RuntimeError, match="took none"):
        simulate(Workload([5], [1]), SMALL_COST, 1, Liar())


@pytest.mark.parametrize("prompt", [57, 100, 3])
def test_arrival_on_an_iteration_boundary_is_not_delayed(prompt: int) -> None:
    """A request arriving exactly when an iteration ends is prefilled then, not one iteration later."""
    cost = LinearCostModel.paper()
    for k in range(1, 120):
        arrival = cost.prefill_time(prompt) + k * cost.decode_iteration_time(1)
        s = simulate(Workload([prompt, 5], [500, 1], arrival=[0.0, arrival]), cost, 2)
        start = s.stage_start[s.request_prefill_stage[1]]
        assert abs(start - arrival) < 1e-9, (k, start, arrival)
        assert validate(s) == []


def test_memory_follows_requests_not_clients() -> None:
    """A billion clients for three requests is as cheap as three clients (nothing is sized by J)."""
    wl = Workload([5, 6, 7], [3, 2, 1])
    for policy in ("fcfs", "static"):
        s = simulate(wl, SMALL_COST, 10**9, policy)
        assert validate(s) == []
        assert sorted(s.request_client.tolist()) == [0, 1, 2]


def test_decision_must_be_a_non_negative_integer() -> None:
    """An iteration policy answering 0.7, None or -1 is reported with its name."""

    def policy(answer):
        class Answer:
            def start(self, workload, cost, clients) -> None:
                pass

            def decide(self, engine):
                return answer

        return Answer()

    wl = Workload([5] * 3, [4, 1, 4])
    for answer, error in ((0.7, TypeError), (None, TypeError), (True, TypeError), (-1, ValueError)):
        with pytest.raises(error, match=r"Answer.decide returned"):
            simulate(wl, SMALL_COST, 2, "fcfs", policy(answer))
    assert validate(simulate(wl, SMALL_COST, 2, "fcfs", policy(np.int64(2)))) == []


def test_arrivals_too_large_for_float_precision_are_refused() -> None:
    """Epoch-style arrival times cannot time 29 ms iterations in float64: a clear error says so."""
    wl = Workload([5, 6], [3, 4], arrival=[1.7e9, 1.7e9])
    with pytest.raises(ValueError, match="subtract the first arrival"):
        simulate(wl, LinearCostModel.paper(), 2)
