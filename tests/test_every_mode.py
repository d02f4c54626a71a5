"""What works in one engine mode works in all: every registered request policy runs under
competition, fusion, a disaggregated cluster and a fleet, and every schedule validates and
meets its mode's lower bound; a broken policy answer is refused alike in every mode."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import llmsched
from llmsched import ContextCostModel, DisaggregatedCluster, Engine, LinearCostModel, Workload
from llmsched.engines.competition.bounds import lower_bounds
from llmsched.engines.disaggregation.bounds import disaggregated_lower_bounds
from llmsched.engines.fusion.bounds import fused_lower_bounds
from llmsched.online import FCFS, make_request_policy, request_policy_names

POLICIES = request_policy_names()
MODES = ("competition", "fusion", "disaggregated", "fleet")
TOLERANCE = 1e-9


@st.composite
def per_token_costs(draw: st.DrawFn) -> LinearCostModel | ContextCostModel:
    """A cost model every mode can price: linear, or context-aware (chunks and transfers are
    priced by their tokens, which level models cannot do)."""
    capacity = draw(st.integers(40, 400))
    base = dict(
        prefill_base=draw(st.floats(1e-3, 0.05)),
        prefill_per_token=draw(st.floats(0, 5e-4)),
        decode_base=draw(st.floats(1e-3, 0.05)),
        decode_per_client=draw(st.floats(0, 5e-4)),
        prefill_capacity=capacity,
    )
    if draw(st.booleans()):
        return LinearCostModel(**base)
    return ContextCostModel(
        **base,
        prefill_per_square=draw(st.floats(0, 1e-6)),
        decode_per_context=draw(st.floats(0, 1e-5)),
    )


@st.composite
def loads(draw: st.DrawFn) -> tuple[Workload, Any, int]:
    """A workload with predictions and arrival times, a per-token cost model, a client count."""
    cost = draw(per_token_costs())
    n = draw(st.integers(1, 14))
    prompt = draw(st.lists(st.integers(1, cost.prefill_capacity), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))
    predicted = draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))
    arrival = draw(
        st.one_of(
            st.just([0.0] * n),
            st.lists(st.sampled_from([0.0, 0.05, 0.05, 0.4, 1.5]), min_size=n, max_size=n),
        )
    )
    return Workload(prompt, output, predicted, arrival), cost, draw(st.integers(1, 6))


def _cluster(cost: Any, clients: int, prompt_machines: int = 2) -> DisaggregatedCluster:
    return DisaggregatedCluster(
        prompt_machines, 1, cost, cost, clients, kv_bytes_per_token=1e5, kv_bandwidth=50.0
    )


def _run(mode: str, workload: Workload, cost: Any, clients: int, policy: Any) -> list[Any]:
    """The schedules of one run in ``mode`` (a fleet gives its engines'), each validated."""
    if mode == "competition":
        schedule = llmsched.simulate(workload, cost, clients, policy)
        assert schedule.makespan >= lower_bounds(workload, cost, clients).strong * (1 - TOLERANCE)
    elif mode == "fusion":
        schedule = llmsched.simulate_fusion(workload, cost, clients, policy, token_budget=64)
        bound = fused_lower_bounds(workload, cost, clients, 64).strong
        assert schedule.makespan >= bound * (1 - TOLERANCE)
    elif mode == "disaggregated":
        # A policy object serves one prompt machine; a name gives each its own.
        cluster = _cluster(cost, clients, 2 if isinstance(policy, str) else 1)
        schedule = llmsched.simulate_disaggregated(workload, cluster, policy)
        assert schedule.makespan >= disaggregated_lower_bounds(workload, cluster).strong * (1 - TOLERANCE)
    else:
        engines = [
            Engine(cost, clients, request_policy=policy),
            Engine(cost, clients + 1, mode="fusion", request_policy=policy, token_budget=64),
        ]
        schedule = llmsched.simulate_fleet(workload, engines, "jsq")
    assert schedule.validate() == []
    return [schedule]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(load=loads())
def test_every_registered_policy_runs_in_every_mode(policy: str, mode: str, load: Any) -> None:
    """Each registered request policy (by name) runs under each mode on workloads with
    predictions and arrivals, and its schedule validates and meets the mode's bound; a policy a
    mode cannot run is refused before work, saying why."""
    workload, cost, clients = load
    try:
        _run(mode, workload, cost, clients, policy)
    except ValueError as error:
        # The one refusal a name may meet: a fleet runs only the open-ended policies.
        assert mode == "fleet" and "fleet" in str(error), error


class _Broken(FCFS):
    """FCFS with one answer broken: ``ready`` or ``take`` as ``answer`` says."""

    def __init__(self, method: str, answer: Any):
        super().__init__()
        self.method, self.answer = method, answer

    def ready(self) -> Any:
        ready = super().ready()
        return self.answer if self.method == "ready" and ready else ready

    def take(self, capacity: int) -> Any:
        pairs = super().take(capacity)
        if self.method != "take":
            return pairs
        return self.answer(pairs) if callable(self.answer) else self.answer


BROKEN = {
    "ready negative": ("ready", -1),
    "ready a float": ("ready", 1.0),
    "ready a string": ("ready", "1"),
    "take a tuple": ("take", lambda pairs: tuple(pairs)),
    "take nothing": ("take", []),
    "take float pairs": ("take", [(0.0, 0.0)]),
    "take a triple": ("take", [(0, 0, 0)]),
    "take an unknown request": ("take", [(10**6, 0)]),
    "take a request twice": ("take", lambda pairs: [pairs[0], pairs[0]]),
}


def _refusal(mode: str, broken: tuple[str, Any]) -> tuple[type, str]:
    workload = Workload([10, 20, 30], [3, 4, 5])
    with pytest.raises((TypeError, ValueError)) as refused:
        _run(mode, workload, LinearCostModel.paper(), 3, _Broken(*broken))
    return type(refused.value), str(refused.value)


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_a_broken_answer_is_refused_alike_in_every_mode(broken: str) -> None:
    """The same broken ready() or take() answer gets the same exception and message under
    competition, fusion and a disaggregated cluster: the answers are checked in one place
    (llmsched.engines.answers). A fleet's engines run the first two modes' loop on registered
    policies, named."""
    refusals = {mode: _refusal(mode, BROKEN[broken]) for mode in MODES if mode != "fleet"}
    assert len(set(refusals.values())) == 1, refusals
    _, message = refusals["competition"]
    assert message.startswith("request policy _Broken."), message


def test_numpy_integers_are_answers_in_every_mode() -> None:
    """A ready() of numpy's int64 and pairs of numpy integers are accepted everywhere, and the
    schedules equal those of the plain answers."""
    workload = Workload([10, 20, 30], [3, 4, 5])
    cost = LinearCostModel.paper()

    class _Numpy(FCFS):
        def ready(self) -> Any:
            return np.int64(super().ready())

        def take(self, capacity: int) -> Any:
            return [(np.int64(r), np.int32(c)) for r, c in super().take(capacity)]

    for mode in ("competition", "fusion", "disaggregated"):
        plain = _run(mode, workload, cost, 3, make_request_policy("fcfs"))[0]
        numpy = _run(mode, workload, cost, 3, _Numpy())[0]
        assert numpy.makespan == plain.makespan
        assert np.array_equal(numpy.finish, plain.finish)
