"""ModelRunner: layouts and batch mixes agree, chunking and rollback are invisible, a full cache
changes nothing. fp64 so that agreement can be checked tightly."""
from __future__ import annotations

import pytest
import torch

from engine.attention import paged_attention, write_kv
from engine.config import PRESETS
from engine.errors import KVCacheFull, SwarmscopeError
from engine.forward_batch import LaneInput
from engine.kv_cache import PagedKVCache

PROMPTS = {seq: [(seq * 37 + i * 11) % 300 + 1 for i in range(n)]
           for seq, n in ((0, 23), (1, 9), (2, 14), (3, 30))}


def _prefill(runner, seqs, upto: dict[int, int]):
    runner.forward([LaneInput(s, PROMPTS[s][:upto[s]], 0, 0) for s in seqs])


def _mixed_step(upto):
    """A prefill chunk, a decode lane and two verify lanes of different lengths."""
    return [LaneInput(0, PROMPTS[0][upto[0]:upto[0] + 6], upto[0], 2),    # prefill chunk
            LaneInput(1, PROMPTS[1][upto[1]:upto[1] + 1], upto[1], 1),    # decode
            LaneInput(2, PROMPTS[2][upto[2]:upto[2] + 4], upto[2], 4),    # verify 3 drafts
            LaneInput(3, PROMPTS[3][upto[3]:upto[3] + 2], upto[3], 2)]    # verify 1 draft


UPTO = {0: 10, 1: 5, 2: 7, 3: 19}


def _kv_of(runner, seq, n):
    """Cached K and V of seq's first n tokens, every layer: [layers, n, kvh, hd] each."""
    kv, bs = runner.kv, runner.kv.block_size
    table = torch.tensor(runner.kv.blocks.block_table(seq))
    slots = table[torch.arange(n) // bs] * bs + torch.arange(n) % bs
    flat = kv.k.view(kv.k.shape[0], -1, *kv.k.shape[3:]), kv.v.view(kv.v.shape[0], -1, *kv.v.shape[3:])
    return flat[0][:, slots], flat[1][:, slots]


def test_packed_equals_padded_equals_one_lane_at_a_time(tiny_model64, make_runner):
    results, runners = {}, {}
    for mode in ("packed", "padded", "single"):
        runner = make_runner(tiny_model64)
        _prefill(runner, range(4), UPTO)
        lanes = _mixed_step(UPTO)
        if mode == "single":
            out = [runner.forward([lane]).logits[0] for lane in lanes]
        else:
            result = runner.forward(lanes, layout=mode)
            out = result.logits
            assert result.pad == ([0] * 4 if mode == "packed" else [0, 5, 2, 4])
        results[mode], runners[mode] = out, runner
    for mode in ("padded", "single"):
        for got, want in zip(results[mode], results["packed"]):
            assert got.shape == want.shape
            torch.testing.assert_close(got, want, atol=1e-10, rtol=0)
        for lane in _mixed_step(UPTO):
            for got, want in zip(_kv_of(runners[mode], lane.seq_id, lane.end_pos),
                                 _kv_of(runners["packed"], lane.seq_id, lane.end_pos)):
                torch.testing.assert_close(got, want, atol=1e-10, rtol=0)
    assert [t.shape[0] for t in results["packed"]] == [2, 1, 4, 2]


def test_greedy_tokens_of_a_pass_are_each_lanes_rows_argmax(tiny_model64, make_runner):
    runner = make_runner(tiny_model64)
    _prefill(runner, range(4), UPTO)
    out = runner.forward(_mixed_step(UPTO))
    assert [len(rows) for rows in out.greedy()] == [len(logits) for logits in out.logits]
    assert out.greedy() == [logits.argmax(-1).tolist() for logits in out.logits]
    out.rows = None  # lanes' logits alone, as a drafter's or a test's output may come
    assert out.greedy() == [logits.argmax(-1).tolist() for logits in out.logits]


def test_chunked_prefill_equals_whole_prefill(tiny_model64, make_runner):
    ids = PROMPTS[3]
    whole = make_runner(tiny_model64).forward([LaneInput(3, ids, 0, len(ids))]).logits[0]
    runner = make_runner(tiny_model64, block_size=4)
    chunks, pos = [], 0
    for size in (3, 7, 1, 5, 14):  # chunk edges fall inside and on block edges
        chunks.append(runner.forward([LaneInput(3, ids[pos:pos + size], pos, size)]).logits[0])
        pos += size
    torch.testing.assert_close(torch.cat(chunks), whole, atol=1e-10, rtol=0)


def test_rollback_then_refeed_gives_same_logits(tiny_model64, make_runner):
    runner = make_runner(tiny_model64, block_size=4)
    ids = PROMPTS[0]
    runner.forward([LaneInput(0, ids[:10], 0, 0)])
    reference = runner.forward([LaneInput(0, ids[10:12], 10, 2)]).logits[0]
    # Verify 7 wrong drafts (they spill into a new block), then reject them all.
    runner.forward([LaneInput(0, [ids[10]] + [299] * 7, 10, 8)])
    runner.kv.blocks.truncate(0, 10)
    assert runner.kv.blocks.capacity_tokens(0) == 12
    again = runner.forward([LaneInput(0, ids[10:12], 10, 2)]).logits[0]
    torch.testing.assert_close(again, reference, atol=1e-10, rtol=0)


def test_kv_cache_full_changes_nothing(tiny_model64, make_runner):
    runner = make_runner(tiny_model64, num_blocks=6, block_size=4)
    runner.forward([LaneInput(0, PROMPTS[0][:8], 0, 1), LaneInput(1, PROMPTS[1][:8], 0, 1)])
    k_before, v_before = runner.kv.k.clone(), runner.kv.v.clone()
    tables = [runner.kv.blocks.block_table(s) for s in (0, 1, 2)]
    # Lane 0 fits alone (one more block); lane 2 needs two more, which are not there.
    with pytest.raises(KVCacheFull):
        runner.forward([LaneInput(0, [5, 6], 8, 1), LaneInput(2, PROMPTS[2][:8], 0, 1)])
    assert [runner.kv.blocks.block_table(s) for s in (0, 1, 2)] == tables
    assert runner.kv.blocks.num_free_blocks == 2
    assert torch.equal(runner.kv.k, k_before) and torch.equal(runner.kv.v, v_before)


def test_bad_lanes_rejected(tiny_model64, make_runner):
    runner = make_runner(tiny_model64)
    with pytest.raises(ValueError, match="twice"):
        runner.forward([LaneInput(0, [1], 0, 1), LaneInput(0, [2], 1, 1)])
    with pytest.raises(ValueError, match="starts at 9"):
        runner.forward([LaneInput(0, [1], 9, 1)])
    with pytest.raises(ValueError, match="layout"):
        runner.forward([LaneInput(0, [1], 0, 1)], layout="diagonal")


def test_paged_attention_matches_dense_reference():
    """The op alone, against masked dense attention with repeated KV heads."""
    gen = torch.Generator().manual_seed(0)
    nh, kvh, hd, bs, nblocks = 6, 2, 8, 4, 16
    k_cache = torch.zeros(nblocks, bs, kvh, hd, dtype=torch.float64)
    v_cache = torch.zeros_like(k_cache)
    ctx, q_lens = [7, 3, 10], [2, 1, 3]
    tables = [[5, 6], [9, 0], [1, 3, 12]]  # lane 0: one consecutive run (the view path)
    keys = [torch.randn(n, kvh, hd, generator=gen, dtype=torch.float64) for n in ctx]
    values = [torch.randn(n, kvh, hd, generator=gen, dtype=torch.float64) for n in ctx]
    for table, k, v in zip(tables, keys, values):
        slots = torch.tensor([table[p // bs] * bs + p % bs for p in range(k.shape[0])])
        write_kv(k, v, k_cache, v_cache, slots)
    q = torch.randn(sum(q_lens), nh, hd, generator=gen, dtype=torch.float64)
    cu = torch.tensor([0, 2, 3, 6], dtype=torch.int32)
    bt = torch.tensor([t + [0] * (3 - len(t)) for t in tables], dtype=torch.int32)
    out = paged_attention(q, k_cache, v_cache, bt, cu, torch.tensor(ctx, dtype=torch.int32), 0.3)
    for i in range(3):
        qi = q[cu[i]:cu[i + 1]].transpose(0, 1)                       # [nh, q_len, hd]
        ki = keys[i].repeat_interleave(nh // kvh, dim=1).transpose(0, 1)
        vi = values[i].repeat_interleave(nh // kvh, dim=1).transpose(0, 1)
        scores = qi @ ki.transpose(1, 2) * 0.3                        # [nh, q_len, ctx]
        pos = ctx[i] - q_lens[i] + torch.arange(q_lens[i])
        scores = scores.masked_fill(torch.arange(ctx[i]) > pos[:, None], float("-inf"))
        want = (scores.softmax(-1) @ vi).transpose(0, 1)
        torch.testing.assert_close(out[cu[i]:cu[i + 1]], want, atol=1e-12, rtol=0)


def test_a_kv_cache_past_the_memory_is_a_message_not_an_allocator_traceback(monkeypatch):
    """bench decode --ctx 1000000 asked torch for 737 GB and died in its allocator."""
    import engine.kv_cache as kv_cache

    config = PRESETS["tiny-test"]
    per_block = PagedKVCache.bytes_per_block(config, 16, torch.float32)
    monkeypatch.setattr(kv_cache, "free_memory_bytes", lambda device: 10 * per_block)
    with pytest.raises(SwarmscopeError, match="a KV cache of 320 tokens needs .* GB, and .* GB "
                                              "is free: fewer lanes or a shorter context"):
        PagedKVCache(config, 20, 16)
    assert PagedKVCache(config, 10, 16).num_bytes == 10 * per_block  # what fits is made
    monkeypatch.setattr(kv_cache, "free_memory_bytes", lambda device: None)  # unknown: try

    def refused(*args, **kwargs):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory")

    monkeypatch.setattr(kv_cache.torch, "zeros", refused)
    with pytest.raises(SwarmscopeError, match="a KV cache of 320 tokens needs"):
        PagedKVCache(config, 20, 16)
