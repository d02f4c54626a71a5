"""A schedule: the stages the engine ran, and where and when each request ran in them.

Layout (all numpy arrays, read-only):

* stages, in time order: ``stage_kind`` (``PREFILL`` or ``DECODE``), ``stage_start``,
  ``stage_end``, and for decode stages ``stage_first_iteration`` and ``stage_iterations``:
  the decode iterations of all decode stages are numbered 0, 1, ... in time order;
* decode runs, in time order: run ``r`` is ``run_iterations[r] >= 1`` consecutive decode
  iterations starting at ``run_start[r]``, each lasting ``run_iteration_time[r]`` seconds.
  The runs cover iterations 0, 1, ... in order and none crosses a decode stage boundary.
  A producer that jumps over iterations in closed form stores one run per jump, so the
  schedule's size does not grow with the number of iterations; a measured schedule has
  one run per iteration (see :meth:`Schedule.from_iteration_end`). The metrics below work
  from the runs; ``iteration_end`` (and ``iteration_start``, ``iteration_time``) are
  materialised only when asked for, in O(iterations);
* ``makespan``: when the engine finished, as the producer reports it (the end of the last
  stage, which the validator checks);
* requests, indexed like the workload: ``request_client``, ``request_prefill_stage``, and
  ``request_decode_start`` / ``request_decode_end``, the half-open range of global decode
  iterations in which the request decoded (one token each).

``llmsched.validate`` checks a schedule against the system model; nothing here assumes it
is valid, but the metrics only mean something for a valid schedule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from llmsched.cost import CostModel
from llmsched.workload import Workload

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["DECODE", "PREFILL", "Schedule", "runs_from_iteration_end"]

PREFILL = 0
DECODE = 1
_KIND_NAMES = np.array(["prefill", "decode"])


def _frozen(name: str, values: Any, dtype: Any) -> np.ndarray:
    raw = np.asarray(values)
    arr = raw.astype(dtype)
    lossy = (
        raw.size
        and raw.dtype.kind in "iufb"
        and not np.array_equal(arr, raw, equal_nan=raw.dtype.kind == "f")
    )
    if lossy:
        raise ValueError(f"Schedule.{name} holds values that are not {np.dtype(dtype).name}")
    arr.setflags(write=False)
    return arr


def _read_only(arr: np.ndarray) -> np.ndarray:
    arr.setflags(write=False)
    return arr


def _run_holding(run_first: np.ndarray, run_len: np.ndarray, iterations: np.ndarray) -> np.ndarray:
    """The run holding each of ``iterations``, all in ``0..total`` for ``total`` the runs'
    iterations (``total`` itself, one past the last iteration, gives the last run).

    A binary search among the runs; but where the iterations are few next to the runs and
    the lookups, a table of every iteration's run takes no more memory than the lookups
    themselves and is several times faster than searching with unsorted keys.
    """
    total = int(run_len.sum())
    if run_len.size and total <= 4 * (run_len.size + iterations.size):
        table = np.repeat(np.arange(run_len.size), run_len)
        return np.append(table, run_len.size - 1)[iterations]
    return np.searchsorted(run_first, iterations, side="right") - 1


def runs_from_iteration_end(
    stage_kind: Any, stage_start: Any, stage_first_iteration: Any, stage_iterations: Any, iteration_end: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Decode runs of one iteration each from the end time of every decode iteration.

    An iteration starts when the one before it ended, or at its decode stage's start when
    it is the stage's first.

    Returns
    -------
    run_start, run_iterations, run_iteration_time
        One entry per iteration: its start, 1, and its duration.
    """
    ends = np.asarray(iteration_end, dtype=np.float64)
    starts = np.empty_like(ends)
    if ends.size:
        starts[1:] = ends[:-1]
        kind = np.asarray(stage_kind)
        counts = np.asarray(stage_iterations)
        first = np.asarray(stage_first_iteration)
        opens = np.flatnonzero((kind == DECODE) & (counts > 0))
        # Stage arrays may be malformed (the validator reports that); skip what points nowhere.
        opens = opens[(first[opens] >= 0) & (first[opens] < ends.size)]
        starts[first[opens]] = np.asarray(stage_start, dtype=np.float64)[opens]
    return starts, np.ones(ends.size, dtype=np.int64), ends - starts


@dataclass(frozen=True, eq=False)
class Schedule:
    """Stages, decode runs and per-request placement of one execution (see the module docstring)."""

    workload: Workload
    cost: CostModel
    clients: int
    stage_kind: np.ndarray
    stage_start: np.ndarray
    stage_end: np.ndarray
    stage_first_iteration: np.ndarray
    stage_iterations: np.ndarray
    run_start: np.ndarray
    run_iterations: np.ndarray
    run_iteration_time: np.ndarray
    request_client: np.ndarray
    request_prefill_stage: np.ndarray
    request_decode_start: np.ndarray
    request_decode_end: np.ndarray
    makespan: float
    measured: bool = False
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, dtype in (
            ("stage_kind", np.int8),
            ("stage_start", np.float64),
            ("stage_end", np.float64),
            ("stage_first_iteration", np.int64),
            ("stage_iterations", np.int64),
            ("run_start", np.float64),
            ("run_iterations", np.int64),
            ("run_iteration_time", np.float64),
            ("request_client", np.int64),
            ("request_prefill_stage", np.int64),
            ("request_decode_start", np.int64),
            ("request_decode_end", np.int64),
        ):
            object.__setattr__(self, name, _frozen(name, getattr(self, name), dtype))
        object.__setattr__(self, "makespan", float(self.makespan))

    @classmethod
    def from_iteration_end(
        cls,
        workload: Workload,
        cost: CostModel,
        clients: int,
        stage_kind: Any,
        stage_start: Any,
        stage_end: Any,
        stage_first_iteration: Any,
        stage_iterations: Any,
        iteration_end: Any,
        request_client: Any,
        request_prefill_stage: Any,
        request_decode_start: Any,
        request_decode_end: Any,
        makespan: float,
        measured: bool = False,
        info: dict[str, Any] | None = None,
    ) -> Schedule:
        """A schedule from the end time of every decode iteration, one run per iteration.

        For producers that time each iteration (the runtime's clock). The arguments are the
        constructor's, with ``iteration_end[g]``, when global decode iteration ``g`` ended,
        in place of the three run arrays (see :func:`runs_from_iteration_end`).
        """
        run_start, run_iterations, run_iteration_time = runs_from_iteration_end(
            stage_kind, stage_start, stage_first_iteration, stage_iterations, iteration_end
        )
        return cls(
            workload,
            cost,
            clients,
            stage_kind,
            stage_start,
            stage_end,
            stage_first_iteration,
            stage_iterations,
            run_start,
            run_iterations,
            run_iteration_time,
            request_client,
            request_prefill_stage,
            request_decode_start,
            request_decode_end,
            makespan,
            measured=measured,
            info={} if info is None else info,
        )

    # ------------------------------------------------------------------ sizes
    @property
    def num_stages(self) -> int:
        return int(self.stage_kind.size)

    @property
    def num_runs(self) -> int:
        """Decode runs (stretches of iterations of one duration)."""
        return int(self.run_start.size)

    @cached_property
    def num_iterations(self) -> int:
        """Decode iterations over all decode stages (the runs' total)."""
        return int(self.run_iterations.sum())

    def __repr__(self) -> str:
        return (
            f"Schedule(requests={len(self.workload)}, clients={self.clients}, "
            f"stages={self.num_stages}, makespan={self.makespan:.3f}s, "
            f"utilization={self.utilization:.2%})"
        )

    # ---------------------------------------------------------------- timings
    # Everything below works from the runs, in O(stages + runs + requests) whatever the
    # number of iterations; only the materialised per-iteration arrays are O(iterations).
    @cached_property
    def run_first_iteration(self) -> np.ndarray:
        """Global index of the first decode iteration of each run."""
        return _read_only(np.cumsum(self.run_iterations) - self.run_iterations)

    @cached_property
    def run_end(self) -> np.ndarray:
        """When each run's last iteration ended."""
        return _read_only(self.run_start + self.run_iteration_time * self.run_iterations)

    @cached_property
    def _decode_time_before_run(self) -> np.ndarray:
        """Decode seconds spent before each run starts (prefill pauses left out)."""
        spent = self.run_iteration_time * self.run_iterations
        return _read_only(np.cumsum(spent) - spent)

    def _locate(self, iterations: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For global iterations ``g``: the run holding each, ``g``'s offset in it, and whether
        ``g`` is an iteration of the schedule at all (run and offset are 0 where it is not)."""
        g = np.asarray(iterations, dtype=np.int64)
        inside = (g >= 0) & (g < self.num_iterations)
        if not self.num_runs:
            return np.zeros(g.shape, dtype=np.int64), np.zeros(g.shape, dtype=np.int64), inside
        run = _run_holding(self.run_first_iteration, self.run_iterations, np.where(inside, g, 0))
        offset = np.where(inside, g - self.run_first_iteration[run], 0)
        return run, offset, inside

    def iteration_start_at(self, iterations: Any) -> np.ndarray:
        """When the given global decode iterations started (NaN for one the schedule lacks).

        Equal to ``iteration_start[iterations]``, found from the runs without
        materialising that array: time and memory grow with the runs and the iterations asked
        for, not with the schedule's iterations.
        """
        return self._iteration_time_at(iterations, ends=0)

    def iteration_end_at(self, iterations: Any) -> np.ndarray:
        """When the given global decode iterations ended (NaN for one the schedule lacks);
        equal to ``iteration_end[iterations]``, found from the runs as ``iteration_start_at``."""
        return self._iteration_time_at(iterations, ends=1)

    def _iteration_time_at(self, iterations: Any, ends: int) -> np.ndarray:
        # ends=0: the iteration's start; ends=1: its end (one iteration time later).
        if not self.num_runs:
            return np.full(np.shape(iterations), np.nan)
        run, offset, inside = self._locate(iterations)
        at = self.run_start[run] + self.run_iteration_time[run] * (offset + ends)
        return np.where(inside, at, np.nan)

    def _iteration_offsets(self) -> np.ndarray:
        return np.arange(self.num_iterations, dtype=np.int64) - np.repeat(
            self.run_first_iteration, self.run_iterations
        )

    @cached_property
    def iteration_end(self) -> np.ndarray:
        """When every decode iteration ended, materialised: O(iterations) time and memory.

        For users who want the per-iteration view of a schedule of modest length; the
        library's own metrics and checks work from the runs (see :meth:`iteration_end_at`).
        """
        return _read_only(
            np.repeat(self.run_start, self.run_iterations)
            + np.repeat(self.run_iteration_time, self.run_iterations) * (self._iteration_offsets() + 1)
        )

    @cached_property
    def iteration_start(self) -> np.ndarray:
        """When every decode iteration started, materialised: O(iterations), like :attr:`iteration_end`."""
        return _read_only(
            np.repeat(self.run_start, self.run_iterations)
            + np.repeat(self.run_iteration_time, self.run_iterations) * self._iteration_offsets()
        )

    @cached_property
    def iteration_time(self) -> np.ndarray:
        """Duration of every decode iteration, materialised: O(iterations)."""
        return _read_only(np.repeat(self.run_iteration_time, self.run_iterations))

    def active_runs(self) -> dict[str, np.ndarray]:
        """The runs cut wherever a request starts or stops decoding, with their active clients.

        Within each piece the iteration time and the set of decoding clients are constant,
        so a piece is what a cost model prices: ``iterations`` iterations of ``active``
        clients, each lasting ``iteration_time``. A run that no request event crosses (all
        the simulator's runs, every run of a measured schedule) is one piece.

        Returns
        -------
        dict of arrays, one entry per piece in time order
            ``run`` (the run it belongs to), ``first_iteration``, ``iterations``, ``start``,
            ``iteration_time`` and ``active`` (clients decoding in it).
        """
        total = self.num_iterations
        dstart, dend = self.request_decode_start, self.request_decode_end
        decoding = (dstart >= 0) & (dstart < total) & (dend > dstart)
        opens = np.sort(dstart[decoding])
        closes = np.sort(np.minimum(dend[decoding], total))
        cuts = np.unique(np.concatenate([self.run_first_iteration, opens, closes]))
        cuts = cuts[cuts < total]
        run, offset, _ = self._locate(cuts)
        tau = self.run_iteration_time[run]
        return {
            "run": run,
            "first_iteration": cuts,
            "iterations": np.diff(np.append(cuts, total)),
            "start": self.run_start[run] + tau * offset,
            "iteration_time": tau,
            "active": np.searchsorted(opens, cuts, side="right")
            - np.searchsorted(closes, cuts, side="right"),
        }

    @cached_property
    def prefill_end(self) -> np.ndarray:
        """When each request's prefill stage ended."""
        return _read_only(self.stage_end[self.request_prefill_stage])

    @cached_property
    def finish(self) -> np.ndarray:
        """When each request produced its last token (NaN for one that decodes nothing)."""
        return _read_only(self.iteration_end_at(self.request_decode_end - 1))

    @cached_property
    def ttft(self) -> np.ndarray:
        """Time to first token of each request: end of its prefill minus its arrival."""
        return _read_only(self.prefill_end - self.workload.arrival)

    @cached_property
    def latency(self) -> np.ndarray:
        """End-to-end latency of each request: its finish minus its arrival."""
        return _read_only(self.finish - self.workload.arrival)

    # ---------------------------------------------------------------- metrics
    @cached_property
    def busy_time(self) -> float:
        """Client-seconds spent prefilling or decoding a request."""
        stage_len = self.stage_end - self.stage_start
        prefill = float(stage_len[self.request_prefill_stage].sum())
        # Each request decodes from the start of its first iteration to the end of its last,
        # less the prefill stages in between: the decode time elapsed between the two.
        lo, hi = self.request_decode_start, self.request_decode_end
        ranged = (lo >= 0) & (lo <= hi) & (hi <= self.num_iterations)
        decode = float((self._decode_time_before(hi[ranged]) - self._decode_time_before(lo[ranged])).sum())
        return prefill + decode

    def _decode_time_before(self, iterations: np.ndarray) -> np.ndarray:
        """Decode seconds before each iteration in ``0..num_iterations`` starts."""
        if not self.num_runs:
            return np.zeros(iterations.shape)
        # The run holding g, or for g == num_iterations the last run (its offset then is its length).
        run = _run_holding(self.run_first_iteration, self.run_iterations, iterations)
        offset = iterations - self.run_first_iteration[run]
        return self._decode_time_before_run[run] + self.run_iteration_time[run] * offset

    @property
    def utilization(self) -> float:
        """Busy client-time over ``clients * makespan`` (the coloured share of the Gantt chart)."""
        span = self.makespan
        return self.busy_time / (self.clients * span) if span > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        """Output tokens per second of makespan."""
        span = self.makespan
        return self.workload.total_output_tokens / span if span > 0 else 0.0

    @property
    def prefill_time_total(self) -> float:
        """Seconds the engine spent in prefill stages."""
        mask = self.stage_kind == PREFILL
        return float((self.stage_end[mask] - self.stage_start[mask]).sum())

    @property
    def decode_time_total(self) -> float:
        """Seconds the engine spent in decode stages."""
        mask = self.stage_kind == DECODE
        return float((self.stage_end[mask] - self.stage_start[mask]).sum())

    def summary(self) -> dict[str, float | int]:
        """Headline figures: makespan, utilization, throughput, TTFT and latency percentiles."""
        out: dict[str, float | int] = {
            "requests": len(self.workload),
            "clients": self.clients,
            "makespan_s": self.makespan,
            "utilization": self.utilization,
            "tokens_per_s": self.tokens_per_s,
            "prefill_stages": int(np.count_nonzero(self.stage_kind == PREFILL)),
            "decode_iterations": self.num_iterations,
            "prefill_time_s": self.prefill_time_total,
            "decode_time_s": self.decode_time_total,
        }
        for name, values in (("ttft", self.ttft), ("latency", self.latency)):
            p50, p90, p99 = np.percentile(values, [50, 90, 99]) if values.size else (0, 0, 0)
            out[f"{name}_mean_s"] = float(values.mean()) if values.size else 0.0
            out[f"{name}_p50_s"] = float(p50)
            out[f"{name}_p90_s"] = float(p90)
            out[f"{name}_p99_s"] = float(p99)
        return out

    # ------------------------------------------------------------ dataframes
    def request_frame(self) -> pd.DataFrame:
        """One row per request: client, prefill stage, prefill end, finish, TTFT and latency."""
        import pandas as pd

        frame = self.workload.to_frame()
        frame["client"] = self.request_client
        frame["prefill_stage"] = self.request_prefill_stage
        frame["prefill_end"] = self.prefill_end
        frame["finish"] = self.finish
        frame["ttft"] = self.ttft
        frame["latency"] = self.latency
        return pd.DataFrame(frame)

    def stage_frame(self) -> pd.DataFrame:
        """One row per stage: kind, start, end, duration, prompt tokens or decode iterations."""
        import pandas as pd

        tokens = np.zeros(self.num_stages, dtype=np.int64)
        np.add.at(tokens, self.request_prefill_stage, self.workload.prompt_tokens)
        return pd.DataFrame(
            {
                "kind": _KIND_NAMES[self.stage_kind],
                "start": self.stage_start,
                "end": self.stage_end,
                "duration": self.stage_end - self.stage_start,
                "prompt_tokens": np.where(self.stage_kind == PREFILL, tokens, 0),
                "iterations": self.stage_iterations,
            }
        ).rename_axis("stage")

    def segments(self) -> dict[str, np.ndarray]:
        """Every (stage, client) segment in which a client worked on a request, as arrays.

        Keys: ``stage``, ``kind``, ``request``, ``client``, ``start``, ``end``, ``tokens``
        (prompt tokens for a prefill segment, decoded tokens for a decode segment).
        """
        n = len(self.workload)
        req = np.arange(n)
        decode_stages = np.flatnonzero(self.stage_kind == DECODE)
        firsts = self.stage_first_iteration[decode_stages]
        # Decode stage holding each request's first and last decode iteration.
        lo = np.searchsorted(firsts, self.request_decode_start, side="right") - 1
        hi = np.searchsorted(firsts, self.request_decode_end - 1, side="right") - 1
        counts = np.maximum(hi - lo + 1, 0)
        seg_req = np.repeat(req, counts)
        offsets = np.arange(seg_req.size) - np.repeat(np.cumsum(counts) - counts, counts)
        seg_pos = np.repeat(lo, counts) + offsets
        seg_stage = decode_stages[seg_pos]
        stage_lo = self.stage_first_iteration[seg_stage]
        stage_hi = stage_lo + self.stage_iterations[seg_stage]
        it_lo = np.maximum(stage_lo, self.request_decode_start[seg_req])
        it_hi = np.minimum(stage_hi, self.request_decode_end[seg_req])
        return {
            "stage": np.concatenate([self.request_prefill_stage, seg_stage]),
            "kind": np.concatenate(
                [np.full(n, PREFILL, dtype=np.int8), np.full(seg_req.size, DECODE, dtype=np.int8)]
            ),
            "request": np.concatenate([req, seg_req]),
            "client": np.concatenate([self.request_client, self.request_client[seg_req]]),
            "start": np.concatenate(
                [self.stage_start[self.request_prefill_stage], self.iteration_start_at(it_lo)]
            ),
            "end": np.concatenate([self.prefill_end, self.iteration_end_at(it_hi - 1)]),
            "tokens": np.concatenate([self.workload.prompt_tokens, it_hi - it_lo]),
        }

    def to_frame(self) -> pd.DataFrame:
        """One row per stage and client segment, sorted by start time then client.

        Columns: ``stage``, ``kind`` (``prefill``/``decode``), ``request``, ``client``,
        ``start``, ``end``, ``tokens``.
        """
        import pandas as pd

        seg = self.segments()
        frame = pd.DataFrame(
            {
                "stage": seg["stage"],
                "kind": _KIND_NAMES[seg["kind"]],
                "request": seg["request"],
                "client": seg["client"],
                "start": seg["start"],
                "end": seg["end"],
                "tokens": seg["tokens"],
            }
        )
        return frame.sort_values(["start", "client"], kind="stable").reset_index(drop=True)

    def plot(self, **kwargs: Any) -> Figure:
        """Gantt chart of clients over time; see :func:`llmsched.plot.gantt`."""
        from llmsched.plot import gantt

        return gantt(self, **kwargs)
