"""What every schedule offers: the latency and goodput figures from per-request times."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched.core.schedule import goodput_figures, latency_figures, percentiles


def test_latency_figures_are_the_means_and_percentiles_of_each_series() -> None:
    """TTFT and latency figures are their means and p50/p90/p99; TBT is weighted by counts."""
    ttft = np.array([1.0, 2.0, 3.0, 4.0])
    latency = np.array([10.0, 20.0, 30.0, 40.0])
    figures = latency_figures(ttft, latency, np.array([0.1, 0.3]), np.array([3, 1]))
    assert figures["ttft_mean_s"] == 2.5 and figures["latency_mean_s"] == 25.0
    assert figures["e2e_p50_s"] == figures["latency_p50_s"] == pytest.approx(np.percentile(latency, 50))
    assert [figures[f"ttft_p{q}_s"] for q in (50, 90, 99)] == percentiles(ttft)
    assert figures["tbt_mean_s"] == pytest.approx(0.15)
    assert figures["tbt_p50_s"] == pytest.approx(0.1)


def test_latency_figures_without_gaps_report_zero_tbt() -> None:
    """A run in which no request decodes a second token has no gaps: TBT figures are 0."""
    figures = latency_figures(np.array([1.0]), np.array([1.0]), np.array([]), np.array([], dtype=np.int64))
    assert figures["tbt_mean_s"] == figures["tbt_p99_s"] == 0.0


def test_goodput_counts_requests_meeting_the_targets_per_second() -> None:
    """Three of four requests meeting their targets over 2 s is 1.5 good requests a second."""
    figures = goodput_figures(np.array([True, True, False, True]), 2.0, 0.5, None)
    assert figures == {
        "requests_per_s": 2.0,
        "goodput_rps": 1.5,
        "slo_attainment": 0.75,
        "slo_ttft_s": 0.5,
        "slo_tbt_s": None,
    }
    assert goodput_figures(np.array([True]), 0.0, None, None)["goodput_rps"] == 0.0
