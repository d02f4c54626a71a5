"""Results that do not move with the clock: every output once idle, then beside busy processes.

Runs each command below on an idle machine and again while ``--busy`` processes (2 by
default: both cores of a 2-core machine) spin on the CPU, and compares the two outputs byte
for byte:

- ``llmsched reproduce gsm8k --json``, ``llmsched reproduce mico --json`` and ``llmsched study
  --cases 10 --predictor mico --json`` (their whole output: no timings unless ``--timings``);
- 20 calls of ``solve_pcmax`` at their defaults (status, makespan, bound and a digest of the
  assignment), among them the two that once moved with the machine's load:
  ``gsm8k_like(300, seed=34)`` on 50 machines and ``mico_like(30, seed=188)`` on 10;
- two simulations whose offline assignment once hit the clock: ``simulate(gsm8k_like(300,
  seed=34), LinearCostModel.paper(), 50, "offline-oracle", "lagrangian")`` and the same with
  ``gsm8k_like(1000, seed=41)`` on 200 clients (makespan, utilization and a digest of every
  stage).

Exit status 1 when any output differs.

    python benchmarks/determinism.py [--busy 2] [--cases 10] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import subprocess
import sys
import time
from typing import Any

# (workload, seed, requests, machines): the two that once moved first, then a spread of
# GSM8K and Mico shapes that the pipeline closes at different steps (or not at all).
PCMAX_CASES: list[tuple[str, int, int, int]] = [
    ("gsm8k_like", 34, 300, 50),
    ("mico_like", 188, 30, 10),
    *(("gsm8k_like", seed, 300, 50) for seed in (1, 5, 9)),
    *(("gsm8k_like", seed, 1319, 200) for seed in (0, 3)),
    *(("gsm8k_like", seed, 200, 60) for seed in (2, 7)),
    *(("mico_like", seed, 30, 10) for seed in (1, 17, 55)),
    *(("mico_like", seed, 200, 25) for seed in (4, 8)),
    *(("gsm8k_like", seed, 60, 25) for seed in (11, 12, 13)),
    *(("mico_like", seed, 1000, 200) for seed in (6, 21, 30)),
]
SIMULATIONS: list[tuple[int, int, int]] = [(300, 34, 50), (1000, 41, 200)]


def _digest(values: Any) -> str:
    import numpy as np

    return hashlib.sha256(np.ascontiguousarray(values).tobytes()).hexdigest()[:16]


def _python_results() -> dict[str, Any]:
    """Every library call's answer, as a JSON-ready dict (floats as their exact repr)."""
    from llmsched import LinearCostModel, simulate
    from llmsched.mip import solve_pcmax
    from llmsched.workloads import gsm8k_like, mico_like

    out: dict[str, Any] = {}
    shapes = {"gsm8k_like": gsm8k_like, "mico_like": mico_like}
    for shape, seed, n, m in PCMAX_CASES:
        r = solve_pcmax(shapes[shape](n, seed=seed).output_tokens, m)
        out[f"solve_pcmax({shape}({n}, seed={seed}), {m})"] = [
            str(r.status),
            repr(r.makespan),
            repr(r.lower_bound),
            _digest(r.assignment),
        ]
    for n, seed, clients in SIMULATIONS:
        s = simulate(
            gsm8k_like(n, seed=seed), LinearCostModel.paper(), clients, "offline-oracle", "lagrangian"
        )
        out[f"simulate(gsm8k_like({n}, seed={seed}), paper, {clients}, offline-oracle, lagrangian)"] = [
            repr(s.makespan),
            repr(s.utilization),
            _digest(s.stage_start),
            _digest(s.prefill_end),
        ]
    return out


def _spin(stop: Any) -> None:
    while not stop.is_set():
        pass


def _run(argv: list[str]) -> tuple[str, float]:
    start = time.perf_counter()
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=int, default=2, help="busy processes in the second run")
    parser.add_argument("--cases", type=int, default=10, help="cases of the study")
    parser.add_argument("--only", nargs="*", help="substrings of the names of the outputs to compare")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_python_results(), indent=1))
        return
    cli = [sys.executable, "-m", "llmsched.cli"]
    commands = {
        "reproduce gsm8k --json": [*cli, "reproduce", "gsm8k", "--json", "--no-progress"],
        "reproduce mico --json": [*cli, "reproduce", "mico", "--json", "--no-progress"],
        f"study --cases {args.cases} --predictor mico --json": [
            *cli,
            *("study", "--cases", str(args.cases), "--predictor", "mico", "--json", "--no-progress"),
        ],
        "20 solve_pcmax calls and 2 simulations": [sys.executable, __file__, "--child"],
    }
    same = True
    for name, argv in commands.items():
        if args.only and not any(s in name for s in args.only):
            continue
        idle, idle_wall = _run(argv)
        stop = mp.Event()
        spinners = [mp.Process(target=_spin, args=(stop,)) for _ in range(args.busy)]
        for proc in spinners:
            proc.start()
        try:
            busy, busy_wall = _run(argv)
        finally:
            stop.set()
            for proc in spinners:
                proc.join()
        identical = idle == busy
        same &= identical
        detail = ""
        if not identical and name.startswith("20 "):
            a, b = json.loads(idle), json.loads(busy)
            detail = "; differ: " + ", ".join(k for k in a if a[k] != b.get(k))
        print(
            f"{name}: {len(idle):,} bytes, {'identical' if identical else 'DIFFERENT'}; "
            f"idle {idle_wall:.1f} s, "
            f"beside {args.busy} busy processes {busy_wall:.1f} s{detail}",
            flush=True,
        )
        if name.startswith("20 "):
            for key, value in json.loads(idle).items():
                shown = f"{value[0]} {value[1]} (bound {value[2]})" if key.startswith("solve") else value[0]
                print(f"  {key}: {shown}")
    print("identical" if same else "DIFFERENT")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
