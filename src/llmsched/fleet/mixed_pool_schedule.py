"""What a mixed-pool cluster (:mod:`llmsched.fleet.mixed_pool`) ran: each machine's schedule and
where each request's phases ran; its validator and its Chrome trace.

A request whose phases ran on one machine is one piece there (``WHOLE``); one split between two
is a prefill-only piece on its prompt machine and a decode-only piece on its token machine
(:data:`~llmsched.engines.rule.PREFILL_ONLY`, :data:`~llmsched.engines.rule.DECODE_ONLY`),
linked by the transfer of its keys and values. Latencies count from the request's arrival at
the cluster: its TTFT ends with its prompt's iteration, its end with its last token, and the
first gap between its tokens runs from its prompt's end on one machine to its first decode
iteration's end on the other, the transfer and the wait to join included.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from llmsched.core.export import (
    arrival_events,
    flow_events,
    microseconds,
    mode_figures,
    process_events,
    trace_object,
)
from llmsched.core.schedule import ScheduleBase, read_only
from llmsched.core.violations import Report, Violation, skipped_rules
from llmsched.core.workload import Workload
from llmsched.engines.fusion import export as fusion_export
from llmsched.engines.fusion.schedule import FusedSchedule
from llmsched.engines.fusion.validate import FUSED_RULES, validate_fused
from llmsched.engines.rule import DECODE_ONLY, PREFILL_ONLY, WHOLE
from llmsched.fleet.schedule import stack_stage_frames

if TYPE_CHECKING:
    import pandas as pd

    from llmsched.fleet.mixed_pool import MixedPoolCluster

__all__ = ["MIXED_POOL_RULES", "MixedPoolSchedule", "validate_mixed_pool"]

#: The cluster's rules, after each machine's (the fused rules, :data:`FUSED_RULES`).
MIXED_POOL_RULES = (*FUSED_RULES, "pieces", "reach", "transfer")


@dataclass(frozen=True, eq=False)
class MixedPoolSchedule(ScheduleBase):
    """What a :class:`~llmsched.fleet.mixed_pool.MixedPoolCluster` ran: each machine's schedule
    (a :class:`~llmsched.engines.fusion.schedule.FusedSchedule` of Orca's rule, whose requests
    are the pieces that reached the machine, in that order) and where each request's phases
    ran.

    Request ``i``'s prompt ran on machine ``prompt_machine[i]`` as its piece
    ``prompt_index[i]``, its decode on ``token_machine[i]`` as piece ``token_index[i]`` (the
    same piece when both ran on one machine); its keys and values moved from
    ``transfer_start[i]`` (its prompt's end) to ``transfer_end[i]`` (NaN when nothing moved).

    It meets :class:`~llmsched.core.schedule.ScheduleLike`: its machines are the cluster's
    (prompt machines first), a request's machine is its token machine, every machine's
    clients count (each decodes).
    """

    mode: ClassVar[str] = "mixed-pool"

    workload: Workload
    cluster: MixedPoolCluster
    schedules: tuple[FusedSchedule, ...]
    prompt_machine: np.ndarray
    prompt_index: np.ndarray
    token_machine: np.ndarray
    token_index: np.ndarray
    transfer_start: np.ndarray
    transfer_end: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("prompt_machine", "prompt_index", "token_machine", "token_index"):
            object.__setattr__(self, name, read_only(np.array(getattr(self, name), dtype=np.int64)))
        for name in ("transfer_start", "transfer_end"):
            object.__setattr__(self, name, read_only(np.array(getattr(self, name), dtype=np.float64)))

    def __repr__(self) -> str:
        return (
            f"MixedPoolSchedule({len(self.workload)} requests on {self.cluster.prompt_machines} prompt + "
            f"{self.cluster.token_machines} token machines, {int(self.split.sum())} split, "
            f"makespan={self.makespan:.6g}s)"
        )

    def _gather(self, machine: np.ndarray, index: np.ndarray, name: str) -> np.ndarray:
        """Each request's entry of the array ``name`` of its piece on ``machine[i]``."""
        out: np.ndarray | None = None
        for m, schedule in enumerate(self.schedules):
            values = np.asarray(getattr(schedule, name))
            if out is None:
                out = np.full(len(self.workload), np.nan if values.dtype.kind == "f" else -1, values.dtype)
            mine = np.flatnonzero(machine == m)
            if mine.size:
                out[mine] = values[index[mine]]
        return read_only(out if out is not None else np.zeros(0))

    # ---------------------------------------------------------------- requests
    @property
    def split(self) -> np.ndarray:
        """Whether each request's phases ran on two machines."""
        return self.prompt_machine != self.token_machine

    @cached_property
    def prefill_end(self) -> np.ndarray:
        """When each request's prompt ended (its first token), on its prompt machine."""
        return self._gather(self.prompt_machine, self.prompt_index, "prefill_end")

    @cached_property
    def finish(self) -> np.ndarray:
        """When each request's last token ended, on its token machine."""
        return self._gather(self.token_machine, self.token_index, "finish")

    @property
    def request_machine(self) -> np.ndarray:
        """The machine each request decoded on (:attr:`token_machine`)."""
        return self.token_machine

    @cached_property
    def request_client(self) -> np.ndarray:
        """The client (of its token machine) each request decoded on."""
        return self._gather(self.token_machine, self.token_index, "request_client").astype(np.int64)

    @cached_property
    def tbt_mean(self) -> np.ndarray:
        """Each request's mean time between tokens: from its prompt's end to its last token
        over the tokens it decoded (the transfer and the wait to join in the first gap)."""
        return read_only((self.finish - self.prefill_end) / self.workload.output_tokens)

    def tbt_distribution(self) -> tuple[np.ndarray, np.ndarray]:
        """Every gap between tokens of every request, as (values, counts): each machine's
        gaps (:meth:`~llmsched.engines.fusion.schedule.FusedSchedule.token_gaps`), a split
        request's first from its prompt's end on its prompt machine."""
        values = []
        for m, schedule in enumerate(self.schedules):
            since = np.asarray(schedule.prefill_end, dtype=np.float64).copy()
            arrived = np.flatnonzero((self.token_machine == m) & self.split)
            since[self.token_index[arrived]] = self.prefill_end[arrived]
            values.append(schedule.token_gaps(since)[1])
        gaps = np.concatenate(values) if values else np.zeros(0)
        return gaps, np.ones(gaps.size, dtype=np.int64)

    # ------------------------------------------------------------------ totals
    @property
    def makespan(self) -> float:
        """The end of the last machine's last iteration."""
        return float(max((s.makespan for s in self.schedules), default=0.0))

    @property
    def machines(self) -> int:
        return self.cluster.machines

    @property
    def clients(self) -> int:
        """Every machine's clients: each decodes."""
        return self.cluster.machines * self.cluster.clients

    @property
    def prefill_stages(self) -> int:
        """None: prompts ride in the machines' iterations."""
        return 0

    @property
    def decode_iterations(self) -> int:
        """Iterations in which some request decodes, over all machines."""
        return sum(s.decode_iterations for s in self.schedules)

    @property
    def utilization(self) -> float:
        """Client-time held by requests on every machine over every machine's clients times
        the makespan (each machine's utilization weighed by its makespan)."""
        span = self.makespan
        busy = sum(s.utilization * s.makespan for s in self.schedules)
        return busy / (len(self.schedules) * span) if span > 0 and self.schedules else 0.0

    def summary(self, slo_ttft: float | None = None, slo_tbt: float | None = None) -> dict[str, Any]:
        """The keys every mode's summary has (:data:`~llmsched.core.schedule.SUMMARY_KEYS`), then
        ``split_share`` (requests whose phases ran on two machines), ``prefilled_on_token``
        and ``decoded_on_prompt`` (shares of requests whose prompt ran on a token machine, or
        whose decode on a prompt machine), ``machines_mixed`` (times a machine joined the
        mixed pool), ``preemptions`` and ``recomputed_tokens`` (0: no machine preempts).

        Raises
        ------
        TypeError, ValueError
            A target that is not None or a number > 0 (``inf`` allowed).
        """
        goodput = self.goodput_figures(slo_ttft, slo_tbt)
        n = len(self.workload)
        prompt_pool = self.cluster.prompt_machines
        out: dict[str, Any] = {
            "mode": self.mode,
            "requests": n,
            "machines": self.machines,
            "clients": self.clients,
            "makespan_s": self.makespan,
            "utilization": self.utilization,
            "tokens_per_s": self.tokens_per_s,
            "prefill_stages": self.prefill_stages,
            "decode_iterations": self.decode_iterations,
        }
        out.update(self.latency_figures())
        out.update(goodput)
        out["split_share"] = float(np.mean(self.split)) if n else 0.0
        out["prefilled_on_token"] = float(np.mean(self.prompt_machine >= prompt_pool)) if n else 0.0
        out["decoded_on_prompt"] = float(np.mean(self.token_machine < prompt_pool)) if n else 0.0
        out["machines_mixed"] = int(self.info.get("machines_mixed", 0))
        out.update(self._preemption_figures())
        out["rejected"] = int(self.rejected.sum())
        return out

    def request_frame(self, slo_ttft: float | None = None, slo_tbt: float | None = None) -> pd.DataFrame:
        """One row per request: the workload's columns, ``machine`` (its token machine),
        ``client``, ``prompt_machine``, ``prefill_end``, ``transfer_end`` (NaN when nothing
        moved), then ``finish``, ``ttft``, ``latency``, ``tbt_mean``, ``e2e``,
        ``normalized_latency`` and ``meets_slo``.

        Raises
        ------
        TypeError, ValueError
            A target that is not None or a number > 0 (``inf`` allowed).
        """
        return self._request_frame(
            self.meets_slo(slo_ttft, slo_tbt),
            machine=self.request_machine,
            client=self.request_client,
            prompt_machine=self.prompt_machine,
            prefill_end=self.prefill_end,
            transfer_end=self.transfer_end,
        )

    def stage_frame(self) -> pd.DataFrame:
        """What ran when: every machine's runs (machine 0's, in its own order, then machine
        1's, ...), then one row per transfer (in request order). Columns: ``machine`` (a
        transfer's prompt machine), ``kind`` (``fused``, ``prefill`` or ``decode``;
        ``transfer``), ``start``, ``end``, ``duration``, ``tokens`` and ``requests`` (a
        transfer's prompt tokens and 1), then ``id`` (the run on its machine; the request)
        and ``to_machine`` (the machine; a transfer's token machine)."""
        moved = np.flatnonzero(self.split)
        start, end = self.transfer_start[moved], self.transfer_end[moved]
        transfers = {
            "machine": self.prompt_machine[moved],
            "kind": np.full(moved.size, "transfer"),
            "start": start,
            "end": end,
            "duration": end - start,
            "tokens": self.workload.prompt_tokens[moved].astype(np.int64),
            "requests": np.ones(moved.size, dtype=np.int64),
        }
        return stack_stage_frames(self.schedules, transfers, moved, self.token_machine[moved])

    def validate(self, **options: Any) -> list[Violation]:
        """Every rule the run breaks (:func:`validate_mixed_pool`, given ``options``: ``skip``,
        ``rtol``, ``atol``); empty when it is valid."""
        return validate_mixed_pool(self, **options)

    def chrome_trace(self) -> dict[str, Any]:
        """The run as a Chrome trace (Trace Event Format): a process per machine laid out as
        that machine's own fused trace (:mod:`llmsched.engines.fusion.export`; requests named
        by their index in the cluster's workload), each transfer a flow ``transfer`` from the
        prompt machine's client track at the prompt's end to the token machine's client track
        at the first decode, each arrival on its prompt machine's engine track.
        :meth:`write_chrome_trace` writes it.

        Raises
        ------
        ValueError
            A time that is not finite.
        """
        n, name = len(self.workload), self.workload.name
        events: list[dict[str, Any]] = []
        decode_tid = np.zeros(n, dtype=np.int64)
        decode_ts = np.zeros(n, dtype=np.int64)
        prompt_tid = np.zeros(n, dtype=np.int64)
        for m, schedule in enumerate(self.schedules):
            pid = m + 1
            requests = np.full(len(schedule.workload), -1, dtype=np.int64)
            for machine, index in (
                (self.prompt_machine, self.prompt_index),
                (self.token_machine, self.token_index),
            ):
                mine = np.flatnonzero(machine == m)
                requests[index[mine]] = mine
            pool = "prompt" if m < self.cluster.prompt_machines else "token"
            events += process_events(pid, f"llmsched: {name}: {pool} machine {m}", m)
            events += fusion_export.engine_events(schedule, pid, requests)
            tid, _ = fusion_export.request_slices(schedule)
            mine = np.flatnonzero(self.token_machine == m)
            decode_tid[mine] = tid[self.token_index[mine]]
            decode_ts[mine] = microseconds(
                schedule.iteration_start_at(schedule.request_decode_start[self.token_index[mine]]), "decode"
            )
            mine = np.flatnonzero(self.prompt_machine == m)
            prompt_tid[mine] = tid[self.prompt_index[mine]]
        ends = microseconds(np.where(self.split, self.transfer_start, 0.0), "transfer")
        for i in np.flatnonzero(self.split).tolist():
            source = (int(self.prompt_machine[i]) + 1, int(prompt_tid[i]), int(ends[i]))
            target = (int(self.token_machine[i]) + 1, int(decode_tid[i]), int(decode_ts[i]))
            args = {
                "request": i,
                "from": int(self.prompt_machine[i]),
                "to": int(self.token_machine[i]),
                "arrived_s": float(self.transfer_end[i]),
            }
            events += flow_events("transfer", i, source, target, args)
        events += arrival_events(self.workload.arrival, self.prompt_machine + 1)
        figures = mode_figures(self, machines=self.machines, split=int(self.split.sum()))
        return trace_object(events, figures)


def validate_mixed_pool(
    schedule: MixedPoolSchedule, skip: str | Iterable[str] = (), rtol: float = 1e-9, atol: float = 1e-9
) -> list[Violation]:
    """Every way ``schedule`` breaks the mixed pool's rules; empty when it is valid.

    Rules (:data:`MIXED_POOL_RULES`): each machine's schedule keeps the fused rules
    (:func:`~llmsched.engines.fusion.validate.validate_fused`, its messages naming the
    machine), and

    * ``pieces``: every request has its pieces, each one request's, with its prompt and
      output: one whole piece, or a prefill-only piece and a decode-only piece on two
      machines;
    * ``reach``: a request reaches its prompt machine when it arrives at the cluster;
    * ``transfer``: a split request's keys and values move from its prompt's end for its
      prompt tokens' bytes over the bandwidth, and it reaches its token machine when they have;
      a request on one machine moves nothing.
    """
    skip_set = skipped_rules(skip, MIXED_POOL_RULES)
    if not isinstance(schedule, MixedPoolSchedule):
        raise TypeError(f"validate_mixed_pool expects a MixedPoolSchedule, got {type(schedule).__name__}")
    report = Report(skip_set)
    out: list[Violation] = []
    machine_skip = sorted(skip_set & set(FUSED_RULES))
    for m, machine in enumerate(schedule.schedules):
        found = validate_fused(machine, skip=machine_skip, rtol=rtol, atol=atol)
        out += [Violation(v.rule, f"machine {m}: {v.message}") for v in found]
    wl, schedules = schedule.workload, schedule.schedules
    M, n = len(schedules), len(wl)
    arrays = (schedule.prompt_machine, schedule.prompt_index, schedule.token_machine, schedule.token_index)
    if any(a.shape != (n,) for a in (*arrays, schedule.transfer_start, schedule.transfer_end)):
        return [*out, Violation("structure", f"a per-request array does not hold {n} entries")]
    if schedule.cluster.machines != M:
        return [
            *out,
            Violation("structure", f"{M} machine schedules for {schedule.cluster.machines} machines"),
        ]
    for m, machine in enumerate(schedules):
        expected = schedule.cluster.machine_cost(m)
        if machine.cost is not expected and machine.cost != expected:
            out.append(Violation("structure", f"machine {m}'s schedule is priced by another cost model"))
    pm, pi, tm, ti = arrays
    sizes = np.array([len(s.workload) for s in schedules], dtype=np.int64)
    known = (pm >= 0) & (pm < M) & (tm >= 0) & (tm < M)
    known &= (pi >= 0) & (pi < sizes[np.clip(pm, 0, max(M - 1, 0))]) & (ti >= 0)
    known &= ti < sizes[np.clip(tm, 0, max(M - 1, 0))]
    if not known.all():
        bad = np.flatnonzero(~known)
        return [
            *out,
            Violation(
                "structure", f"requests {bad[:5].tolist()} name a machine or piece that does not exist"
            ),
        ]
    scale = max(1.0, schedule.makespan)
    tol = atol + 64 * math.ulp(scale)

    split = (pm != tm) | (pi != ti)
    counts = [np.zeros(size, dtype=np.int64) for size in sizes]
    owner = [np.full(size, -1, dtype=np.int64) for size in sizes]
    for on, index in ((pm, pi), (tm[split], ti[split])):
        for m in range(M):
            mine = on == m
            np.add.at(counts[m], index[mine], 1)
    for m in range(M):
        mine = pm == m
        owner[m][pi[mine]] = np.flatnonzero(mine)
        moved = (tm == m) & split
        owner[m][ti[moved]] = np.flatnonzero(moved)

    def phases(m: int) -> np.ndarray:
        s = schedules[m]
        return s.request_phase if s.request_phase is not None else np.full(sizes[m], WHOLE, dtype=np.int64)

    report.add(
        "pieces",
        np.flatnonzero(split & (pm == tm)),
        lambda i: f"request {i}'s two phases are on one machine, as two pieces",
    )
    for m in range(M):
        stray = np.flatnonzero(counts[m] != 1)
        report.add(
            "pieces", stray, lambda k, m=m: f"piece {k} of machine {m} is {counts[m][k]} requests' pieces"
        )
        want = np.full(sizes[m], WHOLE, dtype=np.int64)
        mine = pm == m
        want[pi[mine]] = np.where(split[mine], PREFILL_ONLY, WHOLE)
        moved = (tm == m) & split
        want[ti[moved]] = DECODE_ONLY
        wrong = np.flatnonzero(phases(m) != want)
        report.add(
            "pieces",
            wrong,
            lambda k, m=m, want=want: f"piece {k} of machine {m} has phase {phases(m)[k]}, not {want[k]}",
        )
        ok = owner[m] >= 0
        prompt, output = schedules[m].workload.prompt_tokens, schedules[m].workload.output_tokens
        own = owner[m][ok]
        other = np.flatnonzero(ok)[
            (prompt[ok] != wl.prompt_tokens[own]) | (output[ok] != wl.output_tokens[own])
        ]
        report.add(
            "pieces",
            other,
            lambda k, m=m: f"piece {k} of machine {m} has other sizes than request {owner[m][k]}",
        )
    reached = np.array([float(schedules[pm[i]].workload.arrival[pi[i]]) for i in range(n)])
    report.add(
        "reach",
        np.flatnonzero(np.abs(reached - wl.arrival) > tol),
        lambda i: (
            f"request {i} arrives at {wl.arrival[i]:.9g}s but reaches machine {pm[i]} at {reached[i]:.9g}s"
        ),
    )
    ended = schedule.prefill_end
    lasts = np.where(split, schedule.cluster.transfer_seconds(wl.prompt_tokens), np.nan)
    start, end = schedule.transfer_start, schedule.transfer_end
    # Written so that a NaN time fails: a split request's transfer has its times.
    off = split & ~(
        (np.abs(start - ended) <= tol) & (np.abs(end - (ended + lasts)) <= tol + rtol * np.abs(lasts))
    )
    report.add(
        "transfer",
        np.flatnonzero(off),
        lambda i: (
            f"request {i}'s transfer is [{start[i]:.9g}, {end[i]:.9g}]s, not from its prompt's end "
            f"{ended[i]:.9g}s for {lasts[i]:.9g}s"
        ),
    )
    landed = np.array(
        [float(schedules[tm[i]].workload.arrival[ti[i]]) if split[i] else np.nan for i in range(n)]
    )
    report.add(
        "transfer",
        np.flatnonzero(split & ~(np.abs(landed - end) <= tol)),
        lambda i: (
            f"request {i} reaches machine {tm[i]} at {landed[i]:.9g}s; its transfer ends at {end[i]:.9g}s"
        ),
    )
    report.add(
        "transfer",
        np.flatnonzero(~split & ~(np.isnan(start) & np.isnan(end))),
        lambda i: f"request {i} ran on one machine, yet a transfer is given",
    )
    return out + report.items
