"""What a decode iteration costs per context token, with the cache read in place and gathered.

    python benchmarks/runtime_layouts.py [--model small] [--device cpu] [--batches 1,4,16]
                                         [--contexts 32,256,1000] [--repeats 30] [--json out.json]

The engine's ``in-place`` layout attends each sequence to a view of its own slot (work grows
with the sum of the contexts, as in a paged-attention engine); the ``gathered`` layout, the
engine's before, copies the batch's slots out padded to the longest (work grows with the batch
times the longest context). For every batch size and context (every slot alike) both layouts
time ``repeats`` iterations, taking turns in rounds so that a slow spell of the machine falls
on both; each figure is the median with the 10th and 90th percentiles.

Then it fits ``decode_base + decode_per_client * batch + decode_per_context * context`` to the
in-place medians (:meth:`llmsched.ContextCostModel.fit`) and prints the cost per context token,
in all and per layer.
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

import numpy as np
import torch

from llmsched import ContextCostModel
from llmsched.runtime import PRESETS, Engine, LlamaModel


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _ms(figure: dict[str, float]) -> str:
    """A median in milliseconds with its 10th to 90th percentile."""
    return f"{figure['median_s'] * 1e3:.2f} ({figure['p10_s'] * 1e3:.2f}-{figure['p90_s'] * 1e3:.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="small")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batches", type=_ints, default=[1, 4, 16])
    parser.add_argument("--contexts", type=_ints, default=[32, 256, 1000])
    parser.add_argument("--repeats", type=int, default=30, help="iterations timed per point and layout")
    parser.add_argument("--rounds", type=int, default=5, help="turns each layout takes per point")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (CPU runs only)")
    parser.add_argument("--json", help="write every figure to this file")
    args = parser.parse_args()
    gpu = args.device.startswith("cuda")
    config = PRESETS[args.model]
    model = LlamaModel(config, seed=0)
    slots, longest = max(args.batches), max(args.contexts)
    per_round = max(1, args.repeats // args.rounds)
    engines = {
        layout: Engine(
            model,
            slots,
            longest + args.rounds * (per_round + 1) + 2,
            device=args.device,
            dtype=torch.float16 if gpu else torch.float32,
            threads=None if gpu else args.threads,
            attention=layout,
        )
        for layout in ("in-place", "gathered")
    }
    device = torch.cuda.get_device_name() if gpu else f"CPU ({torch.get_num_threads()} thread(s))"
    print(f"{args.model} ({config.num_hidden_layers} layers) on {device}; ms per decode iteration")
    print("| batch | context | in place, ms | gathered, ms | gathered / in place |")
    print("|---|---|---|---|---|")
    rows: list[dict[str, Any]] = []
    for batch in args.batches:
        for context in args.contexts:
            times: dict[str, list[float]] = {layout: [] for layout in engines}
            contexts_read: dict[str, list[int]] = {layout: [] for layout in engines}
            batch_slots = list(range(batch))
            for engine in engines.values():
                engine.reset()
                engine.occupy(batch_slots, [context] * batch)
                engine.decode(batch_slots)  # warm-up
            for _ in range(args.rounds):
                for layout, engine in engines.items():
                    engine.decode(batch_slots)  # untimed: the other layout ran last
                    end = engine.clock()
                    for _ in range(per_round):
                        read = sum(engine.lengths[slot] for slot in batch_slots)
                        engine.decode(batch_slots)
                        start, end = end, engine.clock()
                        times[layout].append(end - start)
                        contexts_read[layout].append(read)
            # The context the in-place fit sees: the median of the tokens read (each iteration
            # reads one more per slot than the one before).
            row: dict[str, Any] = {
                "batch": batch,
                "context": context,
                "context_read": statistics.median(contexts_read["in-place"]),
            }
            for layout, samples in times.items():
                p10, p90 = np.percentile(samples, [10, 90])
                row[layout] = {"median_s": statistics.median(samples), "p10_s": p10, "p90_s": p90}
            rows.append(row)
            inplace, gathered = row["in-place"], row["gathered"]
            print(
                f"| {batch} | {context} | {_ms(inplace)} | {_ms(gathered)} | "
                f"{gathered['median_s'] / inplace['median_s']:.2f}x |"
            )
    batches = np.array([r["batch"] for r in rows], dtype=float)
    contexts = np.array([r["context_read"] for r in rows], dtype=float)
    seconds = np.array([r["in-place"]["median_s"] for r in rows])
    fit = ContextCostModel.fit([1, 2], [1, 4], [1.0, 1.0], batches, contexts, seconds, 1)
    per_layer = fit.decode_per_context / config.num_hidden_layers
    print(
        f"in place: {fit.decode_base * 1e3:.3f} ms + {fit.decode_per_client * 1e6:.1f} us per request "
        f"+ {fit.decode_per_context * 1e9:.0f} ns per context token ({per_layer * 1e9:.1f} ns per "
        f"layer); fit error {np.mean(np.abs(fit.decode_iteration_time(batches, contexts) / seconds - 1)):.1%}"
    )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                {
                    "model": args.model,
                    "device": device,
                    "rows": rows,
                    "decode_base_s": fit.decode_base,
                    "decode_per_client_s": fit.decode_per_client,
                    "decode_per_context_s": fit.decode_per_context,
                },
                fh,
                indent=2,
            )


if __name__ == "__main__":
    main()
