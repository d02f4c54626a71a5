"""Baton's Tables 1 and 2 in the simulator: padded insertion against static batches and against
prefilling apart, on the roofline model of Llama-2-7B."""

from __future__ import annotations

import pytest

from llmsched import Workload
from llmsched.experiments.baton import (
    BATON_METHODS,
    PAPER_BATON_TABLE1,
    PAPER_BATON_TABLE2,
    baton_cost,
    format_baton,
    reproduce_baton,
    run_baton_method,
)
from llmsched.workloads import baton_like


def test_each_method_runs_its_rule_and_padding_costs_what_apart_does_not() -> None:
    """On the short queries: static batches end last at batch 8; padded insertion never beats
    prefilling apart or Orca's unpadded iterations (the same decisions, dearer iterations:
    every query waits at 0); each schedule names its engine."""
    workload = baton_like("short", 0)
    cost = baton_cost("rtx4090")
    runs = {method: run_baton_method(workload, cost, 8, method) for method in BATON_METHODS}
    assert runs["benchmark"].info["request_policy"] == "batch-wise" and runs["benchmark"].padded
    assert runs["baton"].padded and runs["baton"].info["batching"] == "padded"
    assert runs["orca"].info["batching"] == "orca" and not runs["orca"].padded
    assert runs["baton"].makespan >= runs["orca"].makespan
    assert runs["baton"].makespan >= runs["baton-pd"].makespan
    assert runs["benchmark"].makespan > max(runs[m].makespan for m in ("baton", "baton-pd", "orca"))
    with pytest.raises(ValueError, match="method must be one of benchmark, baton, baton-pd, orca"):
        run_baton_method(workload, cost, 8, "pd")
    with pytest.raises(ValueError, match="gpu must be one of a6000, rtx4090"):
        baton_cost("h100")


def test_a_padded_insertion_beside_a_long_running_query_pays_for_every_row() -> None:
    """One long query runs; a second arrives later with a long prompt: under padded insertion
    the running query's row is padded to that prompt, so Baton ends after Baton-PD by about
    one prompt's worth of prefill."""
    cost = baton_cost("a6000")
    workload = Workload([100, 4000], [2000, 10], arrival=[0.0, 5.0])
    padded = run_baton_method(workload, cost, 2, "baton")
    apart = run_baton_method(workload, cost, 2, "baton-pd")
    extra = cost.prefill_time(2 * 4000) - cost.prefill_time(4000)
    assert padded.makespan - apart.makespan == pytest.approx(extra, rel=0.05)


def test_the_tables_hold_the_paper_s_figures_and_our_ratios() -> None:
    report = reproduce_baton(seeds=1)
    assert [row["batch"] for row in report["table1"]] == list(PAPER_BATON_TABLE1)
    assert [row["batch"] for row in report["table2"]] == list(PAPER_BATON_TABLE2)
    first = report["table1"][0]
    assert first["doubled"] and first["paper_pd_over_baton"] == pytest.approx(20549 / 11771)
    for row in report["table1"] + report["table2"]:
        seconds = row["seconds"]
        assert row["baton_over_benchmark"] == pytest.approx(seconds["benchmark"] / seconds["baton"])
        assert row["pd_over_baton"] >= 1.0  # padding never helps here
    assert report["table2"][0]["paper_pd_over_baton"] is None
    text = format_baton(report)
    assert "Table 1" in text and "Table 2" in text and "(1.94)" in text
    with pytest.raises(ValueError, match="seeds"):
        reproduce_baton(seeds=0)
