"""Workload generators (GSM8K, ExeGPT's tasks) and the CSV and trace loaders."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from llmsched import Workload, workloads
from llmsched._checks import MAX_REQUESTS, MAX_TOKENS


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
        "0,2,0,0.1,1,100,7\n1,2,0,0.3,1,50,9\n"
    )
    wl = workloads.from_splitwise_trace(split)
    assert wl.output_tokens.tolist() == [7, 9] and wl.arrival.tolist() == [0.1, 0.3]
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
