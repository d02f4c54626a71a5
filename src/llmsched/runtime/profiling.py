"""Measure the engine's stage times, fit a cost model, and check it on held-out stages.

:func:`profile` times prefill stages of given total prompt tokens (made of prompts of
``prompt_len`` tokens, as a real stage holds several requests) and decode iterations of
given batch sizes (each slot at ``context`` tokens). :func:`fit_cost` fits the
:class:`~llmsched.LinearCostModel` the simulator uses; :func:`stage_errors` scores any
cost model on stages it was not fitted on: profile points of other sizes, or the stages of
an executed schedule.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from llmsched.cost import LinearCostModel, cost_model_error
from llmsched.runtime.engine import Engine
from llmsched.schedule import PREFILL, Schedule

__all__ = ["fit_cost", "profile", "schedule_stage_times", "split_sizes", "stage_errors"]


def split_sizes(low: int, high: int, count: int = 5) -> tuple[list[int], list[int]]:
    """Sizes to fit on and sizes to hold out, disjoint: ``count`` sizes spread over
    ``low..high`` (both ends included) and, between each neighbouring pair, the midpoint.
    Held-out sizes are empty where the range is too narrow to leave a gap."""
    if isinstance(low, bool) or isinstance(high, bool) or not 1 <= low <= high:
        raise ValueError(f"need 1 <= low <= high, got {low!r}, {high!r}")
    fit = sorted({round(x) for x in np.linspace(low, high, max(2, count))})
    held = sorted({(a + b) // 2 for a, b in itertools.pairwise(fit) if b - a >= 2} - set(fit))
    return fit, held


def profile(
    engine: Engine,
    prefill_tokens: Sequence[int],
    decode_batches: Sequence[int],
    prompt_len: int = 64,
    context: int = 128,
    repeats: int = 5,
    warmup: int = 2,
    seed: int = 0,
) -> Any:
    """Time prefill stages and decode iterations; one row per measurement.

    Returns a DataFrame with ``kind`` (``prefill`` or ``decode``), ``size`` (prompt tokens,
    or active slots) and ``seconds``. Every size is measured ``repeats`` times after
    ``warmup`` untimed runs of the first size of each kind.
    """
    import pandas as pd

    for name, value in (("prompt_len", prompt_len), ("context", context), ("repeats", repeats)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an integer >= 0, got {warmup!r}")
    if context + repeats + warmup + 1 > engine.max_len:
        raise ValueError(f"context {context} plus the timed iterations exceeds max_len={engine.max_len}")
    rng = np.random.default_rng(seed)
    vocab = engine.config.vocab_size
    rows: list[dict[str, Any]] = []
    prefill_sizes = [int(t) for t in prefill_tokens]
    for total in prefill_sizes:
        count = math.ceil(total / prompt_len)
        if total < 1 or count > engine.slots:
            raise ValueError(
                f"a prefill of {total} tokens in prompts of {prompt_len} needs {count} slots; "
                f"the engine has {engine.slots}"
            )
        if total - (count - 1) * prompt_len + 1 > engine.max_len or prompt_len + 1 > engine.max_len:
            raise ValueError(f"prompts of {prompt_len} tokens do not fit max_len={engine.max_len}")
    for b in decode_batches:
        if isinstance(b, bool) or not 1 <= int(b) <= engine.slots:
            raise ValueError(f"decode batch {b!r} is not in 1..{engine.slots}")

    def prompts_for(total: int) -> list[list[int]]:
        count = math.ceil(total / prompt_len)
        sizes = [prompt_len] * (count - 1) + [total - (count - 1) * prompt_len]
        return [rng.integers(0, vocab, size=n).tolist() for n in sizes]

    for index, total in enumerate(prefill_sizes):
        runs = repeats + (warmup if index == 0 else 0)
        for r in range(runs):
            prompts = prompts_for(total)
            engine.reset()
            start = engine.clock()
            engine.prefill(prompts, list(range(len(prompts))))
            seconds = engine.clock() - start
            if r >= runs - repeats:
                rows.append({"kind": "prefill", "size": total, "seconds": seconds})
    for index, batch in enumerate(int(b) for b in decode_batches):
        engine.reset()
        engine.prefill(
            [rng.integers(0, vocab, size=context).tolist() for _ in range(batch)], list(range(batch))
        )
        runs = repeats + (warmup if index == 0 else 0)
        for r in range(runs):
            start = engine.clock()
            engine.decode(list(range(batch)))
            seconds = engine.clock() - start
            if r >= runs - repeats:
                rows.append({"kind": "decode", "size": batch, "seconds": seconds})
    engine.reset()
    return pd.DataFrame(rows, columns=["kind", "size", "seconds"])


def _medians(samples: Any) -> Any:
    """One row per (kind, size): the median of its repeats (robust to a stray slow run)."""
    return samples.groupby(["kind", "size"], as_index=False)["seconds"].median()


def fit_cost(samples: Any, prefill_capacity: int, median: bool = True) -> LinearCostModel:
    """The least-squares :class:`~llmsched.LinearCostModel` of profile rows (of the median
    of each size's repeats, with ``median``)."""
    if median:
        samples = _medians(samples)
    pre = samples[samples.kind == "prefill"]
    dec = samples[samples.kind == "decode"]
    if pre["size"].nunique() < 2:
        raise ValueError("fitting needs prefill samples of at least two sizes")
    if dec["size"].nunique() < 2:
        raise ValueError("fitting needs decode samples of at least two batch sizes")
    return LinearCostModel.fit(
        pre["size"].to_numpy(),
        pre["seconds"].to_numpy(),
        dec["size"].to_numpy(),
        dec["seconds"].to_numpy(),
        prefill_capacity,
    )


def stage_errors(cost: Any, samples: Any, median: bool = False) -> dict[str, float]:
    """Mean absolute relative error of ``cost`` on measured rows (``kind, size, seconds``):
    ``prefill_mape``, ``decode_mape``, ``mape`` (over all rows) and ``max_relative_error``.
    With ``median``, each size's repeats count once, by their median."""
    if median:
        samples = _medians(samples)
    pre = samples[samples.kind == "prefill"]
    dec = samples[samples.kind == "decode"]
    out = cost_model_error(
        cost,
        pre["size"].to_numpy(),
        pre["seconds"].to_numpy(),
        dec["size"].to_numpy(),
        dec["seconds"].to_numpy(),
    )
    predicted = np.where(
        samples.kind == "prefill",
        cost.prefill_time(samples["size"].to_numpy(dtype=np.float64)),
        cost.decode_iteration_time(samples["size"].to_numpy(dtype=np.float64)),
    )
    measured = samples["seconds"].to_numpy()
    out["mape"] = float(np.mean(np.abs(predicted - measured) / measured)) if len(measured) else float("nan")
    return out


def schedule_stage_times(schedule: Schedule) -> Any:
    """The measured rows of a schedule: prefill stages (prompt tokens, seconds) and decode
    iterations (active clients, seconds), in the format of :func:`profile`.

    Decode rows come one per run of iterations with one duration and one active count
    (:meth:`Schedule.active_runs`): one per iteration for a measured schedule, which has
    one run per iteration, and one per run for a simulated one.
    """
    import pandas as pd

    wl = schedule.workload
    tokens = np.bincount(
        schedule.request_prefill_stage, weights=wl.prompt_tokens, minlength=schedule.num_stages
    )
    prefill = np.flatnonzero(schedule.stage_kind == PREFILL)
    runs = schedule.active_runs()
    return pd.DataFrame(
        {
            "kind": ["prefill"] * prefill.size + ["decode"] * runs["active"].size,
            "size": np.concatenate([tokens[prefill], runs["active"]]).astype(np.int64),
            "seconds": np.concatenate(
                [schedule.stage_end[prefill] - schedule.stage_start[prefill], runs["iteration_time"]]
            ),
        },
        columns=["kind", "size", "seconds"],
    )
