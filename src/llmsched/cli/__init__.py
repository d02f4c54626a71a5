"""The ``llmsched`` command: one module per command (``simulate``, ``sweep``, ``fleet``,
``provision``, ``reproduce``, ``study``, ``exegpt``, ``runtime``), each declaring its options
once (``options`` holds the declaration machinery and the options several commands share);
``app`` assembles the parser and runs a command, ``config`` reads and writes TOML run
configurations."""

from llmsched.cli.app import main

__all__ = ["main"]
