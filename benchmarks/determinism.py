"""Results that do not move with the clock: each command idle, then beside busy processes.

Runs ``llmsched reproduce gsm8k --json`` and ``llmsched study --cases 10 --predictor mico
--json`` on an idle machine and again while ``--busy`` processes spin on the CPU, and compares
every row (timings aside). Exit status 1 when any row differs.

    python benchmarks/determinism.py [--busy 2] [--cases 10]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import subprocess
import sys
import time
from typing import Any

TIMING_KEYS = ("runtime_s", "wall_s")


def _spin(stop: Any) -> None:
    while not stop.is_set():
        pass


def _rows(argv: list[str]) -> tuple[list[dict[str, Any]], float]:
    start = time.perf_counter()
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - start
    rows = json.loads(out)["rows"]
    return [{k: v for k, v in row.items() if k not in TIMING_KEYS} for row in rows], wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=int, default=2, help="busy processes in the second run")
    parser.add_argument("--cases", type=int, default=10)
    args = parser.parse_args()
    cli = [sys.executable, "-m", "llmsched.cli"]
    commands = {
        "reproduce gsm8k": [*cli, "reproduce", "gsm8k", "--json"],
        f"study --cases {args.cases} --predictor mico": [
            *cli,
            "study",
            "--cases",
            str(args.cases),
            "--predictor",
            "mico",
            "--json",
            "--no-progress",
        ],
    }
    same = True
    for name, argv in commands.items():
        idle, idle_wall = _rows(argv)
        stop = mp.Event()
        spinners = [mp.Process(target=_spin, args=(stop,)) for _ in range(args.busy)]
        for proc in spinners:
            proc.start()
        try:
            busy, busy_wall = _rows(argv)
        finally:
            stop.set()
            for proc in spinners:
                proc.join()
        differing = sum(a != b for a, b in zip(idle, busy, strict=True))
        same &= differing == 0 and len(idle) == len(busy)
        print(
            f"{name}: {len(idle)} rows, {differing} differ; idle {idle_wall:.1f} s, "
            f"beside {args.busy} busy processes {busy_wall:.1f} s"
        )
    print("identical" if same else "DIFFERENT")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
