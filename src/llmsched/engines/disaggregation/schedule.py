"""PD disaggregation (Splitwise): prompt machines, a KV transfer, token machines; the
cluster, its schedule, its validator and its lower bound.

A request is prefilled on a *prompt machine* (prefill stages only, up to that machine's
prefill capacity, first come first served), and its keys and values are then sent to a
*token machine*, which decodes it with continuous batching (every decoding request in every
iteration, up to the machine's clients). The transfer moves ``kv_bytes_per_token`` bytes per
prompt token over a link of ``kv_bandwidth`` GB/s: ``x = bytes / bandwidth`` seconds.
Without overlap it starts when the prefill stage ends. With Splitwise's per-layer overlap,
layer ``l``'s keys and values leave as soon as the stage has computed that layer (the stage's
time spread evenly over ``layers``), so what remains after the stage ends is
``max(x / layers, x - S (layers - 1) / layers)`` for a stage of ``S`` seconds
(:func:`transfer_seconds`). Links are not shared: each request's transfer has the bandwidth
to itself.

A request's first token comes at the end of its prefill stage, as under competition; its
next ``output_tokens`` come from the token machine's iterations, the first of them after the
transfer (so the transfer and any wait for a slot fall in its first gap between tokens).

With ``mixed=True`` the cluster lends idle machines of one pool to the other under load
(Splitwise's mixed pool). A token machine with nothing to decode, nothing waiting and nothing
on its way takes a prefill stage from the most loaded prompt queue when it holds more than one
stage's worth of tokens, and then decodes those requests itself, with no transfer. When every
token machine is full (as many requests decoding, waiting or on their way as it has clients),
a request leaving a prompt machine goes to an idle prompt machine instead (no stage, no queue),
which decodes it with the prompt pool's cost model and takes no stage of its own until its
decoding is done. A lent machine runs one phase at a time, as under competition.

:func:`llmsched.simulate_disaggregated` runs a workload on a cluster; :func:`validate_disaggregated`
checks the result's rules independently; :func:`disaggregated_lower_bounds` bounds any
schedule's makespan from below.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from llmsched.core.checks import flag, positive_int, real
from llmsched.core.cost import (
    ContextCostModel,
    CostModel,
    LinearCostModel,
    context_rate,
    decode_seconds,
    prefill_seconds,
    request_context,
)
from llmsched.core.instance import (
    WorkloadTotals,
    check_cost_model,
    check_horizon,
    decode_work_bound,
    prefill_work_bound,
)
from llmsched.core.schedule import RequestTimes, latency_figures, percentiles, read_only
from llmsched.core.violations import Report, Violation, skipped_rules
from llmsched.core.workload import Workload

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "DISAGGREGATED_RULES",
    "DisaggregatedBounds",
    "DisaggregatedCluster",
    "DisaggregatedSchedule",
    "disaggregated_lower_bounds",
    "kv_bytes_per_token",
    "transfer_seconds",
    "validate_disaggregated",
]


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: int = 2) -> int:
    """Bytes of keys and values one token holds: ``2 * layers * kv_heads * head_dim * bytes``
    (LLaMA-65B in float16: 2 x 80 x 64 x 128 x 2 = 2.6 MB)."""
    values = [
        positive_int(n, v) for n, v in (("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim))
    ]
    return 2 * values[0] * values[1] * values[2] * positive_int("dtype_bytes", dtype_bytes)


def transfer_seconds(
    prompt_tokens: Any,
    stage_seconds: Any,
    bytes_per_token: float,
    bandwidth_gbs: float,
    layers: int,
    overlap: bool,
) -> Any:
    """Seconds from a prefill stage's end until a prompt's keys and values have arrived.

    ``x = prompt_tokens * bytes_per_token / (bandwidth_gbs * 1e9)``; without ``overlap``,
    ``x``; with it, ``max(x / layers, x - stage_seconds * (layers - 1) / layers)`` (each
    layer sent once computed, the stage's time spread evenly over its layers).

    Raises
    ------
    ValueError
        If ``bytes_per_token`` is not >= 0, ``bandwidth_gbs`` not > 0, or ``layers`` not a
        positive integer.
    """
    bytes_per_token = real("bytes_per_token", bytes_per_token, low=0.0)
    bandwidth_gbs = real("bandwidth_gbs", bandwidth_gbs, low=0.0, low_open=True)
    layers = positive_int("layers", layers)
    overlap = flag("overlap", overlap)
    x = np.asarray(prompt_tokens, dtype=np.float64) * bytes_per_token / (bandwidth_gbs * 1e9)
    if overlap:
        x = np.maximum(x / layers, x - np.asarray(stage_seconds, dtype=np.float64) * (layers - 1) / layers)
    return float(x) if x.ndim == 0 else x


def _per_token_cost(name: str, cost: Any) -> CostModel:
    if not isinstance(cost, (LinearCostModel, ContextCostModel)):
        raise TypeError(f"{name} must be a LinearCostModel or a ContextCostModel, got {type(cost).__name__}")
    return cost


@dataclass(frozen=True)
class DisaggregatedCluster:
    """A Splitwise cluster: ``prompt_machines`` and ``token_machines``, each an engine.

    Parameters
    ----------
    prompt_machines, token_machines
        Machines in each pool (at least one each).
    prompt_cost, token_cost
        The cost model of each pool's machines (a prompt machine's prefill stages; a token
        machine's decode iterations, and its prefill stages when lent).
    token_clients
        Requests one token machine decodes at once (its KV-cache slots).
    kv_bytes_per_token
        Bytes of keys and values per prompt token (:func:`kv_bytes_per_token`).
    kv_bandwidth
        GB/s of the link a transfer uses.
    layers
        Layers of the model (for the per-layer overlap).
    overlap
        Send each layer's keys and values as soon as it is computed (Splitwise's overlap).
    mixed
        Lend idle token machines to the prompt pool under load (see the module docstring).
    """

    prompt_machines: int
    token_machines: int
    prompt_cost: CostModel
    token_cost: CostModel
    token_clients: int
    kv_bytes_per_token: float
    kv_bandwidth: float
    layers: int = 80
    overlap: bool = True
    mixed: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "prompt_machines", positive_int("prompt_machines", self.prompt_machines))
        object.__setattr__(self, "token_machines", positive_int("token_machines", self.token_machines))
        _per_token_cost("prompt_cost", self.prompt_cost)
        _per_token_cost("token_cost", self.token_cost)
        object.__setattr__(self, "token_clients", positive_int("token_clients", self.token_clients))
        object.__setattr__(
            self, "kv_bytes_per_token", real("kv_bytes_per_token", self.kv_bytes_per_token, low=0.0)
        )
        object.__setattr__(
            self, "kv_bandwidth", real("kv_bandwidth", self.kv_bandwidth, low=0.0, low_open=True)
        )
        object.__setattr__(self, "layers", positive_int("layers", self.layers))
        object.__setattr__(self, "overlap", flag("overlap", self.overlap))
        object.__setattr__(self, "mixed", flag("mixed", self.mixed))

    @property
    def machines(self) -> int:
        return self.prompt_machines + self.token_machines

    def is_prompt(self, machine: Any) -> Any:
        """Whether machine indices are prompt machines (``0 .. prompt_machines - 1``); the
        token machines follow."""
        return np.asarray(machine) < self.prompt_machines

    def cost_of(self, machine: int) -> CostModel:
        return self.prompt_cost if machine < self.prompt_machines else self.token_cost

    def transfer(self, prompt_tokens: Any, stage_seconds: Any) -> Any:
        """:func:`transfer_seconds` on this cluster's link."""
        return transfer_seconds(
            prompt_tokens,
            stage_seconds,
            self.kv_bytes_per_token,
            self.kv_bandwidth,
            self.layers,
            self.overlap,
        )

    def check(self, workload: Workload) -> None:
        """Raise ValueError unless ``workload`` can run on this cluster, before any work.

        Every prompt must fit a prompt machine's stage (and a token machine's, when it may
        be lent); both cost models must give finite times >= 0 for one token and one client,
        for the largest stage the workload can ask of each pool (a full prefill stage of the
        longest prompts; every client decoding at the largest context), and the KV transfer
        of the longest prompt must be finite. Every time the run can reach (the latest
        arrival, plus every transfer, plus a bound on each pool's stages) must leave float64
        enough precision to time the shortest stage (:func:`~llmsched.core.instance.check_horizon`).
        """
        prefills = [self.prompt_cost, self.token_cost] if self.mixed else [self.prompt_cost]
        decodes = [self.prompt_cost, self.token_cost] if self.mixed else [self.token_cost]
        shortest = [check_cost_model(workload, cost, 1) for cost in prefills]
        # Token machines never prefill unless lent: their capacity does not matter.
        shortest += [check_cost_model(Workload([1], [1]), cost, self.token_clients) for cost in decodes]
        totals = WorkloadTotals.of(workload)
        # Each pool's work bounded as if one machine did it all.
        prefill = [prefill_work_bound(totals, cost) for cost in prefills]
        decode = [decode_work_bound(totals, cost, self.token_clients) for cost in decodes]
        work = max(bound.seconds for bound in prefill) + max(bound.seconds for bound in decode)
        # A transfer takes at most x = bytes / bandwidth (the overlap only shortens it).
        longest = totals.longest_prompt
        link = self.kv_bandwidth * 1e9
        slowest = longest * self.kv_bytes_per_token / link
        if not slowest < math.inf:
            raise ValueError(
                f"the KV transfer of a {longest}-token prompt takes {slowest!r} s at "
                f"kv_bytes_per_token={self.kv_bytes_per_token:g} over kv_bandwidth={self.kv_bandwidth:g} "
                "GB/s; transfer times must be finite: raise kv_bandwidth or lower kv_bytes_per_token"
            )
        transfers = totals.prompt_tokens * self.kv_bytes_per_token / link
        positive = [t for t in shortest if t > 0]
        check_horizon(
            totals,
            min(positive, default=0.0),
            work,
            transfers,
            "KV transfers",
            (*prefill, *decode),
            "a larger kv_bandwidth or a smaller kv_bytes_per_token",
        )


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


# ------------------------------------------------------------------- validator
DISAGGREGATED_RULES = (
    "structure",
    "pools",
    "capacity",
    "arrival",
    "stage_time",
    "timeline",
    "transfer",
    "decoding",
    "context",
    "one_per_client",
    "tokens",
    "makespan",
)


def validate_disaggregated(
    schedule: DisaggregatedSchedule, skip: str | Iterable[str] = (), rtol: float = 1e-9, atol: float = 1e-9
) -> list[Violation]:
    """Every way ``schedule`` breaks the disaggregated mode's rules; empty when valid.

    Rules (:data:`DISAGGREGATED_RULES`), each recomputed from the arrays and the workload:

    * ``structure``: lengths and index ranges (cannot be skipped);
    * ``pools``: prefill stages on prompt machines and decode runs on token machines, each
      on the other pool's machines only when the cluster lends them (``mixed``); a request
      prefilled by a token machine decodes there;
    * ``capacity``: a stage's prompt tokens within its machine's prefill capacity;
    * ``arrival``: no request's stage starts before it arrives;
    * ``stage_time``: stages and runs take their machine's cost model's times (a stage by
      its tokens and squared prompts; a run's first iteration by its active count and
      context, each next one ``c_d * active`` longer);
    * ``timeline``: on each machine, stages and runs do not overlap, and a run with
      decoding requests starts where the machine's previous run ended when a request
      decodes across both;
    * ``transfer``: keys and values arrive :meth:`DisaggregatedCluster.transfer` after the
      stage ends (at the stage's end on the same machine), and the request's first decode
      iteration starts no earlier;
    * ``decoding``: each run's active count equals the decode ranges covering it on its
      machine, and no range starts or ends inside a run;
    * ``context``: each run's context equals ``prompt + tokens decoded`` over its requests;
    * ``one_per_client``: a token machine's client holds one request at a time (from its
      first decode iteration to its last), clients within ``token_clients``;
    * ``tokens``: each request decodes its output tokens;
    * ``makespan``: the last stage's or run's end.
    """
    skip_set = skipped_rules(skip, DISAGGREGATED_RULES)
    if not isinstance(schedule, DisaggregatedSchedule):
        raise TypeError(
            f"validate_disaggregated expects a DisaggregatedSchedule, got {type(schedule).__name__}"
        )
    report = Report(skip_set)

    def add(rule: str, where: Any, describe: Any) -> None:
        report.add(rule, np.asarray(where).ravel(), describe)

    s, wl, c = schedule, schedule.workload, schedule.cluster
    n, stages, runs = len(wl), s.stage_start.size, s.run_start.size
    broken = [
        f"{a} has {getattr(s, a).size} entries for {stages} stages"
        for a in ("stage_machine", "stage_end")
        if getattr(s, a).size != stages
    ]
    broken += [
        f"{a} has {getattr(s, a).size} entries for {runs} runs"
        for a in ("run_machine", "run_iterations", "run_first_time", "run_step", "run_active", "run_context")
        if getattr(s, a).size != runs
    ]
    broken += [
        f"{a} has {getattr(s, a).size} entries for {n} requests"
        for a in (
            "request_stage",
            "request_machine",
            "request_client",
            "request_transfer_end",
            "request_decode_start",
            "request_decode_end",
        )
        if getattr(s, a).size != n
    ]
    if not broken:
        if n and not ((s.request_stage >= 0) & (s.request_stage < stages)).all():
            broken.append("a request's stage does not exist")
        for name in ("stage_machine", "run_machine", "request_machine"):
            arr = getattr(s, name)
            if arr.size and not ((arr >= 0) & (arr < c.machines)).all():
                broken.append(f"{name} names a machine that does not exist")
        floats = (
            "stage_start",
            "stage_end",
            "run_start",
            "run_first_time",
            "run_step",
            "request_transfer_end",
        )
        broken += [
            f"{a} holds a value that is not finite" for a in floats if not np.isfinite(getattr(s, a)).all()
        ]
        if not math.isfinite(s.makespan):
            broken.append(f"the makespan {s.makespan!r} is not finite")
        counts = ("run_active", "run_context")
        broken += [
            f"{a} holds a negative count" for a in counts if getattr(s, a).size and getattr(s, a).min() < 0
        ]
        if runs and s.run_iterations.min() < 1:
            broken.append("a run has fewer than one iteration")
        if not broken and n:
            totals = np.zeros(c.machines, dtype=np.int64)
            np.add.at(totals, s.run_machine, s.run_iterations)
            lo, hi = s.request_decode_start, s.request_decode_end
            if not ((lo >= 0) & (lo <= hi) & (hi <= totals[s.request_machine])).all():
                broken.append("a request's decode range is not a range of its machine's iterations")
    if broken:
        return [Violation("structure", b) for b in broken]

    prompt, output, arrival = wl.prompt_tokens, wl.output_tokens, wl.arrival
    scale = max(1.0, float(np.max(np.concatenate([s.stage_end, s.run_end]), initial=0.0)))
    tol = atol + 64 * math.ulp(scale)
    lo, hi = s.request_decode_start, s.request_decode_end
    stage_of = s.request_stage
    # pools
    lent_stage = ~c.is_prompt(s.stage_machine)
    if not c.mixed:
        add(
            "pools",
            np.flatnonzero(lent_stage),
            lambda k: f"stage {k} runs on token machine {s.stage_machine[k]}, which is not lent",
        )
    if not c.mixed:
        add(
            "pools",
            np.flatnonzero(c.is_prompt(s.run_machine)),
            lambda r: f"run {r} decodes on prompt machine {s.run_machine[r]}, which is not lent",
        )
        add(
            "pools",
            np.flatnonzero(c.is_prompt(s.request_machine)),
            lambda i: f"request {i} decodes on prompt machine {s.request_machine[i]}, which is not lent",
        )
    # Decoded where it was prefilled: no transfer (a lent token machine's own stage; a prompt
    # machine lent to the token pool decodes requests other machines prefilled).
    local = s.stage_machine[stage_of] == s.request_machine
    add(
        "pools",
        np.flatnonzero(local & c.is_prompt(s.request_machine)),
        lambda i: f"request {i} decodes on prompt machine {s.request_machine[i]}, which prefilled it",
    )
    add(
        "pools",
        np.flatnonzero(lent_stage[stage_of] & ~local),
        lambda i: (
            f"request {i} is prefilled by lent machine {s.stage_machine[stage_of[i]]} "
            f"but decodes on {s.request_machine[i]}"
        ),
    )
    # capacity and stage times
    tokens = np.zeros(stages, dtype=np.int64)
    squares = np.zeros(stages, dtype=np.int64)
    np.add.at(tokens, stage_of, prompt)
    np.add.at(squares, stage_of, prompt * prompt)
    empty = np.flatnonzero(np.bincount(stage_of, minlength=stages) == 0)
    add("capacity", empty, lambda k: f"stage {k} holds no request")
    for k in range(stages):
        cap = int(c.cost_of(int(s.stage_machine[k])).prefill_capacity)
        if tokens[k] > cap:
            add(
                "capacity",
                [k],
                lambda k, cap=cap: f"stage {k} holds {tokens[k]} prompt tokens > capacity {cap}",
            )
    starts_of = s.stage_start[stage_of]
    add(
        "arrival",
        np.flatnonzero(starts_of < arrival - tol),
        lambda i: f"request {i} arrives at {arrival[i]:.9g}s, after its stage starts at {starts_of[i]:.9g}s",
    )
    stage_len = s.stage_end - s.stage_start
    for pool, cost in ((True, c.prompt_cost), (False, c.token_cost)):
        on = np.flatnonzero(c.is_prompt(s.stage_machine) == pool)
        if on.size:
            want = np.asarray(prefill_seconds(cost, tokens[on], squares[on]), dtype=np.float64)
            off = np.flatnonzero(np.abs(stage_len[on] - want) > tol + rtol * want)
            add(
                "stage_time",
                on[off],
                lambda k: f"stage {k} takes {stage_len[k]:.9g}s, not the model's time for {tokens[k]} tokens",
            )
    # decoding counts and context, per token machine
    count = np.zeros(runs, dtype=np.int64)
    context = np.zeros(runs, dtype=np.int64)
    first = s.run_first_iteration
    for m in np.unique(np.concatenate([s.run_machine, s.request_machine])).tolist():
        on = np.flatnonzero(s.run_machine == m)
        mine = np.flatnonzero((s.request_machine == m) & (lo < hi))
        opens, closes = np.sort(lo[mine]), np.sort(hi[mine])
        g = first[on]
        count[on] = np.searchsorted(opens, g, side="right") - np.searchsorted(closes, g, side="right")
        key = (prompt - lo)[mine]
        o_pref = np.concatenate([[0], np.cumsum(key[np.argsort(lo[mine], kind="stable")])])
        c_pref = np.concatenate([[0], np.cumsum(key[np.argsort(hi[mine], kind="stable")])])
        context[on] = (
            o_pref[np.searchsorted(opens, g, side="right")]
            - c_pref[np.searchsorted(closes, g, side="right")]
            + count[on] * g
        )
        total = int(s.run_iterations[on].sum())
        bounds = np.concatenate([g, [total]])
        cut = mine[~np.isin(lo[mine], bounds) | ~np.isin(hi[mine], bounds)]
        add("decoding", cut, lambda i: f"request {i}'s decode range [{lo[i]}, {hi[i]}) cuts a run")
    add(
        "decoding",
        np.flatnonzero(count != s.run_active),
        lambda r: f"run {r} says {s.run_active[r]} decoding; {count[r]} ranges cover it",
    )
    add(
        "context",
        np.flatnonzero((count > 0) & (context != s.run_context)),
        lambda r: f"run {r} says context {s.run_context[r]}; its requests hold {context[r]}",
    )
    if runs:
        on_prompt = c.is_prompt(s.run_machine)
        want = np.where(
            on_prompt,
            np.asarray(decode_seconds(c.prompt_cost, count, context), dtype=np.float64),
            np.asarray(decode_seconds(c.token_cost, count, context), dtype=np.float64),
        )
        off = np.flatnonzero((count > 0) & (np.abs(s.run_first_time - want) > tol + rtol * want))
        add(
            "stage_time",
            off,
            lambda r: f"run {r}'s first iteration takes {s.run_first_time[r]:.9g}s, not {want[r]:.9g}s",
        )
        step = np.where(on_prompt, context_rate(c.prompt_cost), context_rate(c.token_cost)) * count
        off = np.flatnonzero((s.run_iterations > 1) & (np.abs(s.run_step - step) > tol + rtol * want))
        add(
            "stage_time",
            off,
            lambda r: f"run {r}'s iterations lengthen by {s.run_step[r]:.9g}s, not {step[r]:.9g}s",
        )
        add("decoding", np.flatnonzero(count == 0), lambda r: f"run {r} decodes nothing")
    # timeline per machine: nothing before time 0, a machine's runs listed in time order (its
    # iterations are numbered in that order), and stages and runs without overlap
    add(
        "timeline",
        np.flatnonzero(s.stage_start < -tol),
        lambda k: f"stage {k} starts at {s.stage_start[k]:.9g}s, before time 0",
    )
    add(
        "timeline",
        np.flatnonzero(s.run_start < -tol),
        lambda r: f"run {r} starts at {s.run_start[r]:.9g}s, before time 0",
    )
    for m in np.unique(s.run_machine).tolist():
        on = np.flatnonzero(s.run_machine == m)
        back = on[1:][s.run_start[on[1:]] < s.run_start[on[:-1]]]
        add("timeline", back, lambda r: f"run {r} is listed after a run of its machine that starts later")
    kinds = np.concatenate([np.zeros(stages, dtype=np.int64), np.ones(runs, dtype=np.int64)])
    idx = np.concatenate([np.arange(stages), np.arange(runs)])
    begin = np.concatenate([s.stage_start, s.run_start])
    end = np.concatenate([s.stage_end, s.run_end])
    machine = np.concatenate([s.stage_machine, s.run_machine])
    order = np.lexsort((kinds, begin, machine))
    same = machine[order[1:]] == machine[order[:-1]]
    clash = np.flatnonzero(same & (begin[order[1:]] < end[order[:-1]] - tol))
    add(
        "timeline",
        order[clash + 1],
        lambda j: (
            f"{'run' if kinds[j] else 'stage'} {idx[j]} on machine {machine[j]} starts at {begin[j]:.9g}s "
            "before the work before it ends"
        ),
    )
    # A request decoding across two consecutive runs of its machine: no pause between them.
    for m in np.unique(s.run_machine).tolist():
        on = np.flatnonzero(s.run_machine == m)
        if on.size < 2:
            continue
        mine = np.flatnonzero(s.request_machine == m)
        across = first[on[1:]]
        spanning = np.searchsorted(np.sort(lo[mine]), across, side="left") - np.searchsorted(
            np.sort(hi[mine]), across, side="right"
        )
        paused = np.flatnonzero((spanning > 0) & (s.run_start[on[1:]] > s.run_end[on[:-1]] + tol))
        add("timeline", on[1:][paused], lambda r: f"run {r} pauses requests decoding across it")
    # transfer
    expected = np.where(
        local,
        s.stage_end[stage_of],
        s.stage_end[stage_of] + np.asarray(c.transfer(prompt, stage_len[stage_of])),
    )
    add(
        "transfer",
        np.flatnonzero(np.abs(s.request_transfer_end - expected) > tol + rtol * np.abs(expected)),
        lambda i: (
            f"request {i}'s keys and values arrive at {s.request_transfer_end[i]:.9g}s, "
            f"not {expected[i]:.9g}s"
        ),
    )
    if n:
        first_start = s.iteration_end_on(s.request_machine, lo)
        run_of = np.zeros(n, dtype=np.int64)
        starts_at = first_start.copy()
        for m in np.unique(s.request_machine).tolist():
            on = np.flatnonzero(s.run_machine == m)
            mine = np.flatnonzero(s.request_machine == m)
            if not on.size:
                continue
            pos = on[
                np.searchsorted(
                    first[on], np.minimum(lo[mine], max(int(s.run_iterations[on].sum()) - 1, 0)), side="right"
                )
                - 1
            ]
            run_of[mine] = pos
            offset = lo[mine] - first[pos]
            starts_at[mine] = s.run_start[pos] + s._elapsed(pos, offset)
        early = np.flatnonzero((hi > lo) & (starts_at < s.request_transfer_end - tol))
        add(
            "transfer",
            early,
            lambda i: f"request {i} decodes from {starts_at[i]:.9g}s, before its keys and values arrive",
        )
    # one_per_client
    client = s.request_client
    add(
        "one_per_client",
        np.flatnonzero((client < 0) | (client >= c.token_clients)),
        lambda i: f"request {i} is on client {client[i]}, not one of 0..{c.token_clients - 1}",
    )
    order = np.lexsort((lo, client, s.request_machine))
    same = (s.request_machine[order[1:]] == s.request_machine[order[:-1]]) & (
        client[order[1:]] == client[order[:-1]]
    )
    clash = np.flatnonzero(same & (lo[order[1:]] < hi[order[:-1]]))
    add(
        "one_per_client",
        order[clash + 1],
        lambda i: f"request {i} shares client {client[i]} of machine {s.request_machine[i]}",
    )
    # tokens
    add(
        "tokens",
        np.flatnonzero(hi - lo != output),
        lambda i: f"request {i} decodes {hi[i] - lo[i]} tokens, not {output[i]}",
    )
    last = float(np.max(end, initial=0.0))
    if abs(s.makespan - last) > tol:
        add(
            "makespan", [0], lambda _: f"the makespan is {s.makespan:.9g}s; the last work ends at {last:.9g}s"
        )
    return report.items


# ------------------------------------------------------------------ lower bound
@dataclass(frozen=True)
class DisaggregatedBounds:
    """Lower bounds on a disaggregated schedule's makespan (seconds): ``prefill`` (the
    prompt pool's least work, from the first arrival), ``single_request`` (the slowest
    request alone), ``strong`` (the larger)."""

    prefill: float
    single_request: float
    strong: float


def disaggregated_lower_bounds(workload: Workload, cluster: DisaggregatedCluster) -> DisaggregatedBounds:
    """Lower bounds on the makespan of any disaggregated schedule.

    Without lent machines every prompt is prefilled on a prompt machine, each stage costing
    at least ``a_p`` plus its tokens' and squares' terms, the stages at least
    ``ceil(sum N^p / capacity)``; spread over ``P`` machines, some machine works at least
    the total over ``P`` after the first arrival. (With ``mixed`` a token machine may take a
    stage, so the pool's work is spread over every machine and priced at the cheaper of the
    two models' coefficients.) Alone, request ``i`` needs its own prefill stage, its
    transfer (with overlap, at least ``x / layers``; none when a lent machine may decode what
    it prefilled), and ``N^d`` iterations of at least the least time of any batch, plus its
    context's reads (under the cheaper pool's model when prompt machines may decode).
    """
    cluster.check(workload)
    prompt, output = workload.prompt_tokens, workload.output_tokens
    # Both are LinearCostModel or ContextCostModel (the cluster checks it).
    costs: list[Any] = [cluster.prompt_cost, cluster.token_cost] if cluster.mixed else [cluster.prompt_cost]
    machines = cluster.machines if cluster.mixed else cluster.prompt_machines
    squares = sum(p * p for p in prompt.tolist())
    total = int(prompt.sum())
    # Per stage a_p, per token b_p, per squared token c_p: the cheapest of the pools that may
    # prefill, and no fewer stages than the largest capacity allows.
    a_p = min(float(cost.prefill_base) for cost in costs)
    b_p = min(float(cost.prefill_per_token) for cost in costs)
    c_p = min(float(getattr(cost, "prefill_per_square", 0.0)) for cost in costs)
    stages = -(-total // max(int(cost.prefill_capacity) for cost in costs))
    work = (a_p * stages + b_p * total + c_p * squares) / machines
    prefill = float(workload.arrival.min()) + work
    alone_prefill = np.min(
        np.vstack(
            [
                np.asarray(prefill_seconds(cost, prompt, prompt.astype(np.int64) ** 2), dtype=np.float64)
                for cost in costs
            ]
        ),
        axis=0,
    )
    # A longer stage overlaps more of the transfer; with overlap at least the last layer's remains.
    sent = prompt * cluster.kv_bytes_per_token / (cluster.kv_bandwidth * 1e9)
    transfer = sent / cluster.layers if cluster.overlap else sent
    if cluster.mixed:
        transfer = np.zeros_like(transfer)  # a lent machine decodes its own prefill
    decoders = [cluster.prompt_cost, cluster.token_cost] if cluster.mixed else [cluster.token_cost]
    # No batch holds more requests than there are: nothing is sized by idle clients.
    batches = np.arange(1, min(cluster.token_clients, len(workload)) + 1)
    tau = min(float(np.min(decode_seconds(cost, batches, 0))) for cost in decoders)
    reads = min(context_rate(cost) for cost in decoders)
    alone = (
        workload.arrival + alone_prefill + transfer + output * tau + reads * request_context(prompt, output)
    )
    single = float(alone.max())
    return DisaggregatedBounds(prefill, single, max(prefill, single))
