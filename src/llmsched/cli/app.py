"""The ``llmsched`` command: its parser, assembled from one module per command, and ``main``.

Each command is a module of this package (:mod:`llmsched.cli.simulate`, ...) holding its
declared options and what it runs (its ``COMMAND``); :data:`COMMANDS` lists them, so a new
command is one new module and one line there. Errors, broken pipes and Ctrl-C are handled here,
for every command alike.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from llmsched.cli.config import MAX_CLIENTS
from llmsched.cli.options import (
    COST_HELP,
    ROUTER_NAMES,
    WORKLOAD_HELP,
    Command,
    add_options,
    check_output_file,
    parse_cost,
    parse_workload,
)

__all__ = ["COMMANDS", "build_parser", "main", "parse_cost", "parse_workload"]

# Importable from here as they always were: the spec parsers and their help, the fleet's
# routers, the most clients, and the output-file check.
_REEXPORTED = (COST_HELP, WORKLOAD_HELP, ROUTER_NAMES, MAX_CLIENTS, parse_cost, parse_workload)
_check_output_file = check_output_file

#: The commands, each a module of llmsched.cli with its ``COMMAND``, in the order ``--help`` lists them.
COMMANDS = ("simulate", "reproduce", "study", "fleet", "provision", "sweep", "exegpt", "runtime", "cost")


class _Parser(argparse.ArgumentParser):
    """argparse reporting usage errors as every other error: ``llmsched: error: ...``, status 2."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"llmsched: error: {message}\n")


def _version() -> str:
    """The installed distribution's version; the package's own ``__version__`` when it is not
    installed (run from a source tree on ``PYTHONPATH``)."""
    import importlib.metadata

    try:
        return importlib.metadata.version("llmsched")
    except importlib.metadata.PackageNotFoundError:
        from llmsched import __version__

        return __version__


def build_parser() -> argparse.ArgumentParser:
    """The ``llmsched`` command's argument parser, with every command and its options."""
    parser = _Parser(prog="llmsched", description="Schedule LLM inference.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        _add_command(sub, importlib.import_module(f"llmsched.cli.{name}").COMMAND)
    return parser


def _add_command(sub: Any, command: Command) -> None:
    """``command``'s parser, with its options and its subcommands, under ``sub``."""
    parser = sub.add_parser(command.name, help=command.help, description=command.description or None)
    add_options(parser, command)
    parser.set_defaults(func=command.run)
    if command.subcommands:
        parser.set_defaults(command_parser=parser, action=None)
        actions = parser.add_subparsers(dest="action")
        for subcommand in command.subcommands:
            _add_command(actions, subcommand)


# The status of a command whose reader went away (``llmsched ... | head -1``): what a shell
# reports for a program that SIGPIPE ended, 128 + 13.
EXIT_BROKEN_PIPE = 141
# The status of a command stopped by Ctrl-C: what a shell reports for SIGINT, 128 + 2.
EXIT_INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; return its exit status.

    0 on success; 1 when the result says so (an invalid schedule, no feasible configuration);
    2 for bad arguments, or an input or output that cannot be read or written, reported as one
    ``llmsched: error: ...`` line on stderr; 141 (as for SIGPIPE), quietly, when the reader of
    the output went away before it was all written (``llmsched ... | head -1``); 130 after
    ``llmsched: interrupted`` when Ctrl-C stops it.
    """
    try:
        return _run(argv)
    except BrokenPipeError:
        _discard_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        print("llmsched: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _run(argv: Sequence[str] | None) -> int:
    try:
        args = build_parser().parse_args(argv)
        status = int(args.func(args))
    except SystemExit as exc:  # --help (0), or a usage error argparse has reported (2)
        status = exc.code if isinstance(exc.code, int) else 2
    except BrokenPipeError:
        raise
    except (ValueError, TypeError, OSError, ImportError) as exc:  # ImportError: a solver extra missing
        if isinstance(exc, OSError) and exc.filename is None and not _flush_stdout():
            return _fail(f"cannot write the output: {exc.strerror or exc}")  # stdout refused it
        return _fail(_describe(exc))
    # Flushed here, so that an output that cannot be written (a reader gone away, a full disk)
    # is met in main rather than at exit.
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        return _fail(f"cannot write the output: {exc.strerror or exc}")
    return status


def _describe(exc: Exception) -> str:
    """The error line's text: an OSError as ``PATH: reason``, others as their message."""
    if isinstance(exc, OSError) and exc.strerror:
        if exc.filename is None:
            return exc.strerror
        target = f" -> {exc.filename2}" if exc.filename2 is not None else ""
        return f"{exc.filename}{target}: {exc.strerror}"
    return str(exc)


def _fail(message: str) -> int:
    """Report ``message`` as ``llmsched: error: ...`` on stderr; status 2."""
    print(f"llmsched: error: {message}", file=sys.stderr)
    _flush_stdout()  # what stdout still holds, now, so that it cannot fail again at exit
    return 2


def _flush_stdout() -> bool:
    """Flush stdout; if it cannot be written, discard what it holds and return False."""
    try:
        sys.stdout.flush()
    except OSError:
        _discard_stdout()
        return False
    return True


def _discard_stdout() -> None:
    """Point stdout at the null device, so that what its buffer still holds is not written (and
    refused again, with a traceback) when the interpreter exits."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # a stdout without a file descriptor
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
