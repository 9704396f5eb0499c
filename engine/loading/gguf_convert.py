"""GGUF -> Hugging Face folder: dequantized weights, config.json and a rebuilt tokenizer.json.

llama.cpp's llama (Llama, Mistral, SmolLM; Mixtral with its experts), smollm3, granite, qwen2,
qwen3, olmo2, phi3 (Phi-3, Phi-3.5, Phi-4-mini), gemma, gemma2, gemma3, exaone4, ernie4_5, glm4
(the 0414 models), command-r (Cohere's: Aya, Command R), cohere2 (Command R7B), stablelm,
starcoder2, arcee, nemotron, phi2 (its q, k and v one tensor or three), the text models of
qwen2vl, qwen25vl and qwen3vl, and the mixtures qwen2moe, qwen3moe, olmoe and granitemoe are
read, with the tokenizers gguf_tokenizer.py rebuilds; other architectures are refused naming
theirs."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from gguf import GGUFReader, GGMLQuantizationType
from gguf.quants import dequantize
from safetensors.torch import save_file

from engine import rope
from engine.errors import ModelLoadError
from engine.loading.architectures import NORM_EPS, SUPPORTED
from engine.loading.gguf_tokenizer import gguf_tokenizer

Progress = Callable[[str, float], None]

# GGUF architecture -> config.json's, and whether llama.cpp stored Q/K rows permuted for its
# interleaved RoPE (the llama architecture's; the others rotate halves as transformers does)
ARCHITECTURES = {"llama": ("LlamaForCausalLM", True), "qwen2": ("Qwen2ForCausalLM", False),
                 "qwen3": ("Qwen3ForCausalLM", False), "phi3": ("Phi3ForCausalLM", False),
                 # llama's, with RoPE left out of every 4th layer (llama.cpp's fixed step, the
                 # config's default)
                 "smollm3": ("SmolLM3ForCausalLM", True),
                 "granite": ("GraniteForCausalLM", True),  # llama's, with four scalars
                 "olmo2": ("Olmo2ForCausalLM", False), "gemma": ("GemmaForCausalLM", False),
                 "gemma2": ("Gemma2ForCausalLM", False), "gemma3": ("Gemma3ForCausalLM", False),
                 "qwen2moe": ("Qwen2MoeForCausalLM", False),
                 "qwen3moe": ("Qwen3MoeForCausalLM", False), "olmoe": ("OlmoeForCausalLM", False),
                 "granitemoe": ("GraniteMoeForCausalLM", True),  # granite's, with experts
                 "exaone4": ("Exaone4ForCausalLM", False),
                 # RoPE on adjacent pairs, as in their Hugging Face rows: llama.cpp keeps those
                 "ernie4_5": ("Ernie4_5ForCausalLM", False), "glm4": ("Glm4ForCausalLM", False),
                 "command-r": ("CohereForCausalLM", False),
                 "cohere2": ("Cohere2ForCausalLM", False),
                 "stablelm": ("StableLmForCausalLM", False),
                 "starcoder2": ("Starcoder2ForCausalLM", False),
                 "arcee": ("ArceeForCausalLM", True),  # llama's, its MLP without a gate
                 "nemotron": ("NemotronForCausalLM", False),
                 "phi2": ("PhiForCausalLM", False),
                 # Qwen2-VL's, Qwen2.5-VL's (llama.cpp's name, Ollama's) and Qwen3-VL's text
                 # models, whose multimodal RoPE is plain RoPE on text
                 "qwen2vl": ("Qwen2ForCausalLM", False), "qwen25vl": ("Qwen2ForCausalLM", False),
                 "qwen3vl": ("Qwen3ForCausalLM", False)}
COHERES = ("command-r", "cohere2")  # logits scaled
_ACTIVATIONS = {"starcoder2": "gelu_pytorch_tanh", "arcee": "relu2", "nemotron": "relu2",
                "phi2": "gelu_new"}  # the others' SiLU
# Mixtral is llama.cpp's llama with experts; these are mixtures always
MIXTRAL = "MixtralForCausalLM"
MIXTURES = ("qwen2moe", "qwen3moe", "olmoe", "granitemoe")
# Whether llama.cpp rescales the chosen experts' weights to sum to 1 (it decides by architecture,
# whatever a file's expert_weights_norm says): Mixtral's, Qwen3-MoE's and GraniteMoE's it does
_EXPERT_WEIGHTS_NORMED = {"llama": True, "qwen3moe": True, "qwen2moe": False, "olmoe": False,
                          "granitemoe": True}
GEMMAS = ("gemma", "gemma2", "gemma3")
PLUS_ONE_NORMS = GEMMAS + ("nemotron",)  # llama.cpp stored their norms' 1 + weight
# Gemma 2's and 3's norms around each sublayer: ffn_norm is the one before the MLP
SANDWICHED = ("gemma2", "gemma3")
# GGUF metadata -> config.json's Granite scalars
_GRANITE = {"embedding_scale": "embedding_multiplier", "residual_scale": "residual_multiplier",
            "attention.scale": "attention_multiplier", "logit_scale": "logits_scaling"}
FUSED = ("phi3",)  # architectures whose q/k/v and gate/up are one tensor each, as Phi-3's
# architectures whose RoPE dimension count may be part of a head
PARTIAL_ROPE = ("phi3", "glm4", "stablelm", "nemotron", "phi2")
# GLM-4's names for its norms around each sublayer and its fused gate and up, as its Hugging Face
# folders have them (weights.py reads those as the others')
_GLM4_NAMES = {"post_attention_norm": "post_self_attn_layernorm",
               "ffn_norm": "post_attention_layernorm", "post_ffw_norm": "post_mlp_layernorm",
               "ffn_up": "mlp.gate_up_proj"}
# GGUF tensor name -> Hugging Face name ("{i}" is the layer).
_LAYER_NAMES = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "post_attention_norm": "post_attention_layernorm",  # OLMo 2's norms after
    "post_ffw_norm": "post_feedforward_layernorm",
    # a mixture's router, its experts (one tensor for all of a layer's: EXPERT marks where each
    # one's index goes) and its shared expert with its gate (Qwen2-MoE's)
    "ffn_gate_inp": "mlp.gate", "ffn_gate_exps": "mlp.experts.{expert}.gate_proj",
    "ffn_up_exps": "mlp.experts.{expert}.up_proj",
    "ffn_down_exps": "mlp.experts.{expert}.down_proj",
    "ffn_gate_shexp": "mlp.shared_expert.gate_proj", "ffn_up_shexp": "mlp.shared_expert.up_proj",
    "ffn_down_shexp": "mlp.shared_expert.down_proj", "ffn_gate_inp_shexp": "mlp.shared_expert_gate",
}
EXPERT = "{expert}"
_FUSED_NAMES = {"attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"}
_ROPE_TENSORS = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")
# A model that also sees images, as Ollama keeps Gemma 3: its vision tower and projector in the
# same file, which are not read
_VISION_PREFIXES = ("v.", "mm.")
_GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight",
                 "output_norm.weight": "model.norm.weight", "output_norm.bias": "model.norm.bias",
                 "output.weight": "lm_head.weight", "output.bias": "lm_head.bias"}
# Phi-2's q, k and v where its file holds them as one tensor (converted from its first
# checkpoints' Wqkv): split back, QKV marking where each one's letter goes
QKV = "{qkv}"
# The sampling a GGUF recommends (llama.cpp's general.sampling.*) -> generation_config.json's
_SAMPLING = (("temp", "temperature"), ("top_k", "top_k"), ("top_p", "top_p"),
             ("penalty_repeat", "repetition_penalty"))
SHARD_BYTES = 2 * 2 ** 30  # the most a converted weights file holds (and converting holds at once)
# Tensor types stored as they are (the rest are dequantized)
_STORED = {GGMLQuantizationType.F32: torch.float32, GGMLQuantizationType.F16: torch.float16,
           GGMLQuantizationType.BF16: torch.bfloat16}


def hf_name(gguf_name: str, arch: str) -> str | None:
    """A GGUF tensor's Hugging Face name in a model of llama.cpp's architecture `arch`."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.(weight|bias)", gguf_name)
    names = {**_LAYER_NAMES, **(_FUSED_NAMES if arch in FUSED else {}),
             **({"ffn_norm": "pre_feedforward_layernorm"} if arch in SANDWICHED else {}),
             **(_GLM4_NAMES if arch == "glm4" else {}),
             **({"attn_qkv": f"self_attn.{QKV}_proj"} if arch == "phi2" else {})}
    if m and m.group(2) in names:
        return f"model.layers.{m.group(1)}.{names[m.group(2)]}.{m.group(3)}"
    return None


def unpermute_rope(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation. GGUF stores each head's rows interleaved
    (pairs 0,1 / 2,3 rotate together); rotate_half RoPE pairs row j with row j + head_dim/2."""
    rows = w.shape[0]
    # [n_heads, head_dim/2, 2, in] -> [n_heads, 2, head_dim/2, in]
    return w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


class _Gguf:
    """Typed access to one GGUF's metadata, every failure a ModelLoadError naming the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.reader = GGUFReader(str(path))
        except FileNotFoundError:
            raise ModelLoadError(path, "file not found") from None
        except Exception as exc:  # numpy/struct errors on a truncated or foreign file
            raise ModelLoadError(path, f"not a readable GGUF file ({type(exc).__name__}: {exc})") \
                from None

    def get(self, key: str, default=None):
        field = self.reader.fields.get(key)
        if field is None:
            if default is None:
                raise ModelLoadError(self.path, f"GGUF metadata has no {key!r}")
            return default
        return field.contents()


def gguf_config(g: _Gguf) -> dict:
    """config.json for the GGUF (Hugging Face field names)."""
    arch = g.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise ModelLoadError(g.path, f"GGUF architecture {arch!r} is not supported (only "
                                     f"{', '.join(ARCHITECTURES)})")
    names = {t.name for t in g.reader.tensors}
    heads = int(g.get(f"{arch}.attention.head_count"))
    hidden = int(g.get(f"{arch}.embedding_length"))
    tokens = g.get("tokenizer.ggml.tokens")
    # phi3's and glm4's RoPE dimensions may be part of a head; the others' are the head
    head_dim = int(g.get(f"{arch}.attention.key_length", 0) or (
        hidden // heads if arch in PARTIAL_ROPE else
        g.get(f"{arch}.rope.dimension_count", hidden // heads)))
    rotary = int(g.get(f"{arch}.rope.dimension_count", head_dim))
    eos = [int(g.get("tokenizer.ggml.eos_token_id"))] + [
        int(g.get(f"tokenizer.ggml.{key}_token_id", -1)) for key in ("eot", "eom")]
    if arch in GEMMAS and "<end_of_turn>" in tokens:  # llama.cpp ends a turn there by its text
        eos.append(tokens.index("<end_of_turn>"))
    # the embedding's rows, where the file does not say (its vocabulary may list more)
    vocab = int(g.get(f"{arch}.vocab_size", 0) or next(
        (int(t.shape[-1]) for t in g.reader.tensors if t.name == "token_embd.weight"),
        len(tokens)))
    theta = float(g.get(f"{arch}.rope.freq_base", 1e6 if arch == "gemma3" else 10000.0))
    scaling = (_llama3_scaling(g, head_dim, theta) if "rope_freqs.weight" in names else
               _longrope_scaling(g, arch) if "rope_factors_short.weight" in names else
               _named_scaling(g, arch))
    window = int(g.get(f"{arch}.attention.sliding_window", 0))
    layers = int(g.get(f"{arch}.block_count"))
    experts = _experts(g, arch)
    olmo3 = arch == "olmo2" and window > 0  # llama.cpp's olmo2 with windows is OLMo 3
    return {
        "architectures": [MIXTRAL if arch == "llama" and experts else
                          "Olmo3ForCausalLM" if olmo3 else ARCHITECTURES[arch][0]],
        "model_type": arch, **experts,
        "vocab_size": vocab, "hidden_size": hidden,
        "intermediate_size": int(g.get(f"{arch}.feed_forward_length")),
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": int(g.get(f"{arch}.attention.head_count_kv", heads)),
        # (said where whole too: these architectures' configs default to part of a head)
        "head_dim": head_dim, **({"partial_rotary_factor": _share(g, rotary, head_dim)}
                                 if rotary != head_dim else
                                 {"partial_rotary_factor": 1.0} if arch in PARTIAL_ROPE else {}),
        "rope_theta": theta, **({"rope_scaling": scaling} if scaling else {}),
        **(_olmo3_fields(g, theta, scaling, layers) if olmo3 else {}),
        **_norm_eps(g, arch),
        **({"logit_scale": float(g.get(f"{arch}.logit_scale", 1.0))} if arch in COHERES else {}),
        # StableLM's q/k/v biases and parallel block (no norm before its MLP), as llama.cpp
        # tells them apart; StarCoder2's biases everywhere
        **({"use_qkv_bias": "blk.0.attn_q.bias" in names,
            "use_parallel_residual": "blk.0.ffn_norm.weight" not in names}
           if arch == "stablelm" else {}),
        **({"use_bias": "blk.0.attn_output.bias" in names} if arch == "starcoder2" else {}),
        "max_position_embeddings": int(g.get(f"{arch}.context_length")),
        "tie_word_embeddings": "output.weight" not in names,
        # in the layers the file flags, else every layer, as llama.cpp slides it, but in Gemma's
        # pattern (the reader's default) and OLMo 3's
        **({"sliding_window": window} if window else {}),
        **({"layer_types": _window_layers(g, arch, layers)}
           if window and arch not in SANDWICHED and not olmo3 else {}),
        **(_gemma_fields(g, arch, hidden, heads, head_dim, layers) if arch in GEMMAS else
           {"hidden_act": _ACTIVATIONS.get(arch, "silu")}),
        **({ours: float(g.get(f"{arch}.{theirs}", 1.0)) for theirs, ours in _GRANITE.items()}
           if arch in ("granite", "granitemoe") else {}),
        # (GLM-4's are q's, k's and v's; Qwen2's are implied)
        "attention_bias": arch == "glm4" and "blk.0.attn_q.bias" in names, "mlp_bias": False,
        "bos_token_id": int(g.get("tokenizer.ggml.bos_token_id")),
        "eos_token_id": list(dict.fromkeys(i for i in eos if i >= 0)),
        "torch_dtype": "float32",
    }


def _norm_eps(g: _Gguf, arch: str) -> dict:
    """The norms' eps under the field its folder's architecture reads: a LayerNorm's
    (llama.cpp's layer_norm_epsilon) or an RMSNorm's."""
    ours = SUPPORTED[ARCHITECTURES[arch][0]][0]
    if ours in NORM_EPS:
        return {NORM_EPS[ours]: float(g.get(f"{arch}.attention.layer_norm_epsilon"))}
    return {"rms_norm_eps": float(g.get(f"{arch}.attention.layer_norm_rms_epsilon",
                                        1e-6 if arch in GEMMAS else None))}


def _window_layers(g: _Gguf, arch: str, layers: int) -> list[str]:
    """Each layer's kind where the file has a window: as its sliding_window_pattern flags them
    (EXAONE 4's three sliding layers to a full one), else as llama.cpp has them: Cohere 2's
    every 4th full, the others' every layer sliding."""
    pattern = g.get(f"{arch}.attention.sliding_window_pattern",
                    [arch != "cohere2" or (i + 1) % 4 != 0 for i in range(layers)])
    if not isinstance(pattern, list) or len(pattern) != layers:
        raise ModelLoadError(g.path, f"{arch}.attention.sliding_window_pattern must flag each "
                                     f"of the {layers} layers, got {pattern!r}")
    return ["sliding_attention" if flag else "full_attention" for flag in pattern]


def _experts(g: _Gguf, arch: str) -> dict:
    """A mixture's config fields, where the file has experts: their width is llama.cpp's
    expert_feed_forward_length, or feed_forward_length (Mixtral's and OLMoE's, which the reader
    takes as theirs); Qwen2-MoE's shared expert's its own, as llama.cpp falls back."""
    count = int(g.get(f"{arch}.expert_count", 0))
    if not count:
        if arch in MIXTURES:
            raise ModelLoadError(g.path, f"GGUF metadata has no {arch}.expert_count")
        return {}
    if arch == "granitemoe" and int(g.get("granitemoe.expert_shared_feed_forward_length", 0)):
        raise ModelLoadError(g.path, "GraniteMoE's shared expert (GraniteMoeShared) is not "
                                     "supported")
    ff = int(g.get(f"{arch}.feed_forward_length"))
    fields = {"num_local_experts" if arch == "llama" else "num_experts": count,
              "num_experts_per_tok": int(g.get(f"{arch}.expert_used_count")),
              "norm_topk_prob": _EXPERT_WEIGHTS_NORMED[arch]}
    if arch.startswith("qwen"):
        fields["moe_intermediate_size"] = int(g.get(f"{arch}.expert_feed_forward_length", ff))
    if arch == "qwen2moe":
        fields["shared_expert_intermediate_size"] = int(
            g.get("qwen2moe.expert_shared_feed_forward_length", ff))
    return fields


def _gemma_fields(g: _Gguf, arch: str, hidden: int, heads: int, head_dim: int,
                  layers: int) -> dict:
    """Gemma's config fields that llama.cpp keeps in its code rather than the GGUF: GELU, the
    attention's scale (a head's width; hidden / heads for Gemma 2's and 3's 27B, which llama.cpp
    knows by their 46 and 62 layers) and Gemma 3's local RoPE base; Gemma 2's caps."""
    fields = {"hidden_activation": "gelu_pytorch_tanh"}
    if arch == "gemma":
        return fields
    big = layers == {"gemma2": 46, "gemma3": 62}[arch]
    fields["query_pre_attn_scalar"] = hidden // heads if big else head_dim
    if arch == "gemma2":
        fields |= {"attn_logit_softcapping": float(g.get("gemma2.attn_logit_softcapping", 50.0)),
                   "final_logit_softcapping": float(g.get("gemma2.final_logit_softcapping",
                                                          30.0))}
    else:  # Ollama names the local RoPE base and which layers slide (a flag for each)
        fields["rope_local_base_freq"] = float(g.get("gemma3.rope.local.freq_base", 10000.0))
        sliding = g.get("gemma3.attention.sliding_window_pattern", [])
        if isinstance(sliding, list) and len(sliding) == layers:
            fields["layer_types"] = ["sliding_attention" if s else "full_attention"
                                     for s in sliding]
    return fields


def _olmo3_fields(g: _Gguf, theta: float, scaling: dict | None, layers: int) -> dict:
    """OLMo 3's windows, as llama.cpp reads them from an olmo2 file: sliding layers by
    sliding_window_pattern (every 4th full unless it says; or a flag for each layer), their RoPE
    unscaled at freq_base_swa (else the full layers' base), `scaling` the full layers' alone."""
    pattern = g.get("olmo2.attention.sliding_window_pattern", 4)
    sliding = ([bool(flag) for flag in pattern] if isinstance(pattern, list) else
               [(i + 1) % int(pattern) != 0 for i in range(layers)])
    if len(sliding) != layers:
        raise ModelLoadError(g.path, f"olmo2.attention.sliding_window_pattern names "
                                     f"{len(sliding)} layers of {layers}")
    return {"layer_types": ["sliding_attention" if s else "full_attention" for s in sliding],
            "rope_parameters": {
                "full_attention": {"rope_theta": theta, **(scaling or {"rope_type": "default"})},
                "sliding_attention": {"rope_type": "default",
                                      "rope_theta": float(g.get("olmo2.rope.freq_base_swa",
                                                                theta))}}}


def _named_scaling(g: _Gguf, arch: str) -> dict | None:
    """RoPE scaling the GGUF names: linear (Gemma 3's 4B-27B's; a Gemma 3 of their 128K context
    that names none gets their factor of 8, which Ollama's converter left out) or YaRN, with the
    fields llama.cpp's converter writes from transformers' (its attention factor, betas)."""
    kind = g.get(f"{arch}.rope.scaling.type", "none")
    if kind == "none" and arch == "gemma3" and int(g.get("gemma3.context_length")) >= 131072:
        return {"rope_type": "linear", "factor": 8.0}
    if kind == "none":
        return None
    factor = float(g.get(f"{arch}.rope.scaling.factor"))
    if kind == "linear":
        return {"rope_type": "linear", "factor": factor}
    if kind != "yarn":
        raise ModelLoadError(g.path, f"RoPE scaling {kind!r} is not read (linear, yarn, and the "
                                     "llama3 and longrope factors stored as tensors)")
    optional = {ours: float(g.get(f"{arch}.rope.scaling.yarn_{theirs}"))
                for theirs, ours in (("attn_factor", "attention_factor"),
                                     ("beta_fast", "beta_fast"), ("beta_slow", "beta_slow"))
                if f"{arch}.rope.scaling.yarn_{theirs}" in g.reader.fields}
    return {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings":
            int(g.get(f"{arch}.rope.scaling.original_context_length")), **optional}


def _share(g: _Gguf, rotary: int, head_dim: int) -> float:
    """partial_rotary_factor, as transformers turns it back into dimensions (int(head_dim x
    share)), for `rotary` of a head's `head_dim` dimensions."""
    share = rotary / head_dim
    if not 0 < rotary < head_dim or rotary % 2 or int(head_dim * share) != rotary:
        raise ModelLoadError(g.path, f"RoPE on {rotary} of a head's {head_dim} dimensions "
                                     "cannot be read")
    return share


def _longrope_scaling(g: _Gguf, arch: str) -> dict:
    """Phi-3.5's and Phi-4-mini's longrope, whose factors llama.cpp stored as tensors."""
    factors = {t.name: [float(f) for f in np.array(t.data, dtype=np.float32)]
               for t in g.reader.tensors if t.name in _ROPE_TENSORS}
    return {"rope_type": "longrope", "short_factor": factors["rope_factors_short.weight"],
            "long_factor": factors.get("rope_factors_long.weight", []),
            "original_max_position_embeddings": int(
                g.get(f"{arch}.rope.scaling.original_context_length")),
            "attention_factor": float(g.get(f"{arch}.rope.scaling.attn_factor", 1.0))}


def _llama3_scaling(g: _Gguf, head_dim: int, theta: float) -> dict:
    """The llama3 RoPE scaling (Llama 3.1-3.3) whose per-dimension factors llama.cpp stored as
    rope_freqs: its factor is the largest, its low and high frequency factors Meta's (1 and 4),
    its original context the power of two that gives every factor stored."""
    stored = next(t for t in g.reader.tensors if t.name == "rope_freqs.weight")
    factors = torch.from_numpy(np.array(stored.data, dtype=np.float32))
    plain = rope.frequencies(head_dim, theta)
    for original in (2 ** n for n in range(4, 21)):
        params = {"rope_type": "llama3", "factor": float(factors.max()), "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": original}
        scaled = rope.frequencies(head_dim, theta, rope.RopeScaling.from_params(params, 0))
        if factors.shape == plain.shape and torch.allclose(plain / scaled, factors, rtol=1e-4):
            return params
    raise ModelLoadError(g.path, "its per-dimension RoPE factors (rope_freqs) are not Llama "
                                 "3's scaling; load the model's Hugging Face folder instead")


def _tensors(g: _Gguf, t, config: dict, dequantized: torch.dtype,
             permuted: bool) -> list[tuple[str, torch.Tensor]]:
    """A GGUF tensor under its Hugging Face name (a layer's experts' one tensor split into each
    expert's): as stored where that is a float type, else dequantized and kept as
    `dequantized`; Q/K rows back in rotate-half order where llama.cpp `permuted` them."""
    arch = g.get("general.architecture")
    name = hf_name(t.name, arch)
    if name is None:
        raise ModelLoadError(g.path, f"unexpected GGUF tensor {t.name!r}")
    try:
        kind = GGMLQuantizationType(t.tensor_type)
        w = np.asarray(dequantize(t.data, kind), dtype=np.float32)
    except (NotImplementedError, ValueError) as exc:
        raise ModelLoadError(g.path, f"cannot dequantize {t.name} ({exc})") from None
    # GGUF lists dims fastest-first; torch wants [out_features, in_features].
    w = w.reshape([int(d) for d in reversed(t.shape)])
    if permuted and re.search(r"[qk]_proj\.(weight|bias)$", name):
        w = unpermute_rope(w, config["num_attention_heads" if "q_proj" in name
                                     else "num_key_value_heads"])
    if arch in PLUS_ONE_NORMS and name.endswith("norm.weight"):
        w = w - 1  # back to the checkpoint's weight, which the model scales by 1 + it
    if name.endswith("shared_expert_gate.weight"):
        w = w.reshape(1, -1)  # llama.cpp keeps the gate's one row as a vector
    dtype = _STORED.get(kind, dequantized)
    # copies: GGUF data is a read-only mmap
    if QKV in name:
        heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
        rows = [config["head_dim"] * n for n in (heads, kv_heads, kv_heads)]
        if sum(rows) != w.shape[0]:
            raise ModelLoadError(g.path, f"{t.name} has {w.shape[0]} rows, not q's, k's and v's "
                                         f"{sum(rows)}")
        return [(name.replace(QKV, part), torch.from_numpy(np.array(w[start:start + n],
                                                                     order="C")).to(dtype))
                for part, start, n in zip("qkv", (0, rows[0], rows[0] + rows[1]), rows)]
    if EXPERT not in name:
        return [(name, torch.from_numpy(np.array(w, order="C")).to(dtype))]
    return [(name.replace(EXPERT, str(e)), torch.from_numpy(np.array(w[e], order="C")).to(dtype))
            for e in range(w.shape[0])]


def _write_weights(g: _Gguf, config: dict, out: Path, progress: Progress,
                   dequantized: torch.dtype) -> list[Path]:
    """The tensors written as safetensors, a shard of at most SHARD_BYTES at a time (so that
    converting holds no more than that), with the index that names them where there are
    several; the files written."""
    tensors = [t for t in g.reader.tensors  # the RoPE ones are in the config
               if t.name not in _ROPE_TENSORS and not t.name.startswith(_VISION_PREFIXES)]
    sizes = [int(np.prod(t.shape)) * _STORED.get(GGMLQuantizationType(t.tensor_type),
                                                 dequantized).itemsize for t in tensors]
    shards, room = [], 0
    for t, size in zip(tensors, sizes):
        if not shards or room + size > SHARD_BYTES:
            shards.append([])
            room = 0
        shards[-1].append(t)
        room += size
    names = (["model.safetensors"] if len(shards) == 1 else
             [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))])
    permuted = ARCHITECTURES[g.get("general.architecture")][1]
    weight_map, done = {}, 0
    for shard, file in zip(shards, names):
        weights = {}
        for t in shard:
            for name, tensor in _tensors(g, t, config, dequantized, permuted):
                weights[name] = tensor
                weight_map[name] = file
            done += 1
            if done % 16 == 0 or done == len(tensors):
                progress(f"dequantizing {t.name}", done / len(tensors))
        save_file(weights, str(out / file), metadata={"format": "pt"})
    written = [out / file for file in names]
    if len(shards) > 1:
        index = out / "model.safetensors.index.json"
        index.write_text(json.dumps({"metadata": {"total_size": sum(sizes)},
                                     "weight_map": weight_map}, indent=2))
    return written


def convert_gguf(gguf_path: str | Path, out_dir: str | Path,
                 progress: Progress = lambda message, fraction: None,
                 dequantized: torch.dtype = torch.float32) -> None:
    """Write config.json, model.safetensors (or its shards), tokenizer.json,
    tokenizer_config.json and generation_config.json for the GGUF at gguf_path into out_dir
    (created). Float tensors keep their type; quantized ones are stored `dequantized`: fp32
    keeps their values exactly (Q4_1's scales are fp16, not bf16-representable), fp16 within a
    part in 2,000 at half the size."""
    g = _Gguf(Path(gguf_path))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = _write_metadata(g, out)
    weights = _write_weights(g, config, out, progress, dequantized)
    # safetensors writes 0600: as readable as the files written beside it, as the umask makes them
    for file in weights:
        os.chmod(file, (out / "tokenizer.json").stat().st_mode & 0o777)
    progress("converted", 1.0)


def check_gguf(gguf_path: str | Path, out_dir: Path) -> None:
    """What convert_gguf reads before the weights (the architecture, config and tokenizer),
    written into `out_dir` as it writes them: a ModelLoadError where it would not convert."""
    _write_metadata(_Gguf(Path(gguf_path)), out_dir)


def gguf_shapes(gguf_path: str | Path) -> dict[str, tuple[int, ...]]:
    """Each tensor's shape, as torch has it, by its GGUF name (read from the header alone);
    a vision tower's left out, as converting leaves it."""
    return {t.name: tuple(int(d) for d in reversed(t.shape))
            for t in _Gguf(Path(gguf_path)).reader.tensors
            if not t.name.startswith(_VISION_PREFIXES)}


def _vocabulary_within(g: _Gguf, size: int):
    """g.get, with the vocabulary's lists cut to the model's `size` tokens: Ollama's Gemma 3
    lists tokens past its embedding's rows (<image_soft_token>), which no text can use."""
    per_token = ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores")

    def get(key: str, default=None):
        value = g.get(key, default)
        return value[:size] if key in per_token else value
    return get


def _write_metadata(g: _Gguf, out: Path) -> dict:
    """config.json, tokenizer.json, tokenizer_config.json and generation_config.json; the
    config."""
    config = gguf_config(g)
    tok, add_bos = gguf_tokenizer(g.path, _vocabulary_within(g, config["vocab_size"]))
    tok.save(str(out / "tokenizer.json"))
    tokens = g.get("tokenizer.ggml.tokens")
    eos_id = config["eos_token_id"][0]
    tokenizer_config = {
        "tokenizer_class": "GPT2Tokenizer", "add_bos_token": add_bos,
        "bos_token": tokens[config["bos_token_id"]], "eos_token": tokens[eos_id],
        "pad_token": tokens[int(g.get("tokenizer.ggml.padding_token_id", eos_id))],
        "chat_template": _templates(g),
        "model_max_length": config["max_position_embeddings"],
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    (out / "config.json").write_text(json.dumps(config, indent=2))
    keys = {ours: f"general.sampling.{theirs}" for theirs, ours in _SAMPLING}
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"],
         **{ours: g.get(key) for ours, key in keys.items() if key in g.reader.fields}}, indent=2))
    return config


def _templates(g: _Gguf) -> str | list[dict]:
    """The chat template, with the named ones llama.cpp keeps beside it
    (tokenizer.chat_template.NAME: tool_use) as tokenizer_config.json lists them."""
    prefix = "tokenizer.chat_template."
    named = [{"name": key[len(prefix):], "template": g.get(key)}
             for key in g.reader.fields if key.startswith(prefix)]
    default = g.get("tokenizer.chat_template", "")
    return [{"name": "default", "template": default}, *named] if named else default
