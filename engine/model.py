"""The Llama-family decoder (Llama, Mistral, Qwen2 and Seed-OSS with qkv bias, GLM-4 with it, norms
around each sublayer and RoPE on adjacent pairs, Qwen3 with q/k RMSNorm, SmolLM, SmolLM3 with layers
without RoPE, Phi-3, Granite with its scalars, OLMo 2 and 3 and EXAONE 4 with their norms after,
Gemma 1-3 with theirs, Cohere 1 and 2 with LayerNorms and attention and MLP side by side, StableLM
with LayerNorms' biases, Arcee with an MLP without a gate, StarCoder2 with both and biases on every
projection, Phi-2 with all of that side by side and its head's bias; sliding windows in OLMo 3's,
Gemma's and others' layers, a RoPE of their own in Gemma 3's and OLMo 3's; Mixtral, Qwen2-MoE,
Qwen3-MoE, OLMoE and GraniteMoE with mixtures of experts, engine/mlp.py; LFM2 and LFM3 with short
convolutions in place of attention in most layers, engine/short_conv.py) as one forward over
packed tokens of many lanes and a paged KV cache.

Weights arrive under Hugging Face names; q/k/v and gate/up are stored fused so each layer runs
two matmuls fewer (Python overhead per op matters with 30 layers on CPU), as Phi-3's checkpoints
hold them already. RoPE follows HF's rotate_half convention, on a head's leading rotary_dim."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from engine import rope
from engine.attention import AttentionPlan, paged_attention, write_kv
from engine.checkpoint_layout import (check_shapes, fused_rows, halves_turned, hf_shapes,
                                      hf_sources, num_weights, one_plus_weight, rope_rows)
from engine.config import ModelConfig
from engine.kv_cache import PagedKVCache
from engine.linear import SLOW_CPU_BF16_GEMM, WARM_ROWS, linear, prepacks
from engine.mlp import MixtureOfExperts, gated_mlp, plain_mlp
from engine.gated_delta import GatedDeltaNet
from engine.recurrent_state import RecurrentPlan
from engine.short_conv import ShortConv


@dataclass(slots=True)
class StepMetadata:
    """Where this step's tokens sit; built once per step by the runner, shared by all layers."""
    positions: Tensor      # [num_tokens] int64
    write_rows: Tensor | None  # [num_written] rows whose KV is stored (None: all rows)
    slot_mapping: Tensor   # [num_written] int64 cache slot of each stored row
    block_tables: Tensor   # [num_lanes, max_blocks] int32
    cu_q_lens: Tensor      # [num_lanes + 1] int32
    ctx_lens: Tensor       # [num_lanes] int32
    plan: AttentionPlan | None  # None where hip_kernels' attention runs, which needs none
    # sliding-window layers' plan where some lane's context is past the window; None: none is,
    # and they attend as the others do
    sliding_plan: AttentionPlan | None = None
    # [num_tokens, conv_kernel - 1] the slots of each row's preceding positions, read by
    # short-convolution layers (short_conv.preceding_slots); None in models without them
    conv_slots: Tensor | None = None
    # where gated DeltaNet layers read and write (recurrent_state.py); None in models without
    recurrent: RecurrentPlan | None = None


def _rotated(qk: Tensor, cos: Tensor, sin: Tensor, c: ModelConfig) -> Tensor:
    """RoPE: x cos + rotate_half(x) sin, with rotate_half's minus folded into sin's first half
    (`LlamaModel.forward`) and its swap of halves one roll; q and k rotated as one tensor: three
    ops in all, where q and k apart, halves swapped by slices, took ten (~0.6 ms of a one-lane
    decode step, SmolLM2-135M on the 2-core Xeon). cos, sin: [n, 1, rotary_dim]."""
    if c.rotary_dim == c.head_dim:
        return torch.addcmul(qk * cos, qk.roll(c.head_dim // 2, -1), sin)
    # the leading rotary_dim turned, the rest passed as they are
    turned, kept = qk.split((c.rotary_dim, c.head_dim - c.rotary_dim), dim=-1)
    return torch.cat((torch.addcmul(turned * cos, turned.roll(c.rotary_dim // 2, -1), sin), kept),
                     dim=-1)


def norm_dtype(config: ModelConfig, dtype: torch.dtype) -> torch.dtype:
    """The dtype of a model's norm weights: Gemma's are 1 + weight in fp32, as it computes them
    (1 + a small weight in bf16 would lose most of the weight's bits)."""
    return torch.float32 if config.gemma_norms else dtype


def rms_norm(x: Tensor, weight: Tensor, eps: float, bias: None = None) -> Tensor:
    """RMSNorm over the last dimension, in the weight's dtype where it is wider (Gemma's); it has
    no bias (the argument keeps layer_norm's signature)."""
    if weight.dtype == x.dtype:
        return F.rms_norm(x, weight.shape, weight, eps)
    return F.rms_norm(x.to(weight.dtype), weight.shape, weight, eps).to(x.dtype)


def layer_norm(x: Tensor, weight: Tensor, eps: float, bias: Tensor | None = None) -> Tensor:
    """LayerNorm over the last dimension, in fp32 as Cohere computes it."""
    return F.layer_norm(x.float(), weight.shape, weight.float(),
                        None if bias is None else bias.float(), eps).to(x.dtype)


def sublayer_norm(config: ModelConfig) -> Callable[..., Tensor]:
    """The norm of a model's sublayers and of its output."""
    return layer_norm if config.layer_norm else rms_norm


_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "silu": F.silu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu2": lambda x: F.relu(x).square()}


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, dtype: torch.dtype, device, rotates: bool = True,
                 sliding: bool = False, experts: bool = False, conv: bool = False,
                 delta: bool = False, slot: int = 0) -> None:
        super().__init__()
        c, kw = config, {"dtype": dtype, "device": device}
        self.rotates = rotates  # RoPE in this layer (SmolLM3 leaves it out of some)
        self.window = c.sliding_window if sliding else None
        self.local_rope = sliding and c.local_rope_theta is not None
        self.q_size, self.kv_size = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim

        def norm(width: int, present: bool) -> nn.Parameter | None:
            return (nn.Parameter(torch.empty(width, dtype=norm_dtype(c, dtype), device=device))
                    if present else None)

        def norm_bias(width: int, present: bool) -> nn.Parameter | None:
            return norm(width, present and c.norm_bias)

        # Each sublayer's input normed (input_norm, mlp_norm), its output (attn_out_norm,
        # ff_norm: OLMo 2's and Gemma 2's), or both
        self.input_norm = norm(c.hidden_size, c.norm_before)
        self.input_norm_bias = norm_bias(c.hidden_size, c.norm_before)
        # the mixer: attention, LFM2's short convolution or gated DeltaNet; `slot` is its index
        # among the layers of its kind in the cache (PagedKVCache's k and v, conv, or recurrent)
        self.slot = slot
        self.short_conv = ShortConv(c, dtype, device) if conv else None
        self.delta = GatedDeltaNet(c, dtype, device) if delta else None
        attends = not (conv or delta)

        def bias(width: int) -> nn.Parameter | None:
            return nn.Parameter(torch.empty(width, **kw)) if c.linear_bias else None

        if attends:
            # q_proj's output gates (Qwen3.5's) last: they are neither normed nor turned
            self.gate_size = self.q_size if c.output_gate else 0
            projected = self.q_size + 2 * self.kv_size + self.gate_size
            self.qkv = nn.Parameter(torch.empty(projected, c.hidden_size, **kw))
            self.qkv_bias = (nn.Parameter(torch.empty(projected, **kw)) if c.qkv_bias else None)
            q_span, k_span = ((self.q_size, self.kv_size) if c.qk_norm_whole else
                              (c.head_dim,) * 2)
            self.q_norm = norm(q_span, c.qk_norm)
            self.k_norm = norm(k_span, c.qk_norm)
            self.o_proj = nn.Parameter(torch.empty(c.hidden_size, self.q_size, **kw))
            self.o_bias = bias(c.hidden_size)
            self.gate = (nn.Parameter(torch.empty(c.num_heads, c.hidden_size, **kw))
                         if c.attention_gate else None)
        self.attn_out_norm = norm(c.hidden_size, c.norm_after)
        self.mlp_norm = norm(c.hidden_size, c.norm_before and not c.parallel_block)
        self.mlp_norm_bias = norm_bias(c.hidden_size, c.norm_before and not c.parallel_block)
        self.normed = sublayer_norm(c)
        self.ff_norm = norm(c.hidden_size, c.norm_after)
        self.activation = _ACTIVATIONS[c.activation]
        # the MLP: dense (gated, or without a gate), or a mixture of experts
        self.moe = MixtureOfExperts(c, dtype, device) if experts else None
        if not experts:
            if c.gated_mlp:  # gate and up fused
                self.gate_up = nn.Parameter(torch.empty(2 * c.intermediate_size, c.hidden_size,
                                                        **kw))
            else:
                self.up = nn.Parameter(torch.empty(c.intermediate_size, c.hidden_size, **kw))
            self.down = nn.Parameter(torch.empty(c.hidden_size, c.intermediate_size, **kw))
            self.up_bias, self.down_bias = bias(c.intermediate_size), bias(c.hidden_size)
        # the weights `linear` multiplies by (LlamaModel.prepack)
        self.LINEARS = (() if not attends else ("qkv", "o_proj") + (
            ("gate",) if c.attention_gate else ())) + (
            () if experts else ("gate_up" if c.gated_mlp else "up", "down"))
        self.config = config
        # (a layer with RoPE of its own, unscaled, takes none of the scaling's factor)
        self.attention_scale = (c.head_dim ** -0.5 if c.attention_multiplier is None
                                else c.attention_multiplier) * (
            1.0 if self.local_rope else _folded_rope_factor(c) ** 2)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, kv: PagedKVCache, meta: StepMetadata,
                query_scale: Tensor | None = None) -> Tensor:
        c = self.config
        h = x if self.input_norm is None else self.normed(x, self.input_norm, c.rms_norm_eps,
                                                          self.input_norm_bias)
        out = (self.short_conv(h, kv.conv[self.slot], meta.slot_mapping, meta.write_rows,
                               meta.conv_slots) if self.short_conv is not None else
               self.delta(h, kv.recurrent.states[self.slot], kv.recurrent.rows[self.slot],
                          meta.recurrent) if self.delta is not None else
               self._attention(h, cos, sin, kv.k[self.slot], kv.v[self.slot], meta, query_scale))
        if self.attn_out_norm is not None:
            out = self.normed(out, self.attn_out_norm, c.rms_norm_eps)
        x = self._residual(x, out)
        if not c.parallel_block:  # (Cohere's MLP reads the attention's input, `h`)
            h = x if self.mlp_norm is None else self.normed(x, self.mlp_norm, c.rms_norm_eps,
                                                            self.mlp_norm_bias)
        out = (self.moe(h, self.activation) if self.moe is not None else
               gated_mlp(h, self.gate_up, self.down, self.activation) if c.gated_mlp else
               plain_mlp(h, self.up, self.down, self.activation, self.up_bias, self.down_bias))
        if self.ff_norm is not None:
            out = self.normed(out, self.ff_norm, c.rms_norm_eps)
        return self._residual(x, out)

    def _attention(self, h: Tensor, cos: Tensor, sin: Tensor, k_cache: Tensor, v_cache: Tensor,
                   meta: StepMetadata, query_scale: Tensor | None) -> Tensor:
        c = self.config
        n = h.shape[0]                                                    # h: [n, hidden]
        qkv = linear(h, self.qkv, self.qkv_bias)                  # [n, q + 2 kv (+ q)]
        if self.gate_size:  # (split off only where there are gates: most models have none)
            qkv, gate = qkv.split((self.q_size + 2 * self.kv_size, self.gate_size), dim=-1)
        qk, v = qkv.split((self.q_size + self.kv_size, self.kv_size), dim=-1)
        if c.qk_norm_whole:  # across the heads, before RoPE
            q, k = qk.split((self.q_size, self.kv_size), dim=-1)
            qk = torch.cat((rms_norm(q, self.q_norm, c.rms_norm_eps),
                            rms_norm(k, self.k_norm, c.rms_norm_eps)), dim=-1)
        qk = qk.view(n, c.num_heads + c.num_kv_heads, c.head_dim)
        v = v.view(n, c.num_kv_heads, c.head_dim)
        if self.q_norm is not None and not c.qk_norm_whole:  # each head with its own, before RoPE
            q, k = qk.split((c.num_heads, c.num_kv_heads), dim=1)
            qk = torch.cat((rms_norm(q, self.q_norm, c.rms_norm_eps),
                            rms_norm(k, self.k_norm, c.rms_norm_eps)), dim=1)
        if self.rotates:
            qk = _rotated(qk, cos, sin, c)
        q, k = qk.split((c.num_heads, c.num_kv_heads), dim=1)
        if query_scale is not None:  # [n, 1, 1]
            q = q * query_scale
        if meta.write_rows is None:
            write_kv(k, v, k_cache, v_cache, meta.slot_mapping)
        else:
            write_kv(k[meta.write_rows], v[meta.write_rows], k_cache, v_cache, meta.slot_mapping)
        windowed = self.window is not None and meta.sliding_plan is not None
        o = paged_attention(q, k_cache, v_cache, meta.block_tables, meta.cu_q_lens, meta.ctx_lens,
                            self.attention_scale,
                            plan=meta.sliding_plan if windowed else meta.plan,
                            window=self.window if windowed else None,
                            softcap=c.attention_softcap)                  # [n, nh, hd]
        if self.gate is not None:
            o = o * torch.sigmoid(linear(h, self.gate))[:, :, None]
        o = o.reshape(n, self.q_size)
        if self.gate_size:
            o = o * torch.sigmoid(gate)
        return linear(o, self.o_proj, self.o_bias)

    def _residual(self, x: Tensor, out: Tensor) -> Tensor:
        """x + out, out scaled by Granite's residual multiplier where it has one (a plain `+`
        else: torch.add's keyword costs the hot path ~1 µs a call)."""
        m = self.config.residual_multiplier
        return x + out if m == 1.0 else torch.add(x, out, alpha=m)


class LlamaModel(nn.Module):
    def __init__(self, config: ModelConfig, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu") -> None:
        super().__init__()
        kw = {"dtype": dtype, "device": device}
        self.config = config
        self.embed = nn.Parameter(torch.empty(config.vocab_size, config.hidden_size, **kw))
        kinds = (config.conv_layers, config.delta_layers, config.attention_layers)
        self.layers = nn.ModuleList(DecoderLayer(config, dtype, device,
                                                 rotates=i not in config.nope_layers,
                                                 sliding=i in config.sliding_layers,
                                                 experts=config.has_experts(i),
                                                 conv=i in config.conv_layers,
                                                 delta=i in config.delta_layers,
                                                 slot=next(kind.index(i) for kind in kinds
                                                           if i in kind))
                                    for i in range(config.num_layers))
        self.norm = nn.Parameter(torch.empty(config.hidden_size, dtype=norm_dtype(config, dtype),
                                             device=device))
        self.register_parameter("norm_bias", nn.Parameter(torch.empty_like(self.norm))
                                if config.norm_bias else None)
        self.register_parameter("head_bias", nn.Parameter(torch.empty(config.vocab_size, **kw))
                                if config.head_bias else None)
        self.normed = sublayer_norm(config)
        # Gemma scales its embeddings by a factor rounded to the model's dtype, as it does
        self.embedding_multiplier = (torch.tensor(config.embedding_multiplier, dtype=dtype).item()
                                     if config.gemma_norms else config.embedding_multiplier)
        self.register_parameter("lm_head", None if config.tie_word_embeddings else
                                nn.Parameter(torch.empty(config.vocab_size, config.hidden_size,
                                                         **kw)))
        inv_freq = rope.frequencies(config.rotary_dim, config.rope_theta, config.rope_scaling)
        self.register_buffer("inv_freq", inv_freq.to(device), persistent=False)  # [rotary / 2]
        self.local_inv_freq = (None if config.local_rope_theta is None else  # unscaled
                               rope.frequencies(config.rotary_dim, config.local_rope_theta,
                                                None).to(device))
        # cos and sin scaled where the attention's scale cannot take it (_folded_rope_factor)
        self.rope_factor = rope.attention_factor(config.rope_scaling) / _folded_rope_factor(config)
        self.requires_grad_(False)
        self.warm_threads: set[int] = set()  # CPU thread counts warmed (kernels are per count)

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.dtype

    @property
    def device(self) -> torch.device:
        return self.embed.device

    def num_weight_bytes(self) -> int:
        """Bytes of the model's weights (a tied LM head counted once)."""
        return num_weights(self.config) * self.dtype.itemsize

    def streamed_weight_bytes(self) -> int:
        """Bytes a one-token decode step must read: every weight except an untied embedding
        table, of which only the looked-up rows are touched, and the experts the token did not
        choose. Divided by memory bandwidth, the step's floor."""
        c = self.config
        untied_embed = 0 if c.tie_word_embeddings else c.vocab_size * c.hidden_size
        unchosen = sum(c.has_experts(i) for i in range(c.num_layers)) * (
            c.num_experts - c.experts_per_token) * 3 * c.hidden_size * c.expert_size
        return self.num_weight_bytes() - (untied_embed + unchosen) * self.dtype.itemsize

    def linear_weights(self) -> list[Tensor]:
        """The weights `linear` multiplies by: those its modules' LINEARS name, and the LM head."""
        return [*(getattr(module, name) for module in self.layers.modules()
                  for name in getattr(module, "LINEARS", ())), self.head]

    @property
    def head(self) -> Tensor:
        """The LM head: the embedding table where tied, until `prepack` gives it a copy."""
        return self.embed if self.lm_head is None else self.lm_head

    def prepack(self) -> None:
        """Hand the linear weights to oneDNN in its own layout, once (`prepacks`), in place of
        the plain ones; a tied head gets a copy, as the embedding lookups read the plain table.
        The packed weights are buffers, which hf_state_dict unpacks."""
        def packed(weight: Tensor) -> Tensor:
            return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)

        for module in self.layers.modules():
            for name in getattr(module, "LINEARS", ()):
                weight = packed(getattr(module, name))
                delattr(module, name)  # the plain weight's memory goes with it
                module.register_buffer(name, weight, persistent=False)
        head = packed(self.head)
        delattr(self, "lm_head")
        self.register_buffer("lm_head", head, persistent=False)

    def forward(self, input_ids: Tensor, meta: StepMetadata, kv: PagedKVCache,
                logit_rows: Tensor) -> Tensor:
        """Run the packed tokens through every layer, storing their KV; logits of the chosen rows."""
        # input_ids: [n]; logit_rows: [m] -> [m, vocab] float32
        x = F.embedding(input_ids, self.embed)                            # [n, hidden]
        if self.embedding_multiplier != 1.0:
            x = x * self.embedding_multiplier
        cos, sin = self._rope(meta.positions, self.inv_freq, self.rope_factor, x.dtype)
        local = (None if self.local_inv_freq is None else
                 self._rope(meta.positions, self.local_inv_freq, 1.0, x.dtype))
        query_scale = (_query_scale(meta.positions, self.config).to(x.dtype)[:, None, None]
                       if self.config.query_scaling_beta else None)  # once for every layer
        for layer in self.layers:
            x = layer(x, *(local if layer.local_rope else (cos, sin)), kv, meta, query_scale)
        h = self.normed(x[logit_rows], self.norm, self.config.rms_norm_eps, self.norm_bias)
        logits = linear(h, self.head, self.head_bias).float()
        if self.config.logits_scaling != 1.0:
            logits /= self.config.logits_scaling
        if self.config.logits_softcap is not None:
            cap = self.config.logits_softcap
            logits = torch.tanh(logits / cap) * cap
        return logits

    @staticmethod
    def _rope(positions: Tensor, inv_freq: Tensor, factor: float, dtype: torch.dtype
              ) -> tuple[Tensor, Tensor]:
        """cos and sin at each position, [n, 1, rotary], sin signed for `_rotated`."""
        freqs = positions[:, None].float() * inv_freq                     # [n, rotary / 2]
        half_cos, half_sin = freqs.cos(), freqs.sin()
        if factor != 1.0:
            half_cos, half_sin = half_cos * factor, half_sin * factor
        return (torch.cat((half_cos, half_cos), dim=-1)[:, None, :].to(dtype),
                torch.cat((-half_sin, half_sin), dim=-1)[:, None, :].to(dtype))

    @property
    def builds_kernels_per_row_count(self) -> bool:
        """oneDNN builds a GEMM kernel on the first use of each row count (0.5-1 ms per weight
        shape on the 2-core EPYC with AVX512-BF16; MKL's fp32 GEMM and GPUs have no such cost),
        so a step at a new total of lanes and drafts is slow once: a hiccup in the live plot,
        and a tax on any policy that varies its drafts (goodput meets dozens of row counts where
        fixed K meets one). `warm_up` pays it at load."""
        return self.device.type == "cpu" and (self.head.is_mkldnn or self.dtype == torch.bfloat16
                                              and not SLOW_CPU_BF16_GEMM)

    @torch.inference_mode()
    def warm_up(self, max_rows: int = WARM_ROWS,
                done: Callable[[int], None] = lambda rows: None) -> None:
        """Run every weight shape once at every row count up to `max_rows`; `done(rows)` after
        each count (a progress report, which may raise to cancel)."""
        weights = {tuple(w.shape): w for w in self.linear_weights()}
        for rows in range(1, max_rows + 1):
            for weight in weights.values():
                linear(torch.zeros(rows, weight.shape[1], dtype=self.dtype, device=self.device),
                       weight)
            done(rows)
        if max_rows >= WARM_ROWS:
            self.warm_threads.add(torch.get_num_threads())

    @classmethod
    def random(cls, config: ModelConfig, seed: int = 0, dtype: torch.dtype = torch.float32,
               device: torch.device | str = "cpu") -> "LlamaModel":
        """A model with small random weights (std 0.02, norms near 1), for tests and benchmarks."""
        gen = torch.Generator().manual_seed(seed)
        tensors = {}
        for name, shape in hf_shapes(config).items():
            if name.endswith("norm.weight"):
                tensors[name] = 1 + 0.1 * torch.randn(shape, generator=gen)
            else:
                tensors[name] = 0.02 * torch.randn(shape, generator=gen)
        return cls.from_state_dict(config, tensors, dtype, device)

    @classmethod
    def from_state_dict(cls, config: ModelConfig, tensors: Mapping[str, Tensor],
                        dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu",
                        shapes: Mapping[str, tuple[int, ...]] | None = None) -> "LlamaModel":
        """Build from Hugging Face names; ValueError lists missing, unexpected or misshapen ones.
        Each tensor is read once, when its parameter is filled: `tensors` may read it from a file
        then (loading/weights.Weights), and `shapes`, its tensors' shapes, are checked first."""
        if shapes is None:
            shapes = {name: tuple(t.shape) for name, t in tensors.items()}
        check_shapes(config, shapes)
        if config.tie_word_embeddings and "lm_head.weight" in shapes and not torch.equal(
                tensors["lm_head.weight"], tensors["model.embed_tokens.weight"]):
            # Some tied checkpoints store the head anyway; accept it only as the same matrix.
            raise ValueError("tie_word_embeddings is set but lm_head.weight differs from "
                             "model.embed_tokens.weight")
        model = cls(config, dtype, device)
        with torch.no_grad():
            for param, names in hf_sources(model):
                parts = [halves_turned(config, name, tensors[name]) for name in names]
                whole = torch.cat([part.to(param.dtype) for part in parts]) if len(parts) > 1 \
                    else parts[0]
                order = fused_rows(config, names)
                param.copy_(whole if order is None else whole[order])
                if one_plus_weight(config, names[0]):
                    param.add_(1)  # scaled by 1 + weight
        if prepacks(model.device, dtype):
            model.prepack()
        return model

    def hf_state_dict(self) -> dict[str, Tensor]:
        """The weights under Hugging Face names (fused tensors split back), e.g. to save a folder."""
        shapes = hf_shapes(self.config)
        out = {}
        for param, names in hf_sources(self):
            param = param.to_dense() if param.is_mkldnn else param
            if one_plus_weight(self.config, names[0]):
                param = param - 1
            order = fused_rows(self.config, names)
            if order is not None:
                param = param[order.argsort()]
            for name, part in zip(names, param.split([shapes[n][0] for n in names])):
                order = rope_rows(self.config, name)
                out[name] = part.clone() if order is None else part[order.argsort()]
        return out


def _query_scale(positions: Tensor, c: ModelConfig) -> Tensor:
    """Each position's query scale (ModelConfig.query_scaling_beta)."""
    return 1 + c.query_scaling_beta * torch.log1p(torch.floor(positions / c.query_scaling_context))


def _folded_rope_factor(config: ModelConfig) -> float:
    """The part of RoPE's cos and sin scale (rope.attention_factor) the attention's softmax scale
    takes: all of it where RoPE turns whole heads (it scales every query-key product by its
    square); none where it turns part of them, whose other dimensions it leaves unscaled."""
    return rope.attention_factor(config.rope_scaling) if config.rotary_dim == config.head_dim \
        else 1.0
