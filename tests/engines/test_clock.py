"""The executor protocol and the cost-model clock: closed-form decode runs, cuts at arrivals,
prefill stages and mixed iterations priced as the cost model says, checked times."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmsched import ContextCostModel, LinearCostModel, Workload
from llmsched.engines.clock import CostClock, Executor, admits, iteration_times
from llmsched.engines.fusion.iteration import fused_iteration_time
from tests.strategies import cost_models

LINEAR = LinearCostModel(1.0, 0.1, 0.5, 0.25, prefill_capacity=100)
CONTEXT = ContextCostModel(0.004, 6e-5, 2e-8, 0.003, 2e-4, 1.5e-6, 1000)


def _clock(cost=LINEAR, prompts=(5, 7, 9)) -> CostClock:
    clock = CostClock()
    clock.start(Workload(list(prompts), [1] * len(prompts)), cost, len(prompts))
    return clock


def test_the_clock_is_an_executor() -> None:
    """CostClock has every method of the Executor protocol, mixed iterations included."""
    assert isinstance(CostClock(), Executor)
    assert CostClock.measured is False and CostClock().info() == {}


def test_admits_within_a_few_ulps() -> None:
    """An arrival a rounding error after now counts as arrived; one a microsecond later does not."""
    assert admits(1.0, 1.0) and admits(1.0, 1.0 + 2 * math.ulp(1.0))
    assert not admits(1.0, 1.000001) and admits(2.0, 1.0)


def test_iteration_times_are_the_cost_models_and_checked() -> None:
    """iteration_times lists decode_iteration_time(0..J) and refuses a time that is not >= 0."""
    assert iteration_times(LINEAR, 3) == [0.5, 0.75, 1.0, 1.25]

    class Negative(LinearCostModel):
        def decode_iteration_time(self, active, context=0):
            return np.where(np.asarray(active) == 2, -1.0, 0.5)

    with pytest.raises(ValueError, match=r"decode_iteration_time\(2\) = -1.0"):
        iteration_times(Negative(1.0, 0.1, 0.5, 0.25, prefill_capacity=100), 3)


def test_a_decode_run_is_one_step_of_arithmetic() -> None:
    """k iterations of tau seconds end at start + k tau, reported as one run."""
    clock = _clock()
    assert clock.prefill([(0, 0)], 5) == (0.0, 1.5)
    runs = clock.decode({0: 0, 1: 1}, 10, math.inf, 0)
    assert runs == [(1.5, 10, 1.0, 0.0)] and clock.now() == 11.5


@given(st.floats(0.0, 40.0, allow_nan=False), st.integers(1, 50))
def test_a_decode_run_stops_at_the_first_iteration_end_that_admits_an_arrival(due, most) -> None:
    """With an arrival due, the run ends at the first iteration end at or after it (or after
    ``most`` iterations), never one iteration late."""
    clock = _clock()
    clock.wait_until(1.0)
    ((start, count, tau, _),) = clock.decode({0: 0}, most, due, 0)
    assert 1 <= count <= most and start == 1.0 and tau == 0.75
    if count < most:
        assert admits(start + tau * count, due)
    if count > 1:
        assert not admits(start + tau * (count - 1), due)


@given(st.integers(1, 60), st.integers(0, 5_000), st.floats(0.0, 30.0, allow_nan=False))
def test_a_context_aware_run_grows_by_the_context(iterations, context, due) -> None:
    """Under a context-aware model iteration i lasts tau + c_d (context + active i); the run
    reports its first time and step, stops at the first end admitting ``due``, and the clock
    ends where the sum of its iterations ends."""
    clock = _clock(CONTEXT)
    running = {0: 0, 1: 1}
    ((start, count, first, step),) = clock.decode(running, iterations, due, context)
    per = CONTEXT.decode_iteration_time(2, context) - CONTEXT.decode_iteration_time(2, 0)
    assert first == pytest.approx(CONTEXT.decode_iteration_time(2, context), rel=1e-12)
    assert first == pytest.approx(CONTEXT.decode_iteration_time(2, 0) + per, rel=1e-12)
    assert step == pytest.approx(CONTEXT.decode_per_context * 2, rel=1e-12)
    ends = start + np.cumsum([first + step * i for i in range(count)])
    assert clock.now() == pytest.approx(ends[-1], rel=1e-12)
    if count < iterations:
        assert ends[-1] >= due * (1 - 1e-12)
    if count > 1:
        assert ends[-2] < due * (1 + 1e-12) + 1e-12


def test_a_prefill_prices_the_squares_of_its_prompts_under_a_context_aware_model() -> None:
    """A prefill stage of prompts 5 and 9 costs prefill_time(14, 5^2 + 9^2)."""
    clock = _clock(CONTEXT)
    start, end = clock.prefill([(0, 0), (2, 1)], 14)
    assert start == 0.0 and end == CONTEXT.prefill_time(14, 25 + 81)


@pytest.mark.parametrize("cost", [LINEAR, CONTEXT])
@pytest.mark.parametrize(
    ("running", "tokens", "squares"), [({}, 7, 49), ({0: 0}, 0, 0), ({0: 0, 1: 1}, 3, 27)]
)
def test_a_mixed_iteration_is_priced_as_a_fused_iteration(cost, running, tokens, squares) -> None:
    """mixed runs one iteration of the decoding requests plus chunks, priced by
    fused_iteration_time, and reports it as a one-iteration run that starts now."""
    clock = _clock(cost)
    clock.wait_until(2.0)
    chunks = [(2, 2, 3, tokens)] if tokens else []
    start, count, seconds, step = clock.mixed(running, chunks, tokens, squares, 40)
    assert (start, count) == (2.0, 1)
    assert seconds == fused_iteration_time(cost, len(running), 40, tokens, squares)
    assert step == getattr(cost, "decode_per_context", 0.0) * len(running)
    assert clock.now() == 2.0 + seconds


@given(
    cost=cost_models(), active=st.integers(0, 40), context=st.integers(0, 10**6), tokens=st.integers(0, 300)
)
def test_a_mixed_iteration_costs_exactly_what_fused_iteration_time_says(
    cost, active, context, tokens
) -> None:
    """The clock sums a linear or context model's terms itself (mixed_terms); every model,
    and every mix of decoding requests and chunk tokens, gets fused_iteration_time's float
    to the last bit."""
    if not hasattr(cost, "prefill_per_token"):  # a level model: fusion refuses it
        return
    squares = tokens * tokens
    clock = CostClock()
    clock.open(cost, 40, [])
    running = {client: client for client in range(active)}
    _, _, seconds, _ = clock.mixed(running, [], tokens, squares, context)
    assert seconds == float(fused_iteration_time(cost, active, context, tokens, squares))


def test_a_mixed_iteration_of_no_finite_time_is_refused() -> None:
    """A cost model whose fused iteration is NaN is reported with its class and the call."""

    class Broken(LinearCostModel):
        def prefill_time(self, tokens, squares=0):
            return math.nan if np.any(np.asarray(tokens) == 3) else super().prefill_time(tokens)

    cost = Broken(1.0, 0.1, 0.5, 0.25, prefill_capacity=100)
    clock = _clock(cost)
    with pytest.raises(
        ValueError, match=r"cost model Broken gave fused_iteration_time\(1, 40, 3, 27\) = nan"
    ):
        clock.mixed({0: 0}, [(2, 2, 3, 3)], 3, 27, 40)


def test_run_end_says_where_a_run_would_end() -> None:
    """run_end (what a fleet waits for) is where decode would end with no arrival due."""
    for cost in (LINEAR, CONTEXT):
        clock = _clock(cost)
        clock.wait_until(3.0)
        expected = clock.run_end(2, 17, 300)
        clock.decode({0: 0, 1: 1}, 17, math.inf, 300)
        assert clock.now() == expected
