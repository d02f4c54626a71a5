"""The formulations: paper-named constraint families, warm-start values, the build deadline, units."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmsched import Workload, lower_bounds, simulate
from llmsched.core.cost import LevelCostModel
from llmsched.mip.full import min_decode_iterations, plan_from_schedule
from llmsched.mip.full.model import (
    BuildStopped,
    Deadline,
    FullData,
    LiteralModel,
    Plan,
    StrongModel,
    build_model,
    floor_units,
    time_scale,
)

COST = LevelCostModel([(256, 0.03), (512, 0.05), (1024, 0.09)], 0.01)
WORKLOAD = Workload(prompt_tokens=[50, 300, 120], output_tokens=[3, 5, 2])


def _data(bins: int = 3) -> FullData:
    return FullData(
        workload=WORKLOAD,
        cost=COST,
        clients=2,
        bins=bins,
        upper_bound=2.0,
        lower_bound=lower_bounds(WORKLOAD, COST, 2).strong,
        min_decode_iterations=min_decode_iterations(WORKLOAD, 2),
    )


class _Counting:
    """A backend that counts what a build asks for: variables as names, constraints as names,
    and expressions as plain numbers (so no solver is needed)."""

    def __init__(self) -> None:
        self.variables: list[str] = []
        self.constraints: list[str] = []

    def binary(self, name: str) -> float:
        self.variables.append(name)
        return 0.0

    def integer(self, lb: int, ub: int, name: str) -> float:
        self.variables.append(name)
        return float(lb)

    def continuous(self, lb: float, ub: float, name: str) -> float:
        self.variables.append(name)
        return float(lb)

    def add(self, constraint: object, name: str) -> None:
        self.constraints.append(name)

    def minimize(self, expr: object) -> None:
        pass

    def sum(self, terms: object) -> float:
        return float(sum(terms))  # type: ignore[call-overload]

    def time(self, seconds: float) -> float:
        return seconds


@pytest.mark.parametrize(
    ("formulation", "families"),
    [
        (
            "strong",
            [
                "eq6_capacity",
                "eq7_one_level",
                "eq8_length",
                "eq11_full_stage",
                "eq12_clients",
                "eq17_prefill_once",
            ],
        ),
        ("literal", ["eq2", "eq3", "eq4", "eq5", "eq6", "eq7", "eq8", "eq9", "eq10", "eq11", "eq12", "eq18"]),
    ],
)
def test_constraint_families_carry_the_papers_equation_numbers(formulation: str, families: list[str]) -> None:
    """Every family of the paper's equations is in the built model, under its number."""
    backend = _Counting()
    build_model(_data(), formulation, backend)
    built = {name.split("(")[0] for name in backend.constraints}
    assert set(families) <= built
    # The literal model has the paper's per-client variables, the strong one none.
    assert any(v.startswith("x[") for v in backend.variables) == (formulation == "literal")


def test_the_literal_model_grows_as_n_j_k_cubed() -> None:
    """Rule (10) has one constraint per request, client and pair of bins two or more apart:
    n J (K-1)(K-2)/2 of them."""
    for bins in (3, 6):
        backend = _Counting()
        build_model(_data(bins), "literal", backend)
        eq10 = sum(name.startswith("eq10(") for name in backend.constraints)
        assert eq10 == len(WORKLOAD) * 2 * (bins - 1) * (bins - 2) // 2


@pytest.mark.parametrize("formulation", ["strong", "literal"])
def test_a_deadline_stops_the_build_and_changes_nothing_before_it(formulation: str) -> None:
    """A Deadline that expires after 25 checks raises BuildStopped at the 26th variable or
    constraint; one that never expires builds exactly the model of the bare backend."""
    checks = 0

    def after_25() -> bool:
        nonlocal checks
        checks += 1
        return checks > 25

    inner = _Counting()
    with pytest.raises(BuildStopped, match="time limit passed while building"):
        build_model(_data(), formulation, Deadline(inner, after_25))
    assert len(inner.variables) + len(inner.constraints) == 25
    bare, wrapped = _Counting(), _Counting()
    build_model(_data(), formulation, bare)
    build_model(_data(), formulation, Deadline(wrapped, lambda: False))
    assert (wrapped.variables, wrapped.constraints) == (bare.variables, bare.constraints)


def test_warm_start_values_come_from_a_plan() -> None:
    """The literal warm start needs each request's client; the strong one has no clients and
    sets every variable it built."""
    schedule = simulate(WORKLOAD, COST, 2, "fcfs", "prefill-first")
    plan, client = plan_from_schedule(schedule)
    strong = StrongModel(_data(plan.bins), _Counting())
    strong.build()
    assert len(strong.values_from_plan(plan)) == sum(len(family) for family in strong.vars.values())
    literal = LiteralModel(_data(plan.bins), _Counting())
    literal.build()
    with pytest.raises(ValueError, match="needs each request's client"):
        literal.values_from_plan(plan)
    assert len(literal.values_from_plan(plan, client)) > 0


def test_plans_are_read_only_and_know_where_requests_finish() -> None:
    """Plan.make copies its arrays, locks them, and finds each request's last bin with a token."""
    tokens = np.array([[2, 1, 0], [0, 0, 4], [0, 0, 0]])
    plan = Plan.make([0, 2, 1], tokens, [2, 0, 4], [0, -1, 1])
    assert plan.finish_bin.tolist() == [1, 2, -1] and plan.bins == 3
    tokens[0, 0] = 9
    assert plan.tokens[0, 0] == 2
    for arr in (plan.prefill_bin, plan.tokens, plan.iterations, plan.level, plan.finish_bin):
        with pytest.raises(ValueError, match="read-only"):
            arr[0] = 1


def test_time_units_of_cp_sat() -> None:
    """The paper's times are exact in units of 10 us; 1/3 s is exact in no power of ten up to
    10^9; floor_units rounds down, but not below a whole unit that floats miss by a hair
    (0.29 * 100 is 28.999999999999996 in floats)."""
    assert time_scale([0.025, 0.00013, 0.029]) == (100_000, True)
    assert time_scale([1 / 3]) == (10**9, False)
    assert math.floor(0.29 * 100) == 28 and floor_units(0.29, 100) == 29
    assert floor_units(0.35, 10) == 3 and floor_units(1 / 3, 10**9) == 333_333_333
