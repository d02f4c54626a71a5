"""Workload construction, validation, generators and loaders."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from llmsched import Workload, workloads


def test_arrays_are_read_only_copies() -> None:
    """A workload copies its inputs and refuses writes."""
    prompt = np.array([3, 4])
    wl = Workload(prompt, [5, 6])
    prompt[0] = 99
    assert wl.prompt_tokens[0] == 3
    with pytest.raises(ValueError):
        wl.prompt_tokens[0] = 1
    assert len(wl) == 2
    assert wl.arrival.tolist() == [0.0, 0.0]
    assert wl.is_offline


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prompt_tokens": [1, 0], "output_tokens": [1, 1]}, r"prompt_tokens\[1\] is 0"),
        ({"prompt_tokens": [1, -3], "output_tokens": [1, 1]}, r"must be in \[1, "),
        ({"prompt_tokens": [1, 2], "output_tokens": [1, np.nan]}, r"output_tokens\[1\] is nan"),
        ({"prompt_tokens": [1, 2], "output_tokens": [1, np.inf]}, "finite"),
        ({"prompt_tokens": [1.5, 2], "output_tokens": [1, 1]}, "whole numbers"),
        ({"prompt_tokens": [1, 2, 3], "output_tokens": [1, 1]}, "3 entries but output_tokens has 2"),
        ({"prompt_tokens": [[1, 2]], "output_tokens": [[1, 1]]}, "one-dimensional"),
        ({"prompt_tokens": [1], "output_tokens": [1], "arrival": [-1.0]}, "arrival"),
        ({"prompt_tokens": [1], "output_tokens": [1], "arrival": [np.nan]}, "finite"),
        ({"prompt_tokens": [1], "output_tokens": [1], "arrival": [0.0, 1.0]}, "arrival has 2"),
        ({"prompt_tokens": [1], "output_tokens": [1], "predicted_output": [0]}, "predicted_output"),
        ({"prompt_tokens": ["a"], "output_tokens": [1]}, "real numbers"),
        ({"prompt_tokens": [1j], "output_tokens": [1]}, "real numbers"),
        ({"prompt_tokens": [2**40], "output_tokens": [1]}, r"must be in \[1, 2147483647\]"),
        ({"prompt_tokens": [1e20], "output_tokens": [1]}, r"must be in \[1, 2147483647\]"),
        ({"prompt_tokens": [1], "output_tokens": [1], "arrival": ["1.5"]}, "real numbers of seconds"),
    ],
)
def test_bad_input_is_rejected_with_the_field_named(kwargs: dict, message: str) -> None:
    """Invalid token counts, arrivals and mismatched lengths raise a ValueError naming the field."""
    with pytest.raises(ValueError, match=message):
        Workload(**kwargs)


def test_replace_and_subset_return_new_validated_workloads() -> None:
    """replace() re-validates; subset() keeps every field aligned."""
    wl = Workload([1, 2, 3], [4, 5, 6], predicted_output=[7, 8, 9], arrival=[0, 1, 2], name="x")
    with pytest.raises(ValueError, match=r"output_tokens\[0\] is 0"):
        wl.replace(output_tokens=[0, 1, 1])
    with pytest.raises(ValueError, match="unknown Workload field"):
        wl.replace(outputs=[1, 1, 1])
    sub = wl.subset([2, 0])
    assert sub.prompt_tokens.tolist() == [3, 1]
    assert sub.predicted_output is not None and sub.predicted_output.tolist() == [9, 7]
    assert sub.arrival.tolist() == [2.0, 0.0]
    assert wl.replace(name="y").name == "y"


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
