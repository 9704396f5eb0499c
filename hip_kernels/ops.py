"""The public ops: check the layout, then run the kernel if it is built for the tensors' device,
else the torch reference (hip_kernels.reference, which is the spec). Same signatures as the
references; the layout checks are the kernels' preconditions, applied to both paths so that code
tested on CPU cannot pass a layout the GPU would misread."""
from __future__ import annotations

import functools
from typing import Callable

import torch

from hip_kernels import reference
from hip_kernels.errors import LayoutError
from hip_kernels.library import DTYPE_CODES, check, library, stream_of

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
MIN_SPLIT_KEYS = 256  # a split shorter than this costs more in the merge than it gains


def _require(op: str, ok: bool, problem: Callable[[], str]) -> None:
    # The message is made only on failure: these checks run for every op of every layer, and
    # formatting their messages eagerly was most of their cost (29 us a paged_attention call).
    if not ok:
        raise LayoutError(op, problem())


def _tensor(op: str, name: str, t: torch.Tensor, ndim: int, dtypes: tuple, device: torch.device) -> None:
    _require(op, t.dim() == ndim, lambda: f"{name} must have {ndim} dims, got shape {tuple(t.shape)}")
    _require(op, t.dtype in dtypes, lambda: f"{name} dtype {t.dtype} not in {[str(d) for d in dtypes]}")
    _require(op, t.is_contiguous(), lambda: f"{name} must be contiguous")
    _require(op, t.device == device, lambda: f"{name} is on {t.device}, expected {device}")


@functools.lru_cache(maxsize=None)
def _device_shape(device: torch.device) -> tuple[int, int]:
    """(multiprocessors, warp size) of a GPU, read once rather than at every call."""
    return torch.cuda.get_device_properties(device).multi_processor_count, library().ss_warp_size()


def _kernels_for(t: torch.Tensor):
    return library() if t.is_cuda else None


def _ptr(t: torch.Tensor | None) -> int | None:
    return t.data_ptr() if t is not None and t.numel() else None


def split_plan(max_keys: int, rows: int, multiprocessors: int) -> tuple[int, int]:
    """(num_splits, split_len): split the context only as far as needed to give every compute unit
    about two blocks, and never into pieces shorter than MIN_SPLIT_KEYS."""
    wanted = max(1, -(-2 * multiprocessors // max(rows, 1)))
    splits = max(1, min(wanted, max_keys // MIN_SPLIT_KEYS))
    return splits, -(-max_keys // splits)


def paged_attention(q, k_cache, v_cache, block_tables, cu_q_lens, ctx_lens, scale: float) -> torch.Tensor:
    # q: [num_tokens, num_heads, head_dim]; caches: [num_blocks, block_size, num_kv_heads, head_dim]
    # block_tables: [num_lanes, max_blocks] int32; cu_q_lens: [num_lanes + 1] int32; ctx_lens: [num_lanes] int32
    op, dev = "paged_attention", q.device
    _tensor(op, "q", q, 3, _FLOATS, dev)
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        _tensor(op, name, cache, 4, (q.dtype,), dev)
    _tensor(op, "block_tables", block_tables, 2, (torch.int32,), dev)
    _tensor(op, "cu_q_lens", cu_q_lens, 1, (torch.int32,), dev)
    _tensor(op, "ctx_lens", ctx_lens, 1, (torch.int32,), dev)
    num_tokens, num_heads, head_dim = q.shape
    _, block_size, num_kv_heads, cache_dim = k_cache.shape
    num_lanes, max_blocks = block_tables.shape
    _require(op, k_cache.shape == v_cache.shape, lambda: f"k_cache {tuple(k_cache.shape)} != v_cache {tuple(v_cache.shape)}")
    _require(op, cache_dim == head_dim, lambda: f"cache head_dim {cache_dim} != q head_dim {head_dim}")
    _require(op, num_heads % num_kv_heads == 0, lambda: f"num_heads {num_heads} not a multiple of num_kv_heads {num_kv_heads}")
    _require(op, cu_q_lens.numel() == num_lanes + 1 and ctx_lens.numel() == num_lanes,
             lambda: f"{num_lanes} lanes need cu_q_lens of {num_lanes + 1} and ctx_lens of {num_lanes}, "
             f"got {cu_q_lens.numel()} and {ctx_lens.numel()}")
    lib = _kernels_for(q)
    if lib is None or num_lanes == 0:
        return reference.paged_attention(q, k_cache, v_cache, block_tables, cu_q_lens, ctx_lens, scale)
    multiprocessors, warp_size = _device_shape(dev)
    _require(op, head_dim <= 8 * warp_size, lambda: f"head_dim {head_dim} > 8 x warp size: kernel v1 limit")
    splits, split_len = split_plan(max_blocks * block_size, num_tokens * num_heads, multiprocessors)
    out = torch.empty_like(q)
    split_acc = split_max_sum = None
    if splits > 1:
        split_acc = torch.empty(splits, num_tokens, num_heads, head_dim, device=dev, dtype=torch.float32)
        split_max_sum = torch.empty(splits, num_tokens, num_heads, 2, device=dev, dtype=torch.float32)
    check(lib.ss_paged_attention(
        DTYPE_CODES[str(q.dtype)], _ptr(out), _ptr(split_acc), _ptr(split_max_sum), _ptr(q), _ptr(k_cache),
        _ptr(v_cache), _ptr(block_tables), _ptr(cu_q_lens), _ptr(ctx_lens), num_tokens, num_lanes, num_heads,
        num_kv_heads, head_dim, block_size, max_blocks, splits, split_len, float(scale), stream_of(dev)))
    return out


def write_kv(k, v, k_cache, v_cache, slot_mapping) -> None:
    # k, v: [num_tokens, num_kv_heads, head_dim]; caches: [num_blocks, block_size, num_kv_heads, head_dim]
    # slot_mapping: [num_tokens] int64 = block * block_size + offset, negative = skip
    op, dev = "write_kv", k.device
    _tensor(op, "k", k, 3, _FLOATS, dev)
    _tensor(op, "v", v, 3, (k.dtype,), dev)
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        _tensor(op, name, cache, 4, (k.dtype,), dev)
    _tensor(op, "slot_mapping", slot_mapping, 1, (torch.int64,), dev)
    _require(op, k.shape == v.shape and k_cache.shape == v_cache.shape, lambda: "k/v or k_cache/v_cache shapes differ")
    _require(op, k.shape[1:] == k_cache.shape[2:], lambda: f"rows {tuple(k.shape[1:])} != cache rows {tuple(k_cache.shape[2:])}")
    _require(op, slot_mapping.numel() == k.shape[0], lambda: f"{k.shape[0]} tokens but {slot_mapping.numel()} slots")
    lib = _kernels_for(k)
    if lib is None:
        return reference.write_kv(k, v, k_cache, v_cache, slot_mapping)
    check(lib.ss_write_kv(DTYPE_CODES[str(k.dtype)], _ptr(k), _ptr(v), _ptr(k_cache), _ptr(v_cache),
                          _ptr(slot_mapping), k.shape[0], k.shape[1] * k.shape[2], stream_of(dev)))


def _check_drafts(op: str, draft_tokens, cu_draft_lens, target_rows: int) -> None:
    dev = draft_tokens.device
    _tensor(op, "draft_tokens", draft_tokens, 1, (torch.int64,), dev)
    _tensor(op, "cu_draft_lens", cu_draft_lens, 1, (torch.int32,), dev)
    lanes = cu_draft_lens.numel() - 1
    _require(op, lanes >= 0, lambda: "cu_draft_lens needs num_lanes + 1 entries")
    _require(op, target_rows == draft_tokens.numel() + lanes,
             lambda: f"target has {target_rows} rows; {draft_tokens.numel()} drafts over {lanes} lanes need "
             f"{draft_tokens.numel() + lanes} (k_i + 1 per lane)")


def verify_greedy(draft_tokens, cu_draft_lens, target_argmax) -> tuple[torch.Tensor, torch.Tensor]:
    # draft_tokens: [total_drafts] int64; cu_draft_lens: [num_lanes + 1] int32; target_argmax: [total_drafts + num_lanes] int64
    op = "verify_greedy"
    _tensor(op, "target_argmax", target_argmax, 1, (torch.int64,), draft_tokens.device)
    _check_drafts(op, draft_tokens, cu_draft_lens, target_argmax.numel())
    lib = _kernels_for(draft_tokens)
    if lib is None:
        return reference.verify_greedy(draft_tokens, cu_draft_lens, target_argmax)
    lanes = cu_draft_lens.numel() - 1
    accepted = torch.empty(lanes, dtype=torch.int64, device=draft_tokens.device)
    next_token = torch.empty_like(accepted)
    check(lib.ss_verify_greedy(_ptr(accepted), _ptr(next_token), _ptr(draft_tokens), _ptr(cu_draft_lens),
                               _ptr(target_argmax), lanes, stream_of(draft_tokens.device)))
    return accepted, next_token


def verify_rejection(draft_tokens, cu_draft_lens, draft_probs, target_probs, accept_uniforms,
                     sample_uniforms) -> tuple[torch.Tensor, torch.Tensor]:
    # draft_probs: [total_drafts, vocab] float32 or None (one-hot drafts); target_probs: [total_drafts + num_lanes, vocab]
    # accept_uniforms: [total_drafts] float32; sample_uniforms: [num_lanes] float32 (each lane's own generator)
    op, dev = "verify_rejection", draft_tokens.device
    _tensor(op, "target_probs", target_probs, 2, (torch.float32,), dev)
    _check_drafts(op, draft_tokens, cu_draft_lens, target_probs.shape[0])
    if draft_probs is not None:
        _tensor(op, "draft_probs", draft_probs, 2, (torch.float32,), dev)
        _require(op, draft_probs.shape == (draft_tokens.numel(), target_probs.shape[1]),
                 lambda: f"draft_probs shape {tuple(draft_probs.shape)} != ({draft_tokens.numel()}, {target_probs.shape[1]})")
    _tensor(op, "accept_uniforms", accept_uniforms, 1, (torch.float32,), dev)
    _tensor(op, "sample_uniforms", sample_uniforms, 1, (torch.float32,), dev)
    lanes = cu_draft_lens.numel() - 1
    _require(op, accept_uniforms.numel() == draft_tokens.numel() and sample_uniforms.numel() == lanes,
             lambda: f"need {draft_tokens.numel()} accept and {lanes} sample uniforms, got "
             f"{accept_uniforms.numel()} and {sample_uniforms.numel()}")
    lib = _kernels_for(draft_tokens)
    if lib is None:
        return reference.verify_rejection(draft_tokens, cu_draft_lens, draft_probs, target_probs,
                                          accept_uniforms, sample_uniforms)
    accepted = torch.empty(lanes, dtype=torch.int64, device=dev)
    next_token = torch.empty_like(accepted)
    check(lib.ss_verify_rejection(
        _ptr(accepted), _ptr(next_token), _ptr(draft_tokens), _ptr(cu_draft_lens), _ptr(draft_probs),
        _ptr(target_probs), _ptr(accept_uniforms), _ptr(sample_uniforms), lanes, target_probs.shape[1],
        stream_of(dev)))
    return accepted, next_token
