"""Workload generators, trace loaders and arrival processes.

``gsm8k`` builds the paper's experiment: the 1,319 GSM8K test prompts with their real
LLaMA token counts, and output lengths shaped like the LLaMA-65B generations reported for
them. ``exegpt_task`` draws the five tasks of ExeGPT's Table 3. The loaders read the
project's own CSV format, the request traces of Vidur and SplitwiseSim, and Microsoft's
Azure LLM inference traces. :func:`prepare` replays a workload faster, clips its lengths,
or gives it arrival times drawn from a Poisson or gamma process; every loader takes its
options.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from os import PathLike
from typing import Any

import numpy as np

from llmsched.core.checks import (
    MAX_REQUESTS,
    MAX_TOKENS,
    choice,
    flag,
    instance,
    nonnegative_int,
    path_arg,
    positive_int,
    real,
    rng,
    text,
)
from llmsched.core.checks import seed as check_seed
from llmsched.core.workload import Workload

__all__ = [
    "ARRIVALS_HELP",
    "AZURE_TRACES",
    "CSV_FIELDS",
    "EXEGPT_TASKS",
    "GSM8K_OUTPUT_MAX",
    "GSM8K_OUTPUT_MEAN",
    "GSM8K_OUTPUT_SD",
    "MICO_OUTPUTS",
    "PREPARE_OPTIONS",
    "ArrivalProcess",
    "LengthSpec",
    "PrepareOptions",
    "PrepareReport",
    "azure_code_sizes",
    "azure_sizes",
    "baton_like",
    "csv_columns",
    "exegpt_task",
    "from_azure_trace",
    "from_csv",
    "from_splitwise_trace",
    "from_vidur_trace",
    "gamma_arrivals",
    "gsm8k",
    "gsm8k_lengths",
    "gsm8k_like",
    "gsm8k_questions",
    "mico_like",
    "poisson_arrivals",
    "prepare",
    "prepare_report",
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


def gsm8k_questions(folder: str | PathLike[str]) -> list[str]:
    """The GSM8K test split's questions, in file order (the order of :func:`gsm8k_lengths`),
    read from ``folder``'s ``test.jsonl`` (one JSON object with a ``question`` a line).

    The package ships the token counts only; the text is read from a copy of the dataset the
    caller has (GSM8K, MIT license), for the predictors that read prompts
    (:class:`~llmsched.online.text.TextRidge`).

    Raises
    ------
    FileNotFoundError
        ``folder`` holds no ``test.jsonl``.
    ValueError
        A line that is not a JSON object with a str ``question``, or a count of questions other
        than the 1,319 of the token counts.
    """
    import json
    from pathlib import Path

    path = Path(folder) / "test.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"no GSM8K test split at {path}: give the folder that holds test.jsonl")
    questions = []
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}, line {number}: not JSON ({exc.msg})") from None
            if not isinstance(row, dict) or not isinstance(row.get("question"), str):
                raise ValueError(f"{path}, line {number}: no str 'question'")
            questions.append(row["question"])
    expected = len(gsm8k_lengths()[0])
    if len(questions) != expected:
        raise ValueError(f"{path} holds {len(questions)} questions; the GSM8K test split has {expected}")
    return questions


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


def baton_like(
    kind: str = "short", seed: int | np.random.Generator | None = 0, double: bool = False
) -> Workload:
    """Baton's query sets, as its Sec. 5.1 states them (it publishes no queries): a stated shape.

    ``short``: 30 queries whose input and response each run from a few dozen to 200 words
    (drawn uniformly from 30-200). ``mixed``: 120 queries, long input and short output, short
    input and long output, and short both, in the ratio 1:1:2, shuffled; "long" about 4,000
    words (3,600-4,400), "short" a few dozen to 400 (30-400). Words become tokens at 4/3 a word
    (English under a BPE vocabulary). ``double`` doubles every length, as Baton's Table 1 does
    at batch size 4.

    Raises
    ------
    ValueError
        An unknown ``kind``.
    """
    generator = _rng(seed)

    def words(low: int, high: int, n: int) -> np.ndarray:
        return np.rint(generator.integers(low, high + 1, n) * 4 / 3).astype(np.int64)

    if kind == "short":
        prompt, output = words(30, 200, 30), words(30, 200, 30)
    elif kind == "mixed":
        long_in = (words(3600, 4400, 30), words(30, 400, 30))
        long_out = (words(30, 400, 30), words(3600, 4400, 30))
        short = (words(30, 400, 60), words(30, 400, 60))
        prompt = np.concatenate([long_in[0], long_out[0], short[0]])
        output = np.concatenate([long_in[1], long_out[1], short[1]])
        order = generator.permutation(len(prompt))
        prompt, output = prompt[order], output[order]
    else:
        raise ValueError(f"kind must be 'short' or 'mixed', got {kind!r}")
    scale = 2 if double else 1
    return Workload(scale * prompt, scale * output, name=f"baton-{kind}" + ("-doubled" if double else ""))


#: The output-length shapes :func:`mico_like` draws, all with the same mean.
MICO_OUTPUTS = ("geometric", "normal", "lognormal", "constant", "empirical")


def mico_like(
    n: int = 800,
    seed: int | np.random.Generator | None = 0,
    eos_mean: float = 300.0,
    context: int = 1024,
    outputs: str = "geometric",
    shape: Any = None,
) -> Workload:
    """``n`` queries shaped like Mico's experiment: Alpaca instructions answered by GPT-2.

    A stated shape, not measured outputs (Mico reports neither its prompt nor its response
    lengths): prompts are log-normal around 27 tokens (sd 0.6 in log space, clipped to
    [4, 256], an Alpaca instruction with its template); GPT-2, not tuned to follow
    instructions, stops at an end-of-sequence token with a constant hazard per token
    (geometric lengths of mean ``eos_mean``) or at its ``context`` of 1,024 tokens, prompt
    included, where Mico's engines cut it.

    ``outputs`` draws the output lengths from another shape with the same mean (the expected
    mean of the clipped geometric lengths, 289 tokens with the defaults), each clipped to the
    context left after its prompt, so that what Mico's ratios rest on can be varied alone:
    ``normal`` (a normal of sd half its mean, at least one token), ``lognormal`` (sd 1 in log
    space), ``constant`` (every output the mean), ``empirical`` (drawn from the lengths in
    ``shape``, e.g. a trace's outputs, scaled). The mean is held to within one token over the
    ``n`` draws; the prompts are those of the geometric draw.

    Raises
    ------
    TypeError, ValueError
        A bad ``n``, ``seed``, ``eos_mean`` (> 1), ``context`` (more than 256 tokens),
        ``outputs`` (one of :data:`MICO_OUTPUTS`) or ``shape`` (positive lengths, given with
        ``empirical`` only).
    """
    n = positive_int("n", n, maximum=MAX_REQUESTS)
    eos_mean = real("eos_mean", eos_mean, low=1.0, low_open=True)
    context = positive_int("context", context, minimum=257, maximum=MAX_TOKENS)
    if outputs not in MICO_OUTPUTS:
        raise ValueError(f"outputs must be one of {', '.join(MICO_OUTPUTS)}, got {outputs!r}")
    if (shape is not None) != (outputs == "empirical"):
        raise ValueError("shape gives the lengths of outputs='empirical', and only of it")
    if shape is not None:
        shape = np.asarray(shape, dtype=np.float64).ravel()
        if not shape.size or not np.all(np.isfinite(shape)) or shape.min() <= 0:
            raise ValueError("shape must hold at least one positive, finite length")
    generator = _rng(seed)
    prompt = np.clip(np.rint(generator.lognormal(np.log(27.0), 0.6, n)), 4, 256).astype(np.int64)
    output = np.minimum(generator.geometric(1.0 / eos_mean, n), context - prompt)
    name = f"mico-like-{n}"
    if outputs != "geometric":
        room = context - prompt
        # The clipped geometric's expected mean: E[min(G, c)] = (1 - (1 - q)^c) / q.
        q = 1.0 / eos_mean
        target = float(np.mean((1.0 - (1.0 - q) ** room) / q))
        if outputs == "normal":
            unit = np.maximum(1.0 + 0.5 * generator.standard_normal(n), 0.0)
        elif outputs == "lognormal":
            unit = np.exp(generator.standard_normal(n) - 0.5)
        elif outputs == "constant":
            unit = np.ones(n)
        else:
            unit = generator.choice(shape, n) / shape.mean()
        output = _scaled_to_mean(unit, room, target)
        name += f"-{outputs}"
    return Workload(prompt, output, name=name)


def _scaled_to_mean(unit: np.ndarray, room: np.ndarray, target: float) -> np.ndarray:
    """``rint(scale * unit)`` clipped to ``[1, room]``, the scale found by bisection so that the
    mean is ``target`` (the clipped mean grows with the scale)."""

    def lengths(scale: float) -> np.ndarray:
        return np.clip(np.rint(scale * unit), 1, room).astype(np.int64)

    low, high = 0.0, 2.0 * target
    while lengths(high).mean() < target and high < 1e9:
        high *= 2.0
    for _ in range(60):
        middle = 0.5 * (low + high)
        if lengths(middle).mean() < target:
            low = middle
        else:
            high = middle
    return lengths(high)


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


# ---------------------------------------------------------------- arrival processes

ARRIVALS_HELP = (
    "poisson:RATE | gamma:RATE,CV (RATE: requests per second > 0; CV: coefficient of variation "
    "of the gaps > 0)"
)
_ARRIVAL_FIELDS = {"poisson": ("RATE",), "gamma": ("RATE", "CV")}


def _gap_parameters(rate: float, cv: float) -> tuple[float, float]:
    """Shape and scale of gamma gaps with mean ``1/rate`` and coefficient of variation ``cv``.

    Raises ValueError when either is not a finite number > 0 in double precision (a rate or
    a cv so extreme that the gaps cannot be drawn).
    """
    with np.errstate(all="ignore"):
        variance = np.float64(cv) * np.float64(cv)
        shape, scale = float(1.0 / variance), float(variance / np.float64(rate))
    if not (0.0 < shape < math.inf and 0.0 < scale < math.inf):
        raise ValueError(
            f"arrivals at rate {rate!r} with cv {cv!r} have gaps of shape 1/cv^2 = {shape!r} and "
            f"scale cv^2/rate = {scale!r}; both must be finite and > 0 in double precision"
        )
    return shape, scale


def _arrivals_from_gaps(gaps: np.ndarray, rate: float) -> np.ndarray:
    """The first request at 0, each later one a gap after the one before."""
    out = np.zeros(gaps.size + 1, dtype=np.float64)
    with np.errstate(over="ignore"):  # an overflow is reported below, with the rate
        np.cumsum(gaps, out=out[1:])
    if not math.isfinite(out[-1]):
        raise ValueError(f"rate {rate!r} is too small: the arrival times overflow double precision")
    return out


def poisson_arrivals(n: int, rate: float, seed: int | np.random.Generator | None = 0) -> np.ndarray:
    """Arrival times (seconds) of ``n`` requests from a Poisson process of ``rate`` per second.

    The first request arrives at 0, as in a trace whose times count from its first request;
    request ``i`` arrives ``i`` exponential gaps of mean ``1/rate`` later. The same seed
    gives the same times, bit for bit.

    Returns
    -------
    numpy.ndarray
        ``n`` float64 times, sorted, the first 0.

    Raises
    ------
    TypeError, ValueError
        If ``n`` is not an integer in ``[0, MAX_REQUESTS]``, ``rate`` not a finite number
        > 0 (or so small that the times overflow), or ``seed`` not a seed.
    """
    n = nonnegative_int("n", n, maximum=MAX_REQUESTS)
    rate = real("rate", rate, low=0.0, low_open=True)
    _, scale = _gap_parameters(rate, 1.0)
    generator = _rng(seed)
    if n == 0:
        return np.zeros(0, dtype=np.float64)
    return _arrivals_from_gaps(generator.exponential(scale, size=n - 1), rate)


def gamma_arrivals(n: int, rate: float, cv: float, seed: int | np.random.Generator | None = 0) -> np.ndarray:
    """Arrival times (seconds) of ``n`` requests whose gaps are gamma with mean ``1/rate`` and
    coefficient of variation ``cv``.

    The gaps have shape ``1/cv**2`` and scale ``cv**2/rate``: ``cv = 1`` is a Poisson process
    (in distribution; the draws differ from :func:`poisson_arrivals`), ``cv > 1`` burstier
    traffic, ``cv < 1`` more regular. The first request arrives at 0, as in
    :func:`poisson_arrivals`.

    Returns
    -------
    numpy.ndarray
        ``n`` float64 times, sorted, the first 0.

    Raises
    ------
    TypeError, ValueError
        As :func:`poisson_arrivals`, and if ``cv`` is not a finite number > 0.
    """
    n = nonnegative_int("n", n, maximum=MAX_REQUESTS)
    rate = real("rate", rate, low=0.0, low_open=True)
    cv = real("cv", cv, low=0.0, low_open=True)
    shape, scale = _gap_parameters(rate, cv)
    generator = _rng(seed)
    if n == 0:
        return np.zeros(0, dtype=np.float64)
    return _arrivals_from_gaps(generator.gamma(shape, scale, size=n - 1), rate)


def _spec_number(value: float) -> str:
    shown = repr(value)
    return shown.removesuffix(".0")


@dataclass(frozen=True)
class ArrivalProcess:
    """A renewal process of request arrivals: independent gaps with mean ``1/rate`` seconds.

    ``str(process)`` is its spec (``poisson:2`` or ``gamma:2,3``), which :meth:`parse` reads.

    Parameters
    ----------
    kind
        ``"poisson"``: exponential gaps (:func:`poisson_arrivals`; ``cv`` is 1).
        ``"gamma"``: gamma gaps with coefficient of variation ``cv`` (:func:`gamma_arrivals`).
    rate
        Requests per second: a finite number > 0.
    cv
        Coefficient of variation of the gaps: a finite number > 0.
    """

    kind: str
    rate: float
    cv: float = 1.0

    def __post_init__(self) -> None:
        choice("kind", self.kind, _ARRIVAL_FIELDS)
        rate = real("rate", self.rate, low=0.0, low_open=True)
        cv = real("cv", self.cv, low=0.0, low_open=True)
        if self.kind == "poisson" and cv != 1.0:
            raise ValueError(f"a poisson process has cv 1, got cv={cv!r}; use kind='gamma' for another cv")
        _gap_parameters(rate, cv)
        object.__setattr__(self, "rate", rate)
        object.__setattr__(self, "cv", cv)

    @classmethod
    def parse(cls, spec: str) -> ArrivalProcess:
        """The process a spec names: ``poisson:RATE`` or ``gamma:RATE,CV`` (see ``ARRIVALS_HELP``).

        Raises
        ------
        TypeError
            If ``spec`` is not a str.
        ValueError
            An unknown process, the wrong number of fields, or a field that is not a number
            in its range; the message names the spec and the field.
        """
        if not isinstance(spec, str):
            raise TypeError(f"arrivals must be a spec string ({ARRIVALS_HELP}), got {type(spec).__name__}")
        kind, sep, arg = spec.partition(":")
        fields = _ARRIVAL_FIELDS.get(kind.strip())
        if fields is None or not sep:
            raise ValueError(f"unknown arrivals {spec!r}; expected {ARRIVALS_HELP}")
        parts = [part.strip() for part in arg.split(",")]
        if len(parts) != len(fields):
            raise ValueError(
                f"bad arrivals {spec!r}: {kind.strip()} takes {','.join(fields)}; expected {ARRIVALS_HELP}"
            )
        values = []
        for field, part in zip(fields, parts, strict=True):
            try:
                values.append(float(part))
            except ValueError:
                raise ValueError(
                    f"bad arrivals {spec!r}: {field} must be a number, got {part!r}; expected {ARRIVALS_HELP}"
                ) from None
        try:
            return cls(kind.strip(), *values)
        except ValueError as exc:
            raise ValueError(f"bad arrivals {spec!r}: {exc}; expected {ARRIVALS_HELP}") from None

    def __str__(self) -> str:
        if self.kind == "poisson":
            return f"poisson:{_spec_number(self.rate)}"
        return f"gamma:{_spec_number(self.rate)},{_spec_number(self.cv)}"

    def draw(self, n: int, seed: int | np.random.Generator | None = 0) -> np.ndarray:
        """``n`` arrival times (seconds, sorted, the first 0); see :func:`poisson_arrivals`."""
        if self.kind == "poisson":
            return poisson_arrivals(n, self.rate, seed)
        return gamma_arrivals(n, self.rate, self.cv, seed)


# ---------------------------------------------------------------- preparing a workload

# The keyword options of :func:`prepare`, which every loader takes too.
PREPARE_OPTIONS = ("rate_scale", "max_prompt", "max_output", "arrivals", "replace_arrivals", "seed")


@dataclass(frozen=True)
class PrepareOptions:
    """What :func:`prepare` does to a workload (see there), each option checked.

    Raises
    ------
    TypeError, ValueError
        An option of the wrong kind or out of range; the message names the option and
        what it may be.
    """

    rate_scale: float = 1.0
    max_prompt: int | None = None
    max_output: int | None = None
    arrivals: ArrivalProcess | None = None
    replace_arrivals: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        set_field = functools.partial(object.__setattr__, self)
        set_field("rate_scale", real("rate_scale", self.rate_scale, low=0.0, low_open=True))
        for name in ("max_prompt", "max_output"):
            value = getattr(self, name)
            if value is not None:
                set_field(name, positive_int(name, value, maximum=MAX_TOKENS))
        if self.arrivals is not None:
            instance("arrivals", self.arrivals, ArrivalProcess, "None or an ArrivalProcess")
        set_field("replace_arrivals", flag("replace_arrivals", self.replace_arrivals))
        if self.replace_arrivals and self.arrivals is None:
            raise ValueError(
                "replace_arrivals=True (--replace-arrivals) needs arrivals= (--arrivals): the process "
                "whose times replace the workload's"
            )
        set_field("seed", check_seed("seed", self.seed))

    def as_dict(self) -> dict[str, Any]:
        """The options as JSON-ready values (the arrival process as its spec)."""
        out = {name: getattr(self, name) for name in PREPARE_OPTIONS}
        out["arrivals"] = None if self.arrivals is None else str(self.arrivals)
        return out

    def apply(self, workload: Workload) -> tuple[Workload, PrepareReport]:
        """``workload`` prepared with these options, and the report; see :func:`prepare_report`."""
        instance("workload", workload, Workload, "a llmsched.Workload")
        return _apply(workload, self)


@dataclass(frozen=True)
class PrepareReport:
    """What :func:`prepare_report` did: its options, and how many lengths it clipped.

    Attributes
    ----------
    options
        The options applied.
    prompts_clipped, outputs_clipped, predictions_clipped
        Requests whose prompt, output or predicted output was above ``max_prompt`` or
        ``max_output`` and was clipped to it.
    """

    options: PrepareOptions
    prompts_clipped: int = 0
    outputs_clipped: int = 0
    predictions_clipped: int = 0

    def __post_init__(self) -> None:
        instance("options", self.options, PrepareOptions, "a PrepareOptions")
        for name in ("prompts_clipped", "outputs_clipped", "predictions_clipped"):
            object.__setattr__(self, name, nonnegative_int(name, getattr(self, name)))

    def as_dict(self) -> dict[str, Any]:
        """The options and the counts as one JSON-ready dict."""
        return {
            **self.options.as_dict(),
            "prompts_clipped": self.prompts_clipped,
            "outputs_clipped": self.outputs_clipped,
            "predictions_clipped": self.predictions_clipped,
        }


def _options(
    rate_scale: float = 1.0,
    max_prompt: int | None = None,
    max_output: int | None = None,
    arrivals: str | ArrivalProcess | None = None,
    replace_arrivals: bool = False,
    seed: int = 0,
) -> PrepareOptions:
    if isinstance(arrivals, str):
        arrivals = ArrivalProcess.parse(arrivals)
    elif arrivals is not None:
        instance("arrivals", arrivals, ArrivalProcess, f"None, an ArrivalProcess or a spec {ARRIVALS_HELP}")
    return PrepareOptions(rate_scale, max_prompt, max_output, arrivals, replace_arrivals, seed)


def _loader_options(options: dict[str, Any]) -> PrepareOptions:
    """A loader's ``**options``, checked before it reads its file."""
    unknown = sorted(set(options) - set(PREPARE_OPTIONS))
    if unknown:
        raise TypeError(
            f"unknown option {unknown[0]!r}; the options are {', '.join(PREPARE_OPTIONS)} (see prepare)"
        )
    return _options(**options)


def _clip(values: np.ndarray, cap: int | None) -> tuple[np.ndarray, int]:
    if cap is None:
        return values, 0
    return np.minimum(values, cap), int(np.count_nonzero(values > cap))


def _apply(workload: Workload, options: PrepareOptions) -> tuple[Workload, PrepareReport]:
    arrival = workload.arrival
    if options.arrivals is not None:
        if not workload.is_offline and not options.replace_arrivals:
            raise ValueError(
                f"workload {workload.name!r} has its own arrival times (up to {arrival.max():.6g} s); "
                f"to replace them with {options.arrivals} arrivals pass replace_arrivals=True "
                "(--replace-arrivals), or leave arrivals=None to keep them"
            )
        arrival = options.arrivals.draw(len(workload), options.seed)
    if options.rate_scale != 1.0:
        if arrival.size and arrival.max() == 0.0:
            raise ValueError(
                f"rate_scale={options.rate_scale!r} changes nothing: every request of workload "
                f"{workload.name!r} arrives at 0; draw arrival times with arrivals='poisson:RATE' "
                "(--arrivals) and scale those, or leave rate_scale at 1"
            )
        with np.errstate(over="ignore"):
            scaled = arrival / options.rate_scale
        if scaled.size and not math.isfinite(scaled.max()):
            raise ValueError(
                f"rate_scale={options.rate_scale!r} stretches arrival times of up to "
                f"{arrival.max():.6g} s beyond double precision; rate_scale must be larger"
            )
        arrival = scaled
    prompt, prompts_clipped = _clip(workload.prompt_tokens, options.max_prompt)
    output, outputs_clipped = _clip(workload.output_tokens, options.max_output)
    predicted, predictions_clipped = (None, 0)
    if workload.predicted_output is not None:
        predicted, predictions_clipped = _clip(workload.predicted_output, options.max_output)
    prepared = workload.replace(
        prompt_tokens=prompt, output_tokens=output, predicted_output=predicted, arrival=arrival
    )
    return prepared, PrepareReport(options, prompts_clipped, outputs_clipped, predictions_clipped)


def prepare_report(
    workload: Workload,
    *,
    rate_scale: float = 1.0,
    max_prompt: int | None = None,
    max_output: int | None = None,
    arrivals: str | ArrivalProcess | None = None,
    replace_arrivals: bool = False,
    seed: int = 0,
) -> tuple[Workload, PrepareReport]:
    """:func:`prepare` ``workload`` and report what was done (how many lengths were clipped).

    Raises as :func:`prepare` does.

    Returns
    -------
    workload, report
        The prepared workload, and a :class:`PrepareReport` of the options and the counts.
    """
    instance("workload", workload, Workload, "a llmsched.Workload")
    return _options(rate_scale, max_prompt, max_output, arrivals, replace_arrivals, seed).apply(workload)


def prepare(
    workload: Workload,
    *,
    rate_scale: float = 1.0,
    max_prompt: int | None = None,
    max_output: int | None = None,
    arrivals: str | ArrivalProcess | None = None,
    replace_arrivals: bool = False,
    seed: int = 0,
) -> Workload:
    """``workload`` replayed faster, with its lengths clipped or its arrivals drawn.

    The steps run in this order: arrivals drawn, arrivals scaled, lengths clipped. Every
    loader takes these options and calls this; :func:`prepare_report` also says how many
    lengths were clipped.

    Parameters
    ----------
    workload
        The workload (it is not changed; a new one is returned, under the same name).
    rate_scale
        Replay ``rate_scale`` times faster: every arrival time is divided by it (a finite
        number > 0; 1 keeps the times).
    max_prompt, max_output
        Clip prompts, and outputs and predicted outputs, to at most this many tokens (an
        integer >= 1, or None to keep them). Vidur caps a request's prompt plus output at
        one ``max_tokens``; here each length has its own cap, since a prefill stage's
        capacity bounds the prompt alone.
    arrivals
        Draw new arrival times from an arrival process: ``"poisson:RATE"``,
        ``"gamma:RATE,CV"`` (see ``ARRIVALS_HELP``) or an :class:`ArrivalProcess`. The first
        request arrives at 0 and the requests arrive in their order in the workload. For a
        workload that has no arrival times (all 0), such as a length-only trace.
    replace_arrivals
        Let ``arrivals`` replace arrival times the workload already has (refused without
        it, so that a trace's real times are never lost by accident).
    seed
        Seed of the arrival draws (an integer >= 0): the same seed gives the same times.

    Raises
    ------
    TypeError, ValueError
        An option of the wrong kind or out of range (the message names it and what it may
        be), checked before any work; ``arrivals`` for a workload with arrival times
        without ``replace_arrivals=True``; a ``rate_scale`` so small that the times overflow.
    """
    return prepare_report(
        workload,
        rate_scale=rate_scale,
        max_prompt=max_prompt,
        max_output=max_output,
        arrivals=arrivals,
        replace_arrivals=replace_arrivals,
        seed=seed,
    )[0]


# ---------------------------------------------------------------- loaders


def _read_table(
    path: str | PathLike[str],
    columns: tuple[str, ...],
    fmt: str,
    optional: tuple[str, ...] = (),
    reads: tuple[str, ...] = (),
) -> Any:
    """The CSV at ``path`` as a DataFrame with at least ``columns`` and one row.

    Every way a file can fail to be such a table (missing, a folder, not UTF-8, not CSV,
    no rows, a column missing, a column read (``columns``, ``optional`` or ``reads``) named
    twice) is a ValueError that names the file.
    """
    import pandas as pd

    path_arg("path", path)
    naming = ", ".join(columns) + "".join(f" (and optionally {col})" for col in optional)
    expected = f"a {fmt} file: UTF-8 CSV with a header naming {naming} and one row per request"
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
    _refuse_repeated_columns(path, (*columns, *optional, *reads), fmt)
    return frame


def _refuse_repeated_columns(path: str | PathLike[str], columns: tuple[str, ...], fmt: str) -> None:
    """Refuse a header that names a column the reader reads more than once: which one holds
    the values is ambiguous (pandas would keep the first and rename the others)."""
    import pandas as pd

    # The header as the parser read it, names unchanged (a header row read as data).
    header = [str(name) for name in pd.read_csv(path, encoding="utf-8", header=None, nrows=1).iloc[0]]
    for column in columns:
        count = header.count(column)
        if count > 1:
            raise ValueError(
                f"{path}: the column {column!r} appears {count} times in the header; a {fmt} file "
                "names each column once (which of them holds the values is ambiguous)"
            )


def _workload_from(path: str | PathLike[str], fmt: str, columns: dict[str, str], **fields: Any) -> Workload:
    """A Workload from a file's columns; a bad value is reported with the file and its column."""
    try:
        return Workload(**fields)
    except (TypeError, ValueError) as exc:
        read_as = ", ".join(f"{col} as {field}" for field, col in columns.items() if field != col)
        mapping = f" (this {fmt} reader reads {read_as})" if read_as else ""
        raise ValueError(f"{path}: {exc}{mapping}") from None


def _load_trace(
    path: str | PathLike[str],
    name: str | None,
    options: dict[str, Any],
    fmt: str,
    arrival: str,
    prompt: str,
    output: str,
    arrival_optional: bool = False,
    first_token_counted: bool = False,
) -> Workload:
    path_arg("path", path)
    label = _name(name, path)
    checked = _loader_options(options)
    required, optional = (
        ((prompt, output), (arrival,)) if arrival_optional else ((arrival, prompt, output), ())
    )
    frame = _read_table(path, required, fmt, optional)
    workload = _workload_from(
        path,
        fmt,
        {"prompt_tokens": prompt, "output_tokens": output, "arrival": arrival},
        prompt_tokens=frame[prompt].to_numpy(),
        output_tokens=frame[output].to_numpy(),
        arrival=frame[arrival].to_numpy() if arrival in frame.columns else None,
        name=label,
    )
    if first_token_counted:
        # The prompt phase makes the first token: one decode step fewer, and at least one.
        workload = workload.replace(output_tokens=np.maximum(workload.output_tokens - 1, 1))
    return _apply(workload, checked)[0]


def _name(name: Any, path: str | PathLike[str]) -> str:
    if name is None:
        return str(path)
    return text("name", name) or str(path)


#: The fields a workload CSV holds, the first two required.
CSV_FIELDS = ("prompt_tokens", "output_tokens", "predicted_output", "arrival")


def csv_columns(columns: Any) -> dict[str, str]:
    """``columns`` checked: a mapping from fields of :data:`CSV_FIELDS` to a file's column
    names (strings, none repeated); a ``FIELD=COLUMN,...`` string is read as one.

    Raises
    ------
    TypeError, ValueError
        Not a mapping or such a string, an unknown field, an empty or repeated column name.
    """
    if isinstance(columns, str):
        pairs = {}
        for part in columns.split(","):
            field, sep, column = part.strip().partition("=")
            if not sep:
                raise ValueError(f"columns are FIELD=COLUMN pairs, comma-separated, got {part.strip()!r}")
            if field.strip() in pairs:
                raise ValueError(f"columns names field {field.strip()!r} twice")
            pairs[field.strip()] = column.strip()
        columns = pairs
    if not isinstance(columns, Mapping):
        raise TypeError(f"columns must be a mapping of field to column name, got {type(columns).__name__}")
    out: dict[str, str] = {}
    for field, column in columns.items():
        if field not in CSV_FIELDS:
            raise ValueError(f"columns: unknown field {field!r}; the fields are {', '.join(CSV_FIELDS)}")
        out[field] = text(f"columns[{field!r}]", column)
        if not out[field]:
            raise ValueError(f"columns: field {field!r} names an empty column")
    taken = list(out.values())
    for column in taken:
        if taken.count(column) > 1:
            raise ValueError(f"columns: column {column!r} is given for two fields")
    return out


def from_csv(
    path: str | PathLike[str], name: str | None = None, columns: Any = None, **options: Any
) -> Workload:
    """Read a CSV of requests: by default the project's, ``prompt_tokens,output_tokens
    [,predicted_output][,arrival]``; with ``columns``, a file of one's own column names.

    Parameters
    ----------
    path
        The file.
    name
        The workload's name (default: the path).
    columns
        Which column holds each field, as ``{"prompt_tokens": "input_len", ...}`` or
        ``"prompt_tokens=input_len,output_tokens=output_len,arrival=ts"`` (see
        :func:`csv_columns`); fields left out are read from columns of their own names when
        there are such. An arrival column may hold seconds or date-times (ISO 8601, as
        ``2023-11-16 18:17:03.97``: seconds since the earliest); other columns are ignored.
    **options
        The options of :func:`prepare` (``rate_scale``, ``max_prompt``, ``max_output``,
        ``arrivals``, ``replace_arrivals``, ``seed``), applied to what was read.

    Raises
    ------
    ValueError
        If the file is missing, not UTF-8 CSV, has no rows or lacks a column, or a value is
        not a valid token count or arrival time; the message names the file. A bad option,
        as :func:`prepare` says, before the file is read.
    TypeError
        If ``path`` is not a path, ``name`` not a str, or an option unknown.
    """
    path_arg("path", path)
    label = _name(name, path)
    named = {field: field for field in CSV_FIELDS} | ({} if columns is None else csv_columns(columns))
    checked = _loader_options(options)
    fields = CSV_FIELDS
    required = tuple(named[field] for field in fields[:2])
    frame = _read_table(path, required, "llmsched workload", reads=tuple(named[f] for f in fields[2:]))
    values = {field: frame[named[field]].to_numpy() for field in fields if named[field] in frame.columns}
    if "arrival" in values and not _numeric(frame[named["arrival"]]):
        values["arrival"] = _seconds_since_first(path, named["arrival"], frame[named["arrival"]])
    renamed = {field: column for field, column in named.items() if column != field}
    workload = _workload_from(path, "llmsched workload", renamed, **values, name=label)
    return _apply(workload, checked)[0]


def _numeric(values: Any) -> bool:
    """Whether a column read by pandas holds numbers."""
    import pandas as pd

    return bool(pd.api.types.is_numeric_dtype(values))


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


def from_vidur_trace(path: str | PathLike[str], name: str | None = None, **options: Any) -> Workload:
    """Read a Vidur request trace: ``num_prefill_tokens,num_decode_tokens`` and, when it has
    arrival times, ``arrived_at`` (seconds).

    Vidur ships both kinds: traces with arrival times, and length-only traces (such as its
    arXiv-summarization and chat length statistics). The requests of a length-only trace
    all arrive at 0, unless ``arrivals=`` draws times for them (see :func:`prepare`).

    ``**options`` are those of :func:`prepare`. Bad files, values and options raise as in
    :func:`from_csv`.
    """
    return _load_trace(
        path,
        name,
        options,
        "Vidur trace",
        "arrived_at",
        "num_prefill_tokens",
        "num_decode_tokens",
        arrival_optional=True,
    )


def from_splitwise_trace(path: str | PathLike[str], name: str | None = None, **options: Any) -> Workload:
    """Read a SplitwiseSim trace (columns ``arrival_timestamp, prompt_size, token_size``, among others).

    SplitwiseSim's ``token_size`` counts every output token, the one its prompt phase makes
    included; here the prefill makes that token too, so a request decodes ``token_size - 1``
    tokens (at least one: a ``token_size`` of 1 decodes one step, the least a request has).
    ``**options`` are those of :func:`prepare` (``max_output`` clips the tokens decoded).
    Bad files, values and options raise as in :func:`from_csv`.
    """
    return _load_trace(
        path,
        name,
        options,
        "SplitwiseSim trace",
        "arrival_timestamp",
        "prompt_size",
        "token_size",
        first_token_counted=True,
    )


#: The Azure LLM inference traces 2023 the package ships, by name: (file, requests).
AZURE_TRACES = {
    "code": ("azure_llm_code_2023.csv", 8819),
    "conversation": ("azure_llm_conv_2023.csv", 19366),
}


def azure_sizes(trace: str = "code") -> tuple[np.ndarray, np.ndarray]:
    """The prompt and output token counts of an Azure LLM inference trace 2023 (``"code"``:
    8,819 requests to a code service; ``"conversation"``: 19,366 to a chat service), as the
    package ships it (``data/azure_llm_code_2023.csv`` and ``data/azure_llm_conv_2023.csv``,
    unchanged; Microsoft Azure, CC BY 4.0: ``data/AZURE_ATTRIBUTION``), in the trace's order.

    Returns
    -------
    tuple of numpy.ndarray
        ``(ContextTokens, GeneratedTokens)``, int64. The output count includes the token the
        prompt phase makes (SplitwiseSim's ``token_size``).

    Raises
    ------
    ValueError
        An unknown trace.
    """
    if trace not in AZURE_TRACES:
        raise ValueError(f"unknown Azure trace {trace!r}; one of {', '.join(AZURE_TRACES)}")
    text = resources.files("llmsched").joinpath(f"data/{AZURE_TRACES[trace][0]}").read_text()
    table = np.loadtxt(text.splitlines()[1:], delimiter=",", usecols=(1, 2), dtype=np.int64)
    return table[:, 0].copy(), table[:, 1].copy()


def azure_code_sizes() -> tuple[np.ndarray, np.ndarray]:
    """:func:`azure_sizes` of the code trace (8,819 requests)."""
    return azure_sizes("code")


_AZURE_COLUMNS = {
    "arrival": "TIMESTAMP",
    "prompt_tokens": "ContextTokens",
    "output_tokens": "GeneratedTokens",
}
_AZURE_TIME = "ISO 8601 date-times such as 2023-11-16 18:17:03.9799600"


def _seconds_since_first(path: str | PathLike[str], column: str, values: Any) -> np.ndarray:
    """Date-time strings as float64 seconds since the earliest, from their exact integer ticks."""
    import pandas as pd

    if pd.api.types.is_numeric_dtype(values):
        raise ValueError(f"{path}: {column} holds numbers; expected {_AZURE_TIME}")
    try:
        stamps = pd.to_datetime(values, format="ISO8601", utc=True)
    except (ValueError, TypeError, OverflowError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        message = message.split(". You might want to try")[0].rstrip(".:")  # pandas' cut-off hint
        raise ValueError(f"{path}: {column} must hold {_AZURE_TIME} ({message})") from None
    empty = np.flatnonzero(stamps.isna().to_numpy())
    if empty.size:
        raise ValueError(f"{path}: {column}[{empty[0]}] is empty; every request needs a time ({_AZURE_TIME})")
    # Ticks (pandas keeps 100 ns digits at nanosecond resolution) differ exactly as integers;
    # one division makes seconds, so an hour-long trace keeps well under a microsecond.
    ticks = stamps.dt.tz_localize(None).to_numpy()
    seconds: np.ndarray = (ticks - ticks.min()) / np.timedelta64(1, "s")
    return seconds.astype(np.float64)


def from_azure_trace(path: str | PathLike[str], name: str | None = None, **options: Any) -> Workload:
    """Read an Azure LLM inference trace (columns ``TIMESTAMP,ContextTokens,GeneratedTokens``).

    Microsoft publishes these traces of its Azure LLM inference services in the
    AzurePublicDataset (2023: a code and a conversation service, an hour each; 2024: a week
    each). ``TIMESTAMP`` is the invocation time, e.g. ``2023-11-16 18:17:03.9799600`` (ISO 8601;
    a time with a UTC offset is converted to UTC, one without is taken as UTC); a request's
    arrival is the seconds since the earliest request, so the first arrives at 0.
    ``ContextTokens`` is the prompt length and ``GeneratedTokens`` the output length.

    ``**options`` are those of :func:`prepare`; real traces hold prompts longer than the
    paper's prefill capacity of 5,000 tokens, which ``max_prompt`` clips. Bad files, values
    and options raise as in :func:`from_csv`.
    """
    path_arg("path", path)
    label = _name(name, path)
    checked = _loader_options(options)
    fmt = "Azure LLM inference trace"
    frame = _read_table(path, tuple(_AZURE_COLUMNS.values()), fmt)
    workload = _workload_from(
        path,
        fmt,
        _AZURE_COLUMNS,
        prompt_tokens=frame["ContextTokens"].to_numpy(),
        output_tokens=frame["GeneratedTokens"].to_numpy(),
        arrival=_seconds_since_first(path, "TIMESTAMP", frame["TIMESTAMP"]),
        name=label,
    )
    return _apply(workload, checked)[0]
