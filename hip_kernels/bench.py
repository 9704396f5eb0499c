"""Times each kernel against its torch reference on the current GPU and prints one table.

    python -m hip_kernels.bench [--dtype bf16] [--heads 32 --kv-heads 8 --head-dim 128]

Rows: B = 1, 4, 16 lanes, k = 0..8 drafts per lane (q_len = 1 + k), contexts 512..8k. Times are
medians of CUDA/HIP events over repeated launches, in milliseconds.
"""
from __future__ import annotations

import argparse
import math
import statistics

import torch

from hip_kernels import ops, reference
from hip_kernels.library import available, why_unavailable

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def median_ms(fn, repeats: int = 20) -> float:
    fn()  # warm-up (and first-use build)
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def verify_batch(lanes: int, k: int, ctx: int, heads: int, kv_heads: int, head_dim: int, dtype,
                 block_size: int = 16, dev: torch.device | str = "cuda"):
    """q, caches, block tables, cu_q_lens and ctx_lens of a step of `lanes` lanes of 1 + k query
    tokens at context `ctx`, each lane's blocks shuffled through the cache."""
    blocks_per_lane = -(-ctx // block_size)
    tables = torch.randperm(lanes * blocks_per_lane, device=dev).int().view(lanes, blocks_per_lane)
    cache = (lanes * blocks_per_lane, block_size, kv_heads, head_dim)
    k_cache, v_cache = torch.randn(cache, device=dev, dtype=dtype), torch.randn(cache, device=dev, dtype=dtype)
    q_len = 1 + k
    cu = torch.arange(0, (lanes + 1) * q_len, q_len, device=dev, dtype=torch.int32)
    q = torch.randn(lanes * q_len, heads, head_dim, device=dev, dtype=dtype)
    ctx_lens = torch.full((lanes,), ctx, device=dev, dtype=torch.int32)
    return q, k_cache, v_cache, tables, cu, ctx_lens


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hip_kernels.bench", description=__doc__)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--contexts", type=int, nargs="+", default=[512, 2048, 8192])
    args = parser.parse_args(argv)
    if not available():
        print(f"kernels not available: {why_unavailable()}")
        return 1
    dtype, scale = DTYPES[args.dtype], 1 / math.sqrt(args.head_dim)
    print(f"{torch.cuda.get_device_name()}  {args.dtype}  heads {args.heads}/{args.kv_heads}  head_dim {args.head_dim}")
    print(f"{'B':>3} {'k':>2} {'ctx':>5} | {'attn kern':>9} {'attn ref':>9} {'x':>6} | "
          f"{'kv kern':>8} {'kv ref':>8} | {'greedy kern':>11} {'greedy ref':>10}")
    for lanes in (1, 4, 16):
        for k in range(9):
            for ctx in args.contexts:
                batch = verify_batch(lanes, k, ctx, args.heads, args.kv_heads, args.head_dim, dtype)
                q, k_cache, v_cache = batch[:3]
                attn_kern = median_ms(lambda: ops.paged_attention(*batch, scale))
                attn_ref = median_ms(lambda: reference.paged_attention(*batch, scale))
                new = torch.randn(q.shape[0], args.kv_heads, args.head_dim, device="cuda", dtype=dtype)
                slots = torch.randperm(k_cache.shape[0] * k_cache.shape[1], device="cuda")[: q.shape[0]]
                kv_kern = median_ms(lambda: ops.write_kv(new, new, k_cache, v_cache, slots))
                kv_ref = median_ms(lambda: reference.write_kv(new, new, k_cache, v_cache, slots))
                cu_drafts = torch.arange(lanes + 1, device="cuda", dtype=torch.int32) * k
                drafts = torch.randint(0, 4, (lanes * k,), device="cuda")
                targets = torch.randint(0, 4, (lanes * (k + 1),), device="cuda")
                greedy_kern = median_ms(lambda: ops.verify_greedy(drafts, cu_drafts, targets))
                greedy_ref = median_ms(lambda: reference.verify_greedy(drafts, cu_drafts, targets))
                print(f"{lanes:>3} {k:>2} {ctx:>5} | {attn_kern:>9.3f} {attn_ref:>9.3f} {attn_ref / attn_kern:>6.1f} | "
                      f"{kv_kern:>8.3f} {kv_ref:>8.3f} | {greedy_kern:>11.3f} {greedy_ref:>10.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
