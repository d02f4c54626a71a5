"""The registry of policy names: what each name builds, parameters, aliases, registration."""

from __future__ import annotations

import math

import pytest

from llmsched import LinearCostModel, Workload, simulate, validate
from llmsched.online import (
    FCFS,
    HYBRID_OVERHEAD,
    AgedShortestFirst,
    BatchWise,
    DeadlineFirst,
    LongestFirst,
    OfflineQueues,
    PrefillFirst,
    ShortestFirst,
    SortedPreemptive,
    StaticQueues,
    iteration_policy_names,
    make_iteration_policy,
    make_request_policy,
    register_iteration_policy,
    register_request_policy,
    registry,
    request_policy_names,
)
from llmsched.online.iteration import Lagrangian, LagrangianAsWritten, SLOAware, Threshold

# Every name registered before the registry took parameters, with the class and the
# attributes it built then: each must still mean the same.
REQUEST_NAMES = {
    "fcfs": (FCFS, {}),
    "batch-wise": (BatchWise, {}),
    "static": (StaticQueues, {}),
    "offline": (OfflineQueues, {"sizes": "predicted"}),
    "offline-oracle": (OfflineQueues, {"sizes": "oracle"}),
    "sorted-preemptive": (SortedPreemptive, {"initial": "offline", "sizes": "predicted", "overhead": 0}),
    "sorted-preemptive-oracle": (SortedPreemptive, {"initial": "offline", "sizes": "oracle", "overhead": 0}),
    "hybrid": (SortedPreemptive, {"initial": "offline", "sizes": "predicted", "overhead": HYBRID_OVERHEAD}),
    "hybrid-oracle": (
        SortedPreemptive,
        {"initial": "offline", "sizes": "oracle", "overhead": HYBRID_OVERHEAD},
    ),
    "sorted-preemptive-rr": (
        SortedPreemptive,
        {"initial": "round-robin", "sizes": "predicted", "overhead": 0},
    ),
    "sorted-preemptive-rr-oracle": (
        SortedPreemptive,
        {"initial": "round-robin", "sizes": "oracle", "overhead": 0},
    ),
    "shortest-first": (ShortestFirst, {"sizes": "predicted"}),
    "shortest-first-oracle": (ShortestFirst, {"sizes": "oracle"}),
    "longest-first": (LongestFirst, {"sizes": "predicted"}),
    "longest-first-oracle": (LongestFirst, {"sizes": "oracle"}),
    "aged-shortest-first": (
        AgedShortestFirst,
        {"seconds_per_token": 0.002, "output_weight": 1.0, "sizes": "predicted"},
    ),
    "aged-shortest-first-oracle": (
        AgedShortestFirst,
        {"seconds_per_token": 0.002, "output_weight": 1.0, "sizes": "oracle"},
    ),
    "deadline-first": (DeadlineFirst, {"ttft_base": 1.0, "ttft_per_token": 0.0, "defer": True}),
}
ITERATION_NAMES = {
    "prefill-first": PrefillFirst,
    "lagrangian": Lagrangian,
    "lagrangian-as-written": LagrangianAsWritten,
    "threshold": Threshold,
    "slo": SLOAware,
}


@pytest.fixture
def scratch_registry(monkeypatch):
    """Registrations made in a test are undone after it (the registry is process-wide)."""
    monkeypatch.setattr(registry._REQUEST, "entries", dict(registry._REQUEST.entries))
    monkeypatch.setattr(registry._ITERATION, "entries", dict(registry._ITERATION.entries))


@pytest.mark.parametrize("name", sorted(REQUEST_NAMES))
def test_every_request_name_keeps_its_meaning(name: str) -> None:
    """Each name builds the class and parameters it always built, a fresh object each time."""
    cls, attributes = REQUEST_NAMES[name]
    policy = make_request_policy(name)
    assert type(policy) is cls
    for key, value in attributes.items():
        assert getattr(policy, key) == value, key
    assert make_request_policy(name) is not policy


def test_the_names_are_exactly_the_registered_ones() -> None:
    """The name lists hold today's names, sorted."""
    assert request_policy_names() == sorted(REQUEST_NAMES)
    assert iteration_policy_names() == sorted(ITERATION_NAMES)
    for name, cls in ITERATION_NAMES.items():
        assert type(make_iteration_policy(name)) is cls


def test_keyword_parameters_and_aliases_agree() -> None:
    """A base name with parameters is the alias that fixes them."""
    for name, params, alias in (
        ("hybrid", {"sizes": "oracle"}, "hybrid-oracle"),
        ("sorted-preemptive", {"initial": "round-robin"}, "sorted-preemptive-rr"),
        ("sorted-preemptive", {"initial": "round-robin", "sizes": "oracle"}, "sorted-preemptive-rr-oracle"),
        ("offline", {"sizes": "oracle"}, "offline-oracle"),
    ):
        assert vars(make_request_policy(name, **params)) == vars(make_request_policy(alias))
    assert make_request_policy("hybrid", overhead=10).overhead == 10
    assert make_request_policy("fcfs", max_batch=4).max_batch == 4
    assert make_iteration_policy("threshold", k=7).k == 7


def test_parameters_reach_the_run() -> None:
    """Parameters change what runs: FCFS with max_batch=1 prefills one request per stage."""
    wl = Workload([5] * 4, [2] * 4)
    cost = LinearCostModel(0.01, 1e-4, 0.01, 1e-4, 100)
    s = simulate(wl, cost, 4, make_request_policy("fcfs", max_batch=1))
    assert validate(s) == [] and s.request_prefill_stage.tolist() == [0, 2, 4, 6]


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: make_request_policy("sjf"), ValueError, r"unknown request policy 'sjf'; choose one of \["),
        (lambda: make_iteration_policy("nope"), ValueError, "unknown iteration policy 'nope'"),
        (
            lambda: make_request_policy("fcfs", sizes="oracle"),
            TypeError,
            "request policy 'fcfs' has no parameter 'sizes'; it takes max_batch",
        ),
        (
            lambda: make_iteration_policy("lagrangian", k=3),
            TypeError,
            "iteration policy 'lagrangian' has no parameter 'k'; it takes ttft_weight, slo_ttft",
        ),
        (
            lambda: make_request_policy("hybrid-oracle", sizes="predicted"),
            ValueError,
            "request policy 'hybrid-oracle' fixes sizes='oracle'; ask for 'hybrid' with sizes='predicted'",
        ),
        (lambda: make_request_policy("hybrid", sizes="truth"), ValueError, "sizes must be one of"),
        *[
            (
                lambda name=name, limit=limit: make_request_policy(name, time_limit=limit),
                ValueError,
                r"time_limit must be a number of seconds >= 0, got",
            )
            for name in ("offline", "sorted-preemptive", "hybrid")
            for limit in (-1, math.nan, "10")
        ],
        (lambda: make_request_policy(FCFS(), max_batch=2), TypeError, "go with a request policy name"),
        (lambda: make_request_policy(FCFS), TypeError, "request_policy must be a name or an object"),
        (lambda: make_iteration_policy(3), TypeError, "iteration_policy must be a name or an object"),
    ],
)
def test_bad_names_and_parameters_are_refused(make, error, message) -> None:
    """Unknown names and parameters, fixed parameters and non-policies get a clear error."""
    with pytest.raises(error, match=message):
        make()


def test_objects_pass_through() -> None:
    """A policy object is returned as it is."""
    policy = FCFS()
    assert make_request_policy(policy) is policy


def test_registering_a_policy(scratch_registry) -> None:
    """A registered factory is reachable by name, with parameters; a taken name is refused."""
    register_request_policy("fcfs-pairs", lambda max_batch=2: FCFS(max_batch=max_batch))
    register_iteration_policy("eager", PrefillFirst)
    assert "fcfs-pairs" in request_policy_names() and "eager" in iteration_policy_names()
    assert make_request_policy("fcfs-pairs").max_batch == 2
    assert make_request_policy("fcfs-pairs", max_batch=3).max_batch == 3
    s = simulate(Workload([5] * 4, [2] * 4), LinearCostModel.paper(), 4, "fcfs-pairs", "eager")
    assert validate(s) == []
    with pytest.raises(ValueError, match="request policy named 'fcfs' is already registered"):
        register_request_policy("fcfs", FCFS)
    with pytest.raises(ValueError, match="iteration policy named 'eager' is already registered"):
        register_iteration_policy("eager", PrefillFirst)
    with pytest.raises(TypeError, match="must be callable"):
        register_request_policy("broken", 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="non-empty str"):
        register_request_policy("", FCFS)


def test_a_registration_in_one_test_does_not_leak(scratch_registry) -> None:
    """The scratch registry starts from the built-in names."""
    assert request_policy_names() == sorted(REQUEST_NAMES)
