"""Splitwise's evaluation: Table V's designs, Table VI's SLOs, the highest load and iso-power."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched import Workload
from llmsched.experiments.splitwise import (
    DESIGNS,
    SLOS,
    code_trace_sizes,
    max_load,
    provision_equal,
    run_design,
    slo_report,
    trace_sizes,
)


def test_designs_price_and_power_their_machines_as_table_v() -> None:
    ha, hhcap, base = DESIGNS["splitwise-ha"], DESIGNS["splitwise-hhcap"], DESIGNS["baseline-h100"]
    assert ha.power(3, 2) == pytest.approx(3 * 1.75 + 2 * 1.0)
    assert ha.price(3, 2) == pytest.approx(3 * 2.35 + 2 * 1.0)
    assert hhcap.power(2, 4) == pytest.approx(2 * 1.75 + 4 * 1.23)
    assert base.power(40) == pytest.approx(70.0) and base.price(40) == pytest.approx(100.0)
    assert base.baseline and not ha.baseline
    assert len(SLOS) == 9


def _apart(n: int = 12) -> Workload:
    """Requests of the code trace's sizes, a minute apart: each runs alone."""
    prompt, output = code_trace_sizes()
    return Workload(prompt[:n], output[:n], arrival=60.0 * np.arange(n), name="apart")


def test_a_request_alone_on_a_dgx_a100_is_the_slo_reference() -> None:
    """Alone on one DGX-A100 a request's TTFT is its reference (slowdown 1); its decode, priced
    at a batch of one, is no slower than the reference's token time; every SLO holds."""
    workload = _apart()
    report = slo_report(workload, run_design("baseline-a100", 1, 0, workload))
    assert report["met"]
    for q in (50, 90, 99):
        assert report["percentiles"][f"ttft_p{q}"] == pytest.approx(1.0, rel=1e-9)
        assert report["percentiles"][f"tbt_p{q}"] <= 1.0
    # Twice the reference TTFT for everyone breaks the P50 TTFT SLO (at most 2x) alone.
    latencies = run_design("baseline-a100", 1, 0, workload)
    slow = {"ttft": 2.5 * latencies["ttft"], "e2e": latencies["e2e"] + 1.5 * latencies["ttft"]}
    broken = slo_report(workload, slow)
    assert not broken["met"] and broken["percentiles"]["ttft_p50"] == pytest.approx(2.5, rel=1e-9)


def test_every_design_runs_and_splitwise_moves_decoding_off_the_prompt_machines() -> None:
    """Each design runs the same requests to valid schedules (run_design validates them)."""
    prompt, output = code_trace_sizes()
    workload = Workload(prompt[:300], output[:300], arrival=np.linspace(0.0, 60.0, 300), name="ramp")
    for name, design in DESIGNS.items():
        latencies = run_design(name, 2, 0 if design.baseline else 1, workload)
        assert np.all(latencies["e2e"] >= latencies["ttft"]) and np.all(latencies["ttft"] > 0)
    with pytest.raises(ValueError, match="has no token machines"):
        run_design("baseline-h100", 2, 1, workload)


def test_the_highest_load_meets_the_slos_and_a_higher_one_does_not() -> None:
    sizes = code_trace_sizes()
    found = max_load("splitwise-hh", 2, 1, sizes, requests=400, resolution=0.05)
    assert found["rate"] > 0 and found["fails_at"] <= found["rate"] * 1.05 + 1e-9
    assert all(found["percentiles"][f"{m}_p{q}"] < limit for (m, q), limit in SLOS.items())
    again = max_load("splitwise-hh", 2, 1, sizes, requests=400, resolution=0.05)
    assert again == found  # deterministic


def test_iso_power_fills_the_budget_and_keeps_the_best_split() -> None:
    sizes = code_trace_sizes()
    chosen = provision_equal("splitwise-ha", 1.75 * 3, sizes, requests=300, resolution=0.1)
    assert chosen["power"] <= 1.75 * 3 + 1e-9
    assert chosen["rate"] == max(chosen["tried"].values())
    assert set(chosen["tried"]) == {1, 2}  # 1 H100 + 3 A100s, or 2 H100s + 1 A100
    base = provision_equal("baseline-a100", 3.5, sizes, requests=300, resolution=0.1)
    assert (base["prompt"], base["token"]) == (3, 0)
    with pytest.raises(ValueError, match="holds no"):
        provision_equal("splitwise-hh", 1.75, sizes)


def test_bad_input_is_refused_before_work() -> None:
    sizes = code_trace_sizes()
    with pytest.raises(ValueError, match="unknown design 'nope'"):
        max_load("nope", 1, 0, sizes)
    with pytest.raises(ValueError, match="of one length"):
        max_load("baseline-a100", 1, 0, (sizes[0][:10], sizes[1][:5]))
    with pytest.raises(ValueError, match="requests"):
        max_load("baseline-a100", 1, 0, sizes, requests=0)
    with pytest.raises(ValueError, match="past limit"):
        max_load("baseline-a100", 1, 0, sizes, requests=3, start=0.001, limit=0.002)
    with pytest.raises(TypeError, match="splits"):
        provision_equal("splitwise-ha", 5.25, sizes, requests=3, splits=[2.5])


def test_iso_cost_spends_the_budget_on_prices() -> None:
    """At equal cost a baseline of H100s buys a machine per 2.5 units, a Splitwise-HA split
    H100 prompt machines at 2.35 and A100 token machines at 1."""
    sizes = code_trace_sizes()
    base = provision_equal("baseline-h100", 5.0, sizes, requests=300, resolution=0.1, by="cost")
    assert (base["prompt"], base["cost"]) == (2, 5.0)
    chosen = provision_equal("splitwise-ha", 5.0, sizes, requests=300, resolution=0.1, by="cost")
    # 1 H100 (2.35) leaves 2.65 for two A100s; 2 H100s (4.7) leave none for a token machine.
    assert (chosen["prompt"], chosen["token"]) == (1, 2) and set(chosen["tried"]) == {1}
    assert chosen["cost"] == pytest.approx(4.35) and chosen["power"] == pytest.approx(3.75)
    with pytest.raises(ValueError, match="by must be"):
        provision_equal("splitwise-ha", 5.0, sizes, by="space")


def test_the_two_azure_traces_differ_as_splitwise_characterizes_them() -> None:
    """The conversation trace's prompts are shorter and its outputs longer than the code
    trace's (medians 1,020 and 129 tokens against 1,469 and 13); a request decodes its
    generated tokens less the first; an unknown trace is a ValueError."""
    from llmsched.workloads import azure_sizes

    code, conversation = trace_sizes("code"), trace_sizes("conversation")
    assert len(code[0]) == 8819 and len(conversation[0]) == 19366
    assert np.median(conversation[0]) == 1020 and np.median(code[0]) == 1469
    assert np.median(conversation[1]) + 1 == 129 and np.median(code[1]) + 1 == 13
    # The trace's first request: 374 prompt tokens, 44 generated (the first by the prompt phase).
    assert azure_sizes("conversation")[0][0] == 374 and azure_sizes("conversation")[1][0] == 44
    assert conversation[0][0] == 374 and conversation[1][0] == 43
    with pytest.raises(ValueError, match="unknown Azure trace 'chat'"):
        trace_sizes("chat")
