"""Workload generators (GSM8K, ExeGPT's tasks) and the CSV and trace loaders."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmsched import Workload, workloads
from llmsched.core.checks import MAX_REQUESTS, MAX_TOKENS


def test_gsm8k_prompts_are_the_real_token_counts() -> None:
    """The packaged prompt lengths have the reported moments and the paper's token total."""
    wl = workloads.gsm8k(0)
    assert len(wl) == 1319
    assert wl.prompt_tokens.mean() == pytest.approx(68.43, abs=0.005)
    assert wl.prompt_tokens.std(ddof=1) == pytest.approx(25.05, abs=0.01)
    assert wl.prompt_tokens.max() == 191
    # 90,258 tokens: 19 full prefill stages of 5,000, as the paper's 13 s bound implies.
    assert wl.total_prompt_tokens == 90258
    assert -(-wl.total_prompt_tokens // 5000) == 19


@pytest.mark.parametrize("seed", range(20))
def test_gsm8k_outputs_match_the_reported_moments(seed: int) -> None:
    """Every seed's outputs have mean 344.83 (±1%), sd 187.99 (±2%) and maximum 512."""
    out = workloads.gsm8k(seed).output_tokens
    assert out.mean() == pytest.approx(344.83, rel=0.01)
    assert out.std() == pytest.approx(187.99, rel=0.02)
    assert out.max() == 512
    assert out.min() >= 1


def test_gsm8k_is_reproducible_and_seed_dependent() -> None:
    """The same seed gives the same outputs bit for bit; another seed gives others."""
    a, b, c = workloads.gsm8k(3), workloads.gsm8k(3), workloads.gsm8k(4)
    assert np.array_equal(a.output_tokens, b.output_tokens)
    assert not np.array_equal(a.output_tokens, c.output_tokens)
    gen = workloads.gsm8k(np.random.default_rng(3))
    assert np.array_equal(gen.output_tokens, a.output_tokens)


def test_gsm8k_answers_are_the_reference_lengths() -> None:
    """outputs='answers' gives the human reference-answer lengths."""
    wl = workloads.gsm8k(outputs="answers")
    assert wl.output_tokens.mean() == pytest.approx(131.83, abs=0.01)
    assert wl.output_tokens.max() == 428
    with pytest.raises(ValueError, match="outputs must be"):
        workloads.gsm8k(outputs="gpt")
    with pytest.raises(TypeError, match="seed"):
        workloads.gsm8k("0")  # type: ignore[arg-type]


def test_packaged_lengths_equal_the_shared_data(shared_gsm8k) -> None:
    """The package data is the shared GSM8K length file, number for number."""
    shared = pd.read_csv(shared_gsm8k / "test_lengths_llama.csv")
    prompt, answer = workloads.gsm8k_lengths()
    assert np.array_equal(shared["prompt_tokens"].to_numpy(), prompt)
    assert np.array_equal(shared["answer_tokens"].to_numpy(), answer)


@pytest.mark.parametrize("task", sorted(workloads.EXEGPT_TASKS))
def test_exegpt_tasks_respect_their_bounds(task: str) -> None:
    """ExeGPT task lengths stay in [1, max] and sit near the table's mean where truncation is mild."""
    spec_in, spec_out = workloads.EXEGPT_TASKS[task]
    wl = workloads.exegpt_task(task, 4000, seed=1)
    assert wl.prompt_tokens.min() >= 1 and wl.prompt_tokens.max() <= spec_in.max
    assert wl.output_tokens.min() >= 1 and wl.output_tokens.max() <= spec_out.max
    # Truncation moves the mean by less than a third of the sd for every task of Table 3.
    assert abs(wl.output_tokens.mean() - spec_out.mean) < spec_out.sd / 3
    assert abs(wl.prompt_tokens.mean() - spec_in.mean) < spec_in.sd / 3


def test_exegpt_rejects_unknown_task() -> None:
    """An unknown task name is a ValueError listing the known ones."""
    with pytest.raises(ValueError, match="unknown ExeGPT task"):
        workloads.exegpt_task("X")
    with pytest.raises(ValueError, match="at least 1"):
        workloads.exegpt_task("S", 0)


def test_csv_round_trip(tmp_path) -> None:
    """to_csv then from_csv gives the same workload."""
    wl = Workload([5, 6], [7, 8], predicted_output=[9, 10], arrival=[0.5, 1.5])
    path = tmp_path / "w.csv"
    workloads.to_csv(wl, path)
    back = workloads.from_csv(path)
    for name in ("prompt_tokens", "output_tokens", "predicted_output", "arrival"):
        assert np.array_equal(getattr(back, name), getattr(wl, name))


def test_trace_loaders(tmp_path) -> None:
    """Vidur and SplitwiseSim traces load with their own column names; other files are refused."""
    vidur = tmp_path / "vidur.csv"
    vidur.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,3\n0.25,20,4\n")
    wl = workloads.from_vidur_trace(vidur)
    assert wl.prompt_tokens.tolist() == [10, 20] and wl.arrival.tolist() == [0.0, 0.25]
    split = tmp_path / "split.csv"
    split.write_text(
        "request_id,request_type,application_id,arrival_timestamp,batch_size,prompt_size,token_size\n"
        "0,2,0,0.1,1,100,7\n1,2,0,0.3,1,50,9\n2,2,0,0.4,1,60,1\n"
    )
    wl = workloads.from_splitwise_trace(split)
    # token_size counts the token the prompt phase makes: one decode step fewer, at least one.
    assert wl.output_tokens.tolist() == [6, 8, 1] and wl.arrival.tolist() == [0.1, 0.3, 0.4]
    with pytest.raises(ValueError, match="missing column"):
        workloads.from_vidur_trace(split)


BAD_SEEDS = [
    (-1, ValueError, "seed must be an integer >= 0, a numpy Generator or None, got -1"),
    (1.5, TypeError, "seed must be an integer >= 0, a numpy Generator or None, got float 1.5"),
    ("0", TypeError, "seed must be .* got str '0'"),
    (True, TypeError, "seed must be .* got bool True"),
    ([1, 2], TypeError, "seed must be .* got list"),
]


@pytest.mark.parametrize(
    "make",
    [
        lambda seed: workloads.gsm8k(seed),
        lambda seed: workloads.gsm8k_like(5, seed),
        lambda seed: workloads.exegpt_task("S", 5, seed),
        lambda seed: workloads.truncated_normal_lengths(workloads.EXEGPT_TASKS["S"][0], 5, seed),
    ],
)
@pytest.mark.parametrize(("seed", "error", "message"), BAD_SEEDS)
def test_generators_refuse_bad_seeds(make, seed, error, message) -> None:
    """Every generator names the seed and says what a seed may be (numpy's own message does not)."""
    with pytest.raises(error, match=message):
        make(seed)


def test_generators_take_numpy_seeds() -> None:
    """numpy integer seeds give the same draws as the Python int."""
    assert np.array_equal(workloads.gsm8k(np.uint32(3)).output_tokens, workloads.gsm8k(3).output_tokens)
    assert np.array_equal(
        workloads.exegpt_task("T", np.int64(2), np.int16(1)).prompt_tokens,
        workloads.exegpt_task("T", 2, 1).prompt_tokens,
    )


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (
            lambda: workloads.gsm8k_like(10**12),
            ValueError,
            f"n must be at most {MAX_REQUESTS:,}, got 1,000,000,000,000",
        ),
        (lambda: workloads.gsm8k_like(0), ValueError, "n must be at least 1, got 0"),
        (lambda: workloads.gsm8k_like(2.0), TypeError, "n must be an integer, got float 2.0"),
        (lambda: workloads.exegpt_task("S", MAX_REQUESTS + 1), ValueError, "n must be at most"),
        (
            lambda: workloads.truncated_normal_lengths(workloads.EXEGPT_TASKS["S"][0], 10**12),
            ValueError,
            "n must be at most",
        ),
        (
            lambda: workloads.truncated_normal_lengths((256, 252, 512), 5),
            TypeError,
            "spec must be a LengthSpec",
        ),
        (lambda: workloads.exegpt_task(["S"]), ValueError, r"unknown ExeGPT task \['S'\]"),
        (lambda: workloads.gsm8k(outputs=None), ValueError, "outputs must be one of"),
    ],
)
def test_generators_refuse_absurd_sizes_up_front(make, error, message) -> None:
    """Sizes beyond the limit are refused at once with the limit named (not a MemoryError or a hang)."""
    with pytest.raises(error, match=message):
        make()


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((10, 5, 0), ValueError, "max must be at least 1, got 0"),
        ((10, 5, MAX_TOKENS + 1), ValueError, "max must be at most"),
        ((10, 5, 50.0), TypeError, "max must be an integer"),
        ((0.5, 5, 50), ValueError, "mean must be a finite number >= 1, got 0.5"),
        ((60, 5, 50), ValueError, "mean must be at most max=50, got 60"),
        ((float("nan"), 5, 50), ValueError, "mean must be a finite number >= 1, got nan"),
        ((10, 0, 50), ValueError, "sd must be a finite number > 0, got 0"),
        ((10, float("inf"), 50), ValueError, "sd must be a finite number > 0, got inf"),
        ((10, True, 50), TypeError, "sd must be a finite number > 0, got bool True"),
        ((10, "5", 50), TypeError, "sd must be a finite number > 0, got str '5'"),
    ],
)
def test_length_spec_refuses_bad_moments(args, error, message) -> None:
    """LengthSpec names the moment that is wrong and the range it must lie in."""
    with pytest.raises(error, match=message):
        workloads.LengthSpec(*args)


FILES = {
    "empty.csv": b"",
    "header.csv": b"prompt_tokens,output_tokens\n",
    "latin1.csv": "prompt_tokens,output_tokens\n1,2\n\u00e9,3\n".encode("latin-1"),
    "binary.csv": bytes(range(256)) * 4,
    "quote.csv": b'prompt_tokens,output_tokens\n1,2\n"unterminated\n',
    "text.csv": b"prompt_tokens,output_tokens\nabc,2\n",
    "negative.csv": b"prompt_tokens,output_tokens\n-1,2\n",
    "blank.csv": b"prompt_tokens,output_tokens\n1,\n",
    "other.csv": b"a,b\n1,2\n",
}


@pytest.mark.parametrize(
    ("file", "message"),
    [
        ("missing.csv", r"path '.*missing.csv' does not exist; expected a llmsched workload file"),
        ("empty.csv", r"empty.csv: the file is empty; expected a llmsched workload file: UTF-8 CSV"),
        ("header.csv", r"header.csv: the table has a header but no requests"),
        ("latin1.csv", "latin1.csv: not UTF-8 text; expected a llmsched workload file"),
        ("binary.csv", r"binary.csv: not a readable CSV table \(.*\); expected"),
        ("quote.csv", r"quote.csv: not a readable CSV table \(.*EOF inside string"),
        ("text.csv", r"text.csv: prompt_tokens must hold real numbers"),
        ("negative.csv", r"negative.csv: prompt_tokens\[0\] is -1; token counts must be in \[1, "),
        ("blank.csv", r"blank.csv: output_tokens\[0\] is nan; token counts must be finite"),
        ("other.csv", r"other.csv: not a llmsched workload file; missing column\(s\)"),
        (".", r"path '.*' is a folder; expected a llmsched workload file"),
    ],
)
def test_from_csv_names_the_file_for_every_bad_file(tmp_path: Path, file: str, message: str) -> None:
    """Missing, empty, non-UTF-8, malformed, row-less or badly valued files: ValueErrors naming the file."""
    for name, data in FILES.items():
        (tmp_path / name).write_bytes(data)
    with pytest.raises(ValueError, match=message):
        workloads.from_csv(tmp_path / file)


@pytest.mark.parametrize("loader", [workloads.from_vidur_trace, workloads.from_splitwise_trace])
@pytest.mark.parametrize("file", ["empty.csv", "latin1.csv", "quote.csv", "missing.csv"])
def test_trace_loaders_name_the_file(tmp_path: Path, loader, file: str) -> None:
    """The trace loaders read files the same way, so their errors name the file too."""
    for name, data in FILES.items():
        (tmp_path / name).write_bytes(data)
    with pytest.raises(ValueError, match=file):
        loader(tmp_path / file)


def test_trace_values_are_reported_with_their_columns(tmp_path: Path) -> None:
    """A bad value in a trace names the file and how the trace's columns map to the workload's."""
    vidur = tmp_path / "v.csv"
    vidur.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n-1,3,4\n")
    with pytest.raises(ValueError, match=r"v.csv: arrival\[0\] is -1.0.*reads .*arrived_at as arrival"):
        workloads.from_vidur_trace(vidur)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda p: workloads.from_csv(None), TypeError, "path must be a file path .*, got NoneType"),
        (lambda p: workloads.from_csv(3), TypeError, "path must be a file path .*, got int 3"),
        (lambda p: workloads.from_csv(p, name=3), TypeError, "name must be a str, got int 3"),
        (lambda p: workloads.to_csv([1, 2], p), TypeError, "workload must be a llmsched.Workload, got list"),
        (lambda p: workloads.to_csv(Workload([1], [1]), None), TypeError, "path must be a file path"),
        (lambda p: workloads.to_csv(Workload([1], [1]), p.parent), ValueError, "path '.*' cannot be written"),
        (
            lambda p: workloads.to_csv(Workload([1], [1]), p.parent / "no" / "w.csv"),
            ValueError,
            "path '.*w.csv' cannot be written",
        ),
    ],
)
def test_paths_and_names_are_checked(tmp_path: Path, call, error, message) -> None:
    """Paths must be paths, names strings, and an unwritable path is a ValueError naming it."""
    path = tmp_path / "w.csv"
    workloads.to_csv(Workload([5], [6]), path)
    with pytest.raises(error, match=message):
        call(path)


# ---------------------------------------------------------------- Azure traces

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def _azure(tmp_path: Path, rows: str, name: str = "azure.csv") -> Path:
    path = tmp_path / name
    path.write_text(AZURE_HEADER + rows)
    return path


def test_azure_trace_arrivals_are_exact_seconds_since_the_first_request(tmp_path: Path) -> None:
    """Seven fractional digits (100 ns) survive: each arrival is the exact tick difference in
    seconds, the first request at 0; the token columns are the prompt and output lengths."""
    path = _azure(
        tmp_path,
        "2023-11-16 18:17:03.9799600,4808,10\n"
        "2023-11-16 18:17:04.0319601,3180,8\n"
        "2023-11-16 19:14:19.9280169,549,173\n",
    )
    wl = workloads.from_azure_trace(path)
    ticks = np.array([0, 520_001, 34_359_480_569], dtype=np.int64)  # in 100 ns
    assert wl.arrival.dtype == np.float64
    assert wl.arrival.tolist() == (ticks * 100 / 1e9).tolist()
    assert wl.arrival[1] == 0.0520001
    assert wl.prompt_tokens.tolist() == [4808, 3180, 549] and wl.output_tokens.tolist() == [10, 8, 173]
    assert wl.name == str(path) and workloads.from_azure_trace(path, name="code").name == "code"


def test_azure_trace_counts_from_the_earliest_request_and_reads_utc_offsets(tmp_path: Path) -> None:
    """Rows out of time order keep their order, timed from the earliest; offsets are converted
    to UTC (the 2024 traces carry +00:00)."""
    path = _azure(
        tmp_path,
        "2024-05-10 00:00:02.5+00:00,10,3\n"
        "2024-05-10 01:00:00+01:00,20,4\n"
        "2024-05-10 00:00:01.25+00:00,30,5\n",
    )
    assert workloads.from_azure_trace(path).arrival.tolist() == [2.5, 0.0, 1.25]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ("1700158623.9,10,3\n", r"TIMESTAMP holds numbers; expected ISO 8601 date-times"),
        ("yesterday,10,3\n", r"TIMESTAMP must hold ISO 8601 date-times such as 2023-11-16 18:17:03.9799600"),
        ("2023-11-16 18:17:03,10,3\n,20,4\n", r"TIMESTAMP\[1\] is empty; every request needs a time"),
        ("2023-11-16 18:17:03,0,3\n", r"prompt_tokens\[0\] is 0.*, ContextTokens as prompt_tokens"),
        ("2023-11-16 18:17:03,10,2.5\n", r"output_tokens\[0\] is 2.5.*GeneratedTokens as output_tokens"),
    ],
)
def test_azure_trace_bad_values_name_the_file_and_column(tmp_path: Path, rows: str, message: str) -> None:
    """A time that is not a date-time, a missing time, or a bad token count: a ValueError naming
    the file and the trace's column."""
    path = _azure(tmp_path, rows)
    with pytest.raises(ValueError, match=message) as info:
        workloads.from_azure_trace(path)
    assert str(path) in str(info.value) and "You might want to try" not in str(info.value)


def test_azure_trace_refuses_other_files(tmp_path: Path) -> None:
    """A Vidur trace is not an Azure trace: the missing columns are named."""
    vidur = tmp_path / "vidur.csv"
    vidur.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,3\n")
    with pytest.raises(
        ValueError, match=r"not a Azure LLM inference trace file; missing column\(s\) \['TIMESTAMP'"
    ):
        workloads.from_azure_trace(vidur)


def test_real_azure_code_trace(shared_azure_code: Path) -> None:
    """The 2023 code trace: 8,819 requests over about 3,436 s, the first at 0, in time order;
    906 prompts are longer than the paper's prefill capacity of 5,000 tokens."""
    wl = workloads.from_azure_trace(shared_azure_code)
    assert len(wl) == 8819
    assert wl.arrival[0] == 0.0 and np.all(np.diff(wl.arrival) >= 0)
    assert wl.arrival[-1] == pytest.approx(3435.948056, abs=1e-9)
    assert wl.prompt_tokens.max() == 7437 and wl.output_tokens.max() == 1899
    clipped, report = workloads.prepare_report(wl, max_prompt=5000, rate_scale=2.0)
    assert report.prompts_clipped == 906 and clipped.prompt_tokens.max() == 5000
    assert clipped.arrival[-1] == pytest.approx(3435.948056 / 2, abs=1e-9)


# ---------------------------------------------------------------- Vidur length-only traces


def test_vidur_length_only_traces_arrive_at_zero_or_at_drawn_times(tmp_path: Path) -> None:
    """A Vidur trace without arrived_at is an offline batch, or gets times from ``arrivals=``."""
    path = tmp_path / "lengths.csv"
    path.write_text("num_prefill_tokens,num_decode_tokens\n10,3\n20,4\n30,5\n")
    wl = workloads.from_vidur_trace(path)
    assert wl.is_offline and wl.prompt_tokens.tolist() == [10, 20, 30]
    timed = workloads.from_vidur_trace(path, arrivals="poisson:2", seed=7)
    assert np.array_equal(timed.arrival, workloads.poisson_arrivals(3, 2.0, seed=7))
    with pytest.raises(ValueError, match=r"missing column\(s\) \['num_decode_tokens'\]"):
        (tmp_path / "bad.csv").write_text("num_prefill_tokens\n10\n")
        workloads.from_vidur_trace(tmp_path / "bad.csv")


# ---------------------------------------------------------------- loader options

LOADER_FILES = {
    "csv": (
        workloads.from_csv,
        "prompt_tokens,output_tokens,predicted_output,arrival\n10,3,4,0\n900,700,800,2\n",
    ),
    "vidur": (
        workloads.from_vidur_trace,
        "arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,3\n2,900,700\n",
    ),
    "splitwise": (
        workloads.from_splitwise_trace,
        # token_size counts the prompt phase's token: 4 and 701 are 3 and 700 decode steps.
        "request_id,arrival_timestamp,prompt_size,token_size\n0,0,10,4\n1,2,900,701\n",
    ),
    "azure": (
        workloads.from_azure_trace,
        AZURE_HEADER + "2023-11-16 18:17:03,10,3\n2023-11-16 18:17:05,900,700\n",
    ),
}


@pytest.mark.parametrize("kind", sorted(LOADER_FILES))
def test_every_loader_takes_the_options_of_prepare(tmp_path: Path, kind: str) -> None:
    """Each loader gives what prepare gives on what it read: faster arrivals, clipped lengths."""
    loader, data = LOADER_FILES[kind]
    path = tmp_path / f"{kind}.csv"
    path.write_text(data)
    plain = loader(path)
    assert plain.arrival.tolist() == [0.0, 2.0]
    options = {"rate_scale": 4.0, "max_prompt": 100, "max_output": 50}
    loaded = loader(path, **options)
    expected = workloads.prepare(plain, **options)
    assert loaded.to_frame().equals(expected.to_frame())
    assert loaded.arrival.tolist() == [0.0, 0.5]
    assert loaded.prompt_tokens.tolist() == [10, 100] and loaded.output_tokens.tolist() == [3, 50]
    assert loaded.name == plain.name == str(path)


@pytest.mark.parametrize("kind", sorted(LOADER_FILES))
@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"rate_scale": 0}, ValueError, "rate_scale must be a finite number > 0, got 0"),
        ({"max_prompt": 0}, ValueError, "max_prompt must be at least 1, got 0"),
        ({"arrivals": "poisson:-1"}, ValueError, "bad arrivals 'poisson:-1': rate must be"),
        ({"max_promt": 10}, TypeError, "unknown option 'max_promt'; the options are rate_scale, max_prompt"),
    ],
)
def test_loaders_check_options_before_reading(kind: str, options, error, message) -> None:
    """A bad or unknown option is refused before the file is looked at (here it does not exist)."""
    loader, _ = LOADER_FILES[kind]
    with pytest.raises(error, match=message):
        loader("/nonexistent/trace.csv", **options)


# ---------------------------------------------------------------- prepare


@st.composite
def timed_workloads(draw: st.DrawFn) -> Workload:
    n = draw(st.integers(1, 30))
    tokens = st.lists(st.integers(1, 10_000), min_size=n, max_size=n)
    times = st.lists(st.floats(0.0, 1e6, allow_nan=False), min_size=n, max_size=n)
    predicted = draw(st.none() | tokens)
    return Workload(draw(tokens), draw(tokens), predicted_output=predicted, arrival=draw(times), name="w")


@given(timed_workloads(), st.floats(1e-3, 1e3, allow_nan=False))
def test_rate_scale_divides_every_arrival_exactly(wl: Workload, scale: float) -> None:
    """Replaying K times faster divides each arrival by K (bit for bit) and changes nothing else;
    a workload whose requests all arrive at 0 has no rate to scale, and says so."""
    if wl.is_offline:
        with pytest.raises(ValueError, match=r"changes nothing.*arrives at 0.*poisson:RATE"):
            workloads.prepare(wl, rate_scale=scale)
        return
    fast = workloads.prepare(wl, rate_scale=scale)
    assert np.array_equal(fast.arrival, wl.arrival / scale)
    assert np.array_equal(fast.prompt_tokens, wl.prompt_tokens) and fast.name == wl.name


@given(timed_workloads(), st.integers(1, 12_000), st.integers(1, 12_000))
def test_clipping_never_raises_a_length_and_counts_what_it_clipped(
    wl: Workload, max_prompt: int, max_output: int
) -> None:
    """Clipped lengths are min(length, cap); the report counts exactly the lengths above the cap,
    predictions clipped with the outputs; the input workload is unchanged."""
    before = wl.prompt_tokens.copy()
    out, report = workloads.prepare_report(wl, max_prompt=max_prompt, max_output=max_output)
    assert np.array_equal(out.prompt_tokens, np.minimum(wl.prompt_tokens, max_prompt))
    assert np.array_equal(out.output_tokens, np.minimum(wl.output_tokens, max_output))
    assert np.all(out.prompt_tokens <= wl.prompt_tokens) and np.all(out.output_tokens <= wl.output_tokens)
    assert report.prompts_clipped == np.count_nonzero(wl.prompt_tokens > max_prompt)
    assert report.outputs_clipped == np.count_nonzero(wl.output_tokens > max_output)
    if wl.predicted_output is None:
        assert out.predicted_output is None and report.predictions_clipped == 0
    else:
        assert out.predicted_output is not None
        assert np.array_equal(out.predicted_output, np.minimum(wl.predicted_output, max_output))
        assert report.predictions_clipped == np.count_nonzero(wl.predicted_output > max_output)
    assert np.array_equal(out.arrival, wl.arrival) and np.array_equal(wl.prompt_tokens, before)


def test_prepare_report_says_what_was_asked_and_done() -> None:
    """The report's dict is JSON-ready: the options (the process as its spec) and the counts."""
    wl = Workload([10, 600, 700], [5, 6, 900])
    out, report = workloads.prepare_report(wl, max_prompt=500, max_output=800, arrivals="gamma:2,3", seed=4)
    assert report.as_dict() == {
        "rate_scale": 1.0,
        "max_prompt": 500,
        "max_output": 800,
        "arrivals": "gamma:2,3",
        "replace_arrivals": False,
        "seed": 4,
        "prompts_clipped": 2,
        "outputs_clipped": 1,
        "predictions_clipped": 0,
    }
    assert json.loads(json.dumps(report.as_dict())) == report.as_dict()
    assert np.array_equal(out.arrival, workloads.gamma_arrivals(3, 2.0, 3.0, seed=4))
    assert workloads.prepare_report(wl)[1].as_dict()["prompts_clipped"] == 0


def test_drawn_arrivals_are_then_replayed_faster() -> None:
    """Arrivals are drawn first, then divided by rate_scale."""
    wl = workloads.gsm8k_like(50)
    out = workloads.prepare(wl, arrivals=workloads.ArrivalProcess("poisson", 2.0), rate_scale=4.0, seed=1)
    assert np.array_equal(out.arrival, workloads.poisson_arrivals(50, 2.0, seed=1) / 4.0)


def test_replacing_a_traces_arrivals_must_be_asked_for() -> None:
    """Arrivals drawn over a workload that has times are refused unless replace_arrivals=True;
    replace_arrivals without arrivals is refused too."""
    wl = Workload([1, 2], [3, 4], arrival=[0.0, 5.0], name="trace")
    with pytest.raises(
        ValueError, match=r"workload 'trace' has its own arrival times \(up to 5 s\).*replace_arrivals=True"
    ):
        workloads.prepare(wl, arrivals="poisson:1")
    out = workloads.prepare(wl, arrivals="poisson:1", replace_arrivals=True, seed=3)
    assert np.array_equal(out.arrival, workloads.poisson_arrivals(2, 1.0, seed=3))
    with pytest.raises(ValueError, match=r"replace_arrivals=True \(--replace-arrivals\) needs arrivals="):
        workloads.prepare(wl, replace_arrivals=True)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"rate_scale": -1.0}, ValueError, "rate_scale must be a finite number > 0, got -1.0"),
        ({"rate_scale": float("nan")}, ValueError, "rate_scale must be a finite number > 0, got nan"),
        ({"rate_scale": float("inf")}, ValueError, "rate_scale must be a finite number > 0, got inf"),
        ({"rate_scale": "2"}, TypeError, "rate_scale must be a finite number > 0, got str '2'"),
        ({"rate_scale": True}, TypeError, "rate_scale must be a finite number > 0, got bool True"),
        ({"max_prompt": 2.5}, TypeError, "max_prompt must be an integer, got float 2.5"),
        ({"max_output": 0}, ValueError, "max_output must be at least 1, got 0"),
        ({"max_output": MAX_TOKENS + 1}, ValueError, "max_output must be at most"),
        ({"arrivals": "uniform:3"}, ValueError, "unknown arrivals 'uniform:3'; expected poisson:RATE"),
        (
            {"arrivals": 3},
            TypeError,
            r"arrivals must be None, an ArrivalProcess or a spec poisson:RATE .*, got int",
        ),
        ({"replace_arrivals": "yes"}, TypeError, "replace_arrivals must be True or False, got str 'yes'"),
        ({"seed": -1}, ValueError, r"seed must be an integer >= 0 \(a seed\), got -1"),
        ({"rate_scale": 1e-310}, ValueError, "rate_scale=1e-310 stretches arrival times of up to 5 s"),
    ],
)
def test_prepare_names_the_bad_option(options, error, message) -> None:
    """Every bad option is refused with its name and what it may be."""
    with pytest.raises(error, match=message):
        workloads.prepare(Workload([1, 2], [3, 4], arrival=[0.0, 5.0]), **options)


def test_prepare_refuses_what_is_not_a_workload() -> None:
    """prepare takes a Workload, and only the documented keywords."""
    with pytest.raises(TypeError, match=r"workload must be a llmsched\.Workload, got list"):
        workloads.prepare([1, 2])
    with pytest.raises(TypeError):
        workloads.prepare(Workload([1], [1]), max_tokens=3)  # type: ignore[call-arg]


# ---------------------------------------------------------------- arrival processes

RATES = st.floats(1e-3, 1e4, allow_nan=False)
CVS = st.floats(0.05, 20.0, allow_nan=False)


@given(st.integers(0, 500), RATES, CVS, st.integers(0, 2**32))
def test_drawn_arrivals_are_sorted_nonnegative_and_start_at_zero(
    n: int, rate: float, cv: float, seed: int
) -> None:
    """Both generators give n float64 times, sorted, >= 0, the first at 0, the same for the same seed."""
    for times, again in (
        (workloads.poisson_arrivals(n, rate, seed), workloads.poisson_arrivals(n, rate, seed)),
        (workloads.gamma_arrivals(n, rate, cv, seed), workloads.gamma_arrivals(n, rate, cv, seed)),
    ):
        assert times.dtype == np.float64 and times.shape == (n,)
        assert np.all(np.isfinite(times)) and np.all(np.diff(times) >= 0)
        assert n == 0 or times[0] == 0.0
        assert np.array_equal(times, again)


@pytest.mark.parametrize(("rate", "cv"), [(0.5, 1.0), (4.0, 1.0), (4.0, 0.25), (4.0, 3.0), (100.0, 2.0)])
def test_drawn_gaps_have_the_requested_mean_and_variation(rate: float, cv: float) -> None:
    """Over 200,000 gaps at a fixed seed, the mean gap is 1/rate (within 1.5%) and the coefficient
    of variation is cv (within 3%); Poisson gaps have cv 1."""
    n = 200_001
    draws = [workloads.gamma_arrivals(n, rate, cv, seed=11)]
    if cv == 1.0:
        draws.append(workloads.poisson_arrivals(n, rate, seed=11))
    for times in draws:
        gaps = np.diff(times)
        assert gaps.mean() == pytest.approx(1 / rate, rel=0.015)
        assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.03)


def test_seeds_and_generators_drive_the_draws() -> None:
    """Another seed gives other times; a numpy Generator is taken as a seed is."""
    assert not np.array_equal(workloads.poisson_arrivals(10, 1.0, 0), workloads.poisson_arrivals(10, 1.0, 1))
    assert np.array_equal(
        workloads.gamma_arrivals(10, 1.0, 2.0, np.random.default_rng(5)),
        workloads.gamma_arrivals(10, 1.0, 2.0, 5),
    )
    assert workloads.poisson_arrivals(1, 3.0).tolist() == [0.0]


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: workloads.poisson_arrivals(-1, 1.0), ValueError, "n must be at least 0, got -1"),
        (lambda: workloads.poisson_arrivals(MAX_REQUESTS + 1, 1.0), ValueError, "n must be at most"),
        (lambda: workloads.poisson_arrivals(5, 0.0), ValueError, "rate must be a finite number > 0, got 0.0"),
        (lambda: workloads.poisson_arrivals(5, 5e-324), ValueError, "scale cv\\^2/rate = inf"),
        (lambda: workloads.poisson_arrivals(5, 1.0, seed=-2), ValueError, "seed must be an integer >= 0"),
        (
            lambda: workloads.gamma_arrivals(5, 1.0, 0.0),
            ValueError,
            "cv must be a finite number > 0, got 0.0",
        ),
        (
            lambda: workloads.gamma_arrivals(5, 1.0, float("inf")),
            ValueError,
            "cv must be a finite number > 0",
        ),
        (lambda: workloads.gamma_arrivals(5, 1.0, 1e200), ValueError, "shape 1/cv\\^2 = 0.0"),
        (lambda: workloads.poisson_arrivals(200, 1e-307), ValueError, "rate 1e-307 is too small"),
        (lambda: workloads.ArrivalProcess("uniform", 1.0), ValueError, "kind must be one of"),
        (lambda: workloads.ArrivalProcess("poisson", 1.0, 2.0), ValueError, "a poisson process has cv 1"),
        (lambda: workloads.ArrivalProcess.parse(2.0), TypeError, "arrivals must be a spec string"),
        (lambda: workloads.ArrivalProcess.parse("poisson:x"), ValueError, "RATE must be a number, got 'x'"),
        (lambda: workloads.ArrivalProcess.parse("gamma:1"), ValueError, "gamma takes RATE,CV"),
        (lambda: workloads.ArrivalProcess.parse("gamma:1,0"), ValueError, "cv must be a finite number > 0"),
        (lambda: workloads.ArrivalProcess.parse("poisson 3"), ValueError, "unknown arrivals 'poisson 3'"),
    ],
)
def test_arrival_processes_refuse_bad_parameters(call, error, message) -> None:
    """Sizes, rates, cvs and seeds out of range, and malformed specs, are named with what is allowed."""
    with pytest.raises(error, match=message):
        call()


@given(RATES, CVS)
def test_arrival_specs_round_trip(rate: float, cv: float) -> None:
    """str(process) is a spec that parse reads back to an equal process."""
    for process in (workloads.ArrivalProcess("poisson", rate), workloads.ArrivalProcess("gamma", rate, cv)):
        assert workloads.ArrivalProcess.parse(str(process)) == process
    assert str(workloads.ArrivalProcess.parse(" gamma: 2 , 0.5 ")) == "gamma:2,0.5"


def test_mico_like_shape() -> None:
    from llmsched.workloads import mico_like

    w = mico_like(2000, seed=3)
    assert len(w) == 2000 and w.name == "mico-like-2000"
    assert w.prompt_tokens.min() >= 4 and w.prompt_tokens.max() <= 256
    # GPT-2 stops at its 1,024-token context, prompt included.
    assert (w.prompt_tokens + w.output_tokens).max() <= 1024
    assert 250 < w.output_tokens.mean() < 320
    assert np.array_equal(mico_like(50, seed=1).output_tokens, mico_like(50, seed=1).output_tokens)
    with pytest.raises(ValueError, match="context"):
        mico_like(10, context=100)
    with pytest.raises(ValueError, match="eos_mean"):
        mico_like(10, eos_mean=1)


def test_a_csv_of_ones_own_column_names(tmp_path: Path) -> None:
    """columns maps the fields to a file's names; date-time arrivals become seconds since the
    first; a missing column, an unknown field or a column given twice is refused."""
    path = tmp_path / "mine.csv"
    path.write_text("ts,in,out,extra\n2024-03-01 10:00:01,5,7,x\n2024-03-01 10:00:00.5,3,2,y\n")
    wl = workloads.from_csv(path, columns={"prompt_tokens": "in", "output_tokens": "out", "arrival": "ts"})
    assert wl.prompt_tokens.tolist() == [5, 3] and wl.output_tokens.tolist() == [7, 2]
    assert wl.arrival.tolist() == [0.5, 0.0]
    same = workloads.from_csv(path, columns="prompt_tokens=in,output_tokens=out,arrival=ts")
    assert same.to_frame().equals(wl.to_frame())
    with pytest.raises(ValueError, match=r"missing column\(s\) \['input'\]"):
        workloads.from_csv(path, columns="prompt_tokens=input,output_tokens=out")
    with pytest.raises(ValueError, match="unknown field 'prompt'"):
        workloads.from_csv(path, columns="prompt=in")
    with pytest.raises(ValueError, match="column 'in' is given for two fields"):
        workloads.from_csv(path, columns="prompt_tokens=in,output_tokens=in")


@pytest.mark.parametrize("outputs", ["normal", "lognormal", "constant", "empirical"])
def test_mico_like_shapes_hold_the_mean_and_the_context(outputs) -> None:
    """Every shape has the clipped geometric's expected mean (to a token), keeps each output
    within the context its prompt leaves, and reuses the geometric draw's prompts."""
    from llmsched.workloads import mico_like

    shape = [10, 20, 40, 2000] if outputs == "empirical" else None
    w = mico_like(3000, seed=5, outputs=outputs, shape=shape)
    base = mico_like(3000, seed=5)
    np.testing.assert_array_equal(w.prompt_tokens, base.prompt_tokens)
    room = 1024 - w.prompt_tokens
    q = 1 / 300
    expected = np.mean((1 - (1 - q) ** room) / q)
    assert abs(w.output_tokens.mean() - expected) < 1.0
    assert w.output_tokens.min() >= 1 and np.all(w.output_tokens <= room)
    spread = {"normal": (0.4, 0.6), "lognormal": (0.8, 1.2), "constant": (0.0, 0.01), "empirical": (1.0, 3.0)}
    low, high = spread[outputs]
    assert low <= w.output_tokens.std() / w.output_tokens.mean() <= high
    assert w.name == f"mico-like-3000-{outputs}"


def test_mico_like_refuses_bad_shapes() -> None:
    from llmsched.workloads import mico_like

    with pytest.raises(ValueError, match="outputs must be one of"):
        mico_like(10, outputs="uniform")
    with pytest.raises(ValueError, match="shape gives the lengths"):
        mico_like(10, outputs="empirical")
    with pytest.raises(ValueError, match="shape gives the lengths"):
        mico_like(10, outputs="normal", shape=[1, 2])
    with pytest.raises(ValueError, match="positive, finite"):
        mico_like(10, outputs="empirical", shape=[0, 3])


def test_baton_like_query_sets_follow_what_baton_states() -> None:
    """30 short queries (30-200 words each way), or 120 in the ratio 1:1:2 of long input,
    long output and short both (long 3,600-4,400 words, short 30-400), at 4/3 tokens a word."""
    from llmsched.workloads import baton_like

    short = baton_like("short", seed=2)
    assert len(short) == 30 and short.name == "baton-short"
    for lengths in (short.prompt_tokens, short.output_tokens):
        assert lengths.min() >= 40 and lengths.max() <= 267
    mixed = baton_like("mixed", seed=2)
    assert len(mixed) == 120
    long_in = mixed.prompt_tokens >= 4800
    long_out = mixed.output_tokens >= 4800
    assert long_in.sum() == 30 and long_out.sum() == 30 and not np.any(long_in & long_out)
    assert mixed.prompt_tokens.max() <= 5867 and mixed.output_tokens[~long_out].max() <= 533
    doubled = baton_like("mixed", seed=2, double=True)
    np.testing.assert_array_equal(doubled.prompt_tokens, 2 * mixed.prompt_tokens)
    with pytest.raises(ValueError, match="kind must be"):
        baton_like("long")
