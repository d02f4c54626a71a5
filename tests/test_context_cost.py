"""Context-aware cost models: the linear special case, exact sums behind the bounds, the robust
fit, the MIP's conservative levels, and the validator's context rules."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsched import ContextCostModel, LinearCostModel, Workload, lower_bounds, simulate, validate
from llmsched.core.cost import cost_model_error, is_context_aware, request_context
from llmsched.core.schedule import PREFILL
from llmsched.online import iteration_policy_names, request_policy_names
from tests.strategies import predicted_instances

CONTEXT = ContextCostModel(0.004, 6e-5, 2e-8, 0.003, 2e-4, 1.5e-6, 1000)


@st.composite
def linear_models(draw: st.DrawFn) -> LinearCostModel:
    return LinearCostModel(
        prefill_base=max(draw(st.floats(0, 0.1)), 1e-4),
        prefill_per_token=draw(st.floats(0, 1e-3)),
        decode_base=max(draw(st.floats(0, 0.05)), 1e-4),
        decode_per_client=draw(st.floats(0, 1e-3)),
        prefill_capacity=draw(st.integers(300, 600)),
    )


@settings(max_examples=40)
@given(
    predicted_instances(),
    linear_models(),
    st.sampled_from(request_policy_names()),
    st.sampled_from(iteration_policy_names()),
)
def test_without_context_terms_every_policy_gives_the_linear_schedule(
    instance, linear, request_policy, iteration_policy
) -> None:
    """c_p = c_d = 0: the context paths (squares, context, growing runs) give the linear
    model's schedule bit for bit, for every registered policy pair."""
    workload, _, clients = instance
    zero = ContextCostModel.from_linear(linear)
    assert is_context_aware(zero) and not is_context_aware(linear)
    a = simulate(workload, linear, clients, request_policy, iteration_policy)
    b = simulate(workload, zero, clients, request_policy, iteration_policy)
    assert a.makespan == b.makespan
    for name in ("stage_start", "stage_end", "run_iteration_time", "request_client", "request_decode_start"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


@settings(max_examples=60)
@given(predicted_instances(), st.floats(0, 1e-5), st.floats(0, 1e-4), st.sampled_from(request_policy_names()))
def test_stage_totals_equal_the_exact_sums_the_bounds_use(
    instance, per_square, per_context, request_policy
) -> None:
    """Total prefill time is a_p #stages + b_p sum N^p + c_p sum (N^p)^2 and total decode time
    a_d #iterations + b_d sum N^d + c_d sum request_context, whatever the schedule: the proof
    of the bounds in llmsched.engines.competition.bounds, checked on real schedules; and no makespan
    beats them."""
    workload, _, clients = instance
    cost = ContextCostModel(0.01, 1e-4, per_square, 0.005, 2e-4, per_context, 300)
    workload = workload.replace(prompt_tokens=np.minimum(workload.prompt_tokens, 300))
    s = simulate(workload, cost, clients, request_policy)
    assert validate(s) == []
    prompt, out = workload.prompt_tokens, workload.output_tokens
    stages = int(np.count_nonzero(s.stage_kind == PREFILL))
    prefill = cost.min_prefill_time(int(prompt.sum()), stages, int((prompt**2).sum()))
    decode = cost.min_decode_time(int(out.sum()), s.num_iterations, int(request_context(prompt, out).sum()))
    assert s.prefill_time_total == pytest.approx(prefill, rel=1e-9, abs=1e-12)
    assert s.decode_time_total == pytest.approx(decode, rel=1e-9, abs=1e-12)
    work = s.stage_work()
    assert int(work["context_tokens"].sum()) == int(request_context(prompt, out).sum())
    assert int(work["prompt_squares"].sum()) == int((prompt**2).sum())
    bound = lower_bounds(workload, cost, clients)
    assert s.makespan >= bound.strong - 1e-9 * max(1.0, s.makespan)


def test_runs_lengthen_by_the_context_they_add() -> None:
    """One request alone: iteration j lasts a_d + b_d + c_d (p + j); the run is one arithmetic
    series, and the stage table prices the stage exactly."""
    s = simulate(Workload([100], [50]), CONTEXT, 1)
    assert s.num_runs == 1
    assert s.run_iteration_step.tolist() == [pytest.approx(CONTEXT.decode_per_context)]
    j = np.arange(50)
    expected = CONTEXT.decode_iteration_time(1, 100 + j)
    np.testing.assert_allclose(s.iteration_time, expected, rtol=1e-12)
    assert s.context_at(j).tolist() == (100 + j).tolist()
    frame = s.stage_frame()
    decode = frame[frame.kind == "decode"].iloc[0]
    assert decode.context_tokens == int(request_context(100, 50))
    priced = (
        CONTEXT.decode_base * decode.iterations
        + CONTEXT.decode_per_client * decode.decoded_tokens
        + CONTEXT.decode_per_context * decode.context_tokens
    )
    assert decode.duration == pytest.approx(priced, rel=1e-12)
    prefill = frame[frame.kind == "prefill"].iloc[0]
    assert prefill.prompt_squares == 100**2
    assert prefill.duration == pytest.approx(CONTEXT.prefill_time(100, 100**2), rel=1e-12)


def test_an_arrival_cuts_a_growing_run_at_the_first_iteration_end_after_it() -> None:
    """The closed-form cut solves the quadratic: the second request is prefilled right after
    the first iteration end at or after its arrival, never later, never before it."""
    workload = Workload([100, 10], [400, 5], arrival=[0.0, 0.2])
    s = simulate(workload, CONTEXT, 2)
    assert validate(s) == []
    second = s.stage_start[s.request_prefill_stage[1]]
    ends = s.iteration_end
    assert second >= 0.2
    before = ends[ends < second]
    assert before.size and before[-1] < 0.2 <= second
    assert second in ends


def test_the_view_and_the_lagrangian_see_the_context() -> None:
    """The iteration time a policy sees includes the context of the decoding requests."""
    seen: list[float] = []

    class Probe:
        def start(self, known, cost, clients) -> None:
            pass

        def decide(self, engine) -> int:
            seen.append(engine.iteration_time - engine.cost.decode_iteration_time(engine.active))
            return 5

    simulate(Workload([100, 100, 100], [40, 40, 40], arrival=[0, 0, 0.05]), CONTEXT, 3, "fcfs", Probe())
    assert seen and all(extra > 0 for extra in seen)


def test_the_fit_recovers_context_terms_and_resists_stray_slow_runs() -> None:
    """Samples from a known model with 1% noise and a few runs three times slower: the robust
    fit lands within 3% on held-out points; plain least squares does worse."""
    rng = np.random.default_rng(0)
    batch = rng.integers(1, 17, 240)
    context = batch * rng.integers(32, 1000, 240)
    times = CONTEXT.decode_iteration_time(batch, context) * rng.normal(1, 0.01, 240)
    times[:12] *= 3
    tokens = rng.integers(10, 1000, 120)
    squares = tokens * rng.integers(10, 200, 120)
    prefill = CONTEXT.prefill_time(tokens, squares) * rng.normal(1, 0.01, 120)
    prefill[:6] *= 3
    robust = ContextCostModel.fit(tokens, squares, prefill, batch, context, times, 1000)
    plain = ContextCostModel.fit(tokens, squares, prefill, batch, context, times, 1000, robust=False)
    held_b = np.array([3, 7, 11, 15])
    held_c = held_b * np.array([700, 60, 900, 400])
    held_t = np.array([30, 300, 700, 950])
    held_s = held_t * np.array([30, 100, 180, 20])
    truth = {
        "prefill_times": CONTEXT.prefill_time(held_t, held_s),
        "decode_times": CONTEXT.decode_iteration_time(held_b, held_c),
    }

    def error(model: ContextCostModel) -> float:
        e = cost_model_error(
            model,
            held_t,
            truth["prefill_times"],
            held_b,
            truth["decode_times"],
            prefill_squares=held_s,
            decode_context=held_c,
        )
        return max(e["prefill_mape"], e["decode_mape"])

    assert error(robust) < 0.03
    assert error(robust) < error(plain)
    assert robust.decode_per_context == pytest.approx(CONTEXT.decode_per_context, rel=0.05)
    # The linear model scored on the same points cannot see context.
    assert (
        error(robust)
        < cost_model_error(robust.linear(), held_t, truth["prefill_times"], held_b, truth["decode_times"])[
            "decode_mape"
        ]
    )


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"decode_per_context": -1e-6}, ValueError, "decode_per_context"),
        ({"prefill_per_square": float("nan")}, ValueError, "prefill_per_square"),
        ({"prefill_capacity": 0}, ValueError, "prefill_capacity"),
        ({"decode_base": 0.0, "decode_per_client": 0.0}, ValueError, "a decode iteration must take"),
    ],
)
def test_bad_coefficients_are_refused(kwargs, error, message) -> None:
    """Each coefficient is checked: finite and >= 0, a decode iteration never free."""
    with pytest.raises(error, match=message):
        replace(CONTEXT, **kwargs)


def test_fit_needs_two_sizes_of_each_kind() -> None:
    """One batch size cannot separate a_d from b_d: refused by name."""
    with pytest.raises(ValueError, match="decode_active: need samples at two or more distinct sizes"):
        ContextCostModel.fit([10, 20], [100, 400], [0.1, 0.2], [4, 4], [100, 200], [0.1, 0.2], 100)
    with pytest.raises(ValueError, match="decode_context has 1 samples but decode_times has 2"):
        ContextCostModel.fit([10, 20], [100, 400], [0.1, 0.2], [2, 4], [100], [0.1, 0.2], 100)


def test_levels_for_the_mip_are_never_faster_than_the_model() -> None:
    """to_levels charges each level as one prompt (the most squares its tokens can have) and
    every decode iteration as a full batch at the stated context: no stage the model prices
    with at most that context is slower than the MIP assumes."""
    levels = CONTEXT.to_levels(clients=8, levels=4, context=600)
    for level in levels.levels:
        mixes = [level.capacity * level.capacity, level.capacity * 10]
        assert all(CONTEXT.prefill_time(level.capacity, sq) <= level.time + 1e-15 for sq in mixes)
    assert levels.decode_token_time == pytest.approx(CONTEXT.decode_iteration_time(8, 8 * 600))
    assert CONTEXT.decode_iteration_time(5, 5 * 400) <= levels.decode_token_time


def test_the_validator_checks_context_rules_one_at_a_time() -> None:
    """A schedule simulated under the context model validates; judged by the same model
    without context, by a model with another c_d, or with its growth removed, it does not,
    and each message says which iterations and what the model expected."""
    workload = Workload([120, 40, 300], [30, 60, 20], arrival=[0.0, 0.0, 0.1])
    s = simulate(workload, CONTEXT, 2)
    assert validate(s) == []
    blind = validate(replace(s, cost=CONTEXT.linear()))
    assert blind and {v.rule for v in blind} == {"stage_time"}
    steeper = validate(replace(s, cost=replace(CONTEXT, decode_per_context=3e-6)))
    assert any("context tokens" in v.message for v in steeper)
    # Without growth the runs end early: the stage ends no longer match, nor the makespan.
    flat = validate(replace(s, run_iteration_step=np.zeros(s.num_runs)))
    assert {v.rule for v in flat} <= {"stage_time", "makespan"}
    assert any("lengthen by 0s an iteration" in v.message for v in flat)
    squares = validate(replace(s, cost=replace(CONTEXT, prefill_per_square=1e-6)))
    assert any("squares summing to" in v.message for v in squares)


def test_token_counts_near_the_limit_keep_exact_sums() -> None:
    """Prompts and outputs of 2**31 - 1 tokens: the bounds, the validator and the stage table
    add squares and contexts past int64's range exactly (Python ints where needed)."""
    m = 2**31 - 1
    cost = ContextCostModel(1e-3, 1e-9, 1e-18, 1e-3, 1e-4, 1e-12, prefill_capacity=m)
    workload = Workload([m, m], [m, m])
    s = simulate(workload, cost, 2)
    assert validate(s) == []
    context = s.stage_work()["context_tokens"]
    assert sum(int(c) for c in context) == 2 * int(request_context(m, m))
    bound = lower_bounds(workload, cost, 2)
    assert 0 < bound.strong <= s.makespan * (1 + 1e-12)
    with pytest.raises(ValueError, match="prefill_capacity"):
        replace(cost, prefill_capacity=2**33)


def test_a_tiny_context_rate_cuts_runs_at_once() -> None:
    """c_d far below an iteration's time: the arrival cut is solved in closed form (no walk
    over iterations), and the late request is prefilled at the first iteration end after it."""
    workload = Workload([10, 10], [10**9, 1], arrival=[0.0, 5e5])
    s = simulate(workload, ContextCostModel(0.01, 1e-5, 0.0, 0.005, 0.005, 1e-30, 100), 2)
    assert validate(s) == []
    start = s.stage_start[s.request_prefill_stage[1]]
    assert 5e5 <= start < 5e5 + 0.011
