"""LFM2's gated short convolution, the mixer of its layers that do not attend: in_proj splits
each token into B, C and x; a depthwise causal convolution over the last `conv_kernel` positions
of B * x, gated by C, goes through out_proj.

Each position's B * x is kept in the paged cache beside the keys and values (PagedKVCache.conv),
so the positions a token convolves over are read as attention reads keys: by slot. A rejected
draft's rows are overwritten before any later token reads them, so rolling a lane back, sharing
a prompt's blocks and forking a sequence all work as they do for attention, at the price of a
row of `hidden_size` per position and short-convolution layer."""
from __future__ import annotations

import torch
from torch import Tensor, nn

from engine.config import ModelConfig
from engine.linear import linear


class ShortConv(nn.Module):
    LINEARS = ("in_proj", "out_proj")  # the weights `linear` multiplies by (LlamaModel.prepack)

    def __init__(self, config: ModelConfig, dtype: torch.dtype, device) -> None:
        super().__init__()
        kw, hidden = {"dtype": dtype, "device": device}, config.hidden_size

        def bias(width: int) -> nn.Parameter | None:
            return nn.Parameter(torch.empty(width, **kw)) if config.conv_bias else None

        self.in_proj = nn.Parameter(torch.empty(3 * hidden, hidden, **kw))
        self.in_bias = bias(3 * hidden)
        # [hidden, 1, L], as LFM2's checkpoints hold it (a depthwise Conv1d's weight)
        self.kernel = nn.Parameter(torch.empty(hidden, 1, config.conv_kernel, **kw))
        self.kernel_bias = bias(hidden)
        self.out_proj = nn.Parameter(torch.empty(hidden, hidden, **kw))
        self.out_bias = bias(hidden)

    def forward(self, h: Tensor, cache: Tensor, slot_mapping: Tensor, write_rows: Tensor | None,
                preceding: Tensor) -> Tensor:
        """h: [n, hidden]; cache: this layer's [num_blocks + 1, block_size, hidden]; preceding:
        [n, conv_kernel - 1] slots of each row's positions before it (preceding_slots)."""
        b, c, x = linear(h, self.in_proj, self.in_bias).chunk(3, dim=-1)
        bx = b * x                                                        # [n, hidden]
        stored = cache.view(-1, cache.shape[-1])
        # stored first: a row reads its lane's earlier rows of this pass from the cache
        stored.index_copy_(0, slot_mapping, bx if write_rows is None else bx[write_rows])
        window = torch.cat((stored[preceding], bx[:, None]), dim=1)      # [n, L, hidden]
        # summed in fp32 where the model computes in less, as a convolution accumulates
        wide = torch.promote_types(bx.dtype, torch.float32)
        kernel = self.kernel[:, 0].t()                                    # [L, hidden]
        mixed = (window.to(wide) * kernel.to(wide)).sum(dim=1).to(bx.dtype)
        if self.kernel_bias is not None:
            mixed = mixed + self.kernel_bias
        return linear(c * mixed, self.out_proj, self.out_bias)


def preceding_slots(positions: Tensor, block_tables: Tensor, cu_q_lens: Tensor,
                    block_size: int, back: int, zero_slot: int) -> Tensor:
    """[n, back]: the cache slot of each row's `back` positions before its own, earliest first,
    in its lane's blocks; `zero_slot` (PagedKVCache's, which stays zero) for those before the
    first."""
    lanes = torch.repeat_interleave(torch.arange(len(cu_q_lens) - 1, device=positions.device),
                                    cu_q_lens.diff(), output_size=len(positions))
    before = positions[:, None] - torch.arange(back, 0, -1, device=positions.device)
    seen = before.clamp(min=0)
    slots = (block_tables[lanes[:, None], seen // block_size].long() * block_size
             + seen % block_size)
    return torch.where(before >= 0, slots, zero_slot)
