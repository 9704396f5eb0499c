"""Torch references for every kernel: the specification, and what runs where no kernel is built.

Each function has the public op's signature and is vectorised over lanes (no host sync per lane),
so it is also a usable GPU fallback. Layout is checked by hip_kernels.ops, not here.
"""
from __future__ import annotations

import torch


def paged_attention(
    q: torch.Tensor,             # [num_tokens, num_heads, head_dim]
    k_cache: torch.Tensor,       # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor,       # [num_blocks, block_size, num_kv_heads, head_dim]
    block_tables: torch.Tensor,  # [num_lanes, max_blocks] int32
    cu_q_lens: torch.Tensor,     # [num_lanes + 1] int32
    ctx_lens: torch.Tensor,      # [num_lanes] int32, including this step's tokens
    scale: float,
) -> torch.Tensor:               # [num_tokens, num_heads, head_dim], q's dtype
    """Query j of lane i sits at position ctx_lens[i] - q_len_i + j and attends keys 0..position
    of its lane (paged via block_tables); heads share KV heads in groups (GQA). fp32 inside."""
    num_tokens, num_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    num_lanes, max_blocks = block_tables.shape
    group = num_heads // num_kv_heads
    device = q.device
    cu = cu_q_lens.long()
    q_lens = cu[1:] - cu[:-1]
    max_q = int(q_lens.max()) if num_lanes else 0  # one sync per call, none per lane
    out = torch.zeros_like(q)
    if num_tokens == 0:
        return out
    # Pad lanes to max_q query rows so one batched product serves all of them.
    j = torch.arange(max_q, device=device)
    valid = j[None, :] < q_lens[:, None]                                # [num_lanes, max_q]
    rows = (cu[:-1, None] + j).clamp(max=num_tokens - 1)                # [num_lanes, max_q]
    position = ctx_lens.long()[:, None] - q_lens[:, None] + j           # [num_lanes, max_q]
    keys = torch.arange(max_blocks * block_size, device=device)         # [max_keys]
    slots = block_tables.long()[:, keys // block_size] * block_size + keys % block_size  # [num_lanes, max_keys]
    k = k_cache.reshape(-1, num_kv_heads, head_dim)[slots].float()      # [num_lanes, max_keys, kvh, hd]
    v = v_cache.reshape(-1, num_kv_heads, head_dim)[slots].float()
    q_pad = q[rows].float().view(num_lanes, max_q, num_kv_heads, group, head_dim)
    scores = torch.einsum("lqjgd,lkjd->ljgqk", q_pad * scale, k)        # [num_lanes, kvh, group, max_q, max_keys]
    # Rows past a lane's context are masked, whatever the cache holds there.
    visible = keys[None, None, :] <= position[:, :, None]               # [num_lanes, max_q, max_keys]
    scores = scores.masked_fill(~visible[:, None, None], float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num_(0.0)            # padded rows see no key
    o = torch.einsum("ljgqk,lkjd->lqjgd", weights, v).reshape(num_lanes, max_q, num_heads, head_dim)
    out[rows[valid]] = o[valid].to(q.dtype)
    return out


def write_kv(
    k: torch.Tensor,             # [num_tokens, num_kv_heads, head_dim]
    v: torch.Tensor,             # [num_tokens, num_kv_heads, head_dim]
    k_cache: torch.Tensor,       # [num_blocks, block_size, num_kv_heads, head_dim], written in place
    v_cache: torch.Tensor,       # same
    slot_mapping: torch.Tensor,  # [num_tokens] int64: block * block_size + offset; < 0 = skip (padding)
) -> None:
    keep = slot_mapping >= 0
    slots = slot_mapping[keep]
    k_cache.view(-1, *k_cache.shape[2:])[slots] = k[keep]
    v_cache.view(-1, *v_cache.shape[2:])[slots] = v[keep]


def _first_rejection(accept: torch.Tensor, cu_draft_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per lane, how many leading drafts were accepted, and each draft's lane."""
    cu = cu_draft_lens.long()
    drafts = torch.arange(accept.numel(), device=accept.device)
    lane = torch.searchsorted(cu[1:], drafts, right=True)  # [total_drafts]
    offset = drafts - cu[lane]
    accepted = (cu[1:] - cu[:-1]).clone()                  # all accepted unless a draft fails
    accepted.scatter_reduce_(0, lane[~accept], offset[~accept], reduce="amin")
    return accepted, lane


def verify_greedy(
    draft_tokens: torch.Tensor,   # [total_drafts] int64
    cu_draft_lens: torch.Tensor,  # [num_lanes + 1] int32
    target_argmax: torch.Tensor,  # [total_drafts + num_lanes] int64, k_i + 1 rows per lane
) -> tuple[torch.Tensor, torch.Tensor]:  # accepted [num_lanes] int64, next_token [num_lanes] int64
    """Accept drafts while they equal the target's argmax; the next token is the target's own at the
    first mismatch (the correction) or after the last draft (the bonus)."""
    cu = cu_draft_lens.long()
    lanes = torch.arange(cu.numel() - 1, device=draft_tokens.device)
    drafts = torch.arange(draft_tokens.numel(), device=draft_tokens.device)
    lane = torch.searchsorted(cu[1:], drafts, right=True)
    accepted, _ = _first_rejection(draft_tokens == target_argmax[drafts + lane], cu_draft_lens)
    return accepted, target_argmax[cu[:-1] + lanes + accepted]


def verify_rejection(
    draft_tokens: torch.Tensor,          # [total_drafts] int64
    cu_draft_lens: torch.Tensor,         # [num_lanes + 1] int32
    draft_probs: torch.Tensor | None,    # [total_drafts, vocab] float32; None = one-hot drafts
    target_probs: torch.Tensor,          # [total_drafts + num_lanes, vocab] float32, k_i + 1 rows per lane
    accept_uniforms: torch.Tensor,       # [total_drafts] float32 in [0, 1), from each lane's generator
    sample_uniforms: torch.Tensor,       # [num_lanes] float32 in [0, 1), from each lane's generator
) -> tuple[torch.Tensor, torch.Tensor]:  # accepted [num_lanes] int64, next_token [num_lanes] int64
    """Speculative rejection sampling. Draft j of a lane (token x) is accepted when
    u_j * q(x) < p(x), i.e. u_j < min(1, p/q), while all before it were. On the first rejection the
    next token is drawn from max(p - q, 0) normalised (from p if that is all zero); with every draft
    accepted it is the bonus, drawn from the lane's last target row. Drawing is by inverse CDF: the
    first token whose cumulative weight exceeds sample_uniform * total weight."""
    cu = cu_draft_lens.long()
    device = target_probs.device
    num_lanes, vocab = cu.numel() - 1, target_probs.shape[1]
    lanes = torch.arange(num_lanes, device=device)
    drafts = torch.arange(draft_tokens.numel(), device=device)
    lane = torch.searchsorted(cu[1:], drafts, right=True)
    p_x = target_probs[drafts + lane, draft_tokens]
    q_x = draft_probs[drafts, draft_tokens] if draft_probs is not None else torch.ones_like(p_x)
    accepted, _ = _first_rejection(accept_uniforms * q_x < p_x, cu_draft_lens)

    p = target_probs[cu[:-1] + lanes + accepted]                        # [num_lanes, vocab]
    rejected = accepted < cu[1:] - cu[:-1]                              # [num_lanes]
    rejected_draft = (cu[:-1] + accepted).clamp(max=max(draft_tokens.numel() - 1, 0))
    if draft_probs is not None and draft_probs.numel():
        q = draft_probs[rejected_draft]
    else:
        q = torch.zeros_like(p)
        if draft_tokens.numel():
            q[lanes, draft_tokens[rejected_draft]] = 1.0
    residual = (p - q).clamp(min=0)
    use_residual = rejected & (residual.sum(-1) > 0)
    weights = torch.where(use_residual[:, None], residual, p)            # [num_lanes, vocab]
    cdf = weights.cumsum(-1)
    threshold = sample_uniforms * cdf[:, -1]
    crossing = (cdf > threshold[:, None]) & (weights > 0)
    # No crossing only by rounding (threshold == total): take the last token with weight.
    last_positive = vocab - 1 - (weights > 0).flip(-1).int().argmax(-1)
    first_crossing = crossing.int().argmax(-1)
    return accepted, torch.where(crossing.any(-1), first_crossing, last_positive)
