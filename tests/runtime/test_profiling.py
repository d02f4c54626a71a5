"""The profiler, the cost fits, held-out points, and measured rows of a schedule."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from llmsched import ContextCostModel, LinearCostModel, Workload, simulate  # noqa: E402
from llmsched.runtime import Engine, fit_cost, profile, stage_errors  # noqa: E402
from llmsched.runtime.profiling import (  # noqa: E402
    COLUMNS,
    decode_mixes,
    plan_profile,
    predict,
    prefill_mixes,
    schedule_stage_times,
)
from tests.strategies import per_iteration_twin  # noqa: E402

SMALL_COST = LinearCostModel(1.0, 0.1, 0.5, 0.25, prefill_capacity=100)
KNOWN = ContextCostModel(2e-3, 1e-5, 4e-8, 1.5e-3, 2e-4, 3e-6, 96)


def test_profile_rows_carry_sizes_squares_and_contexts(engine: Engine) -> None:
    """One row per measurement: a prefill stage's tokens and squared prompt lengths, a
    decode iteration's batch and the context it reads, which grows one token per slot and
    iteration from the given contexts (after the warm-up iteration)."""
    rows = profile(engine, [(8, 8, 3), (19,)], [(10, 20), (5,)], repeats=3, rounds=2, warmup=1)
    assert tuple(rows.columns) == COLUMNS and (rows.seconds > 0).all()
    pre = rows[rows.kind == "prefill"]
    assert len(pre) == 2 * 2 * 3
    assert sorted(set(zip(pre["size"], pre["squares"], strict=True))) == [(19, 137), (19, 361)]
    assert (pre["context"] == 0).all()
    dec = rows[rows.kind == "decode"]
    assert (dec["squares"] == 0).all()
    pair = dec[dec.point == 0]
    assert (pair["size"] == 2).all()
    # Each visit: the slots at 10 and 20, one warm-up iteration, then 3 timed ones.
    assert pair["context"].tolist() == [32, 34, 36] * 2
    assert dec[dec.point == 1]["context"].tolist() == [6, 7, 8] * 2


def test_a_fit_recovers_known_coefficients() -> None:
    """Rows timed by a known context-aware model give back its coefficients; the linear
    fit of the same rows cannot see context and misses them by far more."""
    plan = plan_profile(8, 96, (4, 40), (4, 120), count=4)
    pre = [("prefill", i, sum(s), sum(n * n for n in s), 0) for i, s in enumerate(plan.fit_prefill)]
    dec = [("decode", i, len(c), 0, sum(c)) for i, c in enumerate(plan.fit_decode)]
    import pandas as pd

    rows = pd.DataFrame([(*r, 1.0) for r in pre + dec], columns=list(COLUMNS))
    rows["seconds"] = predict(KNOWN, rows)
    fitted = fit_cost(rows, 96)
    assert isinstance(fitted, ContextCostModel)
    for name in ("prefill_base", "prefill_per_token", "prefill_per_square"):
        assert getattr(fitted, name) == pytest.approx(getattr(KNOWN, name), rel=1e-6), name
    for name in ("decode_base", "decode_per_client", "decode_per_context"):
        assert getattr(fitted, name) == pytest.approx(getattr(KNOWN, name), rel=1e-6), name
    assert stage_errors(fitted, rows)["mape"] == pytest.approx(0.0, abs=1e-9)
    linear = fit_cost(rows, 96, context=False)
    assert isinstance(linear, LinearCostModel) and linear.prefill_capacity == 96
    assert stage_errors(linear, rows)["decode_mape"] > 0.05
    # A stray slow run (the machine busy elsewhere) barely moves the robust fit.
    noisy = rows.copy()
    noisy.loc[len(noisy) - 1, "seconds"] *= 3
    robust = fit_cost(noisy, 96, points=None)
    assert robust.decode_per_context == pytest.approx(KNOWN.decode_per_context, rel=0.02)
    # Three repeats a point, one of them slow: the median drops it, the mean keeps a third.
    repeated = pd.concat([rows, rows, noisy], ignore_index=True)
    by_median = fit_cost(repeated, 96, points="median", robust=False)
    assert by_median.decode_per_context == pytest.approx(KNOWN.decode_per_context, rel=1e-6)
    by_mean = fit_cost(repeated, 96, points="mean", robust=False)
    assert stage_errors(by_mean, rows)["decode_mape"] > 1e-4


def test_held_out_points_share_no_size_or_context_with_fitted_ones() -> None:
    """Held-out prefill totals and prompt lengths, decode batch sizes and per-slot
    contexts are all disjoint from the fitted ones, and inside the fitted ranges."""
    plan = plan_profile(16, 1024, (24, 164), (24, 675), count=5)
    for fitted, held in (plan.prefill_totals, plan.prompt_lengths, plan.decode_batches, plan.contexts):
        assert held and not set(fitted) & set(held)
        assert min(fitted) < min(held) and max(held) < max(fitted)
    fit_batches = {len(p) for p in plan.fit_decode}
    held_batches = {len(p) for p in plan.held_decode}
    assert held_batches == set(plan.decode_batches[1]) and not fit_batches & held_batches
    assert {c for p in plan.held_decode for c in p} <= set(plan.contexts[1])
    assert {c for p in plan.fit_decode for c in p} <= set(plan.contexts[0])
    assert {sum(p) for p in plan.held_prefill} <= set(plan.prefill_totals[1])
    # Mixed contexts: some iterations hold slots at different contexts.
    assert any(len(set(p)) > 1 for p in plan.fit_decode)
    # The same total in prompts of different lengths: squares vary apart from tokens.
    by_total: dict[int, set[int]] = {}
    for stage in plan.fit_prefill:
        by_total.setdefault(sum(stage), set()).add(sum(n * n for n in stage))
    assert max(len(s) for s in by_total.values()) >= 3
    assert plan.held_out()["contexts"] == list(plan.contexts[1])


def test_mixes() -> None:
    """Prefill mixes split each total into prompts of each length (the remainder last),
    leaving out those that need too many slots or too long a prompt; decode mixes hold
    every batch at every context and mixed ones."""
    assert prefill_mixes([10], [3, 10, 20], slots=4, longest=10) == [(3, 3, 3, 1), (10,)]
    assert prefill_mixes([10], [2], slots=4, longest=10) == []
    points = decode_mixes([1, 3], [5, 9], mixed=2, seed=1)
    assert points[:2] == [(5,), (9,)] and points[2:4] == [(5, 5, 5), (9, 9, 9)]
    assert len(points) == 6 and all(set(p) <= {5, 9} for p in points)


def test_bad_input_is_refused(engine: Engine) -> None:
    """Points that need more slots or cache than the engine has, nonsense counts and rows
    without the needed columns are refused with a clear message."""
    with pytest.raises(ValueError, match=r"needs 1\.\.3 slots"):
        profile(engine, [(4, 4, 4, 4)], [])
    with pytest.raises(ValueError, match="needs 131 cache positions"):
        profile(engine, [], [(125,)], repeats=4, warmup=1)
    with pytest.raises(ValueError, match=">= 1"):
        profile(engine, [(0, 3)], [])
    with pytest.raises(ValueError, match="repeats must be at least 1"):
        profile(engine, [(3,)], [], repeats=0)
    with pytest.raises(ValueError, match=r"lack the columns \['context', 'squares'\]"):
        rows = profile(engine, [(3,), (5,)], [(3,), (3, 3)], repeats=1, rounds=1)
        fit_cost(rows[["kind", "size", "seconds"]], 8)
    with pytest.raises(ValueError, match="two token counts"):
        fit_cost(profile(engine, [(3,)], [(3,), (3, 3)], repeats=1, rounds=1), 8)
    with pytest.raises(ValueError, match="points must be one of"):
        fit_cost(profile(engine, [(3,), (5,)], [(3,), (3, 3)], repeats=1, rounds=1), 8, points="mode")
    with pytest.raises(ValueError, match="need 1 <= low <= high"):
        plan_profile(4, 64, (10, 5), (10, 20))
    with pytest.raises(ValueError, match="occupy needs one length per slot"):
        engine.occupy([0, 1], [5])


def test_schedule_rows_carry_squares_and_context() -> None:
    """A schedule's rows: prefill stages with their squares, decode pieces with the context
    at their first iteration, which equals the sum over decoding requests of prompt plus
    tokens decoded so far, counted out by hand."""
    wl = Workload([10, 20, 30], [2, 1, 3])
    schedule = simulate(wl, SMALL_COST, 2)
    rows = schedule_stage_times(schedule)
    assert tuple(rows.columns) == COLUMNS
    assert rows["kind"].tolist() == ["prefill", "prefill", "decode", "decode", "decode"]
    assert rows["size"].tolist() == [30, 30, 2, 2, 1]
    assert rows["squares"].tolist() == [500, 900, 0, 0, 0]
    assert rows["seconds"].tolist() == [4.0, 4.0, 1.0, 1.0, 0.75]
    g = np.arange(schedule.num_iterations)
    by_hand = [
        sum(
            int(wl.prompt_tokens[r]) + int(i - schedule.request_decode_start[r])
            for r in range(len(wl))
            if schedule.request_decode_start[r] <= i < schedule.request_decode_end[r]
        )
        for i in g
    ]
    assert schedule.context_at(g).tolist() == by_hand
    measured = schedule_stage_times(per_iteration_twin(schedule))
    decode = measured[measured["kind"] == "decode"]
    assert decode["size"].tolist() == [2, 2, 1, 1]
    assert decode["context"].tolist() == by_hand
    np.testing.assert_allclose(decode["seconds"], [1.0, 1.0, 0.75, 0.75])
    # A context-aware model prices the context; the linear one does not.
    aware = ContextCostModel.from_linear(SMALL_COST, decode_per_context=0.01)
    np.testing.assert_allclose(
        predict(aware, decode) - predict(SMALL_COST, decode), 0.01 * np.array(by_hand, dtype=float)
    )


def test_a_reference_takes_the_machine_s_drift_out_of_the_profile(model, monkeypatch) -> None:
    """With a reference taken after every visit, each visit's times are divided by the median
    of the five references nearest it over the median of all: on a clock where every stage
    takes 1 ms, a machine that runs at half speed for the second half of the visits (its
    references twice as long) leaves the first visits at 1 ms and the last at 1 ms x the
    median over 2; a steady reference changes nothing."""
    engine = Engine(model, 2, 64)
    ticks = iter(np.arange(1, 1_000_000) * 1e-3)
    monkeypatch.setattr(engine, "clock", lambda: float(next(ticks)))
    prefill, decode = [[3, 4], [8], [2, 2]], [[5, 9], [12]]
    steady = profile(engine, prefill, decode, repeats=2, rounds=4, reference=lambda: 1.0)
    assert np.allclose(steady["seconds"], 1e-3) and steady.attrs["reference_s"] == [1.0] * 20
    calls: list[int] = []

    def slowing() -> float:
        calls.append(1)
        return 1.0 if len(calls) <= 10 else 2.0

    rows = profile(engine, prefill, decode, repeats=2, rounds=4, reference=slowing)
    assert rows.attrs["reference_s"] == [1.0] * 10 + [2.0] * 10
    middle = 1.5  # the median of ten 1s and ten 2s
    assert sorted(set(np.round(rows["seconds"] / 1e-3, 9))) == pytest.approx(
        sorted({1 / (1 / middle), 1 / (2 / middle)})
    )
    assert "reference_s" not in profile(engine, prefill, decode, repeats=2, rounds=1).attrs
