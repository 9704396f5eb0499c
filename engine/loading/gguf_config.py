"""A GGUF's metadata read as the config.json of the Hugging Face folder its model converts to
(gguf_convert.py): llama.cpp's architecture names, field names and the defaults it keeps in its
code rather than the file (Gemma's scales, which layers slide, how mixtures weigh experts)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from gguf import GGUFReader

from engine import rope
from engine.errors import ModelLoadError
from engine.loading.architectures import NORM_EPS, SUPPORTED
from engine.loading.gguf_delta import DELTA_ARCHITECTURES, delta_fields

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
                 "qwen3vl": ("Qwen3ForCausalLM", False),
                 "lfm2": ("Lfm2ForCausalLM", False),
                 # Qwen3.5's, with gated DeltaNet (gguf_delta.py); its mixtures
                 "qwen35": ("Qwen3_5ForCausalLM", False),
                 "qwen35moe": ("Qwen3_5MoeForCausalLM", False)}
COHERES = ("command-r", "cohere2")  # logits scaled
_ACTIVATIONS = {"starcoder2": "gelu_pytorch_tanh", "arcee": "relu2", "nemotron": "relu2",
                "phi2": "gelu_new"}  # the others' SiLU
# Mixtral is llama.cpp's llama with experts; these are mixtures always
MIXTRAL = "MixtralForCausalLM"
MIXTURES = ("qwen2moe", "qwen3moe", "olmoe", "granitemoe", "qwen35moe")
# Whether llama.cpp rescales the chosen experts' weights to sum to 1 (it decides by architecture,
# whatever a file's expert_weights_norm says): Mixtral's, Qwen3-MoE's and GraniteMoE's it does
_EXPERT_WEIGHTS_NORMED = {"llama": True, "qwen3moe": True, "qwen2moe": False, "olmoe": False,
                          "granitemoe": True, "qwen35moe": True}
GEMMAS = ("gemma", "gemma2", "gemma3")
# Gemma 2's and 3's norms around each sublayer: ffn_norm is the one before the MLP
SANDWICHED = ("gemma2", "gemma3")
# GGUF metadata -> config.json's Granite scalars
_GRANITE = {"embedding_scale": "embedding_multiplier", "residual_scale": "residual_multiplier",
            "attention.scale": "attention_multiplier", "logit_scale": "logits_scaling"}
# architectures whose RoPE dimension count may be part of a head
PARTIAL_ROPE = ("phi3", "glm4", "stablelm", "nemotron", "phi2")
# llama.cpp's RoPE factors, stored as tensors (in the config, not the weights)
ROPE_TENSORS = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")


class Gguf:
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


def gguf_config(g: Gguf) -> dict:
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
    bos = int(g.get("tokenizer.ggml.bos_token_id", -1))  # (a file may name none: Qwen's)
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
    # (llama.cpp counts a multi-token-prediction block, Qwen3.5's, as a last layer)
    layers = int(g.get(f"{arch}.block_count")) - int(g.get(f"{arch}.nextn_predict_layers", 0))
    experts = _experts(g, arch)
    olmo3 = arch == "olmo2" and window > 0  # llama.cpp's olmo2 with windows is OLMo 3
    return {
        "architectures": [MIXTRAL if arch == "llama" and experts else
                          "Olmo3ForCausalLM" if olmo3 else ARCHITECTURES[arch][0]],
        "model_type": arch, **experts,
        "vocab_size": vocab, "hidden_size": hidden,
        # (where every layer's MLP is a mixture, Qwen3.5's, the experts' width stands for it)
        "intermediate_size": int(g.get(f"{arch}.feed_forward_length", 0)
                                 or g.get(f"{arch}.expert_feed_forward_length")),
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        **_kv_heads(g, arch, heads, layers),
        **(_lfm2_fields(g, names) if arch == "lfm2" else {}),
        **(delta_fields(g, arch) if arch in DELTA_ARCHITECTURES else {}),
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
        "bos_token_id": bos if bos >= 0 else None,
        "eos_token_id": list(dict.fromkeys(i for i in eos if i >= 0)),
        "torch_dtype": "float32",
    }


def _kv_heads(g: Gguf, arch: str, heads: int, layers: int) -> dict:
    """num_key_value_heads; where the file gives a count for each layer (LFM2's), those of 0
    are short-convolution layers (layer_types), as llama.cpp's converter writes them, and the
    attention layers' counts must agree."""
    counts = g.get(f"{arch}.attention.head_count_kv", heads)
    if not isinstance(counts, list):
        return {"num_key_value_heads": int(counts)}
    attending = {int(n) for n in counts if n}
    if len(counts) != layers or len(attending) != 1 or arch != "lfm2":
        raise ModelLoadError(g.path, f"{arch}.attention.head_count_kv must be one count, or "
                                     f"(LFM2's) one for each of the {layers} layers that is 0 "
                                     f"or the same for all, got {counts!r}")
    return {"num_key_value_heads": attending.pop(),
            "layer_types": ["full_attention" if n else "conv" for n in counts]}


def _lfm2_fields(g: Gguf, names: set[str]) -> dict:
    """LFM2's convolutions' span and biases; its MLP's width is feed_forward_length itself."""
    return {"conv_L_cache": int(g.get("lfm2.shortconv.l_cache", 3)),
            "conv_bias": any(name.endswith("shortconv.in_proj.bias") for name in names),
            "block_auto_adjust_ff_dim": False}


def _norm_eps(g: Gguf, arch: str) -> dict:
    """The norms' eps under the field its folder's architecture reads: a LayerNorm's
    (llama.cpp's layer_norm_epsilon) or an RMSNorm's."""
    ours, switches = SUPPORTED[ARCHITECTURES[arch][0]]
    field = NORM_EPS.get(ours, "rms_norm_eps")
    if switches.get("layer_norm"):
        return {field: float(g.get(f"{arch}.attention.layer_norm_epsilon"))}
    return {field: float(g.get(f"{arch}.attention.layer_norm_rms_epsilon",
                               1e-6 if arch in GEMMAS else None))}


def _window_layers(g: Gguf, arch: str, layers: int) -> list[str]:
    """Each layer's kind where the file has a window: as its sliding_window_pattern flags them
    (EXAONE 4's three sliding layers to a full one), else as llama.cpp has them: Cohere 2's
    every 4th full, the others' every layer sliding."""
    pattern = g.get(f"{arch}.attention.sliding_window_pattern",
                    [arch != "cohere2" or (i + 1) % 4 != 0 for i in range(layers)])
    if not isinstance(pattern, list) or len(pattern) != layers:
        raise ModelLoadError(g.path, f"{arch}.attention.sliding_window_pattern must flag each "
                                     f"of the {layers} layers, got {pattern!r}")
    return ["sliding_attention" if flag else "full_attention" for flag in pattern]


def _experts(g: Gguf, arch: str) -> dict:
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
    ff = g.get(f"{arch}.feed_forward_length", 0) or None  # (none where no layer is dense)
    fields = {"num_local_experts" if arch == "llama" else "num_experts": count,
              "num_experts_per_tok": int(g.get(f"{arch}.expert_used_count")),
              "norm_topk_prob": _EXPERT_WEIGHTS_NORMED[arch]}
    if arch.startswith("qwen"):
        fields["moe_intermediate_size"] = int(g.get(f"{arch}.expert_feed_forward_length", ff))
    if arch in ("qwen2moe", "qwen35moe"):
        fields["shared_expert_intermediate_size"] = int(
            g.get(f"{arch}.expert_shared_feed_forward_length", ff))
    return fields


def _gemma_fields(g: Gguf, arch: str, hidden: int, heads: int, head_dim: int,
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


def _olmo3_fields(g: Gguf, theta: float, scaling: dict | None, layers: int) -> dict:
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


def _named_scaling(g: Gguf, arch: str) -> dict | None:
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


def _share(g: Gguf, rotary: int, head_dim: int) -> float:
    """partial_rotary_factor, as transformers turns it back into dimensions (int(head_dim x
    share)), for `rotary` of a head's `head_dim` dimensions."""
    share = rotary / head_dim
    if not 0 < rotary < head_dim or rotary % 2 or int(head_dim * share) != rotary:
        raise ModelLoadError(g.path, f"RoPE on {rotary} of a head's {head_dim} dimensions "
                                     "cannot be read")
    return share


def _longrope_scaling(g: Gguf, arch: str) -> dict:
    """Phi-3.5's and Phi-4-mini's longrope, whose factors llama.cpp stored as tensors."""
    factors = {t.name: [float(f) for f in np.array(t.data, dtype=np.float32)]
               for t in g.reader.tensors if t.name in ROPE_TENSORS}
    return {"rope_type": "longrope", "short_factor": factors["rope_factors_short.weight"],
            "long_factor": factors.get("rope_factors_long.weight", []),
            "original_max_position_embeddings": int(
                g.get(f"{arch}.rope.scaling.original_context_length")),
            "attention_factor": float(g.get(f"{arch}.rope.scaling.attn_factor", 1.0))}


def _llama3_scaling(g: Gguf, head_dim: int, theta: float) -> dict:
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
