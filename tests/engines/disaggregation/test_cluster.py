"""The Splitwise cluster: the KV transfer overlaps layer by layer; bad cluster input is refused."""

from __future__ import annotations

import pytest

from llmsched import Workload
from llmsched.engines.disaggregation.cluster import transfer_seconds
from llmsched.fleet.disaggregated import simulate_disaggregated
from tests.fleet.test_disaggregated import LLAMA_65B, PAPER, _cluster, _workload


def test_the_transfer_overlaps_layer_by_layer() -> None:
    """LLaMA-65B's keys and values are 2.6 MB a token; 1,000 tokens over 25 GB/s take 0.105 s,
    of which only the last layer's remains after a stage long enough to cover the rest."""
    assert LLAMA_65B == 2 * 80 * 64 * 128 * 2
    x = 1000 * LLAMA_65B / 25e9
    assert transfer_seconds(1000, 1.0, LLAMA_65B, 25.0, 80, overlap=False) == pytest.approx(x)
    assert transfer_seconds(1000, 1.0, LLAMA_65B, 25.0, 80, overlap=True) == pytest.approx(x / 80)
    # A short stage leaves the link behind: x - S (L - 1) / L.
    assert transfer_seconds(1000, 0.01, LLAMA_65B, 25.0, 80, overlap=True) == pytest.approx(
        x - 0.01 * 79 / 80
    )
    # A link's latency is paid by every transfer, on top of its bytes.
    assert transfer_seconds(1000, 1.0, LLAMA_65B, 25.0, 80, False, 1e-4) == pytest.approx(x + 1e-4)
    assert _cluster(kv_latency=2e-3, overlap=False).transfer(0, 0.0) == pytest.approx(2e-3)
    with pytest.raises(ValueError, match="kv_latency"):
        _cluster(kv_latency=-1.0)


def test_bad_input_is_refused() -> None:
    with pytest.raises(
        TypeError, match="prompt_cost must be a LinearCostModel, a ContextCostModel or a TableCostModel"
    ):
        _cluster(prompt_cost=PAPER.to_levels(4))
    with pytest.raises(ValueError, match="kv_bandwidth"):
        _cluster(kv_bandwidth=0.0)
    with pytest.raises(ValueError, match="token_machines"):
        _cluster(token_machines=0)
    with pytest.raises(ValueError, match="capacity"):
        simulate_disaggregated(Workload([6000], [3]), _cluster())
    with pytest.raises(TypeError, match="DisaggregatedCluster"):
        simulate_disaggregated(_workload(3), "cluster")


def test_a_measured_table_prices_either_pool() -> None:
    """A TableCostModel is a per-token model: either pool takes one, and a batch past its table
    is refused by the check, naming the call."""
    from llmsched import preset

    table = preset("llama2-70b/h100/tp8").cost()
    cluster = _cluster(prompt_cost=table, token_cost=table)
    cluster.check(Workload([500, 700], [3, 4]))
    with pytest.raises(ValueError, match=r"decode_iteration_time\(129\) = inf"):
        _cluster(prompt_cost=table, token_cost=table, token_clients=200).check(Workload([5] * 140, [2] * 140))
