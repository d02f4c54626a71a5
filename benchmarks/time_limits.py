"""Time limits and sizes that must not cost: every row runs in its own process, timed and measured.

Each case is a call that once overran its time limit, hung, or grew with something that
should not cost (idle clients, decode iterations), and every backend of ``solve_pcmax`` and
``solve_full`` at limits of 0.5, 1 and 3 s on instances none of them closes that fast. A row
passes when the call returns within ``1.1 * limit + 0.5`` seconds (cases without a limit:
within the stated budget) and its process stays under the memory budget; the child's answer
(status, objective, bound) is printed beside it. Every case with a limit runs twice: on an
idle machine, and again while ``--busy`` processes (2 by default: both cores of a 2-core
machine) spin beside it.

    python benchmarks/time_limits.py [--only NAME ...] [--busy 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import resource
import sys
import time
from collections.abc import Callable
from typing import Any

MEMORY_BUDGET_MB = 2048


def _pcmax_20000_on_3() -> dict[str, Any]:
    from llmsched.mip import solve_pcmax
    from llmsched.workloads import gsm8k_like

    r = solve_pcmax(gsm8k_like(20000, 2).output_tokens, 3, time_limit=1)
    return {"status": str(r.status), "objective": r.makespan, "bound": r.lower_bound}


def _pcmax_big_short(limit: float) -> Callable[[], dict[str, Any]]:
    def run() -> dict[str, Any]:
        from llmsched.mip import solve_pcmax
        from llmsched.workloads import gsm8k_like

        r = solve_pcmax(gsm8k_like(20000, 2).output_tokens + 40, 200, time_limit=limit)
        return {"status": str(r.status), "objective": r.makespan, "bound": r.lower_bound}

    return run


def _pcmax_huge_machines() -> dict[str, Any]:
    from llmsched.mip import solve_pcmax

    r = solve_pcmax([5, 3, 9, 1, 2, 7], 10**12, time_limit=1)
    return {"status": str(r.status), "objective": r.makespan, "bound": r.lower_bound}


def _pcmax_inf(backend: str) -> Callable[[], dict[str, Any]]:
    def run() -> dict[str, Any]:
        from llmsched.mip import solve_pcmax

        r = solve_pcmax([5, 3, 9, 1, 2, 7, 4, 4], 3, time_limit=math.inf, backend=backend)
        return {"status": str(r.status), "objective": r.makespan, "bound": r.lower_bound}

    return run


def _full(requests: int, clients: int, limit: float, formulation: str, backend: str = "scip") -> Any:
    def run() -> dict[str, Any]:
        from llmsched import LinearCostModel
        from llmsched.mip import solve_full
        from llmsched.workloads import gsm8k_like

        r = solve_full(
            gsm8k_like(requests),
            LinearCostModel.paper(),
            clients,
            time_limit=limit,
            work_limit=math.inf,  # the clock, not the work, is what this case measures
            formulation=formulation,
            backend=backend,
        )
        return {"status": str(r.status), "objective": r.objective, "bound": r.bound}

    return run


def _simulate_long_output() -> dict[str, Any]:
    from llmsched import LinearCostModel, Workload, simulate, validate

    s = simulate(Workload([10], [2**31 - 1]), LinearCostModel.paper(), 2)
    return {"status": "valid" if not validate(s) else "INVALID", "objective": s.makespan, "bound": None}


def _idle_clients(clients: int, policy: str) -> Callable[[], dict[str, Any]]:
    def run() -> dict[str, Any]:
        from llmsched import LinearCostModel, Workload, simulate, validate

        w = Workload([10, 20, 30], [5, 50, 7], predicted_output=[6, 40, 7])
        cost = LinearCostModel.paper()
        s = simulate(w, cost, clients, request_policy=policy, iteration_policy="lagrangian")
        return {"status": "valid" if not validate(s) else "INVALID", "objective": s.makespan, "bound": None}

    return run


def _answer(result: Any, start: float) -> dict[str, Any]:
    """A solver result's row, timed from ``start`` (the call alone, not the instance's making)."""
    elapsed = time.perf_counter() - start
    return {
        "status": str(result.status),
        "objective": result.objective,
        "bound": result.lower_bound,
        "elapsed": elapsed,
    }


def _pcmax_backend(instance: str, backend: str, limit: float) -> Callable[[], dict[str, Any]]:
    """``solve_pcmax`` on one of the instances that once overran (none closes within 3 s)."""

    def run() -> dict[str, Any]:
        from llmsched.mip import solve_pcmax
        from llmsched.online.predictors import cross_fit
        from llmsched.workloads import gsm8k_like

        if instance == "mico":  # the pattern-LP bound step once read no clock
            times, machines = cross_fit("mico", gsm8k_like(2000, seed=114), seed=114), 25
        else:  # the paper's model, 300 jobs on 30 machines
            times, machines = gsm8k_like(300, seed=5).output_tokens, 30
        start = time.perf_counter()
        r = solve_pcmax(times, machines, time_limit=limit, backend=backend)
        return _answer(r, start)

    return run


def _full_warm(backend: str, limit: float) -> Callable[[], dict[str, Any]]:
    """``solve_full`` on 40 requests and 8 clients from the heuristics' warm starts (built
    before the clock starts, as a caller would)."""

    def run() -> dict[str, Any]:
        from llmsched import LinearCostModel
        from llmsched.mip import solve_full
        from llmsched.online.warm_starts import heuristic_schedules
        from llmsched.workloads import gsm8k_like

        workload, levels = gsm8k_like(40), LinearCostModel.paper().to_levels(8)
        warm = heuristic_schedules(workload, levels, 8)
        start = time.perf_counter()
        r = solve_full(
            workload, levels, 8, time_limit=limit, work_limit=math.inf, backend=backend, warm_starts=warm
        )
        return _answer(r, start)

    return run


BACKEND_LIMITS = (0.5, 1.0, 3.0)

# name -> (call, time limit or None, budget in seconds when there is no limit)
CASES: dict[str, tuple[Callable[[], dict[str, Any]], float | None, float]] = {
    "pcmax 20,000 jobs on 3 machines, limit 1 s": (_pcmax_20000_on_3, 1.0, 0.0),
    "pcmax 20,000 jobs (+40) on 200 machines, limit 0.1 s": (_pcmax_big_short(0.1), 0.1, 0.0),
    "pcmax 20,000 jobs (+40) on 200 machines, limit 1 s": (_pcmax_big_short(1.0), 1.0, 0.0),
    "pcmax 6 jobs on 10^12 machines, limit 1 s": (_pcmax_huge_machines, 1.0, 0.0),
    "pcmax paper model, scip, limit inf": (_pcmax_inf("scip"), None, 10.0),
    "pcmax paper model, cpsat, limit inf": (_pcmax_inf("cpsat"), None, 10.0),
    "full MIP literal, 40 requests on 8 clients, limit 5 s": (_full(40, 8, 5.0, "literal"), 5.0, 0.0),
    "full MIP literal, 100 requests on 20 clients, limit 5 s": (_full(100, 20, 5.0, "literal"), 5.0, 0.0),
    "full MIP literal, 100 requests on 20 clients, limit 10 s": (_full(100, 20, 10.0, "literal"), 10.0, 0.0),
    "full MIP literal, 100 requests on 20 clients, limit 1 s": (_full(100, 20, 1.0, "literal"), 1.0, 0.0),
    "full MIP strong, 100 requests on 20 clients, limit 5 s": (_full(100, 20, 5.0, "strong"), 5.0, 0.0),
    "full MIP literal cpsat, 40 requests on 8 clients, limit 5 s": (
        _full(40, 8, 5.0, "literal", "cpsat"),
        5.0,
        0.0,
    ),
    "full MIP strong, 4 requests on 2 clients, limit inf": (_full(4, 2, math.inf, "strong"), None, 30.0),
    "simulate one request of 2^31-1 output tokens": (_simulate_long_output, None, 2.0),
    "hybrid-oracle, 3 requests on 10^6 clients": (_idle_clients(10**6, "hybrid-oracle"), None, 2.0),
    "hybrid-oracle, 3 requests on 10^7 clients": (_idle_clients(10**7, "hybrid-oracle"), None, 2.0),
    "sorted-preemptive-rr-oracle, 3 requests on 10^7 clients": (
        _idle_clients(10**7, "sorted-preemptive-rr-oracle"),
        None,
        2.0,
    ),
}
for _limit in BACKEND_LIMITS:
    for _backend in ("pipeline", "scip", "cpsat", "highs"):
        _instance = "mico" if _backend == "pipeline" else "paper"
        _what = "mico cross-fit 2,000 on 25" if _instance == "mico" else "300 jobs on 30"
        CASES[f"pcmax {_backend}, {_what}, limit {_limit:g} s"] = (
            _pcmax_backend(_instance, _backend, _limit),
            _limit,
            0.0,
        )
    for _backend in ("scip", "cpsat", "highs"):
        CASES[f"full MIP strong {_backend}, 40 on 8 + warm starts, limit {_limit:g} s"] = (
            _full_warm(_backend, _limit),
            _limit,
            0.0,
        )


def _child(name: str, queue: Any) -> None:
    # The child's own imports are not timed: the clock starts at the call. The solvers'
    # packages are loaded first too, as a long-running process has them: a time limit does
    # not count loading them (about a second for scipy.optimize), only solving.
    import llmsched.mip  # noqa: F401
    from llmsched.mip.backends import installed, load

    for backend in ("highs", "scip", "cpsat"):
        if installed(backend):
            load(backend)

    call = CASES[name][0]
    start = time.perf_counter()
    try:
        answer = call()
    except Exception as error:  # reported as the row's answer
        answer = {"status": f"error: {type(error).__name__}: {error}", "objective": None, "bound": None}
    answer.setdefault("elapsed", time.perf_counter() - start)
    answer["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put(answer)


def _spin(stop: Any) -> None:
    while not stop.is_set():
        pass


def run_case(name: str, busy: int = 0) -> dict[str, Any]:
    """Run case ``name`` in a fresh process, beside ``busy`` processes that spin on the CPU."""
    _, limit, budget = CASES[name]
    allowed = 1.1 * limit + 0.5 if limit is not None else budget
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    stop = ctx.Event()
    spinners = [ctx.Process(target=_spin, args=(stop,)) for _ in range(busy)]
    for spinner in spinners:
        spinner.start()
    proc = ctx.Process(target=_child, args=(name, queue))
    proc.start()
    try:
        proc.join(timeout=max(30.0, 4 * allowed + 10))
    finally:
        stop.set()
        for spinner in spinners:
            spinner.join()
    if proc.is_alive():
        proc.kill()
        proc.join()
        answer: dict[str, Any] = {"status": "hung (killed)", "objective": None, "bound": None}
        answer["elapsed"], answer["max_rss_mb"] = math.inf, math.nan
    else:
        answer = queue.get() if not queue.empty() else {"status": f"died ({proc.exitcode})"}
    answer.update(case=name, limit=limit, allowed_s=allowed, busy=busy)
    answer["ok"] = (
        answer.get("elapsed", math.inf) <= allowed
        and answer.get("max_rss_mb", math.inf) <= MEMORY_BUDGET_MB
        and not str(answer.get("status", "")).startswith(("error", "died", "hung", "INVALID"))
    )
    return answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="substrings of the case names to run")
    parser.add_argument("--busy", type=int, default=2, help="spinning processes in the busy runs (0: none)")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    names = [n for n in CASES if not args.only or any(s in n for s in args.only)]
    rows = []
    print(
        f"{'case':66s} {'busy':>4s} {'limit':>6s} {'allowed':>8s} {'elapsed':>8s} {'RSS MB':>7s}  ok  answer"
    )
    for name in names:
        limited = CASES[name][1] is not None
        for busy in (0, args.busy) if limited and args.busy else (0,):
            row = run_case(name, busy)
            rows.append(row)
            limit = (
                "-" if row["limit"] is None else ("inf" if math.isinf(row["limit"]) else f"{row['limit']:g}")
            )
            print(
                f"{name:66s} {busy:4d} {limit:>6s} {row['allowed_s']:8.2f} {row['elapsed']:8.2f} "
                f"{row['max_rss_mb']:7.0f}  {'yes' if row['ok'] else 'NO ':3s} {row['status']} "
                f"objective={row.get('objective')} bound={row.get('bound')}",
                flush=True,
            )
    busy_rows = [r for r in rows if r["busy"]]
    print(
        f"{sum(r['ok'] for r in rows)}/{len(rows)} rows within their limits "
        f"({sum(r['ok'] for r in busy_rows)}/{len(busy_rows)} of them beside {args.busy} busy processes)"
    )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1, default=str)
    sys.exit(0 if all(r["ok"] for r in rows) else 1)


if __name__ == "__main__":
    main()
