"""What the engine's stages cost: a decode iteration per context token, with the cache read in
place and gathered, and a prefill stage per token, with the layers after attention chunked or not.

    python benchmarks/runtime_layouts.py [--model small] [--device cpu] [--batches 1,4,16]
                                         [--contexts 32,256,1000] [--repeats 30]
                                         [--prefill-tokens 256,512,1024] [--json out.json]

Decode: the engine's ``in-place`` layout attends each sequence to a view of its own slot (work
grows with the sum of the contexts, as in a paged-attention engine); the ``gathered`` layout, the
engine's before, copies the batch's slots out padded to the longest (work grows with the batch
times the longest context). For every batch size and context (every slot alike) each layout
times ``repeats`` iterations back to back after a warm-up one, the two taking turns on which goes
first; each figure is the median with the 10th and 90th percentiles. Then it fits
``decode_base + decode_per_client * batch + decode_per_context * context`` to the in-place
medians (:meth:`llmsched.ContextCostModel.fit`) and prints the cost per context token, in all
and per layer.

Prefill (``--prefill-tokens``, empty to skip): stages of that many tokens in prompts of
``--prompt-length``, the layers after attention run in chunks of ``CPU_CHUNK_TOKENS`` or all at
once, taking turns in blocks of three stages; microseconds per token, median of
``--prefill-repeats`` stages (rounded up to whole blocks).
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
from llmsched.runtime.engine import CPU_CHUNK_TOKENS

PREFILL_BLOCK = 3  # prefill stages in a row per setting


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _figure(samples: list[float]) -> dict[str, float]:
    p10, p90 = np.percentile(samples, [10, 90])
    return {"median_s": statistics.median(samples), "p10_s": float(p10), "p90_s": float(p90)}


def _ms(figure: dict[str, float]) -> str:
    """A median in milliseconds with its 10th to 90th percentile."""
    return f"{figure['median_s'] * 1e3:.2f} ({figure['p10_s'] * 1e3:.2f}-{figure['p90_s'] * 1e3:.2f})"


def _decode(engines: dict[str, Engine], args: argparse.Namespace, config: Any) -> dict[str, Any]:
    print(f"{args.model} ({config.num_hidden_layers} layers) on {args.device_name}; ms per decode iteration")
    print("| batch | context | in place, ms | gathered, ms | gathered / in place |")
    print("|---|---|---|---|---|")
    rows: list[dict[str, Any]] = []
    turn = 0
    for batch in args.batches:
        for context in args.contexts:
            slots = list(range(batch))
            row: dict[str, Any] = {"batch": batch, "context": context}
            order = list(engines) if turn % 2 == 0 else list(engines)[::-1]
            turn += 1
            for layout in order:
                engine = engines[layout]
                engine.reset()
                engine.occupy(slots, [context] * batch)
                engine.decode(slots)  # warm-up
                times, read = [], []
                end = engine.clock()
                for _ in range(args.repeats):
                    read.append(sum(engine.lengths[slot] for slot in slots))
                    engine.decode(slots)
                    start, end = end, engine.clock()
                    times.append(end - start)
                # The context the fit sees: the median of the tokens read (each iteration reads
                # one more per slot than the one before), beside the median time.
                row[layout] = {**_figure(times), "context_read": statistics.median(read)}
            rows.append(row)
            inplace, gathered = row["in-place"], row["gathered"]
            print(
                f"| {batch} | {context} | {_ms(inplace)} | {_ms(gathered)} | "
                f"{gathered['median_s'] / inplace['median_s']:.2f}x |"
            )
    batches = np.array([r["batch"] for r in rows], dtype=float)
    contexts = np.array([r["in-place"]["context_read"] for r in rows], dtype=float)
    seconds = np.array([r["in-place"]["median_s"] for r in rows])
    fit = ContextCostModel.fit([1, 2], [1, 4], [1.0, 1.0], batches, contexts, seconds, 1)
    per_layer = fit.decode_per_context / config.num_hidden_layers
    error = float(np.mean(np.abs(fit.decode_iteration_time(batches, contexts) / seconds - 1)))
    print(
        f"in place: {fit.decode_base * 1e3:.3f} ms + {fit.decode_per_client * 1e6:.1f} us per request "
        f"+ {fit.decode_per_context * 1e9:.0f} ns per context token ({per_layer * 1e9:.1f} ns per "
        f"layer); fit error {error:.1%}"
    )
    return {
        "rows": rows,
        "decode_base_s": fit.decode_base,
        "decode_per_client_s": fit.decode_per_client,
        "decode_per_context_s": fit.decode_per_context,
        "fit_error": error,
    }


def _prefill(engine: Engine, args: argparse.Namespace) -> list[dict[str, Any]]:
    print(f"prefill, prompts of {args.prompt_length} tokens; us per token")
    print(f"| tokens | in chunks of {CPU_CHUNK_TOKENS}, us | all at once, us |")
    print("|---|---|---|")
    rng = np.random.default_rng(0)
    rows = []
    settings = {"chunked": CPU_CHUNK_TOKENS, "whole": None}
    for index, tokens in enumerate(args.prefill_tokens):
        count = max(1, tokens // args.prompt_length)
        lengths = [args.prompt_length] * (count - 1) + [tokens - args.prompt_length * (count - 1)]
        times: dict[str, list[float]] = {name: [] for name in settings}
        # Rounds of a few stages in a row per setting, as a profile or a schedule runs them;
        # the first round is a warm-up.
        for repeat in range(-(-args.prefill_repeats // PREFILL_BLOCK) + 1):
            order = list(settings) if (index + repeat) % 2 == 0 else list(settings)[::-1]
            for name in order:
                engine.chunk_tokens = settings[name]
                for _ in range(PREFILL_BLOCK):
                    prompts = [rng.integers(0, engine.config.vocab_size, size=n).tolist() for n in lengths]
                    engine.reset()
                    start = engine.clock()
                    engine.prefill(prompts, list(range(len(prompts))))
                    if repeat:
                        times[name].append((engine.clock() - start) / tokens)
        row = {"tokens": tokens, **{name: _figure(samples) for name, samples in times.items()}}
        rows.append(row)
        print(f"| {tokens} | {row['chunked']['median_s'] * 1e6:.1f} | {row['whole']['median_s'] * 1e6:.1f} |")
    engine.chunk_tokens = CPU_CHUNK_TOKENS
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="small")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batches", type=_ints, default=[1, 4, 16])
    parser.add_argument("--contexts", type=_ints, default=[32, 256, 1000])
    parser.add_argument("--repeats", type=int, default=30, help="iterations timed per point and layout")
    parser.add_argument("--prefill-tokens", type=_ints, default=[256, 512, 768, 1024])
    parser.add_argument("--prompt-length", type=int, default=32)
    parser.add_argument("--prefill-repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (CPU runs only)")
    parser.add_argument("--json", help="write every figure to this file")
    args = parser.parse_args()
    gpu = args.device.startswith("cuda")
    config = PRESETS[args.model]
    model = LlamaModel(config, seed=0)
    slots = max(max(args.batches), max(args.prefill_tokens, default=0) // args.prompt_length + 1)
    longest = max(max(args.contexts) + args.repeats + 2, args.prompt_length + 1)
    engines = {
        layout: Engine(
            model,
            slots,
            longest,
            device=args.device,
            dtype=torch.float16 if gpu else torch.float32,
            threads=None if gpu else args.threads,
            attention=layout,
        )
        for layout in ("in-place", "gathered")
    }
    args.device_name = torch.cuda.get_device_name() if gpu else f"CPU ({torch.get_num_threads()} thread(s))"
    report: dict[str, Any] = {"model": args.model, "device": args.device_name}
    report["decode"] = _decode(engines, args, config)
    if args.prefill_tokens:
        report["prefill"] = _prefill(engines["in-place"], args)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)


if __name__ == "__main__":
    main()
