"""Baton's Tables 1 and 2 on the CPU runtime: the completion time of its queries under batch-wise
inference (its "Benchmark": batches run to completion) and under insertion, with the prompt
padded into the running batch (Baton) or prefilled apart (Baton-PD's decoupling), beside the
paper's.

Table 2 (the default): the 30 short queries at batch sizes 2-10. Table 1 (``--table 1``): the
120 mixed queries at batch size 8, and at batch size 4 with every length doubled, as Baton runs
them; their long inputs and outputs (about 5,300 tokens, 10,600 doubled) would take hours on a
CPU, so ``--scale`` (by default 0.1 for Table 1) shrinks every length by that factor, and the
table is Table 1's shape at that scale, not Table 1.

The queries are :func:`llmsched.workloads.baton_like` (Baton publishes none), served by the
runtime's ``small`` model (4 M parameters, float32, one thread; its positions widened to the
longest sequence) through :func:`llmsched.runtime.run_insertion` in its ``static``, ``padded``
and ``apart`` modes. Each time is the fastest of ``--repeats`` runs. Baton measured an LLM on
GPUs, where a decode step costs about the same at any batch size; on a CPU a step's cost grows
with the batch, which changes what an idle slot wastes.

    python benchmarks/baton_tables.py [--table 1|2] [--scale S] [--repeats 1] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import numpy as np
import torch

from llmsched import Workload
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
#: Baton's Table 1: batch size -> (Benchmark, Baton, Baton-PD) completion times (s); batch size 4
#: with every length doubled.
PAPER_TABLE1 = {4: (21901.0, 20549.0, 11771.0), 8: (6619.0, 3424.0, 2654.0)}


def _scaled(workload: Workload, scale: float) -> Workload:
    if scale == 1.0:
        return workload
    prompt = np.maximum(1, np.rint(workload.prompt_tokens * scale)).astype(np.int64)
    output = np.maximum(1, np.rint(workload.output_tokens * scale)).astype(np.int64)
    return Workload(prompt, output, name=f"{workload.name}-x{scale:g}")


def _times(model: LlamaModel, workload: Workload, batch: int, repeats: int) -> dict[str, float]:
    # Static batching decodes every slot to its batch's longest output.
    length = int(workload.prompt_tokens.max() + workload.output_tokens.max()) + 2
    engine = Engine(model, batch, length, threads=1)
    return {
        mode: min(run_insertion(engine, workload, mode).seconds for _ in range(repeats))
        for mode in ("static", "padded", "apart")
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", type=int, choices=(1, 2), default=2, help="Baton's table (default 2)")
    parser.add_argument(
        "--scale", type=float, default=None, help="every length times this (default 1, Table 1: 0.1)"
    )
    parser.add_argument("--repeats", type=int, default=1, help="runs per mode; the fastest counts")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    scale = args.scale if args.scale is not None else (0.1 if args.table == 1 else 1.0)
    if not 0 < scale <= 1:
        parser.error(f"--scale must lie in (0, 1], got {scale}")
    torch.set_num_threads(1)
    settings = (
        [(batch, False, _scaled(baton_like("short", 0), scale)) for batch in PAPER_TABLE2]
        if args.table == 2
        else [(4, True, _scaled(baton_like("mixed", 0, double=True), scale)),
              (8, False, _scaled(baton_like("mixed", 0), scale))]
    )  # fmt: skip
    longest = max(int(w.prompt_tokens.max() + w.output_tokens.max()) for _, _, w in settings) + 2
    config = PRESETS["small"]
    config = dataclasses.replace(config, max_position_embeddings=max(config.max_position_embeddings, longest))
    model = LlamaModel(config, seed=0)
    rows = []
    start = time.perf_counter()
    for batch, doubled, workload in settings:
        seconds = _times(model, workload, batch, args.repeats)
        row = {
            "batch": batch,
            "doubled": doubled,
            "static_s": seconds["static"],
            "padded_s": seconds["padded"],
            "apart_s": seconds["apart"],
            "padded_ratio": seconds["static"] / seconds["padded"],
            "apart_ratio": seconds["static"] / seconds["apart"],
            "apart_over_padded": seconds["padded"] / seconds["apart"],
        }
        if args.table == 2:
            paper_static, paper_baton, paper_ratio = PAPER_TABLE2[batch]
            row.update(paper_static_s=paper_static, paper_baton_s=paper_baton, paper_ratio=paper_ratio)
            paper = f"paper: {paper_static:.2f} s / {paper_baton:.2f} s ({paper_ratio:.2f}x)"
        else:
            paper_static, paper_baton, paper_pd = PAPER_TABLE1[batch]
            row.update(paper_static_s=paper_static, paper_baton_s=paper_baton, paper_pd_s=paper_pd)
            paper = (
                f"paper: {paper_static:,.0f} / {paper_baton:,.0f} / {paper_pd:,.0f} s "
                f"(Baton {paper_static / paper_baton:.2f}x, "
                f"Baton-PD over Baton {paper_baton / paper_pd:.2f}x)"
            )
        rows.append(row)
        if not args.json:
            shown = f"batch {batch:2d}" + (" x2" if doubled else "")
            print(
                f"{shown}: static {row['static_s']:7.2f} s, padded {row['padded_s']:7.2f} s "
                f"({row['padded_ratio']:.2f}x), apart {row['apart_s']:7.2f} s ({row['apart_ratio']:.2f}x; "
                f"{row['apart_over_padded']:.2f}x padded) | {paper}",
                flush=True,
            )
    if args.json:
        print(json.dumps({"table": args.table, "scale": scale, "model": "small", "rows": rows}, indent=2))
    else:
        print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
