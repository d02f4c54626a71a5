"""Run a fleet of engines: routers, backoff, and every engine's decision loop in one clock.

Each engine runs the one decision loop (:func:`llmsched.engines.loop.open_engine`) under its
mode's batching rule, on its cost model's clock, as a generator that stops whenever it needs
to know the arrivals up to a
time. The fleet keeps one heap of those times and hands out the arrivals in time order,
so every engine sees exactly the requests routed to it and when: an engine's schedule is
the one :func:`llmsched.simulate` gives for the requests it received (a test checks it).
Arrivals at an instant are routed before any engine moves past that instant.

Routers (:data:`ROUTERS`) are small classes in :mod:`llmsched.fleet.routers`, one per file,
registered by name: among them ``round-robin``, ``random``, ``jsq``, ``power-of-two`` and
``least-work``, which are non-anticipative, and ``qcmax`` and ``mico``, which plan a closed batch
(every request arriving at one instant). The fleet starts its router with a
:class:`~llmsched.fleet.routers.base.RouterSetup` and asks it, as each request arrives, for an
engine, showing it the engines' loads at that moment (:class:`~llmsched.fleet.routers.base.Loads`);
a router of the user's own, meeting :class:`~llmsched.fleet.routers.base.Router`, runs the same
way, and every answer is checked.

Backoff (:class:`~llmsched.fleet.engine.Backoff`): when an engine is idle or decodes with a
client free and has nothing waiting nor on its way, it pulls from the engine with the most
waiting requests (at least ``threshold``) up to ``share`` of them (rounded up, at most its
free clients), the ones that engine would start last; they reach it ``delay`` seconds
later. An engine's request policy must be able to give requests up (``withdraw``).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

from llmsched.core.checks import rng
from llmsched.core.checks import time_limit as check_time_limit
from llmsched.core.instance import (
    WorkBound,
    WorkloadTotals,
    check_cost_model,
    check_horizon,
    decode_work_bound,
    prefill_work_bound,
)
from llmsched.core.workload import Workload
from llmsched.engines.loop import EngineStream, admits, open_engine, stream_schedule
from llmsched.engines.orca.rule import most_iteration_tokens
from llmsched.engines.padded.rule import padded_work_bound
from llmsched.fleet.admission import Admission
from llmsched.fleet.engine import Backoff, Engine
from llmsched.fleet.routers import as_router, router_names
from llmsched.fleet.routers.base import Loads, Router, RouterSetup, engine_index, read_only_view
from llmsched.fleet.schedule import FleetSchedule
from llmsched.online.offline import check_sizes, decode_sizes
from llmsched.online.registry import make_iteration_policy, make_request_policy

__all__ = ["ROUTERS", "check_fleet", "simulate_fleet"]

#: Router names, in the order the documentation lists them (the registry's).
ROUTERS = router_names()

# A name stays a name, an object the object: provision checks a name once and runs it often.
_RouterArg = TypeVar("_RouterArg", bound="str | Router")


def check_fleet(
    workload: Workload,
    engines: Sequence[Engine],
    router: _RouterArg = "round-robin",  # type: ignore[assignment]
    backoff: Backoff | None = None,
    seed: int = 0,
    sizes: str = "predicted",
    time_limit: float = math.inf,
) -> tuple[tuple[Engine, ...], _RouterArg, str, float]:
    """Check a fleet's run before any work (:func:`simulate_fleet`'s arguments); return the
    engines as a tuple, the router (as given: a registered name or a router object), the sizes
    and the time limit.

    Every engine must hold every prompt and give finite stage times for the largest stages
    the workload can ask of it (:func:`~llmsched.core.instance.check_instance`, a fused engine's
    prefill as chunks of its budget); every time the run can reach, the latest arrival plus a
    backoff delay per request plus the most work one engine could be given, must leave
    float64 enough precision to time the shortest stage of any engine
    (:func:`~llmsched.core.instance.check_horizon`). The router, its sizes and the request and
    iteration policies must be ones a fleet can run; a router object must meet
    :class:`~llmsched.fleet.routers.base.Router`.

    Raises
    ------
    TypeError, ValueError
        Saying what was wrong and what is allowed; an engine's problem names the engine.
    """
    if not isinstance(workload, Workload):
        raise TypeError(f"workload must be a llmsched.Workload, got {type(workload).__name__}")
    if len(workload) == 0:
        raise ValueError("the workload has no requests")
    if isinstance(engines, Engine) or not isinstance(engines, Sequence) or not engines:
        raise ValueError("engines must be a non-empty sequence of llmsched.Engine")
    engines = tuple(engines)
    for k, engine in enumerate(engines):
        if not isinstance(engine, Engine):
            raise TypeError(f"engine {k} must be a llmsched.Engine, got {type(engine).__name__}")
    routing = as_router(router)
    if backoff is not None and not isinstance(backoff, Backoff):
        raise TypeError(f"backoff must be a llmsched.Backoff or None, got {type(backoff).__name__}")
    rng("seed", seed)
    sizes = check_sizes(sizes)
    time_limit = check_time_limit("time_limit", time_limit)
    if routing.weighs:
        decode_sizes(workload, sizes)  # ValueError without predictions
    if routing.closed_batch and float(workload.arrival.max()) != float(workload.arrival.min()):
        raise ValueError(
            f"router {routing.name!r} assigns a closed batch (every request arriving at one instant); "
            "these requests arrive over time: use least-work, jsq, power-of-two, random or round-robin"
        )
    totals = WorkloadTotals.of(workload)
    shortest: list[float] = []
    work = 0.0
    stages: list[WorkBound] = []
    seen: set[Any] = set()
    for k, engine in enumerate(engines):
        policies = (engine.request_policy, engine.iteration_policy, engine.mode)
        try:
            knobs = (
                engine.token_budget,
                engine.max_num_batched_tokens,
                engine.chunked_prefill,
                engine.memory,
            )
            key: Any = (engine.cost, engine.clients, *policies, *knobs)
            hash(key)
        except TypeError:  # a cost model that is not hashable
            key = id(engine)
        if key in seen:
            continue  # engines alike are checked once
        seen.add(key)
        _check_policies(k, engine, backoff)
        budget = engine.fused_budget
        if budget is not None and engine.mode == "orca":  # a whole prompt past the cap runs alone
            budget = most_iteration_tokens(budget, workload)
        try:
            if engine.memory is not None and backoff is not None:
                raise ValueError(
                    "backoff pulls waiting requests between engines, and an engine with KV-cache "
                    "memory may hold a preempted request's continuation among them: run the "
                    "fleet without backoff or without memory"
                )
            engine.rule().check(workload, engine.cost, engine.clients)  # its rule's limits, memory's
            shortest.append(check_cost_model(workload, engine.cost, engine.clients))
            bounds = (
                padded_work_bound(totals, engine.cost, engine.clients)
                if engine.mode == "padded"
                else prefill_work_bound(totals, engine.cost, budget),
                decode_work_bound(totals, engine.cost, engine.clients),
            )
        except ValueError as exc:
            raise ValueError(f"{engine.label(k)}: {exc}") from None
        work = max(work, bounds[0].seconds + bounds[1].seconds)
        stages.extend(bounds)
    delay = backoff.delay * totals.requests if backoff is not None else 0.0
    positive = [t for t in shortest if t > 0]
    check_horizon(
        totals, min(positive, default=0.0), work, delay, "backoff delays", tuple(stages), "a smaller delay"
    )
    return engines, router, sizes, time_limit


def _check_policies(k: int, engine: Engine, backoff: Backoff | None) -> None:
    """Refuse an engine's policies that a fleet cannot run (or names it does not know)."""
    requests = make_request_policy(engine.request_policy)
    if not getattr(requests, "open_ended", False):
        raise ValueError(
            f"engine {k}'s request policy {engine.request_policy!r} plans over the whole workload up "
            "front; an engine of a fleet learns its requests as they are routed to it: use fcfs, "
            "batch-wise, shortest-first or longest-first"
        )
    if backoff is not None and not callable(getattr(requests, "withdraw", None)):
        raise ValueError(
            f"engine {k}'s request policy {engine.request_policy!r} cannot give up a waiting request, "
            "which backoff needs: use fcfs, batch-wise, shortest-first or longest-first"
        )
    make_iteration_policy(engine.iteration_policy)  # a fused engine's too: a name it does not know


def simulate_fleet(
    workload: Workload,
    engines: Sequence[Engine],
    router: str | Router = "round-robin",
    backoff: Backoff | None = None,
    seed: int = 0,
    sizes: str = "predicted",
    time_limit: float = math.inf,
    admission: Admission | None = None,
) -> FleetSchedule:
    """Run ``workload`` on a fleet of ``engines`` behind ``router``; return what it ran.

    Parameters
    ----------
    workload
        The requests, arriving at the fleet.
    engines
        The engines (:class:`~llmsched.fleet.engine.Engine`), each with its own cost model,
        clients, policies and price.
    router
        One of :data:`ROUTERS`, or a router object of the user's own meeting
        :class:`~llmsched.fleet.routers.base.Router` (started afresh for this run; every engine it
        answers is checked).
    backoff
        :class:`~llmsched.fleet.engine.Backoff` to let dry engines pull waiting requests; None: off.
    seed
        Seeds the ``random`` and ``power-of-two`` draws (a seeded router's).
    sizes
        What a router that ``weighs`` requests (``least-work``, ``qcmax``, ``mico``) weighs them
        by: ``predicted`` (the workload's predictions) or ``oracle`` (the true output lengths, a
        clairvoyant router; the fleet's ``info`` says so).
    time_limit
        Wall-clock seconds for a router's solver (``qcmax``'s), a safety net the caller chooses:
        a number >= 0, ``inf`` (the default) for none, so that the solver stops on its
        deterministic work budget and the fleet is the same on any machine.
    admission
        An admission rule at the fleet's door (:mod:`llmsched.fleet.admission`, such as
        :class:`~llmsched.fleet.admission.TTFTAdmission`), asked as each request arrives, after
        the router has chosen its engine: a request it turns away reaches no engine and is
        reported in the schedule's ``rejected``. None: every request is taken.

    Raises
    ------
    TypeError, ValueError
        Before any work (:func:`check_fleet`): a bad workload or engine list, a prompt some
        engine cannot hold, a stage some engine cannot time, times beyond the precision the
        validator can check, an unknown router or an object that is not a router, a
        closed-batch router on requests that arrive over time, a weighing router without
        predictions, a request policy a fleet cannot run, a time limit that is not seconds >= 0,
        an admission rule that is not one.
        While it runs, a ValueError if the router answers anything but an engine's index.
    """
    engines, router, sizes, time_limit = check_fleet(
        workload, engines, router, backoff, seed, sizes, time_limit
    )
    if admission is not None and (isinstance(admission, type) or not isinstance(admission, Admission)):
        raise TypeError(
            "admission must be None or an object with a name and admit(prompt, engine, loads, now), "
            f"got {type(admission).__name__}"
        )
    routing = as_router(router)
    n, m = len(workload), len(engines)
    arrival = workload.arrival.tolist()
    prompt = workload.prompt_tokens.tolist()
    output = workload.output_tokens.tolist()
    predicted = workload.predicted_output
    planned = predicted.tolist() if predicted is not None else [0] * n
    weighs = bool(routing.weighs)
    sizes_array = decode_sizes(workload, sizes) if weighs else np.zeros(0, dtype=np.int64)
    weight: list[int] = sizes_array.tolist()
    planned_sizes = sizes == "predicted"
    order_array = np.argsort(workload.arrival, kind="stable")
    order = order_array.tolist()
    routing.start(
        RouterSetup(
            engines=m,
            requests=n,
            prompt=workload.prompt_tokens,
            weight=sizes_array,
            order=order_array,
            seed=seed,
            speeds=np.array([e.tokens_per_s for e in engines]),
            time_limit=time_limit,
        )
    )

    # Every engine's policies and loop, primed: each stops at once, idle, waiting for work.
    streams: list[EngineStream] = []
    loops: list[Any] = []
    policies: list[Any] = []
    for engine in engines:
        requests = make_request_policy(engine.request_policy)
        stream = EngineStream()
        loop = open_engine(
            engine.cost,
            engine.clients,
            requests,
            None,
            stream,
            predicted is not None,
            workload.name,
            n,
            engine.rule(),
        )
        next(loop)
        streams.append(stream)
        loops.append(loop)
        policies.append(requests)

    clients = np.array([e.clients for e in engines], dtype=np.float64)
    held = np.zeros(m)  # requests routed and not finished nor pulled away, per engine
    work = np.zeros(m)  # their predicted work in seconds (a router that weighs)
    held_prompt = np.zeros(m)  # their prompt tokens
    pending_prompt = np.zeros(m)  # the prompt tokens of those not prefilled yet
    rates = np.array([e.seconds_per_token for e in engines])  # (prefill, decode) per token
    # What the router sees: the arrays above, updated in place, which it cannot write.
    loads = Loads(
        requests=read_only_view(held),
        clients=read_only_view(clients),
        work=read_only_view(work),
        prompt_tokens=read_only_view(held_prompt),
        rates=read_only_view(rates),
        pending_prompt_tokens=read_only_view(pending_prompt),
    )
    queued = np.zeros(m)  # waiting (not started), per engine
    routed_work = [0] * m  # planned output tokens routed, pulled away; prompt tokens likewise
    gone_work = [0] * m
    routed_prompt = [0] * m
    gone_prompt = [0] * m
    gone = [0] * m
    incoming = [0] * m  # pulled requests on their way
    # The fleet's request of each of an engine's indices (a piece, made when memory preempts a
    # request, has none: request_parent names its request).
    members: list[dict[int, int]] = [{} for _ in range(m)]
    left: list[set[int]] = [set() for _ in range(m)]  # engine indices pulled away
    reached = [math.nan] * n
    pulled_from = [-1] * n
    rejected = np.zeros(n, dtype=bool)
    admit = admission.admit if admission is not None else None
    results: list[Any] = [None] * m
    version = [0] * m
    woken = [False] * m
    events: list[tuple[float, int, int, int]] = []  # (time, tie, engine, version)
    transit: list[tuple[float, int, int, int, int]] = []  # (time, tie, request, engine, donor)
    tie = 0
    heappush, heappop = heapq.heappush, heapq.heappop
    # Engines whose loads changed since the router last read them: brought up to date only
    # when a router reads them (an engine moves on several times between two arrivals).
    stale = [False] * m

    def refresh(k: int) -> None:
        stale[k] = False
        s = streams[k]
        held[k] = len(s.prompt) - gone[k] - s.finished
        prompt_tokens = routed_prompt[k] - gone_prompt[k] - s.finished_prompt
        held_prompt[k] = prompt_tokens
        pending_prompt[k] = routed_prompt[k] - gone_prompt[k] - s.prefilled_prompt
        if weighs:
            work[k] = (
                prompt_tokens * rates[k, 0]
                + (
                    routed_work[k]
                    - gone_work[k]
                    - (s.finished_planned if planned_sizes else s.knowns[0].total_finished_output)
                )
                * rates[k, 1]
            )
        queued[k] = len(s.prompt) - s.started - len(s.withdrawn)

    def route(request: int, k: int, t: float) -> None:
        nonlocal tie
        s = streams[k]
        members[k][s.add(prompt[request], output[request], planned[request], t)] = request
        reached[request] = t
        routed_prompt[k] += prompt[request]
        if weighs:
            routed_work[k] += weight[request]
        if backoff is None:
            stale[k] = True
        else:  # a pull reads every engine's queue: kept up to date
            refresh(k)
        if s.cuttable and not woken[k]:
            woken[k] = True
            version[k] += 1
            tie += 1
            heappush(events, (t, tie, k, version[k]))

    def pull(k: int, now: float) -> None:
        nonlocal tie
        assert backoff is not None
        queued[k] = -1.0  # not its own donor
        donor = int(np.argmax(queued))
        refresh(k)
        have = int(queued[donor])
        if donor == k or have < backoff.threshold:
            return
        count = min(streams[k].free, math.ceil(have * backoff.share))
        for _ in range(count):
            local = policies[donor].withdraw()
            if local is None:
                break
            streams[donor].withdrawn.append(local)
            left[donor].add(local)
            request = members[donor][local]
            gone[donor] += 1
            gone_prompt[donor] += prompt[request]
            if weighs:
                gone_work[donor] += weight[request]
            incoming[k] += 1
            tie += 1
            heappush(transit, (now + backoff.delay, tie, request, k, donor))
        refresh(donor)

    def resume(k: int, now: float) -> None:
        nonlocal tie
        if backoff is None:
            # Without backoff, engines meet only when a request is routed: nothing reaches
            # this one, nor reads its counts, before the next arrival, up to which it runs on
            # (whatever the others do meanwhile, each on its own clock).
            streams[k].horizon = arrival[order[next_arrival]] if next_arrival < n else math.inf
        try:
            t = next(loops[k])
        except StopIteration as done:
            results[k] = done.value
            return
        version[k] += 1
        woken[k] = False
        if t < math.inf:
            tie += 1
            heappush(events, (t, tie, k, version[k]))
        if backoff is None:
            stale[k] = True
            return
        refresh(k)
        s = streams[k]
        if s.cuttable and s.free and not queued[k] and not incoming[k]:
            pull(k, now)

    next_arrival = 0
    ask = routing.route
    while True:
        ta = arrival[order[next_arrival]] if next_arrival < n else math.inf
        td = transit[0][0] if transit else math.inf
        while events and events[0][3] != version[events[0][2]]:
            heappop(events)  # stale: the engine moved on
        te = events[0][0] if events else math.inf
        if ta == td == te == math.inf:
            break
        if min(ta, td) < math.inf and (te == math.inf or admits(te, min(ta, td))):
            if td <= ta:
                _, _, request, k, donor = heappop(transit)
                incoming[k] -= 1
                pulled_from[request] = donor
                route(request, k, td)
                continue
            request = order[next_arrival]
            next_arrival += 1
            if True in stale:
                for j in range(m):
                    if stale[j]:
                        refresh(j)
            k = ask(request, loads)
            if k.__class__ is not int or not 0 <= k < m:
                k = engine_index(routing, request, k, m)
            if admit is not None and not admit(prompt[request], k, loads, ta):
                rejected[request] = True  # turned away at the door: it reaches no engine
                continue
            route(request, k, ta)
            continue
        _, _, k, _ = heappop(events)
        resume(k, te)

    for k in range(m):
        streams[k].closed = True
        if results[k] is None:
            resume(k, math.inf)
        if results[k] is None:  # pragma: no cover - the loop must end once closed and idle
            raise RuntimeError(f"engine {k} did not end once every request was routed")

    schedules: list[Any] = []
    request_engine = np.full(n, -1, dtype=np.int64)  # -1: rejected
    request_index = np.full(n, -1, dtype=np.int64)
    for k, engine in enumerate(engines):
        s = streams[k]
        kept = (
            [i for i in range(len(s.prompt)) if i not in left[k]] if left[k] else list(range(len(s.prompt)))
        )
        mine = [members[k][i] for i in kept if i in members[k]]
        local = Workload(
            [s.prompt[i] for i in kept],
            [s.output[i] for i in kept],
            [s.planned[i] for i in kept] if predicted is not None else None,
            [s.arrival[i] for i in kept],
            name=f"{workload.name} on {engine.label(k)}",
        )
        schedules.append(stream_schedule(local, engine.cost, engine.clients, s, kept, results[k]))
        request_engine[mine] = k
        request_index[mine] = np.arange(len(mine))
    info = {
        "router": routing.name,
        "sizes": sizes if weighs else None,
        "clairvoyant": sizes == "oracle" and weighs,
        "backoff": backoff is not None,
        "backoff_delay": backoff.delay if backoff is not None else 0.0,
        "seed": seed if getattr(routing, "seeded", False) else None,
        "admission": admission.name if admission is not None else None,
        # Requests a policy deferred past their deadline (deadline-first), over every engine.
        "deferred": sum(int(getattr(p, "deferred", 0)) for p in policies),
    }
    return FleetSchedule(
        workload,
        engines,
        tuple(schedules),
        request_engine,
        request_index,
        np.asarray(reached),
        np.asarray(pulled_from),
        routing.name,
        info,
        rejected,
    )
