"""BlockManager bookkeeping (and that it stays torch-free)."""
from __future__ import annotations

import pathlib
import re

import pytest

from engine.block_manager import BlockManager
from engine.errors import KVCacheFull


def test_imports_no_torch():
    source = pathlib.Path(__file__).resolve().parents[2] / "engine" / "block_manager.py"
    assert not re.search(r"^\s*(import|from)\s+torch\b", source.read_text(), re.M)


def test_ensure_allocates_whole_blocks_and_is_idempotent():
    bm = BlockManager(num_blocks=8, block_size=4)
    bm.ensure(1, 5)
    assert len(bm.block_table(1)) == 2 and bm.capacity_tokens(1) == 8 and bm.num_free_blocks == 6
    bm.ensure(1, 8)
    assert len(bm.block_table(1)) == 2
    bm.ensure(1, 9)
    assert len(bm.block_table(1)) == 3 and bm.num_free_blocks == 5
    bm.ensure(2, 1)
    assert not set(bm.block_table(1)) & set(bm.block_table(2))


def test_full_raises_and_changes_nothing():
    bm = BlockManager(num_blocks=4, block_size=4)
    bm.ensure(1, 8)
    table = bm.block_table(1)
    assert bm.blocks_needed(1, 16) == bm.num_free_blocks == 2 and bm.blocks_needed(1, 17) == 3
    with pytest.raises(KVCacheFull):
        bm.ensure(1, 17)
    with pytest.raises(KVCacheFull):
        bm.ensure(2, 12)
    assert bm.block_table(1) == table and bm.num_free_blocks == 2 and 2 not in bm


def test_truncate_frees_only_whole_blocks_past_the_end():
    bm = BlockManager(num_blocks=8, block_size=4)
    bm.ensure(1, 12)
    table = bm.block_table(1)
    bm.truncate(1, 5)                     # tokens 0..4 stay: blocks 0 and 1
    assert bm.block_table(1) == table[:2] and bm.num_free_blocks == 6
    bm.truncate(1, 8)                     # growing is ensure's job; truncate never allocates
    assert bm.block_table(1) == table[:2]
    bm.truncate(1, 0)
    assert bm.block_table(1) == [] and bm.num_free_blocks == 8
    with pytest.raises(ValueError):
        bm.truncate(1, -1)


def test_free_returns_blocks_for_reuse():
    bm = BlockManager(num_blocks=3, block_size=2)
    bm.ensure(1, 6)
    bm.free(1)
    assert bm.num_free_blocks == 3 and 1 not in bm
    bm.ensure(2, 6)
    assert sorted(bm.block_table(2)) == [0, 1, 2]
    bm.free(99)  # freeing an unknown sequence is a no-op


def test_shared_blocks_come_back_when_the_last_holder_lets_go():
    bm = BlockManager(num_blocks=8, block_size=4)
    bm.ensure(1, 10)
    assert bm.share(1, 2, 10) == 8  # the two whole blocks; the third's tokens are not shared
    assert bm.block_table(2) == bm.block_table(1)[:2] and bm.num_free_blocks == 5
    assert bm.sole_blocks(1) == 1 and bm.sole_blocks(2) == 0
    bm.free(1)
    assert bm.num_free_blocks == 6 and bm.sole_blocks(2) == 2
    bm.free(2)
    assert bm.num_free_blocks == 8
    bm.ensure(3, 4)
    with pytest.raises(ValueError):
        bm.share(1, 3, 0)  # a sequence holding blocks starts from no one else's


def test_truncate_lets_go_of_a_shared_block_the_next_token_would_be_written_into():
    bm = BlockManager(num_blocks=8, block_size=4)
    bm.ensure(1, 12)
    bm.share(1, 2, 12)
    assert bm.truncate(2, 8) == 8 and len(bm.block_table(2)) == 2  # next token: a new block
    assert bm.truncate(2, 6) == 4 and bm.block_table(2) == bm.block_table(1)[:1]
    assert bm.truncate(1, 6) == 6  # its second block is its own again
    assert bm.truncate(1, 3) == 0  # the same for the sequence shared from
    bm.truncate(2, 0)
    bm.ensure(1, 3)
    assert bm.truncate(1, 2) == 2  # no one else holds it now: it is written in place
    assert bm.num_free_blocks == 7


def test_random_operations_never_leak_blocks_or_write_into_shared_ones():
    import random
    rng = random.Random(0)
    bm = BlockManager(num_blocks=20, block_size=3)
    held = {}  # seq -> tokens it holds KV for, as the engine tracks them
    for _ in range(3000):
        seq, n = rng.randrange(5), rng.randrange(0, 40)
        op = rng.choice(("ensure", "truncate", "free", "share"))
        try:
            if op == "ensure":
                bm.ensure(seq, max(n, held.get(seq, 0)))
                held[seq] = max(n, held.get(seq, 0))
            elif op == "truncate" and seq in bm:
                held[seq] = bm.truncate(seq, min(n, held[seq]))
            elif op == "free":
                bm.free(seq)
                held.pop(seq, None)
            elif op == "share" and not bm.block_table(seq):
                source = rng.choice(sorted(held)) if held else None
                if source is not None and source != seq:
                    held[seq] = bm.share(source, seq, min(n, held[source]))
        except KVCacheFull:
            pass
        tables = {s: bm.block_table(s) for s in range(5)}
        owned = {b for t in tables.values() for b in t}
        assert len(owned) + bm.num_free_blocks == 20 and not owned & set(bm._free)
        for s, table in tables.items():
            # the block its next token goes into is its own (or not yet allocated)
            nxt = held.get(s, 0) // 3
            if nxt < len(table):
                assert sum(table[nxt] in t for t in tables.values()) == 1
