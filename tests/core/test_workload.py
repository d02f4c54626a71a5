"""Workload construction and validation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

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
        ({"prompt_tokens": [True, False], "output_tokens": [1, 1]}, "prompt_tokens must hold real numbers"),
        ({"prompt_tokens": [1], "output_tokens": [1], "arrival": [np.inf]}, r"arrival\[0\] is inf"),
        ({"prompt_tokens": [1], "output_tokens": [1], "predicted_output": [1, 2]}, "predicted_output has 2"),
    ],
)
def test_bad_input_is_rejected_with_the_field_named(kwargs: dict, message: str) -> None:
    """Invalid token counts, arrivals and mismatched lengths raise a ValueError naming the field."""
    with pytest.raises(ValueError, match=message):
        Workload(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"prompt_tokens": None, "output_tokens": [1]},
            "prompt_tokens must be an array of token counts, got NoneType",
        ),
        (
            {"prompt_tokens": [1], "output_tokens": "12"},
            "output_tokens must be an array of token counts, got str",
        ),
        (
            {"prompt_tokens": [1], "output_tokens": [1], "arrival": "0.5"},
            "arrival must be an array of seconds",
        ),
        ({"prompt_tokens": [1], "output_tokens": [1], "name": None}, "name must be a str, got NoneType"),
        ({"prompt_tokens": [1], "output_tokens": [1], "name": 7}, "name must be a str, got int 7"),
    ],
)
def test_wrong_kinds_of_value_are_type_errors(kwargs: dict, message: str) -> None:
    """Something that is not an array (or a name that is not a str) is a TypeError naming the field."""
    with pytest.raises(TypeError, match=message):
        Workload(**kwargs)


def test_numpy_dtypes_are_accepted() -> None:
    """Token counts of any numpy integer or whole float dtype, and float32 arrivals, are good input."""
    wl = Workload(
        np.array([1, 2], dtype=np.uint8),
        np.array([3.0, 4.0], dtype=np.float32),
        predicted_output=np.array([5, 6], dtype=np.int16),
        arrival=np.array([0.0, 0.5], dtype=np.float32),
    )
    assert wl.prompt_tokens.dtype == np.int64 and wl.output_tokens.tolist() == [3, 4]
    assert wl.arrival.tolist() == [0.0, 0.5]


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


@pytest.mark.parametrize(
    ("index", "error", "message"),
    [
        ([3], ValueError, "index holds 3; a workload of 3 requests has indices -3 to 2"),
        ([-4], ValueError, "index holds -4"),
        ([True, False], ValueError, "index is a mask of 2 entries; the workload has 3 requests"),
        ([[0, 1]], ValueError, r"index must be .* \(one-dimensional\), got shape \(1, 2\)"),
        (1, ValueError, r"index must be .* \(one-dimensional\), got shape \(\)"),
        (
            [0.5],
            TypeError,
            "index must be a slice, a boolean mask or an array of request indices, got dtype float64",
        ),
        ("0", TypeError, "index must be a slice, a boolean mask or an array of request indices, got str"),
    ],
)
def test_subset_refuses_bad_indices(index, error, message) -> None:
    """An index out of range, a mask of the wrong length or a non-index is refused, naming the index."""
    wl = Workload([1, 2, 3], [4, 5, 6])
    with pytest.raises(error, match=message):
        wl.subset(index)


def test_subset_takes_numpy_indices_and_masks() -> None:
    """numpy integer arrays, negative indices and boolean masks select requests in order."""
    wl = Workload([1, 2, 3], [4, 5, 6])
    assert wl.subset(np.array([2, -3], dtype=np.int32)).prompt_tokens.tolist() == [3, 1]
    assert wl.subset(np.array([True, False, True])).output_tokens.tolist() == [4, 6]
    assert wl.subset(slice(1, None)).prompt_tokens.tolist() == [2, 3]
    assert len(wl.subset([])) == 0


@given(
    st.integers(1, 40).flatmap(
        lambda n: st.tuples(
            st.lists(st.integers(1, 2**31 - 1), min_size=n, max_size=n),
            st.lists(st.integers(1, 5000), min_size=n, max_size=n),
            st.one_of(st.none(), st.lists(st.integers(1, 5000), min_size=n, max_size=n)),
            st.lists(st.floats(0, 1e6, allow_nan=False, allow_subnormal=False), min_size=n, max_size=n),
        )
    )
)
def test_csv_round_trip_of_random_workloads(arrays) -> None:
    """Any valid workload written by to_csv reads back equal, field for field, through from_csv."""
    import tempfile
    from pathlib import Path

    prompt, output, predicted, arrival = arrays
    wl = Workload(prompt, output, predicted_output=predicted, arrival=arrival, name="w")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "w.csv"
        workloads.to_csv(wl, path)
        back = workloads.from_csv(path, name="w")
    assert np.array_equal(back.prompt_tokens, wl.prompt_tokens)
    assert np.array_equal(back.output_tokens, wl.output_tokens)
    assert (back.predicted_output is None) == (predicted is None)
    if predicted is not None:
        assert back.predicted_output is not None and np.array_equal(
            back.predicted_output, wl.predicted_output
        )
    assert np.array_equal(back.arrival, wl.arrival)  # floats survive the text round trip exactly
