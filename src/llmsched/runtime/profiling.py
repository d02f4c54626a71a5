"""Measure the engine's stage times, fit cost models, and score them on stages not fitted on.

What a stage costs depends on more than its counts: a decode iteration reads the keys and
values of every active request (its *context*), and a prefill stage attends within each
prompt (the sum of the squared prompt lengths, its *squares*). So the profiler sweeps

* prefill stages of given prompt lengths: the same total in prompts of different lengths
  (:func:`prefill_mixes`), so that squares vary apart from tokens;
* decode iterations of given per-slot contexts: batch sizes times contexts, every slot at
  one context and slots at mixed contexts (:func:`decode_mixes`).

:func:`profile` times them and returns one row per measurement (see :data:`COLUMNS`).
:func:`fit_cost` fits a :class:`~llmsched.ContextCostModel` to the rows, or the
:class:`~llmsched.LinearCostModel` on the same rows for comparison. :func:`plan_profile`
chooses points to fit on and held-out points of other sizes *and* other contexts;
:func:`stage_errors` scores a model on any rows, such as the stages of an executed schedule
(:func:`schedule_stage_times`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmsched.core.checks import flag, nonnegative_int, positive_int
from llmsched.core.cost import (
    ContextCostModel,
    CostModel,
    LinearCostModel,
    cost_model_error,
    decode_seconds,
    prefill_seconds,
)
from llmsched.core.schedule import PREFILL
from llmsched.engines.competition.schedule import Schedule
from llmsched.runtime.engine import Engine

__all__ = [
    "COLUMNS",
    "POINT_STATISTICS",
    "ProfilePlan",
    "decode_mixes",
    "fit_cost",
    "plan_profile",
    "predict",
    "prefill_mixes",
    "profile",
    "schedule_stage_times",
    "split_sizes",
    "stage_errors",
]

#: The columns of a profile (and of :func:`schedule_stage_times`), one row per stage:
#:
#: * ``kind``: ``"prefill"`` or ``"decode"``;
#: * ``point``: which point of the sweep the row measures (its repeats share it);
#: * ``size``: prompt tokens of a prefill stage, active requests of a decode iteration;
#: * ``squares``: the sum of the squared prompt lengths of a prefill stage (0 for decode);
#: * ``context``: the tokens in the active requests' caches when a decode iteration starts
#:   (0 for prefill);
#: * ``seconds``: the measured time.
COLUMNS = ("kind", "point", "size", "squares", "context", "seconds")


def split_sizes(low: int, high: int, count: int = 5) -> tuple[list[int], list[int]]:
    """Sizes to fit on and sizes to hold out, disjoint: ``count`` sizes spread over
    ``low..high`` (both ends included) and, between each neighbouring pair, the midpoint.
    Held-out sizes are empty where the range is too narrow to leave a gap."""
    if isinstance(low, bool) or isinstance(high, bool) or not 1 <= low <= high:
        raise ValueError(f"need 1 <= low <= high, got {low!r}, {high!r}")
    fit = sorted({round(x) for x in np.linspace(low, high, max(2, count))})
    held = sorted({(a + b) // 2 for a, b in itertools.pairwise(fit) if b - a >= 2} - set(fit))
    return fit, held


def prefill_mixes(
    totals: Sequence[int], lengths: Sequence[int], slots: int, longest: int
) -> list[tuple[int, ...]]:
    """Prefill stages of each total in prompts of each length: ``total // length`` prompts
    of ``length`` tokens and one of the remainder (when not 0).

    Stages that need more than ``slots`` prompts, or a prompt longer than ``longest``, are
    left out; so is a repeat of a stage already listed. The same total then appears with
    different sums of squares (one long prompt against many short ones).
    """
    positive_int("slots", slots)
    positive_int("longest", longest)
    stages: list[tuple[int, ...]] = []
    for total in totals:
        positive_int("a prefill total", total)
        for length in lengths:
            positive_int("a prompt length", length)
            if length > total or length > longest:
                continue
            count, rest = divmod(total, length)
            stage = (length,) * count + ((rest,) if rest else ())
            if len(stage) <= slots and stage not in stages:
                stages.append(stage)
    return stages


def decode_mixes(
    batches: Sequence[int], contexts: Sequence[int], mixed: int = 2, seed: int = 0
) -> list[tuple[int, ...]]:
    """Decode iterations, each given by its slots' contexts: every batch size at every
    context (all slots alike), and ``mixed`` iterations per batch size whose slots draw
    their contexts from ``contexts`` at random (seeded), so the total context of a batch
    is not always the batch times one context."""
    nonnegative_int("mixed", mixed)
    rng = np.random.default_rng(seed)
    points: list[tuple[int, ...]] = []
    for batch in batches:
        positive_int("a decode batch", batch)
        for context in contexts:
            positive_int("a context", context)
            points.append((context,) * batch)
        if batch > 1 and len(contexts) > 1:
            for _ in range(mixed):
                points.append(tuple(int(c) for c in rng.choice(np.asarray(contexts), size=batch)))
    return points


@dataclass(frozen=True)
class ProfilePlan:
    """Points to fit on and points to hold out, disjoint in every dimension.

    Prefill stages to fit on have totals from ``prefill_totals[0]`` in prompts of lengths
    from ``prompt_lengths[0]``; held-out stages, totals and lengths from the ``[1]`` lists
    (none in both). Decode iterations likewise: batch sizes from ``decode_batches`` and
    per-slot contexts from ``contexts``, fitted ``[0]`` and held out ``[1]``. A plan that
    fits every batch size (``plan_profile(..., every_batch=True)``) has no held-out batch
    size: its held-out decode points are at every fitted size and at held-out contexts.
    """

    fit_prefill: tuple[tuple[int, ...], ...]
    fit_decode: tuple[tuple[int, ...], ...]
    held_prefill: tuple[tuple[int, ...], ...]
    held_decode: tuple[tuple[int, ...], ...]
    prefill_totals: tuple[tuple[int, ...], tuple[int, ...]]
    prompt_lengths: tuple[tuple[int, ...], tuple[int, ...]]
    decode_batches: tuple[tuple[int, ...], tuple[int, ...]]
    contexts: tuple[tuple[int, ...], tuple[int, ...]]

    def held_out(self) -> dict[str, list[int]]:
        """The held-out sizes and contexts, by name (for a report)."""
        return {
            "prefill_tokens": list(self.prefill_totals[1]),
            "prompt_lengths": list(self.prompt_lengths[1]),
            "decode_batches": list(self.decode_batches[1]),
            "contexts": list(self.contexts[1]),
        }


def plan_profile(
    clients: int,
    capacity: int,
    prompts: tuple[int, int],
    contexts: tuple[int, int],
    count: int = 5,
    mixed: int = 2,
    seed: int = 0,
    every_batch: bool = False,
) -> ProfilePlan:
    """Profile points covering a workload's stages, and held-out points between them.

    Parameters
    ----------
    clients
        The most requests decoding at once (batch sizes run 1..clients).
    capacity
        The most prompt tokens of a prefill stage (totals run from the shortest prompt
        to ``capacity``).
    prompts
        Shortest and longest prompt (prompt lengths run between them).
    contexts
        Least and most context one request holds while decoding (its prompt, up to its
        prompt plus output).
    count
        Values per range to fit on; between each neighbouring pair, one value is held out.
    mixed, seed
        As for :func:`decode_mixes`.
    every_batch
        Fit decode at every batch size from 1 to ``clients`` (what a batch table needs:
        ``fit_cost(..., batch_table=True)``) and hold out contexts only: held-out decode
        points are at every batch size too, at contexts not fitted on. Prefill holds out
        totals and prompt lengths either way.
    """
    clients = positive_int("clients", clients)
    every_batch = flag("every_batch", every_batch)
    capacity = positive_int("capacity", capacity)
    (p_lo, p_hi), (c_lo, c_hi) = prompts, contexts
    totals = _pair(split_sizes(p_lo, max(p_lo, capacity), count + 1))
    lengths = _pair(split_sizes(p_lo, p_hi, count))
    # One more batch size than other values: on the CPU a matrix product's time is a
    # sawtooth in its rows (blocks of four), and sizes three apart hit every phase of it,
    # fitted and held out alike, where an even split could land on cheap phases only.
    batches = _pair(split_sizes(1, clients, count + 1))
    held_batches = batches[1]
    if every_batch:
        batches = (tuple(range(1, clients + 1)), ())
        held_batches = batches[0]
    context_sizes = _pair(split_sizes(c_lo, c_hi, count))
    return ProfilePlan(
        fit_prefill=tuple(prefill_mixes(totals[0], lengths[0], clients, p_hi)),
        fit_decode=tuple(decode_mixes(batches[0], context_sizes[0], mixed, seed)),
        held_prefill=tuple(prefill_mixes(totals[1], lengths[1], clients, p_hi)),
        held_decode=tuple(decode_mixes(held_batches, context_sizes[1], mixed, seed + 1)),
        prefill_totals=totals,
        prompt_lengths=lengths,
        decode_batches=batches,
        contexts=context_sizes,
    )


def _pair(split: tuple[list[int], list[int]]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return tuple(split[0]), tuple(split[1])


def profile(
    engine: Engine,
    prefill: Sequence[Sequence[int]] = (),
    decode: Sequence[Sequence[int]] = (),
    repeats: int = 5,
    rounds: int = 2,
    warmup: int = 1,
    seed: int = 0,
    reference: Callable[[], float] | None = None,
) -> Any:
    """Time prefill stages and decode iterations; one row per measurement.

    The rows' columns are :data:`~llmsched.runtime.profiling.COLUMNS`.

    Parameters
    ----------
    engine
        The engine to time (it is reset; its slots are used from 0).
    prefill
        Prefill stages, each given by its prompts' lengths (random tokens, seeded).
    decode
        Decode iterations, each given by its slots' contexts when it starts. The slots are
        set to those contexts without computing them (:meth:`Engine.occupy`); after
        ``warmup`` untimed iterations, ``repeats`` iterations run back to back, each timed
        from the end of the one before (as the executor times them), each one context
        token per slot further on.
    repeats
        Stages (or iterations) timed per visit of a point.
    rounds
        Visits of every point, each round in a new random order (seeded), so that a slow
        spell of the machine spreads over many points rather than biasing a few.
    warmup
        Untimed decode iterations at each visit; the sweep also starts with one untimed
        prefill stage and decode iteration.
    seed
        Seeds the tokens and the order.
    reference
        A fixed measurement of the machine (:class:`~llmsched.runtime.protocol.Probe`: seconds
        of one reference iteration), taken after every visit, or None. With it the machine's
        drift is taken out: each visit's times are divided by the median of the five references
        nearest it over the median of all of them, so a slow spell does not bend the fit; the
        references are in the frame's ``attrs["reference_s"]``.

    Raises
    ------
    ValueError
        If a stage needs more slots than the engine has, a prompt or context does not fit
        a slot (with the iterations timed), or a count is not a positive integer.
    """
    import pandas as pd

    repeats = positive_int("repeats", repeats)
    rounds = positive_int("rounds", rounds)
    warmup = nonnegative_int("warmup", warmup)
    stages = [tuple(int(n) for n in stage) for stage in prefill]
    iterations = [tuple(int(c) for c in contexts) for contexts in decode]
    for kind, points, extra in (("prefill", stages, 1), ("decode", iterations, warmup + repeats + 1)):
        for point in points:
            if not point or len(point) > engine.slots:
                raise ValueError(
                    f"a {kind} point needs 1..{engine.slots} slots (the engine's), got {len(point)}: {point}"
                )
            if min(point) < 1:
                raise ValueError(f"a {kind} point's prompt lengths or contexts must be >= 1, got {point}")
            if max(point) + extra > engine.max_len:
                raise ValueError(
                    f"a {kind} point at {max(point)} tokens needs {max(point) + extra} cache "
                    f"positions per slot (with the iterations timed); the engine holds {engine.max_len}"
                )
    rng = np.random.default_rng(seed)
    vocab = engine.config.vocab_size
    rows: list[tuple[str, int, int, int, int, float]] = []

    def time_prefill(index: int, stage: tuple[int, ...], record: bool) -> None:
        for _ in range(repeats if record else 1):
            prompts = [rng.integers(0, vocab, size=n).tolist() for n in stage]
            engine.reset()
            start = engine.clock()
            engine.prefill(prompts, list(range(len(stage))))
            seconds = engine.clock() - start
            if record:
                rows.append(("prefill", index, sum(stage), sum(n * n for n in stage), 0, seconds))

    def time_decode(index: int, contexts: tuple[int, ...], record: bool) -> None:
        slots = list(range(len(contexts)))
        engine.reset()
        engine.occupy(slots, list(contexts))
        for _ in range(warmup if record else 1):
            engine.decode(slots)
        context = sum(contexts) + len(slots) * (warmup if record else 1)
        end = engine.clock()
        for _ in range(repeats if record else 0):
            engine.decode(slots)
            start, end = end, engine.clock()
            rows.append(("decode", index, len(slots), 0, context, end - start))
            context += len(slots)

    if stages:
        time_prefill(0, stages[0], record=False)
    if iterations:
        time_decode(0, iterations[0], record=False)
    visits = [("prefill", i) for i in range(len(stages))] + [("decode", i) for i in range(len(iterations))]
    samples: list[float] = []
    spans: list[tuple[int, int]] = []  # each visit's rows
    for _ in range(rounds):
        for position in rng.permutation(len(visits)):
            kind, index = visits[position]
            first = len(rows)
            if kind == "prefill":
                time_prefill(index, stages[index], record=True)
            else:
                time_decode(index, iterations[index], record=True)
            if reference is not None:
                samples.append(float(reference()))
                spans.append((first, len(rows)))
    engine.reset()
    if samples:
        middle = float(np.median(samples))
        for visit, (first, last) in enumerate(spans):
            factor = float(np.median(samples[max(0, visit - 2) : visit + 3])) / middle
            for i in range(first, last):
                rows[i] = (*rows[i][:5], rows[i][5] / factor)
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    frame = frame.sort_values(["kind", "point"], kind="stable", ignore_index=True)
    if samples:
        frame.attrs["reference_s"] = samples
    return frame


def _check_columns(samples: Any) -> None:
    missing = {"kind", "size", "squares", "context", "seconds"} - set(getattr(samples, "columns", ()))
    if missing:
        raise ValueError(f"profile rows lack the columns {sorted(missing)}; see COLUMNS")


#: How :func:`fit_cost` and :func:`stage_errors` may reduce a point's repeats to one row.
POINT_STATISTICS = ("mean", "median")


def _per_point(samples: Any, statistic: str | None) -> Any:
    """One row per point, its times reduced by ``statistic`` (``"mean"`` or ``"median"``)
    at the median of its contexts (a decode point's context grows by one token per slot
    and iteration, so the middle context belongs to the middle time); None keeps every row.
    """
    if statistic is None:
        return samples
    if statistic not in POINT_STATISTICS:
        raise ValueError(f"points must be one of {list(POINT_STATISTICS)} or None, got {statistic!r}")
    keys = ["kind", "point"] if "point" in samples.columns else ["kind", "size", "squares", "context"]
    return samples.groupby(keys, as_index=False, sort=False).agg(
        size=("size", "first"),
        squares=("squares", "first"),
        context=("context", "median"),
        seconds=("seconds", statistic),
    )


def _split(samples: Any) -> tuple[Any, Any]:
    _check_columns(samples)
    return samples[samples.kind == "prefill"], samples[samples.kind == "decode"]


def fit_cost(
    samples: Any,
    prefill_capacity: int,
    points: str | None = "mean",
    context: bool = True,
    robust: bool = True,
    batch_table: bool = False,
) -> ContextCostModel | LinearCostModel:
    """Fit a cost model to profile rows.

    The rows' columns are :data:`~llmsched.runtime.profiling.COLUMNS`.

    Parameters
    ----------
    samples
        Profile rows.
    prefill_capacity
        The fitted model's capacity (not identifiable from times).
    points
        Fit one row per point, the mean (default) or the median of its repeats, or every
        row (None). A schedule's makespan sums its stage times, so the model should give a
        stage's expected time: a point's mean keeps the occasional slow iteration (the
        operating system taking the core) at the rate it occurs, where the median drops it
        (on the CPU the two differed by 1.5-3% over an executed schedule). A point that a
        long slow spell hit is an outlier among the points, which ``robust`` discounts.
    context
        Fit a :class:`~llmsched.ContextCostModel` (prefill sees squares, decode sees
        context); with False, the :class:`~llmsched.LinearCostModel` of the same rows, fitted
        the same way with the two context terms held at 0, so a comparison of the two shows
        what the context terms add and nothing else.
    robust
        Huber-reweighted fit (see :meth:`ContextCostModel.fit`).
    batch_table
        Fit the context-aware model's decode time at no context as a table over batch
        sizes (``decode_by_batch``) rather than a line; the rows must hold every batch size
        from 1 to the largest (``plan_profile(..., every_batch=True)``). Needs ``context``.

    Raises
    ------
    ValueError
        If the rows lack a column, hold prefill stages of fewer than two token counts or
        decode iterations of fewer than two batch sizes, or miss a batch size a table needs.
    """
    context = flag("context", context)
    batch_table = flag("batch_table", batch_table)
    if batch_table and not context:
        raise ValueError("batch_table needs context=True: the linear model has no batch table")
    _check_columns(samples)
    samples = _per_point(samples, points)
    pre, dec = _split(samples)
    if pre["size"].nunique() < 2:
        raise ValueError("fitting needs prefill samples of at least two token counts")
    if dec["size"].nunique() < 2:
        raise ValueError("fitting needs decode samples of at least two batch sizes")
    squares = pre["squares"].to_numpy(dtype=np.float64)
    contexts = dec["context"].to_numpy(dtype=np.float64)
    model = ContextCostModel.fit(
        pre["size"].to_numpy(dtype=np.float64),
        squares if context else np.zeros_like(squares),
        pre["seconds"].to_numpy(),
        dec["size"].to_numpy(dtype=np.float64),
        contexts if context else np.zeros_like(contexts),
        dec["seconds"].to_numpy(),
        prefill_capacity,
        robust=robust,
        batch_table=batch_table,
    )
    return model if context else model.linear()


def predict(cost: CostModel, samples: Any) -> np.ndarray:
    """``cost``'s time for each row (squares and context reach a context-aware model)."""
    pre = samples["kind"].to_numpy() == "prefill"
    size = samples["size"].to_numpy(dtype=np.float64)
    out = np.empty(len(samples))
    squares = samples["squares"].to_numpy(dtype=np.float64)
    context = samples["context"].to_numpy(dtype=np.float64)
    out[pre] = prefill_seconds(cost, size[pre], squares[pre])
    out[~pre] = decode_seconds(cost, size[~pre], context[~pre])
    return out


def stage_errors(cost: CostModel, samples: Any, points: str | None = None) -> dict[str, float]:
    """Mean absolute relative error of ``cost`` on measured rows.

    Rows have the columns :data:`~llmsched.runtime.profiling.COLUMNS`; returns
    ``prefill_mape``, ``decode_mape``, ``mape`` (over all rows) and ``max_relative_error``.
    With ``points`` (``"mean"`` or ``"median"``), each point's repeats count once, reduced
    so. A linear model sees the counts alone; a context-aware one, squares and context too."""
    _check_columns(samples)
    samples = _per_point(samples, points)
    pre, dec = _split(samples)
    out = cost_model_error(
        cost,
        pre["size"].to_numpy(dtype=np.float64),
        pre["seconds"].to_numpy(),
        dec["size"].to_numpy(dtype=np.float64),
        dec["seconds"].to_numpy(),
        prefill_squares=pre["squares"].to_numpy(dtype=np.float64),
        decode_context=dec["context"].to_numpy(dtype=np.float64),
    )
    measured = samples["seconds"].to_numpy()
    rel = np.abs(predict(cost, samples) - measured) / measured
    out["mape"] = float(rel.mean()) if rel.size else math.nan
    return out


def schedule_stage_times(schedule: Schedule) -> Any:
    """The stages of a schedule as profile rows (:data:`COLUMNS`): prefill stages (prompt
    tokens, sum of squared prompt lengths, seconds) and decode iterations (active
    requests, context, seconds); ``point`` numbers the rows of each kind.

    Decode rows come one per piece of a run in which the active set does not change
    (:meth:`Schedule.active_runs`): one per iteration for a measured schedule, which has
    one run per iteration. A simulated schedule's piece spans many iterations; its row
    gives the context and time of the piece's first iteration.
    """
    import pandas as pd

    work = schedule.stage_work()
    prefill = np.flatnonzero(schedule.stage_kind == PREFILL)
    runs = schedule.active_runs()
    count = runs["active"].size
    return pd.DataFrame(
        {
            "kind": ["prefill"] * prefill.size + ["decode"] * count,
            "point": np.concatenate([np.arange(prefill.size), np.arange(count)]).astype(np.int64),
            "size": np.concatenate([work["prompt_tokens"][prefill], runs["active"]]).astype(np.int64),
            "squares": np.concatenate([work["prompt_squares"][prefill], np.zeros(count)]).astype(np.int64),
            "context": np.concatenate([np.zeros(prefill.size), runs["context"]]).astype(np.int64),
            "seconds": np.concatenate(
                [schedule.stage_end[prefill] - schedule.stage_start[prefill], runs["iteration_time"]]
            ),
        },
        columns=list(COLUMNS),
    )
