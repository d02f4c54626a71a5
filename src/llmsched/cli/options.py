"""Options declared once: each gives a command its flag, its TOML key, its check and its help.

An :class:`Option` names a value (``max_prompt``), its :class:`Kind` (how a flag's text is read,
how a config file's value is checked, how it is written back), its default, its help, where it
lives in a TOML file (``[workload] max_prompt``) and, when it does not apply to every run, the
values of another option it applies to (``--token-budget`` applies to ``--mode fusion``). A
:class:`Command` is a command's options, what it runs and the modes it can run. From them come
the argparse flags (:func:`add_options`), the config class and its TOML table
(:func:`llmsched.cli.config.config_class`), and the refusal of a flag the chosen run would
ignore (:func:`resolve`); no command keeps a table of its own for any of these.

The options several commands share are declared here: the load (:data:`LOAD`: the workload, its
preparation and the predictor), the cost model, the engine (clients, mode and the modes'
parameters), the latency targets, the outputs and the parallel backend. A command's own options
are declared in its module.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from llmsched.cli.config import (
    MAX_CLIENTS,
    check_cost,
    config_class,
    cost_as_toml,
    load_config,
    nonempty_text,
)
from llmsched.core.checks import MAX_REQUESTS, MAX_TOKENS, flag, positive_int, real, seed, text
from llmsched.core.checks import jobs as check_jobs

__all__ = [
    "BACKEND",
    "CLUSTER",
    "COST_HELP",
    "ENGINE",
    "LOAD",
    "MEMORY",
    "MEMORY_MODES",
    "MODES",
    "POOLS",
    "REAL_ENGINES",
    "WORKLOAD_HELP",
    "Command",
    "Kind",
    "Option",
    "Resolved",
    "add_options",
    "check_output_file",
    "check_plot_file",
    "load_inputs",
    "make_memory",
    "parse_cost",
    "parse_workload",
    "resolve",
]

WORKLOAD_HELP = (
    "gsm8k | gsm8k-answers | exegpt:TASK (S, T, G, C1, C2) | csv:PATH | vidur:PATH | splitwise:PATH "
    "| azure:PATH (an Azure LLM inference trace)"
)
COST_HELP = (
    "paper | linear:A_P,B_P,A_D,B_D[,CAPACITY] (seconds, seconds/token, seconds, seconds/client, "
    "tokens) | context:A_P,B_P,C_P,A_D,B_D,C_D[,CAPACITY] (the linear terms plus seconds per "
    "squared prompt token and per context token) | levels:CAP1=T1,CAP2=T2,...;TD (the MIP's semantics) "
    "| preset:NAME (measured hardware, as llama2-70b/h100/tp8; llmsched cost list) | table:FILE.toml "
    "(a cost table, as llmsched cost fit writes)"
)

#: Engine modes: PD competition (a prefill stage pauses decoding), PD fusion (chunked prefill,
#: :mod:`llmsched.engines.fusion`) and PD disaggregation (Splitwise's prompt and token
#: machines, :mod:`llmsched.engines.disaggregation`).
MODES = ("competition", "fusion", "disaggregated", "vllm", "sarathi", "orca", "padded")
#: The modes that are a real engine's batching rule (:mod:`llmsched.engines.batching`).
REAL_ENGINES = ("vllm", "sarathi", "orca", "padded")


# ---------------------------------------------------------------- spec strings
def parse_workload(spec: str, seed: int = 0, requests: int = 1000, columns: Any = None) -> Any:
    """A workload from a command-line spec (see ``WORKLOAD_HELP``); ``columns`` names the
    columns of a ``csv:`` file (:func:`llmsched.workloads.csv_columns`).

    Raises
    ------
    ValueError
        An unknown spec, a file that cannot be read as that kind of workload (the message
        names the file), or a bad ``seed`` or ``requests``.
    """
    from llmsched import workloads

    if not isinstance(spec, str):
        raise TypeError(f"workload must be a spec string ({WORKLOAD_HELP}), got {type(spec).__name__}")
    kind, _, arg = spec.partition(":")
    if columns is not None:
        if kind != "csv" or not arg:
            raise ValueError(f"--columns names the columns of a csv:PATH workload, not of {spec!r}")
        return workloads.from_csv(arg, columns=columns)
    if kind == "gsm8k" and not arg:
        return workloads.gsm8k(seed)
    if kind == "gsm8k-answers" and not arg:
        return workloads.gsm8k(outputs="answers")
    if kind == "exegpt" and arg:
        return workloads.exegpt_task(arg, requests, seed)
    loaders = {
        "csv": workloads.from_csv,
        "vidur": workloads.from_vidur_trace,
        "splitwise": workloads.from_splitwise_trace,
        "azure": workloads.from_azure_trace,
    }
    if kind in loaders and arg:
        return loaders[kind](arg)
    raise ValueError(f"unknown workload {spec!r}; expected {WORKLOAD_HELP}")


def _spec_number(field: str, text: str, kind: type = float) -> Any:
    """``text`` as a number of ``kind`` (float or int); a ValueError naming ``field`` otherwise."""
    try:
        return kind(text)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise ValueError(f"{field} must be {what}, got {text!r}") from None


# The coefficients of each --cost kind that takes numbers, in the model's order.
_SPEC_FIELDS = {"linear": ("A_P", "B_P", "A_D", "B_D"), "context": ("A_P", "B_P", "C_P", "A_D", "B_D", "C_D")}


def parse_cost(spec: str, clients: int | None = None) -> Any:
    """A cost model from a command-line spec (see ``COST_HELP``).

    Raises
    ------
    ValueError
        An unknown spec, a malformed one, or parameters the cost model refuses; the
        message names the spec and the field.
    """
    from llmsched.core.cost import ContextCostModel, LevelCostModel, LinearCostModel

    if not isinstance(spec, str):
        raise TypeError(f"cost must be a spec string ({COST_HELP}), got {type(spec).__name__}")
    kind, _, arg = spec.partition(":")
    try:
        if kind == "paper" and not arg:
            return LinearCostModel.paper()
        if kind in _SPEC_FIELDS and arg:
            fields = _SPEC_FIELDS[kind]
            parts = [p.strip() for p in arg.split(",")]
            if len(parts) not in (len(fields), len(fields) + 1):
                raise ValueError(
                    f"{kind} needs {len(fields)} or {len(fields) + 1} comma-separated numbers "
                    f"({','.join(fields)}[,CAPACITY]), got {len(parts)}"
                )
            numbers = [_spec_number(field, p) for field, p in zip(fields, parts, strict=False)]
            cap = _spec_number("CAPACITY", parts[len(fields)], int) if len(parts) > len(fields) else 5000
            model: Any = LinearCostModel if kind == "linear" else ContextCostModel
            return model(*numbers, prefill_capacity=cap)
        if kind == "levels" and arg:
            level_part, *rest = arg.split(";")
            if len(rest) != 1:
                raise ValueError("levels needs the levels, one ';', then TD (CAP1=T1,CAP2=T2,...;TD)")
            levels = []
            for item in level_part.split(","):
                cap_s, sep, time_s = item.partition("=")
                if not sep:
                    raise ValueError(f"a level must be CAP=T (tokens=seconds), got {item.strip()!r}")
                levels.append((_spec_number("CAP", cap_s.strip(), int), _spec_number("T", time_s.strip())))
            return LevelCostModel(levels, _spec_number("TD", rest[0].strip()))
        if kind == "preset" and arg:
            from llmsched.core.hardware import preset

            return preset(arg.strip()).cost()
        if kind == "table" and arg:
            from llmsched.core.table import TableCostModel

            return TableCostModel.from_toml(arg)
    except (TypeError, ValueError) as exc:
        # A preset's or a table file's error is about its name or its content, not the grammar.
        grammar = "" if kind in ("preset", "table") and arg else f"; expected {COST_HELP}"
        raise ValueError(f"bad cost model {spec!r}: {exc}{grammar}") from None
    raise ValueError(f"unknown cost model {spec!r}; expected {COST_HELP}")


# ---------------------------------------------------------------- kinds of values
def _identity(value: Any) -> Any:
    return value


class Kind(NamedTuple):
    """How one kind of value is read from a flag, checked in a config, and written back.

    ``parse`` reads a flag's text (an argparse type: an ``ArgumentTypeError`` for bad text) to
    the value a config holds; None for a boolean flag (``--x`` / ``--no-x``). ``check`` takes a
    value of a config file or of Python and returns it checked, or raises a TypeError or
    ValueError that names it. ``choices`` are the values argparse offers; ``merge`` combines a
    flag's value with the file's (a policy keeps the file's parameters when the flag names
    it); ``as_toml`` gives the value as TOML holds it.
    """

    parse: Callable[[str], Any] | None
    check: Callable[[str, Any], Any]
    metavar: str | None = None
    choices: tuple[Any, ...] | None = None
    merge: Callable[[Any, Any], Any] | None = None
    as_toml: Callable[[Any], Any] = _identity


def _type_error(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type from a reader that raises ValueError with its message."""

    def read(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return read


def integer(low: int, high: int | None = None, metavar: str | None = None) -> Kind:
    """An integer in ``[low, high]`` (no upper end for None)."""
    allowed = f">= {low}" if high is None else f"in [{low}, {high}]"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer {allowed}, got {text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be an integer {allowed}, got {text}")
        return value

    def check(name: str, value: Any) -> int:
        if low == 0 and high is None:
            return seed(name, value)
        return positive_int(name, value, minimum=low, maximum=high)

    return Kind(parse, check, metavar)


def number(low: float, high: float = float("inf"), low_open: bool = False, high_open: bool = False) -> Kind:
    """A number in the interval from ``low`` to ``high`` (``inf`` itself only with ``high``
    inf and closed)."""
    allowed = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number in {allowed}, got {text!r}") from None
        inside = (value > low if low_open else value >= low) and (
            value < high if high_open else value <= high
        )
        if not inside:  # NaN is never inside
            raise argparse.ArgumentTypeError(f"must be a number in {allowed}, got {text}")
        return value

    def check(name: str, value: Any) -> float:
        if high == float("inf"):
            return real(name, value, low=low, low_open=low_open, finite=high_open)
        return real(name, value, low=low, high=high, low_open=low_open, high_open=high_open)

    return Kind(parse, check)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}") from None
    if not 0 < value < float("inf"):  # NaN is refused too
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


#: A finite number > 0 (seconds, a rate, a bandwidth).
POSITIVE = Kind(_positive_float, lambda name, value: real(name, value, low=0.0, low_open=True))
#: A finite number >= 0 (a delay, a price).
NONNEGATIVE = number(0.0, float("inf"), high_open=True)
#: A flag: ``--x`` for True, ``--no-x`` for False.
FLAG = Kind(None, flag)
#: A name or a spec string, not empty.
TEXT = Kind(str, nonempty_text)


def choice(*choices: str, metavar: str | None = None) -> Kind:
    """One of ``choices``."""

    def check(name: str, value: Any) -> str:
        nonempty_text(name, value)
        if value not in choices:
            raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
        return str(value)

    return Kind(str, check, metavar, choices)


def _arrivals(text: str) -> str:
    from llmsched.workloads import ArrivalProcess

    return str(ArrivalProcess.parse(text))


def _check_arrivals(name: str, value: Any) -> str:
    nonempty_text(name, value)
    try:
        return _arrivals(value)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def _check_predictor(name: str, value: Any) -> str:
    from llmsched.online import make_predictor

    make_predictor(nonempty_text(name, value))
    return str(value)


def _plot_file(text: str) -> str:
    """A --plot file, named as matplotlib will write it.

    A name without a suffix gets matplotlib's default format (``chart`` is written as
    ``chart.png``), so that the report names the file written. A folder is left as it is, for
    :func:`check_plot_file` to refuse.
    """
    path = Path(text)
    stem = path.name.rstrip(".")
    try:
        if path.suffix or not stem or path.is_dir():
            return str(path)
    except OSError:  # a name too long, say: refused with its reason by check_plot_file
        return str(path)
    import matplotlib

    return str(path.with_name(f"{stem}.{matplotlib.rcParams['savefig.format']}"))


def _jobs(text: str) -> int:
    """A joblib worker count, -1 (every core) or a count >= 1 (joblib reads other negative
    counts as every core but some, and runs -1000 on one worker)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a nonzero integer (-1: every core), got {text!r}"
        ) from None
    if value == 0:
        raise argparse.ArgumentTypeError("must be a nonzero integer (-1: every core), got 0")
    if value < -1:
        raise argparse.ArgumentTypeError(f"must be -1 (every core) or a worker count >= 1, got {value}")
    return value


#: A spec string read when the run starts (a workload, a cost model, a policy pair).
SPEC = TEXT
#: An arrival process spec, ``poisson:RATE`` or ``gamma:RATE,CV``, kept in its own form.
ARRIVALS = Kind(_type_error(_arrivals), _check_arrivals, "PROCESS")
#: A predictor's name.
PREDICTOR = Kind(str, _check_predictor, "NAME")
#: A cost model: a ``--cost`` spec, or in a config file a ``[cost]`` table.
COST = Kind(str, check_cost, as_toml=cost_as_toml)


def _check_columns(name: str, value: Any) -> dict[str, str]:
    from llmsched.workloads import csv_columns

    try:
        return csv_columns(value)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{name}: {exc}") from None


def _columns(text: str) -> dict[str, str]:
    try:
        return _check_columns("--columns", text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


#: A csv workload's column names, ``FIELD=COL,...``; a table in a config file.
COLUMNS = Kind(_columns, _check_columns, as_toml=dict)
#: A file the command writes.
OUTPUT_FILE = Kind(str, nonempty_text, "PATH")
#: A figure file: a name without a suffix gets matplotlib's default format.
PLOT_FILE = Kind(_plot_file, nonempty_text, "FILE")
#: A joblib worker count: -1 (every core) or a count >= 1.
JOBS = Kind(_jobs, check_jobs)


def integers(low: int, high: int, example: str) -> Kind:
    """Comma-separated integers in ``[low, high]``, ``a-b`` for a range (``example`` in the
    message); an array of them in a config file."""

    def parse(text: str) -> tuple[int, ...]:
        values: list[int] = []
        for part in text.split(","):
            first, _, last = part.strip().partition("-")
            try:
                span = range(int(first), int(last or first) + 1)
            except ValueError:
                raise argparse.ArgumentTypeError(
                    f"must be comma-separated integers or ranges (as {example} or 2-10), got {part.strip()!r}"
                ) from None
            if not span or span[0] < low or span[-1] > high:
                raise argparse.ArgumentTypeError(
                    f"each value must lie in [{low}, {high}], got {part.strip()!r}"
                )
            values.extend(span)
        return tuple(values)

    def check(name: str, value: Any) -> tuple[int, ...]:
        items = [value] if not isinstance(value, (list, tuple)) else list(value)
        if not items:
            raise ValueError(f"{name} must hold at least one integer")
        return tuple(positive_int(f"{name}[{i}]", v, minimum=low, maximum=high) for i, v in enumerate(items))

    return Kind(parse, check, as_toml=list)


def _rates(text: str) -> tuple[float, ...]:
    """Comma-separated arrival-rate multipliers, each a finite number > 0."""
    rates = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"must be comma-separated numbers > 0 (as 0.5,0.75,1), got {part.strip()!r} in {text!r}"
            ) from None
        if not 0 < value < float("inf"):  # NaN is never inside
            raise argparse.ArgumentTypeError(f"each rate must be a finite number > 0, got {part.strip()!r}")
        rates.append(value)
    return tuple(rates)


def _check_rates(name: str, value: Any) -> tuple[float, ...]:
    items = [value] if not isinstance(value, (list, tuple)) else list(value)
    if not items:
        raise ValueError(f"{name} must hold at least one rate")
    return tuple(real(f"{name}[{i}]", v, low=0.0, low_open=True) for i, v in enumerate(items))


#: Comma-separated positive numbers (arrival-rate multipliers).
RATES = Kind(_rates, _check_rates, "K1,K2,...", as_toml=list)


def engine_kind(text: str, price: float = 1.0) -> tuple[str, int, float, float]:
    """``NAME:CLIENTS[:PRICE[:SPEED]]``, an engine kind, as (name, clients, price, speed);
    ``price`` when the text gives none.

    Raises
    ------
    ValueError
        Text of another shape, or clients, a price or a speed out of range.
    """
    parts = text.split(":") if isinstance(text, str) else []
    try:
        if not 2 <= len(parts) <= 4 or not parts[0]:
            raise ValueError
        clients = int(parts[1])
        price = float(parts[2]) if len(parts) > 2 else price
        speed = float(parts[3]) if len(parts) > 3 else 1.0
    except ValueError:
        raise ValueError(
            f"must be NAME:CLIENTS[:PRICE[:SPEED]] (as big:64:1.0 or slow:32:0.4:0.5), got {text!r}"
        ) from None
    if not 1 <= clients <= MAX_CLIENTS or not 0 <= price < float("inf") or not 0 < speed < float("inf"):
        raise ValueError(f"CLIENTS must lie in [1, {MAX_CLIENTS}], PRICE be >= 0 and SPEED > 0, got {text!r}")
    return parts[0], clients, price, speed


def _check_engine_kind(name: str, value: Any) -> str:
    try:
        engine_kind(text(name, value))
    except ValueError as exc:
        raise ValueError(f"{name} {exc}") from None
    return str(value)


#: An engine kind, ``NAME:CLIENTS[:PRICE[:SPEED]]``, kept as its spec.
ENGINE_KIND = Kind(
    _type_error(lambda spec: (engine_kind(spec), spec)[1]), _check_engine_kind, "NAME:CLIENTS[:PRICE[:SPEED]]"
)


# ---------------------------------------------------------------- options
def or_join(values: Sequence[Any]) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    shown = [str(v) for v in values]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"


def _shown(value: Any) -> str:
    """A default as the help shows it."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (tuple, list)):
        return ",".join(_shown(v) for v in value)
    return str(value)


class Option(NamedTuple):
    """One option of a command, declared once: its flag, its TOML key, its check and its help.

    ``name`` is the config's field and the flag (``max_prompt`` is ``--max-prompt``); ``help``
    says what it does, and the flag's help adds ``(default: ...)``, ``shown`` or the default.
    In a config file it is ``key`` (default: ``name``) of table ``section`` (None: a top-level
    key); ``shorthand`` lets ``section = "VALUE"`` set it. ``applies`` is ``(option, values)``
    when the option is used only where that other option takes one of those values
    (``("mode", ("fusion",))``): given where it is not, it is refused (``refusal`` replaces
    the message); from a config file it is refused too only when ``strict``. ``repeat``: the
    flag may be given several times (an array in a config file). ``required``: a flag that
    must be given (no config file holds it). ``positional``: an argument without a flag.
    """

    name: str
    kind: Kind
    default: Any
    help: str
    section: str | None = None
    key: str = ""
    shown: str | None = None
    applies: tuple[str, tuple[Any, ...]] | None = None
    refusal: str | None = None
    strict: bool = False
    repeat: bool = False
    shorthand: bool = False
    required: bool = False
    positional: bool = False
    metavar: str | None = None

    @property
    def flag(self) -> str:
        """The command-line flag: ``--max-prompt``."""
        return "--" + self.name.replace("_", "-")

    @property
    def toml_key(self) -> str:
        """Its key in its TOML table: ``max_prompt`` (``spec`` for the workload's spec)."""
        return self.key or self.name

    @property
    def toml_name(self) -> str:
        """Its full TOML name, as messages give it: ``workload.max_prompt``."""
        return self.toml_key if self.section is None else f"{self.section}.{self.toml_key}"

    @property
    def flag_help(self) -> str:
        """The flag's help: what it does and its default (or that it is required)."""
        if self.required:
            return f"{self.help} (required)"
        return f"{self.help} (default: {self.shown if self.shown is not None else _shown(self.default)})"

    def check(self, name: str, value: Any) -> Any:
        """``value`` checked (None stays None where the default is None); a repeated
        option's values as a tuple."""
        if value is None and self.default is None:
            return None
        if not self.repeat:
            return self.kind.check(name, value)
        if not isinstance(value, (list, tuple)) or not value:
            raise TypeError(f"{name} must be a non-empty array, got {value!r}")
        return tuple(self.kind.check(f"{name}[{i}]", item) for i, item in enumerate(value))

    def as_toml(self, value: Any) -> Any:
        """``value`` as a TOML file holds it."""
        if value is None:
            return None
        if self.repeat:
            return [self.kind.as_toml(item) for item in value]
        return self.kind.as_toml(value)

    def named(self, value: Any) -> str:
        """The flag that gives ``value``: ``--no-X`` for a flag turned off."""
        return "--no-" + self.flag[2:] if value is False else self.flag


def only(option: str, *values: Any) -> tuple[str, tuple[Any, ...]]:
    """``applies`` of an option used only where ``option`` takes one of ``values``."""
    return option, tuple(values)


def _load(
    name: str, kind: Kind, default: Any, help: str, shown: str | None = None, key: str = "", **more: Any
) -> Option:
    return Option(name, kind, default, help, section="workload", key=key, shown=shown, **more)


#: The load: the workload, how it is prepared, the predictor and the cost model (simulate, sweep,
#: fleet, provision).
#:
#: :meta hide-value:
LOAD = (
    _load("workload", SPEC, "gsm8k", WORKLOAD_HELP, key="spec", shorthand=True),
    _load(
        "seed",
        integer(0),
        0,
        "seed of generated workloads, of --arrivals, of --predictor's folds and of random routing",
    ),
    _load("requests", integer(1, MAX_REQUESTS), 1000, "requests of generated ExeGPT workloads"),
    _load(
        "columns",
        COLUMNS,
        None,
        "a csv:PATH workload's own column names: prompt_tokens=COL,output_tokens=COL[,arrival=COL]"
        "[,predicted_output=COL] (arrivals in seconds or date-times)",
        shown="the project's names",
        metavar="FIELD=COL,...",
    ),
    _load(
        "rate_scale",
        POSITIVE,
        1.0,
        "replay the arrivals K times faster: every arrival time divided by K",
        metavar="K",
    ),
    _load(
        "max_prompt",
        integer(1, MAX_TOKENS),
        None,
        "clip prompts to at most N tokens",
        shown="no clipping",
        metavar="N",
    ),
    _load(
        "max_output",
        integer(1, MAX_TOKENS),
        None,
        "clip outputs and predicted outputs to at most N tokens",
        shown="no clipping",
        metavar="N",
    ),
    _load(
        "arrivals",
        ARRIVALS,
        None,
        "draw arrival times: poisson:RATE | gamma:RATE,CV (RATE: requests per second > 0; CV: "
        "coefficient of variation of the gaps > 0); the first request at 0",
        shown="the workload's own; gsm8k and exegpt have none, all at 0",
    ),
    _load(
        "replace_arrivals",
        FLAG,
        False,
        "let --arrivals replace arrival times the workload already has",
        shown="refused",
    ),
    Option(
        "predictor",
        PREDICTOR,
        None,
        "plan with predicted output lengths: oracle (the true lengths) or a predictor cross-fitted "
        "on the workload (bucket, mean, mico, noisy); request policies that take sizes plan with "
        "them, and the routers least-work, qcmax and mico route by them",
        shown="none, a csv workload's own predicted_output if it has one",
    ),
    Option("cost", COST, "paper", COST_HELP),
)


def _memory(text: str) -> str | int:
    if text in ("none", "preset"):
        return text
    try:
        blocks = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be none, preset or a count of blocks, got {text!r}") from None
    if blocks < 1:
        raise argparse.ArgumentTypeError(f"must be none, preset or a number of blocks >= 1, got {text}")
    return blocks


def _check_memory(name: str, value: Any) -> str | int:
    if value in ("none", "preset"):
        return str(value)
    return positive_int(name, value)


#: An engine's KV-cache memory: ``none``, ``preset`` (the --cost preset's machine) or blocks.
MEMORY_KIND = Kind(_memory, _check_memory, "none|preset|BLOCKS")

#: The engine modes that hold a KV-cache memory (a disaggregated cluster's in its token
#: machines, with --max-output-tokens).
MEMORY_MODES = ("competition", "fusion", *REAL_ENGINES, "disaggregated")

#: An engine's KV-cache memory (simulate, sweep, fleet).
#:
#: :meta hide-value:
MEMORY = (
    Option(
        "memory",
        MEMORY_KIND,
        "none",
        "the engine's KV-cache memory: none (its clients alone bound the batch), preset (the memory "
        "of the --cost preset's machine: its GPUs less the weights) or a number of blocks; requests "
        "are admitted by free blocks and preempted by recompute (disaggregated: each token "
        "machine's, a transfer waiting for room for its prompt and --max-output-tokens)",
        applies=only("mode", *MEMORY_MODES),
    ),
    Option(
        "block_size",
        integer(1, 1 << 20),
        16,
        "tokens per KV-cache block (vLLM's 16)",
        applies=only("mode", *MEMORY_MODES),
    ),
)


def make_memory(config: Any) -> Any:
    """The :class:`~llmsched.core.memory.KVMemory` ``config.memory`` asks for, or None.

    Raises
    ------
    ValueError
        ``preset`` with a cost model that is not a ``preset:NAME`` spec.
    """
    from llmsched.core.memory import KVMemory

    if config.memory == "none":
        return None
    if config.memory == "preset":
        machine = _preset_of(config)
        if machine is None:
            raise ValueError(
                "--memory preset takes the memory of a measured machine: give --cost preset:NAME "
                "(llmsched cost list), or --memory BLOCKS"
            )
        return machine.memory(config.block_size)
    return KVMemory(int(config.memory), config.block_size)


#: The engine: its clients, its mode, and a fused engine's budget (simulate, sweep, fleet, provision).
#:
#: :meta hide-value:
ENGINE = (
    Option(
        "clients",
        integer(1, MAX_CLIENTS),
        200,
        "clients (batch slots) of an engine; --mode disaggregated: of each token machine",
    ),
    Option(
        "mode",
        choice(*MODES),
        "competition",
        "how an engine treats prefill and decode: competition (a prefill stage pauses decoding), "
        "fusion (chunked prefill: decoding and prompt chunks share iterations), disaggregated "
        "(prompt and token machines, a KV transfer between them), or as a real engine batches: "
        "vllm (prefill first; --chunked-prefill), sarathi (chunked prefill), orca (whole prompts "
        "and decoding in one iteration) or padded (new prompts join the batch padded against it, "
        "as Mico and Baton insert them)",
    ),
    Option(
        "max_num_batched_tokens",
        integer(2, 1 << 31),
        2048,
        "vllm, sarathi, orca, padded: the most tokens an iteration holds (vLLM's "
        "max_num_batched_tokens; the chunk budget with chunked prefill; Orca's and SplitwiseSim's "
        "batch token cap; padded: its new prompts' tokens)",
        applies=only("mode", *REAL_ENGINES),
        metavar="N",
    ),
    Option(
        "chunked_prefill",
        FLAG,
        False,
        "vllm: chunk prompts into iterations with the decoding requests",
        applies=only("mode", "vllm"),
    ),
    Option(
        "token_budget",
        integer(2, 1 << 31),
        512,
        "fusion: decoding requests plus prompt-chunk tokens per iteration (Sarathi-Serve's chunk size)",
        applies=only("mode", "fusion"),
        metavar="N",
    ),
)

_DISAGGREGATED = only("mode", "disaggregated")

#: A disaggregated cluster's pool sizes (simulate, sweep; provision searches them).
#:
#: :meta hide-value:
POOLS = (
    Option(
        "prompt_machines",
        integer(1, 10_000),
        1,
        "disaggregated: prompt machines",
        applies=_DISAGGREGATED,
        metavar="P",
    ),
    Option(
        "token_machines",
        integer(1, 10_000),
        1,
        "disaggregated: token machines, each of --clients clients",
        applies=_DISAGGREGATED,
        metavar="T",
    ),
)

#: A disaggregated cluster's KV link and pools (simulate, sweep, provision).
#:
#: :meta hide-value:
CLUSTER = (
    Option(
        "kv_bandwidth",
        POSITIVE,
        25.0,
        "disaggregated: GB/s of the link carrying keys and values",
        applies=_DISAGGREGATED,
        metavar="GBPS",
    ),
    Option(
        "kv_bytes_per_token",
        POSITIVE,
        None,
        "disaggregated: keys and values per prompt token, 2 x layers x kv heads x head dim x bytes",
        shown="the --cost preset's model's, else 2621440, LLaMA-65B in float16",
        applies=_DISAGGREGATED,
        metavar="BYTES",
    ),
    Option(
        "layers",
        integer(1, 100_000),
        None,
        "disaggregated: the model's layers, for the per-layer overlap",
        shown="the --cost preset's model's, else 80",
        applies=_DISAGGREGATED,
    ),
    Option(
        "kv_overlap",
        FLAG,
        True,
        "disaggregated: send each layer's keys and values as soon as it is computed",
        applies=_DISAGGREGATED,
    ),
    Option(
        "mixed_pool",
        FLAG,
        False,
        "disaggregated: lend idle token machines to the prompt pool under load",
        applies=_DISAGGREGATED,
    ),
    Option(
        "prompt_batch_tokens",
        integer(1, 1 << 31),
        None,
        "disaggregated: the most prompt tokens a stage of several prompts holds (a longer prompt "
        "runs alone; SplitwiseSim's 2,048)",
        shown="the prefill capacity",
        applies=_DISAGGREGATED,
        metavar="TOKENS",
    ),
    Option(
        "max_output_tokens",
        integer(1, MAX_TOKENS),
        None,
        "disaggregated, with --memory: the most output tokens a request may make, reserved with its "
        "prompt on its token machine",
        shown="none (needed with --memory)",
        applies=_DISAGGREGATED,
        metavar="N",
    ),
    Option(
        "lend_busy_above",
        integer(0, 1 << 40),
        None,
        "disaggregated, with --mixed-pool: lend token machines that decode as well (their decoding "
        "paused for the stage) while every prompt machine holds more than TOKENS prompt tokens "
        "(SplitwiseSim's mixed pool: 8,192)",
        shown="idle token machines only",
        applies=_DISAGGREGATED,
        metavar="TOKENS",
    ),
)


def policy_name(kind: str) -> Kind:
    """A registered ``kind`` ("request" or "iteration") policy, by name alone."""
    from llmsched.cli.config import PolicyConfig, make_policy

    def check(name: str, value: Any) -> str:
        nonempty_text(name, value)
        try:
            make_policy(kind, PolicyConfig(value))
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{name}: {exc}") from None
        return str(value)

    return Kind(str, check, "NAME")


_ENGINES_MODES = only("mode", "competition", "fusion", *REAL_ENGINES)

#: A fleet's engines' policies (fleet, provision).
#:
#: :meta hide-value:
ENGINE_POLICIES = (
    Option(
        "request_policy",
        policy_name("request"),
        "fcfs",
        "each engine's request policy, by name; a fleet runs the open-ended ones (fcfs, batch-wise, "
        "shortest-first, longest-first)",
        applies=_ENGINES_MODES,
    ),
    Option(
        "iteration_policy",
        policy_name("iteration"),
        "prefill-first",
        "each engine's iteration policy, by name",
        applies=only("mode", "competition"),
    ),
)


def _routers() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The fleet's registered routers (:data:`llmsched.fleet.routers.REGISTRY`), and those that
    weigh requests (by --sizes)."""
    from llmsched.fleet.routers import REGISTRY

    return tuple(REGISTRY), tuple(
        name for name, router in REGISTRY.items() if getattr(router, "weighs", False)
    )


ROUTER_NAMES, WEIGHING_ROUTERS = _routers()


def router(default: str) -> Option:
    """How a fleet sends arrivals to its engines (fleet and provision differ in the default)."""
    return Option(
        "router", choice(*ROUTER_NAMES), default, "how arrivals are sent to engines", applies=_ENGINES_MODES
    )


#: Mico's backoff between a fleet's engines (fleet, provision).
#:
#: :meta hide-value:
BACKOFF = (
    Option(
        "backoff", FLAG, False, "let an engine that runs dry pull waiting requests", applies=_ENGINES_MODES
    ),
    Option(
        "backoff_delay",
        NONNEGATIVE,
        0.02,
        "seconds a pulled request travels",
        applies=_ENGINES_MODES,
        metavar="S",
    ),
    Option(
        "backoff_threshold",
        integer(1, MAX_REQUESTS),
        1,
        "pull only from an engine with at least K waiting",
        applies=_ENGINES_MODES,
        metavar="K",
    ),
)


#: Admission at a fleet's door by a TTFT target (fleet): on with either part of the target.
#:
#: :meta hide-value:
ADMISSION = (
    Option(
        "admission_ttft",
        NONNEGATIVE,
        None,
        "turn away a request whose expected TTFT is past margin x (S + per-token x prompt)",
        metavar="S",
    ),
    Option(
        "admission_ttft_per_token",
        NONNEGATIVE,
        None,
        "the admission target's seconds a prompt token",
        metavar="S",
    ),
    Option(
        "admission_margin", POSITIVE, 0.5, "the share of the target the expected TTFT may take", metavar="F"
    ),
)


#: The latency targets: TTFT, and each request's mean or the p99 of every gap between tokens.
SLO_TTFT = Option(
    "slo_ttft",
    POSITIVE,
    None,
    "time-to-first-token target in seconds",
    section="slo",
    key="ttft",
    metavar="S",
)
SLO_TBT_MEAN = Option(
    "slo_tbt_mean",
    POSITIVE,
    None,
    "target for each request's mean time between tokens, in seconds",
    section="slo",
    key="tbt_mean",
    metavar="S",
)
SLO_TBT_P99 = Option(
    "slo_tbt_p99",
    POSITIVE,
    None,
    "target for the p99 of the time between tokens over every gap of every request, in seconds",
    section="slo",
    key="tbt_p99",
    metavar="S",
)

#: What a command writes: its JSON object, a Chrome trace and the CSVs of a run.
JSON = Option("json", FLAG, False, "print one JSON object", section="output", shown="text")
TRACE = Option(
    "trace",
    OUTPUT_FILE,
    None,
    "write a Chrome trace (JSON) of the run to this file, for ui.perfetto.dev or chrome://tracing",
    section="output",
)
REQUESTS_CSV = Option(
    "requests_csv",
    OUTPUT_FILE,
    None,
    "write one row per request (lengths, placement, TTFT, TBT, e2e, meets_slo) to this CSV",
    section="output",
)
STAGES_CSV = Option(
    "stages_csv", OUTPUT_FILE, None, "write one row per stage of the run to this CSV", section="output"
)
#: Options several commands share (traces).
#:
#: :meta hide-value:
TRACES = (TRACE, REQUESTS_CSV, STAGES_CSV)
# Example names of the output files, for the messages.
_EXAMPLES = {"trace": "trace.json", "requests_csv": "requests.csv", "stages_csv": "stages.csv"}
PROGRESS = Option(
    "progress",
    FLAG,
    True,
    "draw a progress bar on stderr when stderr is a terminal (never into a file or a pipe); "
    "--no-progress hides it",
    section="output",
)
TIMINGS = Option(
    "timings",
    FLAG,
    False,
    "add a 'timings' object (seconds of work) to the JSON output",
    section="output",
    shown="none, so that the output depends on the inputs alone and is the same on any machine",
)

#: Where independent runs go: joblib workers, local processes or a Dask or Ray cluster.
#:
#: :meta hide-value:
BACKEND = (
    Option("jobs", JOBS, -1, "joblib workers, or local Dask or Ray workers", shown="-1, every core"),
    Option(
        "backend",
        choice("loky", "dask", "ray"),
        "loky",
        "where independent runs go: local processes, a Dask cluster or a Ray runtime",
    ),
    Option(
        "dask_address",
        TEXT,
        None,
        "scheduler of a running Dask cluster",
        shown="start a local one of --jobs workers",
        metavar="ADDR",
    ),
    Option(
        "ray_address",
        TEXT,
        None,
        "a running Ray cluster to join",
        shown="start a local one of --jobs workers",
        metavar="ADDR",
    ),
)


# ---------------------------------------------------------------- commands
class Command(NamedTuple):
    """A command: its name, help, options and what runs it.

    ``config`` is its config class (:func:`llmsched.cli.config.config_class` of ``options``),
    when it reads ``--config FILE``; ``modes`` the engine modes it runs, when it has
    ``--mode``; ``subcommands`` commands under it (``runtime validate``).
    """

    name: str
    help: str
    description: str
    options: tuple[Option, ...]
    run: Callable[[Any], int] | None
    config: Any = None
    modes: tuple[str, ...] | None = None
    subcommands: tuple[Command, ...] = ()

    def option(self, name: str) -> Option:
        """The option of that name."""
        for option in self.options:
            if option.name == name:
                return option
        raise KeyError(f"{self.name} has no option {name!r}")


CONFIG_HELP = (
    "read the run from this TOML file: each option is a key, named as its flag (see "
    "llmsched.cli.config); flags given on the command line override it"
)


def add_options(parser: argparse.ArgumentParser, command: Command) -> None:
    """Give ``parser`` ``command``'s flags (and ``--config`` when it reads a file).

    Every flag defaults to None (not given), so that a file's value stands unless a flag
    overrides it, and so that a flag the run would ignore can be refused; :func:`resolve`
    fills in the defaults.
    """
    if command.config is not None:
        parser.add_argument("--config", type=Path, metavar="TOML", help=f"{CONFIG_HELP} (default: none)")
    for option in command.options:
        kind = option.kind
        settings: dict[str, Any] = {"help": option.flag_help}
        if kind.parse is None:
            settings["action"] = argparse.BooleanOptionalAction
        else:
            if kind.choices is not None:
                settings["choices"] = kind.choices
            elif kind.parse is not str:
                settings["type"] = kind.parse
            metavar = option.metavar or kind.metavar
            if metavar is not None:
                settings["metavar"] = metavar
            if option.repeat:
                settings["action"] = "append"
        if option.positional:
            parser.add_argument(option.name, **{**settings, "help": option.help})
            continue
        if option.required:
            settings["required"] = True
        parser.add_argument(option.flag, dest=option.name, default=None, **settings)


class Resolved(NamedTuple):
    """A command's run as the command line and the config file ask for it.

    ``config``: the file's values (or the defaults) overridden by every flag given; ``flags``:
    the options given on the command line; ``from_file``: those the file set (to a value other
    than the default) and no flag overrode; ``source``: the file, or None.
    """

    config: Any
    flags: frozenset[str]
    from_file: frozenset[str]
    source: Path | None
    command: Command

    def given(self, name: str) -> bool:
        """Whether the command line or the file gave option ``name``."""
        return name in self.flags or name in self.from_file

    @contextmanager
    def blame(self, name: str) -> Iterator[None]:
        """A context in which a ValueError about option ``name`` names the file and the key when
        its value came from the file (a flag's error already names the flag)."""
        try:
            yield
        except ValueError as exc:
            if name not in self.from_file:
                raise
            raise ValueError(f"{self.source}: {self.command.option(name).toml_name}: {exc}") from None


def resolve(args: argparse.Namespace, command: Command) -> Resolved:
    """The run ``args`` ask of ``command``: the ``--config`` file's values (or the defaults)
    overridden by every flag given, each option checked, and every option given that the run
    would ignore refused.

    Raises
    ------
    ValueError
        A file that cannot be read or holds a bad key or value (named with the file and the
        key); values that do not go together; a mode the command cannot run; a flag given (or,
        for a strict option, a key of the file) that does not apply to this run.
    """
    from dataclasses import fields, replace

    config_class = command.config
    source: Path | None = getattr(args, "config", None)
    if config_class is None:
        values = {
            o.name: o.default if getattr(args, o.name) is None else getattr(args, o.name)
            for o in command.options
        }
        base: Any = argparse.Namespace(**values)
        flags = frozenset(o.name for o in command.options if getattr(args, o.name) is not None)
        return Resolved(base, flags, frozenset(), None, command)
    base = config_class() if source is None else load_config(source, config_class)
    changes: dict[str, Any] = {}
    for option in command.options:
        value = getattr(args, option.name)
        if value is None:
            continue
        if option.repeat:
            value = tuple(value)
        elif option.kind.merge is not None:
            value = option.kind.merge(value, getattr(base, option.name))
        changes[option.name] = value
    from_file: frozenset[str] = frozenset()
    if source is not None:
        defaults = config_class()
        from_file = frozenset(
            f.name
            for f in fields(config_class)
            if f.name not in changes and getattr(base, f.name) != getattr(defaults, f.name)
        )
    config = replace(base, **changes) if changes else base
    resolved = Resolved(config, frozenset(changes), from_file, source, command)
    _refuse_what_would_be_ignored(resolved)
    return resolved


def _refuse_what_would_be_ignored(resolved: Resolved) -> None:
    """Refuse a mode the command cannot run, and an option given that this run does not use."""
    command, config = resolved.command, resolved.config
    if command.modes is not None and config.mode not in command.modes:
        raise ValueError(
            f"{command.name} runs --mode {or_join(command.modes)}, not --mode {config.mode}"
            + (
                "; simulate, sweep and provision run a disaggregated cluster"
                if config.mode == "disaggregated"
                else ""
            )
        )
    for option in command.options:
        if option.applies is None:
            continue
        other, values = option.applies
        current = getattr(config, other)
        if current in values:
            continue
        if option.name in resolved.flags or (option.strict and option.name in resolved.from_file):
            if option.refusal is not None:
                raise ValueError(option.refusal)
            flag = "--" + other.replace("_", "-")
            raise ValueError(
                f"{option.named(getattr(config, option.name))} applies to {flag} {or_join(values)} only; "
                f"this run is {flag} {current}, where it would be ignored"
            )


# ---------------------------------------------------------------- what the options do
def prepare_options(config: Any) -> Any:
    """The load's workload options as :class:`llmsched.workloads.PrepareOptions`.

    Raises
    ------
    ValueError
        Options that do not go together (``replace_arrivals`` without ``arrivals``).
    """
    from llmsched.workloads import ArrivalProcess, PrepareOptions

    return PrepareOptions(
        rate_scale=config.rate_scale,
        max_prompt=config.max_prompt,
        max_output=config.max_output,
        arrivals=None if config.arrivals is None else ArrivalProcess.parse(config.arrivals),
        replace_arrivals=config.replace_arrivals,
        seed=config.seed,
    )


class LoadSettings:
    """What a config class of a command that runs a load offers beside its fields."""

    def prepare_options(self) -> Any:
        """The workload options as :class:`llmsched.workloads.PrepareOptions`."""
        return prepare_options(self)

    def check_together(self) -> None:
        self.prepare_options()  # replace_arrivals needs arrivals


def load_config_class(name: str, options: Sequence[Option], module: str, doc: str) -> Any:
    """:func:`~llmsched.cli.config.config_class` of a command that runs a load: a config with
    the :class:`LoadSettings` methods, documented by ``doc`` and then the errors every such
    config raises."""
    raises = """

    Raises
    ------
    TypeError, ValueError
        A field of the wrong type or out of range (the message names it), or arrivals to
        replace without arrivals.
    """
    return config_class(name, options, module, doc + raises, bases=(LoadSettings,))


def refuse_unused_predictor(predictor: str | None, request_policy: str, policy: Any = None) -> None:
    """Refuse a predictor the request policy would not use: one that plans with the true
    output lengths (``policy``: the policy made with its parameters; default: by its name)."""
    if predictor is None or predictor == "oracle":
        return
    if policy is None:
        from llmsched.online import make_request_policy

        policy = make_request_policy(request_policy)
    if getattr(policy, "sizes", None) == "oracle":
        base = request_policy.removesuffix("-oracle")
        hint = f"; choose {base!r} to plan with the predictions" if base != request_policy else ""
        raise ValueError(
            f"request policy {request_policy!r} plans with the true output lengths, so --predictor "
            f"{predictor} would go unused{hint}"
        )


def with_predictor(workload: Any, predictor: str | None, seed: int) -> Any:
    """``workload`` with ``predictor``'s cross-fitted predictions attached (unchanged for None)."""
    if predictor is None:
        return workload
    from llmsched.online import cross_fit, with_predictions

    try:
        predicted = cross_fit(predictor, workload, seed=seed)
    except ValueError as exc:
        raise ValueError(f"--predictor {predictor}: cannot cross-fit on this workload ({exc})") from None
    return with_predictions(workload, predicted)


def load_inputs(resolved: Resolved) -> tuple[Any, Any, Any]:
    """The load's cost model, its prepared workload (with the predictor's predictions) and the
    preparation's report; a spec from the config file that cannot be read names its key."""
    from llmsched.cli.config import cost_model

    config = resolved.config
    if getattr(config, "memory", None) == "none" and resolved.given("block_size"):
        raise ValueError(
            "--block-size applies only with --memory (the KV-cache's blocks): it would be ignored"
        )
    with resolved.blame("cost"):
        cost = parse_cost(config.cost) if isinstance(config.cost, str) else cost_model(config.cost)
    with resolved.blame("workload"):
        workload = parse_workload(config.workload, config.seed, config.requests, config.columns)
    workload, preparation = config.prepare_options().apply(workload)
    return cost, with_predictor(workload, config.predictor, config.seed), preparation


def describe_preparation(report: Any) -> str:
    """A text report's line on what --rate-scale, --arrivals and the clipping flags did."""
    options = report.options
    parts = []
    if options.arrivals is not None:
        parts.append(f"arrivals {options.arrivals} (seed {options.seed})")
    if options.rate_scale != 1.0:
        parts.append(f"replayed at {options.rate_scale:g}x its rate")
    if options.max_prompt is not None:
        parts.append(f"{report.prompts_clipped} prompts clipped to {options.max_prompt} tokens")
    if options.max_output is not None:
        parts.append(
            f"{report.outputs_clipped} outputs and {report.predictions_clipped} predictions clipped to "
            f"{options.max_output} tokens"
        )
    return ", ".join(parts)


def check_output_file(path: Path | str | None, option: str, example: str = "out.json") -> None:
    """Refuse an output file that cannot be written, before the work that fills it.

    The file is opened for appending (and removed again if it was not there), so that any
    reason the system has to refuse it (a missing or read-only folder, a name too long) shows
    now rather than after the work. ``option`` names the flag (or key) in the message.
    """
    if path is None:
        return
    path = Path(path)
    shown = f"{option} {str(path)!r}"
    try:
        if path.is_dir():
            raise ValueError(f"{shown} is a folder; give a file such as {example}")
        folder = path.parent
        if not folder.exists():
            raise ValueError(f"{shown}: folder {str(folder)!r} does not exist")
        if not folder.is_dir():
            raise ValueError(f"{shown}: {str(folder)!r} is a file, not a folder")
        existed = path.exists()
        with path.open("ab"):
            pass
        if not existed:
            path.unlink()
    except OSError as exc:
        raise ValueError(f"{shown}: cannot write the file ({exc.strerror or exc})") from None


def check_plot_file(path: Path | str | None) -> None:
    """Refuse a --plot file that cannot be written, or not as an image, before the work whose
    figure it is."""
    if path is None:
        return
    from matplotlib.backend_bases import FigureCanvasBase

    path = Path(path)
    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = path.suffix.lower().lstrip(".")
    if suffix and suffix not in formats:
        raise ValueError(
            f"--plot {str(path)!r}: unknown image format {suffix!r}; use one of {sorted(formats)}"
        )
    check_output_file(path, "--plot", "gantt.png")


def check_outputs(resolved: Resolved) -> None:
    """Refuse the run's output files (``--plot`` and those of ``TRACES``) that cannot be
    written, before any work; one set in the config file is named by its file and key."""
    config, options = resolved.config, {o.name for o in resolved.command.options}
    if "plot" in options:
        with resolved.blame("plot"):
            check_plot_file(config.plot)
    for option in TRACES:
        if option.name not in options or getattr(config, option.name) is None:
            continue
        name = option.toml_name if option.name in resolved.from_file else option.flag
        try:
            check_output_file(getattr(config, option.name), name, _EXAMPLES[option.name])
        except ValueError as exc:
            if option.name not in resolved.from_file:
                raise
            raise ValueError(f"{resolved.source}: {exc}") from None


def write_traces(schedule: Any, config: Any) -> dict[str, str]:
    """Write the outputs of ``TRACES`` that ``config`` asks for, through the schedule's own
    exports (every kind of schedule offers them); the paths written, by option."""
    written = {}
    if config.trace:
        schedule.write_chrome_trace(config.trace)
        written["trace"] = config.trace
    if config.requests_csv:
        schedule.write_requests_csv(
            config.requests_csv, slo_ttft=config.slo_ttft, slo_tbt=config.slo_tbt_mean
        )
        written["requests_csv"] = config.requests_csv
    if config.stages_csv:
        schedule.write_stages_csv(config.stages_csv)
        written["stages_csv"] = config.stages_csv
    return written


def print_traces(written: dict[str, str]) -> None:
    """The text report's lines on the files :func:`write_traces` wrote."""
    if "trace" in written:
        print(f"  Chrome trace written to {written['trace']} (open it in ui.perfetto.dev)")
    if "requests_csv" in written:
        print(f"  per-request metrics written to {written['requests_csv']}")
    if "stages_csv" in written:
        print(f"  per-stage table written to {written['stages_csv']}")


def progress(config: Any) -> bool:
    """Whether to show a progress bar: not with --no-progress, and only on a terminal, so that
    a log or a pipe does not fill with the bar's redrawn lines."""
    return bool(config.progress) and sys.stderr is not None and sys.stderr.isatty()


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=float))


def with_timings(report: dict[str, Any], config: Any, **seconds: float) -> dict[str, Any]:
    """``report`` with ``timings`` (the given seconds) when --timings asked for them."""
    if getattr(config, "timings", False):
        return {**report, "timings": {**report.get("timings", {}), **seconds}}
    return report


def _dask_workers(jobs: int) -> int:
    """Local Dask workers for a joblib worker count (-1: every core)."""
    from joblib import cpu_count

    return jobs if jobs > 0 else max(1, cpu_count() + 1 + jobs)


def enter_backend(config: Any, stack: Any) -> None:
    """Start or join what ``--backend`` names for joblib: a Dask cluster (the one at
    ``--dask-address``, else a local one of ``--jobs`` workers) or a Ray runtime (the one
    at ``--ray-address``, else a local one); loky needs nothing."""
    if config.dask_address is not None and config.backend != "dask":
        raise ValueError("--dask-address needs --backend dask")
    if config.ray_address is not None and config.backend != "ray":
        raise ValueError("--ray-address needs --backend ray")
    if config.backend == "dask":
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise ValueError(
                "--backend dask needs dask's distributed scheduler: pip install 'llmsched[dask]'"
            ) from None
        if config.dask_address is not None:
            stack.enter_context(Client(config.dask_address))
        else:
            cluster = LocalCluster(
                n_workers=_dask_workers(config.jobs),
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
            )
            stack.enter_context(cluster)
            stack.enter_context(Client(cluster))
    elif config.backend == "ray":
        try:
            import ray
            from ray.util.joblib import register_ray
        except ImportError:
            raise ValueError("--backend ray needs Ray: pip install 'llmsched[ray]'") from None
        if config.ray_address is not None:
            ray.init(address=config.ray_address, log_to_driver=False)
        else:
            ray.init(num_cpus=_dask_workers(config.jobs), include_dashboard=False, log_to_driver=False)
        stack.callback(ray.shutdown)
        register_ray()


def scaled_cost(cost: Any, speed: float) -> Any:
    """``cost`` on a machine ``speed`` times as fast (every time divided by it)."""
    from dataclasses import fields, replace

    from llmsched.core.cost import ContextCostModel, LinearCostModel
    from llmsched.core.table import TableCostModel

    if speed == 1:
        return cost
    if isinstance(cost, TableCostModel):
        return cost.scaled(speed)
    if not isinstance(cost, (LinearCostModel, ContextCostModel)):
        raise ValueError(
            "a kind's SPEED needs a linear, context or table cost model (--cost linear:..., context:..., "
            "preset:... or table:...)"
        )
    changes: dict[str, Any] = {
        f.name: getattr(cost, f.name) / speed
        for f in fields(cost)
        if f.name not in ("prefill_capacity", "decode_by_batch")
    }
    table = getattr(cost, "decode_by_batch", None)
    if table is not None:
        changes["decode_by_batch"] = tuple(t / speed for t in table)
    return replace(cost, **changes)


def backoff(resolved: Resolved) -> Any:
    """The fleet's :class:`~llmsched.fleet.engine.Backoff`, or None without ``--backoff``.

    Raises
    ------
    ValueError
        A delay or a threshold given without ``--backoff``.
    """
    from llmsched.fleet.engine import Backoff

    config = resolved.config
    if not config.backoff:
        if resolved.given("backoff_delay") or resolved.given("backoff_threshold"):
            raise ValueError("--backoff-delay and --backoff-threshold need --backoff")
        return None
    return Backoff(delay=config.backoff_delay, threshold=config.backoff_threshold)


def admission(resolved: Resolved) -> Any:
    """The fleet's :class:`~llmsched.fleet.admission.TTFTAdmission`, or None when neither
    ``--admission-ttft`` nor ``--admission-ttft-per-token`` is given.

    Raises
    ------
    ValueError
        ``--admission-margin`` without a target, or a target of 0 seconds and 0 a token.
    """
    from llmsched.fleet.admission import TTFTAdmission

    config = resolved.config
    if config.admission_ttft is None and config.admission_ttft_per_token is None:
        if resolved.given("admission_margin"):
            raise ValueError("--admission-margin needs --admission-ttft or --admission-ttft-per-token")
        return None
    return TTFTAdmission(
        config.admission_ttft or 0.0, config.admission_ttft_per_token or 0.0, config.admission_margin
    )


def _preset_of(config: Any) -> Any:
    """The measured machine ``config.cost`` names (``preset:NAME``), or None."""
    from llmsched.core.hardware import preset

    spec = config.cost if isinstance(config.cost, str) else ""
    kind, _, name = spec.partition(":")
    name = name.strip()  # as parse_cost reads a spec
    return preset(name) if kind == "preset" and name else None


def engine_price(config: Any) -> float:
    """An engine's price an hour when no option gives one: the ``--cost`` preset's (relative
    to a DGX-A100, Splitwise's Table V), else 1."""
    machine = _preset_of(config)
    return float(machine.price) if machine is not None else 1.0


def make_cluster(config: Any, cost: Any, prompt_machines: int, token_machines: int) -> Any:
    """The disaggregated cluster the options of :data:`CLUSTER` describe, of ``cost`` machines
    with ``config.clients`` clients on each token machine."""
    from llmsched.engines.disaggregation.cluster import DisaggregatedCluster

    memory = make_memory(config) if hasattr(config, "memory") else None
    if memory is None and config.max_output_tokens is not None:
        raise ValueError(
            "--max-output-tokens applies only with --memory (it is what a token machine reserves for "
            "a request's output); it would be ignored"
        )
    # The model's keys and values: given, or the --cost preset's model's, or LLaMA-65B's.
    kv_bytes, layers = config.kv_bytes_per_token, config.layers
    machine = _preset_of(config)
    if kv_bytes is None:
        kv_bytes = machine.kv_bytes_per_token if machine is not None else 2_621_440
    if layers is None:
        layers = machine.layers if machine is not None else 80
    return DisaggregatedCluster(
        prompt_machines,
        token_machines,
        cost,
        cost,
        config.clients,
        kv_bytes,
        config.kv_bandwidth,
        layers,
        config.kv_overlap,
        config.mixed_pool,
        config.prompt_batch_tokens,
        config.lend_busy_above,
        memory,
        config.max_output_tokens,
    )


def describe_cost(cost: Any) -> str:
    """A ``cost`` setting as a report names it: its spec, or the kind of its table."""
    return cost if isinstance(cost, str) else f"{cost['kind']} (a [cost] table)"
