"""Experiment configs: everything ``llmsched simulate`` can be told, in one TOML file.

``llmsched simulate --config run.toml`` runs what the file says; a flag given on the command
line overrides the file's value. Every key means what its flag means (``--max-prompt`` is
``workload.max_prompt``), and a key left out takes the flag's default. Relative paths are
relative to the current folder, as on the command line. A full example (``examples/run.toml``
is one that runs)::

    clients = 200                  # --clients
    mode = "competition"           # --mode: competition | fusion | disaggregated
    token_budget = 512             # --token-budget (fusion: tokens per iteration)
    prompt_machines = 1            # --prompt-machines (disaggregated; clients is per token machine)
    token_machines = 1             # --token-machines
    kv_bandwidth = 25.0            # --kv-bandwidth (GB/s of the KV-cache link)
    kv_bytes_per_token = 2621440   # --kv-bytes-per-token (LLaMA-65B in float16)
    layers = 80                    # --layers (the per-layer overlap of the transfer)
    kv_overlap = true              # --kv-overlap / --no-kv-overlap
    mixed_pool = false             # --mixed-pool: lend idle token machines to the prompt pool
    predictor = "mico"             # --predictor (left out: none)
    clairvoyant = false            # --clairvoyant

    [workload]                     # or: workload = "gsm8k" (the spec, default options)
    spec = "gsm8k"                 # --workload: gsm8k | exegpt:S | csv:PATH | azure:PATH | ...
    seed = 0                       # --seed (workloads, arrivals, the predictor's folds)
    requests = 1000                # --requests (generated ExeGPT workloads)
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
    tbt = 0.2                      # --slo-tbt

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
is "none" is left out.

Unknown keys, values of the wrong type and values out of range are a ``ValueError`` that
names the file and the key, raised when the file is read (before any work). The cost model's
and the workload's spec strings are read by the command's parsers
(:func:`llmsched.cli.parse_cost`, :func:`~llmsched.cli.parse_workload`), also before any work.

``simulate --json`` echoes the resolved config (file, flags and defaults together) as its
``config`` object, in this layout; :func:`dump_toml` writes it back as a file that runs the
same experiment.
"""

from __future__ import annotations

import difflib
import math
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from llmsched.core.checks import MAX_REQUESTS, MAX_TOKENS, flag, path_arg, positive_int, real, seed, text
from llmsched.core.cost import ContextCostModel

__all__ = [
    "MAX_CLIENTS",
    "PolicyConfig",
    "RunConfig",
    "config_from_dict",
    "cost_model",
    "dump_toml",
    "load_config",
]

# The most clients a run may have (the command's --clients limit).
MAX_CLIENTS = 1_000_000
# The most machines of one pool of a disaggregated cluster.
MAX_MACHINES = 10_000


def _text(name: str, value: Any) -> str:
    text(name, value)
    if not value:
        raise ValueError(f"{name} must not be empty")
    return str(value)


def _optional(check: Callable[[str, Any], Any]) -> Callable[[str, Any], Any]:
    return lambda name, value: None if value is None else check(name, value)


def _positive(name: str, value: Any) -> float:
    return real(name, value, low=0.0, low_open=True)


def _tokens(name: str, value: Any) -> int:
    return positive_int(name, value, maximum=MAX_TOKENS)


#: Engine modes ``simulate`` runs: PD competition (a prefill stage pauses decoding), PD
#: fusion (chunked prefill, :mod:`llmsched.engines.fusion.schedule`) and PD disaggregation (Splitwise's prompt
#: and token machines, :mod:`llmsched.engines.disaggregation.schedule`).
MODES = ("competition", "fusion", "disaggregated")


def _mode(name: str, value: Any) -> str:
    _text(name, value)
    if value not in MODES:
        raise ValueError(f"{name} must be one of {list(MODES)}, got {value!r}")
    return str(value)


def _arrivals(name: str, value: Any) -> str:
    from llmsched.workloads import ArrivalProcess

    _text(name, value)
    try:
        return str(ArrivalProcess.parse(value))
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


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
        _text("name", self.name)
        if not isinstance(self.params, Mapping):
            raise TypeError(f"params must be a mapping of parameter names to values, got {self.params!r}")
        params = {}
        for key, value in self.params.items():
            _text("a parameter name", key)
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


def _cost(name: str, value: Any) -> str | Mapping[str, Any]:
    if isinstance(value, str):
        # A --cost spec, read by llmsched.cli.parse_cost when the run starts.
        return _text(name, value)
    table = _cost_table(name, value)
    cost_model(table)  # the model's own checks (a prefill stage must take some time, ...)
    if "levels" in table:
        table["levels"] = tuple(tuple(level) for level in table["levels"])
    return MappingProxyType(table)


def _policy(kind: str) -> Callable[[str, Any], PolicyConfig]:
    def check(name: str, value: Any) -> PolicyConfig:
        if isinstance(value, PolicyConfig):
            policy = value
        elif isinstance(value, str):
            policy = PolicyConfig(value)
        elif isinstance(value, Mapping):
            if "name" not in value:
                raise ValueError(f"{name}.name is missing: the table names the {kind} policy")
            policy = PolicyConfig(
                _text(f"{name}.name", value["name"]), {k: v for k, v in value.items() if k != "name"}
            )
        else:
            raise TypeError(f"{name} must be a policy name or a table with a name, got {value!r}")
        try:
            _make_policy(kind, policy)  # an unknown name or parameter, a bad value
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{name}: {exc}") from None
        return policy

    return check


def _make_policy(kind: str, policy: PolicyConfig, **extra: Any) -> Any:
    from llmsched.online import make_iteration_policy, make_request_policy

    make = make_request_policy if kind == "request" else make_iteration_policy
    return make(policy.name, **{**policy.params, **extra})


def _predictor(name: str, value: Any) -> str:
    from llmsched.online import make_predictor

    make_predictor(_text(name, value))
    return str(value)


# Each field of RunConfig: its place in the TOML layout (section, key) and its check.
_FIELDS: dict[str, tuple[str | None, str, Callable[[str, Any], Any]]] = {
    "workload": ("workload", "spec", _text),
    "seed": ("workload", "seed", seed),
    "requests": ("workload", "requests", lambda n, v: positive_int(n, v, maximum=MAX_REQUESTS)),
    "rate_scale": ("workload", "rate_scale", _positive),
    "max_prompt": ("workload", "max_prompt", _optional(_tokens)),
    "max_output": ("workload", "max_output", _optional(_tokens)),
    "arrivals": ("workload", "arrivals", _optional(_arrivals)),
    "replace_arrivals": ("workload", "replace_arrivals", flag),
    "cost": (None, "cost", _cost),
    "clients": (None, "clients", lambda n, v: positive_int(n, v, maximum=MAX_CLIENTS)),
    "mode": (None, "mode", _mode),
    "token_budget": (None, "token_budget", lambda n, v: positive_int(n, v, maximum=1 << 31)),
    "prompt_machines": (None, "prompt_machines", lambda n, v: positive_int(n, v, maximum=MAX_MACHINES)),
    "token_machines": (None, "token_machines", lambda n, v: positive_int(n, v, maximum=MAX_MACHINES)),
    "kv_bandwidth": (None, "kv_bandwidth", _positive),
    "kv_bytes_per_token": (None, "kv_bytes_per_token", _positive),
    "layers": (None, "layers", lambda n, v: positive_int(n, v, maximum=100_000)),
    "kv_overlap": (None, "kv_overlap", flag),
    "mixed_pool": (None, "mixed_pool", flag),
    "request_policy": (None, "request_policy", _policy("request")),
    "iteration_policy": (None, "iteration_policy", _policy("iteration")),
    "predictor": (None, "predictor", _optional(_predictor)),
    "clairvoyant": (None, "clairvoyant", flag),
    "slo_ttft": ("slo", "ttft", _optional(_positive)),
    "slo_tbt": ("slo", "tbt", _optional(_positive)),
    "plot": ("output", "plot", _optional(_text)),
    "trace": ("output", "trace", _optional(_text)),
    "requests_csv": ("output", "requests_csv", _optional(_text)),
    "stages_csv": ("output", "stages_csv", _optional(_text)),
    "json": ("output", "json", flag),
}
_SECTIONS = ("workload", "slo", "output")  # tables whose keys are fields (cost and policies are values)


def _key(field_name: str) -> str:
    section, key, _ = _FIELDS[field_name]
    return key if section is None else f"{section}.{key}"


@dataclass(frozen=True)
class RunConfig:
    """One ``simulate`` run, resolved: every field has its value (the module docstring gives
    the TOML layout; each field is the flag of the same name, ``workload`` is the spec).

    ``cost`` is a ``--cost`` spec string or a checked ``[cost]`` table (read-only);
    ``arrivals`` is an arrival-process spec; output paths are strings.

    Raises
    ------
    TypeError, ValueError
        A field of the wrong type or out of range (the message names it), arrivals to
        replace without arrivals, a policy that refuses its parameters, or a predictor the
        request policy would not use.
    """

    workload: str = "gsm8k"
    seed: int = 0
    requests: int = 1000
    rate_scale: float = 1.0
    max_prompt: int | None = None
    max_output: int | None = None
    arrivals: str | None = None
    replace_arrivals: bool = False
    cost: str | Mapping[str, Any] = "paper"
    clients: int = 200
    mode: str = "competition"
    token_budget: int = 512
    prompt_machines: int = 1
    token_machines: int = 1
    kv_bandwidth: float = 25.0
    kv_bytes_per_token: float = 2_621_440.0
    layers: int = 80
    kv_overlap: bool = True
    mixed_pool: bool = False
    request_policy: PolicyConfig = field(default_factory=lambda: PolicyConfig("fcfs"))
    iteration_policy: PolicyConfig = field(default_factory=lambda: PolicyConfig("prefill-first"))
    predictor: str | None = None
    clairvoyant: bool = False
    slo_ttft: float | None = None
    slo_tbt: float | None = None
    plot: str | None = None
    trace: str | None = None
    requests_csv: str | None = None
    stages_csv: str | None = None
    json: bool = False

    def __post_init__(self) -> None:
        for name, (_, _, check) in _FIELDS.items():
            object.__setattr__(self, name, check(name, getattr(self, name)))
        self.prepare_options()  # replace_arrivals needs arrivals
        if self.predictor is not None and self.predictor != "oracle":
            sizes = getattr(_make_policy("request", self.request_policy), "sizes", None)
            if sizes == "oracle":
                name = self.request_policy.name
                base = name.removesuffix("-oracle")
                hint = f"; choose {base!r} to plan with the predictions" if base != name else ""
                raise ValueError(
                    f"request policy {name!r} plans with the true output lengths, so --predictor "
                    f"{self.predictor} would go unused{hint}"
                )

    def prepare_options(self) -> Any:
        """The workload options as :class:`llmsched.workloads.PrepareOptions`."""
        from llmsched.workloads import ArrivalProcess, PrepareOptions

        return PrepareOptions(
            rate_scale=self.rate_scale,
            max_prompt=self.max_prompt,
            max_output=self.max_output,
            arrivals=None if self.arrivals is None else ArrivalProcess.parse(self.arrivals),
            replace_arrivals=self.replace_arrivals,
            seed=self.seed,
        )

    def make_request_policy(self) -> Any:
        """A fresh request policy: the named one with its parameters."""
        return _make_policy("request", self.request_policy)

    def make_iteration_policy(self) -> Any:
        """A fresh iteration policy: the named one with its parameters; the ``slo`` rule
        serves ``slo_ttft`` unless its parameters give a target of its own."""
        policy = self.iteration_policy
        if policy.name == "slo" and "slo_ttft" not in policy.params and self.slo_ttft is not None:
            return _make_policy("iteration", policy, slo_ttft=self.slo_ttft)
        return _make_policy("iteration", policy)

    def as_dict(self) -> dict[str, Any]:
        """The config in the TOML layout (None for a value left unset); :func:`dump_toml`
        writes it, and :func:`config_from_dict` reads it back to an equal config."""
        out: dict[str, Any] = {}
        for name, (section, key, _) in _FIELDS.items():
            value = getattr(self, name)
            if isinstance(value, PolicyConfig):
                value = value.as_dict()
            elif isinstance(value, Mapping):  # a cost table; its levels as arrays
                value = {k: [list(level) for level in v] if k == "levels" else v for k, v in value.items()}
            if section is None:
                out[key] = value
            else:
                out.setdefault(section, {})[key] = value
        return out


def _known_keys(where: str, table: Mapping[str, Any], allowed: Any) -> None:
    for key in table:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), list(allowed), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            name = f"{where}.{key}" if where else str(key)
            raise ValueError(f"unknown key {name!r}{hint}; expected one of {sorted(allowed)}")


def config_from_dict(data: Mapping[str, Any], source: str = "config") -> RunConfig:
    """A config from a dict in the TOML layout (what ``tomllib`` reads; see the module docstring).

    Keys left out take their defaults. ``source`` names the origin in messages (the file).

    Raises
    ------
    ValueError
        An unknown key, a value of the wrong type or out of range, or values that do not go
        together; the message starts with ``source`` and names the key.
    """
    try:
        if not isinstance(data, Mapping):
            raise TypeError(f"a config must be a table of keys, got {type(data).__name__}")
        top = {key for section, key, _ in _FIELDS.values() if section is None}
        _known_keys("", data, top | set(_SECTIONS))
        tables: dict[str | None, Mapping[str, Any]] = {None: data}
        for section in _SECTIONS:
            table = data.get(section, {})
            if section == "workload" and isinstance(table, str):
                table = {"spec": table}  # workload = "SPEC": the spec with default options
            if not isinstance(table, Mapping):
                raise TypeError(f"{section} must be a table, got {type(table).__name__} {table!r}")
            _known_keys(section, table, [key for s, key, _ in _FIELDS.values() if s == section])
            tables[section] = table
        values = {
            name: check(_key(name), tables[section][key])
            for name, (section, key, check) in _FIELDS.items()
            if key in tables[section]
        }
        return RunConfig(**values)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{source}: {exc}") from None


def load_config(path: str | os.PathLike[str]) -> RunConfig:
    """The config a TOML file holds (see the module docstring).

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
    return config_from_dict(data, source=name)


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


def dump_toml(config: RunConfig | Mapping[str, Any]) -> str:
    """TOML text of a config (a :class:`RunConfig`, or a dict such as ``--json``'s ``config``).

    A small writer for the values configs hold: tables of tables, strings, integers, floats
    (written so that they read back bit for bit), booleans and arrays of them. None is "not
    set", which TOML cannot say: such keys are left out. ``tomllib.loads`` of the text gives
    the mapping back, less its None values.

    Raises
    ------
    TypeError
        A key that is not a str, or a value of another type.
    """
    data = config.as_dict() if isinstance(config, RunConfig) else config
    if not isinstance(data, Mapping):
        raise TypeError(f"config must be a RunConfig or a mapping, got {type(data).__name__}")
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
