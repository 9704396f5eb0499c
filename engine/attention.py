"""The one attention op of the engine: causal GQA attention of packed query tokens over a paged
KV cache, over all of a lane's keys or a sliding window of them, scores capped or not (Gemma 2).
On a GPU where hip_kernels built its kernels they run instead, for full windows and uncapped
scores; this torch version is the CPU path and the fallback, with the same signature.

Why it looks like this (measured on the 2-core CPU, SmolLM2-135M shapes, ctx 256): bf16 SDPA with
`enable_gqa` and one query is ~7x slower than folding each KV head's query-head group into the
query length, and plain bf16 matmuls are ~10x slower than SDPA on a CPU without bf16 dot
instructions. So lanes are batched into SDPA calls over their gathered blocks, with
[group * q_len] query rows per KV head. Each call has a fixed cost (gathers, reshapes, the call;
~70 us a layer at 16 lanes, ctx 315, bf16), which a speculating step with many distinct draft
counts paid once per count: at 4 lanes drafting 0..4 it was 4 calls, 384 us a layer, against 203
us for one call with the shorter lanes' queries padded. So lanes are grouped by query length and
neighbouring lengths merged, the shorter ones padded in front, where the padding's wasted
query-key pairs cost less than another call (`CALL_COST_PAIRS`). A call may instead be unfolded:
each of its lanes' queries attended as a lane of one query over its lane's blocks, so no lane is
padded, at the price of gathering a lane's keys once per query (`GATHER_COST_PAIRS`). That is
what a batch with a lane or two drafting a few tokens wants: in a whole forward pass of 16 chat
lanes (bf16, ctx ~80), one lane drafting one token cost 3.5 ms more than none when merged (every
lane padded to two queries, rows gathered and scattered), 0.7 ms unfolded; two lanes drafting
two, 6.8 ms against 2.9. A call's lanes are padded to its longest context too, and it gathers
copies of all their keys: so a call is parted by context where padding costs more than another
call, or where its copies would outgrow the CPU's caches (`split_by_context`): a swarm's lanes
sit at contexts far apart, and sixteen at 3072 tokens decoded in half the time in calls of a
few lanes each. The grouping depends only on the step's lane shapes, so it is planned once per
step (`plan_attention`) and reused by every layer.

In bf16 on a CPU with bf16 dot instructions, a call of two or more lanes with many query rows may
be two matmuls instead (`_matmul_attention`: scores rounded to bf16 and a softmax computed in fp32
inside, as in Hugging Face's eager attention). Which is faster depends on the CPU, so it is timed
once a process (`matmuls_beat_sdpa`). On the 2-core EPYC (AVX512-BF16) SDPA's CPU flash kernel
took 1.6x the matmuls' time for 4 lanes of 17 queries in live code-edit decoding (680 us a layer
against 423, ctx ~340), 1.13x for 4 lanes of 5. On a 2-core Xeon with AMX it was the other way
at every shape tried (the matmuls 1.1-1.9x SDPA's time, 2-8 lanes of 3-17 queries, 64-512 keys),
and with SDPA alone goodput decoded code edits at 8 lanes 6 % faster, fixed K=8 11 %. With fewer
rows the two are alike, for a lone lane SDPA is faster at every length, and a small call (two
lanes of a few queries over a chat's short context) pays the matmuls' fixed cost for too little
arithmetic, so those calls keep SDPA and its cheaper gather of blocks."""
from __future__ import annotations

import functools
import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

import hip_kernels
from engine.devices import cpu_has_fast_bf16

# One more SDPA call costs about as much as this many padded query-key pairs (a query token
# against a cached key, all its heads): ~70 us a call against ~8 us a padded query at ctx 330,
# SmolLM2-135M shapes on the 2-core EPYC, bf16 and fp32 alike.
CALL_COST_PAIRS = 3000
# Gathering a lane's blocks once more, for each query of an unfolded lane past its first, costs
# about this many pairs a key (16 lanes at ctx 80-300, bf16).
GATHER_COST_PAIRS = 5
# Least query rows a KV head (query heads per KV head x queries) for a bf16 call to be matmuls.
MATMUL_MIN_ROWS = 12
# Least scores a KV head (lanes x rows x keys) for matmuls: below it their fixed cost (keys and
# values copied contiguous, the keys padded to KEY_BUCKET, five ops to SDPA's one) outweighs
# SDPA's slower arithmetic. Timed alone, 2 lanes of 4 queries over 70 keys took SDPA 39 us and
# matmuls 76; 16 lanes of 4 over 130 keys, 298 and 242 (the log, machine A, stop 44).
MATMUL_MIN_SCORES = 12_000
# Least lanes: a lone lane's call (one lane drafting among lanes that do not) is cheaper in SDPA
# at every length, its keys not copied contiguous for two oneDNN calls (ctx 384: 71 us against
# 107 at 5 queries, 145 against 150 at 17); from two lanes of 17 queries matmuls win.
MATMUL_MIN_LANES = 2
# Most scores a KV head (lanes x rows x keys) for matmuls, which hold them all at once; larger
# calls (long prefill chunks) keep SDPA's flash kernel, whose memory is bounded.
MATMUL_MAX_SCORES = 1 << 21
# oneDNN builds a kernel for every new matmul shape (0.3-0.8 ms a matmul here), and a lane's
# context grows every step: matmul calls pad their keys, masked, to a multiple of this so that
# shapes repeat.
KEY_BUCKET = 64
# On a CPU with AMX, SDPA's bf16 flash kernel packs a call of at least this many query rows a KV
# head over at least this many keys for oneDNN's brgemm, which JIT-builds kernels for the shape
# of the call's last query block (rows mod 32, 64 or 256) and last key block (keys mod 512) and
# keeps every one for the life of the process: 0.5 MB a new shape (1288 prefill shapes grew the
# process by 664 MB on the 2-core Xeon), gigabytes over a day of prefill chunks. Such calls pad
# their keys, masked, to a multiple of KEY_BUCKET and their query rows a KV head to a multiple
# of QUERY_ROW_BUCKET, so that at most 8 x 8 block shapes recur.
PACKED_SDPA_MIN = 64
QUERY_ROW_BUCKET = 32
# Most bytes of keys and values (every KV head's) one call gathers, but for a lone lane's: a call
# gathers copies of its lanes' blocks and SDPA reads them back, which past the CPU's caches goes
# to memory twice more. SmolLM2-135M, bf16, on the 2-core EPYC: 8 lanes at 3072 tokens (19 MB a
# layer) decoded at 25 ms a lane, 16 (38 MB) at 45, and 16 took 0.53x that time in calls of at
# most 2, 8 or 16 MB (paired passes); 32 lanes at 1024 tokens (25 MB), 0.47x in calls of 16.
GATHER_MAX_BYTES = 16 << 20


@dataclass(slots=True)
class Call:
    """Lanes attended in one call; `unfolded`: each query of theirs as a one-query lane."""
    lanes: list[int]
    unfolded: bool = False


@dataclass(slots=True)
class LaneGroup:
    """Lanes attended in one batched call, each with q_len query rows: its own queries, after
    front padding for a lane with fewer. In an unfolded call each "lane" is one query of a lane."""
    rows: torch.Tensor          # [num_lanes * q_len] packed row read for each query row
    out_rows: torch.Tensor      # [num_lanes * q_len] row written; padding writes a scratch row
    blocks: torch.Tensor        # [num_lanes * max_blocks] block ids, each lane's table padded
    num_lanes: int
    q_len: int
    max_blocks: int
    ctx: int                    # longest context in the group
    mask: torch.Tensor | None   # [num_lanes, 1, group * q_len + pad_rows, ctx] additive: 0 or -inf
    pad_rows: int               # query rows a KV head added past the last (QUERY_ROW_BUCKET)
    first_block: int | None     # set when `blocks` is one consecutive run starting here
    matmul: bool                # attended by `_matmul_attention`, else by SDPA


@dataclass(slots=True)
class AttentionPlan:
    groups: list[LaneGroup]
    num_tokens: int
    in_order: bool  # one group whose rows are 0..num_tokens-1: no gather or scatter of rows
    padded: bool    # some group pads queries: outputs need a scratch row


def merge_query_lengths(q_lens: list[int], ctx_lens: list[int],
                        call_cost_pairs: float = CALL_COST_PAIRS,
                        gather_cost_pairs: float = GATHER_COST_PAIRS) -> list[Call]:
    """Lanes partitioned into attention calls: runs of neighbouring query lengths, chosen to
    minimise calls x `call_cost_pairs` + the query-key pairs each call computes, its lanes padded
    to its longest query and context, or, unfolded, its queries unpadded plus
    `gather_cost_pairs` a key for each query past a lane's first. Exact dynamic programming over
    the distinct lengths."""
    by_q_len: dict[int, list[int]] = {}
    for lane, q_len in enumerate(q_lens):
        by_q_len.setdefault(q_len, []).append(lane)
    lengths = sorted(by_q_len)
    longest = [max(ctx_lens[i] for i in by_q_len[q_len]) for q_len in lengths]
    best = [0.0] + [float("inf")] * len(lengths)  # best[j]: cost of the first j lengths
    cut, unfold = [0] * (len(lengths) + 1), [False] * (len(lengths) + 1)
    for end in range(1, len(lengths) + 1):
        lanes = queries = ctx = 0
        for start in range(end, 0, -1):  # the call holds lengths[start - 1 .. end - 1]
            run = len(by_q_len[lengths[start - 1]])
            lanes, queries = lanes + run, queries + run * lengths[start - 1]
            ctx = max(ctx, longest[start - 1])
            padded = lanes * lengths[end - 1] * ctx
            unfolded = queries * ctx + gather_cost_pairs * (queries - lanes) * ctx
            cost = best[start - 1] + call_cost_pairs + min(padded, unfolded)
            if cost < best[end]:
                best[end], cut[end], unfold[end] = cost, start - 1, unfolded < padded
    calls, end = [], len(lengths)
    while end:
        # lanes in packed order: a call over all lanes, unfolded or unpadded, reads rows in order
        calls.append(Call(sorted(lane for q_len in lengths[cut[end]:end]
                                 for lane in by_q_len[q_len]), unfold[end]))
        end = cut[end]
    return calls[::-1]


def split_by_context(ctxs: list[int], q_len: int, key_bytes: int = 0,
                     call_cost_pairs: float = CALL_COST_PAIRS,
                     max_bytes: int = GATHER_MAX_BYTES) -> list[list[int]]:
    """A call's entries (their contexts `ctxs`, `q_len` queries each at most) parted into calls of
    neighbouring contexts, minimising calls x `call_cost_pairs` + the query-key pairs each
    computes, its entries padded to its longest context; no call of several entries gathers
    more than `max_bytes` at `key_bytes` a position (0: no such bound). A swarm's lanes sit at
    contexts far apart (one at 3000 tokens among fifteen at 300 took 9x the time in one call as
    in two). Indexes into `ctxs`, each part in their order; exact dynamic programming over the
    entries by context."""
    n = len(ctxs)
    most = max(ctxs)
    if (n * most - sum(ctxs)) * q_len <= call_cost_pairs and n * most * key_bytes <= max_bytes:
        return [list(range(n))]  # no part could save what another call costs
    order = sorted(range(n), key=ctxs.__getitem__)
    best = [0.0] + [math.inf] * n  # best[j]: the cost of the j shortest entries' calls
    cut = [0] * (n + 1)
    for end in range(1, n + 1):
        longest = ctxs[order[end - 1]]
        for start in range(end - 1, -1, -1):  # a call of the entries start .. end - 1
            size = end - start
            if size > 1 and size * longest * key_bytes > max_bytes:
                break  # (longer calls gather more still)
            cost = best[start] + call_cost_pairs + size * q_len * longest
            if cost < best[end]:
                best[end], cut[end] = cost, start
    parts, end = [], n
    while end:
        parts.append(sorted(order[cut[end]:end]))
        end = cut[end]
    return parts[::-1]


def position_bytes(num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
    """What a cached position's keys and values take in one layer (`plan_attention`'s
    `key_bytes`)."""
    return 2 * num_kv_heads * head_dim * dtype.itemsize


def plan_attention(block_tables: torch.Tensor, cu_q_lens: torch.Tensor, ctx_lens: torch.Tensor,
                   block_size: int, group_size: int, dtype: torch.dtype,
                   call_cost_pairs: float = CALL_COST_PAIRS,
                   gather_cost_pairs: float = GATHER_COST_PAIRS, window: int | None = None,
                   softcap: bool = False, key_bytes: int = 0) -> AttentionPlan:
    """Group lanes into calls (`merge_query_lengths` at `call_cost_pairs`, then
    `split_by_context` with `key_bytes`, what a cached position's keys and values take:
    `position_bytes`), build
    their index tensors and masks. The masks are additive in the queries' `dtype`: SDPA converts
    a bool mask on every call, ~20 us of a 150-600 us call at SmolLM2 shapes, bf16. With a
    `window` a query sees only the `window` keys up to its own (sliding-window attention);
    `softcap`: every call is matmuls, the only path that can cap the scores."""
    device = block_tables.device
    may_matmul = (dtype == torch.bfloat16 and device.type == "cpu" and cpu_has_fast_bf16()
                  and matmuls_beat_sdpa())
    packs = sdpa_packs_for_brgemm(dtype, device)
    cu = cu_q_lens.tolist()
    ctx_list = ctx_lens.tolist()
    tables = block_tables.tolist()
    q_lens = [cu[i + 1] - cu[i] for i in range(len(ctx_list))]
    # In a window, a lane's keys are read from the block of its first query's earliest key on:
    # `skipped` blocks before it none of its queries sees, and positions count from there.
    skipped = [max(0, c - q - window + 1) // block_size if window else 0
               for c, q in zip(ctx_list, q_lens)]
    ctx_list = [c - s * block_size for c, s in zip(ctx_list, skipped)]
    num_tokens, groups, padded = cu[-1], [], False
    for call in merge_query_lengths(q_lens, ctx_list, call_cost_pairs, gather_cost_pairs):
        # Each entry attends as a lane: (first packed row, queries, context, lane it reads).
        if call.unfolded:  # query j of lane i sits at ctx - q_len + j and sees keys up to it
            everyone = [(cu[i] + j, 1, ctx_list[i] - q_lens[i] + 1 + j, i)
                        for i in call.lanes for j in range(q_lens[i])]
        else:
            everyone = [(cu[i], q_lens[i], ctx_list[i], i) for i in call.lanes]
        # entries far apart in context, or too many to gather at once, attend in calls of
        # their own (`split_by_context`)
        for part in split_by_context([c for _, _, c, _ in everyone],
                                     max(q for _, q, _, _ in everyone), key_bytes):
            entries = [everyone[i] for i in part]
            q_len = max(q for _, q, _, _ in entries)
            ctx = max(c for _, _, c, _ in entries)
            scores = len(entries) * group_size * q_len * ctx
            matmul = softcap or (may_matmul and group_size * q_len >= MATMUL_MIN_ROWS
                                 and len(entries) >= MATMUL_MIN_LANES
                                 and MATMUL_MIN_SCORES <= scores <= MATMUL_MAX_SCORES)
            bucketed = matmul or (packs and group_size * q_len >= PACKED_SDPA_MIN
                                  and ctx >= PACKED_SDPA_MIN)
            if bucketed:
                ctx = -(-ctx // KEY_BUCKET) * KEY_BUCKET
            pad_rows = -group_size * q_len % QUERY_ROW_BUCKET if bucketed and not matmul else 0
            max_blocks = -(-ctx // block_size)
            # An entry with fewer queries is padded in front: its padding rows repeat its first
            # query (any finite row) and write to the scratch row past the last token.
            rows, out_rows = [], []
            for row, q, _, _ in entries:
                pad = q_len - q
                padded |= pad > 0
                rows += [row] * pad + list(range(row, row + q))
                out_rows += [num_tokens] * pad + list(range(row, row + q))
            # keys past a lane's blocks (to the longest context, or KEY_BUCKET's) come from block
            # 0, masked
            read = [tables[i][skipped[i]:skipped[i] + max_blocks] for *_, i in entries]
            blocks = [b for table in read for b in table + [0] * (max_blocks - len(table))]
            ctxs = torch.tensor([c for _, _, c, _ in entries], device=device)
            mask = None
            if q_len > 1 or any(c != ctx for _, _, c, _ in entries) or window and ctx > window:
                # Query row j of an entry sits at position ctx - q_len + j and sees keys up to
                # it; a padding row before position 0 sees key 0, so that no row is empty.
                last = (ctxs[:, None] - q_len + torch.arange(q_len, device=device)).clamp(min=0)
                keys = torch.arange(ctx, device=device)
                hidden = keys > last[:, :, None]                              # [G, q_len, ctx]
                if window:
                    hidden |= keys <= last[:, :, None] - window
                mask = torch.zeros(hidden.shape, dtype=dtype, device=device).masked_fill_(
                    hidden, float("-inf"))
                mask = mask[:, None].expand(len(entries), group_size, q_len, ctx)
                mask = mask.reshape(len(entries), 1, group_size * q_len, ctx)
                if pad_rows:  # padding query rows see every key: finite, and dropped
                    mask = F.pad(mask, (0, 0, 0, pad_rows))
            consecutive = blocks == list(range(blocks[0], blocks[0] + len(blocks)))
            groups.append(LaneGroup(rows=torch.tensor(rows, device=device),
                                    out_rows=torch.tensor(out_rows, device=device),
                                    blocks=torch.tensor(blocks, device=device),
                                    num_lanes=len(entries), q_len=q_len, max_blocks=max_blocks,
                                    ctx=ctx, mask=mask, pad_rows=pad_rows,
                                    first_block=blocks[0] if consecutive else None, matmul=matmul))
    in_order = len(groups) == 1 and groups[0].rows.tolist() == list(range(num_tokens))
    return AttentionPlan(groups=groups, num_tokens=num_tokens, in_order=in_order, padded=padded)


def _gather_blocks(cache: torch.Tensor, g: LaneGroup) -> torch.Tensor:
    """The group's blocks in lane order: a view when they are one consecutive run (a lone lane in
    a fresh cache), else a gather over rows of the flattened cache (index_select along dim 0 of
    the 4-D cache is ~60x slower on CPU than on its 2-D view)."""
    if g.first_block is not None:
        return cache.narrow(0, g.first_block, g.blocks.numel())
    return cache.view(cache.shape[0], -1).index_select(0, g.blocks).view(-1, *cache.shape[1:])


def _matmul_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      mask: torch.Tensor | None, scale: float,
                      softcap: float | None = None) -> torch.Tensor:
    """SDPA's result as two matmuls; keys and values made contiguous first, which the matmuls
    would otherwise do more slowly. `softcap`: scores s become softcap * tanh(s / softcap) before
    the mask (Gemma 2)."""
    scores = torch.matmul(q, k.contiguous().transpose(-1, -2))
    scores.mul_(scale)
    if softcap is not None:
        scores.div_(softcap).tanh_().mul_(softcap)
    if mask is not None:
        scores.add_(mask)
    return torch.matmul(torch.softmax(scores, -1), v.contiguous())


def sdpa_packs_for_brgemm(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether SDPA's CPU flash kernel packs large calls of `dtype` for oneDNN's brgemm, which
    keeps a kernel for every shape it meets (`PACKED_SDPA_MIN`): bf16 where the CPU has AMX."""
    return (dtype == torch.bfloat16 and device.type == "cpu" and torch.backends.mkldnn.enabled
            and torch.cpu._is_amx_tile_supported())


@functools.cache
def matmuls_beat_sdpa() -> bool:
    """Whether two matmuls attend a bf16 call of many query rows clearly faster than SDPA on this
    CPU: timed once a process on 4 lanes of 17 queries over 256 gathered keys, SmolLM2-135M's
    heads (3 KV heads of 3 query heads, 64 wide), the shape where the choice mattered most.
    About 10 ms."""
    lanes, q_len, keys, kv_heads, group, head_dim = 4, 17, 256, 3, 3, 64
    q = torch.randn(lanes, kv_heads, group * q_len, head_dim, dtype=torch.bfloat16)
    # laid out as gathered blocks are: [lanes, keys, kv_heads, head_dim] seen as a transpose
    k, v = (torch.randn(lanes, keys, kv_heads, head_dim, dtype=torch.bfloat16).transpose(1, 2)
            for _ in range(2))
    mask = torch.zeros(lanes, 1, group * q_len, keys, dtype=torch.bfloat16)
    return runs_faster(lambda: _matmul_attention(q, k, v, mask, 0.125),
                       lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.125))


def runs_faster(first: Callable[[], object], second: Callable[[], object], reps: int = 9,
                margin: float = 0.9) -> bool:
    """Whether `first` takes at most `margin` x the time of `second`: medians of `reps` calls
    each, interleaved so that a burst of load slows both, after one warm-up call each."""
    times: tuple[list[float], list[float]] = ([], [])
    for rep in range(reps + 1):
        for f, spent in zip((first, second), times):
            start = time.perf_counter()
            f()
            if rep:
                spent.append(time.perf_counter() - start)
    return statistics.median(times[0]) <= margin * statistics.median(times[1])


def runs_kernels(t: torch.Tensor) -> bool:
    """Whether hip_kernels' kernels serve `t`'s device: a GPU where they built."""
    return t.is_cuda and hip_kernels.available()


def write_kv(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    """Store new keys/values; slot = block * block_size + offset."""
    # k, v: [num_tokens, kvh, hd]; caches: [num_blocks, block_size, kvh, hd]
    assert k.shape == v.shape and k.shape[0] == slot_mapping.shape[0], (k.shape, slot_mapping.shape)
    if runs_kernels(k):  # the kernels read rows packed: v (and k) may be views into qkv
        return hip_kernels.write_kv(k.contiguous(), v.contiguous(), k_cache, v_cache,
                                    slot_mapping)
    k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slot_mapping, k)
    v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slot_mapping, v)


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    block_tables: torch.Tensor, cu_q_lens: torch.Tensor, ctx_lens: torch.Tensor,
                    scale: float, plan: AttentionPlan | None = None, window: int | None = None,
                    softcap: float | None = None) -> torch.Tensor:
    """Query j of lane i sits at position ctx_lens[i] - q_len_i + j and attends keys 0..that
    position, or its last `window` of them. `plan` is the same for every layer of a step (with
    the window and softcap its layers have); pass it to skip re-planning."""
    # q: [num_tokens, nh, hd]; caches: [num_blocks, bs, kvh, hd]; block_tables: [lanes, max_blocks]
    if runs_kernels(q) and window is None and softcap is None:
        return hip_kernels.paged_attention(q.contiguous(), k_cache, v_cache, block_tables,
                                           cu_q_lens, ctx_lens, scale)
    return torch_paged_attention(q, k_cache, v_cache, block_tables, cu_q_lens, ctx_lens, scale,
                                 plan, window, softcap)


def torch_paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                          block_tables: torch.Tensor, cu_q_lens: torch.Tensor,
                          ctx_lens: torch.Tensor, scale: float,
                          plan: AttentionPlan | None = None, window: int | None = None,
                          softcap: float | None = None) -> torch.Tensor:
    """`paged_attention` in torch on any device: lanes batched into SDPA (or matmul) calls over
    their gathered blocks, as `plan` groups them."""
    num_tokens, num_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_heads // num_kv_heads
    assert num_heads % num_kv_heads == 0 and k_cache.shape[3] == head_dim
    if plan is None:
        plan = plan_attention(block_tables, cu_q_lens, ctx_lens, block_size, group, q.dtype,
                              window=window, softcap=softcap is not None,
                              key_bytes=position_bytes(num_kv_heads, head_dim, k_cache.dtype))
    assert softcap is None or all(g.matmul for g in plan.groups), "SDPA cannot cap scores"
    assert plan.num_tokens == num_tokens, (plan.num_tokens, num_tokens)
    out = None if plan.in_order else q.new_empty(num_tokens + plan.padded, num_heads, head_dim)
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
        if g.matmul:
            o = _matmul_attention(q_g, k_g, v_g, g.mask, scale, softcap)
        elif g.pad_rows:  # rows that only round the call's shape (QUERY_ROW_BUCKET): dropped
            o = F.scaled_dot_product_attention(F.pad(q_g, (0, 0, 0, g.pad_rows)), k_g, v_g,
                                               attn_mask=g.mask, scale=scale)[:, :, :group * q_len]
        else:
            o = F.scaled_dot_product_attention(q_g, k_g, v_g, attn_mask=g.mask, scale=scale)
        o = (o.view(lanes, num_kv_heads, group, q_len, head_dim)  # [G, kvh, group*q_len, hd]
             .permute(0, 3, 1, 2, 4).reshape(lanes * q_len, num_heads, head_dim))
        if plan.in_order:
            return o
        out.index_copy_(0, g.out_rows, o)
    return out[:num_tokens]
