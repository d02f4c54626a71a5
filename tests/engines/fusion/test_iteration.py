"""A fused iteration's cost: one pass for decode rows and prompt chunks, never less than its parts."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched.engines.fusion.iteration import chunk_squares, fused_iteration_time
from tests.engines.fusion.test_rule import CONTEXT, PAPER


def test_a_fused_iteration_is_priced_as_one_pass() -> None:
    """Decoding alone is a decode iteration, chunks alone a prefill stage, both their sum
    less the smaller fixed cost; a prompt's chunks add up to its square."""
    assert fused_iteration_time(PAPER, 10, 0, 0, 0) == pytest.approx(PAPER.decode_iteration_time(10))
    assert fused_iteration_time(PAPER, 0, 0, 300, 0) == pytest.approx(PAPER.prefill_time(300))
    both = (
        PAPER.decode_iteration_time(10) + PAPER.prefill_time(300) - min(PAPER.prefill_base, PAPER.decode_base)
    )
    assert fused_iteration_time(PAPER, 10, 0, 300, 0) == pytest.approx(both)
    chunks = np.array([100, 100, 37])
    starts = np.cumsum(chunks) - chunks
    assert int(chunk_squares(starts, chunks).sum()) == 237**2
    got = fused_iteration_time(
        CONTEXT, np.array([0, 4]), np.array([0, 900]), np.array([64, 64]), np.array([4096, 4096])
    )
    assert got[0] == pytest.approx(CONTEXT.prefill_time(64, 4096))
    assert got[1] == pytest.approx(
        CONTEXT.decode_iteration_time(4, 900) + CONTEXT.prefill_time(64, 4096) - CONTEXT.decode_base
    )


def test_a_fused_iteration_never_costs_less_than_its_parts() -> None:
    """Under a batch table that prices one request below a_d, the shared fixed cost is
    capped by the batch's own time: chunks plus decoding cost at least the chunks alone."""
    from llmsched import ContextCostModel

    model = ContextCostModel(1.0, 0.0, 1e-9, 0.5, 0.0, 0.0, 50, decode_by_batch=(0.01,))
    alone = fused_iteration_time(model, 0, 0, 10, 100)
    both = fused_iteration_time(model, 1, 0, 10, 100)
    assert both >= alone >= fused_iteration_time(model, 1, 0, 0, 0)


def test_a_model_that_prices_mixed_iterations_answers_for_them() -> None:
    """A cost model with mixed_iteration_time (a measured table) is asked, not the fused rule:
    under SplitwiseSim's factor a mixed iteration is 1.1x the prompt curve at its tokens."""
    from llmsched import TableCostModel

    table = TableCostModel((100, 1000), (0.02, 0.2), (1, 8), (0.01, 0.02), mixed_factor=1.1)
    assert fused_iteration_time(table, 4, 0, 296, 0) == pytest.approx(1.1 * table.prefill_time(300))
    assert fused_iteration_time(table, 4, 0, 0, 0) == table.decode_iteration_time(4)
    assert fused_iteration_time(table, 0, 0, 296, 0) == table.prefill_time(296)


def test_a_fused_instance_takes_a_table_and_refuses_levels() -> None:
    """Tables price chunks by their tokens; prefill levels do not."""
    from llmsched import LinearCostModel, TableCostModel, Workload
    from llmsched.engines.fusion.iteration import check_fused_instance

    table = TableCostModel((100, 1000), (0.02, 0.2), (1, 8), (0.01, 0.02))
    assert check_fused_instance(Workload([50, 900], [3, 3]), table, 4, 512) == 512
    with pytest.raises(TypeError, match="a LinearCostModel, a ContextCostModel or a TableCostModel"):
        check_fused_instance(Workload([50], [3]), LinearCostModel.paper().to_levels(4), 4, 512)
