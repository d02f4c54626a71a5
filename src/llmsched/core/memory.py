"""KV-cache memory: how many keys and values an engine can hold, in blocks.

An engine with memory holds each request's keys and values in blocks of ``block_size``
tokens, as vLLM's paged attention does: a request holding ``t`` tokens (its prompt, then
one more per token decoded) takes ``ceil(t / block_size)`` blocks, from the moment it is
taken (its prompt's blocks, and room for its first decoded token) until it finishes.

* **Admission.** Requests are taken only while their blocks fit in what is free, less a
  ``watermark`` share of all blocks kept free for the decoding requests to grow into
  (vLLM's default 1%); first come first served, a prompt that does not fit waits, and so
  do those behind it.
* **Preemption.** When the decoding requests need a block and none is free, the request
  taken last among those that have decoded is preempted by recompute (vLLM's default):
  its blocks are freed, it goes back to the waiting requests, and when taken again its
  prompt and the tokens it has decoded are prefilled anew (*recomputed*) before it decodes
  the rest. The schedule records each stretch of a request's work as a *piece*.

:meth:`KVMemory.of_bytes` sizes the memory from a machine's: device memory times GPUs less
the model's weights, over the bytes of keys and values per token
(:class:`llmsched.core.hardware.Preset` holds both for measured machines).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from llmsched.core.checks import positive_int, real

__all__ = ["DEFAULT_BLOCK_SIZE", "KVMemory"]

#: vLLM's default block size on a GPU (tokens per block).
DEFAULT_BLOCK_SIZE = 16
# More blocks than this are refused (2**40 tokens of 16: far beyond any machine).
_MAX_BLOCKS = 1 << 40


@dataclass(frozen=True)
class KVMemory:
    """An engine's KV-cache memory: ``blocks`` blocks of ``block_size`` tokens.

    Parameters
    ----------
    blocks
        Blocks of keys and values the engine holds (a positive integer).
    block_size
        Tokens per block (a positive integer; vLLM's 16 by default).
    watermark
        Share of all blocks that admission keeps free, in ``[0, 1)`` (vLLM's 0.01): taking
        a request never leaves fewer free blocks than that, so that the decoding requests
        have room to grow before one is preempted.
    """

    blocks: int
    block_size: int = DEFAULT_BLOCK_SIZE
    watermark: float = 0.01

    def __post_init__(self) -> None:
        object.__setattr__(self, "blocks", positive_int("blocks", self.blocks, maximum=_MAX_BLOCKS))
        object.__setattr__(self, "block_size", positive_int("block_size", self.block_size, maximum=1 << 20))
        watermark = real("watermark", self.watermark, low=0.0, high=1.0, high_open=True)
        object.__setattr__(self, "watermark", watermark)

    @classmethod
    def of_bytes(
        cls,
        memory_bytes: float,
        kv_bytes_per_token: float,
        block_size: int = DEFAULT_BLOCK_SIZE,
        watermark: float = 0.01,
    ) -> KVMemory:
        """The memory of ``memory_bytes`` bytes for keys and values (the device memory less
        the weights) at ``kv_bytes_per_token`` bytes a token, in whole blocks.

        Raises
        ------
        ValueError
            When either is not a finite number > 0, or the memory holds no whole block.
        """
        memory = real("memory_bytes", memory_bytes, low=0.0, low_open=True)
        per_token = real("kv_bytes_per_token", kv_bytes_per_token, low=0.0, low_open=True)
        size = positive_int("block_size", block_size, maximum=1 << 20)
        blocks = int(memory // (per_token * size))
        if blocks < 1:
            raise ValueError(
                f"{memory:.6g} bytes hold no block of {size} tokens at {per_token:.6g} bytes a token"
            )
        return cls(blocks, size, watermark)

    @property
    def tokens(self) -> int:
        """Tokens the memory holds when every block is full."""
        return self.blocks * self.block_size

    @property
    def reserved_blocks(self) -> int:
        """Blocks that admission keeps free: ``ceil(watermark * blocks)``."""
        return math.ceil(self.watermark * self.blocks)

    def blocks_for(self, tokens: Any) -> Any:
        """Blocks that ``tokens`` tokens of one request take (``ceil(tokens / block_size)``;
        ints or an int numpy array)."""
        return -(-tokens // self.block_size)

    def admission_tokens(self, free_blocks: int, requests: int) -> int:
        """The most prompt tokens ``requests`` requests may hold in all to be taken into
        ``free_blocks`` free blocks, the watermark kept: each takes ``ceil((p + 1) / B)``
        blocks (its prompt and its first decoded token), at most ``p / B + 1``, so prompts
        of ``(free - reserved - requests) * B`` tokens in all always fit."""
        return max(0, (free_blocks - self.reserved_blocks - requests) * self.block_size)

    def longest_request(self) -> int:
        """The most tokens (prompt plus output) one request may hold: alone in the engine,
        each of its pieces (its prompt and the tokens decoded before a preemption) must be
        admitted with the watermark kept (:meth:`admission_tokens` of one request), and it
        must decode to its end (0 when no request fits)."""
        return max(0, (self.blocks - self.reserved_blocks - 1) * self.block_size)
