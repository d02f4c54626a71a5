"""KVMemory: blocks of tokens, the watermark, what admission may take, what one request may hold."""

from __future__ import annotations

import pytest

from llmsched.core.memory import KVMemory


def test_blocks_round_up_and_the_watermark_keeps_blocks_free() -> None:
    memory = KVMemory(100, block_size=16, watermark=0.05)
    assert memory.tokens == 1600 and memory.reserved_blocks == 5
    assert memory.blocks_for(0) == 0 and memory.blocks_for(1) == 1
    assert memory.blocks_for(16) == 1 and memory.blocks_for(17) == 2
    # Two requests into 60 free blocks: 60 - 5 kept - 2 (a block each for rounding) = 53 blocks.
    assert memory.admission_tokens(60, 2) == 53 * 16
    assert memory.admission_tokens(6, 2) == 0
    assert memory.longest_request() == (100 - 5 - 1) * 16


def test_admission_tokens_always_fit_whatever_the_prompts() -> None:
    """Any k <= requests prompts summing to admission_tokens(free, requests) take at most
    free - reserved blocks, each with room for its first decoded token."""
    memory = KVMemory(50, block_size=8, watermark=0.1)
    for requests in (1, 2, 3, 7):
        room = memory.admission_tokens(40, requests)
        for k in range(1, requests + 1):
            # The worst split: k - 1 prompts of one token, the rest in one.
            prompts = [1] * (k - 1) + [room - (k - 1)] if room >= k else []
            if prompts:
                assert sum(memory.blocks_for(p + 1) for p in prompts) <= 40 - memory.reserved_blocks


def test_of_bytes_sizes_the_memory_of_a_machine() -> None:
    """Eight 80 GiB GPUs less Llama-2-70B's 135 GB of weights, at 2,621,440 bytes a token
    (SplitwiseSim's figures), in blocks of 16."""
    memory = KVMemory.of_bytes(8 * 85_899_345_920 - 135e9, 2_621_440, block_size=16)
    assert memory.blocks == int((8 * 85_899_345_920 - 135e9) // (2_621_440 * 16)) == 13_165
    with pytest.raises(ValueError, match="hold no block"):
        KVMemory.of_bytes(1000, 2_621_440)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"blocks": 0}, ValueError, "blocks must be"),
        ({"blocks": 10, "block_size": 0}, ValueError, "block_size must be"),
        ({"blocks": 10, "watermark": 1.0}, ValueError, "watermark must be"),
        ({"blocks": 2.5}, TypeError, "blocks must be"),
    ],
)
def test_bad_memory_is_refused(kwargs: dict[str, float], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        KVMemory(**kwargs)  # type: ignore[arg-type]
