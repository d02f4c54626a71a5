"""What every validator reports: a :class:`Violation` per broken rule, gathered by a
:class:`Report` that keeps a few messages a rule, and the check of the rules told to skip."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

__all__ = ["Report", "Violation", "skipped_rules"]

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


class Report:
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
