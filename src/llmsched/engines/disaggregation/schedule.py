"""The disaggregated cluster's schedule (PD disaggregation, Splitwise): each request's prompt
stage on a prompt machine, its KV transfer, and its decode on a token machine."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from llmsched.core.schedule import ScheduleBase, SteppedRuns, percentiles, read_only
from llmsched.core.workload import Workload
from llmsched.engines.disaggregation.cluster import DisaggregatedCluster

if TYPE_CHECKING:
    import pandas as pd

    from llmsched.core.violations import Violation

__all__ = ["REQUEST_ARRAYS", "RUN_ARRAYS", "STAGE_ARRAYS", "TIME_ARRAYS", "DisaggregatedSchedule"]

#: The schedule's arrays, by what they hold an entry for: a prefill stage, a decode run, a request.
STAGE_ARRAYS = ("stage_machine", "stage_start", "stage_end")
RUN_ARRAYS = (
    "run_machine",
    "run_start",
    "run_iterations",
    "run_first_time",
    "run_step",
    "run_active",
    "run_context",
)
REQUEST_ARRAYS = (
    "request_stage",
    "request_machine",
    "request_client",
    "request_transfer_end",
    "request_decode_start",
    "request_decode_end",
)
#: The arrays of times, in seconds (float64); the others hold counts and indices (int64).
TIME_ARRAYS = ("stage_start", "stage_end", "run_start", "run_first_time", "run_step", "request_transfer_end")


@dataclass(frozen=True, eq=False)
class DisaggregatedSchedule(SteppedRuns, ScheduleBase):
    """What a disaggregated cluster ran.

    Prefill stages (any machine): ``stage_machine``, ``stage_start``, ``stage_end``; request
    ``i`` is prefilled in stage ``request_stage[i]``. Decode runs (token machines): run ``r``
    on ``run_machine[r]`` is ``run_iterations[r]`` iterations from ``run_start[r]`` with
    ``run_active[r]`` decoding requests reading ``run_context[r]`` context tokens at its
    first iteration, which lasts ``run_first_time[r]``, each next one ``run_step[r]``
    longer. Iterations are numbered per machine, 0, 1, ... over its runs in order. Request
    ``i`` decodes on ``request_machine[i]`` (its token machine), client
    ``request_client[i]``, in that machine's iterations ``[request_decode_start[i],
    request_decode_end[i])``; its keys and values arrive at ``request_transfer_end[i]``.
    Under the cluster's ``token_memory``, ``request_transfer_start[i]`` is when its transfer
    started, reserving its blocks on its token machine until it finishes (None without).

    It meets :class:`~llmsched.core.schedule.ScheduleLike`: its machines are the cluster's
    (prompt machines first), a request's machine is its token machine, and its stages are
    the prefill stages, the decode runs and the transfers (:meth:`stage_frame`).
    """

    mode: ClassVar[str] = "disaggregated"

    workload: Workload
    cluster: DisaggregatedCluster
    stage_machine: np.ndarray
    stage_start: np.ndarray
    stage_end: np.ndarray
    run_machine: np.ndarray
    run_start: np.ndarray
    run_iterations: np.ndarray
    run_first_time: np.ndarray
    run_step: np.ndarray
    run_active: np.ndarray
    run_context: np.ndarray
    request_stage: np.ndarray
    request_machine: np.ndarray
    request_client: np.ndarray
    request_transfer_end: np.ndarray
    request_decode_start: np.ndarray
    request_decode_end: np.ndarray
    makespan: float
    info: dict[str, Any] = field(default_factory=dict)
    request_transfer_start: np.ndarray | None = None

    def __post_init__(self) -> None:
        counts = [a for a in (*STAGE_ARRAYS, *RUN_ARRAYS, *REQUEST_ARRAYS) if a not in TIME_ARRAYS]
        for names, dtype in ((counts, np.int64), (TIME_ARRAYS, np.float64)):
            for name in names:
                object.__setattr__(self, name, read_only(np.array(getattr(self, name), dtype=dtype)))
        object.__setattr__(self, "makespan", float(self.makespan))
        if self.request_transfer_start is not None:
            start = read_only(np.array(self.request_transfer_start, dtype=np.float64))
            object.__setattr__(self, "request_transfer_start", start)

    def __repr__(self) -> str:
        c = self.cluster
        return (
            f"DisaggregatedSchedule(requests={len(self.workload)}, prompt_machines={c.prompt_machines}, "
            f"token_machines={c.token_machines}, makespan={self.makespan:.3f}s)"
        )

    @property
    def machines(self) -> int:
        """The cluster's machines, prompt and token."""
        return self.cluster.machines

    @property
    def clients(self) -> int:
        """The token pool's clients: ``token_clients`` on each token machine."""
        return self.cluster.token_machines * self.cluster.token_clients

    @property
    def prefill_stages(self) -> int:
        """Prefill stages over all machines."""
        return int(self.stage_start.size)

    @property
    def decode_iterations(self) -> int:
        """Decode iterations over all machines."""
        return int(self.run_iterations.sum())

    @cached_property
    def run_first_iteration(self) -> np.ndarray:
        """Each run's first iteration, numbered on its machine."""
        first = np.zeros(self.run_start.size, dtype=np.int64)
        for m in np.unique(self.run_machine).tolist():
            on = np.flatnonzero(self.run_machine == m)
            first[on] = np.concatenate([[0], np.cumsum(self.run_iterations[on])[:-1]])
        return read_only(first)

    def iteration_end_on(self, machine: Any, iterations: Any) -> np.ndarray:
        """When each machine's given iteration ended (NaN outside its iterations)."""
        return self._iteration_time_on(machine, iterations, ends=1)

    def iteration_start_on(self, machine: Any, iterations: Any) -> np.ndarray:
        """When each machine's given iteration started (NaN outside its iterations)."""
        return self._iteration_time_on(machine, iterations, ends=0)

    def _iteration_time_on(self, machine: Any, iterations: Any, ends: int) -> np.ndarray:
        # ends=0: the iteration's start; ends=1: its end (one iteration time later).
        machine = np.asarray(machine, dtype=np.int64)
        g = np.asarray(iterations, dtype=np.int64)
        out = np.full(np.broadcast(machine, g).shape, np.nan)
        machine, g = np.broadcast_arrays(machine, g)
        for m in np.unique(machine).tolist():
            on = np.flatnonzero(self.run_machine == m)
            mine = machine == m
            if not on.size:
                continue
            firsts = self.run_first_iteration[on]
            total = int(self.run_iterations[on].sum())
            gg = g[mine]
            inside = (gg >= 0) & (gg < total)
            safe = np.where(inside, gg, 0)
            run = on[np.searchsorted(firsts, safe, side="right") - 1]
            at = self.run_start[run] + self._elapsed(run, safe - self.run_first_iteration[run] + ends)
            out[mine] = np.where(inside, at, np.nan)
        return out

    @cached_property
    def prefill_end(self) -> np.ndarray:
        return read_only(self.stage_end[self.request_stage])

    @cached_property
    def finish(self) -> np.ndarray:
        return read_only(self.iteration_end_on(self.request_machine, self.request_decode_end - 1))

    @cached_property
    def transfer_time(self) -> np.ndarray:
        """Seconds each request's keys and values took to arrive after its prefill ended."""
        return read_only(self.request_transfer_end - self.prefill_end)

    @cached_property
    def tbt_mean(self) -> np.ndarray:
        """Each request's mean time between tokens: from its first token (its prefill's end)
        to its last, over the tokens it decoded."""
        decoded = np.maximum(self.request_decode_end - self.request_decode_start, 1)
        return read_only((self.finish - self.prefill_end) / decoded)

    @cached_property
    def decode_begin(self) -> np.ndarray:
        """When each request's first decode iteration started on its token machine."""
        return read_only(self.iteration_start_on(self.request_machine, self.request_decode_start))

    @cached_property
    def first_gap(self) -> np.ndarray:
        """Each request's first gap between tokens: prefill end to its first decode iteration's end."""
        first = self.iteration_end_on(self.request_machine, self.request_decode_start)
        return read_only(first - self.prefill_end)

    def tbt_distribution(self) -> tuple[np.ndarray, np.ndarray]:
        """Every gap between tokens, as values with counts: each request's first gap (which
        holds its transfer) and, after it, every iteration time of its token machine's runs
        it decodes in; the first iteration of a run that follows a pause of its machine's
        decoding for a lent stage adds the pause for the requests decoding across it (runs
        follow one another without any other pause while requests decode)."""
        values = [self.first_gap]
        counts = [np.ones(len(self.workload), dtype=np.int64)]
        # Gaps after the first: iterations g in (start, end) of each request: per run, the
        # requests decoding in it minus those whose first iteration it holds.
        first = self.run_first_iteration
        starts = np.zeros(self.run_start.size, dtype=np.int64)
        pause = np.zeros(self.run_start.size)
        for m in np.unique(self.run_machine).tolist():
            on = np.flatnonzero(self.run_machine == m)
            mine = self.request_machine == m
            opens = np.sort(self.request_decode_start[mine])
            # Requests whose first decode iteration is this run's first iteration.
            starts[on] = np.searchsorted(opens, first[on], side="right") - np.searchsorted(
                opens, first[on], side="left"
            )
            # Time since the machine's run before (only stages fill it while requests decode
            # across; with none decoding across, no gap is counted below).
            pause[on[1:]] = np.maximum(self.run_start[on[1:]] - self.run_end[on[:-1]], 0.0)
        constant = (self.run_step == 0) | (self.run_iterations == 1)
        # Iteration 0 of a run: active minus the requests starting there; later ones: active.
        values.append(self.run_first_time + pause)
        counts.append(self.run_active - starts)
        rest = np.flatnonzero(constant & (self.run_iterations > 1))
        values.append(self.run_first_time[rest])
        counts.append(self.run_active[rest] * (self.run_iterations[rest] - 1))
        for r in np.flatnonzero(~constant).tolist():
            k = np.arange(1, int(self.run_iterations[r]))
            values.append(self.run_first_time[r] + self.run_step[r] * k)
            counts.append(np.full(k.size, int(self.run_active[r]), dtype=np.int64))
        vals, cnts = np.concatenate(values), np.concatenate(counts).astype(np.int64)
        keep = cnts > 0
        return read_only(vals[keep]), read_only(cnts[keep])

    def machine_busy(self) -> np.ndarray:
        """Seconds each machine spent in prefill stages and decode runs."""
        busy = np.zeros(self.cluster.machines)
        np.add.at(busy, self.stage_machine, self.stage_end - self.stage_start)
        np.add.at(busy, self.run_machine, self.run_end - self.run_start)
        return busy

    @property
    def utilization(self) -> float:
        """The machines' busy share of the cluster's machine-time: seconds in prefill stages and
        decode runs over ``machines * makespan`` (the pools' ``utilization_prompt`` and
        ``utilization_token`` weighed by their sizes)."""
        span = self.makespan
        return float(self.machine_busy().sum() / (self.cluster.machines * span)) if span else 0.0

    def summary(self, slo_ttft: float | None = None, slo_tbt: float | None = None) -> dict[str, Any]:
        """Headline figures: every key of :data:`~llmsched.core.schedule.SUMMARY_KEYS`, as
        :meth:`llmsched.Schedule.summary` gives them (``utilization`` over machine-time,
        ``clients`` the token pool's), the pool sizes, ``transfer_mean_s`` /
        ``transfer_p99_s`` (seconds from a prefill's end to its keys and values' arrival),
        ``lent_stages`` (prefill stages run by lent token machines) and
        ``utilization_prompt`` / ``utilization_token`` (busy share of each pool's
        machine-time).

        Raises
        ------
        TypeError, ValueError
            A target that is not None or a number > 0 (``inf`` allowed).
        """
        goodput = self.goodput_figures(slo_ttft, slo_tbt)  # the targets checked before the rest
        span = self.makespan
        c = self.cluster
        busy = self.machine_busy()
        out: dict[str, Any] = {
            "mode": self.mode,
            "requests": len(self.workload),
            "prompt_machines": c.prompt_machines,
            "token_machines": c.token_machines,
            "machines": self.machines,
            "clients": self.clients,
            "makespan_s": span,
            "utilization": self.utilization,
            "tokens_per_s": self.tokens_per_s,
            "prefill_stages": self.prefill_stages,
            "decode_iterations": self.decode_iterations,
            "lent_stages": int(np.count_nonzero(~c.is_prompt(self.stage_machine))),
            "utilization_prompt": float(busy[: c.prompt_machines].sum() / (c.prompt_machines * span))
            if span
            else 0.0,
            "utilization_token": float(busy[c.prompt_machines :].sum() / (c.token_machines * span))
            if span
            else 0.0,
        }
        out.update(self.latency_figures())
        transfer = self.transfer_time
        out["transfer_mean_s"] = float(transfer.mean()) if transfer.size else 0.0
        out["transfer_p99_s"] = percentiles(transfer)[2]
        out.update(goodput)
        out["rejected"] = int(self.rejected.sum())
        return out

    def request_frame(self, slo_ttft: float | None = None, slo_tbt: float | None = None) -> pd.DataFrame:
        """One row per request: the workload's columns, ``prompt_machine`` (of its stage),
        ``token_machine``, ``machine`` (its token machine again, the column every mode has),
        ``client``, ``prefill_end``, ``transfer_end``, ``transfer_s``, ``decode_begin``,
        ``first_gap``, ``finish``, ``ttft``, ``latency``, ``tbt_mean``, ``e2e``,
        ``normalized_latency`` and ``meets_slo`` (against the targets, see :meth:`meets_slo`).

        Raises
        ------
        TypeError, ValueError
            A target that is not None or a number > 0 (``inf`` allowed).
        """
        return self._request_frame(
            self.meets_slo(slo_ttft, slo_tbt),
            prompt_machine=self.stage_machine[self.request_stage],
            token_machine=self.request_machine,
            machine=self.request_machine,
            client=self.request_client,
            prefill_end=self.prefill_end,
            transfer_end=self.request_transfer_end,
            transfer_s=self.transfer_time,
            decode_begin=self.decode_begin,
            first_gap=self.first_gap,
        )

    def stage_frame(self) -> pd.DataFrame:
        """What ran when: one row per prefill stage (in the schedule's order, so that row
        ``k`` is stage ``k``), then per decode run (in order), then per request's KV transfer
        (in request order).

        Columns: ``machine`` (where it ran; a transfer's sender), ``kind`` (``prefill``,
        ``decode``, ``transfer``), ``start``, ``end``, ``duration``, ``tokens`` (prompt tokens
        prefilled; tokens decoded; prompt tokens whose keys and values moved), ``requests``
        (prefilled; decoding; 1), then ``id`` (the stage's, the run's or the transferred
        request's index), ``to_machine`` (a transfer's token machine; the row's machine
        otherwise), ``iterations``, ``first_iteration`` (numbered on its machine; -1 for a
        stage or a transfer) and ``context`` (a run's context tokens at its first iteration).
        A transfer to the machine that prefilled the request takes no time.
        """
        import pandas as pd

        n, stages, runs = len(self.workload), self.stage_start.size, self.run_start.size
        prompt = self.workload.prompt_tokens
        stage_tokens = np.zeros(stages, dtype=np.int64)
        np.add.at(stage_tokens, self.request_stage, prompt)
        stage_requests = np.bincount(self.request_stage, minlength=stages)[:stages]
        prefill_end = self.prefill_end
        none = np.full(stages + n, -1, dtype=np.int64)
        return pd.DataFrame(
            {
                "machine": np.concatenate(
                    [self.stage_machine, self.run_machine, self.stage_machine[self.request_stage]]
                ),
                "kind": np.repeat(["prefill", "decode", "transfer"], [stages, runs, n]),
                "start": np.concatenate([self.stage_start, self.run_start, prefill_end]),
                "end": np.concatenate([self.stage_end, self.run_end, self.request_transfer_end]),
                "duration": np.concatenate(
                    [self.stage_end - self.stage_start, self.run_end - self.run_start, self.transfer_time]
                ),
                "tokens": np.concatenate([stage_tokens, self.run_active * self.run_iterations, prompt]),
                "requests": np.concatenate(
                    [stage_requests, self.run_active, np.ones(n, dtype=np.int64)]
                ).astype(np.int64),
                "id": np.concatenate([np.arange(stages), np.arange(runs), np.arange(n)]).astype(np.int64),
                "to_machine": np.concatenate([self.stage_machine, self.run_machine, self.request_machine]),
                "iterations": np.concatenate(
                    [np.zeros(stages, dtype=np.int64), self.run_iterations, np.zeros(n, dtype=np.int64)]
                ),
                "first_iteration": np.concatenate([none[:stages], self.run_first_iteration, none[stages:]]),
                "context": np.concatenate(
                    [np.zeros(stages, dtype=np.int64), self.run_context, np.zeros(n, dtype=np.int64)]
                ),
            }
        ).rename_axis("stage")

    def validate(self, **options: Any) -> list[Violation]:
        """Every rule of PD disaggregation the schedule breaks
        (:func:`llmsched.validate_disaggregated`, given ``options``: ``skip``, ``rtol``,
        ``atol``); empty when it is valid."""
        from llmsched.engines.disaggregation.validate import validate_disaggregated

        return validate_disaggregated(self, **options)

    def chrome_trace(self) -> dict[str, Any]:
        """The schedule as a Chrome trace (Trace Event Format): a process per machine, its
        stages and runs, each request's prefill and decode, each transfer as a flow; see
        :mod:`llmsched.engines.disaggregation.export`. :meth:`write_chrome_trace` writes it.

        Raises
        ------
        ValueError
            A time that is not finite.
        """
        from llmsched.engines.disaggregation.export import chrome_trace

        return chrome_trace(self)
