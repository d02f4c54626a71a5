"""Simulator speed: one GSM8K run (1,319 requests, 200 clients) and a 100,000-request run on 1,024 clients.

Targets on a 2-core machine: GSM8K median <= 50 ms; 100,000 requests on 1,024 clients <= 5 s.

    python benchmarks/simulator_speed.py [--repeats N] [--big-repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import time

from llmsched import LinearCostModel, simulate, validate, workloads


def _time(fn, repeats: int) -> tuple[float, list[float], object]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--big-repeats", type=int, default=3)
    args = parser.parse_args()
    cost = LinearCostModel.paper()

    gsm = workloads.gsm8k(0)
    simulate(gsm, cost, 200)  # warm-up (imports, caches)
    median, _, schedule = _time(lambda: simulate(gsm, cost, 200), args.repeats)
    assert not validate(schedule)
    print(
        f"gsm8k(0), 1,319 requests, 200 clients, baseline: median {median * 1e3:.1f} ms over "
        f"{args.repeats} runs (target <= 50 ms); {schedule.num_stages} stages, makespan "
        f"{schedule.makespan:.2f} s"
    )

    big = workloads.gsm8k_like(100_000, seed=0)
    median, times, schedule = _time(lambda: simulate(big, cost, 1024), args.big_repeats)
    start = time.perf_counter()
    violations = validate(schedule)
    check = time.perf_counter() - start
    assert not violations, violations[:3]
    print(
        f"gsm8k_like(100,000), 1,024 clients, baseline: median {median:.2f} s over {args.big_repeats} runs "
        f"(target <= 5 s; runs {', '.join(f'{t:.2f}' for t in times)}); {schedule.num_stages} stages, "
        f"{schedule.num_iterations} decode iterations; validate() {check:.2f} s"
    )


if __name__ == "__main__":
    main()
