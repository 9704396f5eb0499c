"""Attention calls: how lanes are merged into calls, and that merging changes no output."""
from __future__ import annotations

import itertools
import random

import pytest
import torch

from engine.attention import merge_query_lengths, paged_attention, plan_attention, write_kv


def _brute_force_cost(q_lens, ctx_lens, call_cost):
    """Cheapest split of the sorted distinct lengths into runs, trying every split."""
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
            cost += call_cost + len(lanes) * max(run) * max(ctx_lens[i] for i in lanes)
        best = min(best, cost)
    return best


@pytest.mark.parametrize("seed", range(40))
def test_merge_is_the_cheapest_split_into_runs(seed):
    rng = random.Random(seed)
    lanes = rng.randint(1, 12)
    q_lens = [rng.choice((1, 1, 2, 3, 5, 9, 17)) for _ in range(lanes)]
    ctx_lens = [q + rng.randint(0, 600) for q in q_lens]
    call_cost = rng.choice((0, 500, 3000, 20000))
    calls = merge_query_lengths(q_lens, ctx_lens, call_cost)
    assert sorted(lane for call in calls for lane in call) == list(range(lanes))
    cost = sum(call_cost + len(call) * max(q_lens[i] for i in call)
               * max(ctx_lens[i] for i in call) for call in calls)
    assert cost == pytest.approx(_brute_force_cost(q_lens, ctx_lens, call_cost))


def test_merging_trades_calls_for_padding():
    q_lens, ctx_lens = [1, 2, 3, 5], [300, 300, 300, 300]
    assert len(merge_query_lengths(q_lens, ctx_lens, 0)) == 4  # calls are free: never pad
    assert len(merge_query_lengths(q_lens, ctx_lens, 10**9)) == 1  # padding is free: one call
    # Long contexts make padding dear: a 17-query lane is not merged with one-query lanes.
    assert len(merge_query_lengths([17, 1, 1, 1], [2000] * 4, 3000)) == 2


@pytest.mark.parametrize("call_cost", (10**9, 3000))
def test_merged_calls_equal_one_call_per_length(call_cost):
    """fp64: front-padded queries, padding rows of a lane shorter than the padding, contexts of
    different lengths in one call; every row must equal the unmerged plan's."""
    gen = torch.Generator().manual_seed(1)
    nh, kvh, hd, bs, nblocks = 6, 2, 8, 4, 64
    q_lens = [1, 3, 1, 6, 2, 17, 1]
    ctx = [2, 9, 40, 6, 13, 30, 1]  # lane 0 and lane 6 are shorter than the longest query
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
    ctx_lens = torch.tensor(ctx, dtype=torch.int32)
    q = torch.randn(sum(q_lens), nh, hd, generator=gen, dtype=torch.float64)

    def attend(cost):
        plan = plan_attention(bt, cu, ctx_lens, bs, nh // kvh, q.dtype, call_cost_pairs=cost)
        return plan, paged_attention(q, k_cache, v_cache, bt, cu, ctx_lens, 0.3, plan=plan)

    exact_plan, exact = attend(0)
    merged_plan, merged = attend(call_cost)
    assert len(exact_plan.groups) == len(set(q_lens)) and not exact_plan.padded
    assert len(merged_plan.groups) < len(exact_plan.groups) and merged_plan.padded
    assert merged.shape == exact.shape and merged.is_contiguous()
    torch.testing.assert_close(merged, exact, atol=1e-12, rtol=0)
