"""The contracts of llmsched.policies: constants, protocols, and their documentation."""

from __future__ import annotations

import inspect

import pytest

import llmsched.policies as policies
from llmsched import LinearCostModel, Workload
from llmsched.engines.loop import LoopView
from llmsched.online import FCFS, Lagrangian, PrefillFirst, SortedPreemptive
from llmsched.policies import DECODE_UNTIL_EVENT, PREFILL_NOW, EngineView, IterationPolicy, RequestPolicy

# What the module holds: the protocols, what policies know of the requests, and the answers.
PROTOCOLS = {"RequestPolicy", "IterationPolicy", "EngineView"}
KNOWLEDGE = {"KnownRequests", "oracle_lengths", "planned_ahead"}
ANSWERS = {"PREFILL_NOW", "DECODE_UNTIL_EVENT"}


def test_the_module_holds_the_contracts_only() -> None:
    """policies.py exports the two protocols, the engine view, what policies know of the
    requests, and the two answers, nothing else."""
    assert sorted(policies.__all__) == sorted(PROTOCOLS | KNOWLEDGE | ANSWERS)
    defined = {
        name
        for name, value in vars(policies).items()
        if (inspect.isclass(value) or inspect.isfunction(value))
        and getattr(value, "__module__", None) == policies.__name__
        and not name.startswith("_")
    }
    assert defined == PROTOCOLS | KNOWLEDGE
    assert all(getattr(getattr(policies, name), "_is_protocol", False) for name in PROTOCOLS)


def test_the_answers() -> None:
    """PREFILL_NOW is 0 and DECODE_UNTIL_EVENT is a positive count no run reaches."""
    assert PREFILL_NOW == 0
    assert isinstance(DECODE_UNTIL_EVENT, int) and DECODE_UNTIL_EVENT > 2**60


def test_policies_and_views_satisfy_the_protocols() -> None:
    """Named policies and the loop's view are instances of the protocols; other objects are not."""
    assert isinstance(FCFS(), RequestPolicy) and isinstance(SortedPreemptive(), RequestPolicy)
    assert isinstance(PrefillFirst(), IterationPolicy) and isinstance(Lagrangian(), IterationPolicy)
    view = LoopView(Workload([5], [1]), LinearCostModel.paper(), 1, {}, [-1])
    assert isinstance(view, EngineView)
    assert not isinstance(PrefillFirst(), RequestPolicy) and not isinstance(FCFS(), IterationPolicy)


@pytest.mark.parametrize(
    ("protocol", "calls"),
    [
        (
            RequestPolicy,
            ["start(known, clients)", "arrive(request)", "release(client)", "ready()", "take(capacity)"],
        ),
        (IterationPolicy, ["start(known, cost, clients)", "decide(engine)", "PREFILL_NOW", "n >= 1"]),
    ],
)
def test_each_protocol_says_when_each_method_is_called(protocol, calls) -> None:
    """Each protocol's docstring names every call the loop makes and what it must return."""
    doc = inspect.getdoc(protocol) or ""
    for call in calls:
        assert call in doc, call
    assert "must return" in doc
