"""The ``llmsched`` command: the parser and its commands (``app``), TOML run configurations (``config``)."""

from llmsched.cli.app import main

__all__ = ["main"]
