"""A layer's MLP: gated (a dense layer's, and each expert's), plain (a dense layer's without a
gate: Arcee's, StarCoder2's), or a mixture of experts that a router picks among for every token
(Mixtral, Qwen2-MoE with its shared expert, Qwen3-MoE, OLMoE, GraniteMoE; LFM2-MoE by
sigmoids). Weights are stored gate and up fused, as the dense layers' are (engine/model.py)."""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from engine.config import ModelConfig
from engine.linear import linear

Activation = Callable[[Tensor], Tensor]


def gated_mlp(h: Tensor, gate_up: Tensor, down: Tensor, activation: Activation) -> Tensor:
    """down(activation(gate h) * up h)."""
    gate, up = linear(h, gate_up).chunk(2, dim=-1)                       # [n, inter] each
    return linear(activation(gate) * up, down)


def plain_mlp(h: Tensor, up: Tensor, down: Tensor, activation: Activation,
              up_bias: Tensor | None = None, down_bias: Tensor | None = None) -> Tensor:
    """down(activation(up h)): an MLP without a gate (Arcee's, StarCoder2's)."""
    return linear(activation(linear(h, up, up_bias)), down, down_bias)      # [n, hidden]


class Expert(nn.Module):
    """One gated MLP's weights: an expert's, or Qwen2-MoE's shared one."""
    LINEARS = ("gate_up", "down")  # the weights `linear` multiplies by (LlamaModel.prepack)

    def __init__(self, hidden: int, width: int, dtype: torch.dtype, device) -> None:
        super().__init__()
        self.gate_up = nn.Parameter(torch.empty(2 * width, hidden, dtype=dtype, device=device))
        self.down = nn.Parameter(torch.empty(hidden, width, dtype=dtype, device=device))


class MixtureOfExperts(nn.Module):
    """Each token's output: the sum over the experts its router ranks highest of the router's
    weight times that expert's MLP, computed expert by expert over the tokens that chose it, so a
    step reads only the experts its tokens chose (a decode step's cost grows with the distinct
    experts its lanes and drafts touch: calibration measures it)."""

    def __init__(self, config: ModelConfig, dtype: torch.dtype, device) -> None:
        super().__init__()
        c = config
        self.per_token, self.normalize = c.experts_per_token, c.normalize_expert_weights
        self.sigmoid_routing, self.routed_scaling = c.sigmoid_routing, c.routed_scaling
        self.router = nn.Parameter(torch.empty(c.num_experts, c.hidden_size, dtype=dtype,
                                               device=device))
        # (in fp32, as LFM2-MoE keeps it: it only ranks, and bf16 would reorder close scores)
        self.expert_bias = (nn.Parameter(torch.empty(c.num_experts, dtype=torch.float32,
                                                     device=device))
                            if c.expert_bias else None)
        self.experts = nn.ModuleList(Expert(c.hidden_size, c.expert_size, dtype, device)
                                     for _ in range(c.num_experts))
        self.shared = (Expert(c.hidden_size, c.shared_expert_size, dtype, device)
                       if c.shared_expert_size else None)
        self.shared_gate = (nn.Parameter(torch.empty(1, c.hidden_size, dtype=dtype, device=device))
                            if c.shared_expert_size else None)
        self.LINEARS = ("router",) + (("shared_gate",) if self.shared_gate is not None else ())

    def forward(self, h: Tensor, activation: Activation) -> Tensor:
        n, per_token = h.shape[0], self.per_token
        weights, chosen = (self._sigmoid_routed(h) if self.sigmoid_routing else
                           self._softmax_routed(h))                      # [n, per_token]
        # The (token, choice) pairs grouped by expert, each expert's MLP run once over its
        # group's rows, then put back in pair order and summed by the weights, one product for
        # all: ~6 ops an expert where gathering, weighting and adding each group apart took ~9,
        # and a decode step runs 8 experts in each of dozens of layers. A random Qwen3-MoE-shaped
        # model (16 layers of 64 experts, 8 a token; bf16, the 2-core EPYC), ms a step: one
        # token 44.6 -> 40.5, 8 lanes 69.9 -> 61.9.
        pairs = chosen.flatten()
        order = pairs.argsort(stable=True)
        counts = torch.bincount(pairs, minlength=len(self.experts)).tolist()
        inputs = h[order // per_token]                                   # [n x per_token, hidden]
        outputs, start = [], 0
        for expert, count in zip(self.experts, counts):
            if count:
                outputs.append(gated_mlp(inputs[start:start + count], expert.gate_up, expert.down,
                                         activation))
                start += count
        by_pair = torch.empty_like(inputs)
        by_pair[order] = torch.cat(outputs)
        out = torch.bmm(weights.to(h.dtype).view(n, 1, per_token),
                        by_pair.view(n, per_token, -1)).view(n, -1)
        if self.shared is not None:
            shared = gated_mlp(h, self.shared.gate_up, self.shared.down, activation)
            out = out + torch.sigmoid(linear(h, self.shared_gate)) * shared
        return out

    def _softmax_routed(self, h: Tensor) -> tuple[Tensor, Tensor]:
        """Each token's chosen experts and their weights: a softmax in fp32, the top few's
        weights (rescaled) in the model's dtype, as transformers routes."""
        probs = torch.softmax(linear(h, self.router).float(), dim=-1)   # [n, experts]
        weights, chosen = probs.topk(self.per_token, dim=-1)
        if self.normalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights, chosen

    def _sigmoid_routed(self, h: Tensor) -> tuple[Tensor, Tensor]:
        """LFM2-MoE's: each expert's sigmoid score, ranked with its bias added, the chosen
        ones' scores (normalized, as transformers does, with 1e-6 below) the weights."""
        scores = torch.sigmoid(linear(h, self.router))                   # [n, experts]
        ranked = scores if self.expert_bias is None else scores.float() + self.expert_bias
        chosen = ranked.topk(self.per_token, dim=-1).indices
        weights = scores.gather(1, chosen)
        if self.normalize:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-6)
        return weights * self.routed_scaling if self.routed_scaling != 1.0 else weights, chosen
