"""``llmsched reproduce``: a published experiment, our figures beside the paper's.

``gsm8k`` is Pang et al.'s GSM8K experiment (Table III, Figs. 6-9); ``mico`` Mico's throughput
ratios over clouds and batch sizes (Table 1); ``baton`` Baton's Tables 1-2 in the simulator
(:mod:`llmsched.experiments.baton`); ``all`` every published figure llmsched can reproduce,
each with a verdict (:mod:`llmsched.experiments.published`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from llmsched.cli.config import nonempty_text
from llmsched.cli.options import (
    JSON,
    PROGRESS,
    TEXT,
    TIMINGS,
    Command,
    Kind,
    Option,
    choice,
    integer,
    integers,
    print_json,
    progress,
    resolve,
)

__all__ = ["COMMAND", "OPTIONS", "check_plot_dir", "run"]

#: The output-length shapes ``reproduce mico --outputs`` offers (all of one mean).
SHAPES = ("geometric", "normal", "lognormal", "constant")


#: The options only ``reproduce mico`` reads.
MICO_ONLY = ("engines", "batches", "queries", "seeds", "outputs")


def _shapes() -> Kind:
    """Comma-separated names of :data:`SHAPES`; an array of them in a config file."""

    def check(name: str, value: Any) -> tuple[str, ...]:
        items = [value] if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) else []
        if not items or any(item not in SHAPES for item in items):
            raise ValueError(f"{name} must name shapes among {', '.join(SHAPES)}, got {value!r}")
        return tuple(items)

    def parse(text: str) -> tuple[str, ...]:
        try:
            return check("outputs", [part.strip() for part in text.split(",")])
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return Kind(parse, check, metavar="SHAPES", as_toml=list)


#: The command's options, each declared once: its flag and its TOML key.
#:
#: :meta hide-value:
OPTIONS = (
    Option(
        "experiment",
        choice("gsm8k", "mico", "baton", "all", metavar="EXPERIMENT"),
        None,
        "gsm8k: Pang et al.'s GSM8K experiment (Table III, Figs. 6-9); mico: Mico's throughput "
        "ratios over clouds and batch sizes (Table 1); baton: Baton's Tables 1-2 in the simulator "
        "(padded insertion, static batches, prefill apart); all: every published figure llmsched "
        "can reproduce, beside the paper's, each with a verdict and the reason",
        positional=True,
    ),
    Option(
        "seed", integer(0), 0, "seed of the GSM8K output lengths, or of Mico's or Baton's first query set"
    ),
    Option(
        "engines",
        integers(1, 1000, "2,3,6,9"),
        (2, 3, 6, 9),
        "mico: numbers of engines (clouds), as 2,3,6,9",
    ),
    Option(
        "batches",
        integers(1, 1000, "2,3,6,9"),
        tuple(range(2, 11)),
        "mico: batch sizes (each engine's clients), as 2-10",
        shown="2-10",
    ),
    Option(
        "queries",
        integers(1, 1_000_000, "200,500,800,1000"),
        (800,),
        "mico: numbers of queries, as 200,500,800,1000",
        shown="800, Table 1's",
    ),
    Option("seeds", integer(1, 1000), 3, "mico, baton: query sets each setting is averaged over"),
    Option(
        "outputs",
        _shapes(),
        ("geometric",),
        "mico: the output lengths' shape, of one mean: geometric (GPT-2 stopping at a constant "
        "hazard), normal, lognormal or constant; several (as geometric,normal) run Table 1 under "
        "each, a sensitivity study",
    ),
    JSON,
    Option(
        "predictor",
        TEXT,
        "mico",
        "the realistic predictor run beside the oracle: mico, noisy, bucket or mean",
    ),
    Option("plot", Kind(str, nonempty_text, "DIR"), None, "write Gantt charts to DIR, made if missing"),
    PROGRESS,
    TIMINGS,
)


def check_plot_dir(path: Path | None) -> None:
    """Create the --plot folder now and write a file in it, so that a path that cannot be a
    folder of charts fails before the work."""
    if path is None:
        return
    import tempfile

    shown = f"--plot {str(path)!r}"
    try:
        if path.exists() and not path.is_dir():
            raise ValueError(f"{shown} is a file; give a folder for the charts")
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"{shown}: cannot create the folder ({exc.strerror or exc})") from None
    try:
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise ValueError(f"{shown}: cannot write in the folder ({exc.strerror or exc})") from None


def run(args: Any) -> int:
    """Run ``llmsched reproduce``: 0 when every schedule is valid."""
    from llmsched.experiments.reproduce import format_mico, format_report, reproduce_gsm8k, reproduce_mico

    config = resolve(args, COMMAND).config
    if config.experiment == "all":
        from llmsched.experiments.published import format_all, reproduce_all

        changed = [
            option.flag
            for option in OPTIONS
            if option.name not in ("experiment", "json", "progress")
            and getattr(config, option.name) != option.default
        ]
        if changed:
            raise ValueError(
                f"reproduce all runs each experiment as published; {', '.join(changed)} "
                "applies to reproduce gsm8k, mico or baton"
            )
        everything = reproduce_all(progress=progress(config))
        if config.json:
            print_json(everything)
        else:
            print(format_all(everything))
        return 0 if not everything["invalid"] else 1
    if config.experiment == "baton":
        from llmsched.experiments.baton import format_baton, reproduce_baton

        changed = [
            option.flag
            for option in OPTIONS
            if option.name not in ("experiment", "json", "progress", "seed", "seeds")
            and getattr(config, option.name) != option.default
        ]
        if changed:
            raise ValueError(
                f"{', '.join(changed)} does not apply to reproduce baton (it reads --seed, --seeds)"
            )
        baton = reproduce_baton(config.seeds, config.seed)
        if config.json:
            print_json(baton)
        else:
            print(format_baton(baton))
        return 0
    if config.experiment == "mico" and len(config.outputs) > 1:
        from llmsched.experiments.reproduce import format_mico_sensitivity, mico_sensitivity

        if config.queries != (800,) or config.seed != 0:
            raise ValueError("--outputs with several shapes runs Table 1's 800 queries from seed 0")
        if config.plot is not None or config.timings or config.predictor != "mico":
            raise ValueError("--plot, --timings and --predictor apply to reproduce gsm8k, not mico")
        study = mico_sensitivity(
            config.outputs, None, config.engines, config.batches, config.seeds, progress(config)
        )
        if config.json:
            print_json(study)
        else:
            print(format_mico_sensitivity(study))
        return 0 if not study["invalid"] else 1
    if config.experiment == "mico":
        if config.plot is not None:
            raise ValueError("--plot draws the GSM8K experiment's Gantt charts; reproduce mico has none")
        if config.timings:
            raise ValueError("--timings: reproduce mico runs no solver and reports no timings")
        report = reproduce_mico(
            engines=list(config.engines),
            batches=list(config.batches),
            queries=list(config.queries),
            seeds=config.seeds,
            seed=config.seed,
            progress=progress(config),
            outputs=config.outputs[0],
        )
        if config.json:
            print_json(report)
        else:
            print(format_mico(report))
        return 0 if not report["invalid"] else 1
    changed = [
        option.flag
        for option in OPTIONS
        if option.name in MICO_ONLY and getattr(config, option.name) != option.default
    ]
    if changed:
        raise ValueError(f"{', '.join(changed)} applies to reproduce mico, not gsm8k")
    plot = None if config.plot is None else Path(config.plot)
    check_plot_dir(plot)
    report = reproduce_gsm8k(
        seed=config.seed,
        plot_dir=plot,
        predictor=config.predictor,
        progress=progress(config),
        timings=config.timings,
    )
    if config.json:
        print_json(report)
    else:
        print(format_report(report))
        if plot:
            print(f"\nGantt charts written to {plot}/")
    return 0


COMMAND = Command("reproduce", "reproduce a published experiment", "", OPTIONS, run)
