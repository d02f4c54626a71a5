"""Run configurations: a command's options as one TOML file, read with ``--config``.

``llmsched simulate``, ``sweep``, ``fleet`` and ``provision`` read their options from a TOML
file given with ``--config FILE``; a flag given on the command line overrides the file's value.
The keys come from the same declaration as the flags (:mod:`llmsched.cli.options` and each
command's module), so every key means what its flag means and a key left out takes the flag's
default: the workload's options go in ``[workload]`` (``--max-prompt`` is
``workload.max_prompt``, ``--workload`` is ``workload.spec``), the latency targets in ``[slo]``
(``--slo-ttft`` is ``slo.ttft``, ``--slo-tbt-mean`` is ``slo.tbt_mean``), what the command writes
in ``[output]`` (``--json`` is ``output.json``, ``--trace`` is ``output.trace``), and every other
option is a top-level key named like its flag (``--kv-bandwidth`` is ``kv_bandwidth``, a
repeated ``--kind`` an array ``kind = ["a:64:1", "b:32:0.6"]``). Relative paths are relative to
the current folder, as on the command line. ``llmsched COMMAND --help`` lists a command's options.

A full example for ``simulate``: every key it takes, though not all apply at once (a key that
does not apply to the mode, or the memory, is refused where it would be ignored;
``examples/run.toml`` is one that runs)::

    clients = 200                  # --clients
    mode = "competition"           # --mode: competition | fusion | disaggregated | vllm | sarathi |
                                   #   orca | padded
    token_budget = 512             # --token-budget (fusion: tokens per iteration)
    max_num_batched_tokens = 2048  # --max-num-batched-tokens (vllm, sarathi, orca, padded)
    chunked_prefill = false        # --chunked-prefill (vllm)
    memory = "none"                # --memory: none | preset | BLOCKS (token machines' when disaggregated)
    block_size = 16                # --block-size (tokens per KV-cache block; with a memory only)
    prompt_machines = 1            # --prompt-machines (disaggregated; clients is per token machine)
    token_machines = 1             # --token-machines
    kv_bandwidth = 25.0            # --kv-bandwidth (GB/s of the KV-cache link)
    kv_bytes_per_token = 2621440   # --kv-bytes-per-token (left out: a preset's model's, else LLaMA-65B's)
    layers = 80                    # --layers (the per-layer overlap; left out: as kv_bytes_per_token)
    kv_overlap = true              # --kv-overlap / --no-kv-overlap
    mixed_pool = false             # --mixed-pool: lend idle token machines to the prompt pool
    prompt_batch_tokens = 2048     # --prompt-batch-tokens (left out: the prefill capacity)
    lend_busy_above = 8192         # --lend-busy-above (needs mixed_pool = true; left out: idle only)
    max_output_tokens = 512        # --max-output-tokens (disaggregated with memory: reserved a request)
    predictor = "mico"             # --predictor (left out: none)
    clairvoyant = false            # --clairvoyant

    [workload]                     # or: workload = "gsm8k" (the spec, default options)
    spec = "gsm8k"                 # --workload: gsm8k | exegpt:S | csv:PATH | azure:PATH | ...
    seed = 0                       # --seed (workloads, arrivals, the predictor's folds)
    requests = 1000                # --requests (generated ExeGPT workloads)
    columns = { prompt_tokens = "input_len", output_tokens = "output_len" }  # --columns (csv:PATH)
    rate_scale = 1.0               # --rate-scale
    max_prompt = 5000              # --max-prompt (left out: no clipping)
    max_output = 512               # --max-output
    arrivals = "poisson:2"         # --arrivals (left out: the workload's own)
    replace_arrivals = false       # --replace-arrivals

    [cost]                         # or a --cost spec: "paper" | "linear:..." | "context:..." | "levels:..."
    kind = "linear"                # a_p + b_p * tokens; a_d + b_d * active clients
    prefill_base = 0.025           # seconds
    prefill_per_token = 0.00013    # seconds per prompt token
    decode_base = 0.029            # seconds
    decode_per_client = 0.00021    # seconds per active client
    prefill_capacity = 5000        # tokens per prefill stage (default 5000)
    # kind = "levels": levels = [[1000, 0.155], [5000, 0.675]] (tokens, seconds) and
    #                  decode_token_time = 0.071 (the MIP's semantics)
    # kind = "paper":  no other keys (LinearCostModel.paper())
    # kind = "context": the linear keys plus prefill_per_square (seconds per squared prompt
    #                  token) and decode_per_context (seconds per context token read);
    #                  optionally decode_by_batch = [0.0037, 0.0041, ...] (seconds of a decode
    #                  iteration at no context for 1, 2, ... active clients)

    [request_policy]               # or: request_policy = "hybrid"
    name = "hybrid"                # --request-policy
    time_limit = 10.0              # any other key is a parameter of the policy

    [iteration_policy]             # or: iteration_policy = "lagrangian"
    name = "lagrangian"            # --iteration-policy
    ttft_weight = 1.0

    [slo]
    ttft = 5.0                     # --slo-ttft (seconds; left out: no target)
    tbt_mean = 0.2                 # --slo-tbt-mean (each request's mean time between tokens)

    [output]
    plot = "gantt.png"             # --plot
    trace = "trace.json"           # --trace (Chrome trace for ui.perfetto.dev)
    requests_csv = "requests.csv"  # --requests-csv
    stages_csv = "stages.csv"      # --stages-csv
    json = true                    # --json

A policy's parameters are those of :func:`llmsched.online.make_request_policy` and
:func:`~llmsched.online.make_iteration_policy` for its name. A ``--request-policy`` (or
``--iteration-policy``) flag replaces the file's policy; the file's parameters stay only when
the flag names the same policy. The ``slo`` iteration policy serves ``slo.ttft`` unless it is
given a ``slo_ttft`` of its own, as on the command line. TOML has no null: a key whose value
is "none" is left out. ``fleet`` and ``provision`` name their engines' policies alone
(``request_policy = "fcfs"``), and ``sweep`` its policy pairs as ``policy = ["fcfs/prefill-first"]``.

Unknown keys, values of the wrong type and values out of range are a ``ValueError`` that
names the file and the key, raised when the file is read (before any work). The cost model's
and the workload's spec strings are read by the command's parsers
(:func:`llmsched.cli.options.parse_cost`, :func:`~llmsched.cli.options.parse_workload`), also
before any work.

``simulate --json`` echoes the resolved config (file, flags and defaults together) as its
``config`` object, in this layout; :func:`dump_toml` writes it back as a file that runs the
same experiment. Each command's config class (``RunConfig`` for ``simulate``,
:class:`llmsched.cli.sweep.SweepConfig`, :class:`llmsched.cli.fleet.FleetConfig`,
:class:`llmsched.cli.provision.ProvisionConfig`) is a frozen dataclass made by
:func:`config_class` from the command's declared options; it checks every field when it is made.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from llmsched.core.checks import path_arg, positive_int, real, text
from llmsched.core.cost import ContextCostModel

if TYPE_CHECKING:
    from llmsched.cli.options import Option

__all__ = [
    "MAX_CLIENTS",
    "CommandConfig",
    "PolicyConfig",
    "RunConfig",  # noqa: F822 (simulate's config class, given by __getattr__)
    "check_cost",
    "check_policy",
    "config_class",
    "config_from_dict",
    "cost_model",
    "dump_toml",
    "load_config",
]

# The most clients a run may have (the command's --clients limit).
MAX_CLIENTS = 1_000_000


def nonempty_text(name: str, value: Any) -> str:
    """``value`` if it is a str that is not empty."""
    text(name, value)
    if not value:
        raise ValueError(f"{name} must not be empty")
    return str(value)


def _param_value(name: str, value: Any) -> Any:
    """A policy parameter: a str, int, float, bool, or an array of them (TOML's simple values)."""
    if isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (list, tuple)):
        return [_param_value(f"{name}[{i}]", item) for i, item in enumerate(value)]
    raise TypeError(
        f"{name} must be a string, number, boolean or an array of them, got {type(value).__name__} {value!r}"
    )


@dataclass(frozen=True)
class PolicyConfig:
    """A policy by its registered name and the keyword parameters its factory takes.

    ``params`` is read-only (a mapping proxy); its values are TOML's simple values.
    """

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        nonempty_text("name", self.name)
        if not isinstance(self.params, Mapping):
            raise TypeError(f"params must be a mapping of parameter names to values, got {self.params!r}")
        params = {}
        for key, value in self.params.items():
            nonempty_text("a parameter name", key)
            if key == "name":
                raise ValueError("params may not hold 'name' (the policy's name is its own field)")
            params[key] = _param_value(key, value)
        object.__setattr__(self, "params", MappingProxyType(params))

    def as_dict(self) -> dict[str, Any]:
        """``{"name": ..., **params}``: the TOML table of the policy."""
        return {"name": self.name, **self.params}


_LINEAR_KEYS = ("prefill_base", "prefill_per_token", "decode_base", "decode_per_client")
_CONTEXT_KEYS = ContextCostModel.coefficients()
_COST_KEYS = {
    "paper": ("kind",),
    "linear": ("kind", *_LINEAR_KEYS, "prefill_capacity"),
    "context": ("kind", *_CONTEXT_KEYS, "prefill_capacity", "decode_by_batch"),
    "levels": ("kind", "levels", "decode_token_time"),
}


def _cost_table(name: str, table: Any) -> dict[str, Any]:
    """A ``[cost]`` table checked key by key and completed (``prefill_capacity``)."""
    if not isinstance(table, Mapping):
        raise TypeError(f"{name} must be a spec string or a table with a kind, got {table!r}")
    kind = table.get("kind")
    if kind not in _COST_KEYS:
        raise ValueError(f"{name}.kind must be one of {sorted(_COST_KEYS)}, got {kind!r}")
    _known_keys(name, table, _COST_KEYS[kind])
    if kind == "paper":
        return {"kind": "paper"}
    if kind in ("linear", "context"):
        out: dict[str, Any] = {"kind": kind}
        keys = _LINEAR_KEYS if kind == "linear" else _CONTEXT_KEYS
        for key in keys:
            if key not in table:
                raise ValueError(f"{name}.{key} is missing: a {kind} cost model needs {', '.join(keys)}")
            out[key] = real(f"{name}.{key}", table[key], low=0.0)
        out["prefill_capacity"] = positive_int(
            f"{name}.prefill_capacity", table.get("prefill_capacity", 5000)
        )
        if "decode_by_batch" in table:
            times = table["decode_by_batch"]
            if not isinstance(times, (list, tuple)) or not times:
                raise TypeError(
                    f"{name}.decode_by_batch must be a non-empty array of seconds (one per batch size), "
                    f"got {times!r}"
                )
            out["decode_by_batch"] = tuple(
                real(f"{name}.decode_by_batch[{i}]", t, low=0.0, low_open=True) for i, t in enumerate(times)
            )
        return out
    for key in ("levels", "decode_token_time"):
        if key not in table:
            raise ValueError(
                f"{name}.{key} is missing: a levels cost model needs levels and decode_token_time"
            )
    levels = table["levels"]
    if not isinstance(levels, (list, tuple)) or not levels:
        raise TypeError(f"{name}.levels must be a non-empty array of [tokens, seconds] pairs, got {levels!r}")
    pairs = []
    for i, level in enumerate(levels):
        if not isinstance(level, (list, tuple)) or len(level) != 2:
            raise TypeError(f"{name}.levels[{i}] must be a [tokens, seconds] pair, got {level!r}")
        pairs.append(
            [
                positive_int(f"{name}.levels[{i}] tokens", level[0]),
                real(f"{name}.levels[{i}] seconds", level[1], low=0.0, low_open=True),
            ]
        )
    seconds = real(f"{name}.decode_token_time", table["decode_token_time"], low=0.0, low_open=True)
    return {"kind": "levels", "levels": pairs, "decode_token_time": seconds}


def cost_model(table: Mapping[str, Any]) -> Any:
    """The cost model a ``[cost]`` table describes (see the module docstring).

    Raises
    ------
    TypeError, ValueError
        A table without a known ``kind``, with keys its kind does not take, with a missing
        or bad value, or with values the cost model refuses; the message names the key.
    """
    from llmsched.core.cost import ContextCostModel, LevelCostModel, LinearCostModel

    checked = _cost_table("cost", table)
    kind = checked.pop("kind")
    try:
        if kind == "paper":
            return LinearCostModel.paper()
        if kind == "linear":
            return LinearCostModel(**checked)
        if kind == "context":
            return ContextCostModel(**checked)
        return LevelCostModel([tuple(level) for level in checked["levels"]], checked["decode_token_time"])
    except (TypeError, ValueError) as exc:
        raise ValueError(f"cost: {exc}") from None


def check_cost(name: str, value: Any) -> str | Mapping[str, Any]:
    """A ``cost`` value: a ``--cost`` spec string (read by :func:`llmsched.cli.options.parse_cost`
    when the run starts) or a ``[cost]`` table, checked now and read-only."""
    if isinstance(value, str):
        return nonempty_text(name, value)
    table = _cost_table(name, value)
    cost_model(table)  # the model's own checks (a prefill stage must take some time, ...)
    if "levels" in table:
        table["levels"] = tuple(tuple(level) for level in table["levels"])
    return MappingProxyType(table)


def cost_as_toml(value: Any) -> Any:
    """A ``cost`` value as TOML holds it: a spec string, or the table with its levels as arrays."""
    if isinstance(value, Mapping):
        return {k: [list(level) for level in v] if k == "levels" else v for k, v in value.items()}
    return value


def check_policy(kind: str) -> Callable[[str, Any], PolicyConfig]:
    """The check of a ``request_policy`` (``kind="request"``) or ``iteration_policy`` value: a
    registered name, or a table with its ``name`` and the factory's parameters."""

    def check(name: str, value: Any) -> PolicyConfig:
        if isinstance(value, PolicyConfig):
            policy = value
        elif isinstance(value, str):
            policy = PolicyConfig(value)
        elif isinstance(value, Mapping):
            if "name" not in value:
                raise ValueError(f"{name}.name is missing: the table names the {kind} policy")
            policy = PolicyConfig(
                nonempty_text(f"{name}.name", value["name"]),
                {k: v for k, v in value.items() if k != "name"},
            )
        else:
            raise TypeError(f"{name} must be a policy name or a table with a name, got {value!r}")
        try:
            make_policy(kind, policy)  # an unknown name or parameter, a bad value
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{name}: {exc}") from None
        return policy

    return check


def make_policy(kind: str, policy: PolicyConfig, **extra: Any) -> Any:
    """A fresh ``kind`` ("request" or "iteration") policy: ``policy``'s name and parameters."""
    from llmsched.online import make_iteration_policy, make_request_policy

    make = make_request_policy if kind == "request" else make_iteration_policy
    return make(policy.name, **{**policy.params, **extra})


# ---------------------------------------------------------------- config classes
class CommandConfig:
    """What every command's config class is (see :func:`config_class`): one frozen field per
    declared option, each checked when the config is made, and the TOML layout of the fields.

    ``OPTIONS`` are the command's declared options, in order.
    """

    OPTIONS: tuple[Option, ...] = ()

    if TYPE_CHECKING:  # the fields are the declared options, made by config_class

        def __init__(self, **values: Any) -> None: ...

        def __getattr__(self, name: str) -> Any: ...

    def __post_init__(self) -> None:
        for option in self.OPTIONS:
            object.__setattr__(self, option.name, option.check(option.name, getattr(self, option.name)))
        self.check_together()

    def check_together(self) -> None:
        """Checks of fields that go together (a command's config class may add them)."""

    def as_dict(self) -> dict[str, Any]:
        """The config in the TOML layout (None for a value left unset); :func:`dump_toml`
        writes it, and :func:`config_from_dict` reads it back to an equal config."""
        out: dict[str, Any] = {}
        for option in self.OPTIONS:
            value = option.as_toml(getattr(self, option.name))
            if option.section is None:
                out[option.toml_key] = value
            else:
                out.setdefault(option.section, {})[option.toml_key] = value
        return out


def config_class(
    name: str,
    options: Sequence[Option],
    module: str,
    doc: str,
    bases: tuple[type, ...] = (),
    methods: Mapping[str, Callable[..., Any]] | None = None,
) -> Any:
    """A frozen dataclass named ``name`` (of module ``module``) with one field per option of
    ``options``: its default the option's, checked by the option when a config is made.

    ``bases`` add methods (the load's workload options, say) and ``methods`` more, such as a
    ``check_together`` of fields that go together.

    Raises
    ------
    ValueError
        Two options of one name, or two of one TOML key in one table.
    """
    names = [option.name for option in options]
    keys = [option.toml_name for option in options]
    for what, items in (("name", names), ("TOML key", keys)):
        twice = sorted({item for item in items if items.count(item) > 1})
        if twice:
            raise ValueError(f"{name}: options declared twice by {what}: {twice}")
    fields = [(option.name, Any, dataclasses.field(default=option.default)) for option in options]
    namespace: dict[str, Any] = {"OPTIONS": tuple(options), "__doc__": doc, "__module__": module}
    namespace.update(methods or {})
    return dataclasses.make_dataclass(
        name, fields, bases=(*bases, CommandConfig), frozen=True, namespace=namespace
    )


def _known_keys(where: str, table: Mapping[str, Any], allowed: Any) -> None:
    for key in table:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), list(allowed), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            name = f"{where}.{key}" if where else str(key)
            raise ValueError(f"unknown key {name!r}{hint}; expected one of {sorted(allowed)}")


def config_from_dict(data: Mapping[str, Any], source: str = "config", cls: Any = None) -> Any:
    """A config of class ``cls`` (default ``RunConfig``, simulate's)
    from a dict in the TOML layout (what ``tomllib`` reads; see the module docstring).

    Keys left out take their defaults. ``source`` names the origin in messages (the file).

    Raises
    ------
    ValueError
        An unknown key, a value of the wrong type or out of range, or values that do not go
        together; the message starts with ``source`` and names the key.
    """
    if cls is None:
        from llmsched.cli.simulate import RunConfig as cls
    options: tuple[Option, ...] = cls.OPTIONS
    try:
        if not isinstance(data, Mapping):
            raise TypeError(f"a config must be a table of keys, got {type(data).__name__}")
        sections = list(dict.fromkeys(o.section for o in options if o.section is not None))
        _known_keys("", data, {o.toml_key for o in options if o.section is None} | set(sections))
        tables: dict[str | None, Mapping[str, Any]] = {None: data}
        for section in sections:
            table = data.get(section, {})
            shorthand = [o.toml_key for o in options if o.section == section and o.shorthand]
            if shorthand and isinstance(table, str):
                table = {shorthand[0]: table}  # workload = "SPEC": the spec with default options
            if not isinstance(table, Mapping):
                raise TypeError(f"{section} must be a table, got {type(table).__name__} {table!r}")
            _known_keys(section, table, [o.toml_key for o in options if o.section == section])
            tables[section] = table
        values = {
            o.name: o.check(o.toml_name, tables[o.section][o.toml_key])
            for o in options
            if o.toml_key in tables[o.section]
        }
        return cls(**values)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{source}: {exc}") from None


def load_config(path: str | os.PathLike[str], cls: Any = None) -> Any:
    """The config of class ``cls`` (default ``RunConfig``) a TOML file holds.

    Raises
    ------
    ValueError
        A file that cannot be read or is not TOML, or a config that :func:`config_from_dict`
        refuses; the message names the file (and the key).
    """
    name = os.fspath(path_arg("config", path))
    try:
        with open(name, "rb") as file:
            data = tomllib.load(file)
    except FileNotFoundError:
        raise ValueError(f"config {name!r} does not exist") from None
    except IsADirectoryError:
        raise ValueError(f"config {name!r} is a folder; give a TOML file such as run.toml") from None
    except OSError as exc:
        raise ValueError(f"config {name!r}: cannot read ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"config {name!r} is not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise ValueError(f"config {name!r} is not UTF-8 text") from None
    return config_from_dict(data, source=name, cls=cls)


def __getattr__(name: str) -> Any:
    # RunConfig is simulate's config class, declared with the simulate command
    # (llmsched.cli.simulate); it has always been importable from here.
    if name == "RunConfig":
        from llmsched.cli.simulate import RunConfig

        return RunConfig
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---------------------------------------------------------------- TOML writer
_BARE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _toml_string(value: str) -> str:
    out = []
    for char in value:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04X}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _toml_key(key: Any) -> str:
    if not isinstance(key, str):
        raise TypeError(f"a TOML key must be a str, got {type(key).__name__} {key!r}")
    return key if key and set(key) <= _BARE else _toml_string(key)


def _toml_value(value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)  # the shortest text that reads back as the same float
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(item, f"{where}[{i}]") for i, item in enumerate(value)) + "]"
    if isinstance(value, Mapping):
        items = (
            f"{_toml_key(k)} = {_toml_value(v, f'{where}.{k}')}" for k, v in value.items() if v is not None
        )
        return "{" + ", ".join(items) + "}"
    raise TypeError(f"{where}: cannot write {type(value).__name__} {value!r} as TOML")


def dump_toml(config: Any) -> str:
    """TOML text of a config (any command's config, or a dict such as ``--json``'s ``config``).

    A small writer for the values configs hold: tables of tables, strings, integers, floats
    (written so that they read back bit for bit), booleans and arrays of them. None is "not
    set", which TOML cannot say: such keys are left out. ``tomllib.loads`` of the text gives
    the mapping back, less its None values.

    Raises
    ------
    TypeError
        A key that is not a str, or a value of another type.
    """
    data = config.as_dict() if isinstance(config, CommandConfig) else config
    if not isinstance(data, Mapping):
        raise TypeError(f"config must be a command's config or a mapping, got {type(data).__name__}")
    lines: list[str] = []

    def table(mapping: Mapping[str, Any], prefix: str) -> None:
        scalars = [(k, v) for k, v in mapping.items() if v is not None and not isinstance(v, Mapping)]
        tables = [(k, v) for k, v in mapping.items() if isinstance(v, Mapping)]
        if prefix:
            if lines:
                lines.append("")
            lines.append(f"[{prefix}]")
        for key, value in scalars:
            lines.append(f"{_toml_key(key)} = {_toml_value(value, f'{prefix}.{key}' if prefix else key)}")
        for key, value in tables:
            table(value, f"{prefix}.{_toml_key(key)}" if prefix else _toml_key(key))

    table(data, "")
    return "\n".join(lines) + "\n"
