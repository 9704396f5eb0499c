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


def test_random_operations_never_leak_or_share_blocks():
    import random
    rng = random.Random(0)
    bm = BlockManager(num_blocks=20, block_size=3)
    for _ in range(2000):
        seq, n = rng.randrange(5), rng.randrange(0, 40)
        op = rng.choice(("ensure", "truncate", "free"))
        try:
            getattr(bm, op)(seq, *(() if op == "free" else (n,)))
        except KVCacheFull:
            pass
        tables = [bm.block_table(s) for s in range(5)]
        owned = [b for t in tables for b in t]
        assert len(owned) == len(set(owned)) and len(owned) + bm.num_free_blocks == 20


def test_bad_sizes_rejected():
    with pytest.raises(ValueError):
        BlockManager(0, 4)
