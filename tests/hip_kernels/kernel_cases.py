"""Random ragged paged batches shared by the reference tests and the GPU tests."""
from __future__ import annotations

import torch


def ragged_batch(gen: torch.Generator, *, lanes: int, max_q: int, max_ctx: int, num_kv_heads: int, group: int,
                 head_dim: int = 32, block_size: int = 16, dtype=torch.float32, device="cpu", min_q: int = 1):
    """A packed verify batch over a shuffled paged cache whose unused rows hold garbage (large
    values), so reading a key outside a lane's context shows up in the output."""
    q_lens = torch.randint(min_q, max_q + 1, (lanes,), generator=gen)
    ctx = torch.stack([torch.randint(int(q), max_ctx + 1, (1,), generator=gen)[0] for q in q_lens])
    blocks_per_lane = (ctx + block_size - 1) // block_size
    max_blocks = int(blocks_per_lane.max()) + 1  # one spare column: tables are wider than needed
    num_blocks = int(blocks_per_lane.sum()) + 3
    perm = torch.randperm(num_blocks, generator=gen)
    tables = torch.zeros(lanes, max_blocks, dtype=torch.int32)
    used = 0
    for i, n in enumerate(blocks_per_lane.tolist()):
        tables[i, :n] = perm[used:used + n].int()
        used += n
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.randn(shape, generator=gen) * 30  # garbage everywhere first
    v_cache = torch.randn(shape, generator=gen) * 30
    for i, n in enumerate(ctx.tolist()):              # then real rows for each lane's context
        keys = torch.arange(n)
        where = (tables[i, keys // block_size].long(), keys % block_size)
        k_cache[where] = torch.randn(n, num_kv_heads, head_dim, generator=gen)
        v_cache[where] = torch.randn(n, num_kv_heads, head_dim, generator=gen)
    cu = torch.zeros(lanes + 1, dtype=torch.int32)
    cu[1:] = q_lens.cumsum(0)
    q = torch.randn(int(cu[-1]), num_kv_heads * group, head_dim, generator=gen)
    to = dict(device=device)
    return (q.to(dtype=dtype, **to), k_cache.to(dtype=dtype, **to), v_cache.to(dtype=dtype, **to),
            tables.to(**to), cu.to(**to), ctx.int().to(**to))


def assert_close_scaled(actual: torch.Tensor, expected: torch.Tensor, rel: float) -> None:
    """Tolerance scaled by the magnitude of the expected values, so fp32 and bf16 share one rule."""
    scale = expected.double().abs().max().clamp(min=1.0)
    err = (actual.double() - expected.double()).abs().max()
    assert err <= rel * scale, f"max error {err:.3g} > {rel} x {scale:.3g}"
