"""A decode time tabulated by batch size (``ContextCostModel.decode_by_batch``): lookups,
the bound through the table's lower convex hull, the fit, and where the table is refused."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsched import ContextCostModel, Workload, lower_bounds, simulate, validate
from llmsched.cli.config import cost_model
from llmsched.runtime.profiling import plan_profile

# A CPU-like sawtooth: three clients slower than four, seven slower than eight.
SAW = (0.0369, 0.0623, 0.0777, 0.0570, 0.0672, 0.0658, 0.0734, 0.0729)
TABLE = ContextCostModel(0.01, 1e-4, 1e-8, 0.03, 0.002, 1e-6, 1000, SAW)


def test_the_table_replaces_the_line_and_goes_on_past_its_end() -> None:
    """Whole sizes read the table, a fraction interpolates (a_d at 0), sizes past the table
    rise at b_d per client; context adds c_d per token whatever the size; arrays agree with
    scalars."""
    assert TABLE.decode_iteration_time(3) == SAW[2]
    assert TABLE.decode_iteration_time(4, 1000) == pytest.approx(SAW[3] + 1e-3)
    assert TABLE.decode_iteration_time(0) == pytest.approx(0.03)
    assert TABLE.decode_iteration_time(2.5) == pytest.approx((SAW[1] + SAW[2]) / 2)
    assert TABLE.decode_iteration_time(11) == pytest.approx(SAW[-1] + 3 * 0.002)
    sizes = np.arange(0, 13)
    contexts = sizes * 37
    array = TABLE.decode_iteration_time(sizes, contexts)
    scalars = [TABLE.decode_iteration_time(int(a), int(c)) for a, c in zip(sizes, contexts, strict=True)]
    np.testing.assert_allclose(array, scalars, rtol=1e-15)
    # Without a table the line holds, and linear() drops the table.
    line = replace(TABLE, decode_by_batch=None)
    assert line.decode_iteration_time(3) == pytest.approx(0.03 + 3 * 0.002)
    assert TABLE.linear().decode_iteration_time(3) == pytest.approx(0.036)
    assert "decode_by_batch" not in ContextCostModel.coefficients()


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ((), "decode_by_batch needs 1"),
        ((0.01, 0.0), "decode_by_batch"),
        ((0.01, -0.02), "decode_by_batch"),
        ((0.01, float("nan")), "decode_by_batch"),
    ],
)
def test_bad_tables_are_refused(table, message) -> None:
    with pytest.raises(ValueError, match=message):
        replace(TABLE, decode_by_batch=table)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.floats(1e-4, 0.1), min_size=1, max_size=10),
    st.floats(0, 0.01),
    st.floats(0, 0.05),
    st.lists(st.tuples(st.integers(1, 14), st.integers(0, 6)), min_size=1, max_size=40),
    st.integers(0, 40),
)
def test_the_hull_bound_never_exceeds_any_set_of_iterations(
    table, per_client, base, iterations, floor
) -> None:
    """For iterations producing k_i counted tokens each, with e_i other clients in them, the
    bound on the counted tokens over at least ``floor`` iterations (``floor`` at most their
    number) is at most what the iterations take: the table is any positive function of the
    batch size, not always increasing."""
    model = ContextCostModel(0.01, 0.0, 0.0, base, per_client, 0.0, 100, tuple(table))
    counted = sum(k for k, _ in iterations)
    taken = sum(float(model.decode_iteration_time(k + extra)) for k, extra in iterations)
    bound = model.min_decode_time(counted, min(floor, len(iterations)))
    assert bound <= taken * (1 + 1e-12) + 1e-15
    # Every hull line lies below the table at every size.
    for alpha, beta in model.batch_hull():
        assert beta >= 0
        for k in range(1, len(table) + 5):
            assert alpha + beta * k <= float(model.decode_iteration_time(k)) * (1 + 1e-12) + 1e-15


def test_the_bound_is_tight_for_full_batches_on_a_convex_table() -> None:
    """A convex, increasing table run at its largest batch: the bound equals the time."""
    table = (0.010, 0.011, 0.0125, 0.0145)
    model = ContextCostModel(0.01, 0.0, 0.0, 0.009, 0.003, 0.0, 100, table)
    assert model.min_decode_time(4 * 25, 25) == pytest.approx(25 * table[-1])


def test_schedules_under_a_sawtooth_validate_and_respect_the_bounds() -> None:
    """A GSM8K-like batch on 8 clients under the sawtooth: every pair validates, and no
    makespan is below the strong bound (a 4-client iteration is faster than a 3-client one)."""
    rng = np.random.default_rng(3)
    work = Workload(
        rng.integers(20, 300, 60), rng.integers(5, 120, 60), arrival=np.sort(rng.uniform(0, 5, 60))
    )
    bounds = lower_bounds(work, TABLE, 8)
    for rp, ip in [
        ("fcfs", "prefill-first"),
        ("hybrid-oracle", "lagrangian"),
        ("sorted-preemptive-oracle", "threshold"),
    ]:
        schedule = simulate(work, TABLE, 8, rp, ip)
        assert not validate(schedule)
        assert schedule.makespan >= bounds.strong * (1 - 1e-9)


def test_the_fit_recovers_a_sawtooth_and_a_line_cannot() -> None:
    """Samples of the sawtooth with context and 1% noise: the table fit recovers every size
    within 2% and the context rate within 15%; on held-out contexts it beats a line."""
    rng = np.random.default_rng(0)
    batch = np.repeat(np.arange(1, 9), 30)
    context = batch * rng.integers(32, 700, batch.size)
    times = TABLE.decode_iteration_time(batch, context) * rng.normal(1, 0.01, batch.size)
    tokens = rng.integers(10, 1000, 60)
    prefill = TABLE.prefill_time(tokens, tokens * 40) * rng.normal(1, 0.01, 60)
    args = (tokens, tokens * 40, prefill, batch, context, times, 1000)
    table = ContextCostModel.fit(*args, batch_table=True)
    line = ContextCostModel.fit(*args)
    assert table.decode_by_batch is not None and len(table.decode_by_batch) == 8
    np.testing.assert_allclose(table.decode_by_batch, SAW, rtol=0.02)
    assert table.decode_per_context == pytest.approx(1e-6, rel=0.15)
    held_b = np.arange(1, 9)
    held_c = held_b * 900
    truth = TABLE.decode_iteration_time(held_b, held_c)

    def error(model: ContextCostModel) -> float:
        return float(np.mean(np.abs(model.decode_iteration_time(held_b, held_c) / truth - 1)))

    assert error(table) < 0.02 < error(line)


def test_a_table_fit_needs_every_batch_size() -> None:
    with pytest.raises(ValueError, match=r"every batch size from 1 to 4; none measured at \[3\]"):
        ContextCostModel.fit(
            [10, 20], [100, 400], [0.1, 0.2], [1, 2, 4], [10, 20, 40], [0.1, 0.2, 0.3], 100, batch_table=True
        )


def test_a_profile_of_every_batch_holds_out_contexts_only() -> None:
    """Every batch size is fitted; held-out decode points share no context with fitted ones
    when every slot holds one context; prefill still holds out totals and lengths."""
    plan = plan_profile(6, 600, (20, 200), (20, 500), every_batch=True, mixed=0)
    assert {len(p) for p in plan.fit_decode} == set(range(1, 7))
    assert {len(p) for p in plan.held_decode} == set(range(1, 7))
    fitted = {c for p in plan.fit_decode for c in p}
    held = {c for p in plan.held_decode for c in p}
    assert fitted and held and not fitted & held
    assert plan.decode_batches == (tuple(range(1, 7)), ())
    assert plan.prefill_totals[1] and not set(plan.prefill_totals[0]) & set(plan.prefill_totals[1])


def test_config_takes_a_table_and_exegpt_refuses_one() -> None:
    table = {"kind": "context", **{k: getattr(TABLE, k) for k in ContextCostModel.coefficients()}}
    model = cost_model({**table, "decode_by_batch": list(SAW)})
    assert model == replace(TABLE, prefill_capacity=5000)
    with pytest.raises(ValueError, match=r"decode_by_batch\[1\]"):
        cost_model({**table, "decode_by_batch": [0.01, -1.0]})
    from llmsched.exegpt import XSimulator

    with pytest.raises(ValueError, match="batch table"):
        XSimulator.one_engine(replace(TABLE, prefill_per_square=0.0), "S")
