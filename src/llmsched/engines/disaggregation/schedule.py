"""The disaggregated cluster's schedule (PD disaggregation, Splitwise): each request's prompt
stage on a prompt machine, its KV transfer, and its decode on a token machine."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from llmsched.core.schedule import RequestTimes, latency_figures, percentiles, read_only
from llmsched.core.workload import Workload
from llmsched.engines.disaggregation.cluster import DisaggregatedCluster

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["DisaggregatedSchedule"]


@dataclass(frozen=True, eq=False)
class DisaggregatedSchedule(RequestTimes):
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
    """

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

    def __post_init__(self) -> None:
        for name in (
            "stage_machine",
            "run_machine",
            "run_iterations",
            "run_active",
            "run_context",
            "request_stage",
            "request_machine",
            "request_client",
            "request_decode_start",
            "request_decode_end",
        ):
            object.__setattr__(self, name, read_only(np.array(getattr(self, name), dtype=np.int64)))
        for name in (
            "stage_start",
            "stage_end",
            "run_start",
            "run_first_time",
            "run_step",
            "request_transfer_end",
        ):
            object.__setattr__(self, name, read_only(np.array(getattr(self, name), dtype=np.float64)))
        object.__setattr__(self, "makespan", float(self.makespan))

    def __repr__(self) -> str:
        c = self.cluster
        return (
            f"DisaggregatedSchedule(requests={len(self.workload)}, prompt_machines={c.prompt_machines}, "
            f"token_machines={c.token_machines}, makespan={self.makespan:.3f}s)"
        )

    @cached_property
    def run_first_iteration(self) -> np.ndarray:
        """Each run's first iteration, numbered on its machine."""
        first = np.zeros(self.run_start.size, dtype=np.int64)
        for m in np.unique(self.run_machine).tolist():
            on = np.flatnonzero(self.run_machine == m)
            first[on] = np.concatenate([[0], np.cumsum(self.run_iterations[on])[:-1]])
        return read_only(first)

    def _elapsed(self, run: np.ndarray, k: np.ndarray) -> np.ndarray:
        k = k.astype(np.float64)
        return k * self.run_first_time[run] + self.run_step[run] * (k * (k - 1) / 2)

    @cached_property
    def run_end(self) -> np.ndarray:
        return read_only(self.run_start + self._elapsed(np.arange(self.run_start.size), self.run_iterations))

    def iteration_end_on(self, machine: Any, iterations: Any) -> np.ndarray:
        """When each machine's given iteration ended (NaN outside its iterations)."""
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
            end = self.run_start[run] + self._elapsed(run, safe - self.run_first_iteration[run] + 1)
            out[mine] = np.where(inside, end, np.nan)
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
    def first_gap(self) -> np.ndarray:
        """Each request's first gap between tokens: prefill end to its first decode iteration's end."""
        first = self.iteration_end_on(self.request_machine, self.request_decode_start)
        return read_only(first - self.prefill_end)

    def tbt_distribution(self) -> tuple[np.ndarray, np.ndarray]:
        """Every gap between tokens, as values with counts: each request's first gap (which
        holds its transfer) and, after it, every iteration time of its token machine's runs
        it decodes in (runs of a machine follow one another without pause while requests
        decode, so consecutive tokens are one iteration apart)."""
        values = [self.first_gap]
        counts = [np.ones(len(self.workload), dtype=np.int64)]
        # Gaps after the first: iterations g in (start, end) of each request: per run, the
        # requests decoding in it minus those whose first iteration it holds.
        first = self.run_first_iteration
        starts = np.zeros(self.run_start.size, dtype=np.int64)
        for m in np.unique(self.run_machine).tolist():
            on = np.flatnonzero(self.run_machine == m)
            mine = self.request_machine == m
            opens = np.sort(self.request_decode_start[mine])
            # Requests whose first decode iteration is this run's first iteration.
            starts[on] = np.searchsorted(opens, first[on], side="right") - np.searchsorted(
                opens, first[on], side="left"
            )
        constant = (self.run_step == 0) | (self.run_iterations == 1)
        # Iteration 0 of a run: active minus the requests starting there; later ones: active.
        values.append(self.run_first_time)
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
    def tokens_per_s(self) -> float:
        return self.workload.total_output_tokens / self.makespan if self.makespan > 0 else 0.0

    def summary(self, slo_ttft: float | None = None, slo_tbt: float | None = None) -> dict[str, Any]:
        """Headline figures with :meth:`llmsched.Schedule.summary`'s keys where they mean the
        same, ``mode``, the pool sizes, ``transfer_mean_s`` / ``transfer_p99_s`` (seconds from a
        prefill's end to its keys and values' arrival), ``lent_stages`` (prefill stages run by
        lent token machines) and ``utilization_prompt`` / ``utilization_token`` (busy share of
        each pool's machine-time)."""
        n, span = len(self.workload), self.makespan
        c = self.cluster
        busy = self.machine_busy()
        out: dict[str, Any] = {
            "mode": "disaggregated",
            "requests": n,
            "prompt_machines": c.prompt_machines,
            "token_machines": c.token_machines,
            "makespan_s": span,
            "tokens_per_s": self.tokens_per_s,
            "prefill_stages": int(self.stage_start.size),
            "decode_iterations": int(self.run_iterations.sum()),
            "lent_stages": int(np.count_nonzero(~c.is_prompt(self.stage_machine))),
            "utilization_prompt": float(busy[: c.prompt_machines].sum() / (c.prompt_machines * span))
            if span
            else 0.0,
            "utilization_token": float(busy[c.prompt_machines :].sum() / (c.token_machines * span))
            if span
            else 0.0,
        }
        out.update(latency_figures(self.ttft, self.latency, *self.tbt_distribution()))
        transfer = self.transfer_time
        out["transfer_mean_s"] = float(transfer.mean()) if transfer.size else 0.0
        out["transfer_p99_s"] = percentiles(transfer)[2]
        meets = np.ones(n, dtype=bool)
        if slo_ttft is not None:
            meets &= self.ttft <= slo_ttft
        if slo_tbt is not None:
            decoded = np.maximum(self.request_decode_end - self.request_decode_start, 1)
            meets &= (self.finish - self.prefill_end) / decoded <= slo_tbt
        out["requests_per_s"] = n / span if span > 0 else 0.0
        out["goodput_rps"] = int(meets.sum()) / span if span > 0 else 0.0
        out["slo_attainment"] = float(meets.mean()) if n else 0.0
        out["slo_ttft_s"], out["slo_tbt_s"] = slo_ttft, slo_tbt
        return out

    def request_frame(self) -> pd.DataFrame:
        """One row per request: the workload's columns, ``prompt_machine`` (of its stage),
        ``token_machine``, ``client``, ``prefill_end``, ``transfer_s``, ``first_gap``,
        ``finish``, ``ttft``, ``latency``."""
        frame = self.workload.to_frame()
        frame["prompt_machine"] = self.stage_machine[self.request_stage]
        frame["token_machine"] = self.request_machine
        frame["client"] = self.request_client
        frame["prefill_end"] = self.prefill_end
        frame["transfer_s"] = self.transfer_time
        frame["first_gap"] = self.first_gap
        frame["finish"] = self.finish
        frame["ttft"] = self.ttft
        frame["latency"] = self.latency
        return frame
