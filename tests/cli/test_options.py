"""Options declared once: every command's flags, its TOML keys and its refusals come from its
declaration, shared options read alike everywhere, and a config file round-trips every key."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsched.cli import options as shared
from llmsched.cli.app import COMMANDS, build_parser
from llmsched.cli.config import config_class, config_from_dict, dump_toml, load_config
from llmsched.cli.options import Command, Option, or_join, resolve


def _commands() -> list[Command]:
    """Every command, a command's subcommands after it."""
    found = []
    for name in COMMANDS:
        command = importlib.import_module(f"llmsched.cli.{name}").COMMAND
        found += [command, *command.subcommands]
    return found


ALL = _commands()
LOADS = [command for command in ALL if command.config is not None]
BY_NAME = {command.name: command for command in ALL}


def _subparser(name: str) -> argparse.ArgumentParser:
    """The parser of command ``name``, or of a subcommand of that name (``validate`` is under
    ``runtime``, ``list`` and ``fit`` under ``cost``)."""
    parser = build_parser()
    choices = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    if name in choices:
        return choices[name]
    for command in choices.values():
        if command._subparsers is not None and name in command._subparsers._group_actions[0].choices:
            return command._subparsers._group_actions[0].choices[name]
    raise KeyError(name)


def _actions(name: str) -> dict[str, argparse.Action]:
    """The parser's actions of command ``name`` by dest, but --help."""
    return {action.dest: action for action in _subparser(name)._actions if action.dest != "help"}


def _parse(argv: list[str]) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def test_the_commands_that_run_a_load_read_a_config() -> None:
    """simulate, sweep, fleet and provision take --config; the others take none."""
    assert [command.name for command in LOADS] == ["simulate", "fleet", "provision", "sweep"]
    for command in ALL:
        assert ("config" in _actions(command.name)) == (command.config is not None), command.name


@pytest.mark.parametrize("command", ALL, ids=lambda c: c.name)
def test_every_flag_is_declared_and_every_declared_option_has_its_flag(command: Command) -> None:
    """The parser's flags are exactly the declared options' (``--x`` and ``--no-x`` for a flag
    that turns something on or off), with the declaration's help, and --config where the
    command reads one."""
    actions = _actions(command.name)
    actions.pop("config", None)
    for name in ("command_parser", "action"):  # runtime's subcommand
        actions.pop(name, None)
    actions = {
        dest: action for dest, action in actions.items() if not isinstance(action, argparse._SubParsersAction)
    }
    assert set(actions) == {option.name for option in command.options}
    for option in command.options:
        action = actions[option.name]
        if option.positional:
            assert action.option_strings == [] and action.help == option.help
            continue
        flags = [option.flag] + ([f"--no-{option.flag[2:]}"] if option.kind.parse is None else [])
        assert action.option_strings == flags
        assert action.help == option.flag_help and action.default is None
        assert action.required == option.required


def _shared_options() -> list[Option]:
    """The options declared in llmsched.cli.options, each one object however many use it."""
    found: list[Option] = []
    for value in vars(shared).values():
        items = value if isinstance(value, tuple) else (value,)
        found += [item for item in items if isinstance(item, Option) and item not in found]
    return found


def test_shared_options_read_alike_in_every_command() -> None:
    """An option declared once for several commands has, in each, the same flag, type,
    choices, metavar and help."""
    seen = 0
    for option in _shared_options():
        users = [command.name for command in ALL if option in command.options]
        if len(users) < 2:
            continue
        seen += 1
        shapes = {
            name: (
                tuple(action.option_strings),
                action.type,
                action.choices,
                action.metavar,
                action.help,
                type(action),
            )
            for name in users
            for action in [_actions(name)[option.name]]
        }
        assert len(set(shapes.values())) == 1, (option.name, shapes)
    assert seen >= 20


@pytest.mark.parametrize(
    "flag", ["--arrivals", "--rate-scale", "--max-prompt", "--max-output", "--mode", "--predictor"]
)
def test_the_load_flags_exist_alike_on_every_command_that_runs_a_load(flag: str) -> None:
    """--arrivals, --rate-scale, --max-prompt/--max-output, --mode and --predictor: on simulate,
    sweep, fleet and provision, each from one declaration."""
    declared = {command.name: [o for o in command.options if o.flag == flag] for command in LOADS}
    assert all(len(found) == 1 for found in declared.values()), declared
    # One declaration: the same option everywhere, but for the modes it applies to (provision
    # searches a cluster's pools with first-come-first-served prompt machines, so no predictor).
    assert len({found[0]._replace(applies=None) for found in declared.values()}) == 1


def test_one_meaning_for_each_time_between_tokens_target() -> None:
    """No command takes the ambiguous --slo-tbt: each names its statistic, the mean of a
    request's gaps (goodput) or the p99 of every gap (provisioning)."""
    for command in ALL:
        assert "slo_tbt" not in _actions(command.name)
    means = {c.name for c in LOADS if shared.SLO_TBT_MEAN in c.options}
    p99s = {c.name for c in LOADS if shared.SLO_TBT_P99 in c.options}
    assert means == {"simulate", "sweep", "fleet"} and p99s == {"provision"}


# One non-default value of every option of the commands that read a config: the flags that
# give it, and the same value as a config file holds it.
SAMPLES: dict[str, tuple[list[str], Any]] = {
    "workload": (["--workload", "exegpt:T"], "exegpt:T"),
    "seed": (["--seed", "7"], 7),
    "requests": (["--requests", "50"], 50),
    "rate_scale": (["--rate-scale", "2.5"], 2.5),
    "max_prompt": (["--max-prompt", "900"], 900),
    "max_output": (["--max-output", "64"], 64),
    "arrivals": (["--arrivals", "gamma:2,1.5"], "gamma:2,1.5"),
    "replace_arrivals": (["--arrivals", "poisson:1", "--replace-arrivals"], True),
    "predictor": (["--predictor", "mico"], "mico"),
    "cost": (["--cost", "linear:0.02,1e-4,0.03,2e-4,4096"], "linear:0.02,1e-4,0.03,2e-4,4096"),
    "clients": (["--clients", "17"], 17),
    "mode": (["--mode", "fusion"], "fusion"),
    "token_budget": (["--token-budget", "256"], 256),
    "max_num_batched_tokens": (["--max-num-batched-tokens", "4096"], 4096),
    "chunked_prefill": (["--chunked-prefill"], True),
    "memory": (["--memory", "500"], 500),
    "block_size": (["--block-size", "8"], 8),
    "columns": (
        ["--columns", "prompt_tokens=a,output_tokens=b"],
        {"prompt_tokens": "a", "output_tokens": "b"},
    ),
    "prompt_machines": (["--prompt-machines", "2"], 2),
    "token_machines": (["--token-machines", "3"], 3),
    "kv_bandwidth": (["--kv-bandwidth", "10"], 10.0),
    "kv_bytes_per_token": (["--kv-bytes-per-token", "1000"], 1000.0),
    "layers": (["--layers", "40"], 40),
    "kv_overlap": (["--no-kv-overlap"], False),
    "mixed_pool": (["--mixed-pool"], True),
    "prompt_batch_tokens": (["--prompt-batch-tokens", "1024"], 1024),
    "lend_busy_above": (["--lend-busy-above", "4096"], 4096),
    "max_output_tokens": (["--max-output-tokens", "300"], 300),
    "request_policy": (["--request-policy", "shortest-first"], "shortest-first"),
    "iteration_policy": (["--iteration-policy", "lagrangian"], "lagrangian"),
    "clairvoyant": (["--clairvoyant"], True),
    "slo_ttft": (["--slo-ttft", "2"], 2.0),
    "slo_tbt_mean": (["--slo-tbt-mean", "0.1"], 0.1),
    "slo_tbt_p99": (["--slo-tbt-p99", "0.2"], 0.2),
    "plot": (["--plot", "figure.svg"], "figure.svg"),
    "trace": (["--trace", "t.json"], "t.json"),
    "requests_csv": (["--requests-csv", "r.csv"], "r.csv"),
    "stages_csv": (["--stages-csv", "s.csv"], "s.csv"),
    "json": (["--json"], True),
    "router": (["--router", "power-of-two"], "power-of-two"),
    "backoff": (["--backoff"], True),
    "backoff_delay": (["--backoff-delay", "0.5"], 0.5),
    "backoff_threshold": (["--backoff-threshold", "3"], 3),
    "admission_ttft": (["--admission-ttft", "2"], 2.0),
    "admission_ttft_per_token": (["--admission-ttft-per-token", "0.001"], 0.001),
    "admission_margin": (["--admission-margin", "0.8"], 0.8),
    "engines": (["--engines", "3"], 3),
    "engine": (["--engine", "a:4", "--engine", "b:8:0.5:2"], ["a:4", "b:8:0.5:2"]),
    "sizes": (["--sizes", "oracle"], "oracle"),
    "kind": (["--kind", "a:4", "--kind", "b:8:0.5"], ["a:4", "b:8:0.5"]),
    "max": (["--max", "3,2"], [3, 2]),
    "method": (["--method", "exhaustive"], "exhaustive"),
    "eps_latency": (["--eps-latency", "0.05"], 0.05),
    "prompt_price": (["--prompt-price", "2"], 2.0),
    "token_price": (["--token-price", "0.5"], 0.5),
    "policy": (
        ["--policy", "hybrid/lagrangian", "--policy", "fcfs/threshold"],
        ["hybrid/lagrangian", "fcfs/threshold"],
    ),
    "rates": (["--rates", "0.5,2"], [0.5, 2.0]),
    "jobs": (["--jobs", "2"], 2),
    "backend": (["--backend", "dask"], "dask"),
    "dask_address": (["--dask-address", "tcp://127.0.0.1:1"], "tcp://127.0.0.1:1"),
    "ray_address": (["--ray-address", "127.0.0.1:2"], "127.0.0.1:2"),
    "metric": (["--metric", "e2e_p50_s"], "e2e_p50_s"),
    "progress": (["--no-progress"], False),
    "timings": (["--timings"], True),
}


def _argv(command: Command, option: Option) -> list[str]:
    """The command line that gives ``option`` its sample, with the value of another option it
    applies to (``--mode fusion`` for --token-budget)."""
    flags, _ = SAMPLES[option.name]
    if option.applies is None:
        return [command.name, *flags]
    other, values = option.applies
    return [command.name, f"--{other.replace('_', '-')}", str(values[0]), *flags]


CASES = [(command, option) for command in LOADS for option in command.options]


@pytest.mark.parametrize(("command", "option"), CASES, ids=[f"{c.name}-{o.name}" for c, o in CASES])
def test_each_flag_is_its_key_and_a_config_file_reads_it_back(
    command: Command, option: Option, tmp_path
) -> None:
    """A flag sets its option to what its key sets in a file; the config, written as TOML
    and read with --config, is the same, the option now coming from the file."""
    expected = option.check(option.name, SAMPLES[option.name][1])
    assert expected != option.default, option.name
    resolved = resolve(_parse(_argv(command, option)), command)
    assert getattr(resolved.config, option.name) == expected and option.name in resolved.flags
    layout = resolved.config.as_dict()
    table = layout if option.section is None else layout[option.section]
    assert table[option.toml_key] == option.as_toml(expected)
    path = tmp_path / "run.toml"
    path.write_text(dump_toml(resolved.config))
    again = resolve(_parse([command.name, "--config", str(path)]), command)
    assert again.config == resolved.config and option.name in again.from_file and not again.flags


@pytest.mark.parametrize("command", LOADS, ids=lambda c: c.name)
def test_a_config_of_every_key_round_trips(command: Command, tmp_path) -> None:
    """Every option set at once: as_dict written by dump_toml and read by load_config (and by
    config_from_dict) gives an equal config, each key where its declaration puts it;
    dataclasses.replace rebuilds it."""
    values = {o.name: o.check(o.name, SAMPLES[o.name][1]) for o in command.options}
    config = command.config(**values)
    path = tmp_path / "every.toml"
    path.write_text(dump_toml(config))
    assert load_config(path, command.config) == config
    data = tomllib.loads(path.read_text())
    assert config_from_dict(data, cls=command.config) == config
    for option in command.options:
        table = data if option.section is None else data[option.section]
        assert table[option.toml_key] == option.as_toml(values[option.name]), option.name
    assert dataclasses.replace(config) == config


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_any_choice_of_keys_round_trips(data) -> None:
    """For any command and any options of it set to their samples (the others left at their
    defaults), the TOML text reads back as the same config."""
    command = data.draw(st.sampled_from(LOADS))
    chosen = data.draw(st.sets(st.sampled_from([o.name for o in command.options])))
    options = [o for o in command.options if o.name in chosen]
    values = {o.name: o.check(o.name, SAMPLES[o.name][1]) for o in options}
    if values.get("replace_arrivals"):
        values["arrivals"] = "poisson:1"
    config = command.config(**values)
    assert config_from_dict(tomllib.loads(dump_toml(config)), cls=command.config) == config


def _refusals() -> list[tuple[Command, Option, str]]:
    """Each option used only where another option takes some values, with a value of that
    option the command accepts where it is not used."""
    cases = []
    for command in LOADS:
        for option in command.options:
            if option.applies is None:
                continue
            other, values = option.applies
            choices = command.option(other).kind.choices or ()
            if other == "mode":
                choices = command.modes or ()
            outside = [value for value in choices if value not in values]
            if outside:
                cases.append((command, option, outside[0]))
    return cases


REFUSALS = _refusals()


@pytest.mark.parametrize(
    ("command", "option", "other"), REFUSALS, ids=[f"{c.name}-{o.name}-{v}" for c, o, v in REFUSALS]
)
def test_a_flag_the_run_would_ignore_is_refused_from_its_declaration(command, option, other) -> None:
    """Given where its declaration says it does not apply (another mode, another router), a
    flag is refused by name, saying where it applies; the same value from a file is not (a file
    may hold every key), unless the option is strict."""
    name, values = option.applies
    flags = SAMPLES[option.name][0]
    argv = [command.name, f"--{name.replace('_', '-')}", other, *flags]
    with pytest.raises(ValueError) as refused:
        resolve(_parse(argv), command)
    message = str(refused.value)
    if option.refusal is None:
        shown = option.named(option.check(option.name, SAMPLES[option.name][1]))
        assert message == (
            f"{shown} applies to --{name.replace('_', '-')} {or_join(values)} only; this run is "
            f"--{name.replace('_', '-')} {other}, where it would be ignored"
        )
    else:
        assert message == option.refusal


def test_the_refusals_cover_the_modes_options() -> None:
    """The declarations hold the refusals the commands once kept in tables of their own: the
    modes' parameters in simulate, sweep, fleet and provision, and fleet's --sizes."""
    refused = {(command.name, option.name) for command, option, _ in REFUSALS}
    assert {
        ("simulate", "token_budget"),
        ("simulate", "kv_overlap"),
        ("simulate", "iteration_policy"),
    } <= refused
    assert {("sweep", "prompt_machines"), ("fleet", "sizes")} <= refused
    assert {("provision", "kind"), ("provision", "router"), ("provision", "prompt_price")} <= refused
    assert len(refused) >= 37


def test_a_file_may_hold_the_keys_of_another_mode_but_not_a_strict_one(tmp_path) -> None:
    """A config file's token_budget is kept (and echoed) in a competition run; its Gantt chart
    in a fusion run, which cannot draw one, is refused naming the file's key."""
    simulate = BY_NAME["simulate"]
    path = tmp_path / "run.toml"
    path.write_text("token_budget = 64\n")
    assert resolve(_parse(["simulate", "--config", str(path)]), simulate).config.token_budget == 64
    path.write_text('mode = "fusion"\n[output]\nplot = "g.png"\n')
    with pytest.raises(
        ValueError, match="--plot applies to --mode competition only; this run is --mode fusion"
    ):
        resolve(_parse(["simulate", "--config", str(path)]), simulate)


def test_a_command_refuses_a_mode_it_cannot_run() -> None:
    """fleet runs competition and fusion engines; a disaggregated cluster is refused, naming
    the commands that run one."""
    with pytest.raises(
        ValueError,
        match="fleet runs --mode competition, fusion, vllm, sarathi, orca or padded, not --mode "
        "disaggregated",
    ):
        resolve(_parse(["fleet", "--mode", "disaggregated"]), BY_NAME["fleet"])


def test_a_command_without_a_config_gets_its_defaults() -> None:
    """A command that reads no file (study) resolves to its options' defaults, overridden by
    the flags given."""
    resolved = resolve(_parse(["study", "--cases", "3"]), BY_NAME["study"])
    assert resolved.config.cases == 3 and resolved.config.requests == 1319 and resolved.flags == {"cases"}


def test_config_classes_refuse_an_option_declared_twice() -> None:
    """Two options of one name, or of one key in one table, cannot make a config class."""
    clients = BY_NAME["simulate"].option("clients")
    with pytest.raises(ValueError, match=r"declared twice by name: \['clients'\]"):
        config_class("Twice", [clients, clients], __name__, "")
    again = clients._replace(name="engines_clients", key="clients")
    with pytest.raises(ValueError, match=r"declared twice by TOML key: \['clients'\]"):
        config_class("Twice", [clients, again], __name__, "")


def test_an_option_checks_its_values_by_name() -> None:
    """A repeated option's values are an array, each item checked and named by its place; a
    value of the wrong kind is refused by the name given."""
    kind = BY_NAME["provision"].option("kind")
    assert kind.check("kind", ["a:4"]) == ("a:4",)
    with pytest.raises(TypeError, match="kind must be a non-empty array"):
        kind.check("kind", "a:4")
    with pytest.raises(ValueError, match=r"kind\[1\] must be NAME:CLIENTS"):
        kind.check("kind", ["a:4", "b"])
    with pytest.raises(ValueError, match="rates must hold at least one rate"):
        BY_NAME["sweep"].option("rates").check("rates", [])
    with pytest.raises(ValueError, match=r"max\[0\] must be at least 1, got 0"):
        BY_NAME["provision"].option("max").check("max", 0)


def test_the_spec_parsers_live_with_the_load_options() -> None:
    """parse_workload and parse_cost are the options module's, importable from app as before."""
    import llmsched.cli.app as app

    assert app.parse_cost is shared.parse_cost and app.parse_workload is shared.parse_workload
    assert len(shared.parse_workload("exegpt:S", requests=12)) == 12


def test_the_simulate_format_in_the_config_docstring_is_simulates() -> None:
    """Every key of the example in llmsched.cli.config's docstring is a key of simulate's
    config, and every key of the config is in the example."""
    import llmsched.cli.config as config

    doc = config.__doc__ or ""
    example = doc.split("::\n", 1)[1].split("\nA policy's parameters", 1)[0]
    text = "\n".join(line[4:] for line in example.splitlines())
    data = tomllib.loads(text)
    simulate = BY_NAME["simulate"]
    config_from_dict(data, cls=simulate.config)
    layout = simulate.config().as_dict()
    for section, table in layout.items():
        if isinstance(table, dict) and section not in ("request_policy", "iteration_policy", "cost"):
            assert set(table) == set(data[section]), section
        else:
            assert section in data, section


def test_the_example_config_is_a_simulate_config() -> None:
    """examples/*.toml read as the configs of the command they name."""
    root = Path(__file__).resolve().parents[2]
    for path in sorted((root / "examples").glob("*.toml")):
        load_config(path, BY_NAME["simulate"].config)


def test_a_load_config_class_has_the_load_settings_and_their_errors() -> None:
    """A config class of a command that runs a load offers the load's settings, and its
    documentation ends with the errors every such config raises."""
    options = (*shared.LOAD, Option("x", shared.NONNEGATIVE, 0.5, "x"))
    config = shared.load_config_class("X", options, __name__, "One run.")
    assert issubclass(config, shared.LoadSettings) and config().x == 0.5
    assert config.__doc__.startswith("One run.\n\n    Raises\n    ------\n    TypeError, ValueError\n")
    with pytest.raises(ValueError, match="x must be a finite number >= 0"):
        config(x=-1.0)
