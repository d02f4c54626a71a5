"""Baton's Table 2 on the CPU runtime: the completion time of its 30 short queries under
batch-wise inference (its "Benchmark": batches run to completion) and under insertion, with the
prompt padded into the running batch (Baton) or prefilled apart (Baton-PD's decoupling), at
batch sizes 2-10, beside the paper's.

The queries are :func:`llmsched.workloads.baton_like` (``short``: input and response each 30-200
words, as Baton states them; it publishes none), served by the runtime's ``small`` model (4 M
parameters, float32, one thread) through :func:`llmsched.runtime.run_insertion` in its
``static``, ``padded`` and ``apart`` modes. Each time is the fastest of ``--repeats`` runs.
Baton measured an LLM on an RTX 4090, where a decode step costs about the same at any batch
size; on a CPU a step's cost grows with the batch, which changes what an idle slot wastes.

    python benchmarks/baton_tables.py [--repeats 1] [--json]
"""

from __future__ import annotations

import argparse
import json

import torch

from llmsched.runtime import PRESETS, Engine, LlamaModel, run_insertion
from llmsched.workloads import baton_like

#: Baton's Table 2: batch size -> (Benchmark, Baton) completion times (s) and its improvement.
PAPER_TABLE2 = {
    2: (161.77, 83.43, 1.94),
    4: (92.68, 49.61, 1.89),
    6: (61.70, 37.25, 1.66),
    8: (50.07, 31.08, 1.61),
    10: (40.45, 30.99, 1.31),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=1, help="runs per mode; the fastest counts")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    workload = baton_like("short", 0)
    model = LlamaModel(PRESETS["small"], seed=0)
    rows = []
    for batch, (paper_static, paper_baton, paper_ratio) in PAPER_TABLE2.items():
        engine = Engine(model, batch, 1024, threads=1)
        seconds = {}
        for mode in ("static", "padded", "apart"):
            seconds[mode] = min(run_insertion(engine, workload, mode).seconds for _ in range(args.repeats))
        rows.append(
            {
                "batch": batch,
                "static_s": seconds["static"],
                "padded_s": seconds["padded"],
                "apart_s": seconds["apart"],
                "padded_ratio": seconds["static"] / seconds["padded"],
                "apart_ratio": seconds["static"] / seconds["apart"],
                "paper_static_s": paper_static,
                "paper_baton_s": paper_baton,
                "paper_ratio": paper_ratio,
            }
        )
        row = rows[-1]
        if not args.json:
            print(
                f"batch {batch:2d}: static {row['static_s']:6.2f} s, padded {row['padded_s']:6.2f} s "
                f"({row['padded_ratio']:.2f}x), apart {row['apart_s']:6.2f} s ({row['apart_ratio']:.2f}x) | "
                f"paper: {paper_static:.2f} s / {paper_baton:.2f} s ({paper_ratio:.2f}x)"
            )
    if args.json:
        print(json.dumps({"workload": workload.name, "model": "small", "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
