"""Paged KV bookkeeping: which cache blocks each sequence holds. Plain Python, no torch, so the
scheduler can ask "would this fit?" cheaply and tests run in milliseconds.

A sequence's tokens live in its blocks in order: token p sits in block_table[p // block_size] at
offset p % block_size. Rolling back only shortens a sequence (whole blocks past the new end go
back to the pool); nothing is moved or cleared.

Sequences that start alike share the blocks of their common prefix (`share`): a block goes back
to the pool when the last table holding it lets it go. A shared block is never written: a
sequence writes from its end on, and `truncate` lets go of a shared block its next token would
land in (so that token and the block's others are fed again into one of its own)."""
from __future__ import annotations

from engine.errors import KVCacheFull


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks <= 0 or block_size <= 0:
            raise ValueError(f"need positive num_blocks and block_size, got {num_blocks}, {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        # Popping from the end hands out low block ids first, which keeps test output readable.
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))
        self._tables: dict[int, list[int]] = {}
        self._holders = [0] * num_blocks  # tables holding each block
        self.peak_blocks_held = 0  # the most blocks held at once

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    def blocks_needed(self, seq_id: int, num_tokens: int) -> int:
        """Free blocks `ensure(seq_id, num_tokens)` would take (0 when it already fits)."""
        have = len(self._tables.get(seq_id, ()))
        return max(0, -(-num_tokens // self.block_size) - have)

    def ensure(self, seq_id: int, num_tokens: int) -> None:
        """Give seq_id room for num_tokens tokens; all or nothing."""
        needed = self.blocks_needed(seq_id, num_tokens)
        if needed > len(self._free):
            raise KVCacheFull(f"sequence {seq_id} needs {needed} more KV blocks for {num_tokens} "
                              f"tokens; {len(self._free)} of {self.num_blocks} are free")
        table = self._tables.setdefault(seq_id, [])
        for _ in range(needed):
            block = self._free.pop()
            self._holders[block] = 1
            table.append(block)
        self.peak_blocks_held = max(self.peak_blocks_held, self.num_blocks - len(self._free))

    def share(self, source_id: int, target_id: int, num_tokens: int) -> int:
        """Give `target_id`, which holds no blocks, the blocks of `source_id` wholly inside its
        first `num_tokens` tokens, shared rather than copied; returns the tokens they hold."""
        if self._tables.get(target_id):
            raise ValueError(f"sequence {target_id} already holds KV blocks")
        shared = self._tables[source_id][:num_tokens // self.block_size]
        for block in shared:
            self._holders[block] += 1
        self._tables[target_id] = list(shared)
        return len(shared) * self.block_size

    def truncate(self, seq_id: int, num_tokens: int) -> int:
        """Shrink seq_id to its first num_tokens tokens; blocks wholly past the end are let go.
        Returns the tokens whose KV it still holds: num_tokens, or fewer where the next token
        would be written into a block another sequence shares (that block is let go too)."""
        if num_tokens < 0:
            raise ValueError(f"cannot truncate sequence {seq_id} to {num_tokens} tokens")
        table = self._tables.get(seq_id)
        if table is None:
            return 0
        keep = -(-num_tokens // self.block_size)
        if num_tokens % self.block_size and keep <= len(table) and \
                self._holders[table[keep - 1]] > 1:
            keep -= 1
            num_tokens = keep * self.block_size
        while len(table) > keep:
            self._let_go(table.pop())
        return num_tokens

    def free(self, seq_id: int) -> None:
        for block in reversed(self._tables.pop(seq_id, [])):
            self._let_go(block)

    def sole_blocks(self, seq_id: int) -> int:
        """Blocks no other sequence holds: what freeing seq_id gives back."""
        return sum(self._holders[block] == 1 for block in self._tables.get(seq_id, ()))

    def block_table(self, seq_id: int) -> list[int]:
        return list(self._tables.get(seq_id, ()))

    def capacity_tokens(self, seq_id: int) -> int:
        return len(self._tables.get(seq_id, ())) * self.block_size

    def __contains__(self, seq_id: int) -> bool:
        return seq_id in self._tables

    def _let_go(self, block: int) -> None:
        self._holders[block] -= 1
        if not self._holders[block]:
            self._free.append(block)
