"""How new requests join a running batch: static batches, padded insertion, prefill apart.

:func:`run_insertion` serves an offline batch on J slots in one of three ways, as Mico and
Baton compare them: ``static`` batches run to completion (prompts padded to the longest; a
finished request keeps computing until its batch ends), ``padded`` continuous batching (a
new prompt joins the batch in one step padded against it), and ``apart`` (the prompt is
prefilled on its own and its keys and values embedded in the free slot). These are
fixed serving disciplines without policies, so they run outside the decision loop.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from llmsched.core.workload import Workload
from llmsched.runtime.engine import Engine
from llmsched.runtime.executor import check_fit, make_prompts

__all__ = ["InsertionResult", "run_insertion", "static_cache_need"]


@dataclass(frozen=True)
class InsertionResult:
    """What one insertion mode did: tokens, time, and wasted token computations."""

    mode: str
    tokens: list[list[int]]
    seconds: float
    forward_tokens: int  # token positions run through the layers
    padded_tokens: int  # pads among them
    idle_tokens: int  # computations for requests already finished (static batching)
    output_tokens: int

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds if self.seconds > 0 else math.inf

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "seconds": self.seconds,
            "tokens_per_s": self.tokens_per_s,
            "forward_tokens": self.forward_tokens,
            "padded_tokens": self.padded_tokens,
            "idle_tokens": self.idle_tokens,
            "output_tokens": self.output_tokens,
        }


def static_cache_need(workload: Workload, slots: int) -> int:
    """Cache positions a slot needs under static batching: a finished request keeps decoding
    until the longest output of its batch (of ``slots`` requests in arrival order) ends."""
    order = np.argsort(workload.arrival, kind="stable")
    prompt, output = workload.prompt_tokens[order], workload.output_tokens[order]
    need = 0
    for b in range(0, len(order), slots):
        need = max(need, int(prompt[b : b + slots].max() + output[b : b + slots].max()))
    return need


def run_insertion(
    engine: Engine,
    workload: Workload,
    mode: Literal["static", "padded", "apart"],
    prompts: Sequence[Sequence[int]] | None = None,
    seed: int = 0,
) -> InsertionResult:
    """Serve an offline batch (every request waiting at time 0) in one insertion mode, on
    all of the engine's slots, in request order.

    ``static``: batches of J prompts padded to the longest, decoded until the longest output
    ends (finished requests keep computing: idle tokens). ``padded``: when slots free up,
    the waiting prompts join in one step, padded against each other and against the
    running requests' next tokens. ``apart``: they are prefilled together, unpadded, and
    decoding goes on.
    """
    if mode not in ("static", "padded", "apart"):
        raise ValueError(f"mode must be 'static', 'padded' or 'apart', got {mode!r}")
    if np.any(workload.arrival > 0):
        raise ValueError("run_insertion serves an offline batch; this workload has arrivals after 0")
    if prompts is None:
        prompts = make_prompts(workload, engine.config.vocab_size, seed)
    check_fit(engine, workload, prompts)
    n, slots = len(workload), engine.slots
    if mode == "static" and static_cache_need(workload, slots) > engine.max_len:
        raise ValueError(
            f"static batching needs {static_cache_need(workload, slots)} cache positions per slot "
            f"(finished requests keep decoding to the end of their batch); max_len is {engine.max_len}"
        )
    output = workload.output_tokens.tolist()
    tokens: list[list[int]] = [[] for _ in range(n)]
    engine.reset()
    idle = 0
    start = engine.clock()
    if mode == "static":
        for b in range(0, n, slots):
            batch = list(range(b, min(b + slots, n)))
            engine.padded_step([(s, prompts[r]) for s, r in enumerate(batch)])
            for _ in range(max(output[r] for r in batch)):
                fed = engine.decode(list(range(len(batch))))
                for s, r in enumerate(batch):
                    if len(tokens[r]) < output[r]:
                        tokens[r].append(fed[s])
                    else:
                        idle += 1  # finished, still computing
            for s in range(len(batch)):
                engine.release(s)
    else:
        running: dict[int, int] = {}
        waiting = list(range(n - 1, -1, -1))  # pop() takes the next request
        free = list(range(slots - 1, -1, -1))

        def finish(slots_done: Sequence[int]) -> None:
            for s in slots_done:
                if len(tokens[running[s]]) == output[running[s]]:
                    del running[s]
                    engine.release(s)
                    free.append(s)

        while running or waiting:
            if free and waiting:
                pairs = [(free.pop(), waiting.pop()) for _ in range(min(len(free), len(waiting)))]
                if mode == "apart":
                    engine.prefill([prompts[r] for _, r in pairs], [s for s, _ in pairs])
                    running.update(pairs)
                else:  # the new prompts and the running requests' next tokens, padded together
                    others = list(running)
                    engine.padded_step([*((s, prompts[r]) for s, r in pairs), *((o, []) for o in others)])
                    for o in others:
                        tokens[running[o]].append(engine.last_fed[o])
                    running.update(pairs)
                    finish(others)
                continue
            current = list(running)
            fed = engine.decode(current)
            for s, token in zip(current, fed, strict=True):
                tokens[running[s]].append(token)
            finish(current)
    seconds = engine.clock() - start
    counters = engine.counters
    return InsertionResult(
        mode,
        tokens,
        seconds,
        counters.forward_tokens,
        counters.padded_tokens,
        idle,
        int(sum(output)),
    )
