"""TableCostModel: interpolation, its refusals, mixed iterations, the bounds through its hulls,
the fit to measurements and its held-out error, the TOML file, and every engine mode run on it."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsched import (
    DisaggregatedCluster,
    Engine,
    TableCostModel,
    Workload,
    disaggregated_lower_bounds,
    fused_lower_bounds,
    lower_bounds,
    preset,
    simulate,
    simulate_disaggregated,
    simulate_fleet,
    simulate_fusion,
    validate,
    validate_disaggregated,
    validate_fleet,
    validate_fused,
)
from llmsched.core.cost import BoundedCostModel, ContextAwareCostModel, is_context_aware
from llmsched.core.table import lower_hull
from llmsched.engines.fusion.iteration import chunk_squares, fused_iteration_time, mixed_terms

# Prefill 10 ms up to 100 tokens, 30 ms at 300, 90 ms at 500 (steeper past 300); decode 20 ms
# for one request, 18 ms for two (a CPU-like dip), 30 ms for four.
SMALL = TableCostModel((100, 300, 500), (0.010, 0.030, 0.090), (1, 2, 4), (0.020, 0.018, 0.030), 1e-6)


def test_a_table_is_read_on_straight_lines_between_its_knots() -> None:
    """Knots exactly; between them on the line; flat before the first; on at the last slope
    after the last, up to the limit; inf past it; arrays agree with scalars."""
    assert SMALL.prefill_time(300) == 0.030
    assert SMALL.prefill_time(200) == pytest.approx(0.020)
    assert SMALL.prefill_time(0) == SMALL.prefill_time(50) == 0.010
    assert SMALL.prefill_capacity == 500 and SMALL.max_batch == 4
    assert SMALL.prefill_time(501) == math.inf
    wider = replace(SMALL, prefill_capacity=1000, max_batch=8)
    assert wider.prefill_time(700) == pytest.approx(0.090 + 200 * 0.060 / 200)
    assert wider.prefill_time(1000) == pytest.approx(0.240) and wider.prefill_time(1001) == math.inf
    assert SMALL.decode_iteration_time(3) == pytest.approx(0.024)
    assert SMALL.decode_iteration_time(2, 1000) == pytest.approx(0.018 + 1e-3)
    assert SMALL.decode_iteration_time(0) == 0.020  # the loop asks for 0 active
    assert wider.decode_iteration_time(6) == pytest.approx(0.030 + 2 * 0.006)
    assert SMALL.decode_iteration_time(5) == math.inf
    tokens = np.arange(0, 1002, 7)
    np.testing.assert_allclose(wider.prefill_time(tokens), [wider.prefill_time(int(t)) for t in tokens])
    active = np.arange(0, 10)
    contexts = active * 11
    np.testing.assert_allclose(
        wider.decode_iteration_time(active, contexts),
        [wider.decode_iteration_time(int(a), int(c)) for a, c in zip(active, contexts, strict=True)],
    )


def test_past_its_end_a_falling_table_stays_flat() -> None:
    """A decode table whose last segment falls goes on flat past it (never faster)."""
    table = TableCostModel((1,), (0.01,), (1, 2), (0.03, 0.02), max_batch=4)
    assert table.decode_iteration_time(4) == 0.02
    assert table.prefill_time(1) == table.prefill_time(0) == 0.01  # one knot: flat


def test_it_meets_the_library_protocols() -> None:
    """Context-aware (c_d; squares of whole prompts accepted and unused) and bounded; hashable
    and equal by value; mixed_terms leaves it to fused_iteration_time."""
    assert isinstance(SMALL, ContextAwareCostModel) and isinstance(SMALL, BoundedCostModel)
    assert is_context_aware(SMALL) and SMALL.prefill_per_square == 0.0
    assert SMALL.prefill_time(300, 300**2) == SMALL.prefill_time(300, 3 * 100**2) == SMALL.prefill_time(300)
    assert hash(SMALL) == hash(replace(SMALL)) and replace(SMALL) == SMALL
    assert mixed_terms(SMALL) is None


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"prefill_tokens": (100, 100, 500)}, ValueError, "prefill_tokens must be strictly ascending"),
        ({"prefill_tokens": (0, 300, 500)}, ValueError, r"prefill_tokens\[0\] must be at least 1"),
        ({"prefill_tokens": (100.5, 300, 500)}, TypeError, r"prefill_tokens\[0\] must be an integer"),
        ({"prefill_times": (0.01, 0.03)}, ValueError, "differ in length"),
        ({"prefill_times": (0.01, 0.005, 0.09)}, ValueError, "must not decrease"),
        ({"decode_times": (0.02, 0.0, 0.03)}, ValueError, r"decode_times\[1\] is 0.0; values must be > 0"),
        ({"decode_times": (0.02, float("nan"), 0.03)}, ValueError, r"decode_times\[1\] is nan"),
        ({"decode_batch": ()}, ValueError, "decode_batch needs 1"),
        ({"decode_batch": "124"}, TypeError, "decode_batch must be a sequence"),
        ({"decode_per_context": -1e-9}, ValueError, "decode_per_context must be"),
        ({"prefill_capacity": 1001}, ValueError, "prefill_capacity may be at most 2 x the last prefill knot"),
        ({"prefill_capacity": 0}, ValueError, "prefill_capacity must be at least 1"),
        ({"max_batch": 9}, ValueError, "goes on at its last segment's slope"),
        ({"mixed_factor": 0.9}, ValueError, "mixed_factor must be"),
        ({"name": 3}, TypeError, "name must be a str"),
        ({"batched_tokens": (200,), "batched_times": (0.02,)}, ValueError, "need batched_prompt"),
        (
            {"batched_prompt": 100, "batched_tokens": (50, 200), "batched_times": (0.01, 0.02)},
            ValueError,
            "batched_tokens start at one prompt of batched_prompt = 100 tokens or more, got 50",
        ),
        (
            {"batched_prompt": 100, "batched_tokens": (100, 200), "batched_times": (0.02, 0.01)},
            ValueError,
            "batched_times must not decrease",
        ),
        (
            {"batched_prompt": 100, "batched_tokens": (100, 200), "batched_times": (0.02,)},
            ValueError,
            "batched_tokens and batched_times differ in length",
        ),
    ],
)
def test_bad_tables_are_refused_naming_the_field(kwargs, error, message) -> None:
    with pytest.raises(error, match=message):
        replace(SMALL, **kwargs)


def test_mixed_iterations_follow_the_table_rule_or_the_fused_rule() -> None:
    """With a factor: factor x the prefill table at the tokens, a decoding request counting one,
    plus c_d x context; without: decode + prefill - the shared fixed cost. Either way no chunk
    is the decode iteration and no decoding is the prefill stage; fused_iteration_time asks
    the table."""
    splitwise = replace(SMALL, mixed_factor=1.1)
    assert splitwise.mixed_iteration_time(2, 500, 198, 0) == pytest.approx(1.1 * 0.020 + 500e-6)
    assert splitwise.mixed_iteration_time(2, 500, 0, 0) == splitwise.decode_iteration_time(2, 500)
    assert splitwise.mixed_iteration_time(0, 0, 198, 0) == splitwise.prefill_time(198)
    fixed = min(0.010, 0.020)
    assert SMALL.mixed_iteration_time(2, 500, 200, 0) == pytest.approx(0.018 + 500e-6 + 0.020 - fixed)
    assert SMALL.mixed_iteration_time(1, 0, 300, 0) == pytest.approx(0.020 + 0.030 - 0.010)
    for model in (SMALL, splitwise):
        decoding = np.array([0, 0, 1, 2, 4, 3])
        context = decoding * 37
        chunks = np.array([0, 150, 0, 60, 250, 1])
        array = model.mixed_iteration_time(decoding, context, chunks, 0)
        scalars = [
            model.mixed_iteration_time(int(d), int(x), int(c), 0)
            for d, x, c in zip(decoding, context, chunks, strict=True)
        ]
        np.testing.assert_allclose(array, scalars)
        np.testing.assert_allclose(fused_iteration_time(model, decoding, context, chunks, 0), scalars)


def _table(xs, steps, bs, ds, c_d, stretch, factor, batched) -> TableCostModel:
    """A random table; ``batched`` (a prompt length, batch counts, time steps) or None."""
    length, counts, b_steps = batched if batched is not None else (None, [], [])
    counts = sorted(set(counts))
    b_tokens = [length * c for c in counts] if length else []
    last = max([*xs, *b_tokens])
    return TableCostModel(
        sorted(set(xs)),
        np.cumsum(steps[: len(set(xs))]).tolist(),
        sorted(set(bs)),
        ds[: len(set(bs))],
        c_d,
        prefill_capacity=max(1, int(last * stretch)),
        max_batch=max(1, int(max(bs) * stretch)),
        mixed_factor=factor,
        batched_prompt=length,
        batched_tokens=b_tokens,
        batched_times=np.cumsum(b_steps[: len(counts)]).tolist(),
    )


tables = st.builds(
    _table,
    st.lists(st.integers(1, 400), min_size=1, max_size=8),
    st.lists(st.floats(1e-4, 0.05), min_size=8, max_size=8),
    st.lists(st.integers(1, 12), min_size=1, max_size=6),
    st.lists(st.floats(1e-3, 0.05), min_size=6, max_size=6),
    st.one_of(st.just(0.0), st.floats(0, 1e-5)),
    st.floats(0.5, 2.0),
    st.one_of(st.none(), st.floats(1.0, 1.5)),
    st.one_of(
        st.none(),
        st.tuples(
            st.integers(1, 100),
            st.lists(st.integers(1, 8), min_size=1, max_size=5),
            st.lists(st.floats(1e-4, 0.05), min_size=5, max_size=5),
        ),
    ),
)


def stage_of(data, table: TableCostModel, most: int) -> tuple[list[int], int, int]:
    """A stage's prompts (their total at most ``most``, each at most twice the longest
    measured alone: a longer one is refused), tokens and squares."""
    longest = min(max(1, most // 4), 2 * table.prefill_tokens[-1])
    prompts = data.draw(st.lists(st.integers(1, longest), min_size=1, max_size=4))
    prompts = prompts if sum(prompts) <= most else [most]
    return prompts, sum(prompts), sum(p * p for p in prompts)


@settings(max_examples=200, deadline=None)
@given(tables, st.data())
def test_the_hull_lines_lie_below_both_tables(table: TableCostModel, data) -> None:
    """Every prefill line is below the prefill time at every token count up to the capacity;
    every batch line below the decode time at every batch size up to the largest; no slope is
    negative."""
    tokens = np.arange(0, table.prefill_capacity + 1)
    prefill = table.prefill_time(tokens)
    squares = np.array([data.draw(st.integers(t, max(t, t * t))) for t in tokens[:50].tolist()])
    stages = table.prefill_time(tokens[:50], squares)
    for alpha, beta in table.prefill_hull():
        assert beta >= 0 and np.all(alpha + beta * tokens <= prefill + 1e-12)
        assert np.all(alpha + beta * tokens[:50] <= stages + 1e-12)
    batches = np.arange(1, table.max_batch + 1)
    decode = table.decode_iteration_time(batches)
    for alpha, beta in table.batch_hull():
        assert beta >= 0 and np.all(alpha + beta * batches <= decode + 1e-12)


@settings(max_examples=200, deadline=None)
@given(tables, st.data())
def test_no_split_of_the_tokens_beats_min_prefill_time(table: TableCostModel, data) -> None:
    """For any stages of 1..capacity tokens, their total time is at least min_prefill_time of
    their tokens at their count (or fewer stages asked)."""
    stages = data.draw(st.lists(st.integers(1, table.prefill_capacity), min_size=1, max_size=30))
    total = sum(stages)
    spent = float(np.sum(table.prefill_time(np.array(stages))))
    asked = data.draw(st.integers(0, len(stages)))
    assert table.min_prefill_time(total, asked) <= spent * (1 + 1e-12) + 1e-15
    # Stages of several prompts, read by their squares, as well.
    batches = [stage_of(data, table, table.prefill_capacity) for _ in stages[:10]]
    spent = sum(float(table.prefill_time(tokens, squares)) for _, tokens, squares in batches)
    total = sum(tokens for _, tokens, _ in batches)
    assert table.min_prefill_time(total, min(asked, len(batches))) <= spent * (1 + 1e-12) + 1e-15


@settings(max_examples=200, deadline=None)
@given(tables, st.data())
def test_a_prompt_alone_is_prefilled_no_faster_than_in_a_stage_that_holds_it(table, data) -> None:
    """The single-request bounds rest on it: each prompt of a stage, priced alone (its tokens
    and its square), takes no longer than the stage."""
    prompts, tokens, squares = stage_of(data, table, table.prefill_capacity)
    stage = float(table.prefill_time(tokens, squares))
    for prompt in prompts:
        assert float(table.prefill_time(prompt, prompt * prompt)) <= stage * (1 + 1e-12)


@settings(max_examples=100, deadline=None)
@given(tables, st.integers(1, 300), st.integers(0, 40))
def test_min_prefill_time_is_the_least_of_the_hull_over_every_stage_count(table, total, asked) -> None:
    """The candidates tried are enough: the bound equals the least of s h(T / s) over every
    whole s in range, found by trying them all."""
    hull = table.prefill_hull()
    least = max(asked, -(-total // table.prefill_capacity))

    def perspective(s: int) -> float:
        return max(alpha * s + beta * total for alpha, beta in hull)

    brute = min(perspective(s) for s in range(least, max(least, total) + 1))
    assert table.min_prefill_time(total, asked) == pytest.approx(max(0.0, brute), rel=1e-12, abs=1e-15)


@settings(max_examples=200, deadline=None)
@given(tables, st.data())
def test_no_run_of_iterations_beats_min_decode_time(table: TableCostModel, data) -> None:
    """For any iterations of 1..max_batch requests reading any contexts, their total time is at
    least min_decode_time of their tokens, count (or fewer asked) and contexts."""
    batches = data.draw(st.lists(st.integers(1, table.max_batch), min_size=1, max_size=40))
    contexts = data.draw(st.lists(st.integers(0, 5000), min_size=len(batches), max_size=len(batches)))
    spent = float(np.sum(table.decode_iteration_time(np.array(batches), np.array(contexts))))
    asked = data.draw(st.integers(0, len(batches)))
    bound = table.min_decode_time(sum(batches), asked, sum(contexts))
    assert bound <= spent * (1 + 1e-12) + 1e-15


def test_the_lower_hull_drops_points_above_it() -> None:
    assert lower_hull([0, 1, 2, 3], [0, 2, 1, 3]) == [(0, 0), (2, 1), (3, 3)]


# ---------------------------------------------------------------- fitting
def synthetic_rows(table: TableCostModel, repeats: int = 3) -> dict[str, list[float]]:
    """Rows measured exactly on ``table`` (ms): prompts of several sizes at batch 1, and
    batches of 64-token prompts; outputs of several lengths."""
    rows: dict[str, list[float]] = {k: [] for k in ("p", "b", "o", "pt", "dt")}
    for prompt, batch, output in [
        *((p, 1, 32) for p in (50, 100, 200, 400)),
        *((64, b, 32) for b in (2, 4, 8)),
        *((64, 1, o) for o in (16, 64, 256)),
    ]:
        for _ in range(repeats):
            rows["p"].append(prompt)
            rows["b"].append(batch)
            rows["o"].append(output)
            rows["pt"].append(1e3 * table.prefill_time(prompt * batch, batch * prompt**2))
            context = batch * (prompt + output / 2)
            rows["dt"].append(1e3 * table.decode_iteration_time(batch, context))
    return rows


COLUMNS = {"prompt": "p", "batch": "b", "output": "o", "prefill_time": "pt", "decode_time": "dt"}
ROWS = synthetic_rows(replace(SMALL, prefill_capacity=1000, max_batch=8))


def test_a_fit_to_exact_measurements_gives_the_table_back() -> None:
    """Times measured on a table, with contexts varying within a batch size, are fitted back:
    the prefill knots at every batch's tokens, the decode knots and c_d."""
    truth = TableCostModel((50, 64, 100, 128, 200, 256, 400, 512), np.linspace(0.01, 0.08, 8), (1, 2, 4, 8),
                           (0.02, 0.021, 0.025, 0.03), 2e-6)  # fmt: skip
    fitted = TableCostModel.fit(synthetic_rows(truth), COLUMNS, "ms", prompt_count=False)
    assert fitted.batched_prompt is None and fitted.prefill_tokens == truth.prefill_tokens
    np.testing.assert_allclose(fitted.prefill_times, truth.prefill_times, rtol=1e-12)
    assert fitted.decode_batch == truth.decode_batch
    np.testing.assert_allclose(fitted.decode_times, truth.decode_times, rtol=1e-9)
    assert fitted.decode_per_context == pytest.approx(2e-6, rel=1e-9)
    # In seconds, from a DataFrame, the same.
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(synthetic_rows(truth))
    frame[["pt", "dt"]] /= 1e3
    again = TableCostModel.fit(frame, COLUMNS, "s", prompt_count=False)
    np.testing.assert_allclose(again.prefill_times, fitted.prefill_times, rtol=1e-12)


def test_keyed_by_the_prompt_count_the_fit_reads_every_measured_stage_back() -> None:
    """By default rows of single prompts make the prefill table and the batches of 64-token
    prompts the batched table; each measured stage, priced by its tokens and squares, is the
    time measured. By tokens alone, a batch and a single prompt of as many tokens share a knot."""
    truth = TableCostModel((50, 64, 100, 128, 200, 256, 400, 512), np.linspace(0.01, 0.08, 8), (1, 2, 4, 8),
                           (0.02, 0.021, 0.025, 0.03), 2e-6, batched_prompt=64,
                           batched_tokens=(64, 128, 256, 512),
                           batched_times=(0.02, 0.03, 0.045, 0.07))  # fmt: skip
    rows = synthetic_rows(truth)
    fitted = TableCostModel.fit(rows, COLUMNS, "ms")
    assert fitted.prefill_tokens == (50, 64, 100, 200, 400) and fitted.batched_prompt == 64
    assert fitted.batched_tokens == (64, 128, 256, 512)
    np.testing.assert_allclose(fitted.batched_times, truth.batched_times, rtol=1e-12)
    prompt, batch = np.array(rows["p"]), np.array(rows["b"])
    np.testing.assert_allclose(
        1e3 * fitted.prefill_time(prompt * batch, batch * prompt**2), rows["pt"], rtol=1e-12
    )
    assert TableCostModel.fit(rows, COLUMNS, "ms", prompt_count=True) == fitted
    # Two prompts of 100 tokens lie between one of 200 (prefill table) and three of 64 and
    # change (batched table), linearly in their squares; never below the prefill table at the
    # root of the squares (141 tokens, longer than either prompt).
    single, batched = float(truth.prefill_time(200)), float(np.interp(200, (128, 256), (0.03, 0.045)))
    weight = (200**2 - 2 * 100**2) / (200 * (200 - 64))
    between = single + weight * (batched - single)
    floor = float(truth.prefill_time(math.sqrt(2 * 100**2)))
    assert between < floor  # here the floor holds it
    assert truth.prefill_time(200, 2 * 100**2) == pytest.approx(floor)
    # Four prompts of 100: between the lines; eight of 50, shorter than 64, the batched table.
    single, batched = float(truth.prefill_time(400)), float(np.interp(400, (256, 512), (0.045, 0.07)))
    weight = (400**2 - 4 * 100**2) / (400 * (400 - 64))
    assert truth.prefill_time(400, 4 * 100**2) == pytest.approx(single + weight * (batched - single))
    assert truth.prefill_time(400, 8 * 50**2) == pytest.approx(batched)
    assert truth.prefill_time(400, 0) == single  # squares not known: one prompt
    # Capacity past twice the longest single prompt measured (1,024 here): one prompt longer
    # follows the batched table's shape from there, scaled to meet the prefill table.
    knots, times = (64, 128, 256, 512, 2048), (0.02, 0.03, 0.045, 0.07, 0.2)
    wide = replace(truth, batched_tokens=knots, batched_times=times, prefill_capacity=2048)
    edge = float(replace(truth, prefill_capacity=1024).prefill_time(1024))  # carried to twice its last knot
    at_edge = float(np.interp(1024, knots, times))
    assert wide.prefill_time(1024, 1024**2) == pytest.approx(edge)
    assert wide.prefill_time(2048, 2048**2) == pytest.approx(edge * 0.2 / at_edge)
    assert wide.prefill_time(1536, 0) == pytest.approx(edge * float(np.interp(1536, knots, times)) / at_edge)
    # held_out_error keys by tokens alone when the fitted rows hold no batch to key by.
    rows = {"p": [128, 256, 512, 512, 512, 1024] * 3, "b": [1, 1, 1, 2, 4, 1] * 3, "o": [32] * 18,
            "pt": np.linspace(50, 300, 18), "dt": [30.0] * 18}  # fmt: skip
    assert 0 <= TableCostModel.held_out_error(rows, COLUMNS, holdout=0.5, seed=15).prefill_mape < 1


def test_prompt_count_is_refused_where_the_rows_cannot_give_it() -> None:
    rows = ROWS
    two_lengths = {k: [*v, *v[-3:]] for k, v in rows.items()}
    two_lengths["p"][-3:] = [32, 32, 32]
    two_lengths["b"][-3:] = [2, 2, 2]
    with pytest.raises(ValueError, match=r"batch prompts of 2 lengths \(32, 64\)"):
        TableCostModel.fit(two_lengths, COLUMNS, prompt_count=True)
    assert TableCostModel.fit(two_lengths, COLUMNS).batched_prompt is None  # by tokens alone
    with pytest.raises(TypeError, match="prompt_count must be True, False or None"):
        TableCostModel.fit(rows, COLUMNS, prompt_count="yes")


def test_the_fit_makes_prefill_times_non_decreasing_and_never_takes_a_negative_slope() -> None:
    """Noise that makes a larger stage faster is pooled (weighted by rows); a context slope that
    would be negative is 0; without an output column the context is batch x prompt."""
    rows = {
        "prompt": [100, 100, 200, 200, 200, 400],
        "batch": [1, 1, 1, 1, 1, 1],
        "prefill_time": [12.0, 12.0, 9.0, 9.0, 9.0, 20.0],
        "decode_time": [30.0, 30.0, 29.0, 29.0, 29.0, 28.0],
    }
    roles = {"prompt": "prompt", "batch": "batch", "output": None}
    fitted = TableCostModel.fit(rows, {**roles, "prefill_time": "prefill_time", "decode_time": "decode_time"})
    assert fitted.prefill_tokens == (100, 200, 400)
    np.testing.assert_allclose(fitted.prefill_times, [0.0102, 0.0102, 0.020])  # (2 x 12 + 3 x 9) / 5 ms
    assert fitted.decode_per_context == 0.0 and fitted.decode_times == pytest.approx((0.029,))


@pytest.mark.parametrize(
    ("data", "columns", "unit", "error", "message"),
    [
        ({"p": [1]}, COLUMNS, "ms", ValueError, "data has no column 'b'"),
        (ROWS, COLUMNS, "min", ValueError, "time_unit must be one of"),
        (ROWS, {"prompts": "p"}, "ms", ValueError, "unknown role 'prompts'"),
        (ROWS, {**COLUMNS, "batch": None}, "ms", ValueError, "batch needs a column"),
        ({**ROWS, "b": [1.5] * 30}, COLUMNS, "ms", ValueError, "must hold whole numbers"),
        ({**ROWS, "dt": [0.0] * 30}, COLUMNS, "ms", ValueError, r"'dt' \(decode_time\)"),
        (42, COLUMNS, "ms", TypeError, "data must be a CSV path"),
    ],
)
def test_bad_measurements_are_refused_naming_the_column(data, columns, unit, error, message) -> None:
    with pytest.raises(error, match=message):
        TableCostModel.fit(data, columns, unit)


def test_a_csv_is_read_and_a_missing_column_named(tmp_path) -> None:
    """fit reads a CSV file with a header row; a column it lacks is named with the file's."""
    rows = ROWS
    path = tmp_path / "runs.csv"
    lines = ["p,b,o,pt,dt"] + [
        ",".join(str(rows[k][i]) for k in ("p", "b", "o", "pt", "dt")) for i in range(30)
    ]
    path.write_text("\n".join(lines) + "\n")
    assert TableCostModel.fit(path, COLUMNS) == TableCostModel.fit(rows, COLUMNS)
    with pytest.raises(
        ValueError, match=r"no column 'prompt_size' for the prompt role; its columns are \['p', 'b'"
    ):
        TableCostModel.fit(path)


def test_the_held_out_error_is_seeded_and_scores_rows_not_fitted() -> None:
    """80:20 split by seed: the same seed gives the same figures; exact measurements give no
    error; the rows add up."""
    truth = TableCostModel((50, 64, 100, 128, 200, 256, 400, 512), np.linspace(0.01, 0.08, 8), (1, 2, 4, 8),
                           (0.02, 0.021, 0.025, 0.03), 2e-6)  # fmt: skip
    rows = synthetic_rows(truth, repeats=5)
    report = TableCostModel.held_out_error(rows, COLUMNS, seed=3)
    assert (report.train_rows, report.test_rows) == (40, 10)
    assert report.prefill_mape == pytest.approx(0.0, abs=1e-12) and report.decode_mape < 1e-9
    again = TableCostModel.held_out_error(rows, COLUMNS, seed=3)
    assert again == report
    with pytest.raises(ValueError, match="holdout must lie strictly between 0 and 1"):
        TableCostModel.held_out_error(rows, COLUMNS, holdout=1.0)


def test_held_out_error_on_splitwise_measurements() -> None:
    """On SplitwiseSim's Llama-2-70B on H100 at TP 8: seed 0 holds out 21 of 105 rows, and both
    errors stay within 3% (prefill, keyed by the prompt count; 3.2% by tokens alone) and 2%
    (decode)."""
    found = preset("llama2-70b/h100/tp8")
    rows = {k: v for k, v in found.rows().items()}
    report = TableCostModel.held_out_error(rows, seed=0)
    assert (report.train_rows, report.test_rows) == (84, 21)
    assert report.prefill_mape < 0.03 and report.decode_mape < 0.02
    assert report.model.batched_prompt == 512
    tokens_only = TableCostModel.held_out_error(rows, seed=0, prompt_count=False)
    assert report.prefill_mape < tokens_only.prefill_mape < 0.032


# ---------------------------------------------------------------- the file
def test_the_toml_file_gives_the_table_back_exactly(tmp_path) -> None:
    """to_toml then from_toml is the same table, bit for bit, name and factor included."""
    table = replace(preset("bloom-176b/h100/tp8").cost(), name='quote " and \\ slash')
    path = tmp_path / "cost.toml"
    table.to_toml(path)
    assert TableCostModel.from_toml(path) == table and table.batched_prompt == 512
    plain = replace(SMALL, mixed_factor=None)
    plain.to_toml(path)
    back = TableCostModel.from_toml(path)
    assert back == plain and back.mixed_factor is None and back.name == ""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind = 'table'\n[prefill]\ntokens = [1]\nseconds = [1.0]\n", r"\[decode\] is missing"),
        ("x = 1\n", "unknown key 'x'"),
        (
            "[prefill]\ntokens=[1]\nseconds=[1.0]\nmore=2\n[decode]\nbatch=[1]\nseconds=[1.0]\n",
            "prefill.more",
        ),
        ("[prefill]\ntokens=[1]\n[decode]\nbatch=[1]\nseconds=[1.0]\n", "prefill.seconds is missing"),
        ("kind = 'linear'\n", "kind must be 'table'"),
        (
            "[prefill]\ntokens=[2,1]\nseconds=[1.0,1.0]\n[decode]\nbatch=[1]\nseconds=[1.0]\n",
            "strictly ascending",
        ),
        ("not toml = = 1", "not a TOML file"),
    ],
)
def test_a_bad_file_is_refused_naming_it_and_the_key(tmp_path, text, message) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as raised:
        TableCostModel.from_toml(path)
    assert str(path) in str(raised.value)


# ---------------------------------------------------------------- every mode runs on it
def workload_of(seed: int, requests: int = 60) -> Workload:
    draw = np.random.default_rng(seed)
    return Workload(
        draw.integers(20, 2000, requests),
        draw.integers(1, 200, requests),
        arrival=np.sort(draw.uniform(0, 10, requests)),
    )


def test_every_mode_runs_on_a_preset_and_its_bounds_hold() -> None:
    """Competition, fusion, a disaggregated cluster (with and without lent machines) and a
    fleet each run on a measured table; every schedule validates; no makespan is below its
    lower bound."""
    workload = workload_of(0)
    found = preset("llama2-70b/h100/tp8")
    cost = found.cost()
    schedule = simulate(workload, cost, 16)
    assert validate(schedule) == [] and schedule.makespan >= lower_bounds(workload, cost, 16).strong
    fused = simulate_fusion(workload, cost, 16, token_budget=1024)
    assert validate_fused(fused) == []
    assert fused.makespan >= fused_lower_bounds(workload, cost, 16, 1024).strong
    slow = preset("llama2-70b/a100/tp8").cost()
    for mixed in (False, True):
        cluster = DisaggregatedCluster(2, 2, cost, slow, 16, found.kv_bytes_per_token, 25.0, 80, mixed=mixed)
        split = simulate_disaggregated(workload, cluster)
        assert validate_disaggregated(split) == []
        assert split.makespan >= disaggregated_lower_bounds(workload, cluster).strong
    engines = [Engine(cost, 16), Engine(slow, 8, mode="fusion", token_budget=512)]
    fleet = simulate_fleet(workload, engines, router="jsq")
    assert validate_fleet(fleet) == []


@settings(max_examples=25, deadline=None)
@given(tables, st.integers(0, 2**31), st.integers(1, 6), st.integers(2, 600))
def test_schedules_on_any_table_validate_and_respect_the_bounds(table, seed, clients, budget) -> None:
    """On random tables (mixed by either rule), random workloads run under competition and
    fusion: the validator accepts both, and neither beats its lower bounds."""
    draw = np.random.default_rng(seed)
    count = int(draw.integers(1, 20))
    workload = Workload(
        # A prompt past twice the longest measured alone is refused (prefill_time is inf).
        draw.integers(1, min(table.prefill_capacity, 2 * table.prefill_tokens[-1]) + 1, count),
        draw.integers(1, 30, count),
        arrival=np.sort(draw.uniform(0, 0.5, count)),
    )
    clients = min(clients, table.max_batch)
    schedule = simulate(workload, table, clients)
    assert validate(schedule) == []
    assert schedule.makespan >= lower_bounds(workload, table, clients).strong * (1 - 1e-9)
    budget = min(budget, table.prefill_capacity)
    if budget < 2:
        return
    try:
        fused = simulate_fusion(workload, table, clients, token_budget=budget)
    except ValueError as exc:  # a mixed iteration past the capacity, refused before any work
        assert "mixed_iteration_time" in str(exc) and table.mixed_factor is not None
        return
    assert validate_fused(fused) == []
    assert fused.makespan >= fused_lower_bounds(workload, table, clients, budget).strong * (1 - 1e-9)


def test_sizes_past_the_table_are_refused_before_any_work() -> None:
    """More clients than the largest batch, or a fused budget whose mixed iteration passes the
    prefill capacity: a ValueError naming the call, before the run."""
    cost = preset("llama2-70b/h100/tp8").cost()
    workload = workload_of(1, requests=200)
    with pytest.raises(ValueError, match=r"decode_iteration_time\(129\) = inf .*up to 128 requests"):
        simulate(workload, cost, 200)
    # A budget past the capacity is fine while the prompts' tokens fit a stage; SplitwiseSim's
    # rule then prices a chunk of them all and a decoding request at one token past it.
    big = Workload([16384, 16384], [5, 5])
    with pytest.raises(ValueError, match=r"mixed_iteration_time\(1, 0, 32768, 0\) = inf"):
        simulate_fusion(big, cost, 2, token_budget=40000)
    assert validate_fused(simulate_fusion(big, replace(cost, mixed_factor=None), 2, token_budget=40000)) == []


def test_a_table_scaled_is_every_time_divided() -> None:
    fast = SMALL.scaled(2.0)
    assert fast.prefill_time(200) == pytest.approx(SMALL.prefill_time(200) / 2)
    assert fast.decode_iteration_time(3, 100) == pytest.approx(SMALL.decode_iteration_time(3, 100) / 2)
    with pytest.raises(ValueError, match="speed must be"):
        SMALL.scaled(0)


def test_a_chunk_takes_what_it_adds_to_the_prompt_before_it() -> None:
    """A chunk of t tokens from position s (squares (s + t)^2 - s^2) takes f(s + t) - f(s),
    never less than f(t), with s + t kept within the capacity; a prompt's chunks add up to at
    least the prompt whole, in every reading (scalars, arrays, mixed iterations)."""
    # f(100) = 0.01, f(300) = 0.03, f(400) = 0.06, f(500) = 0.09.
    assert SMALL.prefill_time(300, int(chunk_squares(100, 300))) == pytest.approx(0.06 - 0.01)
    assert SMALL.prefill_time(100, int(chunk_squares(100, 100))) == pytest.approx(0.02 - 0.01)
    assert SMALL.prefill_time(100, int(chunk_squares(10, 100))) == pytest.approx(0.01)  # f(t) the floor
    assert SMALL.prefill_time(300, 10**9) == pytest.approx(0.09 - 0.02)  # within the capacity
    rng = np.random.default_rng(3)
    for table in (SMALL, replace(SMALL, mixed_factor=1.1)):
        for _ in range(200):
            prompt = int(rng.integers(1, 501))
            cuts = np.unique(np.concatenate([[0, prompt], rng.integers(1, prompt + 1, rng.integers(0, 5))]))
            starts, tokens = cuts[:-1], np.diff(cuts)
            squares = chunk_squares(starts, tokens)
            one = np.asarray(table.prefill_time(tokens, squares))
            assert one == pytest.approx(
                [table.prefill_time(int(t), int(q)) for t, q in zip(tokens, squares, strict=True)]
            )
            assert float(one.sum()) >= float(table.prefill_time(prompt, prompt * prompt)) * (1 - 1e-12)
            mixed = [
                table.mixed_iteration_time(2, 50, int(t), int(q))
                for t, q in zip(tokens, squares, strict=True)
            ]
            assert mixed == pytest.approx(np.asarray(table.mixed_iteration_time(2, 50, tokens, squares)))
