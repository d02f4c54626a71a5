"""``llmsched cost``: the measured hardware presets (``cost list``) and cost tables fitted to
measurements (``cost fit``), which ``--cost preset:NAME`` and ``--cost table:FILE.toml`` read."""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from typing import Any

import numpy as np

from llmsched.cli.options import (
    JSON,
    OUTPUT_FILE,
    TEXT,
    Command,
    Kind,
    Option,
    check_output_file,
    choice,
    integer,
    number,
    print_json,
    resolve,
)

__all__ = ["COMMAND", "FIT", "LIST", "PREFILL_BY", "parse_columns", "preset_rows", "run"]

# What ``cost list`` prices: a prefill stage of one prompt of these tokens, one of this many
# prompts of this length, and a decode iteration of these requests, each holding this many
# tokens of context.
LISTED_PREFILLS = (1024, 8192)
LISTED_BATCHED = (16, 512)
LISTED_BATCHES = (1, 64)
LISTED_CONTEXT = 1024

#: ``cost fit --prefill-by``: the ``prompt_count`` of :meth:`llmsched.TableCostModel.fit`.
PREFILL_BY = {"auto": None, "count": True, "tokens": False}

DEFAULT_COLUMNS = (
    "prompt=prompt_size,batch=batch_size,output=token_size,prefill_time=prompt_time,decode_time=token_time"
)

#: ``cost list``'s options.
#:
#: :meta hide-value:
LIST_OPTIONS = (JSON,)


def _mixed(text: str) -> float | str:
    if text == "fused":
        return text
    try:
        factor = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be fused or a factor >= 1, got {text!r}") from None
    if not factor >= 1:
        raise argparse.ArgumentTypeError(f"must be fused or a factor >= 1, got {text}")
    return factor


def _check_mixed(name: str, value: Any) -> float | str:
    if value == "fused":
        return "fused"
    from llmsched.core.checks import real

    return real(name, value, low=1.0)


#: How a fitted table prices a mixed iteration: ``fused`` (the library's rule) or a factor.
MIXED_KIND = Kind(_mixed, _check_mixed, "fused|FACTOR")

#: ``cost fit``'s options.
#:
#: :meta hide-value:
FIT_OPTIONS = (
    Option(
        "file", TEXT, None, "CSV of measurements with a header row, one measured run a row", positional=True
    ),
    Option(
        "columns",
        TEXT,
        DEFAULT_COLUMNS,
        "the column of each role, ROLE=COLUMN comma-separated (prompt: tokens a prompt; batch: prompts "
        "a batch; output: output tokens, 'output=' when not measured; prefill_time: the batch's prompt "
        "phase; decode_time: one decode iteration); roles not given keep SplitwiseSim's names",
        metavar="ROLE=COL,...",
    ),
    Option("time_unit", choice("s", "ms", "us"), "ms", "unit of both time columns"),
    Option(
        "prefill_by",
        choice(*PREFILL_BY),
        "auto",
        "what keys the prefill table: the batch's tokens and its prompt count (needs single prompts "
        "and batches of one prompt length), its tokens alone (SplitwiseSim's rule), or the first "
        "where the rows allow it",
    ),
    Option("holdout", number(0.0, 1.0, low_open=True, high_open=True), 0.2, "share of rows held out"),
    Option("seed", integer(0), 0, "seed of the split into fitted and held-out rows"),
    Option(
        "mixed_factor",
        MIXED_KIND,
        1.1,
        "price a mixed iteration at this factor times the prefill table at its tokens "
        "(SplitwiseSim's rule, 1.1, as the presets do), or 'fused': decode plus prefill less "
        "their shared fixed cost",
    ),
    Option(
        "max_batch",
        integer(1, 1 << 20),
        None,
        "the largest decode batch the table prices, at most twice the largest measured",
        shown="twice the largest measured, as the presets",
    ),
    Option(
        "where",
        TEXT,
        None,
        "keep only the rows whose columns hold these values, COLUMN=VALUE comma-separated (as "
        "model=llama2-70b,hardware=h100-80gb,tensor_parallel=8 on SplitwiseSim's file)",
        metavar="COL=VALUE,...",
    ),
    Option(
        "out",
        OUTPUT_FILE,
        None,
        "write the table fitted on every row to this TOML file, for --cost table:FILE",
    ),
    JSON,
)


#: SplitwiseSim's columns that tell its setups apart: rows of several setups are not one table.
SETUP_COLUMNS = ("model", "hardware", "tensor_parallel")


def _rows(path: str, where: str | None) -> Any:
    """The measurements ``cost fit`` fits: the file (its path), or, with ``where``, its rows
    whose columns hold the values given (a DataFrame). A file whose rows span several of
    SplitwiseSim's setups (model, hardware, tensor parallelism) is refused unless ``where``
    keeps one."""
    import csv

    import pandas as pd

    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            header = list(reader.fieldnames or [])
            kept = [c for c in SETUP_COLUMNS if c in header]
            setups = {tuple(row[c] for c in kept) for row in reader} if kept else set()
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ValueError(f"{path}: cannot read it as CSV ({exc})") from None
    selected: Any = path
    if where is not None:
        wanted = parse_where(where)
        missing = [c for c in wanted if c not in header]
        if missing:
            raise ValueError(f"--where: {path} has no column {missing[0]!r}; its columns are {header}")
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        keep = np.ones(len(frame), dtype=bool)
        for column, value in wanted.items():
            keep &= (frame[column].str.strip() == value).to_numpy()
        if not keep.any():
            raise ValueError(f"--where {where}: no row of {path} holds these values")
        frame = frame[keep]
        setups = {tuple(row) for row in frame[kept].itertuples(index=False)} if kept else set()
        selected = _numeric(frame)
    if len(setups) > 1:
        names = ", ".join("/".join(setup) for setup in sorted(setups)[:4])
        raise ValueError(
            f"{path} holds measurements of {len(setups)} setups ({', '.join(kept)}: {names}"
            f"{', ...' if len(setups) > 4 else ''}), which one table cannot fit: keep one with --where "
            f"{'=...,'.join(kept)}=..."
        )
    return selected


def _numeric(frame: Any) -> Any:
    """``frame``'s columns as numbers where every cell reads as one (the rest as text)."""
    import pandas as pd

    out = {}
    for column in frame.columns:
        try:
            out[column] = pd.to_numeric(frame[column])
        except (TypeError, ValueError):
            out[column] = frame[column]
    return pd.DataFrame(out)


def parse_where(spec: str) -> dict[str, str]:
    """``COL=VALUE,...`` as a dict (values stripped of spaces)."""
    wanted: dict[str, str] = {}
    for item in spec.split(","):
        column, sep, value = item.partition("=")
        if not sep or not column.strip() or column.strip() in wanted:
            raise ValueError(f"--where must be COLUMN=VALUE, comma-separated, each column once; got {spec!r}")
        wanted[column.strip()] = value.strip()
    return wanted


def parse_columns(spec: str) -> dict[str, str | None]:
    """``--columns``: ``ROLE=COLUMN`` pairs, comma-separated; an empty column (``output=``)
    says the role was not measured.

    Raises
    ------
    ValueError
        A pair without ``=``, or a role given twice; an unknown role is refused by the fit.
    """
    roles: dict[str, str | None] = {}
    for part in spec.split(","):
        role, sep, column = (piece.strip() for piece in part.partition("="))
        if not sep or not role:
            raise ValueError(f"--columns takes ROLE=COLUMN pairs, got {part.strip()!r}")
        if role in roles:
            raise ValueError(f"--columns gives {role} twice")
        roles[role] = column or None
    return roles


def preset_rows(context: int = LISTED_CONTEXT) -> list[dict[str, Any]]:
    """One row per preset: its GPUs, memory for keys and values, price, power and a few of its
    fitted times (milliseconds; decode iterations at ``context`` tokens a request)."""
    from llmsched.core.hardware import presets

    rows = []
    for found in presets():
        cost = found.cost()
        row: dict[str, Any] = {
            "name": found.name,
            "gpus": found.gpus,
            "kv_memory_gib": found.kv_memory_bytes / 2**30,
            "kv_tokens": found.kv_tokens(),
            "price": found.price,
            "rated_watts": found.rated_watts,
            "machine_price": found.machine_price,
            "machine_power": found.machine_power,
            "prefill_capacity": cost.prefill_capacity,
            "max_batch": cost.max_batch,
        }
        for tokens in LISTED_PREFILLS:
            seconds = float(cost.prefill_time(tokens, tokens * tokens))
            row[f"prefill_{tokens}_ms"] = seconds * 1e3 if seconds < float("inf") else None
        count, length = LISTED_BATCHED
        seconds = float(cost.prefill_time(count * length, count * length * length))
        row[f"prefill_{count}x{length}_ms"] = seconds * 1e3 if seconds < float("inf") else None
        for batch in LISTED_BATCHES:
            seconds = float(cost.decode_iteration_time(batch, batch * context))
            row[f"decode_{batch}_ms"] = seconds * 1e3 if seconds < float("inf") else None
        rows.append(row)
    return rows


def _shown(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def run_list(args: Any) -> int:
    """``llmsched cost list``: the presets, as a table or one JSON object."""
    config = resolve(args, LIST).config
    rows = preset_rows()
    if config.json:
        print_json({"decode_context_tokens": LISTED_CONTEXT, "presets": rows})
        return 0
    header = (
        f"{'preset':26s} {'GPUs':>4s} {'KV GiB':>7s} {'KV tokens':>9s} {'price':>6s} {'power W':>7s} "
        f"{'prefill 1,024':>13s} {'8,192':>8s} {'16 x 512':>8s} {'decode 1':>8s} {'64':>6s}"
    )
    count, length = LISTED_BATCHED
    print(header)
    for row in rows:
        print(
            f"{row['name']:26s} {row['gpus']:4d} {row['kv_memory_gib']:7.1f} {row['kv_tokens']:9,d} "
            f"{row['price']:6.3f} {row['rated_watts']:7,.0f} {_shown(row['prefill_1024_ms']):>13s} "
            f"{_shown(row['prefill_8192_ms']):>8s} {_shown(row[f'prefill_{count}x{length}_ms']):>8s} "
            f"{_shown(row['decode_1_ms']):>8s} "
            f"{_shown(row['decode_64_ms']):>6s}"
        )
    print(
        f"times in ms (prefill of one prompt of that many tokens, or of {count} prompts of {length}; "
        "decode iteration of that many requests at "
        f"{LISTED_CONTEXT:,} context tokens each, '-' past the largest batch priced, twice the "
        "largest measured); price and power are the engine's share of its machine, price relative "
        "to a DGX-A100 (Splitwise, Table V); KV tokens in whole blocks of 16"
    )
    return 0


def run_fit(args: Any) -> int:
    """``llmsched cost fit``: the held-out error of a fit, and the table fitted on every row."""
    from llmsched.core.table import TableCostModel

    config = resolve(args, FIT).config
    check_output_file(config.out, "--out", "cost.toml")
    columns = parse_columns(config.columns)
    data = _rows(config.file, config.where)
    mixed = None if config.mixed_factor == "fused" else config.mixed_factor
    report = TableCostModel.held_out_error(
        data,
        columns,
        config.time_unit,
        holdout=config.holdout,
        seed=config.seed,
        mixed_factor=mixed,
        prompt_count=PREFILL_BY[config.prefill_by],
    )
    if not (math.isfinite(report.prefill_mape) and math.isfinite(report.decode_mape)):
        raise ValueError(
            f"the table fitted on {report.train_rows} rows cannot price all {report.test_rows} held-out "
            "rows (their sizes lie past what it may extrapolate to): hold out fewer (--holdout)"
        )
    by_count = PREFILL_BY[config.prefill_by]
    model = TableCostModel.fit(data, columns, config.time_unit, mixed_factor=mixed, prompt_count=by_count)
    # Batches up to twice the largest measured, as the presets price them, unless told.
    largest = config.max_batch if config.max_batch is not None else 2 * model.decode_batch[-1]
    model = dataclasses.replace(model, max_batch=largest)
    if config.out is not None:
        model.to_toml(config.out)
    out = {
        "file": str(config.file),
        "rows": report.train_rows + report.test_rows,
        "held_out_rows": report.test_rows,
        "seed": config.seed,
        "prefill_mape": report.prefill_mape,
        "decode_mape": report.decode_mape,
        "prefill_knots": len(model.prefill_tokens),
        "batched_prompt": model.batched_prompt,
        "batched_knots": len(model.batched_tokens),
        "decode_knots": len(model.decode_batch),
        "decode_per_context": model.decode_per_context,
        "prefill_capacity": model.prefill_capacity,
        "max_batch": model.max_batch,
        "out": config.out,
    }
    if config.json:
        print_json(out)
        return 0
    print(
        f"{config.file}{f' where {config.where}' if config.where else ''}: {out['rows']} rows; "
        f"fitted on {report.train_rows}, "
        f"{report.test_rows} held out (seed {config.seed})"
    )
    print(f"  held-out MAPE  prefill {report.prefill_mape:.2%}  decode {report.decode_mape:.2%}")
    print(
        f"  table on every row: {out['prefill_knots']} prefill knots up to {model.prefill_capacity:,} "
        f"tokens, {out['decode_knots']} decode knots up to {model.decode_batch[-1]} requests "
        f"(priced up to {model.max_batch}), c_d = {model.decode_per_context:.3g} s per context token"
    )
    if model.batched_prompt is not None:
        print(
            f"  prefill keyed by tokens and prompt count: {out['batched_knots']} knots of batches of "
            f"{model.batched_prompt}-token prompts beside the single prompts"
        )
    else:
        print("  prefill keyed by the batch's tokens alone")
    if config.out is not None:
        print(f"  written to {config.out} (--cost table:{config.out})")
    return 0


def run(args: Any) -> int:
    """Run ``llmsched cost list`` or ``llmsched cost fit``; the help and 2 without either."""
    if args.action == "list":
        return run_list(args)
    if args.action == "fit":
        return run_fit(args)
    args.command_parser.print_help(sys.stderr)
    return 2


LIST = Command(
    "list",
    "the measured hardware presets (--cost preset:NAME), with their memory and times",
    "",
    LIST_OPTIONS,
    run,
)
FIT = Command(
    "fit",
    "fit a cost table to measured times; print its held-out error, write it for --cost table:FILE",
    "",
    FIT_OPTIONS,
    run,
)
COMMAND = Command(
    "cost",
    "cost models of measured hardware: presets and fitted tables",
    "",
    (),
    run,
    subcommands=(LIST, FIT),
)
