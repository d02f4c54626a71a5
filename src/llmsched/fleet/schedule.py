"""Fleets of engines: what a fleet is, what it ran, and the rules a fleet's run keeps.

A fleet is several engines (:class:`Engine`), each with its own cost model, clients,
policies, price per hour and mode (competition or fusion). A router sends each arriving request to one engine;
with backoff (:class:`Backoff`) an engine that runs dry pulls waiting requests from the
most loaded one, and a pulled request reaches it ``delay`` seconds later. The event loop
that runs a fleet is :mod:`llmsched.fleet.simulate`; here are the data and the validator.

A :class:`FleetSchedule` keeps every engine's :class:`~llmsched.engines.competition.schedule.Schedule` or
:class:`~llmsched.engines.fusion.schedule.FusedSchedule` (whose
workload holds the requests that engine ran, each arriving when it *reached* the engine)
and, per request of the fleet's workload, its engine, its index there, when it reached
it, and the engine it was pulled from (-1 when none). Latencies count from the request's
arrival at the fleet, so a pulled request's transfer is in its TTFT.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from llmsched.core.checks import choice, positive_int, real
from llmsched.core.cost import CostModel
from llmsched.core.instance import check_instance
from llmsched.core.schedule import (
    RequestTimes,
    goodput_figures,
    latency_figures,
    percentiles,
    read_only,
    slo_target,
)
from llmsched.core.violations import Report, Violation, skipped_rules
from llmsched.core.workload import Workload
from llmsched.engines.competition.schedule import Schedule
from llmsched.engines.competition.validate import validate
from llmsched.engines.fusion.schedule import (
    FusedSchedule,
    check_fused_instance,
    check_token_budget,
    validate_fused,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["ENGINE_MODES", "FLEET_RULES", "Backoff", "Engine", "FleetSchedule", "validate_fleet"]

#: The engine modes a fleet runs.
ENGINE_MODES = ("competition", "fusion")
#: The rules :func:`validate_fleet` checks, in the order it reports them.
FLEET_RULES = ("structure", "routing", "reached", "engine")


@dataclass(frozen=True)
class Engine:
    """One engine of a fleet: its cost model, clients, price, policies and mode.

    Parameters
    ----------
    cost
        The engine's cost model (its machine's speed).
    clients
        Its clients (batch slots).
    price
        What it costs an hour, in any currency (the fleet's figures per cost use it).
    request_policy, iteration_policy
        Registered policy names (:func:`llmsched.online.request_policy_names`); each engine
        gets policies of its own. A fleet needs a request policy that is ``open_ended``
        (fcfs, batch-wise, shortest-first, longest-first): the others plan over the whole
        workload up front.
    name
        A label for tables; ``engine K`` when empty.
    mode
        ``competition`` (a prefill stage pauses decoding; the iteration policy decides when)
        or ``fusion`` (chunked prefill, :mod:`llmsched.engines.fusion.rule`: every iteration carries the
        decoding requests and prompt chunks up to ``token_budget`` tokens; no iteration
        policy).
    token_budget
        A fused engine's tokens per iteration: an integer in ``[2, 2**31]``. A competition
        engine does not use it, but it is checked in either mode, so that a bad value is
        refused rather than carried along (and a :func:`dataclasses.replace` of the mode
        does not meet it later).
    """

    cost: CostModel
    clients: int
    price: float = 1.0
    request_policy: str = "fcfs"
    iteration_policy: str = "prefill-first"
    name: str = ""
    mode: str = "competition"
    token_budget: int = 512

    def __post_init__(self) -> None:
        if not isinstance(self.cost, CostModel):
            raise TypeError(
                "an engine's cost must be a cost model with prefill_capacity, prefill_time and "
                f"decode_iteration_time, got {type(self.cost).__name__}"
            )
        object.__setattr__(self, "clients", positive_int("clients", self.clients))
        object.__setattr__(self, "price", real("price", self.price, low=0.0))
        for what in ("request_policy", "iteration_policy", "name"):
            if not isinstance(getattr(self, what), str):
                raise TypeError(f"an engine's {what} must be a str, got {getattr(self, what)!r}")
        object.__setattr__(self, "mode", choice("mode", self.mode, ENGINE_MODES))
        object.__setattr__(self, "token_budget", check_token_budget(self.token_budget))
        # Its times for one token and one client must be finite (what check_instance asks);
        # the workload's own largest stages are checked when a fleet runs it (check_fleet).
        if self.mode == "fusion":
            check_fused_instance(Workload([1], [1]), self.cost, self.clients, self.token_budget)
        else:
            check_instance(Workload([1], [1]), self.cost, self.clients)

    @cached_property
    def tokens_per_s(self) -> float:
        """Output tokens a second with every client decoding (its speed, for routers that
        weigh engines): ``clients / decode_iteration_time(clients)``."""
        seconds = float(self.cost.decode_iteration_time(self.clients))
        return self.clients / seconds if seconds > 0 else math.inf

    @cached_property
    def seconds_per_token(self) -> tuple[float, float]:
        """What a prompt token and an output token cost this engine, in seconds, when it is
        busy: the prefill's mean marginal time per token over a full stage, and a decode
        iteration of every client shared among them (``least-work`` routing weighs work so)."""
        capacity = int(self.cost.prefill_capacity)
        prefill = (float(self.cost.prefill_time(capacity)) - float(self.cost.prefill_time(0))) / capacity
        decode = float(self.cost.decode_iteration_time(self.clients)) / self.clients
        return max(prefill, 0.0), decode

    def label(self, index: int) -> str:
        return self.name or f"engine {index}"


@dataclass(frozen=True)
class Backoff:
    """Mico's backoff: an engine that runs dry (a client free and nothing waiting) pulls
    waiting requests from the engine with the most of them.

    Parameters
    ----------
    delay
        Seconds a pulled request takes to reach the engine that pulled it (the transfer).
    threshold
        The loaded engine must hold at least this many waiting requests to give any.
    share
        At most this fraction of its waiting requests (rounded up) is pulled at once, and
        never more than the dry engine's free clients.
    """

    delay: float = 0.02
    threshold: int = 1
    share: float = 0.5

    def __post_init__(self) -> None:
        object.__setattr__(self, "delay", real("delay", self.delay, low=0.0))
        object.__setattr__(self, "threshold", positive_int("threshold", self.threshold))
        object.__setattr__(self, "share", real("share", self.share, low=0.0, low_open=True, high=1.0))


def _gather(
    parts: list[np.ndarray], offsets: np.ndarray, engine: np.ndarray, index: np.ndarray
) -> np.ndarray:
    """Each request's entry of its engine's per-request array."""
    if not parts:
        return np.zeros(0)
    return np.concatenate(parts)[offsets[engine] + index]


@dataclass(frozen=True, eq=False)
class FleetSchedule(RequestTimes):
    """What a fleet ran: each engine's schedule and where each request went."""

    workload: Workload
    engines: tuple[Engine, ...]
    schedules: tuple[Schedule | FusedSchedule, ...]
    request_engine: np.ndarray
    request_index: np.ndarray
    request_reached: np.ndarray
    request_pulled_from: np.ndarray
    router: str
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("request_engine", "request_index", "request_pulled_from"):
            object.__setattr__(self, name, read_only(np.asarray(getattr(self, name), dtype=np.int64)))
        object.__setattr__(
            self, "request_reached", read_only(np.asarray(self.request_reached, dtype=np.float64))
        )

    def __repr__(self) -> str:
        return (
            f"FleetSchedule({len(self.workload)} requests on {len(self.engines)} engines, router="
            f"{self.router!r}, makespan={self.makespan:.6g}s)"
        )

    @cached_property
    def _offsets(self) -> np.ndarray:
        sizes = np.array([len(s.workload) for s in self.schedules], dtype=np.int64)
        return np.concatenate(([0], np.cumsum(sizes)[:-1])) if sizes.size else sizes

    def _per_request(self, attribute: str) -> np.ndarray:
        parts = [np.asarray(getattr(s, attribute)) for s in self.schedules]
        return read_only(_gather(parts, self._offsets, self.request_engine, self.request_index))

    @cached_property
    def prefill_end(self) -> np.ndarray:
        """When each request's prefill ended (its first token)."""
        return self._per_request("prefill_end")

    @cached_property
    def finish(self) -> np.ndarray:
        """When each request produced its last token."""
        return self._per_request("finish")

    @cached_property
    def tbt_mean(self) -> np.ndarray:
        """Each request's mean time between tokens (NaN for one of a single token)."""
        return self._per_request("tbt_mean")

    @property
    def makespan(self) -> float:
        """The end of the last engine's last stage."""
        return max((s.makespan for s in self.schedules), default=0.0)

    @property
    def price_per_hour(self) -> float:
        """What the fleet costs an hour: its engines' prices added up."""
        return float(sum(e.price for e in self.engines))

    @property
    def tokens_per_s(self) -> float:
        """Output tokens per second of the fleet's makespan."""
        span = self.makespan
        return self.workload.total_output_tokens / span if span > 0 else 0.0

    @property
    def tokens_per_cost(self) -> float:
        """Output tokens per unit of cost: tokens over (price per hour x makespan in hours);
        inf for a fleet that costs nothing."""
        spent = self.price_per_hour * self.makespan / 3600
        return self.workload.total_output_tokens / spent if spent > 0 else math.inf

    @property
    def utilization(self) -> float:
        """Busy client-time over every engine's clients times the fleet's makespan."""
        span = self.makespan
        clients = sum(e.clients for e in self.engines)
        busy = sum(s.busy_time for s in self.schedules)
        return busy / (clients * span) if span > 0 else 0.0

    @property
    def pulled(self) -> int:
        """Requests that backoff moved to another engine."""
        return int(np.count_nonzero(self.request_pulled_from >= 0))

    def meets_slo(self, slo_ttft: float | None = None, slo_tbt: float | None = None) -> np.ndarray:
        """Whether each request meets the targets: TTFT (from its arrival at the fleet)
        <= ``slo_ttft`` and mean time between tokens <= ``slo_tbt``; None: no target."""
        ttft_target, tbt_target = slo_target("slo_ttft", slo_ttft), slo_target("slo_tbt", slo_tbt)
        meets = np.ones(len(self.workload), dtype=bool)
        if ttft_target is not None:
            meets &= self.ttft <= ttft_target
        if tbt_target is not None:
            meets &= ~(self.tbt_mean > tbt_target)
        return meets

    def tbt_distribution(self) -> tuple[np.ndarray, np.ndarray]:
        """Every gap between tokens of every request, as (values, counts)."""
        pairs = [s.tbt_distribution() for s in self.schedules]
        if not pairs:
            return np.zeros(0), np.zeros(0, dtype=np.int64)
        return np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])

    def summary(self, slo_ttft: float | None = None, slo_tbt: float | None = None) -> dict[str, Any]:
        """Headline figures of the fleet: ``requests``, ``engines``, ``router``,
        ``makespan_s``, ``utilization``, ``tokens_per_s``, ``price_per_hour``,
        ``tokens_per_cost``, ``pulled``; the serving figures every mode reports (mean, p50,
        p90, p99 of TTFT, latency and time between tokens); ``requests_per_s``,
        ``goodput_rps``, ``slo_attainment`` against the targets."""
        meets = self.meets_slo(slo_ttft, slo_tbt)
        n = len(self.workload)
        span = self.makespan
        out: dict[str, Any] = {
            "requests": n,
            "engines": len(self.engines),
            "router": self.router,
            "makespan_s": span,
            "utilization": self.utilization,
            "tokens_per_s": self.tokens_per_s,
            "price_per_hour": self.price_per_hour,
            "tokens_per_cost": self.tokens_per_cost,
            "pulled": self.pulled,
        }
        out.update(latency_figures(self.ttft, self.latency, *self.tbt_distribution()))
        out.update(goodput_figures(meets, span, slo_ttft, slo_tbt))
        return out

    def engine_frame(self) -> pd.DataFrame:
        """One row per engine: ``engine``, ``clients``, ``price``, ``requests`` (it ran),
        ``pulled_in``, ``pulled_out``, ``output_tokens``, ``makespan_s``, ``utilization``,
        ``tokens_per_s``, ``ttft_p99_s``, ``tbt_p99_s``."""
        import pandas as pd

        pulled = self.request_pulled_from >= 0
        pulled_in = np.bincount(self.request_engine[pulled], minlength=len(self.engines))
        pulled_out = np.bincount(self.request_pulled_from[pulled], minlength=len(self.engines))
        rows = []
        for k, (engine, s) in enumerate(zip(self.engines, self.schedules, strict=True)):
            mine = self.request_engine == k
            gaps, counts = s.tbt_distribution()
            rows.append(
                {
                    "engine": engine.label(k),
                    "clients": engine.clients,
                    "price": engine.price,
                    "requests": len(s.workload),
                    "pulled_in": int(pulled_in[k]),
                    "pulled_out": int(pulled_out[k]),
                    "output_tokens": s.workload.total_output_tokens,
                    "makespan_s": s.makespan,
                    "utilization": s.utilization,
                    "tokens_per_s": s.tokens_per_s,
                    "ttft_p99_s": percentiles(self.ttft[mine])[2],
                    "tbt_p99_s": latency_figures(np.zeros(0), np.zeros(0), gaps, counts)["tbt_p99_s"],
                }
            )
        return pd.DataFrame(rows)

    def request_frame(self, slo_ttft: float | None = None, slo_tbt: float | None = None) -> pd.DataFrame:
        """One row per request: the workload's columns, then ``engine``, ``reached``,
        ``pulled_from``, ``prefill_end``, ``finish``, ``ttft``, ``latency``, ``tbt_mean`` and
        ``meets_slo``."""
        frame = self.workload.to_frame()
        frame["engine"] = self.request_engine
        frame["reached"] = self.request_reached
        frame["pulled_from"] = self.request_pulled_from
        frame["prefill_end"] = self.prefill_end
        frame["finish"] = self.finish
        frame["ttft"] = self.ttft
        frame["latency"] = self.latency
        frame["tbt_mean"] = self.tbt_mean
        frame["meets_slo"] = self.meets_slo(slo_ttft, slo_tbt)
        return frame


def validate_fleet(
    fleet: FleetSchedule, skip: str | Iterable[str] = (), rtol: float = 1e-9, atol: float = 1e-9
) -> list[Violation]:
    """Every way ``fleet`` breaks a fleet's rules; empty when valid.

    Rules (:data:`FLEET_RULES`):

    * ``structure``: array lengths, engine indices in range, one schedule per engine, each
      engine's schedule on that engine's cost model and clients (cannot be skipped);
    * ``routing``: each request of each engine's schedule is exactly one request of the
      fleet's workload, with the same prompt, output and prediction;
    * ``reached``: a request reaches its engine no earlier than it arrives at the fleet (a
      pulled one no earlier than the backoff delay after that), and its engine's workload
      says it arrived then;
    * ``engine``: each engine's schedule keeps its mode's rules (:func:`llmsched.validate`,
      or :func:`llmsched.validate_fused` for a fused engine, with ``rtol`` and ``atol``); the
      message names the engine and the engine's rule.
    """
    skip_set = skipped_rules(skip, FLEET_RULES)
    if not isinstance(fleet, FleetSchedule):
        raise TypeError(f"validate_fleet expects a FleetSchedule, got {type(fleet).__name__}")
    report = Report(skip_set)
    wl = fleet.workload
    n, m = len(wl), len(fleet.engines)
    arrays = (fleet.request_engine, fleet.request_index, fleet.request_reached, fleet.request_pulled_from)
    problems = []
    if any(a.shape != (n,) for a in arrays):
        problems.append(f"per-request arrays must have {n} entries, got {[a.shape for a in arrays]}")
    elif len(fleet.schedules) != m:
        problems.append(f"{len(fleet.schedules)} schedules for {m} engines")
    else:
        bad_engine = (fleet.request_engine < 0) | (fleet.request_engine >= m)
        if bad_engine.any():
            problems.append(
                f"request {int(np.flatnonzero(bad_engine)[0])} names an engine outside 0..{m - 1}"
            )
        for k, (spec, s) in enumerate(zip(fleet.engines, fleet.schedules, strict=True)):
            kind = FusedSchedule if spec.mode == "fusion" else Schedule
            if not isinstance(s, kind):
                problems.append(f"engine {k}'s schedule is a {type(s).__name__}, not a {kind.__name__}")
            elif (s.cost is not spec.cost and s.cost != spec.cost) or s.clients != spec.clients:
                problems.append(f"engine {k}'s schedule is not on its cost model and {spec.clients} clients")
    if problems:
        return [Violation("structure", p) for p in problems]
    sizes = np.array([len(s.workload) for s in fleet.schedules], dtype=np.int64)
    engine, index = fleet.request_engine, fleet.request_index
    out_of_range = (index < 0) | (index >= sizes[engine])
    report.add(
        "structure",
        np.flatnonzero(out_of_range),
        lambda i: f"request {i} has index {index[i]} on engine {engine[i]}",
    )
    if out_of_range.any():
        return report.items
    slot = fleet._offsets[engine] + index
    counts = np.bincount(slot, minlength=int(sizes.sum()))
    twice = np.flatnonzero(counts[slot] > 1)
    report.add("routing", twice, lambda i: f"request {i} shares its place on engine {engine[i]} with another")
    if int(sizes.sum()) != n:
        report.items.append(
            Violation("routing", f"the engines ran {int(sizes.sum())} requests; the fleet has {n}")
        )

    def column(name: str) -> np.ndarray:
        parts = [np.asarray(getattr(s.workload, name)) for s in fleet.schedules]
        return _gather(parts, fleet._offsets, engine, index)

    for name in ("prompt_tokens", "output_tokens"):
        differs = np.flatnonzero(column(name) != getattr(wl, name))
        report.add(
            "routing", differs, lambda i, name=name: f"request {i}'s {name} differs on engine {engine[i]}"
        )
    if wl.predicted_output is not None and all(
        s.workload.predicted_output is not None for s in fleet.schedules
    ):
        differs = np.flatnonzero(column("predicted_output") != wl.predicted_output)
        report.add("routing", differs, lambda i: f"request {i}'s prediction differs on engine {engine[i]}")
    reached, pulled = fleet.request_reached, fleet.request_pulled_from
    delay = float(fleet.info.get("backoff_delay", 0.0))
    earliest = wl.arrival + np.where(pulled >= 0, delay, 0.0)
    tol = atol + 64 * np.spacing(np.maximum(np.abs(reached), 1.0))
    early = np.flatnonzero(~(reached >= earliest - tol))
    report.add(
        "reached",
        early,
        lambda i: f"request {i} reached engine {engine[i]} at {reached[i]:.9g} s, before {earliest[i]:.9g} s",
    )
    bad_pull = np.flatnonzero((pulled < -1) | (pulled >= m) | (pulled == engine))
    report.add(
        "reached", bad_pull, lambda i: f"request {i} was pulled from engine {pulled[i]} to engine {engine[i]}"
    )
    mismatch = np.flatnonzero(~np.isclose(column("arrival"), reached, rtol=0, atol=0) & ~np.isnan(reached))
    report.add(
        "reached",
        mismatch,
        lambda i: f"request {i} arrives on engine {engine[i]} at another time than it reached it",
    )
    if "engine" not in skip_set:
        for k, s in enumerate(fleet.schedules):
            if len(s.workload) == 0:
                continue
            check = validate_fused if isinstance(s, FusedSchedule) else validate
            for v in check(s, rtol=rtol, atol=atol):  # type: ignore[arg-type]
                report.items.append(Violation("engine", f"engine {k}: [{v.rule}] {v.message}"))
    return report.items
