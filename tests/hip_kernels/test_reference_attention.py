"""The paged attention reference against a naive per-token, per-head loop in float64."""
import math

import pytest
import torch

from hip_kernels import paged_attention, reference
from kernel_cases import assert_close_scaled, ragged_batch


def naive_attention(q, k_cache, v_cache, tables, cu, ctx, scale):
    out = torch.zeros(q.shape, dtype=torch.float64)
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = q.shape[1] // num_kv_heads
    for lane in range(len(ctx)):
        q_len = int(cu[lane + 1] - cu[lane])
        for j in range(q_len):
            token, position = int(cu[lane]) + j, int(ctx[lane]) - q_len + j
            slots = [(int(tables[lane, key // block_size]), key % block_size) for key in range(position + 1)]
            for head in range(q.shape[1]):
                keys = torch.stack([k_cache[s][head // group] for s in slots]).double()
                values = torch.stack([v_cache[s][head // group] for s in slots]).double()
                weights = torch.softmax(keys @ q[token, head].double() * scale, dim=0)
                out[token, head] = weights @ values
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("dtype, rel", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_reference_matches_naive_loop(seed, dtype, rel):
    gen = torch.Generator().manual_seed(seed)
    batch = ragged_batch(gen, lanes=1 + seed % 5, max_q=9, max_ctx=300, num_kv_heads=1 + seed % 2,
                         group=(1, 2, 4)[seed % 3], dtype=dtype)
    scale = 1 / math.sqrt(batch[0].shape[-1])
    got = paged_attention(*batch, scale)
    assert got.dtype == dtype and got.shape == batch[0].shape
    assert_close_scaled(got, naive_attention(*batch, scale), rel)


def test_single_key_returns_its_value():
    # ctx 1, one query: softmax over one key is 1, so the output is exactly that value row.
    gen = torch.Generator().manual_seed(7)
    q, k_cache, v_cache, tables, cu, ctx = ragged_batch(gen, lanes=1, max_q=1, max_ctx=1, num_kv_heads=2, group=3)
    got = reference.paged_attention(q, k_cache, v_cache, tables, cu, ctx, 0.1)
    expected = v_cache[int(tables[0, 0]), 0].repeat_interleave(3, dim=0)
    torch.testing.assert_close(got[0], expected)


def test_causal_within_new_tokens():
    # Changing the last new token's key must not change the earlier query rows of that lane.
    gen = torch.Generator().manual_seed(3)
    q, k_cache, v_cache, tables, cu, ctx = ragged_batch(gen, lanes=1, max_q=1, max_ctx=40, num_kv_heads=1, group=2)
    q = torch.randn(4, 2, q.shape[-1], generator=gen)
    cu = torch.tensor([0, 4], dtype=torch.int32)
    ctx = torch.tensor([max(int(ctx[0]), 4)], dtype=torch.int32)
    before = reference.paged_attention(q, k_cache, v_cache, tables, cu, ctx, 0.2)
    last = int(ctx[0]) - 1
    k_cache[int(tables[0, last // 16]), last % 16] += 5
    after = reference.paged_attention(q, k_cache, v_cache, tables, cu, ctx, 0.2)
    torch.testing.assert_close(after[:3], before[:3])
    assert not torch.allclose(after[3], before[3])
