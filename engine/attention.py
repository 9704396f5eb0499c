"""The one attention op of the engine: causal GQA attention of packed query tokens over a paged
KV cache. On a GPU where hip_kernels built its kernels they run instead; this torch version is
the CPU path and the fallback, with the same signature.

Why it looks like this (measured on the 2-core CPU, SmolLM2-135M shapes, ctx 256): bf16 SDPA with
`enable_gqa` and one query is ~7x slower than folding each KV head's query-head group into the
query length, and plain bf16 matmuls are ~10x slower than SDPA on a CPU without bf16 dot
instructions. So lanes with the same number of query tokens are batched into one SDPA call over
their gathered blocks, with [group * q_len] query rows per KV head. The grouping depends only on
the step's lane shapes, so it is planned once per step (`plan_attention`) and reused by every
layer."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

import hip_kernels


@dataclass(slots=True)
class LaneGroup:
    """Lanes sharing one query length, attended in one batched call."""
    rows: torch.Tensor          # [num_lanes * q_len] packed row of each query, lane-major
    blocks: torch.Tensor        # [num_lanes * max_blocks] block ids, each lane's table padded
    num_lanes: int
    q_len: int
    max_blocks: int
    ctx: int                    # longest context in the group
    mask: torch.Tensor | None   # [num_lanes, 1, group * q_len, ctx] bool, True = attend
    first_block: int | None     # set when `blocks` is one consecutive run starting here


@dataclass(slots=True)
class AttentionPlan:
    groups: list[LaneGroup]
    num_tokens: int
    in_order: bool  # one group whose rows are 0..num_tokens-1: no gather or scatter of rows


def plan_attention(block_tables: torch.Tensor, cu_q_lens: torch.Tensor, ctx_lens: torch.Tensor,
                   block_size: int, group_size: int) -> AttentionPlan:
    """Group lanes by query length and build their index tensors and causal masks."""
    device = block_tables.device
    cu = cu_q_lens.tolist()
    ctx_list = ctx_lens.tolist()
    tables = block_tables.tolist()
    by_q_len: dict[int, list[int]] = {}
    for lane in range(len(ctx_list)):
        by_q_len.setdefault(cu[lane + 1] - cu[lane], []).append(lane)
    groups = []
    for q_len, lanes in by_q_len.items():
        ctx = max(ctx_list[i] for i in lanes)
        max_blocks = -(-ctx // block_size)
        rows = [cu[i] + j for i in lanes for j in range(q_len)]
        blocks = [b for i in lanes for b in tables[i][:max_blocks]]
        ctxs = torch.tensor([ctx_list[i] for i in lanes], device=device)
        mask = None
        if q_len > 1 or any(ctx_list[i] != ctx for i in lanes):
            # Query j of a lane sits at position ctx - q_len + j and sees keys up to it.
            last = ctxs[:, None] - q_len + torch.arange(q_len, device=device)  # [G, q_len]
            mask = torch.arange(ctx, device=device) <= last[:, :, None]         # [G, q_len, ctx]
            mask = mask[:, None].expand(len(lanes), group_size, q_len, ctx)
            mask = mask.reshape(len(lanes), 1, group_size * q_len, ctx)
        consecutive = blocks == list(range(blocks[0], blocks[0] + len(blocks)))
        groups.append(LaneGroup(rows=torch.tensor(rows, device=device),
                                blocks=torch.tensor(blocks, device=device),
                                num_lanes=len(lanes), q_len=q_len, max_blocks=max_blocks,
                                ctx=ctx, mask=mask, first_block=blocks[0] if consecutive else None))
    in_order = len(groups) == 1 and groups[0].rows.tolist() == list(range(cu[-1]))
    return AttentionPlan(groups=groups, num_tokens=cu[-1], in_order=in_order)


def _gather_blocks(cache: torch.Tensor, g: LaneGroup) -> torch.Tensor:
    """The group's blocks in lane order: a view when they are one consecutive run (a lone lane in
    a fresh cache), else a gather over rows of the flattened cache (index_select along dim 0 of
    the 4-D cache is ~60x slower on CPU than on its 2-D view)."""
    if g.first_block is not None:
        return cache.narrow(0, g.first_block, g.blocks.numel())
    return cache.view(cache.shape[0], -1).index_select(0, g.blocks).view(-1, *cache.shape[1:])


def write_kv(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    """Store new keys/values; slot = block * block_size + offset."""
    # k, v: [num_tokens, kvh, hd]; caches: [num_blocks, block_size, kvh, hd]
    assert k.shape == v.shape and k.shape[0] == slot_mapping.shape[0], (k.shape, slot_mapping.shape)
    if k.is_cuda and hip_kernels.available():
        return hip_kernels.write_kv(k, v, k_cache, v_cache, slot_mapping)
    k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slot_mapping, k)
    v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slot_mapping, v)


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    block_tables: torch.Tensor, cu_q_lens: torch.Tensor, ctx_lens: torch.Tensor,
                    scale: float, plan: AttentionPlan | None = None) -> torch.Tensor:
    """Query j of lane i sits at position ctx_lens[i] - q_len_i + j and attends keys 0..that
    position. `plan` is the same for every layer of a step; pass it to skip re-planning."""
    # q: [num_tokens, nh, hd]; caches: [num_blocks, bs, kvh, hd]; block_tables: [lanes, max_blocks]
    if q.is_cuda and hip_kernels.available():
        return hip_kernels.paged_attention(q, k_cache, v_cache, block_tables, cu_q_lens, ctx_lens,
                                           scale)
    num_tokens, num_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_heads // num_kv_heads
    assert num_heads % num_kv_heads == 0 and k_cache.shape[3] == head_dim
    if plan is None:
        plan = plan_attention(block_tables, cu_q_lens, ctx_lens, block_size, group)
    assert plan.num_tokens == num_tokens, (plan.num_tokens, num_tokens)
    out = None if plan.in_order else q.new_empty(num_tokens, num_heads, head_dim)
    for g in plan.groups:
        lanes, q_len = g.num_lanes, g.q_len
        q_g = q if plan.in_order else q.index_select(0, g.rows)
        q_g = (q_g.view(lanes, q_len, num_kv_heads, group, head_dim)
               .permute(0, 2, 3, 1, 4).reshape(lanes, num_kv_heads, group * q_len, head_dim))
        k_g = (_gather_blocks(k_cache, g)  # [G * max_blocks, bs, kvh, hd]
               .view(lanes, g.max_blocks * block_size, num_kv_heads, head_dim)[:, :g.ctx]
               .transpose(1, 2))             # [G, kvh, ctx, hd]
        v_g = (_gather_blocks(v_cache, g)
               .view(lanes, g.max_blocks * block_size, num_kv_heads, head_dim)[:, :g.ctx]
               .transpose(1, 2))
        o = F.scaled_dot_product_attention(q_g, k_g, v_g, attn_mask=g.mask, scale=scale)
        o = (o.view(lanes, num_kv_heads, group, q_len, head_dim)  # [G, kvh, group*q_len, hd]
             .permute(0, 3, 1, 2, 4).reshape(lanes * q_len, num_heads, head_dim))
        if plan.in_order:
            return o
        out.index_copy_(0, g.rows, o)
    return out
