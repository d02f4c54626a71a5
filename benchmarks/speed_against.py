"""The simulator's speed in every mode, side by side against another commit, in one run.

The commit given is extracted (``git archive``) into a temporary folder; then each case runs
in a fresh process over that tree and over this one, alternately, for ``--rounds`` rounds, so
that whatever else loads the machine falls on both alike. Every process imports llmsched only
through names both trees export at the top level. For each case: the median seconds of each
tree, their ratio (this tree over the other; above 1 is slower), and the ratio's spread over
the rounds. Each run is timed by the process's CPU time (what the run did, not the time other
processes held the CPU), or by the wall clock with ``--wall``.

Cases (each process runs its case ``--repeats`` times after a warm-up and reports the best):

* ``competition-gsm8k``: the GSM8K batch (1,319 requests), 200 clients, fcfs and the
  Lagrangian iteration rule;
* ``competition-stream``: an hour-long Poisson stream of 19,366 GSM8K-like requests, 200
  clients, fcfs and the Lagrangian rule;
* ``fusion-gsm8k`` and ``fusion-stream``: the same on a fused engine (budget 2,048);
* ``disaggregated-stream``: the stream on one prompt and three token machines;
* ``fleet-stream``: the stream on four engines of 200 clients, join-the-shortest-queue.

With ``--instructions`` each case is counted instead of timed: the CPU instructions of one
warm run (valgrind's cachegrind, the instructions of a process that runs the case twice less
those of one that runs it once), which no other load on the machine changes; one count a tree.

    python benchmarks/speed_against.py --against 5b0bc9a [--rounds 5] [--repeats 3] [--case NAME]
    python benchmarks/speed_against.py --against 5b0bc9a --instructions
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# What each process runs: it prints the best of its repeats, in seconds, as JSON.
BODY = r"""
import gc, json, sys, time
from dataclasses import replace
import numpy as np
import llmsched
from llmsched import LinearCostModel, workloads

case, repeats = sys.argv[1], int(sys.argv[2])
# The process's CPU time (what the run did, not the time others took the CPU), or the wall clock.
clock = time.process_time if sys.argv[3] == "cpu" else time.perf_counter
cost = replace(LinearCostModel.paper(), prefill_capacity=16_384)

def stream():
    rng = np.random.default_rng(0)
    n = 19_366
    lengths = workloads.gsm8k_like(n, seed=0)
    arrival = workloads.poisson_arrivals(n, n / 3600.0, seed=rng)
    w = llmsched.Workload(lengths.prompt_tokens, lengths.output_tokens, arrival=arrival, name="hour")
    return w

gsm = workloads.gsm8k(0)
if case == "competition-gsm8k":
    run = lambda: llmsched.simulate(gsm, cost, 200, "fcfs", "lagrangian")
elif case == "competition-stream":
    w = stream()
    run = lambda: llmsched.simulate(w, cost, 200, "fcfs", "lagrangian")
elif case == "fusion-gsm8k":
    run = lambda: llmsched.simulate_fusion(gsm, cost, 200, "fcfs", 2048)
elif case == "fusion-stream":
    w = stream()
    run = lambda: llmsched.simulate_fusion(w, cost, 200, "fcfs", 2048)
elif case == "disaggregated-stream":
    w = stream()
    cluster = llmsched.DisaggregatedCluster(
        prompt_machines=1, token_machines=3, prompt_cost=cost, token_cost=cost, token_clients=200,
        kv_bytes_per_token=2.6e6, kv_bandwidth=25.0)
    run = lambda: llmsched.simulate_disaggregated(w, cluster)
elif case == "fleet-stream":
    w = stream()
    run = lambda: llmsched.simulate_fleet(w, [llmsched.Engine(cost, 200) for _ in range(4)], router="jsq")
else:
    raise SystemExit(f"unknown case {case}")
gc.collect()
run()  # warm-up
best = float("inf")
for _ in range(repeats):
    gc.collect()  # each run starts from a collected heap
    start = clock()
    run()
    best = min(best, clock() - start)
print(json.dumps(best))
"""

CASES = (
    "competition-gsm8k",
    "competition-stream",
    "fusion-gsm8k",
    "fusion-stream",
    "disaggregated-stream",
    "fleet-stream",
)


def _extract(ref: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _env(tree: Path) -> dict[str, str]:
    # One hash seed: sets and dicts of strings iterate alike in every process.
    return {**os.environ, "PYTHONPATH": str(tree / "src"), "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


def _time(tree: Path, case: str, repeats: int, counter: str) -> float:
    env = _env(tree)
    out = subprocess.run(
        [sys.executable, "-c", BODY, case, str(repeats), counter],
        env=env,
        cwd=str(tree),
        check=True,
        capture_output=True,
        text=True,
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1]))


def _instructions(trees: tuple[Path, Path], case: str) -> tuple[int, int]:
    """The instructions of one warm run of ``case`` over each tree (see the module
    docstring); the four processes run two at a time."""
    valgrind = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
    counts: dict[tuple[int, int], int] = {}
    for repeats in (0, 1):
        running = [
            subprocess.Popen(
                [*valgrind, sys.executable, "-c", BODY, case, str(repeats), "cpu"],
                env=_env(tree),
                cwd=str(tree),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for tree in trees
        ]
        for k, process in enumerate(running):
            _, err = process.communicate()
            found = re.search(r"I\s+refs:\s+([\d,]+)", err)
            if process.returncode or found is None:
                raise RuntimeError(f"valgrind printed no instruction count for {case}:\n{err[-2000:]}")
            counts[k, repeats] = int(found.group(1).replace(",", ""))
    return counts[0, 1] - counts[0, 0], counts[1, 1] - counts[1, 0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="the commit to compare with (a git ref)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--case", action="append", choices=CASES, help="run only these cases")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--instructions", action="store_true", help="count instructions (valgrind) instead")
    parser.add_argument("--wall", action="store_true", help="time the wall clock, not the process's CPU time")
    args = parser.parse_args()
    if args.instructions and shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind on the PATH")
    if args.rounds < 1 or args.repeats < 1:
        raise SystemExit("--rounds and --repeats must be >= 1")
    cases = args.case or list(CASES)
    rows = {}
    with tempfile.TemporaryDirectory() as folder:
        other = _extract(args.against, Path(folder))
        for case in cases:
            if args.instructions:
                this, that = _instructions((ROOT, other), case)
                rows[case] = {"this_instructions": this, "other_instructions": that, "ratio": this / that}
                print(
                    f"{case:22s} this {this / 1e9:7.3f} G instructions  {args.against} {that / 1e9:7.3f} G  "
                    f"ratio {this / that:.3f}",
                    flush=True,
                )
                continue
            mine, theirs = [], []
            for k in range(args.rounds):
                first, second = (ROOT, other) if k % 2 else (other, ROOT)
                counter = "wall" if args.wall else "cpu"
                a = _time(first, case, args.repeats, counter)
                b = _time(second, case, args.repeats, counter)
                (mine if first == ROOT else theirs).append(a)
                (mine if second == ROOT else theirs).append(b)
            ratios = [m / t for m, t in zip(mine, theirs, strict=True)]
            rows[case] = {
                "this_s": statistics.median(mine),
                "other_s": statistics.median(theirs),
                "ratio": statistics.median(ratios),
                "ratio_min": min(ratios),
                "ratio_max": max(ratios),
            }
            r = rows[case]
            print(
                f"{case:22s} this {r['this_s'] * 1e3:8.1f} ms  {args.against} {r['other_s'] * 1e3:8.1f} ms  "
                f"ratio {r['ratio']:.3f} (rounds {r['ratio_min']:.3f}..{r['ratio_max']:.3f})",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
