"""A Llama-family model's weights as Hugging Face checkpoints store them: each tensor's name and
shape for a config (`hf_shapes`), a checkpoint's names and shapes checked against them
(`check_shapes`, from file headers alone), which of them make each of LlamaModel's fused
parameters (`hf_sources`), and the row order of q and k where RoPE turns adjacent pairs."""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from engine.config import ModelConfig

if TYPE_CHECKING:
    from engine.model import LlamaModel


def hf_sources(model: LlamaModel) -> list[tuple[Tensor, tuple[str, ...]]]:
    """Each of `model`'s parameters and the HF tensors it is made of (concatenated along
    dim 0)."""
    sources = [(model.embed, ("model.embed_tokens.weight",)), (model.norm, ("model.norm.weight",))]
    if model.norm_bias is not None:
        sources.append((model.norm_bias, ("model.norm.bias",)))
    if not model.config.tie_word_embeddings:
        sources.append((model.lm_head, ("lm_head.weight",)))
    if model.head_bias is not None:
        sources.append((model.head_bias, ("lm_head.bias",)))
    for i, layer in enumerate(model.layers):
        p = f"model.layers.{i}."
        fused = model.config.fused_projections
        # post_attention_layernorm norms the attention's output where outputs are normed,
        # else the MLP's input
        outputs_normed = layer.attn_out_norm is not None
        norms = {"input_layernorm": layer.input_norm,
                 "post_attention_layernorm": (layer.attn_out_norm if outputs_normed else
                                              layer.mlp_norm),
                 "pre_feedforward_layernorm": layer.mlp_norm if outputs_normed else None,
                 "post_feedforward_layernorm": layer.ff_norm}
        sources += [(param, (f"{p}{name}.weight",)) for name, param in norms.items()
                    if param is not None]
        biases = {"input_layernorm": layer.input_norm_bias,
                  "post_attention_layernorm": layer.mlp_norm_bias}
        sources += [(param, (f"{p}{name}.bias",)) for name, param in biases.items()
                    if param is not None]
        sources += (_conv_sources(layer.short_conv, p + "conv.") if layer.short_conv is not None
                    else _delta_sources(layer.delta, p + "linear_attn.",
                                        model.config.delta_by_key_head)
                    if layer.delta is not None else _attention_sources(layer, p, fused))
        if layer.moe is None and not model.config.gated_mlp:
            sources += [(layer.up, (p + "mlp.up_proj.weight",)),
                        (layer.down, (p + "mlp.down_proj.weight",))]
        elif layer.moe is None:
            sources += _mlp_sources(layer, p + "mlp.", fused)
        else:
            moe = layer.moe
            sources.append((moe.router, (p + "mlp.gate.weight",)))
            if moe.expert_bias is not None:
                sources.append((moe.expert_bias, (p + "mlp.expert_bias",)))
            for e, expert in enumerate(moe.experts):
                sources += _mlp_sources(expert, f"{p}mlp.experts.{e}.", False)
            if moe.shared is not None:
                sources += _mlp_sources(moe.shared, p + "mlp.shared_expert.", False)
                sources.append((moe.shared_gate, (p + "mlp.shared_expert_gate.weight",)))
        if layer.moe is None and layer.up_bias is not None:
            sources += [(layer.up_bias, (p + "mlp.up_proj.bias",)),
                        (layer.down_bias, (p + "mlp.down_proj.bias",))]
    return sources


def _attention_sources(layer: nn.Module, p: str, fused: bool
                       ) -> list[tuple[Tensor, tuple[str, ...]]]:
    """An attention layer's parameters and the HF tensors they are made of."""
    sources = [(param, (f"{p}self_attn.{name}.weight",))
               for name, param in (("q_norm", layer.q_norm), ("k_norm", layer.k_norm))
               if param is not None]
    sources += [(layer.qkv, (p + "self_attn.qkv_proj.weight",) if fused else
                 tuple(p + f"self_attn.{x}_proj.weight" for x in "qkv")),
                (layer.o_proj, (p + "self_attn.o_proj.weight",))]
    if layer.qkv_bias is not None:
        sources.append((layer.qkv_bias, tuple(p + f"self_attn.{x}_proj.bias" for x in "qkv")))
    if layer.o_bias is not None:
        sources.append((layer.o_bias, (p + "self_attn.o_proj.bias",)))
    if layer.gate is not None:
        sources.append((layer.gate, (p + "self_attn.gate_proj.weight",)))
    return sources


def _conv_sources(conv: nn.Module, prefix: str) -> list[tuple[Tensor, tuple[str, ...]]]:
    """A short convolution's parameters (engine/short_conv.py) and the HF tensors they are
    made of, under `prefix`: LFM2's names."""
    return [(param, (f"{prefix}{name}.{kind}",)) for name, kind, param in (
        ("in_proj", "weight", conv.in_proj), ("conv", "weight", conv.kernel),
        ("out_proj", "weight", conv.out_proj), ("in_proj", "bias", conv.in_bias),
        ("conv", "bias", conv.kernel_bias), ("out_proj", "bias", conv.out_bias))
        if param is not None]


def _delta_sources(delta: nn.Module, prefix: str, by_key_head: bool
                   ) -> list[tuple[Tensor, tuple[str, ...]]]:
    """A gated DeltaNet's parameters (engine/gated_delta.py) and the HF tensors they are made
    of, under `prefix`: Qwen3.5's names, or Qwen3-Next's where its projections are stored by
    key head (`fused_rows` orders them)."""
    projections = ("qkvz", "ba") if by_key_head else ("qkv", "b", "a", "z")
    return [(delta.in_proj, tuple(f"{prefix}in_proj_{x}.weight" for x in projections)),
            (delta.kernel, (prefix + "conv1d.weight",)), (delta.a_log, (prefix + "A_log",)),
            (delta.dt_bias, (prefix + "dt_bias",)), (delta.norm, (prefix + "norm.weight",)),
            (delta.out_proj, (prefix + "out_proj.weight",))]


def one_plus_weight(config: ModelConfig, name: str) -> bool:
    """Whether the tensor `name` is a norm's weight the model scales by 1 + it (Gemma's norms,
    Qwen3.5's but for its DeltaNet's gated norm)."""
    return config.gemma_norms and name.endswith("norm.weight") and ".linear_attn." not in name


def fused_rows(config: ModelConfig, names: tuple[str, ...]) -> Tensor | None:
    """The order of a fused parameter's rows, concatenated from `names`, where it is not theirs:
    q_proj's output gates (Qwen3.5's, beside each head's queries) moved past k and v; Qwen3-Next's
    DeltaNet projections by kind (q, k, v, b, a, z) from by key head. None for the others."""
    if names[0].endswith("in_proj_qkvz.weight"):
        return _by_kind(config)
    if not config.output_gate or not names[0].endswith(("q_proj.weight", "q_proj.bias")):
        return None
    c = config
    heads = torch.arange(c.num_heads)[:, None] * 2 * c.head_dim
    within = torch.arange(c.head_dim)
    queries, gates = (heads + within).flatten(), (heads + c.head_dim + within).flatten()
    rest = 2 * c.num_heads * c.head_dim + torch.arange(2 * c.num_kv_heads * c.head_dim)
    return torch.cat((queries, rest, gates))


def _by_kind(config: ModelConfig) -> Tensor:
    """Qwen3-Next's in_proj_qkvz and in_proj_ba rows (each key head's q, k, then its value
    heads' v and z; each key head's value heads' b, then a) in GatedDeltaNet's order: all q,
    all k, all v, all b, all a, all z."""
    c = config
    per_key = c.delta_value_heads // c.delta_key_heads
    group = 2 * c.delta_key_dim + 2 * per_key * c.delta_value_dim  # a key head's qkvz rows
    widths = (c.delta_key_dim, c.delta_key_dim, per_key * c.delta_value_dim,
              per_key * c.delta_value_dim)

    def kind(start: int, width: int, step: int, base: int = 0) -> list[Tensor]:
        return [base + h * step + start + torch.arange(width) for h in range(c.delta_key_heads)]
    q, k, v, z = (kind(sum(widths[:i]), widths[i], group) for i in range(4))
    b, a = (kind(i * per_key, per_key, 2 * per_key, c.delta_key_heads * group) for i in range(2))
    return torch.cat(q + k + v + b + a + z)


def _mlp_sources(mlp: nn.Module, prefix: str, fused: bool
                 ) -> list[tuple[Tensor, tuple[str, ...]]]:
    """A gated MLP's two parameters and the HF tensors they are made of, under `prefix`."""
    return [(mlp.gate_up, (prefix + "gate_up_proj.weight",) if fused else
             (prefix + "gate_proj.weight", prefix + "up_proj.weight")),
            (mlp.down, (prefix + "down_proj.weight",))]


def rope_rows(config: ModelConfig, name: str) -> Tensor | None:
    """Where RoPE turns adjacent pairs (ModelConfig.rope_interleaved), the order of a q or k
    projection's rows (weight or bias) that turns halves instead: in each head, the rotary
    dimensions' even rows, then their odd ones, then the rest. None for other tensors."""
    kind = name.rsplit(".", 2)[-2]
    if not config.rope_interleaved or kind not in ("q_proj", "k_proj"):
        return None
    heads = config.num_heads if kind == "q_proj" else config.num_kv_heads
    rotary, width = config.rotary_dim, config.head_dim
    head = torch.cat((torch.arange(0, rotary, 2), torch.arange(1, rotary, 2),
                      torch.arange(rotary, width)))
    return (torch.arange(heads)[:, None] * width + head).flatten()


def halves_turned(config: ModelConfig, name: str, tensor: Tensor) -> Tensor:
    """A checkpoint's tensor with its rows in the order RoPE's halves turn (rope_rows)."""
    order = rope_rows(config, name)
    return tensor if order is None else tensor[order]


def num_weights(config: ModelConfig) -> int:
    """The weights a checkpoint of `config` holds (a tied LM head counted once)."""
    return sum(math.prod(shape) for shape in hf_shapes(config).values())


def check_shapes(config: ModelConfig, shapes: Mapping[str, tuple[int, ...]]) -> None:
    """ValueError listing the tensors a checkpoint of `config` lacks, has beyond it, or holds in
    another shape, from their names and shapes alone (a folder's file headers)."""
    shapes = {name: shape for name, shape in shapes.items()
              if not name.endswith("rotary_emb.inv_freq")}
    if config.tie_word_embeddings:
        shapes.pop("lm_head.weight", None)  # stored anyway by some tied checkpoints
    # Layers the config names past those the weights hold are listed as one range, and the
    # shapes checked only as far as the weights go: a config claiming 10**12 layers must not be
    # expanded name by name.
    held = len({name.split(".")[2] for name in shapes if name.startswith("model.layers.")})
    expected = hf_shapes(config.first_layers(min(config.num_layers, held)))
    missing = sorted(set(expected) - set(shapes))
    if config.num_layers > held:
        missing.insert(0, f"model.layers.{held}.*" if config.num_layers == held + 1 else
                       f"model.layers.{held}-{config.num_layers - 1}.*")
    unexpected = sorted(set(shapes) - set(expected))
    misshapen = [f"{name}: {shapes[name]} != {shape}" for name, shape in expected.items()
                 if name in shapes and shapes[name] != shape]
    problems = [f"{label}: {_first_few(names)}" for label, names in
                (("missing", missing), ("unexpected", unexpected), ("wrong shape", misshapen))
                if names]
    if problems:
        raise ValueError("; ".join(problems))


def _first_few(names: list[str], most: int = 6) -> str:
    """A checkpoint of another layout (quantized, another naming) differs in every tensor of
    every layer: its message names a few and counts the rest, not hundreds of names."""
    if len(names) <= most:
        return ", ".join(names)
    return f"{', '.join(names[:most])} and {len(names) - most} more"


def hf_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor a Hugging Face checkpoint of this config holds, with its shape."""
    c = config
    q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    shapes = {"model.embed_tokens.weight": (c.vocab_size, c.hidden_size),
              "model.norm.weight": (c.hidden_size,)}
    if c.norm_bias:
        shapes["model.norm.bias"] = (c.hidden_size,)
    if c.head_bias:
        shapes["lm_head.bias"] = (c.vocab_size,)
    if not c.tie_word_embeddings:
        shapes["lm_head.weight"] = (c.vocab_size, c.hidden_size)
    for i in range(c.num_layers):
        p = f"model.layers.{i}."
        # in this order: LlamaModel.random draws its weights so (the tiny-test model's own)
        norms = ["input_layernorm"] if c.norm_before else []
        norms += [] if c.parallel_block else ["post_attention_layernorm"]
        shapes |= {f"{p}{name}.{kind}": (c.hidden_size,) for name in norms
                   for kind in (("weight", "bias") if c.norm_bias else ("weight",))}
        attends = i not in c.conv_layers and i not in c.delta_layers
        q_rows = 2 * q if c.output_gate else q  # queries, and the output gates beside them
        if attends:
            shapes.update({p + "self_attn.qkv_proj.weight": (q + 2 * kv, c.hidden_size)}
                          if c.fused_projections else {
                              p + "self_attn.q_proj.weight": (q_rows, c.hidden_size),
                              p + "self_attn.k_proj.weight": (kv, c.hidden_size),
                              p + "self_attn.v_proj.weight": (kv, c.hidden_size)})
            shapes[p + "self_attn.o_proj.weight"] = (c.hidden_size, q)
            if c.attention_gate:
                shapes[p + "self_attn.gate_proj.weight"] = (c.num_heads, c.hidden_size)
        elif i in c.conv_layers:
            shapes |= _conv_shapes(p + "conv.", c)
        else:
            shapes |= _delta_shapes(p + "linear_attn.", c)
        if c.has_experts(i):
            shapes[p + "mlp.gate.weight"] = (c.num_experts, c.hidden_size)
            if c.expert_bias:
                shapes[p + "mlp.expert_bias"] = (c.num_experts,)
            for e in range(c.num_experts):
                shapes |= _mlp_shapes(f"{p}mlp.experts.{e}.", c.hidden_size, c.expert_size, False)
            if c.shared_expert_size:
                shapes |= _mlp_shapes(p + "mlp.shared_expert.", c.hidden_size,
                                      c.shared_expert_size, False)
                shapes[p + "mlp.shared_expert_gate.weight"] = (1, c.hidden_size)
        elif c.gated_mlp:
            shapes |= _mlp_shapes(p + "mlp.", c.hidden_size, c.intermediate_size,
                                  c.fused_projections)
        else:
            shapes |= {p + "mlp.up_proj.weight": (c.intermediate_size, c.hidden_size),
                       p + "mlp.down_proj.weight": (c.hidden_size, c.intermediate_size)}
        if c.qkv_bias and attends:
            shapes |= {p + f"self_attn.{x}_proj.bias": (n,)
                       for x, n in (("q", q_rows), ("k", kv), ("v", kv))}
        if c.linear_bias:
            shapes |= ({p + "self_attn.o_proj.bias": (c.hidden_size,)} if attends else {}) | {
                p + "mlp.up_proj.bias": (c.intermediate_size,),
                p + "mlp.down_proj.bias": (c.hidden_size,)}
        if c.qk_norm and attends:
            shapes.update({p + "self_attn.q_norm.weight": (q if c.qk_norm_whole else c.head_dim,),
                           p + "self_attn.k_norm.weight": (kv if c.qk_norm_whole else c.head_dim,)})
        if c.norm_after:
            shapes[p + "post_feedforward_layernorm.weight"] = (c.hidden_size,)
        if c.norm_after and c.norm_before:
            shapes[p + "pre_feedforward_layernorm.weight"] = (c.hidden_size,)
    return shapes


def _conv_shapes(prefix: str, c: ModelConfig) -> dict[str, tuple[int, ...]]:
    """A short convolution's tensors under `prefix` (LFM2's names), with their shapes."""
    h = c.hidden_size
    weights = {"in_proj": (3 * h, h), "conv": (h, 1, c.conv_kernel), "out_proj": (h, h)}
    return ({f"{prefix}{name}.weight": shape for name, shape in weights.items()}
            | ({f"{prefix}{name}.bias": (shape[0],) for name, shape in weights.items()}
               if c.conv_bias else {}))


def _delta_shapes(prefix: str, c: ModelConfig) -> dict[str, tuple[int, ...]]:
    """A gated DeltaNet's tensors under `prefix` (Qwen3.5's names, or Qwen3-Next's), with their
    shapes."""
    h, heads = c.hidden_size, c.delta_value_heads
    values = heads * c.delta_value_dim
    conv = 2 * c.delta_key_heads * c.delta_key_dim + values
    if c.delta_by_key_head:
        projections = {"in_proj_qkvz": conv + values, "in_proj_ba": 2 * heads}
    else:
        projections = {"in_proj_qkv": conv, "in_proj_z": values, "in_proj_b": heads,
                       "in_proj_a": heads}
    return {f"{prefix}{name}.weight": (rows, h) for name, rows in projections.items()} | {
        prefix + "conv1d.weight": (conv, 1, c.conv_kernel), prefix + "dt_bias": (heads,),
        prefix + "A_log": (heads,), prefix + "norm.weight": (c.delta_value_dim,),
        prefix + "out_proj.weight": (h, values)}


def _mlp_shapes(prefix: str, hidden: int, width: int, fused: bool) -> dict[str, tuple[int, ...]]:
    """A gated MLP's tensors under `prefix`, with their shapes."""
    gate_up = ({prefix + "gate_up_proj.weight": (2 * width, hidden)} if fused else
               {prefix + "gate_proj.weight": (width, hidden),
                prefix + "up_proj.weight": (width, hidden)})
    return gate_up | {prefix + "down_proj.weight": (hidden, width)}
