"""Paged KV bookkeeping: which cache blocks each sequence owns. Plain Python, no torch, so the
scheduler can ask "would this fit?" cheaply and tests run in milliseconds.

A sequence's tokens live in its blocks in order: token p sits in block_table[p // block_size] at
offset p % block_size. Rolling back only shortens a sequence (whole blocks past the new end go
back to the pool); nothing is moved or cleared."""
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
            table.append(self._free.pop())

    def truncate(self, seq_id: int, num_tokens: int) -> None:
        """Shrink seq_id to its first num_tokens tokens; blocks wholly past the end are freed."""
        if num_tokens < 0:
            raise ValueError(f"cannot truncate sequence {seq_id} to {num_tokens} tokens")
        table = self._tables.get(seq_id)
        if table is None:
            return
        keep = -(-num_tokens // self.block_size)
        while len(table) > keep:
            self._free.append(table.pop())

    def free(self, seq_id: int) -> None:
        self._free.extend(reversed(self._tables.pop(seq_id, [])))

    def block_table(self, seq_id: int) -> list[int]:
        return list(self._tables.get(seq_id, ()))

    def capacity_tokens(self, seq_id: int) -> int:
        return len(self._tables.get(seq_id, ())) * self.block_size

    def __contains__(self, seq_id: int) -> bool:
        return seq_id in self._tables
