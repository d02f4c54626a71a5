"""The GSM8K experiment of Pang et al. (Sec. V, Table III, Figs. 6-9), run with llmsched.

``reproduce_gsm8k`` runs each available strategy on ``workloads.gsm8k(seed)`` with the
paper's cost model and 200 clients, validates every schedule, and reports the figures
beside the paper's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmsched.bounds import lower_bounds
from llmsched.cost import LinearCostModel
from llmsched.schedule import Schedule
from llmsched.simulate import simulate
from llmsched.validate import validate
from llmsched.workloads import gsm8k

__all__ = ["PAPER_GSM8K", "Method", "reproduce_gsm8k"]

# Reported by Pang et al. for LLaMA-65B on GSM8K with 200 clients (Sec. V, Figs. 6-9).
PAPER_GSM8K: dict[str, Any] = {
    "methods": {
        "baseline": {"makespan_s": 201.00, "utilization": 0.802},
        "offline": {"makespan_s": 197.08, "utilization": 0.855},
        "online": {"makespan_s": 193.33, "utilization": 0.8619},
        "hybrid": {"makespan_s": 190.58, "utilization": 0.8906},
    },
    "lower_bound_s": 180.0,
    "lower_bound_prefill_s": 13.0,
    "lower_bound_decode_s": 167.0,
    "clients": 200,
    "requests": 1319,
}


@dataclass(frozen=True)
class Method:
    """A named strategy: a request policy and an iteration policy."""

    name: str
    request_policy: str
    iteration_policy: str
    description: str


METHODS = (
    Method("baseline", "fcfs", "prefill-first", "vLLM-like: one FCFS queue, prefill-first"),
    Method(
        "offline",
        "offline-oracle",
        "prefill-first",
        "balanced per-client queues (exact P||Cmax on the outputs), longest N^p + N^d first",
    ),
    Method(
        "static-round-robin",
        "static",
        "prefill-first",
        "requests dealt round-robin to per-client queues, prefill-first",
    ),
)


def reproduce_gsm8k(seed: int = 0, clients: int = 200, plot_dir: str | Path | None = None) -> dict[str, Any]:
    """Run every strategy on ``gsm8k(seed)`` and return the report as a JSON-ready dict.

    Keys: ``rows`` (one per method: ``method``, ``makespan_s``, ``utilization``,
    ``tokens_per_s``, ``gap_to_lb`` against the strong bound, ``valid``, and the paper's
    figures where it reports the method), ``lower_bound_s`` (the strong bound),
    ``lower_bounds`` (all bounds and their parts), and ``paper``.

    Raises
    ------
    RuntimeError
        If a schedule fails validation (a bug, never expected).
    """
    from llmsched.mip import Status, solve_pcmax

    workload = gsm8k(seed)
    cost = LinearCostModel.paper()
    # t_d of Eqs. 31-32 from the bin packing's proven bound (its optimum when proven).
    packing = solve_pcmax(workload.output_tokens, clients, time_limit=30)
    bounds = lower_bounds(workload, cost, clients, decode_tokens_makespan=int(packing.lower_bound))
    rows: list[dict[str, Any]] = []
    schedules: dict[str, Schedule] = {}
    for method in METHODS:
        schedule = simulate(workload, cost, clients, method.request_policy, method.iteration_policy)
        violations = validate(schedule)
        if violations:
            raise RuntimeError(f"{method.name}: invalid schedule: {violations[:3]}")
        schedules[method.name] = schedule
        paper = PAPER_GSM8K["methods"].get(method.name, {})
        rows.append(
            {
                "method": method.name,
                "request_policy": method.request_policy,
                "iteration_policy": method.iteration_policy,
                "predictor": "oracle",
                "makespan_s": schedule.makespan,
                "utilization": schedule.utilization,
                "tokens_per_s": schedule.tokens_per_s,
                "gap_to_lb": schedule.makespan / bounds.strong - 1.0,
                "valid": True,
                "paper_makespan_s": paper.get("makespan_s"),
                "paper_utilization": paper.get("utilization"),
            }
        )
    if plot_dir is not None:
        from llmsched.plot import save_gantt

        out = Path(plot_dir)
        out.mkdir(parents=True, exist_ok=True)
        for name, schedule in schedules.items():
            save_gantt(schedule, out / f"gsm8k_{name}.png", title=f"GSM8K, {name}")
    return {
        "workload": "gsm8k",
        "seed": seed,
        "requests": len(workload),
        "clients": clients,
        "output_mean": float(workload.output_tokens.mean()),
        "output_sd": float(workload.output_tokens.std()),
        "rows": rows,
        "lower_bound_s": bounds.strong,
        "lower_bounds": bounds.as_dict(),
        "decode_packing": {
            "status": str(packing.status),
            "makespan_tokens": packing.makespan,
            "lower_bound_tokens": packing.lower_bound,
            "runtime_s": packing.runtime,
            "proven_optimal": packing.status is Status.OPTIMAL,
        },
        "paper": PAPER_GSM8K,
    }


def format_report(report: dict[str, Any]) -> str:
    """The report as a plain-text table with the paper's figures beside ours."""
    import pandas as pd

    lines = [
        f"GSM8K: {report['requests']} requests (seed {report['seed']}; outputs mean "
        f"{report['output_mean']:.2f}, sd {report['output_sd']:.2f}), {report['clients']} clients, "
        "LinearCostModel.paper()",
        "",
    ]
    frame = pd.DataFrame(report["rows"])
    frame = frame[
        [
            "method",
            "makespan_s",
            "paper_makespan_s",
            "utilization",
            "paper_utilization",
            "tokens_per_s",
            "gap_to_lb",
        ]
    ]
    lines.append(
        frame.to_string(
            index=False,
            na_rep="-",
            formatters={  # type: ignore[arg-type]
                "makespan_s": "{:.2f}".format,
                "paper_makespan_s": lambda v: "-" if pd.isna(v) else f"{v:.2f}",
                "utilization": "{:.2%}".format,
                "paper_utilization": lambda v: "-" if pd.isna(v) else f"{v:.2%}",
                "tokens_per_s": "{:.1f}".format,
                "gap_to_lb": "{:+.2%}".format,
            },
        )
    )
    lb = report["lower_bounds"]
    paper = report["paper"]
    packing = report["decode_packing"]
    lines += [
        "",
        "Lower bounds (s)            ours     paper",
        f"  prefill t_p            {lb['prefill_s']:8.2f}  {paper['lower_bound_prefill_s']:8.2f}",
        f"  decode t_d             {lb['decode_s']:8.2f}  {paper['lower_bound_decode_s']:8.2f}",
        f"  paper bound t_p + t_d  {lb['paper_s']:8.2f}  {paper['lower_bound_s']:8.2f}",
        f"  strong bound           {lb['strong_s']:8.2f}         -",
        f"  paper's arithmetic     {lb['paper_literal_s']:8.2f}         -"
        "   (full stages and batches; not a bound)",
        f"  (t_d from the bin packing of the outputs: {int(lb['decode_tokens_makespan'])} tokens on the "
        f"busiest client, {packing['status']} in {packing['runtime_s']:.2f} s)",
    ]
    return "\n".join(lines)
