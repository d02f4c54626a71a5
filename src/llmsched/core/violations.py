"""What every validator reports: a :class:`Violation` per broken rule, gathered by a
:class:`~llmsched.core.violations.Report` that keeps a few messages a rule; the check of the
rules told to skip, and the arrays of the wrong length that break the rule ``structure``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Report", "Violation", "size_mismatches", "skipped_rules"]

MAX_PER_RULE = 5


@dataclass(frozen=True)
class Violation:
    """One broken rule: its name and a sentence saying where and how."""

    rule: str
    message: str

    def __str__(self) -> str:
        return f"[{self.rule}] {self.message}"


def skipped_rules(skip: str | Iterable[str], rules: tuple[str, ...]) -> set[str]:
    """The rules a validator is told to skip, checked: each one of ``rules``, and never
    ``structure`` (no other rule can run without it)."""
    skip_set = {skip} if isinstance(skip, str) else set(skip)
    unknown = skip_set - set(rules)
    if unknown:
        raise ValueError(f"unknown rule(s) {sorted(unknown)}; rules are {list(rules)}")
    if "structure" in skip_set:
        raise ValueError("the structure rule cannot be skipped: no other rule can run without it")
    return skip_set


def size_mismatches(schedule: Any, groups: Iterable[tuple[str, int, Iterable[str]]]) -> list[str]:
    """What the rule ``structure`` says of arrays of the wrong length: for each group (what its
    arrays have one entry each for, how many of those there are, and the arrays' names), each
    array of ``schedule`` of another size, in order."""
    return [
        f"{name} has {getattr(schedule, name).size} entries for {count} {what}"
        for what, count, names in groups
        for name in names
        if getattr(schedule, name).size != count
    ]


class Report:
    """The violations a validator finds: a few messages a rule (``MAX_PER_RULE``), then a count,
    and none for the rules told to skip."""

    def __init__(self, skip: set[str]):
        self.skip = skip
        self.items: list[Violation] = []

    def add(self, rule: str, where: Iterable[int], describe: object) -> None:
        """Record up to MAX_PER_RULE messages for the offending indices, then a count."""
        if rule in self.skip:
            return
        idx = np.asarray(list(where) if not isinstance(where, np.ndarray) else where)
        if idx.size == 0:
            return
        for i in idx[:MAX_PER_RULE].tolist():
            self.items.append(Violation(rule, describe(i)))  # type: ignore[operator]
        if idx.size > MAX_PER_RULE:
            self.items.append(Violation(rule, f"... and {idx.size - MAX_PER_RULE} more of the same rule"))
