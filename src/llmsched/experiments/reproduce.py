"""Published experiments run with llmsched: the GSM8K experiment of Pang et al. (Sec. V,
Table III, Figs. 6-9) and Mico's multi-cloud throughput table (Table 1).

``reproduce_gsm8k`` runs the paper's four strategies (baseline, offline only, online only,
hybrid) and a few more on ``workloads.gsm8k(seed)`` with the paper's cost model and 200
clients, once with the true output lengths (oracle) and once with a realistic predictor,
validates every schedule, and reports the figures beside the paper's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from llmsched.core.checks import flag, instance, path_arg, positive_int
from llmsched.core.checks import seed as check_seed
from llmsched.core.cost import BoundedCostModel, CostModel, LinearCostModel
from llmsched.core.progress import progress_bar
from llmsched.core.workload import Workload
from llmsched.engines.competition.bounds import lower_bounds
from llmsched.engines.competition.schedule import Schedule
from llmsched.engines.competition.validate import validate
from llmsched.online.simulate import simulate
from llmsched.workloads import gsm8k

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "METHODS",
    "MICO_COST",
    "MICO_SCHEMES",
    "PAPER_GSM8K",
    "PAPER_MICO_KV",
    "PAPER_MICO_TABLE1",
    "STRATEGIES",
    "Method",
    "format_mico",
    "format_mico_sensitivity",
    "kv_cache_series",
    "mico_sensitivity",
    "reproduce_gsm8k",
    "reproduce_mico",
    "reproduce_mico_kv",
    "run_method",
]

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
    """A named strategy: a request policy (planning with predictions, or with the true
    lengths under the oracle) and an iteration policy."""

    name: str
    request_policy: str
    oracle_request_policy: str
    iteration_policy: str
    description: str

    def request_policy_for(self, predictor: str) -> str:
        return self.oracle_request_policy if predictor == "oracle" else self.request_policy


#: The paper's four strategies first (``method`` in the report), then further rows.
#:
#: :meta hide-value:
METHODS = (
    Method("baseline", "fcfs", "fcfs", "prefill-first", "vLLM-like: one FCFS queue, prefill-first"),
    Method(
        "offline",
        "offline",
        "offline-oracle",
        "prefill-first",
        "offline only: balanced per-client queues (exact P||Cmax), longest N^p + N^d first",
    ),
    Method(
        "online",
        "sorted-preemptive-rr",
        "sorted-preemptive-rr-oracle",
        "lagrangian",
        "online only: Algorithm 1 over round-robin queues, Lagrangian rule",
    ),
    Method(
        "hybrid",
        "hybrid",
        "hybrid-oracle",
        "lagrangian",
        "offline queues balanced with a per-request prefill overhead, Algorithm 1, Lagrangian rule",
    ),
    Method(
        "offline+online",
        "sorted-preemptive",
        "sorted-preemptive-oracle",
        "lagrangian",
        "the paper's hybrid as written: Algorithm 1 over the paper's offline queues, Lagrangian rule",
    ),
    Method(
        "online-as-written",
        "sorted-preemptive-rr",
        "sorted-preemptive-rr-oracle",
        "lagrangian-as-written",
        "the paper's online method as written: Algorithm 1, round-robin queues, Eqs. 41-43 read literally",
    ),
    Method(
        "hybrid-as-written",
        "sorted-preemptive",
        "sorted-preemptive-oracle",
        "lagrangian-as-written",
        "the paper's hybrid as written: Algorithm 1, the paper's offline queues, Eqs. 41-43 read literally",
    ),
    Method(
        "fcfs+lagrangian",
        "fcfs",
        "fcfs",
        "lagrangian",
        "the baseline's one FCFS queue with llmsched's Lagrangian rule",
    ),
    Method(
        "fcfs+as-written",
        "fcfs",
        "fcfs",
        "lagrangian-as-written",
        "the baseline's one FCFS queue with Eqs. 41-43 read literally",
    ),
    Method(
        "longest-first",
        "longest-first",
        "longest-first-oracle",
        "lagrangian",
        "one shared queue, longest predicted output first, Lagrangian rule",
    ),
    Method(
        "static-round-robin",
        "static",
        "static",
        "prefill-first",
        "requests dealt round-robin to per-client queues, prefill-first",
    ),
)
STRATEGIES = ("baseline", "offline", "online", "hybrid")
# The realistic predictor: a ten-class length classifier at the accuracy Mico reports for its
# fine-tuned DistilBERT on math word problems (80.69%). The classifier learned here from the
# prompt length alone (``bucket``) has no signal on these outputs (the runaways are drawn at
# random), so it stands beside it in the accuracy report only.
REALISTIC_PREDICTOR = "mico"


def run_method(method: Method, workload: Workload, cost: CostModel, clients: int, predictor: str) -> Schedule:
    """Simulate one strategy; the schedule is validated (RuntimeError if invalid: a bug)."""
    schedule = simulate(
        workload, cost, clients, method.request_policy_for(predictor), method.iteration_policy
    )
    violations = validate(schedule)
    if violations:
        raise RuntimeError(f"{method.name} ({predictor}): invalid schedule: {violations[:3]}")
    return schedule


def reproduce_gsm8k(
    seed: int = 0,
    clients: int = 200,
    plot_dir: str | Path | None = None,
    predictor: str = REALISTIC_PREDICTOR,
    progress: bool = False,
    cost: CostModel | None = None,
    timings: bool = False,
) -> dict[str, Any]:
    """Run every strategy on ``gsm8k(seed)`` with oracle and with predicted lengths.

    ``cost`` is the paper's :meth:`LinearCostModel.paper` unless another model is given (a
    fitted or a context-aware one: :class:`~llmsched.ContextCostModel` with its context
    terms at 0 gives the paper's figures to the bit).

    The predicted lengths come from ``predictor`` (by default ``mico``: ten length classes
    predicted at the accuracy Mico reports), cross-fitted so that no request is predicted by
    a model that saw it. The report's accuracy table also gives the bucket classifier learned
    from the prompt length. With ``progress`` a bar on stderr counts the steps: the decode
    bound, each method's run with each kind of lengths, each Gantt chart.

    Returns the report as a JSON-ready dict. Keys: ``rows`` (one per method and predictor:
    ``method``, ``predictor``, ``makespan_s``, ``utilization``, ``tokens_per_s``,
    ``gap_to_lb`` against the strong bound, ``valid``, and the paper's figures where it
    reports the method), ``lower_bound_s`` (the strong bound), ``lower_bounds`` (all bounds
    and their parts), ``prediction_accuracy`` and ``paper``. Every figure comes from
    deterministic work (the bin packing of the decode bound stops on its work budget, not
    on a clock), so the report is the same on any machine, bit for bit; ``timings=True``
    adds the one thing that is not, ``timings`` (seconds the bin packing took).

    Raises
    ------
    ValueError
        An unknown predictor.
    RuntimeError
        If a schedule fails validation (a bug, never expected).
    """
    from llmsched.mip import Status, solve_pcmax
    from llmsched.online import accuracy, cross_fit, make_predictor, with_predictions

    seed = check_seed("seed", seed)
    clients = positive_int("clients", clients)
    progress = flag("progress", progress)
    timings = flag("timings", timings)
    if plot_dir is not None:
        # The charts' folder is made before the work, so a bad one fails at once, not after it.
        out = Path(path_arg("plot_dir", plot_dir))
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ValueError(f"plot_dir {str(out)!r} cannot be made a folder: {error.strerror}") from None
    if predictor == "oracle":
        raise ValueError("predictor is the realistic one, reported beside the oracle; pick another")
    make_predictor(predictor)  # ValueError on an unknown name, before any work
    cost = LinearCostModel.paper() if cost is None else cost
    instance("cost", cost, BoundedCostModel, "a cost model with lower bounds (e.g. LinearCostModel)")
    workload = gsm8k(seed)
    charts = 2 * len(STRATEGIES) if plot_dir is not None else 0
    with progress_bar(progress, 1 + 2 * len(METHODS) + charts, "gsm8k", unit="step") as bar:
        bar.set_postfix_str("decode bound")
        # t_d of Eqs. 31-32 from the bin packing's proven bound (its optimum when proven).
        packing = solve_pcmax(workload.output_tokens, clients)
        bounds = lower_bounds(workload, cost, clients, decode_tokens_makespan=int(packing.lower_bound))
        bar.update()
        predicted = cross_fit(predictor, workload)
        inputs = {"oracle": workload, predictor: with_predictions(workload, predicted)}
        rows: list[dict[str, Any]] = []
        schedules: dict[str, Schedule] = {}
        for name, source in inputs.items():
            for method in METHODS:
                bar.set_postfix_str(f"{method.name} ({name})")
                schedule = run_method(method, source, cost, clients, name)
                bar.update()
                schedules[f"{method.name}_{name}"] = schedule
                paper = PAPER_GSM8K["methods"].get(method.name, {})
                rows.append(
                    {
                        "method": method.name,
                        "predictor": name,
                        "request_policy": method.request_policy_for(name),
                        "iteration_policy": method.iteration_policy,
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

            for key, schedule in schedules.items():
                method_name, name = key.rsplit("_", 1)
                if method_name in STRATEGIES:
                    bar.set_postfix_str(f"chart {key}")
                    title = f"GSM8K, {method_name} ({name} lengths)"
                    save_gantt(schedule, out / f"gsm8k_{key}.png", title=title)
                    bar.update()
    report: dict[str, Any] = {
        "workload": "gsm8k",
        "seed": seed,
        "requests": len(workload),
        "clients": clients,
        "output_mean": float(workload.output_tokens.mean()),
        "output_sd": float(workload.output_tokens.std()),
        "rows": rows,
        "lower_bound_s": bounds.strong,
        "lower_bounds": bounds.as_dict(),
        "prediction_accuracy": {
            name: accuracy(workload.output_tokens, values)
            for name, values in (
                (predictor, predicted),
                *((other, cross_fit(other, workload)) for other in ("bucket", "mean") if other != predictor),
            )
        },
        "decode_packing": {
            "status": str(packing.status),
            "makespan_tokens": packing.makespan,
            "lower_bound_tokens": packing.lower_bound,
            "proven_optimal": packing.status is Status.OPTIMAL,
        },
        "paper": PAPER_GSM8K,
    }
    if timings:
        report["timings"] = {"decode_packing_s": packing.runtime}
    return report


def _table_beside_the_paper(frame: Any, formats: dict[str, str]) -> str:
    """``frame`` as text without its index, each column of ``formats`` in its format spec;
    a paper's column (``paper_...``) shows ``-`` where the paper gives no figure."""
    import pandas as pd

    def formatter(name: str, spec: str) -> Any:
        if name.startswith("paper_"):
            return lambda v: "-" if pd.isna(v) else format(v, spec)
        return lambda v: format(v, spec)

    formatters = {name: formatter(name, spec) for name, spec in formats.items()}
    return str(frame.to_string(index=False, na_rep="-", formatters=formatters))


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
            "predictor",
            "makespan_s",
            "paper_makespan_s",
            "utilization",
            "paper_utilization",
            "tokens_per_s",
            "gap_to_lb",
        ]
    ]
    lines.append(
        _table_beside_the_paper(
            frame,
            {
                "makespan_s": ".2f",
                "paper_makespan_s": ".2f",
                "utilization": ".2%",
                "paper_utilization": ".2%",
                "tokens_per_s": ".1f",
                "gap_to_lb": "+.2%",
            },
        )
    )
    lines.append("")
    for name, acc in report.get("prediction_accuracy", {}).items():
        lines.append(
            f"{name:>6} predictions (cross-fitted): MAE {acc['mae']:.1f} tokens, relative MAE "
            f"{acc['relative_mae']:.2f}, Spearman {acc['spearman']:+.2f}, class accuracy "
            f"{acc['bucket_accuracy']:.1%}"
        )
    lb = report["lower_bounds"]
    paper = report["paper"]
    packing = report["decode_packing"]
    took = report.get("timings", {}).get("decode_packing_s")
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
        f"busiest client, {packing['status']}" + ("" if took is None else f" in {took:.2f} s") + ")",
    ]
    return "\n".join(lines)


# Mico (multi-cloud query scheduling), Table 1: throughput of Mico (QI) over quantity-based
# distribution with batch-wise inference (Q-bar I-bar), 800 Alpaca queries on GPT-2
# engines, by number of clouds and batch size.
PAPER_MICO_TABLE1: dict[int, tuple[float, ...]] = {
    2: (1.67, 1.88, 1.98, 2.05, 2.08, 2.10, 2.10, 2.22, 2.17),
    3: (1.70, 1.91, 2.01, 2.04, 2.06, 2.14, 2.10, 2.16, 2.16),
    6: (1.79, 1.94, 2.00, 2.04, 2.07, 2.10, 2.10, 2.09, 2.02),
    9: (1.77, 1.89, 1.98, 2.08, 2.03, 2.02, 2.07, 2.11, 2.14),
}
PAPER_MICO_BATCHES = tuple(range(2, 11))

#: A GPT-2 engine as Mico times it: every model iteration about 70 ms whatever the batch
#: (Mico counts time in iterations), a prefill stage one iteration, GPT-2's 1,024-token
#: context for each of up to ten sequences.
MICO_COST = LinearCostModel(0.07, 0.0, 0.07, 0.0, 10 * 1024)

#: The four schemes of Mico's ablation: (router, engine request policy, backoff).
MICO_SCHEMES = {
    "QI": ("mico", "fcfs", True),  # Mico: token distribution (with backoff), insertion
    "QnotI": ("mico", "batch-wise", True),  # distribution only
    "notQI": ("round-robin", "fcfs", False),  # insertion only
    "notQnotI": ("round-robin", "batch-wise", False),  # the baseline
}


def _mico_queries(queries: int, seed: int, outputs: str = "geometric", shape: Any = None) -> Workload:
    from llmsched.online.predictors import MicoClassifier, with_predictions
    from llmsched.workloads import mico_like

    workload = mico_like(queries, seed, outputs=outputs, shape=shape)
    # Mico's predictor: ten classes up to the context, 85.37% accurate on Alpaca.
    classifier = MicoClassifier(accuracy=0.8537, buckets=10, max_tokens=1024, seed=seed)
    return with_predictions(workload, classifier.predict(workload))


def _int_list(name: str, values: Any, minimum: int) -> tuple[int, ...]:
    if isinstance(values, int):
        values = (values,)
    out = tuple(positive_int(name, v, minimum=minimum) for v in values)
    if not out:
        raise ValueError(f"{name} needs at least one value")
    return out


def reproduce_mico(
    engines: Any = (2, 3, 6, 9),
    batches: Any = PAPER_MICO_BATCHES,
    queries: Any = (800,),
    seeds: int = 3,
    seed: int = 0,
    progress: bool = False,
    outputs: str = "geometric",
    shape: Any = None,
    insertion: str = "stage",
) -> dict[str, Any]:
    """Mico's experiment in llmsched's model: throughput of Mico's scheme over the baseline.

    For every number of engines, batch size (each engine's clients) and number of queries,
    ``seeds`` query sets (:func:`llmsched.workloads.mico_like`, seeds ``seed``,
    ``seed + 1``, ...) with Mico's predictions run on a fleet of :data:`MICO_COST` engines
    under the four schemes of :data:`MICO_SCHEMES`, all queries arriving at once. Every
    fleet is validated. Throughput is queries over the fleet's makespan; the ratios are
    averaged over the query sets. ``outputs`` and ``shape`` draw the output lengths from
    another shape with the same mean (see :func:`llmsched.workloads.mico_like`).
    ``insertion`` is how a new query joins a running batch: ``"stage"`` (llmsched's
    competition engine: a prefill stage of one iteration that pauses decoding) or
    ``"padded"`` (Mico's Sec. 3.3 as written: the new prompt and every running query's next
    token in one padded iteration, :class:`~llmsched.engines.padded.rule.PaddedRule`).

    Returns
    -------
    dict
        ``rows`` (one per setting: ``engines``, ``batch``, ``queries``, ``ratio`` (QI over
        the baseline), ``paper_ratio`` (Mico's Table 1, None outside it), ``q_ratio`` (QI-bar
        over the baseline), ``i_ratio`` (Q-bar I over it), ``baseline_qps``, ``mico_qps``,
        ``pulled`` (requests moved by backoff under QI, on average)), ``seeds``, ``cost``,
        ``workload``, ``insertion`` and ``invalid`` (fleets that failed validation: 0).
    """
    from llmsched.fleet.engine import Backoff, Engine
    from llmsched.fleet.simulate import simulate_fleet
    from llmsched.fleet.validate import validate_fleet

    engines = _int_list("engines", engines, 1)
    batches = _int_list("batches", batches, 1)
    queries = _int_list("queries", queries, 1)
    seeds = positive_int("seeds", seeds)
    seed = check_seed("seed", seed)
    if insertion not in ("stage", "padded"):
        raise ValueError(f"insertion must be 'stage' or 'padded', got {insertion!r}")
    mode = "competition" if insertion == "stage" else "padded"
    sets = {(q, s): _mico_queries(q, s, outputs, shape) for q in queries for s in range(seed, seed + seeds)}
    rows = []
    invalid = 0
    total = len(engines) * len(batches) * len(queries)
    with progress_bar(progress, total, "mico", unit="setting") as bar:
        for m in engines:
            for b in batches:
                for q in queries:
                    ratios: dict[str, list[float]] = {name: [] for name in MICO_SCHEMES}
                    qps: dict[str, list[float]] = {name: [] for name in MICO_SCHEMES}
                    pulled = []
                    for s in range(seed, seed + seeds):
                        for name, (router, policy, backoff) in MICO_SCHEMES.items():
                            fleet = simulate_fleet(
                                sets[q, s],
                                [Engine(MICO_COST, b, request_policy=policy, mode=mode)] * m,
                                router,
                                Backoff(0.0) if backoff else None,
                            )
                            invalid += bool(validate_fleet(fleet))
                            qps[name].append(q / fleet.makespan)
                            if name == "QI":
                                pulled.append(fleet.pulled)
                        base = qps["notQnotI"][-1]
                        for name in MICO_SCHEMES:
                            ratios[name].append(qps[name][-1] / base)
                    paper = PAPER_MICO_TABLE1.get(m)
                    rows.append(
                        {
                            "engines": m,
                            "batch": b,
                            "queries": q,
                            "ratio": float(np.mean(ratios["QI"])),
                            "paper_ratio": paper[b - 2]
                            if paper is not None and q == 800 and b in PAPER_MICO_BATCHES
                            else None,
                            "q_ratio": float(np.mean(ratios["QnotI"])),
                            "i_ratio": float(np.mean(ratios["notQI"])),
                            "baseline_qps": float(np.mean(qps["notQnotI"])),
                            "mico_qps": float(np.mean(qps["QI"])),
                            "pulled": float(np.mean(pulled)),
                        }
                    )
                    bar.update(1)
    return {
        "experiment": "mico",
        "rows": rows,
        "seeds": list(range(seed, seed + seeds)),
        "cost": repr(MICO_COST),
        "workload": "mico_like: prompts ~27 tokens; "
        + (
            "GPT-2 stops at a constant hazard (mean 300) or at 1,024"
            if outputs == "geometric"
            else f"{outputs} outputs of the geometric's mean, clipped at 1,024"
        ),
        "outputs": outputs,
        "insertion": insertion,
        "output_mean": float(np.mean([w.output_tokens.mean() for w in sets.values()])),
        "output_sd": float(np.mean([w.output_tokens.std() for w in sets.values()])),
        "invalid": invalid,
    }


def format_mico(report: dict[str, Any]) -> str:
    """Mico's report as a plain-text table, the paper's ratio beside ours."""
    import pandas as pd

    frame = pd.DataFrame(report["rows"])[
        ["engines", "batch", "queries", "ratio", "paper_ratio", "q_ratio", "i_ratio", "pulled"]
    ]
    head = (
        f"Mico: throughput of QI (token distribution with backoff, insertion) over the baseline "
        f"(round robin, batch-wise), averaged over query sets {report['seeds']}; {report['cost']}; "
        f"{report['invalid']} invalid fleets"
    )
    frame["paper_ratio"] = frame["paper_ratio"].astype(float)  # None outside Table 1: NaN, shown "-"
    table = _table_beside_the_paper(
        frame, {"ratio": ".2f", "paper_ratio": ".2f", "q_ratio": ".2f", "i_ratio": ".2f", "pulled": ".1f"}
    )
    return head + "\n\n" + table


def mico_sensitivity(
    outputs: Any = ("geometric", "normal", "lognormal", "constant"),
    shape: Any = None,
    engines: Any = (2, 3, 6, 9),
    batches: Any = PAPER_MICO_BATCHES,
    seeds: int = 3,
    progress: bool = False,
) -> dict[str, Any]:
    """Mico's Table 1 under several output-length shapes of the same mean: does its conclusion
    rest on the one shape it assumed?

    For each shape of ``outputs`` (names of :data:`llmsched.workloads.MICO_OUTPUTS`;
    ``empirical`` draws from ``shape``) it runs :func:`reproduce_mico` on 800 queries and sums up
    each number of engines over ``batches``: the ratio of Mico's scheme over the baseline (mean,
    least, most), the paper's beside it, and the ablations, distribution alone (``q_ratio``) and
    insertion alone (``i_ratio``), with the settings where distribution alone gains.

    Returns a JSON-ready dict: ``rows`` (``outputs``, ``engines``, ``output_mean``,
    ``output_sd``, ``ratio_mean``, ``ratio_min``, ``ratio_max``, ``paper_mean``, ``paper_min``,
    ``paper_max`` (None outside Table 1), ``q_ratio_mean``, ``i_ratio_mean``, ``q_gains``,
    ``settings``) and ``invalid`` (fleets that failed validation: 0).
    """
    from llmsched.workloads import MICO_OUTPUTS

    names = (outputs,) if isinstance(outputs, str) else tuple(outputs)
    if not names:
        raise ValueError("outputs needs at least one shape")
    for name in names:
        if name not in MICO_OUTPUTS:
            raise ValueError(f"outputs must be among {', '.join(MICO_OUTPUTS)}, got {name!r}")
    if ("empirical" in names) != (shape is not None):
        raise ValueError("shape gives the lengths of the 'empirical' outputs, and only of them")
    rows = []
    invalid = 0
    for name in names:
        report = reproduce_mico(
            engines, batches, (800,), seeds, 0, progress, name, shape if name == "empirical" else None
        )
        invalid += report["invalid"]
        for m in dict.fromkeys(r["engines"] for r in report["rows"]):
            mine = [r for r in report["rows"] if r["engines"] == m]
            paper = [r["paper_ratio"] for r in mine if r["paper_ratio"] is not None]
            ratios = [r["ratio"] for r in mine]
            rows.append(
                {
                    "outputs": name,
                    "engines": m,
                    "output_mean": report["output_mean"],
                    "output_sd": report["output_sd"],
                    "ratio_mean": float(np.mean(ratios)),
                    "ratio_min": float(min(ratios)),
                    "ratio_max": float(max(ratios)),
                    "paper_mean": float(np.mean(paper)) if paper else None,
                    "paper_min": float(min(paper)) if paper else None,
                    "paper_max": float(max(paper)) if paper else None,
                    "q_ratio_mean": float(np.mean([r["q_ratio"] for r in mine])),
                    "i_ratio_mean": float(np.mean([r["i_ratio"] for r in mine])),
                    "q_gains": int(sum(r["q_ratio"] > 1.0 for r in mine)),
                    "settings": len(mine),
                }
            )
    return {"experiment": "mico-sensitivity", "rows": rows, "seeds": seeds, "invalid": invalid}


def format_mico_sensitivity(report: dict[str, Any]) -> str:
    """The sensitivity study as a plain-text table, the paper's ratios beside ours."""
    lines = [
        "Mico, Table 1 under output shapes of one mean: QI over the baseline, mean (least-most) over "
        "the batch sizes; Q-I-bar (distribution alone) and Q-bar-I (insertion alone) over the baseline",
        "",
        f"{'outputs':>10s} {'mean':>6s} {'sd':>6s} {'engines':>7s} | {'ours':>16s} | {'paper':>16s} | "
        f"{'QI-bar':>6s} {'gains':>6s} | {'Q-bar-I':>7s}",
    ]
    for row in report["rows"]:
        paper = (
            "-"
            if row["paper_mean"] is None
            else f"{row['paper_mean']:.2f} ({row['paper_min']:.2f}-{row['paper_max']:.2f})"
        )
        lines.append(
            f"{row['outputs']:>10s} {row['output_mean']:6.1f} {row['output_sd']:6.1f} {row['engines']:7d} | "
            f"{row['ratio_mean']:.2f} ({row['ratio_min']:.2f}-{row['ratio_max']:.2f}) | {paper:>16s} | "
            f"{row['q_ratio_mean']:6.2f} {row['q_gains']:>2d}/{row['settings']:<3d} | "
            f"{row['i_ratio_mean']:7.2f}"
        )
    lines.append(f"\n{report['invalid']} invalid fleets")
    return "\n".join(lines)


def kv_cache_series(fleet: Any, retain_finished: bool = False) -> pd.DataFrame:
    """The KV cache of every engine of a competition ``fleet``, model iteration by model
    iteration, as Mico measures it (Sec. 4.2.1: the cache's length along the sequence axis).

    Each engine keeps one cache tensor with a row per client. A prefill stage is one iteration
    that writes its requests' prompts into their rows, each prompt aligned to the longest of
    the stage; every other live row is padded by that length (Mico's insertion: the token
    vector of the iteration is the new prompt, and each running request pads to it; in
    llmsched's model it writes no token in a prefill stage). A decode iteration adds one token
    to every live row. Padding that leads every row is released, so the tensor's length is the
    longest live row's span (from its first real token). A row lives from its prefill to its last token; with
    ``retain_finished`` (batch-wise inference, where a finished query keeps iterating on
    end-of-sequence tokens until its batch ends) until the engine's next prefill stage.

    Returns
    -------
    pandas.DataFrame
        One row per model iteration: ``engine``, ``start``, ``end``, ``kind`` (``prefill`` or
        ``decode``), ``length`` (the tensor's length along the sequence axis, padding
        included: Mico's measure) and ``tokens`` (the real tokens the live rows hold, no
        padding), in each engine's time order.
    """
    import pandas as pd

    from llmsched.core.schedule import PREFILL

    frames = []
    for e, schedule in enumerate(fleet.schedules):
        if getattr(schedule, "request_parent", None) is not None or not hasattr(schedule, "stage_kind"):
            raise ValueError("kv_cache_series reads competition engines without preemption")
        prompt = np.asarray(schedule.workload.prompt_tokens, dtype=np.int64)
        start, end = schedule.request_decode_start, schedule.request_decode_end
        by_stage = np.asarray(schedule.request_prefill_stage)
        iteration_start, iteration_end = schedule.iteration_start, schedule.iteration_end
        span: dict[int, int] = {}  # live request -> its row's span (padding inside included)
        held: dict[int, int] = {}  # live request -> the real tokens its row holds
        lengths: list[np.ndarray] = []
        tokens: list[np.ndarray] = []
        starts: list[np.ndarray] = []
        ends: list[np.ndarray] = []
        kinds: list[np.ndarray] = []
        for stage in range(schedule.num_stages):
            if schedule.stage_kind[stage] == PREFILL:
                new = np.flatnonzero(by_stage == stage)
                if retain_finished:  # the finished rows of the last batch go now
                    for r in [r for r in span if end[r] <= (start[new].min() if new.size else 0)]:
                        del span[r], held[r]
                width = int(prompt[new].max()) if new.size else 0
                for r in span:  # padding: a running request writes no token in a prefill stage
                    span[r] += width
                for r in new.tolist():
                    span[r], held[r] = int(prompt[r]), int(prompt[r])
                lengths.append(np.array([max(span.values(), default=0)]))
                tokens.append(np.array([sum(held.values())]))
                starts.append(np.array([schedule.stage_start[stage]]))
                ends.append(np.array([schedule.stage_end[stage]]))
                kinds.append(np.array(["prefill"]))
                continue
            a = int(schedule.stage_first_iteration[stage])
            n = int(schedule.stage_iterations[stage])
            step = np.arange(1, n + 1, dtype=np.int64)
            longest = np.zeros(n, dtype=np.int64)
            total = np.zeros(n, dtype=np.int64)
            for r in list(span):
                # The iterations of the stage the row lives in: up to its last token, or to the
                # stage's end when finished rows are kept.
                last = n if retain_finished else min(n, max(int(end[r]) - a, 0))
                grown = span[r] + step[:last]
                longest[:last] = np.maximum(longest[:last], grown)
                total[:last] += held[r] + step[:last]
                span[r] += last
                held[r] += last
                if not retain_finished and int(end[r]) <= a + n:
                    del span[r], held[r]
            lengths.append(longest)
            tokens.append(total)
            starts.append(iteration_start[a : a + n])
            ends.append(iteration_end[a : a + n])
            kinds.append(np.full(n, "decode"))
        size = sum(x.size for x in lengths)
        frames.append(
            pd.DataFrame(
                {
                    "engine": np.full(size, e, dtype=np.int64),
                    "start": np.concatenate(starts) if starts else np.zeros(0),
                    "end": np.concatenate(ends) if ends else np.zeros(0),
                    "kind": np.concatenate(kinds) if kinds else np.zeros(0, dtype=str),
                    "length": np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64),
                    "tokens": np.concatenate(tokens) if tokens else np.zeros(0, dtype=np.int64),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


#: Mico's KV-cache experiment (Sec. 4.2.1: 200 queries, batch size 3, three clouds): the
#: cumulative KV-cache length Mico saves over batch-wise inference without distribution, per
#: cloud and for the system, and its throughput over it.
PAPER_MICO_KV = {"clouds": (41.54, 39.45, 50.68), "system": 44.89, "throughput": 1.79}


def reproduce_mico_kv(queries: int = 200, batch: int = 3, engines: int = 3, seeds: int = 3) -> dict[str, Any]:
    """Mico's KV-cache figures (Sec. 4.2.1, Figs. 7-10) in llmsched's model.

    On ``seeds`` query sets (as :func:`reproduce_mico` draws them) Mico's scheme (``QI``) and
    the baseline (``notQnotI``: round-robin, batch-wise) run on ``engines`` engines of
    ``batch`` clients; :func:`kv_cache_series` gives each engine's cache length per model
    iteration (the baseline's finished queries kept until their batch ends). The cumulative
    length is its sum over the iterations.

    Returns a JSON-ready dict: ``saved`` (the share of the baseline's cumulative length Mico
    saves, %, for the system), ``saved_engines`` (per engine, engines ordered by the
    baseline's cumulative length), ``saved_tokens`` (the same on the real tokens held,
    padding left out), ``throughput`` (queries over the makespan, Mico's over the
    baseline's), ``peak`` (the largest length, Mico's and the baseline's), each the mean
    over the query sets, and ``paper`` (:data:`PAPER_MICO_KV`), ``invalid`` (fleets that
    failed validation: 0).
    """
    from llmsched.fleet.engine import Backoff, Engine
    from llmsched.fleet.simulate import simulate_fleet
    from llmsched.fleet.validate import validate_fleet

    queries = positive_int("queries", queries)
    batch = positive_int("batch", batch)
    engines = positive_int("engines", engines)
    seeds = positive_int("seeds", seeds)
    saved, saved_engines, saved_tokens, throughput = [], [], [], []
    peaks: dict[str, list[int]] = {"QI": [], "notQnotI": []}
    invalid = 0
    for s in range(seeds):
        workload = _mico_queries(queries, s)
        runs = {}
        for name in ("QI", "notQnotI"):
            router, policy, backoff = MICO_SCHEMES[name]
            fleet = simulate_fleet(
                workload,
                [Engine(MICO_COST, batch, request_policy=policy)] * engines,
                router,
                Backoff(0.0) if backoff else None,
            )
            invalid += bool(validate_fleet(fleet))
            series = kv_cache_series(fleet, retain_finished=policy == "batch-wise")
            # Every engine, those that ran nothing at 0.
            sums = series.groupby("engine")[["length", "tokens"]].sum().reindex(range(engines), fill_value=0)
            runs[name] = (fleet, sums, series)
            peaks[name].append(int(series["length"].max()))
        (mico, mico_sum, _), (base, base_sum, _) = runs["QI"], runs["notQnotI"]
        saved.append(100 * (1 - mico_sum["length"].sum() / base_sum["length"].sum()))
        saved_tokens.append(100 * (1 - mico_sum["tokens"].sum() / base_sum["tokens"].sum()))
        # Clouds in order of the baseline's cumulative length (Mico routes anew, so an
        # engine's queries differ between the schemes; the order pairs like with like).
        mine = np.sort(mico_sum["length"].to_numpy())
        theirs = np.sort(base_sum["length"].to_numpy())
        # (an engine idle under the baseline saves nothing)
        saved_engines.append(np.where(theirs > 0, 100 * (1 - mine / np.maximum(theirs, 1)), 0.0))
        throughput.append(base.makespan / mico.makespan)
    return {
        "queries": queries,
        "batch": batch,
        "engines": engines,
        "seeds": seeds,
        "saved": float(np.mean(saved)),
        "saved_engines": [float(x) for x in np.mean(saved_engines, axis=0)],
        "saved_tokens": float(np.mean(saved_tokens)),
        "throughput": float(np.mean(throughput)),
        "peak": {"mico": float(np.mean(peaks["QI"])), "baseline": float(np.mean(peaks["notQnotI"]))},
        "paper": {key: value for key, value in PAPER_MICO_KV.items()},
        "invalid": invalid,
    }
