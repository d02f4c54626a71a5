"""Workload generators and trace loaders.

``gsm8k`` builds the paper's experiment: the 1,319 GSM8K test prompts with their real
LLaMA token counts, and output lengths shaped like the LLaMA-65B generations reported for
them. ``exegpt_task`` draws the five tasks of ExeGPT's Table 3. The loaders read the
project's own CSV format and the request traces of Vidur and SplitwiseSim.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from importlib import resources
from os import PathLike
from typing import Any

import numpy as np

from llmsched._checks import (
    MAX_REQUESTS,
    MAX_TOKENS,
    choice,
    instance,
    nonnegative_int,
    path_arg,
    positive_int,
    real,
    rng,
    text,
)
from llmsched.workload import Workload

__all__ = [
    "EXEGPT_TASKS",
    "GSM8K_OUTPUT_MAX",
    "GSM8K_OUTPUT_MEAN",
    "GSM8K_OUTPUT_SD",
    "LengthSpec",
    "exegpt_task",
    "from_csv",
    "from_splitwise_trace",
    "from_vidur_trace",
    "gsm8k",
    "gsm8k_lengths",
    "gsm8k_like",
    "to_csv",
    "truncated_normal_lengths",
]

# LLaMA-65B output statistics on GSM8K, as reported by Pang et al. (Table III and Sec. V-A).
GSM8K_OUTPUT_MEAN = 344.83
GSM8K_OUTPUT_SD = 187.99
GSM8K_OUTPUT_MAX = 512

# The output model (see ``gsm8k``): a request either runs away to the 512-token cap, or
# writes a solution ``_SHORT_SCALE`` times as long as the human reference answer. The two
# constants solve  q*512 + (1-q)*c*E[a] = 344.83  and  q*512^2 + (1-q)*c^2*E[a^2] =
# 344.83^2 + 187.99^2  over the 1,319 reference-answer lengths a.
_RUNAWAY_SHARE = 0.5459412060972841
_SHORT_SCALE = 1.091076328775918


def _rng(seed: int | np.random.Generator | None) -> np.random.Generator:
    return rng("seed", seed)


@functools.lru_cache(maxsize=1)
def gsm8k_lengths() -> tuple[np.ndarray, np.ndarray]:
    """The GSM8K test split's LLaMA token counts, in file order.

    Returns
    -------
    prompt_tokens, answer_tokens
        Per problem: the question's length in LLaMA tokens (with BOS), and the reference
        answer's length (without BOS). Read-only arrays of 1,319 entries.
    """
    text = resources.files("llmsched").joinpath("data/gsm8k_lengths_llama.csv").read_text()
    table = np.loadtxt(text.splitlines(), delimiter=",", skiprows=1, dtype=np.int64)
    prompt, answer = table[:, 1].copy(), table[:, 2].copy()
    prompt.setflags(write=False)
    answer.setflags(write=False)
    return prompt, answer


def gsm8k(seed: int | np.random.Generator | None = 0, outputs: str = "llama65b") -> Workload:
    """The GSM8K experiment of Pang et al.: 1,319 requests, all present at time 0.

    Prompt lengths are the real LLaMA token counts of the GSM8K test questions.

    Parameters
    ----------
    seed
        Seed (or generator) for the output lengths; the same seed gives the same workload.
    outputs
        ``"llama65b"`` (default): outputs shaped like the LLaMA-65B generations of the
        paper (mean 344.83, sd 187.99, max 512). ``"answers"``: the real lengths of the
        human reference answers (mean 131.8, sd 56.7, max 428); ``seed`` is then unused.

    Notes
    -----
    Only the moments of the LLaMA-65B outputs are public. A standard deviation of 188
    tokens about a mean of 345 under a 512 cap cannot come from a unimodal distribution
    such as a truncated normal: much of the mass has to sit at the cap. We model a
    generation as one of two kinds:

    * a *runaway*: the model keeps writing until the 512-token cap stops it. Exactly
      ``round(0.546 * n)`` requests, chosen at random, are runaways;
    * a *finished* solution, whose length is the human reference answer of the same
      question scaled by 1.091 (LLaMA-65B writes slightly longer solutions than people).

    The share 0.546 and the scale 1.091 are the unique pair that makes the mixture's mean
    and standard deviation equal the reported ones over the 1,319 reference answers. Using
    the real answers keeps their correlation with the prompt length (0.50), which length
    predictors can learn from. Fixing the number of runaways (rather than drawing it)
    keeps every seed's moments within 1% (mean) and 2% (sd) of the reported values.
    """
    choice("outputs", outputs, ("llama65b", "answers"))
    generator = _rng(seed)
    prompt, answer = gsm8k_lengths()
    if outputs == "answers":
        return Workload(prompt, answer, name="gsm8k-answers")
    return Workload(prompt, _llama65b_outputs(answer, generator), name="gsm8k")


def _llama65b_outputs(answer: np.ndarray, generator: np.random.Generator) -> np.ndarray:
    n = answer.size
    finished = np.clip(np.rint(answer * _SHORT_SCALE), 1, GSM8K_OUTPUT_MAX - 1).astype(np.int64)
    runaway = np.zeros(n, dtype=bool)
    runaway[generator.choice(n, size=round(_RUNAWAY_SHARE * n), replace=False)] = True
    return np.where(runaway, GSM8K_OUTPUT_MAX, finished)


def gsm8k_like(n: int, seed: int | np.random.Generator | None = 0) -> Workload:
    """``n`` GSM8K-shaped requests: GSM8K problems drawn with replacement, outputs as in :func:`gsm8k`.

    Each request is a GSM8K test problem chosen uniformly at random; its prompt is that
    problem's real token count and its output follows the same runaway-or-finished model
    as :func:`gsm8k` (so the output moments match the reported LLaMA-65B ones for large ``n``).

    Raises
    ------
    TypeError, ValueError
        If ``n`` is not an integer in ``[1, MAX_REQUESTS]`` or ``seed`` is not a seed.
    """
    n = positive_int("n", n, maximum=MAX_REQUESTS)
    generator = _rng(seed)
    prompt, answer = gsm8k_lengths()
    pick = generator.integers(0, prompt.size, size=n)
    return Workload(prompt[pick], _llama65b_outputs(answer[pick], generator), name=f"gsm8k-like-{n}")


@dataclass(frozen=True)
class LengthSpec:
    """Mean, standard deviation and maximum of a token-length distribution.

    ``max`` is a token count (at most ``MAX_TOKENS``), ``mean`` lies in ``[1, max]`` and
    ``sd`` is finite and positive.
    """

    mean: float
    sd: float
    max: int

    def __post_init__(self) -> None:
        positive_int("max", self.max, maximum=MAX_TOKENS)
        real("mean", self.mean, low=1.0)
        real("sd", self.sd, low=0.0, low_open=True)
        if self.mean > self.max:
            raise ValueError(f"mean must be at most max={self.max}, got {self.mean!r}")


# ExeGPT Table 3: (input, output) length statistics of its five NLP tasks.
EXEGPT_TASKS: dict[str, tuple[LengthSpec, LengthSpec]] = {
    "S": (LengthSpec(256, 252, 512), LengthSpec(32, 13, 80)),  # summarization
    "T": (LengthSpec(128, 81, 256), LengthSpec(128, 68, 320)),  # translation
    "G": (LengthSpec(64, 23, 128), LengthSpec(192, 93, 480)),  # code generation
    "C1": (LengthSpec(256, 115, 512), LengthSpec(64, 30, 160)),  # conversation 1
    "C2": (LengthSpec(512, 252, 1024), LengthSpec(256, 134, 640)),  # conversation 2
}


def truncated_normal_lengths(
    spec: LengthSpec, n: int, seed: int | np.random.Generator | None = 0
) -> np.ndarray:
    """Draw ``n`` integer lengths from a normal(spec.mean, spec.sd) truncated to [1, spec.max].

    As in ExeGPT (Sec. 7), the table's mean and sd are the parameters of the normal before
    truncation; the drawn lengths have a somewhat different mean and a smaller sd where
    the bounds cut the normal (task S's inputs, sd 252 on [1, 512], most of all).
    Draws are by inverse CDF on [0.5, max + 0.5], rounded to the nearest integer.
    """
    from scipy.stats import truncnorm

    instance("spec", spec, LengthSpec, "a LengthSpec")
    n = nonnegative_int("n", n, maximum=MAX_REQUESTS)
    low, high = 0.5, spec.max + 0.5
    a, b = (low - spec.mean) / spec.sd, (high - spec.mean) / spec.sd
    draws = truncnorm.rvs(a, b, loc=spec.mean, scale=spec.sd, size=n, random_state=_rng(seed))
    return np.clip(np.rint(draws), 1, spec.max).astype(np.int64)


def exegpt_task(task: str, n: int = 1000, seed: int | np.random.Generator | None = 0) -> Workload:
    """``n`` requests of one of ExeGPT's tasks (Table 3): ``S``, ``T``, ``G``, ``C1`` or ``C2``.

    Input and output lengths are independent truncated normals with the table's
    (mean, sd, max); see :func:`truncated_normal_lengths`.
    """
    key = task.upper() if isinstance(task, str) else None
    if key not in EXEGPT_TASKS:
        raise ValueError(f"unknown ExeGPT task {task!r}; choose one of {sorted(EXEGPT_TASKS)}")
    n = positive_int("n", n, maximum=MAX_REQUESTS)
    generator = _rng(seed)
    spec_in, spec_out = EXEGPT_TASKS[key]
    prompt = truncated_normal_lengths(spec_in, n, generator)
    output = truncated_normal_lengths(spec_out, n, generator)
    return Workload(prompt, output, name=f"exegpt-{key}")


def _read_table(path: str | PathLike[str], columns: tuple[str, ...], fmt: str) -> Any:
    """The CSV at ``path`` as a DataFrame with at least ``columns`` and one row.

    Every way a file can fail to be such a table (missing, a folder, not UTF-8, not CSV,
    no rows, a column missing) is a ValueError that names the file.
    """
    import pandas as pd

    path_arg("path", path)
    expected = f"a {fmt} file: UTF-8 CSV with a header naming {', '.join(columns)} and one row per request"
    if not os.path.exists(path):
        raise ValueError(f"path {str(path)!r} does not exist; expected {expected}")
    if os.path.isdir(path):
        raise ValueError(f"path {str(path)!r} is a folder; expected {expected}")
    try:
        frame = pd.read_csv(path, encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text; expected {expected}") from None
    except pd.errors.EmptyDataError:
        raise ValueError(f"{path}: the file is empty; expected {expected}") from None
    except (pd.errors.ParserError, ValueError, OSError) as exc:
        message = " ".join(str(exc).split())
        raise ValueError(f"{path}: not a readable CSV table ({message}); expected {expected}") from None
    missing = [col for col in columns if col not in frame.columns]
    if missing:
        raise ValueError(
            f"{path}: not a {fmt} file; missing column(s) {missing}, found {list(frame.columns)}"
        )
    if len(frame) == 0:
        raise ValueError(f"{path}: the table has a header but no requests; expected {expected}")
    return frame


def _workload_from(path: str | PathLike[str], fmt: str, columns: dict[str, str], **fields: Any) -> Workload:
    """A Workload from a file's columns; a bad value is reported with the file and its column."""
    try:
        return Workload(**fields)
    except (TypeError, ValueError) as exc:
        read_as = ", ".join(f"{col} as {field}" for field, col in columns.items() if field != col)
        mapping = f" (this {fmt} reader reads {read_as})" if read_as else ""
        raise ValueError(f"{path}: {exc}{mapping}") from None


def _load_trace(
    path: str | PathLike[str], name: str | None, fmt: str, arrival: str, prompt: str, output: str
) -> Workload:
    frame = _read_table(path, (arrival, prompt, output), fmt)
    return _workload_from(
        path,
        fmt,
        {"prompt_tokens": prompt, "output_tokens": output, "arrival": arrival},
        prompt_tokens=frame[prompt].to_numpy(),
        output_tokens=frame[output].to_numpy(),
        arrival=frame[arrival].to_numpy(),
        name=_name(name, path),
    )


def _name(name: Any, path: str | PathLike[str]) -> str:
    if name is None:
        return str(path)
    return text("name", name) or str(path)


def from_csv(path: str | PathLike[str], name: str | None = None) -> Workload:
    """Read the project's CSV: ``prompt_tokens,output_tokens[,predicted_output][,arrival]``.

    Raises
    ------
    ValueError
        If the file is missing, not UTF-8 CSV, has no rows or lacks a column, or a value is
        not a valid token count or arrival time; the message names the file.
    TypeError
        If ``path`` is not a path or ``name`` not a str.
    """
    path_arg("path", path)
    label = _name(name, path)
    frame = _read_table(path, ("prompt_tokens", "output_tokens"), "llmsched workload")
    fields = ("prompt_tokens", "output_tokens", "predicted_output", "arrival")
    return _workload_from(
        path,
        "llmsched workload",
        {},
        **{field: frame[field].to_numpy() for field in fields if field in frame.columns},
        name=label,
    )


def to_csv(workload: Workload, path: str | PathLike[str]) -> None:
    """Write a workload in the format :func:`from_csv` reads.

    Raises
    ------
    TypeError
        If ``workload`` is not a Workload or ``path`` not a path.
    ValueError
        If ``path`` cannot be written (a folder, or in a folder that does not exist).
    """
    instance("workload", workload, Workload, "a llmsched.Workload")
    path_arg("path", path)
    try:
        workload.to_frame().to_csv(path, index=False)
    except OSError as exc:
        raise ValueError(f"path {str(path)!r} cannot be written: {exc.strerror or exc}") from None


def from_vidur_trace(path: str | PathLike[str], name: str | None = None) -> Workload:
    """Read a Vidur request trace (columns ``arrived_at,num_prefill_tokens,num_decode_tokens``).

    Bad files and values raise as in :func:`from_csv`.
    """
    path_arg("path", path)
    return _load_trace(path, name, "Vidur trace", "arrived_at", "num_prefill_tokens", "num_decode_tokens")


def from_splitwise_trace(path: str | PathLike[str], name: str | None = None) -> Workload:
    """Read a SplitwiseSim trace (columns ``arrival_timestamp, prompt_size, token_size``, among others).

    Bad files and values raise as in :func:`from_csv`.
    """
    path_arg("path", path)
    return _load_trace(path, name, "SplitwiseSim trace", "arrival_timestamp", "prompt_size", "token_size")
