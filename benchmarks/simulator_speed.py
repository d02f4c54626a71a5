"""Simulator speed: one GSM8K run (1,319 requests, 200 clients), a 100,000-request run on
1,024 clients, and an hour-long stream of 19,366 arrivals under every registered policy.

Targets on a 2-core machine: GSM8K median <= 50 ms; 100,000 requests on 1,024 clients <= 5 s;
the hour-long stream (200 clients, the paper's coefficients, capacity 16,384) <= 2 s with any
request policy and any iteration policy (predictions attached, non-anticipative). The stream
runs twice: under the paper's linear model and under a context-aware model with the same
coefficients plus context terms (``PAPER_CONTEXT_16K``: decode runs become arithmetic series,
prefill stages are priced by their squares), to show what context costs the simulator.

    python benchmarks/simulator_speed.py [--repeats N] [--big-repeats N] [--stream-repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from instances import PAPER_16K, PAPER_CONTEXT_16K, hour_stream
from llmsched import LinearCostModel, simulate, validate, workloads
from llmsched.online import (
    iteration_policy_names,
    make_iteration_policy,
    make_request_policy,
    request_policy_names,
    with_predictions,
)


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
    parser.add_argument("--stream-repeats", type=int, default=3)
    parser.add_argument("--skip-big", action="store_true", help="skip the 100,000-request run")
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

    if not args.skip_big:
        _big(cost, args.big_repeats)
    slowest = {name: _stream(args.stream_repeats, cost, name) for name, cost in STREAM_COSTS.items()}
    linear, context = slowest["linear"], slowest["context-aware"]
    print(f"slowest pair, context-aware over linear: {context / linear:.2f}x")


STREAM_COSTS = {"linear": PAPER_16K, "context-aware": PAPER_CONTEXT_16K}


def _stream(repeats: int, cost: object, label: str) -> float:
    stream = hour_stream()
    # Predictions: the truth with multiplicative noise (sd 30%), so every policy can run.
    rng = np.random.default_rng(0)
    noisy = np.maximum(1, np.rint(stream.output_tokens * rng.lognormal(0.0, 0.3, len(stream))))
    stream = with_predictions(stream, noisy.astype(np.int64))
    print(f"{stream!r}, 200 clients, {label} model ({cost!r}):")
    worst = (0.0, "")
    for request in request_policy_names():
        if request == "static":
            continue
        for iteration in iteration_policy_names():

            def run(request: str = request, iteration: str = iteration):
                return simulate(
                    stream, cost, 200, make_request_policy(request), make_iteration_policy(iteration)
                )

            median, times, schedule = _time(run, repeats)
            assert not validate(schedule)
            worst = max(worst, (median, f"{request} / {iteration}"))
            runs = ", ".join(f"{t:.3f}" for t in times)
            print(
                f"  {request:28} {iteration:14} median {median:.3f} s ({runs}); "
                f"makespan {schedule.makespan:.0f} s"
            )
    print(f"slowest ({label}): {worst[1]}, median {worst[0]:.3f} s (target <= 2 s)")
    return worst[0]


def _big(cost: LinearCostModel, repeats: int) -> None:
    big = workloads.gsm8k_like(100_000, seed=0)
    median, times, schedule = _time(lambda: simulate(big, cost, 1024), repeats)
    start = time.perf_counter()
    violations = validate(schedule)
    check = time.perf_counter() - start
    assert not violations, violations[:3]
    print(
        f"gsm8k_like(100,000), 1,024 clients, baseline: median {median:.2f} s over {repeats} runs "
        f"(target <= 5 s; runs {', '.join(f'{t:.2f}' for t in times)}); {schedule.num_stages} stages, "
        f"{schedule.num_iterations} decode iterations; validate() {check:.2f} s"
    )


if __name__ == "__main__":
    main()
