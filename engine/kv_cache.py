"""Paged KV storage: one torch tensor per attention layer for K and for V (and one per
short-convolution layer for its B * x, engine/short_conv.py), indexed by the block manager's
block ids. The model sees only slot mappings and block tables, never sequences. Gated DeltaNet
layers keep a state per sequence instead (`recurrent`, engine/recurrent_state.py), which limits
where such a model's sequences can be cut back to (`truncate`)."""
from __future__ import annotations

import torch

from engine.block_manager import BlockManager
from engine.config import ModelConfig
from engine.devices import free_memory_bytes
from engine.errors import SwarmscopeError
from engine.gated_delta import row_width
from engine.recurrent_state import RecurrentStates


def recurrent_bytes_per_sequence(config: ModelConfig, dtype: torch.dtype) -> int:
    """What a sequence holds beside its blocks: its recurrent layers' states (none where the
    model has none)."""
    return RecurrentStates.bytes_for(config, row_width(config), dtype) if config.delta_layers \
        else 0


class PagedKVCache:
    def __init__(self, config: ModelConfig, num_blocks: int, block_size: int = 16,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> None:
        self.config = config
        self.blocks = BlockManager(num_blocks, block_size)
        # A tensor's own device: "cuda" becomes "cuda:0", as the model's weights report it.
        self.dtype, self.device = dtype, torch.empty(0, device=device).device
        shape = (len(config.attention_layers), num_blocks, block_size, config.num_kv_heads,
                 config.head_dim)
        # one block more, never handed out and never written: `zero_slot`'s
        conv_shape = (len(config.conv_layers), num_blocks + 1, block_size, config.hidden_size)
        needed = PagedKVCache.bytes_per_block(config, block_size, dtype) * num_blocks
        free = free_memory_bytes(self.device)
        too_large = SwarmscopeError(f"a KV cache of {num_blocks * block_size} tokens needs "
                                    f"{needed / 1e9:.1f} GB"
                                    + (f", and {free / 1e9:.1f} GB is free" if free else "")
                                    + ": fewer lanes or a shorter context")
        if free is not None and needed > free:  # past it the machine swaps, or is killed
            raise too_large
        try:
            # [layers, blocks, bs, kvh, hd]. Zeros, not empty: padding queries of the padded
            # layout may read unwritten slots, and garbage there must at least be finite.
            self.k = torch.zeros(shape, dtype=dtype, device=self.device)
            self.v = torch.zeros(shape, dtype=dtype, device=self.device)
            self.conv = torch.zeros(conv_shape, dtype=dtype, device=self.device)
        except (RuntimeError, MemoryError) as exc:  # torch.OutOfMemoryError is a RuntimeError
            raise too_large from exc
        self.recurrent = (RecurrentStates(config, row_width(config), dtype, self.device)
                          if config.delta_layers else None)

    @staticmethod
    def bytes_per_block(config: ModelConfig, block_size: int, dtype: torch.dtype) -> int:
        elem = torch.empty((), dtype=dtype).element_size()
        per_token = (2 * len(config.attention_layers) * config.num_kv_heads * config.head_dim
                     + len(config.conv_layers) * config.hidden_size)
        return per_token * block_size * elem

    @property
    def block_size(self) -> int:
        return self.blocks.block_size

    @property
    def zero_slot(self) -> int:
        """A slot of the convolution rows' block past the others, which stays zero: what a short
        convolution reads for the positions before a sequence's first (preceding_slots)."""
        return self.blocks.num_blocks * self.block_size

    @property
    def num_bytes(self) -> int:
        """The whole cache: its blocks, and the recurrent states' slots made so far."""
        return self._block_bytes * self.blocks.num_blocks + self._recurrent("num_bytes")

    @property
    def held_bytes(self) -> int:
        """The cache's bytes sequences hold now (a block shared by several counted once)."""
        return (self._block_bytes * (self.blocks.num_blocks - self.blocks.num_free_blocks)
                + self._recurrent("held_bytes"))

    @property
    def peak_bytes(self) -> int:
        """The most of the cache held at once (the blocks' peak and the states', each)."""
        return self._block_bytes * self.blocks.peak_blocks_held + self._recurrent("peak_bytes")

    @property
    def _block_bytes(self) -> int:
        return self.bytes_per_block(self.config, self.block_size, self.dtype)

    def _recurrent(self, name: str) -> int:
        return 0 if self.recurrent is None else getattr(self.recurrent, name)

    def truncate(self, seq_id: int, num_tokens: int) -> int:
        """Drop what `seq_id` holds past its first `num_tokens` tokens; the tokens it still holds:
        fewer where its last block is shared (BlockManager.truncate), or where recurrent layers
        cannot go on from there: as many as their checkpoint holds, or none (the rest are fed
        again)."""
        kept = self.blocks.truncate(seq_id, num_tokens)
        if self.recurrent is not None and kept not in self.recurrent.reach(seq_id):
            kept = self.blocks.truncate(seq_id, self.recurrent.rewind(seq_id, kept))
        return kept

    def copy_sequence(self, source_id: int, target_id: int, num_tokens: int) -> None:
        """Give `target_id` its own blocks holding the first `num_tokens` cached tokens of
        `source_id` (a fork: both continue independently)."""
        if self.recurrent is not None:
            self.recurrent.fork(source_id, target_id, num_tokens)
        self.blocks.ensure(target_id, num_tokens)
        target = self.blocks.block_table(target_id)
        source = self.blocks.block_table(source_id)[:len(target)]
        self.k[:, target] = self.k[:, source]
        self.v[:, target] = self.v[:, source]
        self.conv[:, target] = self.conv[:, source]
