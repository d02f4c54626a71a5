"""Time of one policy decision with 200 clients, for every request and iteration policy.

    python benchmarks/decision_latency.py [--seed 0] [--stream]

Runs gsm8k(seed) (oracle predictions attached), or with ``--stream`` the hour-long stream of
19,366 arrivals (paper coefficients, capacity 16,384), through the simulator with each policy and
times every call the simulator makes to it: ``decide`` for iteration policies; ``ready`` plus
``take`` (one prefill decision) for request policies. ``start`` (which may solve the offline
assignment) is reported apart. Target: median <= 50 us per decision.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from instances import PAPER_16K, hour_stream
from llmsched import LinearCostModel, simulate, workloads
from llmsched.online import (
    iteration_policy_names,
    make_iteration_policy,
    make_request_policy,
    request_policy_names,
    with_predictions,
)


class _Timed:
    """Wraps a policy and records the time of each decision call."""

    def __init__(self, inner, methods):
        self._inner = inner
        self.samples: list[float] = []
        self.start_s = 0.0
        self.name = getattr(inner, "name", type(inner).__name__)
        self.sizes = getattr(inner, "sizes", None)  # an oracle policy is told the true lengths
        for method in methods:
            setattr(self, method, self._timed(getattr(inner, method)))

    def _timed(self, fn):
        def call(*args):
            t = time.perf_counter()
            out = fn(*args)
            self.samples.append(time.perf_counter() - t)
            return out

        return call

    def start(self, *args):
        t = time.perf_counter()
        self._inner.start(*args)
        self.start_s = time.perf_counter() - t

    def arrive(self, request):
        self._inner.arrive(request)

    def release(self, client):
        self._inner.release(client)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stream", action="store_true", help="the hour-long stream instead of GSM8K")
    args = parser.parse_args()
    w = hour_stream(seed=args.seed) if args.stream else workloads.gsm8k(args.seed)
    w = with_predictions(w, w.output_tokens)
    cost = PAPER_16K if args.stream else LinearCostModel.paper()
    print(f"{w!r}, 200 clients")
    print(f"{'policy':32} {'kind':9} {'calls':>6} {'median us':>10} {'p99 us':>8} {'start s':>8}")
    for name in request_policy_names():
        if name == "static":
            continue
        timed = _Timed(make_request_policy(name), ("ready", "take"))
        simulate(w, cost, 200, timed, "prefill-first")
        _report(name, "request", timed)
    for name in iteration_policy_names():
        timed = _Timed(make_iteration_policy(name), ("decide",))
        simulate(w, cost, 200, "fcfs", timed)
        _report(name, "iteration", timed)


def _report(name: str, kind: str, timed: _Timed) -> None:
    s = np.array(timed.samples) * 1e6
    print(
        f"{name:32} {kind:9} {s.size:>6} {np.median(s):>10.2f} {np.percentile(s, 99):>8.2f} "
        f"{timed.start_s:>8.3f}"
    )


if __name__ == "__main__":
    main()
