"""``llmsched reproduce all``: every published figure beside ours, with a verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmsched.experiments.published import PAPERS, VERDICTS, format_all, markdown_table, reproduce_all

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def everything() -> dict:
    return reproduce_all()


def test_every_row_has_a_verdict_that_follows_from_its_figures(everything) -> None:
    """A figure with a tolerance is confirmed exactly when ours lies within it; a row with no
    figure of ours is not testable and says why; the counts add up; nothing failed validation."""
    rows = everything["rows"]
    assert everything["invalid"] == 0
    assert sum(everything["counts"].values()) == len(rows)
    assert {row["paper"] for row in rows} == set(PAPERS)
    for row in rows:
        assert row["verdict"] in VERDICTS
        if row["verdict"] == "not testable":
            assert row["ours"] is None and row["note"]
            continue
        assert row["ours"] is not None
        if row["tolerance"] is not None:
            assert row["ratio"] == pytest.approx(row["ours"] / row["paper_value"])
            within = abs(row["ratio"] - 1) <= row["tolerance"] + 1e-12
            assert (row["verdict"] == "confirmed") == within, row
    # The report is JSON as it stands (no NaN or infinity).
    text = json.dumps(everything, allow_nan=False)
    assert json.loads(text)["counts"] == everything["counts"]


def test_the_rows_read_the_experiments_they_name(everything) -> None:
    """Some rows checked against what the experiments compute (and the published figures)."""
    rows = {row["item"]: row for row in everything["rows"]}
    baseline = rows["GSM8K makespan, baseline (FCFS, prefill-first)"]
    assert baseline["paper_value"] == 201.00 and baseline["ours"] == pytest.approx(200.42, abs=0.005)
    literal = rows["GSM8K makespan, online with Eqs. 41-43 read literally"]
    assert literal["ours"] == pytest.approx(193.51, abs=0.005) and literal["verdict"] == "confirmed"
    exegpt = rows["Table 6 (OPT-13B, task S), throughput under a latency bound of 3.1 s"]
    assert exegpt["paper_value"] == 22.41 and exegpt["verdict"] == "contradicted"
    assert not [row for row in everything["rows"] if row["verdict"] == "not testable"]
    fig18 = [row for item, row in rows.items() if item.startswith("Fig. 18")]
    assert len(fig18) == 4 and all(row["verdict"] != "not testable" for row in fig18)
    aa = rows[
        "Fig. 18a (conversation trace, 8 DGX-H100s' power): Splitwise-AA's throughput over Baseline-A100's"
    ]
    assert aa["paper_value"] == 2.15 and 1.5 < aa["ours"] < 3.0
    mape = [row for item, row in rows.items() if item.startswith("performance model")]
    assert len(mape) == 2 and all(0 < row["ours"] <= 3.0 for row in mape)


def test_the_readme_and_the_page_show_the_command_s_table(everything) -> None:
    """The README's and the docs page's tables are what the command prints, row for row."""
    table = markdown_table(everything)
    for page in ("README.md", "docs/reproduce.md"):
        assert table in (ROOT / page).read_text(encoding="utf-8"), page
    counts = everything["counts"]
    summary = (
        f"{len(everything['rows'])} rows: {counts['confirmed']} confirmed, {counts['contradicted']} "
        f"contradicted, {counts['not testable']} not testable"
    )
    for page in ("README.md", "docs/reproduce.md", "docs/index.md"):
        assert summary in (ROOT / page).read_text(encoding="utf-8"), page
    text = format_all(everything)
    assert f"{len(everything['rows'])} rows" in text
    for verdict, count in everything["counts"].items():
        assert f"{count} {verdict}" in text
