"""Baton's Tables 1 and 2 in the simulator: padded insertion against static batches and against
prefilling apart.

Baton (Sec. 5) serves Llama-2-7B (fp16) on one GPU and compares four ways to fill a batch:

* **Benchmark**: Hugging Face's static batches: a batch's prompts padded to its longest run
  together, and the batch decodes until its last request ends, then the next batch starts
  (:class:`~llmsched.engines.padded.rule.PaddedRule` under the ``batch-wise`` request policy:
  one padded iteration of the batch's prompts, then decoding);
* **Baton**: padded insertion: a freed slot takes the next query at once, its prompt run in
  one iteration with every running request's next token, all padded to the new prompt
  (:class:`~llmsched.engines.padded.rule.PaddedRule`, first come first served); the paper
  holds it equivalent in throughput to Orca;
* **Baton-PD**: the new prompt prefilled apart and its keys and values embedded in the free
  slot: a prefill stage of the new prompts alone
  (:class:`~llmsched.engines.competition.rule.CompetitionRule`, FCFS, prefill first);
* **Orca**, for reference: selective batching, the new prompts beside the decoding tokens
  unpadded (:class:`~llmsched.engines.orca.rule.OrcaRule`, no token cap).

Baton's PD method (prefill batches grouped by length, decode batches combined at random) is
not modelled. The GPU is ExeGPT's roofline layer model
(:meth:`~llmsched.exegpt.LayerCostModel.from_specs`) for Llama-2-7B on the card Baton used:
an RTX A6000 for Table 1 and an RTX 4090 for Table 2, at the default efficiencies (half the
fp16 tensor rate, 80% of the memory bandwidth), with no attention term for a prompt's square.
The query sets are :func:`~llmsched.workloads.baton_like`'s (Baton publishes none): 120
``mixed`` queries for Table 1 (every length doubled at batch size 4, as the paper does), the 30
``short`` ones for Table 2, all waiting at time 0; a method's figure is its completion time
(the makespan), averaged over the query sets. Every schedule is validated.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from llmsched.core.checks import positive_int
from llmsched.core.checks import seed as check_seed
from llmsched.core.cost import CostModel
from llmsched.core.workload import Workload

__all__ = [
    "BATON_METHODS",
    "PAPER_BATON_TABLE1",
    "PAPER_BATON_TABLE2",
    "baton_cost",
    "format_baton",
    "reproduce_baton",
    "run_baton_method",
]

#: Baton's Table 1 (Llama-2-7B on an RTX A6000, 120 queries): completion time (s) by batch size
#: of Benchmark, PD, Baton and Baton-PD (batch size 4 with every sequence doubled).
PAPER_BATON_TABLE1 = {
    4: {"benchmark": 21901.0, "pd": 21781.0, "baton": 20549.0, "baton-pd": 11771.0},
    8: {"benchmark": 6619.0, "pd": 6577.0, "baton": 3424.0, "baton-pd": 2654.0},
}
#: Baton's Table 2 (an RTX 4090, 30 short queries): completion time (s) by batch size, of
#: Benchmark and Baton.
PAPER_BATON_TABLE2 = {
    2: {"benchmark": 161.77, "baton": 83.43},
    4: {"benchmark": 92.68, "baton": 49.61},
    6: {"benchmark": 61.70, "baton": 37.25},
    8: {"benchmark": 50.07, "baton": 31.08},
    10: {"benchmark": 40.45, "baton": 30.99},
}
#: The methods the simulator runs (Baton's PD is not among them).
BATON_METHODS = ("benchmark", "baton", "baton-pd", "orca")

_NO_CAP = 1 << 31  # no cap on an iteration's prompt tokens
_CARDS = {1: "a6000", 2: "rtx4090"}  # the card of each table


def baton_cost(gpu: str) -> CostModel:
    """Llama-2-7B on one ``gpu`` (``"a6000"`` or ``"rtx4090"``) as the roofline layer model
    prices it (:class:`~llmsched.ContextCostModel`), any prompt in one stage."""
    from llmsched.exegpt import LayerCostModel

    if gpu not in _CARDS.values():
        raise ValueError(f"gpu must be one of {', '.join(_CARDS.values())}, got {gpu!r}")
    return LayerCostModel.from_specs("llama2-7b", gpu).engine_cost(32, prefill_capacity=1 << 24)


def run_baton_method(workload: Workload, cost: CostModel, batch: int, method: str) -> Any:
    """One of :data:`BATON_METHODS` on ``batch`` slots; the schedule, validated.

    Raises
    ------
    ValueError
        An unknown method, or (a defect) a schedule that fails validation.
    """
    from llmsched.online.simulate import simulate, simulate_batching

    batch = positive_int("batch", batch)
    if method == "benchmark":
        schedule = simulate_batching(workload, cost, batch, "padded", "batch-wise", _NO_CAP)
    elif method == "baton":
        schedule = simulate_batching(workload, cost, batch, "padded", "fcfs", _NO_CAP)
    elif method == "baton-pd":
        schedule = simulate(workload, cost, batch, "fcfs", "prefill-first")
    elif method == "orca":
        schedule = simulate_batching(workload, cost, batch, "orca", "fcfs", _NO_CAP)
    else:
        raise ValueError(f"method must be one of {', '.join(BATON_METHODS)}, got {method!r}")
    violations = schedule.validate()
    if violations:
        raise ValueError(f"{method} made an invalid schedule: {violations[0]}")
    return schedule


def _times(workloads: list[Workload], cost: CostModel, batch: int) -> dict[str, float]:
    return {
        method: float(np.mean([run_baton_method(w, cost, batch, method).makespan for w in workloads]))
        for method in BATON_METHODS
    }


def reproduce_baton(seeds: int = 3, seed: int = 0) -> dict[str, Any]:
    """Baton's Tables 1 and 2 in llmsched's model (see the module docstring).

    Returns a JSON-ready dict: ``table1`` and ``table2``, one row per batch size with
    ``batch``, ``doubled`` (Table 1 at batch size 4), ``seconds`` (each method's completion
    time, the mean over the query sets), ``paper`` (the paper's times), and the ratios:
    ``baton_over_benchmark`` (Benchmark's time over Baton's, the paper's "throughput
    improvement"), ``pd_over_baton`` (Baton's over Baton-PD's, Table 1's gain over Orca) and
    ``pd_over_benchmark``, each beside the paper's (``paper_...``, None where the paper has no
    figure); ``seeds``, ``cards``.
    """
    from llmsched.workloads import baton_like

    seeds = positive_int("seeds", seeds)
    seed = check_seed("seed", seed)
    sets = range(seed, seed + seeds)

    def row(batch: int, doubled: bool, times: dict[str, float], paper: dict[str, float]) -> dict[str, Any]:
        def ratio(table: dict[str, float], over: str, under: str) -> float | None:
            return table[over] / table[under] if over in table and under in table else None

        return {
            "batch": batch,
            "doubled": doubled,
            "seconds": times,
            "paper": paper,
            "baton_over_benchmark": ratio(times, "benchmark", "baton"),
            "paper_baton_over_benchmark": ratio(paper, "benchmark", "baton"),
            "pd_over_baton": ratio(times, "baton", "baton-pd"),
            "paper_pd_over_baton": ratio(paper, "baton", "baton-pd"),
            "pd_over_benchmark": ratio(times, "benchmark", "baton-pd"),
            "paper_pd_over_benchmark": ratio(paper, "benchmark", "baton-pd"),
        }

    table1 = []
    a6000 = baton_cost("a6000")
    for batch, paper in PAPER_BATON_TABLE1.items():
        doubled = batch == 4
        workloads = [baton_like("mixed", s, double=doubled) for s in sets]
        table1.append(row(batch, doubled, _times(workloads, a6000, batch), paper))
    table2 = []
    rtx4090 = baton_cost("rtx4090")
    short = [baton_like("short", s) for s in sets]
    for batch, paper in PAPER_BATON_TABLE2.items():
        table2.append(row(batch, False, _times(short, rtx4090, batch), paper))
    return {
        "experiment": "baton",
        "table1": table1,
        "table2": table2,
        "seeds": list(sets),
        "cards": {"table1": "RTX A6000", "table2": "RTX 4090"},
    }


def format_baton(report: dict[str, Any]) -> str:
    """Both tables as plain text, the paper's figures beside ours."""

    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    lines = []
    for key, title, card in (
        ("table1", "Table 1 (120 mixed queries", report["cards"]["table1"]),
        ("table2", "Table 2 (30 short queries", report["cards"]["table2"]),
    ):
        lines += [
            f"Baton {title}, Llama-2-7B on an {card}): completion time (s), ours (the paper's)",
            f"{'batch':>7s} | {'Benchmark':>17s} | {'Baton':>17s} | {'Baton-PD':>17s} | {'Orca':>8s} | "
            f"{'Benchmark/Baton':>15s} | {'Baton/Baton-PD':>14s}",
        ]
        for row in report[key]:
            seconds, paper = row["seconds"], row["paper"]

            def time(
                method: str, seconds: dict[str, float] = seconds, paper: dict[str, float] = paper
            ) -> str:
                shown = (
                    f"{paper[method]:,.0f}" if paper.get(method, 0) >= 1000 else f"{paper.get(method, 0):.2f}"
                )
                theirs = f" ({shown})" if method in paper else ""
                return f"{seconds[method]:,.1f}{theirs}"

            batch = f"{row['batch']}" + (" x2" if row["doubled"] else "")
            lines.append(
                f"{batch:>7s} | {time('benchmark'):>17s} | {time('baton'):>17s} | {time('baton-pd'):>17s} | "
                f"{seconds['orca']:8,.1f} | {cell(row['baton_over_benchmark']):>6s} "
                f"({cell(row['paper_baton_over_benchmark'])}) | {cell(row['pd_over_baton']):>5s} "
                f"({cell(row['paper_pd_over_baton'])})"
            )
        lines.append("")
    return "\n".join(lines).rstrip()
