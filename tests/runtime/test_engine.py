"""The engine: its slot cache refuses misuse."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from llmsched import Workload  # noqa: E402
from llmsched.runtime import Engine, run_alone, run_insertion  # noqa: E402
from tests.runtime.conftest import WORKLOAD  # noqa: E402


def test_engine_rejects_misuse(model, prompts) -> None:
    """Busy slots, empty slots, overflowing slots, unknown tokens and missing devices are refused."""
    eng = Engine(model, 2, 16)
    with pytest.raises(ValueError, match=r"token ids must be in 0\.\.255"):
        eng.prefill([[1, 256]], [1])
    static = Workload([28, 2], [2, 28])
    with pytest.raises(ValueError, match="static batching needs 56 cache positions"):
        run_insertion(Engine(model, 2, 31), static, "static")
    eng.prefill([[1, 2, 3]], [0])
    with pytest.raises(ValueError, match="busy"):
        eng.prefill([[4]], [0])
    with pytest.raises(ValueError, match="no prefilled request"):
        eng.decode([1])
    with pytest.raises(ValueError, match="more than max_len"):
        eng.prefill([list(range(20))], [1])
    with pytest.raises(ValueError, match="out of range"):
        eng.decode([5])
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            Engine(model, 1, 16, device="cuda")
    with pytest.raises(ValueError, match="max_len"):
        run_alone(Engine(model, 1, 8), WORKLOAD, prompts)


def test_both_attention_layouts_give_the_tokens_of_a_run_alone(model, prompts, alone) -> None:
    """In float32 each request's greedy tokens in a busy batch equal its tokens alone,
    whether each sequence attends to its slot in place or the batch's slots are gathered
    and padded (the layouts compute the same attention, differently laid out)."""
    for layout in ("in-place", "gathered"):
        engine = Engine(model, 3, 128, attention=layout)
        result = run_insertion(engine, WORKLOAD, "apart", prompts)
        assert result.tokens == alone, layout
    with pytest.raises(ValueError, match=r"attention must be one of \['in-place', 'gathered'\]"):
        Engine(model, 1, 16, attention="paged")


def test_occupy_sets_contexts_without_computing_them(model) -> None:
    """Occupied slots decode from their given lengths; busy, repeated, too long or empty
    contexts are refused."""
    engine = Engine(model, 3, 32)
    engine.occupy([0, 2], [5, 30])
    assert engine.lengths == [5, 0, 30] and engine.pending == [0, None, 0]
    engine.decode([0, 2])
    assert engine.lengths == [6, 0, 31] and engine.counters.forward_tokens == 2
    with pytest.raises(ValueError, match="busy"):
        engine.occupy([0], [3])
    with pytest.raises(ValueError, match="more than max_len=32"):
        engine.occupy([1], [32])
    with pytest.raises(ValueError, match="positive integer"):
        engine.occupy([1], [0])
    with pytest.raises(ValueError, match="repeat"):
        engine.occupy([1, 1], [3, 3])


def test_chunked_layers_give_the_same_tokens(model, prompts, alone) -> None:
    """Running the layers after attention in chunks of a few tokens (a prefill stage of
    many) changes no request's tokens; a chunk size must be a positive integer."""
    engine = Engine(model, 3, 128, chunk_tokens=4)
    assert run_insertion(engine, WORKLOAD, "apart", prompts).tokens == alone
    assert Engine(model, 1, 16).chunk_tokens == 256
    assert Engine(model, 1, 16, chunk_tokens=None).chunk_tokens is None
    with pytest.raises(ValueError, match="chunk_tokens must be a positive integer"):
        Engine(model, 1, 16, chunk_tokens=0)


@pytest.mark.parametrize("layout", ["in-place", "gathered"])
@pytest.mark.parametrize("mode", ["apart", "padded", "static"])
def test_a_paged_cache_gives_the_tokens_of_a_run_alone(model, prompts, alone, layout: str, mode: str) -> None:
    """With the keys and values in blocks of a pool (every pass writing through its slot's
    block table and attention gathering its blocks), every request's tokens equal its tokens
    alone, in every pass the insertion modes use; at the end every block is back in the pool."""
    engine = Engine(model, 3, 128, attention=layout, block_size=5)
    assert engine.paged and engine.blocks == 3 * 26
    result = run_insertion(engine, WORKLOAD, mode, prompts)
    assert result.tokens == alone
    assert 0 < engine.peak_blocks <= engine.blocks
    engine.reset()
    assert engine.blocks_in_use == 0 and engine.peak_blocks == 0


def test_paged_blocks_follow_the_slots_and_a_full_pool_is_refused_before_any_work(model) -> None:
    """A slot holds ceil(tokens / block size) blocks as it grows (a reservation ahead of its
    writes counts), gives them back on release, and a pass that needs more blocks than are
    free raises KVCacheFull and changes nothing."""
    from llmsched.runtime.engine import KVCacheFull

    engine = Engine(model, 3, 64, block_size=4, blocks=6)
    engine.prefill([[1, 2, 3, 4, 5], [6, 7]], [0, 1])
    assert [engine.slot_blocks(s) for s in range(3)] == [2, 1, 0] and engine.blocks_in_use == 3
    engine.reserve(2, 9)  # a request taken: its prompt's blocks and its first token's
    assert engine.slot_blocks(2) == 3 and engine.blocks_short() == 0
    for _ in range(2):
        engine.decode([0, 1])
    assert engine.lengths[:2] == [7, 4] and engine.blocks_in_use == 6
    assert engine.blocks_short() == 1  # slot 1's next token needs a block (slot 0's fits its second)
    state = (list(engine.lengths), list(engine.pending), engine.counters.forwards)
    with pytest.raises(KVCacheFull, match="needs 1 more KV-cache blocks of 4 tokens; 0 of the pool's 6"):
        engine.decode([0, 1])
    assert (list(engine.lengths), list(engine.pending), engine.counters.forwards) == state
    engine.release(1)
    assert engine.blocks_in_use == 5 and engine.blocks_short() == -1
    engine.decode([0])
    assert engine.peak_blocks == 6
    with pytest.raises(KVCacheFull):
        engine.reserve(1, 13)
    with pytest.raises(ValueError, match="more than max_len=64"):
        engine.reserve(1, 65)
    with pytest.raises(ValueError, match="block_size must be a positive integer"):
        Engine(model, 1, 16, block_size=0)
    with pytest.raises(ValueError, match="blocks must be a positive integer"):
        Engine(model, 1, 16, block_size=4, blocks=0)
    with pytest.raises(ValueError, match="blocks needs a block_size"):
        Engine(model, 1, 16, blocks=4)
    unpaged = Engine(model, 1, 16)
    unpaged.reserve(0, 9)
    assert not unpaged.paged and unpaged.blocks_in_use == 0 and unpaged.blocks_short() == 0
