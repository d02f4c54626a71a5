"""A fleet's schedule: each engine's schedule, and which engine each request was routed to, when
it reached it and where it was pulled from."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from llmsched.core.schedule import (
    STAGE_COLUMNS,
    ScheduleBase,
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

    from llmsched.core.violations import Violation

__all__ = ["FleetSchedule", "stack_stage_frames"]


def gather(parts: list[np.ndarray], offsets: np.ndarray, engine: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Each request's entry of its engine's per-request array."""
    if not parts:
        return np.zeros(0)
    return np.concatenate(parts)[offsets[engine] + index]


def stack_stage_frames(
    schedules: Any, extra: dict[str, np.ndarray], extra_ids: np.ndarray, extra_to: np.ndarray
) -> pd.DataFrame:
    """Every machine's ``stage_frame`` (machine 0's, in its own order, then machine 1's, ...),
    each machine numbered by its place, then the ``extra`` rows (a value per stage column);
    ``id`` (the row in its machine's own frame; ``extra_ids``) and ``to_machine`` (the machine;
    ``extra_to``) last."""
    import pandas as pd

    columns: dict[str, list[np.ndarray]] = {name: [] for name in STAGE_COLUMNS}
    ids, to_machine = [], []
    for k, schedule in enumerate(schedules):
        frame = schedule.stage_frame()
        for name in STAGE_COLUMNS:
            columns[name].append(frame[name].to_numpy())
        columns["machine"][-1] = np.full(len(frame), k, dtype=np.int64)
        ids.append(np.arange(len(frame), dtype=np.int64))
        to_machine.append(np.full(len(frame), k, dtype=np.int64))
    for name in STAGE_COLUMNS:
        columns[name].append(extra[name])
    ids.append(np.asarray(extra_ids, dtype=np.int64))
    to_machine.append(np.asarray(extra_to, dtype=np.int64))
    data: dict[str, np.ndarray] = {}
    for name in STAGE_COLUMNS:
        values = np.concatenate(columns[name])
        data[name] = values.astype(str) if name == "kind" else values
    data["id"] = np.concatenate(ids)
    data["to_machine"] = np.concatenate(to_machine)
    return pd.DataFrame(data).rename_axis("stage")


@dataclass(frozen=True, eq=False)
class FleetSchedule(ScheduleBase):
    """What a fleet ran: each engine's schedule and where each request went.

    It meets :class:`~llmsched.core.schedule.ScheduleLike`: its machines are its engines, a
    request's machine is the engine that ran it, and its stages are every engine's and the
    backoff pulls (:meth:`stage_frame`).

    A request the fleet's admission turned away (``request_rejected``) has engine, index and
    client -1, reached NaN, NaN times (TTFT, latency, gaps), no preemption, and meets no
    target; the latency percentiles of :meth:`summary` are over the requests served, and its
    ``rejected`` counts the others.
    """

    mode: ClassVar[str] = "fleet"

    workload: Workload
    engines: tuple[Engine, ...]
    schedules: tuple[Schedule | FusedSchedule, ...]
    request_engine: np.ndarray
    request_index: np.ndarray
    request_reached: np.ndarray
    request_pulled_from: np.ndarray
    router: str
    info: dict[str, Any] = field(default_factory=dict)
    request_rejected: np.ndarray | None = None

    def __post_init__(self) -> None:
        for name in ("request_engine", "request_index", "request_pulled_from"):
            object.__setattr__(self, name, read_only(np.asarray(getattr(self, name), dtype=np.int64)))
        object.__setattr__(
            self, "request_reached", read_only(np.asarray(self.request_reached, dtype=np.float64))
        )
        rejected = (
            np.zeros(len(self.request_engine), dtype=bool)
            if self.request_rejected is None
            else np.asarray(self.request_rejected, dtype=bool)
        )
        object.__setattr__(self, "request_rejected", read_only(rejected))

    @property
    def rejected(self) -> np.ndarray:
        """Whether each request was turned away at the fleet's door (bool)."""
        assert self.request_rejected is not None
        return self.request_rejected

    @cached_property
    def _served(self) -> np.ndarray:
        return ~self.rejected

    def __repr__(self) -> str:
        return (
            f"FleetSchedule({len(self.workload)} requests on {len(self.engines)} engines, router="
            f"{self.router!r}, makespan={self.makespan:.6g}s)"
        )

    @cached_property
    def _offsets(self) -> np.ndarray:
        sizes = np.array([len(s.requests) for s in self.schedules], dtype=np.int64)
        return np.concatenate(([0], np.cumsum(sizes)[:-1])) if sizes.size else sizes

    def _per_request(self, attribute: str, piece: str | None = None, fill: Any = math.nan) -> np.ndarray:
        """Each request's entry of its engine's array ``attribute``: one per user request, or,
        with ``piece`` (``"first"`` or ``"last"``), one per piece read at the request's first
        or last piece (an engine with KV-cache memory splits a preempted request into pieces;
        ``request_index`` numbers its user requests); ``fill`` for a rejected request."""
        parts = []
        for s in self.schedules:
            values = np.asarray(getattr(s, attribute))
            if piece is not None and s.request_parent is not None:
                values = values[s.first_piece if piece == "first" else s.last_piece]
            parts.append(values)
        served = self._served
        if served.all():
            return read_only(gather(parts, self._offsets, self.request_engine, self.request_index))
        found = gather(parts, self._offsets, self.request_engine[served], self.request_index[served])
        out = np.full(len(served), fill, dtype=np.result_type(found.dtype, np.asarray(fill).dtype))
        out[served] = found
        return read_only(out)

    @cached_property
    def prefill_end(self) -> np.ndarray:
        """When each request's prefill ended (its first token)."""
        return self._per_request("prefill_end", "first")

    @cached_property
    def finish(self) -> np.ndarray:
        """When each request produced its last token."""
        return self._per_request("finish", "last")

    @cached_property
    def tbt_mean(self) -> np.ndarray:
        """Each request's mean time between tokens (NaN for one of a single token)."""
        return self._per_request("tbt_mean")

    @cached_property
    def preemptions(self) -> np.ndarray:
        """How many times each request was preempted (by its engine's KV-cache memory)."""
        return read_only(self._per_request("preemptions", fill=0).astype(np.int64))

    @cached_property
    def recomputed_tokens(self) -> np.ndarray:
        """Tokens each request's engine prefilled anew after preempting it."""
        return read_only(self._per_request("recomputed_tokens", fill=0).astype(np.int64))

    @cached_property
    def request_client(self) -> np.ndarray:
        """The client (of its engine) each request ran on (its first piece's, when its engine
        preempted it)."""
        return read_only(self._per_request("request_client", "first", fill=-1).astype(np.int64))

    @property
    def request_machine(self) -> np.ndarray:
        """The engine each request ran on (:attr:`request_engine`)."""
        return self.request_engine

    @property
    def machines(self) -> int:
        """The fleet's engines."""
        return len(self.engines)

    @property
    def clients(self) -> int:
        """The engines' clients added up."""
        return sum(e.clients for e in self.engines)

    @property
    def prefill_stages(self) -> int:
        """Prefill stages over all engines."""
        return sum(s.prefill_stages for s in self.schedules)

    @property
    def decode_iterations(self) -> int:
        """Iterations in which some request decodes, over all engines."""
        return sum(s.decode_iterations for s in self.schedules)

    @property
    def makespan(self) -> float:
        """The end of the last engine's last stage."""
        return max((s.makespan for s in self.schedules), default=0.0)

    @property
    def price_per_hour(self) -> float:
        """What the fleet costs an hour: its engines' prices added up."""
        return float(sum(e.price for e in self.engines))

    @property
    def served_output_tokens(self) -> int:
        """The output tokens of the requests served (every request's, without admission)."""
        return int(self.workload.output_tokens[self._served].sum())

    @property
    def tokens_per_s(self) -> float:
        """Output tokens served per second of makespan."""
        span = self.makespan
        return self.served_output_tokens / span if span > 0 else 0.0

    @property
    def tokens_per_cost(self) -> float:
        """Output tokens served per unit of cost: tokens over (price per hour x makespan in
        hours); inf for a fleet that costs nothing."""
        spent = self.price_per_hour * self.makespan / 3600
        return self.served_output_tokens / spent if spent > 0 else math.inf

    @property
    def utilization(self) -> float:
        """Client-time held by requests on every engine (each engine's ``utilization`` times
        its clients and makespan, whatever its mode) over every engine's clients times the
        fleet's makespan."""
        span = self.makespan
        clients = sum(e.clients for e in self.engines)
        busy = sum(
            s.utilization * e.clients * s.makespan for s, e in zip(self.schedules, self.engines, strict=True)
        )
        return busy / (clients * span) if span > 0 else 0.0

    @property
    def pulled(self) -> int:
        """Requests that backoff moved to another engine."""
        return int(np.count_nonzero(self.request_pulled_from >= 0))

    def meets_slo(self, slo_ttft: float | None = None, slo_tbt: float | None = None) -> np.ndarray:
        """Whether each request meets the targets: TTFT (from its arrival at the fleet)
        <= ``slo_ttft`` and mean time between tokens <= ``slo_tbt``; None: no target. A
        rejected request meets none."""
        ttft_target, tbt_target = slo_target("slo_ttft", slo_ttft), slo_target("slo_tbt", slo_tbt)
        meets = self._served.copy()
        if ttft_target is not None:
            meets &= self.ttft <= ttft_target
        if tbt_target is not None:
            meets &= ~(self.tbt_mean > tbt_target)
        return meets

    def latency_figures(self) -> dict[str, float]:
        """The serving figures of the requests served (see
        :meth:`~llmsched.core.schedule.ScheduleBase.latency_figures`): a rejected request has
        no TTFT nor latency to count."""
        served = self._served
        out = latency_figures(self.ttft[served], self.latency[served], *self.tbt_distribution())
        p50, p90, p99 = percentiles(self.normalized_latency[served])
        out["normalized_latency_p50_s"] = p50
        out["normalized_latency_p90_s"] = p90
        out["normalized_latency_p99_s"] = p99
        return out

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
        p90, p99 of TTFT, latency and time between tokens, percentiles of the normalized
        latency); ``requests_per_s``, ``goodput_rps``, ``slo_attainment`` against the
        targets; then ``mode`` (``fleet``), ``machines`` (its engines), ``clients``,
        ``prefill_stages`` and ``decode_iterations`` (over all engines), which complete the
        keys every mode's summary has (:data:`~llmsched.core.schedule.SUMMARY_KEYS`),
        ``preemptions`` and ``recomputed_tokens`` (over all requests, by the engines' KV-cache
        memory), and ``rejected`` (the requests the fleet's admission turned away).
        ``requests_per_s`` counts every request offered, served or turned away, per second of
        makespan; ``tokens_per_s`` and ``goodput_rps`` count the served only.

        Raises
        ------
        TypeError, ValueError
            A target that is not None or a number > 0 (``inf`` allowed).
        """
        goodput = self.goodput_figures(slo_ttft, slo_tbt)  # the targets checked before the rest
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
        out.update(self.latency_figures())
        out.update(goodput)
        out["mode"] = self.mode
        out["machines"] = self.machines
        out["clients"] = self.clients
        out["prefill_stages"] = self.prefill_stages
        out["decode_iterations"] = self.decode_iterations
        # Last, so that the keys summary() always had keep their order.
        out.update(self._preemption_figures())
        out["rejected"] = int(self.rejected.sum())
        return out

    def _preemption_columns(self) -> dict[str, np.ndarray]:
        """``preemptions`` and ``recomputed_tokens`` of each request, when an engine's memory
        preempted some."""
        if all(s.request_parent is None for s in self.schedules):
            return {}
        return {"preemptions": self.preemptions, "recomputed_tokens": self.recomputed_tokens}

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
                    "requests": len(s.requests),
                    "pulled_in": int(pulled_in[k]),
                    "pulled_out": int(pulled_out[k]),
                    "output_tokens": s.requests.total_output_tokens,
                    "makespan_s": s.makespan,
                    "utilization": s.utilization,
                    "tokens_per_s": s.tokens_per_s,
                    "ttft_p99_s": percentiles(self.ttft[mine])[2],
                    "tbt_p99_s": latency_figures(np.zeros(0), np.zeros(0), gaps, counts)["tbt_p99_s"],
                }
            )
        return pd.DataFrame(rows)

    def request_frame(self, slo_ttft: float | None = None, slo_tbt: float | None = None) -> pd.DataFrame:
        """One row per request: the workload's columns, then ``engine``, ``machine`` (the
        engine again, the column every mode has), ``client``, ``reached``, ``pulled_from``,
        ``prefill_end``, ``finish``, ``ttft``, ``latency``, ``tbt_mean``, ``e2e``,
        ``normalized_latency`` and ``meets_slo`` (and ``preemptions`` and ``recomputed_tokens``
        when an engine's KV-cache memory preempted a request), and ``rejected`` (turned away by
        the fleet's admission).

        Raises
        ------
        TypeError, ValueError
            A target that is not None or a number > 0 (``inf`` allowed).
        """
        frame = self._request_frame(
            self.meets_slo(slo_ttft, slo_tbt),
            engine=self.request_engine,
            machine=self.request_machine,
            client=self.request_client,
            reached=self.request_reached,
            pulled_from=self.request_pulled_from,
            prefill_end=self.prefill_end,
        )
        frame.insert(len(frame.columns) - 1, "rejected", self.rejected)  # meets_slo stays last
        return frame

    def stage_frame(self) -> pd.DataFrame:
        """What ran when: every engine's stages (engine 0's, in its own order, then engine
        1's, ...), then one row per backoff pull (in request order).

        Columns: ``machine`` (the engine; a pull's donor), ``kind`` (as the engine names its
        stages; ``pull``), ``start``, ``end``, ``duration``, ``tokens``, ``requests`` (as each
        engine's :meth:`stage_frame` gives them; a pull's prompt tokens and 1), then ``id``
        (the row in its engine's own stage frame; the pulled request) and ``to_machine`` (the
        engine; the engine that pulled). A pull leaves its donor the backoff delay before
        the request reaches the engine that pulled it.
        """
        pulled = np.flatnonzero(self.request_pulled_from >= 0)
        delay = float(self.info.get("backoff_delay", 0.0))
        reached = self.request_reached[pulled]
        left = reached - delay
        pulls = {
            "machine": self.request_pulled_from[pulled],
            "kind": np.full(pulled.size, "pull"),
            "start": left,
            "end": reached,
            "duration": reached - left,
            "tokens": self.workload.prompt_tokens[pulled].astype(np.int64),
            "requests": np.ones(pulled.size, dtype=np.int64),
        }
        return stack_stage_frames(self.schedules, pulls, pulled, self.request_engine[pulled])

    def validate(self, **options: Any) -> list[Violation]:
        """Every rule of a fleet the run breaks, each engine's mode's rules included
        (:func:`llmsched.validate_fleet`, given ``options``: ``skip``, ``rtol``, ``atol``);
        empty when it is valid."""
        from llmsched.fleet.validate import validate_fleet

        return validate_fleet(self, **options)

    def chrome_trace(self) -> dict[str, Any]:
        """The fleet's run as a Chrome trace (Trace Event Format): a process per engine laid
        out as that engine's own trace, each pull a flow between engines; see
        :mod:`llmsched.fleet.export`. :meth:`write_chrome_trace` writes it.

        Raises
        ------
        ValueError
            A time that is not finite.
        """
        from llmsched.fleet.export import chrome_trace

        return chrome_trace(self)
