"""The decode loop: a KV cache for J clients and the forward passes that use it.

Each client owns a slot, filled from position 0 with up to ``max_len`` tokens. Its keys and
values live either in a region of the cache of its own (the default) or, with ``block_size``,
in blocks of that many tokens taken from a pool of ``blocks`` as the slot grows and given
back when it is released, as vLLM's paged attention holds them (a slot's block table maps
its positions into the pool; :class:`KVCacheFull` when the pool has too few). Four forward
passes:

* :meth:`Engine.prefill` runs a batch of prompts packed into one sequence (no padding between
  them: the projections and the MLP see exactly the prompts' tokens; attention runs in one
  call, each prompt masked to its own keys) and writes each prompt's keys and values into
  its client's slot, "prefill apart, then embed" as Baton calls it;
* :meth:`Engine.decode` runs one iteration for a set of slots, each at its own length;
* :meth:`Engine.mixed_step` runs decoding slots beside prompt chunks in one packed pass;
* :meth:`Engine.padded_step` runs rows padded to a common length, as static batching and
  insertion with padding do; pad tokens are computed and counted, but never written to the
  cache and never attended to.

Greedy decoding with forced output lengths: after a request's prompt, the argmax of the
last logits is its *pending* token; each decode iteration feeds the pending token (writing
its keys and values), records it, and takes the next argmax as the new pending token. A
request with N output tokens therefore takes N decode iterations and records N tokens; an
end-of-sequence token is not special.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import torch
from torch.nn import functional

from llmsched.runtime.model import DecoderLayer, LlamaModel, apply_rotary

__all__ = ["ATTENTION_LAYOUTS", "CPU_CHUNK_TOKENS", "Counters", "Engine", "KVCacheFull"]

#: Tokens the CPU runs through the layers after attention at a time (see ``Engine``).
CPU_CHUNK_TOKENS = 256

#: How the engine's prefill and decode passes read the key/value cache.
ATTENTION_LAYOUTS = {
    "in-place": "each sequence attends to a view of its own slot, no copy: a decode iteration "
    "reads each request's context once (cost grows with the sum of the contexts), a prefill "
    "stage attends within each prompt (cost grows with the sum of the squared prompt lengths)",
    "gathered": "the batch's slots copied out and padded to the longest sequence: cost grows "
    "with the batch times the longest context, and prefill with prompts times the widest",
}


class KVCacheFull(RuntimeError):
    """A pass needs more KV-cache blocks than the engine's pool has free (the pool is as the
    engine was built; a scheduler that knows it preempts before this happens)."""


@dataclass
class Counters:
    """Counters of what the engine computed."""

    forward_tokens: int = 0  # token positions through the layers, pads included
    padded_tokens: int = 0  # of those, pads
    forwards: int = 0


class Engine:
    """A model, its slot cache, and the device clock.

    Parameters
    ----------
    model
        The transformer (its weights are moved to ``device`` and ``dtype``).
    slots
        J, the number of clients.
    max_len
        Tokens a slot holds (prompt plus output).
    device, dtype
        Where and in what precision to run (float32 on the CPU for exact comparisons).
    threads
        If given, ``torch.set_num_threads(threads)`` (process-wide). On a small CPU, one
        thread avoids the thread pool's spinning when another process competes for the
        cores: a tiny model's decode iteration took 1.6 ms on one thread and 149 ms on two
        next to a busy process.
    chunk_tokens
        The layers after attention (output projection and MLP) run on at most this many
        tokens at a time, None for all at once. ``"auto"``: :data:`CPU_CHUNK_TOKENS` on the
        CPU, None on a GPU. On the CPU a long prefill's MLP activations (megabytes at a
        thousand tokens) outgrow the core's cache and its time per token rises with the
        stage; in chunks it stays flat (``benchmarks/runtime_layouts.py`` times both).
    attention
        How :meth:`prefill` and :meth:`decode` read the cache (see :data:`ATTENTION_LAYOUTS`):
        ``"in-place"`` (each sequence attends to a view of its own slot, so work grows with
        the context tokens read) or ``"gathered"`` (slots gathered and padded to the longest,
        the layout before in-place reads; kept to compare the two).
    block_size, blocks
        Paged KV memory: with ``block_size`` (tokens per block), every slot's keys and values
        live in blocks from one pool of ``blocks`` (default: enough for every slot at
        ``max_len``), allocated as the slot's tokens are written (or reserved ahead by :meth:`reserve`)
        and returned by :meth:`release`; a pass that needs more blocks than are free raises
        :class:`KVCacheFull` before it computes anything. Attention then reads each slot's
        blocks through its block table (a gather). None: a fixed region per slot.
    """

    def __init__(
        self,
        model: LlamaModel,
        slots: int,
        max_len: int,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        threads: int | None = None,
        attention: str = "in-place",
        chunk_tokens: int | Literal["auto"] | None = "auto",
        block_size: int | None = None,
        blocks: int | None = None,
    ):
        if not isinstance(model, LlamaModel):
            raise TypeError(f"model must be a LlamaModel, got {type(model).__name__}")
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ValueError(f"slots must be a positive integer, got {slots!r}")
        if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 2:
            raise ValueError(f"max_len must be an integer >= 2, got {max_len!r}")
        cfg = model.config
        if max_len > cfg.max_position_embeddings:
            raise ValueError(f"max_len {max_len} exceeds the model's {cfg.max_position_embeddings} positions")
        if threads is not None:
            if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
                raise ValueError(f"threads must be a positive integer, got {threads!r}")
            torch.set_num_threads(threads)
        self.device = torch.device(device)
        if self.device.type == "cuda":
            if not torch.cuda.is_available():
                raise ValueError("device 'cuda' was asked for, but torch sees no CUDA GPU")
            if (self.device.index or 0) >= torch.cuda.device_count():
                raise ValueError(
                    f"{self.device} does not exist: torch sees {torch.cuda.device_count()} GPU(s)"
                )
        elif self.device.type not in ("cpu", "mps"):
            raise ValueError(f"device must be cpu, cuda[:N] or mps, got {device!r}")
        if attention not in ATTENTION_LAYOUTS:
            raise ValueError(f"attention must be one of {list(ATTENTION_LAYOUTS)}, got {attention!r}")
        self.attention = attention
        if chunk_tokens == "auto":
            chunk_tokens = CPU_CHUNK_TOKENS if self.device.type == "cpu" else None
        if chunk_tokens is not None and (
            isinstance(chunk_tokens, bool) or not isinstance(chunk_tokens, int) or chunk_tokens < 1
        ):
            raise ValueError(f"chunk_tokens must be a positive integer, None or 'auto', got {chunk_tokens!r}")
        self.chunk_tokens: int | None = chunk_tokens
        self.dtype = dtype
        # The model is moved and cast in place (a float16 engine leaves the model in float16).
        self.model = model.to(device=self.device, dtype=dtype).eval()
        self.model.reset_rotary()  # the rotary frequencies stay in float32, whatever dtype
        self.config = cfg
        self.slots = slots
        self.max_len = max_len
        if block_size is None:
            if blocks is not None:
                raise ValueError("blocks needs a block_size (paged KV memory)")
            shape: tuple[int, ...] = (
                cfg.num_hidden_layers,
                slots,
                cfg.num_key_value_heads,
                max_len,
                cfg.head_dim,
            )
            self.blocks = 0
        else:
            if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
                raise ValueError(f"block_size must be a positive integer or None, got {block_size!r}")
            if blocks is None:
                blocks = slots * -(-max_len // block_size)
            if isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 1:
                raise ValueError(f"blocks must be a positive integer, got {blocks!r}")
            # The pool along the token axis: block b holds pool positions [b * B, (b + 1) * B).
            shape = (cfg.num_hidden_layers, cfg.num_key_value_heads, blocks * block_size, cfg.head_dim)
            self.blocks = blocks
        self.block_size = block_size
        self.keys = torch.zeros(shape, device=self.device, dtype=dtype)
        self.values = torch.zeros(shape, device=self.device, dtype=dtype)
        self._tables: list[list[int]] = [[] for _ in range(slots)]  # each slot's blocks, in order
        self._free = list(range(self.blocks - 1, -1, -1))  # a stack: the lowest block is taken first
        self.peak_blocks = 0  # the most blocks in use at once since the last reset
        if block_size is not None:
            # Each slot position's place in the pool (0 where no block is mapped: never read,
            # as every pass masks or slices a slot to its own tokens).
            width = -(-max_len // block_size) * block_size
            self._pool_index = torch.zeros((slots, width), device=self.device, dtype=torch.long)
            self._offsets = torch.arange(block_size, device=self.device)
        self.lengths = [0] * slots
        self.pending: list[int | None] = [None] * slots
        self.last_fed: dict[int, int] = {}  # slot -> token fed by the last padded step
        self.counters = Counters()

    # ------------------------------------------------------------------ bookkeeping
    def sync(self) -> None:
        """Wait for the device (a no-op on the CPU)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        elif self.device.type == "mps":
            torch.mps.synchronize()

    def clock(self) -> float:
        """Seconds, after the device has finished its queued work."""
        self.sync()
        return time.perf_counter()

    def release(self, slot: int) -> None:
        """Free a slot for another request (its cache is overwritten from position 0; its
        blocks, when paged, go back to the pool)."""
        self._check_slot(slot)
        self.lengths[slot] = 0
        self.pending[slot] = None
        table = self._tables[slot]
        if table:
            self._free.extend(reversed(table))
            table.clear()

    def reset(self) -> None:
        for slot in range(self.slots):
            self.release(slot)
        self.counters = Counters()
        self.peak_blocks = 0

    # ------------------------------------------------------------------ paged memory
    @property
    def paged(self) -> bool:
        """Whether the cache is paged (built with ``block_size``)."""
        return self.block_size is not None

    @property
    def blocks_in_use(self) -> int:
        """Blocks the slots hold now (0 unpaged)."""
        return self.blocks - len(self._free)

    def slot_blocks(self, slot: int) -> int:
        """Blocks ``slot`` holds (0 unpaged)."""
        self._check_slot(slot)
        return len(self._tables[slot])

    def reserve(self, slot: int, tokens: int) -> None:
        """Make ``slot`` hold blocks for at least ``tokens`` tokens (as a scheduler that admits
        a request reserves its prompt's blocks and its first token's); a no-op unpaged, past
        the check against ``max_len``.

        Raises
        ------
        KVCacheFull
            When the pool has too few free blocks (nothing is allocated then).
        """
        self._check_slot(slot)
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise ValueError(f"tokens must be a non-negative integer, got {tokens!r}")
        if tokens > self.max_len:
            raise ValueError(f"slot {slot} would hold {tokens} tokens, more than max_len={self.max_len}")
        self._grow({slot: tokens})

    def blocks_short(self) -> int:
        """Blocks the pool lacks for every decoding slot (one with a pending token) to write
        one more token: positive when the next decode iteration of all of them cannot run
        (0 unpaged)."""
        if self.block_size is None:
            return 0
        size = self.block_size
        need = sum(
            max(0, -(-(self.lengths[slot] + 1) // size) - len(self._tables[slot]))
            for slot in range(self.slots)
            if self.pending[slot] is not None
        )
        return need - len(self._free)

    def _grow(self, tokens: dict[int, int]) -> None:
        """Give each slot of ``tokens`` blocks for that many tokens, all or none."""
        size = self.block_size
        if size is None:
            return
        wants = {
            slot: -(-n // size) - len(self._tables[slot])
            for slot, n in tokens.items()
            if -(-n // size) > len(self._tables[slot])
        }
        needed = sum(wants.values())
        if needed > len(self._free):
            raise KVCacheFull(
                f"the pass needs {needed} more KV-cache blocks of {size} tokens; {len(self._free)} of "
                f"the pool's {self.blocks} are free"
            )
        for slot, count in wants.items():
            table = self._tables[slot]
            taken = [self._free.pop() for _ in range(count)]
            first = len(table) * size
            table.extend(taken)
            starts = torch.tensor(taken, device=self.device) * size
            positions = (starts[:, None] + self._offsets).reshape(-1)
            self._pool_index[slot, first : first + count * size] = positions
        self.peak_blocks = max(self.peak_blocks, self.blocks - len(self._free))

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of keys and values one token holds in the cache (every layer)."""
        cfg = self.config
        return 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * self.keys.element_size()

    @torch.inference_mode()
    def receive(self, source: Engine, source_slot: int, slot: int) -> int:
        """Copy the keys and values ``source`` holds in ``source_slot`` (a prefilled request,
        its first token pending) into this engine's empty ``slot``, every layer at once, from
        the other engine's device to this one's; the slot then decodes as if it had been
        prefilled here. Both engines must run the same model in the same precision. Returns
        the bytes copied (the copy is queued on the device: time it with :meth:`clock`).

        Raises
        ------
        ValueError
            On another model or precision, a source slot with no prefilled request, or a busy
            slot here.
        KVCacheFull
            When this engine's pool has too few free blocks.
        """
        if not isinstance(source, Engine):
            raise TypeError(f"source must be an Engine, got {type(source).__name__}")
        if source.config != self.config or source.dtype != self.dtype:
            raise ValueError("keys and values move only between engines of the same model and precision")
        source._check_slot(source_slot)
        self._check_slot(slot)
        token = source.pending[source_slot]
        if token is None:
            raise ValueError(f"source slot {source_slot} has no prefilled request to send")
        if self.lengths[slot] or self.pending[slot] is not None:
            raise ValueError(f"slot {slot} is busy; release it before receiving into it")
        n = source.lengths[source_slot]
        self._room(slot, n + 1)
        self._grow({slot: n})
        if source.block_size is None:
            keys, values = source.keys[:, source_slot, :, :n], source.values[:, source_slot, :, :n]
        else:
            index = source._pool_index[source_slot, :n]
            keys, values = source.keys.index_select(2, index), source.values.index_select(2, index)
        keys, values = keys.to(self.device, non_blocking=True), values.to(self.device, non_blocking=True)
        if self.block_size is None:
            self.keys[:, slot, :, :n] = keys
            self.values[:, slot, :, :n] = values
        else:
            index = self._pool_index[slot, :n]
            self.keys.index_copy_(2, index, keys)
            self.values.index_copy_(2, index, values)
        self.lengths[slot] = n
        self.pending[slot] = token
        return n * self.kv_bytes_per_token

    def _kv(self, layer: int, slot: int, span: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of ``slot``'s first ``span`` positions, ``[kv, span, d]``: a view of
        its region, or gathered from its blocks."""
        if self.block_size is None:
            return self.keys[layer, slot, :, :span], self.values[layer, slot, :, :span]
        index = self._pool_index[slot, :span]
        return self.keys[layer].index_select(1, index), self.values[layer].index_select(1, index)

    def _kv_rows(self, layer: int, slots: torch.Tensor, span: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of several slots' first ``span`` positions, ``[B, kv, span, d]`` (a copy)."""
        if self.block_size is None:
            return self.keys[layer, slots, :, :span], self.values[layer, slots, :, :span]
        index = self._pool_index[slots, :span]  # [B, span]
        return self.keys[layer][:, index].transpose(0, 1), self.values[layer][:, index].transpose(0, 1)

    def occupy(self, slots: Sequence[int], lengths: Sequence[int]) -> None:
        """Mark each empty slot ``slots[i]`` as holding ``lengths[i]`` tokens, without
        computing them: for timing decode iterations at a given context.

        A pass's time does not depend on the values in the cache, only on how many are
        read, so the profiler sets contexts this way instead of prefilling them (a
        125M-parameter model on one CPU thread prefills a few hundred tokens a second).
        The slot's keys and values are whatever its cache holds (finite: zeros or an
        earlier request's) and its pending token is 0; tokens decoded from it mean nothing.
        """
        if len(slots) != len(lengths):
            raise ValueError(f"occupy needs one length per slot, got {len(slots)} slots and {len(lengths)}")
        if len(set(slots)) != len(slots):
            raise ValueError(f"occupy slots repeat: {list(slots)}")
        for slot, length in zip(slots, lengths, strict=True):
            self._check_slot(slot)
            if self.lengths[slot] or self.pending[slot] is not None:
                raise ValueError(f"slot {slot} is busy; release it before occupying it")
            if isinstance(length, bool) or not isinstance(length, int) or length < 1:
                raise ValueError(f"a slot's length must be a positive integer, got {length!r}")
            self._room(slot, length + 1)
        self._grow(dict(zip(slots, lengths, strict=True)))
        for slot, length in zip(slots, lengths, strict=True):
            self.lengths[slot] = length
            self.pending[slot] = 0

    def _check_slot(self, slot: int) -> None:
        if not 0 <= slot < self.slots:
            raise ValueError(f"slot {slot} is out of range 0..{self.slots - 1}")

    def _check_tokens(self, tokens: Sequence[int]) -> None:
        if len(tokens) and (min(tokens) < 0 or max(tokens) >= self.config.vocab_size):
            raise ValueError(f"token ids must be in 0..{self.config.vocab_size - 1} (the vocabulary)")

    def _room(self, slot: int, tokens: int) -> None:
        if self.lengths[slot] + tokens > self.max_len:
            raise ValueError(
                f"slot {slot} would hold {self.lengths[slot] + tokens} tokens, more than "
                f"max_len={self.max_len}"
            )

    def _feeds(self, slots: Sequence[int]) -> list[int]:
        """The pending token each decoding slot of ``slots`` feeds next (each checked to be a
        slot with a prefilled request and room for one more token)."""
        fed = []
        for slot in slots:
            self._check_slot(slot)
            token = self.pending[slot]
            if token is None:
                raise ValueError(f"slot {slot} has no prefilled request to decode")
            self._room(slot, 1)
            fed.append(token)
        return fed

    # ------------------------------------------------------------------ passes
    @torch.inference_mode()
    def prefill(self, prompts: Sequence[Sequence[int]], slots: Sequence[int]) -> None:
        """Prefill ``prompts[i]`` into the empty slot ``slots[i]``, packed, without padding."""
        if len(prompts) != len(slots) or not prompts:
            raise ValueError("prefill needs one slot per prompt, and at least one prompt")
        if len(set(slots)) != len(slots):
            raise ValueError(f"prefill slots repeat: {list(slots)}")
        for prompt, slot in zip(prompts, slots, strict=True):
            self._check_slot(slot)
            if self.lengths[slot] or self.pending[slot] is not None:
                raise ValueError(f"slot {slot} is busy; release it before prefilling it again")
            if len(prompt) == 0:
                raise ValueError("a prompt needs at least one token")
            self._check_tokens(prompt)
            self._room(slot, len(prompt) + 1)
        self._grow({slot: len(prompt) for prompt, slot in zip(prompts, slots, strict=True)})
        lengths = [len(p) for p in prompts]
        tokens = torch.tensor([t for p in prompts for t in p], device=self.device, dtype=torch.long)
        positions = torch.cat([torch.arange(n, device=self.device) for n in lengths])
        slot_of = torch.repeat_interleave(
            torch.tensor(list(slots), device=self.device), torch.tensor(lengths, device=self.device)
        )
        segments = []
        offset = 0
        for slot, n in zip(slots, lengths, strict=True):
            segments.append((slot, offset, n))
            offset += n
        if self.attention == "in-place":
            # Each prompt attends causally to its own keys and values, read in place from
            # its slot after this layer wrote them: work grows with the sum of the squared
            # prompt lengths, as in a varlen attention kernel, not with prompts times the
            # widest.
            def attend(layer: int, q: torch.Tensor) -> torch.Tensor:
                out = torch.empty_like(q)
                for slot, start, n in segments:
                    rows = q[start : start + n].transpose(0, 1).unsqueeze(0)  # [1, h, n, d]
                    k, v = self._kv(layer, slot, n)  # [kv, n, d], a view (unpaged)
                    out[start : start + n] = self._attention(
                        rows, k.unsqueeze(0), v.unsqueeze(0), None, causal=True
                    )[0].transpose(0, 1)
                return out

        else:
            # Attention in one call: each prompt's queries in a row of its own, masked to its
            # own keys (causal), gathered and padded to the widest prompt.
            widest = max(lengths)
            row_of = torch.repeat_interleave(
                torch.arange(len(prompts), device=self.device), torch.tensor(lengths, device=self.device)
            )
            slot_index = torch.tensor(list(slots), device=self.device)
            key_pos = torch.arange(widest, device=self.device)
            own = key_pos[None, :] < torch.tensor(lengths, device=self.device)[:, None]  # [B, widest]
            mask = (key_pos[None, :, None] >= key_pos[None, None, :]) & own[:, None, :]  # [B, q, k]

            def attend(layer: int, q: torch.Tensor) -> torch.Tensor:
                rows = q.new_zeros((len(prompts), widest, q.shape[1], q.shape[2]))
                rows[row_of, positions] = q
                k, v = self._kv_rows(layer, slot_index, widest)  # [B, kv, widest, d]: a copy
                out = self._attention(rows.transpose(1, 2), k, v, mask[:, None], causal=False)
                return out.transpose(1, 2)[row_of, positions]

        hidden = self._layers(tokens, positions, slot_of, positions, attend)
        last = torch.tensor([s + n - 1 for _, s, n in segments], device=self.device)
        chosen = self._greedy(hidden[last])
        for slot, n, token in zip(slots, lengths, chosen, strict=True):
            self.lengths[slot] = n
            self.pending[slot] = token
        self.counters.forward_tokens += len(tokens)
        self.counters.forwards += 1

    @torch.inference_mode()
    def decode(self, slots: Sequence[int]) -> list[int]:
        """One decode iteration of ``slots``: each feeds and returns its pending token."""
        if not slots:
            raise ValueError("a decode iteration needs at least one slot")
        if len(set(slots)) != len(slots):
            raise ValueError(f"decode slots repeat: {list(slots)}")
        fed = self._feeds(slots)
        self._grow({slot: self.lengths[slot] + 1 for slot in slots})
        tokens = torch.tensor(fed, device=self.device, dtype=torch.long)
        positions = torch.tensor([self.lengths[s] for s in slots], device=self.device)
        slot_index = torch.tensor(list(slots), device=self.device)
        if self.attention == "in-place":
            # Each slot's query attends to its own keys and values in place (a view of the
            # slot, no copy), up to and including the token written this iteration: work
            # grows with the context tokens read, as in a paged-attention engine.
            # The query heads that share a key/value head are that head's queries (one query
            # position each, nothing masked): plain attention over [kv, group] queries, which
            # on the CPU runs at a third of the cost of the grouped-query path per call.
            spans = [(slot, self.lengths[slot] + 1) for slot in slots]
            kv_heads = self.config.num_key_value_heads
            group = self.config.num_attention_heads // kv_heads

            def attend(layer: int, q: torch.Tensor) -> torch.Tensor:
                grouped = q.view(len(spans), 1, kv_heads, group, q.shape[-1])  # [B, 1, kv, group, d]
                outs = []
                for row, (slot, span) in enumerate(spans):
                    k, v = self._kv(layer, slot, span)  # views of the slot (unpaged): nothing copied
                    outs.append(
                        functional.scaled_dot_product_attention(grouped[row], k.unsqueeze(0), v.unsqueeze(0))
                    )  # [1, kv, group, d]
                return torch.cat(outs).view(q.shape)

        else:
            # Every slot's cache gathered up to the longest span (a copy of B x span per
            # layer) and masked to its own length: work grows with B times the longest.
            span = max(self.lengths[s] for s in slots) + 1  # from the host: no device sync
            mask = torch.arange(span, device=self.device)[None, :] <= positions[:, None]  # [B, span]

            def attend(layer: int, q: torch.Tensor) -> torch.Tensor:
                k, v = self._kv_rows(layer, slot_index, span)  # [B, kv, span, d]
                return self._attention(q.unsqueeze(2), k, v, mask[:, None, None, :], causal=False)[:, :, 0]

        hidden = self._layers(tokens, positions, slot_index, positions, attend, batched=True)
        chosen = self._greedy(hidden)
        for slot, token in zip(slots, chosen, strict=True):
            self.lengths[slot] += 1
            self.pending[slot] = token
        self.counters.forward_tokens += len(slots)
        self.counters.forwards += 1
        return fed

    @torch.inference_mode()
    def mixed_step(self, decode_slots: Sequence[int], chunks: Sequence[tuple[Any, ...]]) -> list[int]:
        """One mixed iteration, packed, without padding: every slot of ``decode_slots`` feeds
        its pending token, and each ``(slot, tokens)`` of ``chunks`` writes the next piece of
        its prompt after what the slot holds (an empty slot starts its prompt), each chunk
        attending causally to its slot's cached prefix and to itself. A slot whose prompt a
        chunk completes gets its first token pending (``last`` marks it: pass every chunk of a
        prompt but the last with ``last=False`` by giving it as ``(slot, tokens, False)``).

        Returns the tokens the decoding slots fed, in their order.
        """
        if not decode_slots and not chunks:
            raise ValueError("a mixed iteration needs a decoding slot or a chunk")
        pieces: list[tuple[int, list[int], bool]] = []
        for chunk in chunks:
            slot, tokens = chunk[0], list(chunk[1])
            last = bool(chunk[2]) if len(chunk) > 2 else True
            self._check_slot(slot)
            if not tokens:
                raise ValueError(f"a chunk for slot {slot} needs at least one token")
            if self.pending[slot] is not None:
                raise ValueError(f"slot {slot} is decoding; a chunk needs a slot whose prompt is under way")
            self._check_tokens(tokens)
            self._room(slot, len(tokens) + (1 if last else 0))
            pieces.append((slot, tokens, last))
        slots = [slot for slot, _, _ in pieces] + list(decode_slots)
        if len(set(slots)) != len(slots):
            raise ValueError(f"mixed-iteration slots repeat: {slots}")
        fed = self._feeds(decode_slots)
        grow = {slot: self.lengths[slot] + len(tokens) for slot, tokens, _ in pieces}
        self._grow(grow | {slot: self.lengths[slot] + 1 for slot in decode_slots})
        # Packed rows: the chunks' tokens, then one per decoding slot.
        segments = []  # (slot, row offset, tokens, first position)
        flat: list[int] = []
        position_list: list[int] = []
        for slot, tokens, _ in pieces:
            start = self.lengths[slot]
            segments.append((slot, len(flat), len(tokens), start))
            flat += tokens
            position_list += range(start, start + len(tokens))
        for slot, token in zip(decode_slots, fed, strict=True):
            segments.append((slot, len(flat), 1, self.lengths[slot]))
            flat.append(token)
            position_list.append(self.lengths[slot])
        tokens_t = torch.tensor(flat, device=self.device, dtype=torch.long)
        positions = torch.tensor(position_list, device=self.device)
        slot_of = torch.tensor([slot for slot, _, n, _ in segments for _ in range(n)], device=self.device)
        # Query i of a segment (at position first + i) sees its slot's keys up to its own
        # position: the same masks in every layer, built once.
        masks = [
            (
                torch.arange(first + n, device=self.device)[None, :]
                <= first + torch.arange(n, device=self.device)[:, None]
            )[None, None]
            for _, _, n, first in segments
        ]

        def attend(layer: int, q: torch.Tensor) -> torch.Tensor:
            out = torch.empty_like(q)
            for (slot, row, n, first), mask in zip(segments, masks, strict=True):
                rows = q[row : row + n].transpose(0, 1).unsqueeze(0)  # [1, h, n, d]
                k, v = self._kv(layer, slot, first + n)  # its prefix and itself
                out[row : row + n] = self._attention(
                    rows, k.unsqueeze(0), v.unsqueeze(0), mask, causal=False
                )[0].transpose(0, 1)
            return out

        hidden = self._layers(tokens_t, positions, slot_of, positions, attend)
        ends = [row + n - 1 for _, row, n, _ in segments]
        chosen = self._greedy(hidden[torch.tensor(ends, device=self.device)])
        for slot, _, n, first in segments:
            self.lengths[slot] = first + n
        # A chunk leaves its first token pending only when it completes the prompt.
        for (slot, _, last), token in zip(pieces, chosen[: len(pieces)], strict=True):
            if last:
                self.pending[slot] = token
        for slot, token in zip(decode_slots, chosen[len(pieces) :], strict=True):
            self.pending[slot] = token
        self.counters.forward_tokens += len(flat)
        self.counters.forwards += 1
        return fed

    @torch.inference_mode()
    def padded_step(self, rows: Sequence[tuple[int, Sequence[int]]]) -> None:
        """Rows ``(slot, tokens)`` padded to the longest: a prompt for an empty slot, or the
        pending token of a decoding slot (pass ``[]``: it feeds and records its pending
        token). Pads run through every layer; they are counted, not cached, not attended to.

        Returns nothing; the tokens fed to decoding slots are in ``last_fed``.
        """
        if not rows:
            raise ValueError("a padded step needs at least one row")
        slots = [slot for slot, _ in rows]
        if len(set(slots)) != len(slots):
            raise ValueError(f"padded-step slots repeat: {slots}")
        feeds: list[list[int]] = []
        self.last_fed = {}
        for slot, tokens in rows:
            self._check_slot(slot)
            if len(tokens):
                if self.lengths[slot] or self.pending[slot] is not None:
                    raise ValueError(f"slot {slot} is busy; a prompt needs an empty slot")
                feeds.append(list(tokens))
                self._check_tokens(feeds[-1])
                self._room(slot, len(tokens) + 1)
            else:
                pending = self.pending[slot]
                if pending is None:
                    raise ValueError(f"slot {slot} has no prefilled request to decode")
                feeds.append([pending])
                self.last_fed[slot] = pending
                self._room(slot, 1)
        self._grow({slot: self.lengths[slot] + len(f) for slot, f in zip(slots, feeds, strict=True)})
        width = max(len(f) for f in feeds)
        n_rows = len(rows)
        valid = torch.zeros(n_rows, width, dtype=torch.bool, device=self.device)
        grid = torch.zeros(n_rows, width, dtype=torch.long, device=self.device)
        start = torch.tensor([self.lengths[s] for s in slots], device=self.device)
        for r, feed in enumerate(feeds):
            grid[r, : len(feed)] = torch.tensor(feed, device=self.device)
            valid[r, : len(feed)] = True
        counts = valid.sum(1)
        offsets = torch.arange(width, device=self.device)[None, :]
        positions = start[:, None] + torch.minimum(offsets, counts[:, None] - 1)  # pads repeat the last
        slot_index = torch.tensor(slots, device=self.device)
        span = max(self.lengths[s] + len(f) for s, f in zip(slots, feeds, strict=True))
        key_pos = torch.arange(span, device=self.device)
        # Query (r, j) sees cache positions up to its own position, pads included as queries
        # (they repeat their row's last real position), never as keys.
        mask = key_pos[None, None, :] <= positions[:, :, None]  # [rows, width, span]
        flat_valid = valid.reshape(-1)

        def attend(layer: int, q: torch.Tensor) -> torch.Tensor:
            k, v = self._kv_rows(layer, slot_index, span)
            qr = q.reshape(n_rows, width, q.shape[1], q.shape[2]).transpose(1, 2)  # [rows, h, w, d]
            out = self._attention(qr, k, v, mask[:, None], causal=False)
            return out.transpose(1, 2).reshape(n_rows * width, q.shape[1], q.shape[2])

        hidden = self._layers(
            grid.reshape(-1),
            positions.reshape(-1),
            slot_index.repeat_interleave(width),
            positions.reshape(-1),
            attend,
            write=flat_valid,
        )
        last = torch.arange(n_rows, device=self.device) * width + counts - 1
        chosen = self._greedy(hidden[last])
        for slot, feed, token in zip(slots, feeds, chosen, strict=True):
            self.lengths[slot] += len(feed)
            self.pending[slot] = token
        self.counters.forward_tokens += n_rows * width
        self.counters.padded_tokens += n_rows * width - int(counts.sum())
        self.counters.forwards += 1

    # ------------------------------------------------------------------ internals
    def _greedy(self, hidden: torch.Tensor) -> list[int]:
        logits = self.model.lm_head(self.model.model.norm(hidden))
        return [int(t) for t in torch.argmax(logits.float(), dim=-1).tolist()]

    def _attention(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None,
        causal: bool,
    ) -> torch.Tensor:
        """q ``[B, heads, Tq, d]``; k, v ``[B, kv_heads, Tk, d]`` (grouped-query)."""
        gqa = self.config.num_attention_heads != self.config.num_key_value_heads
        return functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=gqa
        )

    def _layers(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        write_slots: torch.Tensor,
        write_positions: torch.Tensor,
        attend: object,
        batched: bool = False,
        write: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Run every layer over packed ``tokens``; returns the last hidden states ``[N, h]``."""
        cfg, model = self.config, self.model
        heads, kv_heads, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        cos, sin = model.rotary(positions)
        if write is not None:
            w_slots, w_pos = write_slots[write], write_positions[write]
        else:
            w_slots, w_pos = write_slots, write_positions
        pool = None if self.block_size is None else self._pool_index[w_slots, w_pos]  # where, paged
        x = model.model.embed_tokens(tokens)
        layers = cast("list[DecoderLayer]", list(model.model.layers))
        for index, layer in enumerate(layers):
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            q = apply_rotary(attn.q_proj(h).view(-1, heads, d), cos, sin)
            k = apply_rotary(attn.k_proj(h).view(-1, kv_heads, d), cos, sin)
            v = attn.v_proj(h).view(-1, kv_heads, d)
            if write is not None:
                k, v = k[write], v[write]
            if pool is None:
                self.keys[index, w_slots, :, w_pos] = k
                self.values[index, w_slots, :, w_pos] = v
            else:
                self.keys[index].index_copy_(1, pool, k.transpose(0, 1))
                self.values[index].index_copy_(1, pool, v.transpose(0, 1))
            o = attend(index, q).reshape(-1, heads * d)  # type: ignore[operator]
            chunk = self.chunk_tokens
            if chunk is None or len(x) <= chunk:
                x = x + attn.o_proj(o)
                x = x + layer.mlp(layer.post_attention_layernorm(x))
            else:  # in chunks: each chunk's activations stay in the CPU's cache
                x = torch.cat(
                    [
                        self._after_attention(layer, x[i : i + chunk], o[i : i + chunk])
                        for i in range(0, len(x), chunk)
                    ]
                )
        return x

    @staticmethod
    def _after_attention(layer: DecoderLayer, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        x = x + layer.self_attn.o_proj(o)
        return x + layer.mlp(layer.post_attention_layernorm(x))
