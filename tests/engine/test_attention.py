"""Attention calls: how lanes are merged into calls, which kernel attends each, and that neither
changes the output."""
from __future__ import annotations

import itertools
import math
import random
import time

import pytest
import torch

from engine.attention import (GATHER_MAX_BYTES, KEY_BUCKET, PACKED_SDPA_MIN, QUERY_ROW_BUCKET,
                              matmuls_beat_sdpa, merge_query_lengths, paged_attention,
                              plan_attention, runs_faster, split_by_context, write_kv)


def _brute_force_cost(q_lens, ctx_lens, call_cost, gather_cost):
    """Cheapest split of the sorted distinct lengths into runs, each padded or unfolded, trying
    every split."""
    lengths = sorted(set(q_lens))
    best = float("inf")
    for cuts in itertools.product((False, True), repeat=len(lengths) - 1):
        runs, run = [], [lengths[0]]
        for q_len, cut in zip(lengths[1:], cuts):
            if cut:
                runs.append(run)
                run = []
            run.append(q_len)
        runs.append(run)
        cost = 0.0
        for run in runs:
            lanes = [i for i, q in enumerate(q_lens) if q in run]
            cost += call_cost + _call_pairs([q_lens[i] for i in lanes],
                                            max(ctx_lens[i] for i in lanes), gather_cost)[0]
        best = min(best, cost)
    return best


def _call_pairs(q_lens, ctx, gather_cost):
    """(cost, unfolded): the cheaper of padding every lane to the longest query and unfolding."""
    padded = len(q_lens) * max(q_lens) * ctx
    unfolded = sum(q_lens) * ctx + gather_cost * (sum(q_lens) - len(q_lens)) * ctx
    return min(padded, unfolded), unfolded < padded


@pytest.mark.parametrize("seed", range(40))
def test_merge_is_the_cheapest_split_into_runs(seed):
    rng = random.Random(seed)
    lanes = rng.randint(1, 12)
    q_lens = [rng.choice((1, 1, 2, 3, 5, 9, 17)) for _ in range(lanes)]
    ctx_lens = [q + rng.randint(0, 600) for q in q_lens]
    call_cost, gather_cost = rng.choice((0, 500, 3000, 20000)), rng.choice((0, 5, 10**6))
    calls = merge_query_lengths(q_lens, ctx_lens, call_cost, gather_cost)
    assert sorted(lane for call in calls for lane in call.lanes) == list(range(lanes))
    cost = 0.0
    for call in calls:
        pairs, unfolded = _call_pairs([q_lens[i] for i in call.lanes],
                                      max(ctx_lens[i] for i in call.lanes), gather_cost)
        assert call.unfolded == unfolded
        cost += call_cost + pairs
    assert cost == pytest.approx(_brute_force_cost(q_lens, ctx_lens, call_cost, gather_cost))


def test_merging_trades_calls_for_padding():
    q_lens, ctx_lens = [1, 2, 3, 5], [300, 300, 300, 300]
    assert len(merge_query_lengths(q_lens, ctx_lens, 0)) == 4  # calls are free: never pad
    assert len(merge_query_lengths(q_lens, ctx_lens, 10**9)) == 1  # padding is free: one call
    # Long contexts make padding dear: a 17-query lane is not merged with one-query lanes.
    assert len(merge_query_lengths([17, 1, 1, 1], [2000] * 4, 3000)) == 2


def test_a_lane_drafting_among_many_is_unfolded_and_a_batch_drafting_alike_is_not():
    """One lane of 16 with a draft: one call, the lane's two queries as two one-query lanes, so
    no lane is padded. All 16 with one draft each: padding wastes nothing, unfolding would gather
    every lane twice."""
    [call] = merge_query_lengths([2] + [1] * 15, [80] * 16)
    assert call.unfolded and call.lanes == list(range(16))
    [call] = merge_query_lengths([2] * 16, [300] * 16)
    assert not call.unfolded
    # Many queries a lane make a second call cheaper than gathering that lane's keys 9 times.
    assert [c.unfolded for c in merge_query_lengths([9] + [1] * 15, [300] * 16)] == [False] * 2


def test_an_unfolded_call_over_every_lane_reads_its_rows_in_order():
    q_lens = [1, 2, 1, 1]
    q, k_cache, v_cache, tables, bt, cu, ctx_lens = _lanes(q_lens, [30, 31, 29, 30])
    plan = plan_attention(bt, cu, ctx_lens, 4, 3, q.dtype, call_cost_pairs=10**6,
                          gather_cost_pairs=0)
    assert len(plan.groups) == 1 and plan.groups[0].num_lanes == 5
    assert plan.in_order and not plan.padded


def _lanes(q_lens, ctx, nh=6, kvh=2, hd=8, bs=4, nblocks=64, seed=1):
    """fp64 queries and a paged cache with each lane's context in shuffled blocks."""
    gen = torch.Generator().manual_seed(seed)
    k_cache = torch.zeros(nblocks, bs, kvh, hd, dtype=torch.float64)
    v_cache = torch.zeros_like(k_cache)
    free = list(range(nblocks))
    random.Random(0).shuffle(free)
    tables = []
    for n in ctx:
        tables.append([free.pop() for _ in range(-(-n // bs))])
        slots = torch.tensor([tables[-1][p // bs] * bs + p % bs for p in range(n)])
        write_kv(torch.randn(n, kvh, hd, generator=gen, dtype=torch.float64),
                 torch.randn(n, kvh, hd, generator=gen, dtype=torch.float64),
                 k_cache, v_cache, slots)
    width = max(len(t) for t in tables)
    bt = torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32)
    cu = torch.tensor([0, *itertools.accumulate(q_lens)], dtype=torch.int32)
    q = torch.randn(sum(q_lens), nh, hd, generator=gen, dtype=torch.float64)
    return q, k_cache, v_cache, tables, bt, cu, torch.tensor(ctx, dtype=torch.int32)


def _one_lane_at_a_time(q, k_cache, v_cache, tables, q_lens, ctx, scale, window=None,
                        softcap=None):
    """Textbook causal GQA attention, lane by lane: query j of a lane sits at ctx - q_len + j
    and sees the keys up to it, or the last `window` of them; scores capped by `softcap`."""
    bs, kvh = k_cache.shape[1], k_cache.shape[2]
    group = q.shape[1] // kvh
    out, row = [], 0
    for table, q_len, n in zip(tables, q_lens, ctx):
        slots = torch.tensor([table[p // bs] * bs + p % bs for p in range(n)])
        keys = k_cache.view(-1, kvh, k_cache.shape[3])[slots].repeat_interleave(group, dim=1)
        values = v_cache.view(-1, kvh, v_cache.shape[3])[slots].repeat_interleave(group, dim=1)
        for j in range(q_len):
            seen = n - q_len + j + 1
            first = max(0, seen - window) if window else 0
            scores = torch.einsum("hd,khd->hk", q[row + j], keys[first:seen]) * scale
            if softcap:
                scores = softcap * torch.tanh(scores / softcap)
            out.append(torch.einsum("hk,khd->hd", scores.softmax(-1), values[first:seen]))
        row += q_len
    return torch.stack(out)


@pytest.mark.parametrize("call_cost,gather_cost", ((0, 5), (3000, 5), (10**9, 5), (3000, 0),
                                                   (10**9, 0)))
@pytest.mark.parametrize("q_lens", ([1, 3, 1, 6, 2, 17, 1], [1, 1, 2, 5, 5, 9]))
def test_every_plan_attends_like_one_lane_at_a_time(q_lens, call_cost, gather_cost):
    """fp64: one call per length, front-padded merged calls, unfolded calls (gathering is free),
    lanes in any order or already in length order, all against the textbook."""
    ctx = [max(q, c) for q, c in zip(q_lens, [2, 9, 40, 6, 13, 30, 1])]
    q, k_cache, v_cache, tables, bt, cu, ctx_lens = _lanes(q_lens, ctx)
    plan = plan_attention(bt, cu, ctx_lens, 4, 3, q.dtype, call_cost_pairs=call_cost,
                          gather_cost_pairs=gather_cost)
    got = paged_attention(q, k_cache, v_cache, bt, cu, ctx_lens, 0.3, plan=plan)
    want = _one_lane_at_a_time(q, k_cache, v_cache, tables, q_lens, ctx, 0.3)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    if call_cost == 0:
        assert len(plan.groups) == len(set(q_lens))
    if gather_cost == 0:  # every call unfolded: one query a lane, none padded
        assert not plan.padded and {g.q_len for g in plan.groups} == {1}


@pytest.mark.parametrize("call_cost,gather_cost", ((0, 5), (3000, 5), (10**9, 5), (3000, 0)))
@pytest.mark.parametrize("window,softcap", ((5, None), (8, 0.5), (None, 0.5), (1, None)))
def test_windowed_and_capped_plans_attend_like_the_textbook(window, softcap, call_cost,
                                                           gather_cost):
    """Sliding windows (a query sees its last `window` keys) and capped scores, in every kind
    of call; a window reads only the blocks its lanes' queries can see."""
    q_lens = [1, 3, 1, 6, 2, 17, 1]
    ctx = [2, 9, 40, 6, 13, 30, 1]
    q, k_cache, v_cache, tables, bt, cu, ctx_lens = _lanes(q_lens, ctx)
    plan = plan_attention(bt, cu, ctx_lens, 4, 3, q.dtype, call_cost_pairs=call_cost,
                          gather_cost_pairs=gather_cost, window=window, softcap=bool(softcap))
    got = paged_attention(q, k_cache, v_cache, bt, cu, ctx_lens, 0.3, plan=plan, window=window,
                          softcap=softcap)
    want = _one_lane_at_a_time(q, k_cache, v_cache, tables, q_lens, ctx, 0.3, window, softcap)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    assert all(g.matmul for g in plan.groups) == bool(softcap)
    full = plan_attention(bt, cu, ctx_lens, 4, 3, q.dtype, call_cost_pairs=call_cost,
                          gather_cost_pairs=gather_cost)
    if window and not softcap:  # (matmuls pad keys to KEY_BUCKET, more than these contexts)
        # lane 2's 40 keys, say: its one query sees the last `window` of them
        assert (sum(g.blocks.numel() for g in plan.groups)
                < sum(g.blocks.numel() for g in full.groups))


@pytest.mark.parametrize("call_cost", (10**9, 3000))
def test_merged_calls_equal_one_call_per_length(call_cost):
    """fp64: front-padded queries, padding rows of a lane shorter than the padding, contexts of
    different lengths in one call; every row must equal the unmerged plan's."""
    q_lens = [1, 3, 1, 6, 2, 17, 1]
    ctx = [2, 9, 40, 6, 13, 30, 1]  # lane 0 and lane 6 are shorter than the longest query
    q, k_cache, v_cache, _, bt, cu, ctx_lens = _lanes(q_lens, ctx)

    def attend(cost):
        plan = plan_attention(bt, cu, ctx_lens, 4, 3, q.dtype, call_cost_pairs=cost)
        return plan, paged_attention(q, k_cache, v_cache, bt, cu, ctx_lens, 0.3, plan=plan)

    exact_plan, exact = attend(0)
    merged_plan, merged = attend(call_cost)
    assert len(exact_plan.groups) == len(set(q_lens)) and not exact_plan.padded
    assert len(merged_plan.groups) < len(exact_plan.groups) and merged_plan.padded
    assert merged.shape == exact.shape and merged.is_contiguous()
    torch.testing.assert_close(merged, exact, atol=1e-12, rtol=0)


@pytest.mark.parametrize("fast_bf16, matmuls_win", ((True, True), (True, False), (False, True)))
def test_bf16_calls_of_many_rows_are_matmuls_where_the_cpu_does_them_faster(
        monkeypatch, fast_bf16, matmuls_win):
    """bf16: a call of at least MATMUL_MIN_ROWS query rows a KV head and MATMUL_MIN_LANES lanes
    is two matmuls, over keys padded to KEY_BUCKET, on a CPU with bf16 dot instructions where
    they were timed faster than SDPA; SDPA elsewhere (a lone lane of 9 queries too). Both kernels
    agree with the fp64 textbook on the same bf16 inputs to bf16's precision."""
    monkeypatch.setattr("engine.attention.cpu_has_fast_bf16", lambda: fast_bf16)
    monkeypatch.setattr("engine.attention.matmuls_beat_sdpa", lambda: matmuls_win)
    monkeypatch.setattr("engine.attention.MATMUL_MIN_SCORES", 0)  # these calls are small
    q_lens = [1, 3, 6, 2, 17, 3, 4, 9, 4, 17, 6]  # one call a length; 3 query heads a KV head
    ctx = [2, 9, 40, 6, 30, 13, 70, 50, 20, 25, 33]
    q, k_cache, v_cache, tables, bt, cu, ctx_lens = _lanes(q_lens, ctx, nblocks=128)
    q, k_cache, v_cache = (t.to(torch.bfloat16) for t in (q, k_cache, v_cache))
    plan = plan_attention(bt, cu, ctx_lens, 4, 3, q.dtype, call_cost_pairs=0)
    matmul = fast_bf16 and matmuls_win  # from 4 queries (12 rows) in two lanes
    assert [(g.num_lanes, g.q_len, g.ctx, g.matmul) for g in plan.groups] == [
        (1, 1, 2, False), (1, 2, 6, False), (2, 3, 13, False), (2, 4, 128 if matmul else 70, matmul),
        (2, 6, 64 if matmul else 40, matmul), (1, 9, 50, False),
        (2, 17, 64 if matmul else 30, matmul)]
    got = paged_attention(q, k_cache, v_cache, bt, cu, ctx_lens, 0.3, plan=plan)
    want = _one_lane_at_a_time(q.double(), k_cache.double(), v_cache.double(), tables, q_lens,
                               ctx, 0.3)
    torch.testing.assert_close(got.double(), want, atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize("least, most, matmuls", (
    (0, 2 * 3 * 17 * 30 - 1, [(5, True), (17, False)]),   # too large for its scores
    (2 * 3 * 5 * 30 + 1, 1 << 21, [(5, False), (17, True)]),  # too small
    (2 * 3 * 5 * 30, 2 * 3 * 17 * 30, [(5, True), (17, True)])))
def test_only_calls_of_a_middling_count_of_scores_are_matmuls(monkeypatch, least, most, matmuls):
    """Scores a KV head: lanes x query rows x keys (the longest context, before padding)."""
    monkeypatch.setattr("engine.attention.cpu_has_fast_bf16", lambda: True)
    monkeypatch.setattr("engine.attention.matmuls_beat_sdpa", lambda: True)
    monkeypatch.setattr("engine.attention.MATMUL_MIN_SCORES", least)
    monkeypatch.setattr("engine.attention.MATMUL_MAX_SCORES", most)
    q, k_cache, v_cache, tables, bt, cu, ctx_lens = _lanes([17, 5, 5, 17], [30, 30, 30, 15])
    plan = plan_attention(bt, cu, ctx_lens, 4, 3, torch.bfloat16, call_cost_pairs=0)
    assert [(g.q_len, g.matmul) for g in plan.groups] == matmuls


def test_sdpa_calls_that_brgemm_would_pack_are_rounded_to_shapes_that_recur(monkeypatch):
    """Where SDPA packs large calls for oneDNN's brgemm (which keeps a kernel for every shape),
    a call of at least PACKED_SDPA_MIN query rows a KV head over as many keys pads its keys to a
    multiple of KEY_BUCKET and its rows to one of QUERY_ROW_BUCKET; smaller calls keep their
    shapes.
    fp64 against the textbook: neither padding changes a row."""
    monkeypatch.setattr("engine.attention.sdpa_packs_for_brgemm", lambda dtype, device: True)
    q_lens = [23, 23, 40, 3, 30]  # 3 query heads a KV head: 69, 120 and 90 rows; 9 rows
    ctx = [70, 65, 100, 90, 40]   # the lane of 30 queries sees too few keys to be packed
    q, k_cache, v_cache, tables, bt, cu, ctx_lens = _lanes(q_lens, ctx, nblocks=160)
    plan = plan_attention(bt, cu, ctx_lens, 4, 3, q.dtype, call_cost_pairs=0)
    shapes = [(g.q_len, g.ctx, g.pad_rows) for g in plan.groups]
    assert shapes == [(3, 90, 0), (23, 128, 27), (30, 40, 0), (40, 128, 8)]
    for g in plan.groups:
        assert g.mask is None or g.mask.shape[2:] == (3 * g.q_len + g.pad_rows, g.ctx)
        if 3 * g.q_len >= PACKED_SDPA_MIN and g.ctx >= PACKED_SDPA_MIN:
            assert g.ctx % KEY_BUCKET == 0
            assert (3 * g.q_len + g.pad_rows) % QUERY_ROW_BUCKET == 0
    got = paged_attention(q, k_cache, v_cache, bt, cu, ctx_lens, 0.3, plan=plan)
    want = _one_lane_at_a_time(q, k_cache, v_cache, tables, q_lens, ctx, 0.3)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)


def test_the_faster_of_two_calls_is_told_by_a_clear_margin():
    def nap():
        time.sleep(0.003)
    assert runs_faster(lambda: None, nap) and not runs_faster(nap, lambda: None)
    assert not runs_faster(nap, nap, margin=0.5)  # alike: not faster by the margin


def test_which_bf16_kernel_wins_is_timed_once_a_process(monkeypatch):
    timings = []

    def timed(first, second):
        timings.append((first(), second()))  # both kernels run on the probe's shapes
        return True
    monkeypatch.setattr("engine.attention.runs_faster", timed)
    matmuls_beat_sdpa.cache_clear()
    try:
        assert matmuls_beat_sdpa() and matmuls_beat_sdpa()
        assert len(timings) == 1
        matmul, sdpa = timings[0]
        torch.testing.assert_close(matmul, sdpa, atol=3e-2, rtol=3e-2)
    finally:
        matmuls_beat_sdpa.cache_clear()  # the next caller times the real kernels


def _contiguous_parts(n):
    """Every way to cut 0..n-1 into runs."""
    for cuts in itertools.product((False, True), repeat=max(0, n - 1)):
        parts, start = [], 0
        for i, cut in enumerate(cuts, start=1):
            if cut:
                parts.append(range(start, i))
                start = i
        yield parts + [range(start, n)]


@pytest.mark.parametrize("seed", range(40))
def test_split_by_context_is_the_cheapest_cut_of_the_entries_by_context(seed):
    """Against every cut of the entries, in order of context, into calls: the least calls x
    their cost + padded query-key pairs, no call of several entries past the bytes bound."""
    rng = random.Random(seed)
    ctxs = [rng.choice((1, 5, 40, 300, 900, 3000)) + rng.randint(0, 50)
            for _ in range(rng.randint(1, 9))]
    q_len, call_cost = rng.choice((1, 3)), rng.choice((0, 500, 3000))
    key_bytes, max_bytes = rng.choice((0, 1, 8)), rng.choice((2000, 20000))
    parts = split_by_context(ctxs, q_len, key_bytes, call_cost, max_bytes)
    assert sorted(i for part in parts for i in part) == list(range(len(ctxs)))

    def cost(part):
        longest = max(ctxs[i] for i in part)
        fits = len(part) == 1 or len(part) * longest * key_bytes <= max_bytes
        return call_cost + len(part) * q_len * longest if fits else math.inf

    order = sorted(range(len(ctxs)), key=ctxs.__getitem__)
    best = min(sum(cost([order[i] for i in run]) for run in cut)
               for cut in _contiguous_parts(len(ctxs)))
    assert sum(cost(part) for part in parts) == pytest.approx(best)
    assert all(part == sorted(part) for part in parts)


def test_a_lane_far_past_the_others_context_attends_in_a_call_of_its_own():
    """Twenty lanes at 8 tokens and one at 400: one call would pad the twenty to 400 keys. Apart,
    every row is still the textbook's (fp64); and a bound on the bytes a call gathers parts
    lanes alike in context too."""
    q_lens, ctx = [1] * 21, [8] * 10 + [400] + [8] * 10
    q, k_cache, v_cache, tables, bt, cu, ctx_lens = _lanes(q_lens, ctx, nblocks=160)
    plan = plan_attention(bt, cu, ctx_lens, 4, 3, q.dtype)
    assert sorted(g.num_lanes for g in plan.groups) == [1, 20]
    got = paged_attention(q, k_cache, v_cache, bt, cu, ctx_lens, 0.3, plan=plan)
    torch.testing.assert_close(got, _one_lane_at_a_time(q, k_cache, v_cache, tables, q_lens, ctx,
                                                        0.3), atol=1e-12, rtol=0)
    # keys and values of 2 heads of 8 in fp64 take 256 bytes a position: a lane at 32768
    # positions gathers 8 MB, and a call at most GATHER_MAX_BYTES
    assert GATHER_MAX_BYTES == 16 << 20
    assert sorted(len(p) for p in split_by_context([32768] * 5, 1, 256)) == [1, 2, 2]
