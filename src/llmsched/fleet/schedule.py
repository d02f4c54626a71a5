"""A fleet's schedule: each engine's schedule, and which engine each request was routed to, when
it reached it and where it was pulled from."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from llmsched.core.schedule import (
    RequestTimes,
    goodput_figures,
    latency_figures,
    percentiles,
    read_only,
    slo_target,
)
from llmsched.core.workload import Workload
from llmsched.engines.competition.schedule import Schedule
from llmsched.engines.fusion.schedule import FusedSchedule
from llmsched.fleet.engine import Engine

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["FleetSchedule"]


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
