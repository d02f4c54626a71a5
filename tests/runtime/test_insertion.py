"""Insertion modes: static batches, padded insertion and prefill apart."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from llmsched import Workload  # noqa: E402
from llmsched.runtime import Engine, run_insertion  # noqa: E402
from tests.runtime.conftest import WORKLOAD  # noqa: E402


@pytest.mark.parametrize("mode", ["static", "padded", "apart"])
def test_tokens_do_not_depend_on_the_batch(
    engine: Engine, prompts, alone: list[list[int]], mode: str
) -> None:
    """Every request's greedy tokens are the same alone and in a busy batch with insertions."""
    result = run_insertion(engine, WORKLOAD, mode, prompts)  # type: ignore[arg-type]
    assert result.tokens == alone
    assert [len(t) for t in result.tokens] == WORKLOAD.output_tokens.tolist()


def test_insertion_modes_count_their_waste(engine: Engine, prompts) -> None:
    """Prefill apart computes exactly the prompts and outputs; static batching pays idle
    tokens (finished requests computing to the end of their batch) and pads."""
    out = WORKLOAD.output_tokens.tolist()
    prompt = WORKLOAD.prompt_tokens.tolist()
    apart = run_insertion(engine, WORKLOAD, "apart", prompts)
    assert apart.padded_tokens == apart.idle_tokens == 0
    assert apart.forward_tokens == sum(prompt) + sum(out)
    static = run_insertion(engine, WORKLOAD, "static", prompts)
    batches = [list(range(b, min(b + 3, len(out)))) for b in range(0, len(out), 3)]
    assert static.idle_tokens == sum(max(out[i] for i in b) - out[i] for b in batches for i in b)
    assert static.padded_tokens == sum(max(prompt[i] for i in b) - prompt[i] for b in batches for i in b)
    padded = run_insertion(engine, WORKLOAD, "padded", prompts)
    assert padded.padded_tokens > 0
    # Real tokens through the layers: every prompt token and every output token fed once
    # (plus, for static batching, the idle ones).
    assert padded.forward_tokens - padded.padded_tokens == sum(prompt) + sum(out)
    assert static.forward_tokens - static.padded_tokens == sum(prompt) + sum(out) + static.idle_tokens
    assert padded.output_tokens == static.output_tokens == apart.output_tokens == sum(out)


def test_insertion_needs_an_offline_batch(engine: Engine, prompts) -> None:
    """Requests arriving after time 0 are refused: the modes serve one waiting batch."""
    late = Workload(
        WORKLOAD.prompt_tokens, WORKLOAD.output_tokens, arrival=[0, 0, 0.05, 0.05, 0.1, 0.1, 0.12, 0.3]
    )
    with pytest.raises(ValueError, match="offline batch"):
        run_insertion(engine, late, "apart", prompts)
