"""The validators' shared report: a few messages per rule then a count, and the rules to skip."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched.core.violations import MAX_PER_RULE, Report, Violation, size_mismatches, skipped_rules

RULES = ("structure", "capacity", "arrival")


def test_a_report_keeps_a_few_messages_per_rule_then_counts_the_rest() -> None:
    """Twelve offenders give MAX_PER_RULE messages naming the first ones, then one count line."""
    report = Report(set())
    report.add("capacity", np.arange(12), lambda i: f"stage {i} is too full")
    assert [v.message for v in report.items[:MAX_PER_RULE]] == [
        f"stage {i} is too full" for i in range(MAX_PER_RULE)
    ]
    assert report.items[-1] == Violation("capacity", f"... and {12 - MAX_PER_RULE} more of the same rule")
    assert len(report.items) == MAX_PER_RULE + 1
    assert str(report.items[0]) == "[capacity] stage 0 is too full"


def test_a_skipped_rule_and_an_empty_index_report_nothing() -> None:
    """A rule told to skip adds no violation, nor does a rule with no offending index."""
    report = Report({"arrival"})
    report.add("arrival", [3], lambda i: "late")
    report.add("capacity", [], lambda i: "full")
    assert report.items == []


def test_skipped_rules_checks_the_names() -> None:
    """Skipping takes a name or names of the rules; an unknown rule and ``structure`` are refused."""
    assert skipped_rules("arrival", RULES) == {"arrival"}
    assert skipped_rules(("arrival", "capacity"), RULES) == {"arrival", "capacity"}
    with pytest.raises(ValueError, match=r"unknown rule\(s\) \['speed'\]"):
        skipped_rules(["speed"], RULES)
    with pytest.raises(ValueError, match="structure rule cannot be skipped"):
        skipped_rules("structure", RULES)


def test_size_mismatches_name_each_array_of_the_wrong_length() -> None:
    """Each array whose length is not its group's count is named, with both numbers, in order."""

    class Arrays:
        stage_start = np.zeros(2)
        stage_end = np.zeros(3)
        request_client = np.zeros(1)
        request_stage = np.zeros(0)

    groups = (
        ("stages", 2, ("stage_start", "stage_end")),
        ("requests", 1, ("request_client", "request_stage")),
    )
    assert size_mismatches(Arrays(), groups) == [
        "stage_end has 3 entries for 2 stages",
        "request_stage has 0 entries for 1 requests",
    ]
    assert size_mismatches(Arrays(), [("stages", 3, ("stage_end",))]) == []
