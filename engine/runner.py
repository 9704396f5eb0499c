"""Turns a step's lanes into one forward pass over the paged KV cache, in the packed or the
padded layout, and hands back logits only for the rows that need them."""
from __future__ import annotations

import torch

from engine.attention import plan_attention, position_bytes, runs_kernels
from engine.devices import synchronize
from engine.errors import KVCacheFull
from engine.forward_batch import ForwardOutput, LaneInput
from engine.kv_cache import PagedKVCache
from engine.model import LlamaModel, StepMetadata
from engine.short_conv import preceding_slots

LAYOUTS = ("packed", "padded")


class ModelRunner:
    def __init__(self, model: LlamaModel, kv: PagedKVCache) -> None:
        if kv.config != model.config:
            raise ValueError("the KV cache was built for a different model config")
        if kv.dtype != model.dtype or kv.device != model.device:
            raise ValueError(f"KV cache is {kv.dtype} on {kv.device}, model is "
                             f"{model.dtype} on {model.device}")
        self.model, self.kv = model, kv

    def synchronize(self) -> None:
        """Wait for the passes queued on the model's device (a GPU's run after forward returns)."""
        synchronize(self.model.device)

    @torch.inference_mode()
    def forward(self, lanes: list[LaneInput], layout: str = "packed") -> ForwardOutput:
        """Cache every lane's new tokens and return logits of its trailing `logits_rows` rows.

        Raises KVCacheFull, with nothing allocated or written, when the lanes do not fit."""
        if layout not in LAYOUTS:
            raise ValueError(f"unknown ragged layout {layout!r}; use one of {LAYOUTS}")
        if not lanes:
            raise ValueError("a forward pass needs at least one lane")
        self._reserve(lanes)
        bs = self.kv.block_size
        tables = [self.kv.blocks.block_table(lane.seq_id) for lane in lanes]
        q_lens = [len(lane.token_ids) for lane in lanes]
        width = max(q_lens) if layout == "padded" else 0
        ids, positions, slots, write_rows, logit_rows, cu, ctx = [], [], [], [], [], [0], []
        for lane, table, q_len in zip(lanes, tables, q_lens):
            row0 = cu[-1]
            span = max(q_len, width)  # padded: the lane's rectangle row, tokens then padding
            ids += lane.token_ids + [lane.token_ids[-1]] * (span - q_len)
            positions += range(lane.start_pos, lane.start_pos + span)
            slots += [table[p // bs] * bs + p % bs for p in range(lane.start_pos, lane.end_pos)]
            write_rows += range(row0, row0 + q_len)
            logit_rows += range(row0 + q_len - lane.logits_rows, row0 + q_len)
            cu.append(row0 + span)
            ctx.append(lane.start_pos + span)
        max_blocks = -(-max(ctx) // bs)
        # Padding queries may see past a lane's blocks; entry 0 is any valid block, and only
        # padding rows (whose output is dropped) ever read through it.
        padded_tables = [t[:max_blocks] + [0] * (max_blocks - len(t)) for t in tables]
        dev = self.model.device
        block_tables = torch.tensor(padded_tables, dtype=torch.int32, device=dev)
        cu_q_lens = torch.tensor(cu, dtype=torch.int32, device=dev)
        ctx_lens = torch.tensor(ctx, dtype=torch.int32, device=dev)
        positions = torch.tensor(positions, dtype=torch.int64, device=dev)
        c = self.model.config

        def plan(window: int | None = None):
            return plan_attention(block_tables, cu_q_lens, ctx_lens, bs, c.group_size,
                                  self.model.dtype, window=window,
                                  softcap=c.attention_softcap is not None,
                                  key_bytes=position_bytes(c.num_kv_heads, c.head_dim,
                                                           self.model.dtype))

        # The kernels need no plan (making one reads the tables back from the GPU), but they
        # neither cap scores nor slide a window.
        kernels = runs_kernels(positions) and c.attention_softcap is None
        meta = StepMetadata(
            positions=positions,
            write_rows=(None if len(write_rows) == cu[-1] else
                        torch.tensor(write_rows, dtype=torch.int64, device=dev)),
            slot_mapping=torch.tensor(slots, dtype=torch.int64, device=dev),
            block_tables=block_tables, cu_q_lens=cu_q_lens, ctx_lens=ctx_lens,
            plan=None if kernels else plan(),
            sliding_plan=(plan(c.sliding_window) if c.sliding_layers and max(ctx) > c.sliding_window
                          else None),
            conv_slots=(preceding_slots(positions, block_tables, cu_q_lens, bs, c.conv_kernel - 1,
                                        self.kv.zero_slot)
                        if c.conv_layers else None),
            recurrent=(None if self.kv.recurrent is None else
                       self.kv.recurrent.plan(lanes, cu, self.kv.blocks.__contains__)))
        try:
            logits = self.model(torch.tensor(ids, dtype=torch.int64, device=dev), meta, self.kv,
                                torch.tensor(logit_rows, dtype=torch.int64, device=dev))
        except BaseException:
            if self.kv.recurrent is not None:  # some layers' states moved on, some did not
                self.kv.recurrent.lose(lanes)
            raise
        if self.kv.recurrent is not None:
            self.kv.recurrent.commit(lanes)
        return ForwardOutput(logits=list(logits.split([lane.logits_rows for lane in lanes])),
                             pad=[max(q_len, width) - q_len for q_len in q_lens], rows=logits)

    def _reserve(self, lanes: list[LaneInput]) -> None:
        """Allocate KV room for every lane up to its end_pos, all or nothing."""
        blocks = self.kv.blocks
        seen = set()
        needed = 0
        for lane in lanes:
            if lane.seq_id in seen:
                raise ValueError(f"sequence {lane.seq_id} appears twice in one step")
            seen.add(lane.seq_id)
            if lane.start_pos > blocks.capacity_tokens(lane.seq_id):
                raise ValueError(f"sequence {lane.seq_id} starts at {lane.start_pos} but only "
                                 f"{blocks.capacity_tokens(lane.seq_id)} tokens have KV room")
            needed += blocks.blocks_needed(lane.seq_id, lane.end_pos)
        if needed > blocks.num_free_blocks:
            raise KVCacheFull(f"this step needs {needed} more KV blocks; "
                              f"{blocks.num_free_blocks} of {blocks.num_blocks} are free")
        for lane in lanes:
            blocks.ensure(lane.seq_id, lane.end_pos)
