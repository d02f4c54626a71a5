"""The shared argument checks: what each accepts, what it refuses, and what its messages say."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmsched.core.checks import (
    MAX_TOKENS,
    choice,
    flag,
    positive_int,
    probability,
    prompt_and_output,
    real,
    real_array,
    rng,
    seed,
    sizes,
    text,
    token_counts,
)


@pytest.mark.parametrize("value", [3, np.int64(3), np.int32(3), np.uint8(3)])
def test_numpy_integers_are_integers(value) -> None:
    """positive_int accepts numpy integers and returns a Python int."""
    out = positive_int("n", value)
    assert out == 3 and type(out) is int


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (True, TypeError, "n must be an integer, got bool True"),
        (2.0, TypeError, "n must be an integer, got float 2.0"),
        ("2", TypeError, "n must be an integer, got str '2'"),
        (None, TypeError, "n must be an integer, got NoneType None"),
        (0, ValueError, "n must be at least 1, got 0"),
        (10**12, ValueError, "n must be at most 1,000, got 1,000,000,000,000"),
    ],
)
def test_positive_int_names_the_value_and_the_range(value, error, message) -> None:
    """Wrong kinds are TypeErrors, out-of-range integers ValueErrors; both name n, the value and the limit."""
    with pytest.raises(error, match=message):
        positive_int("n", value, maximum=1000)


@pytest.mark.parametrize(
    ("kwargs", "value", "error", "message"),
    [
        ({"low": 0.0}, math.nan, ValueError, r"x must be a finite number >= 0, got nan"),
        ({"low": 0.0}, math.inf, ValueError, r"x must be a finite number >= 0, got inf"),
        ({"low": 0.0}, -1.0, ValueError, r"x must be a finite number >= 0, got -1.0"),
        ({"low": 0.0, "low_open": True}, 0.0, ValueError, r"x must be a finite number > 0, got 0.0"),
        ({"low": 0.0, "high": 1.0, "low_open": True}, 1.5, ValueError, r"x must be a number in \(0, 1\]"),
        ({"low": 0.0, "finite": False}, -math.inf, ValueError, r"x must be a number >= 0 \(inf allowed\)"),
        ({}, True, TypeError, r"x must be a finite number, got bool True"),
        ({}, "1", TypeError, r"x must be a finite number, got str '1'"),
        ({}, 1j, TypeError, r"x must be a finite number, got complex 1j"),
    ],
)
def test_real_refuses_nan_inf_and_out_of_range(kwargs, value, error, message) -> None:
    """real() refuses NaN always, infinities unless asked, and values outside the interval."""
    with pytest.raises(error, match=message):
        real("x", value, **kwargs)


def test_real_accepts_numpy_scalars_and_inf_when_asked() -> None:
    """numpy floats and ints are numbers; inf passes only with finite=False."""
    assert real("x", np.float32(0.5), low=0.0) == 0.5
    assert real("x", np.int64(2), low=0.0) == 2.0
    assert real("x", math.inf, low=0.0, finite=False) == math.inf
    assert probability("p", np.float64(1.0)) == 1.0
    with pytest.raises(ValueError, match=r"p must be a number in \[0, 1\], got 1.01"):
        probability("p", 1.01)


def test_seeds_and_generators() -> None:
    """Seeds are integers >= 0; rng() also takes a Generator (used as is) or None."""
    gen = np.random.default_rng(1)
    assert rng("seed", gen) is gen
    assert rng("seed", np.uint32(5)).integers(100) == np.random.default_rng(5).integers(100)
    assert seed("seed", np.int64(7)) == 7
    with pytest.raises(ValueError, match="seed must be an integer >= 0, a numpy Generator or None, got -1"):
        rng("seed", -1)
    with pytest.raises(TypeError, match=r"seed must be an integer >= 0 \(a seed\), got float 1.5"):
        seed("seed", 1.5)
    with pytest.raises(TypeError, match=r"seed must be an integer >= 0 \(a seed\), got bool True"):
        seed("seed", True)


@pytest.mark.parametrize(
    ("values", "error", "message"),
    [
        (None, TypeError, "xs must be an array of numbers, got NoneType"),
        ("12", TypeError, "xs must be an array of numbers, got str"),
        ([[1.0, 2.0]], ValueError, r"xs must be a 1-dimensional array, got shape \(1, 2\)"),
        (["a"], ValueError, "xs must hold real numbers, got dtype <U1"),
        ([1.0, math.nan], ValueError, r"xs\[1\] is nan; values must be finite"),
        ([1.0, -2.0], ValueError, r"xs\[1\] is -2.0; values must be >= 0"),
    ],
)
def test_real_array_points_at_the_bad_entry(values, error, message) -> None:
    """A bad array names itself and the first bad entry by index."""
    with pytest.raises(error, match=message):
        real_array("xs", values, low=0.0)


def test_sizes_return_their_input_unchanged() -> None:
    """sizes() passes good sizes through as they are (so results do not move) and refuses bad ones."""
    arr = np.array([0, 3, 7])
    assert sizes("tokens", arr) is arr
    assert sizes("tokens", np.int64(4)) == 4
    assert np.array_equal(sizes("tokens", [1, 2]), [1, 2])
    with pytest.raises(ValueError, match="tokens must be a finite number >= 0, got nan"):
        sizes("tokens", math.nan)
    with pytest.raises(ValueError, match="tokens must hold numbers >= 0, got -1"):
        sizes("tokens", np.array([1, -1]))
    with pytest.raises(TypeError, match="tokens must be a number >= 0 or an array of them, got bool True"):
        sizes("tokens", True)


@given(st.lists(st.integers(1, MAX_TOKENS), max_size=20))
def test_token_counts_accept_every_valid_count(values: list[int]) -> None:
    """Every whole count in [1, MAX_TOKENS], as ints or as floats, comes back equal and read-only."""
    ints = token_counts("counts", values)
    floats = token_counts("counts", np.array(values, dtype=np.float64))
    assert ints.tolist() == values == floats.tolist()
    assert not ints.flags.writeable


def test_flags_names_and_choices() -> None:
    """Flags are bools only, names str only, choices one of the listed strings."""
    assert flag("on", np.bool_(True)) is True
    assert text("name", "x") == "x"
    assert choice("mode", "a", ("a", "b")) == "a"
    with pytest.raises(TypeError, match="on must be True or False, got str 'yes'"):
        flag("on", "yes")
    with pytest.raises(TypeError, match="on must be True or False, got int 1"):
        flag("on", 1)
    with pytest.raises(TypeError, match="name must be a str, got int 3"):
        text("name", 3)
    with pytest.raises(ValueError, match=r"mode must be one of \['a', 'b'\], got 'c'"):
        choice("mode", "c", ("a", "b"))


def test_prompt_and_output_come_in_pairs() -> None:
    """Prompt and output lengths are token counts of one length each; a mismatch says what
    needs both."""
    prompt, output = prompt_and_output([3, 4], [5.0, 6.0], "request")
    assert prompt.tolist() == [3, 4] and output.tolist() == [5, 6] and not output.flags.writeable
    with pytest.raises(ValueError, match="output_tokens has 1; every training example needs both"):
        prompt_and_output([3, 4], [5], "training example")
    with pytest.raises(ValueError, match=r"output_tokens\[0\] is 0"):
        prompt_and_output([3], [0], "request")
