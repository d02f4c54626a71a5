"""The fleet's validator: routing, arrival at the engine, and each engine's own rules."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from llmsched.core.violations import Report, Violation, skipped_rules
from llmsched.engines.competition.schedule import Schedule
from llmsched.engines.competition.validate import validate
from llmsched.engines.fusion.schedule import FusedSchedule
from llmsched.engines.fusion.validate import validate_fused
from llmsched.fleet.schedule import FleetSchedule, gather

if TYPE_CHECKING:
    pass

__all__ = ["FLEET_RULES", "validate_fleet"]


#: The rules :func:`validate_fleet` checks, in the order it reports them.
FLEET_RULES = ("structure", "routing", "reached", "rejected", "engine")


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
    * ``rejected``: a request the fleet's admission turned away reached no engine (engine and
      index -1, reached NaN, never pulled), and the engines ran every other request;
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
    rejected = fleet.rejected
    arrays = (
        fleet.request_engine,
        fleet.request_index,
        fleet.request_reached,
        fleet.request_pulled_from,
        rejected,
    )
    problems = []
    if any(a.shape != (n,) for a in arrays):
        problems.append(f"per-request arrays must have {n} entries, got {[a.shape for a in arrays]}")
    elif len(fleet.schedules) != m:
        problems.append(f"{len(fleet.schedules)} schedules for {m} engines")
    else:
        bad_engine = ((fleet.request_engine < 0) & ~rejected) | (fleet.request_engine >= m)
        if bad_engine.any():
            problems.append(
                f"request {int(np.flatnonzero(bad_engine)[0])} names an engine outside 0..{m - 1}"
            )
        for k, (spec, s) in enumerate(zip(fleet.engines, fleet.schedules, strict=True)):
            kind = FusedSchedule if spec.fused_budget is not None else Schedule
            if not isinstance(s, kind):
                problems.append(f"engine {k}'s schedule is a {type(s).__name__}, not a {kind.__name__}")
            elif (s.cost is not spec.cost and s.cost != spec.cost) or s.clients != spec.clients:
                problems.append(f"engine {k}'s schedule is not on its cost model and {spec.clients} clients")
            elif isinstance(s, FusedSchedule) and s.padded != (spec.mode == "padded"):
                problems.append(
                    f"engine {k} runs mode {spec.mode}, but its schedule is "
                    + ("padded" if s.padded else "not padded")
                )
    if problems:
        return [Violation("structure", p) for p in problems]
    # An engine's user requests: its workload, or, when its memory preempted some, what its
    # pieces make (each engine's own validator checks the pieces).
    turned = np.flatnonzero(rejected)
    wrong = turned[
        (fleet.request_engine[turned] != -1)
        | (fleet.request_index[turned] != -1)
        | ~np.isnan(fleet.request_reached[turned])
        | (fleet.request_pulled_from[turned] != -1)
    ]
    report.add(
        "rejected",
        wrong,
        lambda i: f"request {i} is marked rejected but has a place on an engine",
    )
    # The checks below read the requests not marked rejected; one marked rejected that an
    # engine ran shows there too (the engines ran more requests than the fleet says it served).
    # The requests the engines ran: every check below reads them, named by their fleet index.
    ids = np.flatnonzero(~rejected)
    sizes = np.array([len(s.requests) for s in fleet.schedules], dtype=np.int64)
    engine, index = fleet.request_engine[ids], fleet.request_index[ids]
    out_of_range = (index < 0) | (index >= sizes[engine])
    report.add(
        "structure",
        np.flatnonzero(out_of_range),
        lambda j: f"request {ids[j]} has index {index[j]} on engine {engine[j]}",
    )
    if out_of_range.any():
        return report.items
    slot = fleet._offsets[engine] + index
    counts = np.bincount(slot, minlength=int(sizes.sum()))
    twice = np.flatnonzero(counts[slot] > 1)
    report.add(
        "routing", twice, lambda j: f"request {ids[j]} shares its place on engine {engine[j]} with another"
    )
    if int(sizes.sum()) != ids.size:
        report.items.append(
            Violation(
                "routing",
                f"the engines ran {int(sizes.sum())} requests; the fleet has {n}"
                + (f", {turned.size} of them rejected" if turned.size else ""),
            )
        )

    def column(name: str) -> np.ndarray:
        parts = [np.asarray(getattr(s.requests, name)) for s in fleet.schedules]
        return gather(parts, fleet._offsets, engine, index)

    for name in ("prompt_tokens", "output_tokens"):
        differs = np.flatnonzero(column(name) != getattr(wl, name)[ids])
        report.add(
            "routing",
            differs,
            lambda j, name=name: f"request {ids[j]}'s {name} differs on engine {engine[j]}",
        )
    if wl.predicted_output is not None and all(
        s.requests.predicted_output is not None for s in fleet.schedules
    ):
        differs = np.flatnonzero(column("predicted_output") != wl.predicted_output[ids])
        report.add(
            "routing", differs, lambda j: f"request {ids[j]}'s prediction differs on engine {engine[j]}"
        )
    reached, pulled = fleet.request_reached[ids], fleet.request_pulled_from[ids]
    delay = float(fleet.info.get("backoff_delay", 0.0))
    earliest = wl.arrival[ids] + np.where(pulled >= 0, delay, 0.0)
    tol = atol + 64 * np.spacing(np.maximum(np.abs(reached), 1.0))
    early = np.flatnonzero(~(reached >= earliest - tol))
    report.add(
        "reached",
        early,
        lambda j: (
            f"request {ids[j]} reached engine {engine[j]} at {reached[j]:.9g} s, before {earliest[j]:.9g} s"
        ),
    )
    bad_pull = np.flatnonzero((pulled < -1) | (pulled >= m) | (pulled == engine))
    report.add(
        "reached",
        bad_pull,
        lambda j: f"request {ids[j]} was pulled from engine {pulled[j]} to engine {engine[j]}",
    )
    mismatch = np.flatnonzero(~np.isclose(column("arrival"), reached, rtol=0, atol=0) & ~np.isnan(reached))
    report.add(
        "reached",
        mismatch,
        lambda j: f"request {ids[j]} arrives on engine {engine[j]} at another time than it reached it",
    )
    if "engine" not in skip_set:
        for k, s in enumerate(fleet.schedules):
            if len(s.workload) == 0:
                continue
            check = validate_fused if isinstance(s, FusedSchedule) else validate
            for v in check(s, rtol=rtol, atol=atol):  # type: ignore[arg-type]
                report.items.append(Violation("engine", f"engine {k}: [{v.rule}] {v.message}"))
    return report.items
