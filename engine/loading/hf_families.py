"""The config.json fields of the families that have their own (hf_folder.py reads the rest):
mixtures of experts, Gemma's scalars, Granite 4.0's hybrid config, LFM2's and LFM3's layers,
Qwen3.5's gated DeltaNet layers, Cohere's logit scale, Ministral 3's query scaling, sliding
layers' own RoPE."""
from __future__ import annotations

from pathlib import Path

from engine.errors import ModelLoadError
from engine.loading.architectures import MIXTURES
from engine.loading.config_fields import boolean, integer, number


def experts(cfg: dict, path: Path, arch: str, layers: int) -> dict:
    """A mixture of experts' fields (MIXTURES): Qwen's keep a dense MLP in the layers
    mlp_only_layers lists and in all but every decoder_sparse_step-th, Qwen2-MoE has a
    shared expert, LFM2-MoE routes by sigmoids, as transformers reads them."""
    width, normalized = MIXTURES[arch]
    # Mixtral's count is num_local_experts, the others' num_experts, which transformers >= 5
    # saves under Mixtral's name
    count = next((name for name in ("num_experts", "num_local_experts") if name in cfg),
                 "num_local_experts" if arch == "mixtral" else "num_experts")
    fields = {"num_experts": integer(cfg, path, count),
              "experts_per_token": integer(cfg, path, "num_experts_per_tok"),
              "expert_size": integer(cfg, path, width),
              "normalize_expert_weights": normalized or boolean(cfg, path, "norm_topk_prob",
                                                              arch == "lfm2_moe")}
    if arch == "lfm2_moe":  # sigmoid routing; its first num_dense_layers dense
        dense = integer(cfg, path, "num_dense_layers", 2)
        if not 0 <= dense <= layers:
            raise ModelLoadError(path, f"num_dense_layers must be 0 to {layers}, got {dense}")
        fields |= {"sigmoid_routing": True, "dense_layers": tuple(range(dense)),
                   "expert_bias": boolean(cfg, path, "use_expert_bias", True),
                   "routed_scaling": number(cfg, path, "routed_scaling_factor", 1.0)}
    if arch in ("qwen2_moe", "qwen3_5_moe", "qwen3_next"):
        fields["shared_expert_size"] = integer(cfg, path, "shared_expert_intermediate_size")
    if arch in ("qwen2_moe", "qwen3_moe", "qwen3_next"):
        step = integer(cfg, path, "decoder_sparse_step", 1)
        dense = cfg.get("mlp_only_layers") or []
        if step < 1 or not isinstance(dense, list) or not all(
                isinstance(i, int) and 0 <= i < layers for i in dense):
            raise ModelLoadError(path, f"decoder_sparse_step ({step}) must be at least 1 and "
                                       f"mlp_only_layers ({dense!r}) list layers of the {layers}")
        fields["dense_layers"] = tuple(i for i in range(layers) if i in dense or (i + 1) % step)
    return fields


def gemma(cfg: dict, path: Path, arch: str) -> dict:
    """Gemma's scalars: embeddings scaled by sqrt(hidden_size); from Gemma 2 on, the
    attention's scale from query_pre_attn_scalar and the caps on scores and logits; Gemma 3's
    sliding layers' own RoPE base."""
    fields = {"embedding_multiplier": integer(cfg, path, "hidden_size") ** 0.5}
    if arch == "gemma":
        return fields
    scalar = number(cfg, path, "query_pre_attn_scalar", 256)
    if not scalar > 0:
        raise ModelLoadError(path, f"query_pre_attn_scalar must be positive, got {scalar}")
    fields |= {"attention_multiplier": scalar ** -0.5,
               "attention_softcap": number(cfg, path, "attn_logit_softcapping", 0) or None,
               "logits_softcap": number(cfg, path, "final_logit_softcapping", 0) or None}
    if arch == "gemma3":
        fields |= local_rope(cfg, path, number(cfg, path, "rope_local_base_freq", 10000.0))
    return fields


def granite_hybrid(cfg: dict, path: Path) -> dict:
    """Granite 4.0's config as a dense Granite's: its MLP's width shared_intermediate_size; a
    model with Mamba layers or experts (the -H ones) is refused."""
    kinds = cfg.get("layer_types") or cfg.get("layers_block_type") or []
    if any(kind not in ("attention", "full_attention") for kind in kinds):
        raise ModelLoadError(path, "Mamba layers (layer_types other than attention) are not "
                                   "supported")
    if cfg.get("num_local_experts"):
        raise ModelLoadError(path, f"a mixture of {cfg['num_local_experts']} experts beside its "
                                   "shared MLP is not supported")
    if cfg.get("position_embedding_type", "rope") != "rope":
        raise ModelLoadError(path, f"position_embedding_type "
                                   f"{cfg['position_embedding_type']!r} is not supported (rope is)")
    width = integer(cfg, path, "shared_intermediate_size")
    kept = {name: value for name, value in cfg.items() if name != "layer_types"}  # all full
    return kept | {"intermediate_size": width}


def liquid(cfg: dict, path: Path, arch: str) -> tuple[dict, dict]:
    """LFM2's (and LFM2-MoE's and LFM3's) config as the others name its fields, and its short
    convolutions' ModelConfig fields. Its MLP's width as transformers works it out for LFM2 (two
    thirds of block_ff_dim, or intermediate_size, times block_ffn_dim_multiplier, rounded up to
    block_multiple_of; the others' are intermediate_size wide); its short-convolution layers
    layer_types' "conv" ones, or all but full_attn_idxs (every layer attends where neither is
    given; LFM3's defaults as transformers has them)."""
    width = integer(cfg, path, "block_ff_dim", 0) or integer(cfg, path, "intermediate_size")
    if arch == "lfm2" and boolean(cfg, path, "block_auto_adjust_ff_dim", True):
        width = int(2 * width / 3)
        if cfg.get("block_ffn_dim_multiplier", 1.0) is not None:
            step = integer(cfg, path, "block_multiple_of", 256)
            if step < 1:
                raise ModelLoadError(path, f"block_multiple_of must be positive, got {step}")
            width = step * -(-int(number(cfg, path, "block_ffn_dim_multiplier", 1.0) * width)
                             // step)
    layers = integer(cfg, path, "num_hidden_layers")
    kinds = cfg.get("layer_types")
    if kinds is None and arch == "lfm3":
        kinds = ["full_attention" if i % 4 == 2 else "sliding_attention" if i % 4 == 0 and i
                 else "conv" for i in range(layers)]
    if kinds is None:
        attends = cfg.get("full_attn_idxs", list(range(layers)))
        if not isinstance(attends, list) or not all(isinstance(i, int) for i in attends):
            raise ModelLoadError(path, f"full_attn_idxs must list layer indices, got {attends!r}")
        kinds = ["full_attention" if i in attends else "conv" for i in range(layers)]
    named = ("conv", "full_attention", "sliding_attention")[:3 if arch == "lfm3" else 2]
    if not isinstance(kinds, list) or len(kinds) != layers or any(k not in named for k in kinds):
        raise ModelLoadError(path, f"layer_types must name each of the {layers} layers one of "
                                   f"{', '.join(named)}, got {kinds!r}")
    tied = cfg.get("tie_embedding", cfg.get("tie_word_embeddings", True))
    kept = {name: value for name, value in cfg.items() if name != "layer_types"}  # read here
    fields = {"conv_layers": tuple(i for i, kind in enumerate(kinds) if kind == "conv"),
              "conv_kernel": integer(cfg, path, "conv_L_cache", 3),
              "conv_bias": boolean(cfg, path, "conv_bias", False)}
    if arch == "lfm3":
        fields |= _lfm3(kept, path, kinds)
    return kept | {"intermediate_size": width, "tie_word_embeddings": tied}, fields


def gated_delta(cfg: dict, path: Path) -> tuple[dict, dict]:
    """Qwen3.5's config without its layer_types, and its gated DeltaNet layers' ModelConfig
    fields: layer_types' "linear_attention" ones, or all but every full_attention_interval-th
    where it has none (transformers' defaults in architectures.CONFIG_DEFAULTS)."""
    layers = integer(cfg, path, "num_hidden_layers")
    kinds = cfg.get("layer_types")
    if kinds is None:
        interval = integer(cfg, path, "full_attention_interval", 4)
        if interval < 1:
            raise ModelLoadError(path, f"full_attention_interval must be positive, got {interval}")
        kinds = ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
                 for i in range(layers)]
    named = ("linear_attention", "full_attention")
    if not isinstance(kinds, list) or len(kinds) != layers or any(k not in named for k in kinds):
        raise ModelLoadError(path, f"layer_types must name each of the {layers} layers one of "
                                   f"{', '.join(named)}, got {kinds!r}")
    kept = {name: value for name, value in cfg.items() if name != "layer_types"}  # read here
    return kept, {"delta_layers": tuple(i for i, kind in enumerate(kinds)
                                        if kind == "linear_attention"),
                  "conv_kernel": integer(cfg, path, "linear_conv_kernel_dim"),
                  "delta_key_heads": integer(cfg, path, "linear_num_key_heads"),
                  "delta_value_heads": integer(cfg, path, "linear_num_value_heads"),
                  "delta_key_dim": integer(cfg, path, "linear_key_head_dim"),
                  "delta_value_dim": integer(cfg, path, "linear_value_head_dim")}


def _lfm3(cfg: dict, path: Path, kinds: list[str]) -> dict:
    """LFM3's norms around each sublayer (use_sandwich_norm), its attention's output gate, its
    windowed layers with a RoPE of their own."""
    sliding = tuple(i for i, kind in enumerate(kinds) if kind == "sliding_attention")
    window = integer(cfg, path, "sliding_window", 0)
    if sliding and window < 1:
        raise ModelLoadError(path, f"sliding_window must be positive, got {window}")
    return {"norm_after": boolean(cfg, path, "use_sandwich_norm", True),
            "attention_gate": boolean(cfg, path, "use_attention_gate", True),
            **({"sliding_window": window, "sliding_layers": sliding,
                **local_rope(cfg, path, 10000.0)} if sliding else {})}


def cohere(cfg: dict, path: Path) -> dict:
    """Cohere's logits scaled by its logit_scale (as ModelConfig divides them: by its inverse);
    the q and k LayerNorms of Command R+ (use_qk_norm) are not read."""
    if cfg.get("use_qk_norm"):
        raise ModelLoadError(path, "use_qk_norm (q and k LayerNorms by head) is not supported")
    scale = number(cfg, path, "logit_scale", 0.0625)
    if not scale > 0:
        raise ModelLoadError(path, f"logit_scale must be positive, got {scale}")
    return {"logits_scaling": 1 / scale}


def query_scaling(cfg: dict, path: Path) -> dict:
    """Ministral 3's queries scaled by 1 + beta log(1 + floor(position / its original context))
    (Llama 4's long-context attention scale), from its rope_parameters (or rope_scaling)."""
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    beta = number(params, path, "llama_4_scaling_beta", 0.0)
    if not beta:
        return {}
    context = integer(params, path, "original_max_position_embeddings")
    if context < 1:
        raise ModelLoadError(path, f"original_max_position_embeddings must be positive, got "
                                   f"{context}")
    return {"query_scaling_beta": beta, "query_scaling_context": context}


def local_rope(cfg: dict, path: Path, base: float) -> dict:
    """The sliding layers' own RoPE, unscaled whatever scaling the full ones have (Gemma 3's,
    OLMo 3's): its base from rope_parameters' sliding_attention where given, else `base`."""
    local = (cfg.get("rope_parameters") or {}).get("sliding_attention") or {}
    if local.get("rope_type", "default") != "default":
        raise ModelLoadError(path, f"the sliding layers' rope_type {local['rope_type']!r} is "
                                   "not supported (default)")
    return {"local_rope_theta": number(local, path, "rope_theta", base)}
