"""Argument checks shared by the core modules (ValueError/TypeError with the name and value)."""

from __future__ import annotations

import numbers
from typing import Any


def positive_int(name: str, value: Any, minimum: int = 1) -> int:
    """``value`` as an int if it is an integer (not a bool) of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return int(value)
