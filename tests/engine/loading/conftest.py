"""Fixtures built at test time: a byte-level BPE tokenizer, tiny Hugging Face folders saved by
transformers, and a tiny llama GGUF written with gguf's own writer."""
from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import dequantize, quantize
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from engine.forward_batch import LaneInput
from engine.kv_cache import PagedKVCache
from engine.runner import ModelRunner

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("1", "2")]


def _gpt2_bytes_to_unicode() -> list[str]:
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


def vocab_tokens() -> list[str]:
    """Control tokens, the 256 byte characters, then one token per merge."""
    return SPECIALS + _gpt2_bytes_to_unicode() + ["".join(m) for m in MERGES]


def make_tokenizer_json(path: Path) -> Path:
    tokens = vocab_tokens()
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=MERGES))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    tok.save(str(path))
    return path


VOCAB = len(vocab_tokens())  # 265


def make_sentencepiece_tokenizer_json(path: Path) -> Path:
    """Llama 2 / Mistral style: <unk> <s> </s>, the 256 byte tokens <0x00>..<0xFF> that
    characters outside the vocab fall back to, then pieces marked with the Metaspace "▁"."""
    pieces = ["▁", *"abcdefghijklmnopqrstuvwxyz", "▁t", "he", "▁the", "▁c", "at", "▁cat"]
    merges = [("▁", "t"), ("h", "e"), ("▁t", "he"), ("▁", "c"), ("a", "t"), ("▁c", "at")]
    vocab = {t: i for i, t in enumerate(["<unk>", "<s>", "</s>",
                                         *(f"<0x{b:02X}>" for b in range(256)), *pieces])}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True,
                               fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first",
                                                 split=False)
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in ("<unk>", "<s>", "</s>")])
    tok.save(str(path))
    return path


MIXTURES = {"mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2},
            "qwen2_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                          "shared_expert_intermediate_size": 48},
            "qwen3_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                          "head_dim": 24},
            "olmoe": {"num_experts": 4, "num_experts_per_tok": 2},
            "granitemoe": {"num_local_experts": 4, "num_experts_per_tok": 2},
            "qwen3_5_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                            "shared_expert_intermediate_size": 48},
            "qwen3_next": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                           "shared_expert_intermediate_size": 48}}


def hf_tiny(arch: str, **overrides):
    """A random transformers model of `arch` small enough to build in milliseconds."""
    transformers = pytest.importorskip("transformers")
    classes = {"llama": ("LlamaConfig", "LlamaForCausalLM"),
               "mistral": ("MistralConfig", "MistralForCausalLM"),
               "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
               "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
               "phi3": ("Phi3Config", "Phi3ForCausalLM"),
               "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM"),
               "granite": ("GraniteConfig", "GraniteForCausalLM"),
               "olmo2": ("Olmo2Config", "Olmo2ForCausalLM"),
               "olmo3": ("Olmo3Config", "Olmo3ForCausalLM"),
               "seed_oss": ("SeedOssConfig", "SeedOssForCausalLM"),
               "glm4": ("Glm4Config", "Glm4ForCausalLM"),
               "ernie4_5": ("Ernie4_5Config", "Ernie4_5ForCausalLM"),
               "gemma": ("GemmaConfig", "GemmaForCausalLM"),
               "gemma2": ("Gemma2Config", "Gemma2ForCausalLM"),
               "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM"),
               "exaone4": ("Exaone4Config", "Exaone4ForCausalLM"),
               "mixtral": ("MixtralConfig", "MixtralForCausalLM"),
               "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM"),
               "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM"),
               "olmoe": ("OlmoeConfig", "OlmoeForCausalLM"),
               "granitemoe": ("GraniteMoeConfig", "GraniteMoeForCausalLM"),
               "cohere": ("CohereConfig", "CohereForCausalLM"),
               "cohere2": ("Cohere2Config", "Cohere2ForCausalLM"),
               "stablelm": ("StableLmConfig", "StableLmForCausalLM"),
               "arcee": ("ArceeConfig", "ArceeForCausalLM"),
               "starcoder2": ("Starcoder2Config", "Starcoder2ForCausalLM"),
               "phi": ("PhiConfig", "PhiForCausalLM"),
               "nemotron": ("NemotronConfig", "NemotronForCausalLM"),
               "granitemoehybrid": ("GraniteMoeHybridConfig", "GraniteMoeHybridForCausalLM"),
               "lfm2": ("Lfm2Config", "Lfm2ForCausalLM"),
               "lfm2_moe": ("Lfm2MoeConfig", "Lfm2MoeForCausalLM"),
               "lfm3": ("Lfm3Config", "Lfm3ForCausalLM"),
               "helium": ("HeliumConfig", "HeliumForCausalLM"),
               "qwen3_5": ("Qwen3_5TextConfig", "Qwen3_5ForCausalLM"),
               "qwen3_5_moe": ("Qwen3_5MoeTextConfig", "Qwen3_5MoeForCausalLM"),
               "qwen3_next": ("Qwen3NextConfig", "Qwen3NextForCausalLM")}
    config_cls, model_cls = (getattr(transformers, n) for n in classes[arch])
    kwargs = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  rope_theta=5000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
                  bos_token_id=1, eos_token_id=2)
    if arch == "qwen3":
        kwargs["head_dim"] = 24  # Qwen3's head_dim is its own field, not hidden / heads
    if arch == "helium":
        kwargs["head_dim"] = 16  # its default, 128, is its 2B's (whose o_proj takes hidden_size)
    if arch.startswith(("qwen3_5", "qwen3_next")):  # heads of 256, DeltaNet's of 128 unless told
        kwargs.update(head_dim=16, linear_key_head_dim=8, linear_value_head_dim=12,
                      linear_num_key_heads=2, linear_num_value_heads=4)
    if arch in MIXTURES:  # four experts, two a token, so that tokens choose differently
        kwargs.update(MIXTURES[arch])
    if arch in ("phi3", "smollm3", "olmo2", "exaone4", "olmoe", "glm4"):
        kwargs["pad_token_id"] = 0  # their default is past the tiny vocabulary
    if arch.startswith("gemma"):  # heads of 256 and a window of 4096 unless told
        kwargs.update(head_dim=16, pad_token_id=0)
        if arch != "gemma":
            kwargs.update(query_pre_attn_scalar=24, sliding_window=5)
    kwargs.update(overrides)
    torch.manual_seed(0)
    model = model_cls(config_cls(**kwargs)).eval()
    with torch.no_grad():  # the default init leaves norms at exactly 1 and biases at 0
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith(".bias"):
                p.add_(0.1 * torch.randn_like(p))
    return model


# Ministral 3's RoPE in kind, its original context 8 tokens, so that the prompt's last four
# queries are scaled by 1 + 0.1 log 2 (Llama 4's scale)
MINISTRAL3_ROPE = {"rope_type": "yarn", "rope_theta": 5000.0, "factor": 16.0,
                   "original_max_position_embeddings": 8, "llama_4_scaling_beta": 0.1,
                   "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}


def hf_mistral3(text_type: str, tie: bool = False, **text):
    """A random Mistral3ForConditionalGeneration (a vision tower, a projector and the text model
    of `text_type`), as Mistral Small 3.1 and 3.2 (mistral) and Ministral 3 (ministral3) ship."""
    transformers = pytest.importorskip("transformers")
    config_cls = {"mistral": transformers.MistralConfig,
                  "ministral3": transformers.Ministral3Config}
    text = config_cls[text_type](
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=1024,
        rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, **text)
    vision = transformers.PixtralVisionConfig(hidden_size=32, intermediate_size=64,
                                              num_hidden_layers=1, num_attention_heads=2,
                                              image_size=32, patch_size=16, head_dim=16)
    torch.manual_seed(0)
    return transformers.Mistral3ForConditionalGeneration(transformers.Mistral3Config(
        vision_config=vision, text_config=text, image_token_index=10,
        tie_word_embeddings=tie)).eval()


def save_hf_folder(model, folder: Path, **save_kwargs) -> Path:
    model.save_pretrained(folder, **save_kwargs)
    make_tokenizer_json(folder / "tokenizer.json")
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": "<|im_end|>", "bos_token": "<|im_start|>",
         "chat_template": "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n"
                          "{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}"}))
    return folder


def engine_logits(model, token_ids: list[int]) -> torch.Tensor:
    """Our model's logits for every position of one prompt, via a fresh paged KV cache."""
    kv = PagedKVCache(model.config, max(16, -(-len(token_ids) // 16)), 16, model.dtype,
                      model.device)
    out = ModelRunner(model, kv).forward([LaneInput(0, token_ids, 0, len(token_ids))])
    return out.logits[0]  # [len(token_ids), vocab]


def reference_logits(hf_model, token_ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return hf_model(torch.tensor([token_ids])).logits[0].float()


@pytest.fixture
def tiny_llama_folder(tmp_path) -> tuple[Path, object]:
    model = hf_tiny("llama")
    return save_hf_folder(model, tmp_path / "tiny-llama"), model


def as_stored(hf):
    """The model as the GGUF holds it: its embedding through Q8_0, kept as fp16."""
    hf = copy.deepcopy(hf)
    embed = hf.model.embed_tokens.weight
    q8 = quantize(embed.detach().numpy(), GGMLQuantizationType.Q8_0)
    with torch.no_grad():
        embed.copy_(torch.from_numpy(dequantize(q8, GGMLQuantizationType.Q8_0).astype(np.float16)))
    return hf


LLAMA_CPP_PERMUTED = ("llama", "smollm3", "granite", "granitemoe", "arcee")  # Q/K rows
# architectures whose layers' tensors are named here by gguf's own map, and those by their name
BY_GGUF_NAMES = ("exaone4", "ernie4_5", "glm4", "command-r", "cohere2", "stablelm",
                 "starcoder2", "arcee", "nemotron", "phi2", "lfm2")
ARCH_BY_NAME = {name: arch for arch, name in gguf.MODEL_ARCH_NAMES.items()}


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf.py's Q/K permutation, written out independently."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


_GGUF_LAYER = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
               "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
               "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
               "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
               "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
               "self_attn.qkv_proj": "attn_qkv", "mlp.gate_up_proj": "ffn_up",  # Phi-3's
               "post_feedforward_layernorm": "post_ffw_norm",  # OLMo 2's
               "pre_feedforward_layernorm": "ffn_norm",  # Gemma 2's and 3's
               "mlp.gate": "ffn_gate_inp", "mlp.shared_expert.gate_proj": "ffn_gate_shexp",
               "mlp.shared_expert.up_proj": "ffn_up_shexp",  # a mixture's
               "mlp.shared_expert.down_proj": "ffn_down_shexp"}


GGUF_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                 "<|im_end|>\n{% endfor %}{{ '<|im_start|>assistant\\n' }}")


def write_gguf_vocabulary(w: GGUFWriter, pre: str, bos: bool = True) -> None:
    """The byte-level vocabulary of vocab_tokens, as llama.cpp writes a BPE tokenizer split as
    `pre` (`bos`: with a BOS token's id, which some files leave out)."""
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    tokens = vocab_tokens()
    w.add_token_list(tokens)
    w.add_token_types([3 if t in SPECIALS else 1 for t in tokens])
    w.add_token_merges([" ".join(m) for m in MERGES])
    if bos:
        w.add_bos_token_id(1)
    w.add_eos_token_id(2)


def write_tiny_gguf(hf_model, path: Path, arch: str = "llama", pre: str = "smollm",
                    tokenizer=None, extra=None, template: str = GGUF_TEMPLATE,
                    vocab_size: bool = True, fused_qkv: bool = False) -> Path:
    """What llama.cpp's converter would write for hf_model: Q/K rows permuted for the llama
    architecture, the token embedding quantized to Q8_0 (so the reference must use its
    dequantized values). `tokenizer(writer)` writes a vocabulary of its own (else the byte-level
    one of vocab_tokens, split as `pre`); `extra(writer)` adds metadata or tensors;
    `vocab_size`: the vocabulary's size is written (Ollama's Gemma 3 leaves it out);
    `fused_qkv`: q, k and v as one attn_qkv tensor (Phi-2's first checkpoints' Wqkv)."""
    c = hf_model.config
    w = GGUFWriter(str(path), arch)
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    if arch == "lfm2":  # as llama.cpp's LFM2Model writes it: its MLP's width, as worked out
        w.add_feed_forward_length(hf_model.model.layers[0].feed_forward.w1.out_features)
        w.add_head_count_kv([c.num_key_value_heads if kind != "conv" else 0
                             for kind in c.layer_types])  # 0: a short convolution
        w.add_shortconv_l_cache(c.conv_L_cache)
    else:
        w.add_feed_forward_length(c.intermediate_size)
        w.add_head_count_kv(c.num_key_value_heads)
    w.add_head_count(c.num_attention_heads)
    rope = c.rope_parameters.get("full_attention", c.rope_parameters)  # Gemma 3's by layer type
    w.add_rope_freq_base(rope["rope_theta"])
    w.add_layer_norm_rms_eps(c.norm_eps if arch == "lfm2" else c.rms_norm_eps)
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    w.add_rope_dimension_count(int(head_dim * rope.get("partial_rotary_factor", 1.0)))
    if arch in ("granite", "granitemoe"):  # as llama.cpp's GraniteModel writes them
        w.add_embedding_scale(c.embedding_multiplier)
        w.add_residual_scale(c.residual_multiplier)
        w.add_attention_scale(c.attention_multiplier)
        w.add_logit_scale(c.logits_scaling)
    if arch == "phi3":  # as llama.cpp's Phi3MiniModel writes it
        w.add_sliding_window(c.sliding_window or 0)
        if rope.get("rope_type") == "longrope":
            original = rope["original_max_position_embeddings"]
            w.add_rope_scaling_orig_ctx_len(original)
            scale = c.max_position_embeddings / original
            w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(original)))
            w.add_tensor("rope_factors_long.weight", np.array(rope["long_factor"], np.float32))
            w.add_tensor("rope_factors_short.weight", np.array(rope["short_factor"], np.float32))
    experts = getattr(c, "num_local_experts", None) or getattr(c, "num_experts", None)
    if experts:  # as llama.cpp's converters write a mixture
        w.add_expert_count(experts)
        w.add_expert_used_count(c.num_experts_per_tok)
        if getattr(c, "moe_intermediate_size", None):
            w.add_expert_feed_forward_length(c.moe_intermediate_size)
        if getattr(c, "shared_expert_intermediate_size", None):
            w.add_expert_shared_feed_forward_length(c.shared_expert_intermediate_size)
    if arch in ("qwen3", "qwen3moe", "qwen3vl", "gemma", "gemma2", "gemma3") + BY_GGUF_NAMES:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    if arch in ("stablelm", "starcoder2", "nemotron", "phi2"):  # as llama.cpp's converters do
        w.add_layer_norm_eps(c.norm_epsilon if arch == "starcoder2" else
                             c.norm_eps if arch == "nemotron" else c.layer_norm_eps)
    if arch in ("command-r", "cohere2"):  # as llama.cpp's CommandR2Model and Cohere2Model do
        w.add_layer_norm_eps(c.layer_norm_eps)
        w.add_logit_scale(c.logit_scale)
        if arch == "cohere2":
            w.add_sliding_window(c.sliding_window)
    if arch == "exaone4" and c.sliding_window:  # as llama.cpp's Exaone4Model writes them
        w.add_sliding_window(c.sliding_window)
        w.add_sliding_window_pattern([kind == "sliding_attention" for kind in c.layer_types])
    if arch in ("gemma2", "gemma3"):  # as llama.cpp's Gemma2Model and Gemma3Model write them
        w.add_sliding_window(c.sliding_window)
    if arch == "gemma2":
        w.add_attn_logit_softcapping(c.attn_logit_softcapping)
        w.add_final_logit_softcapping(c.final_logit_softcapping)
    if vocab_size:
        w.add_vocab_size(c.vocab_size)
    if tokenizer:
        tokenizer(w)
    else:
        write_gguf_vocabulary(w, pre)
    w.add_chat_template(template)
    if extra:
        extra(w)
    fused: dict[tuple[str, str], list[np.ndarray]] = {}
    for name, t in hf_model.state_dict().items():
        a = t.float().numpy()
        if (arch.startswith("gemma") or arch == "nemotron") and name.endswith("norm.weight"):
            a = a + 1  # llama.cpp stores these norms as the 1 + weight they scale by
        if name == "model.embed_tokens.weight":
            q = quantize(a, GGMLQuantizationType.Q8_0)
            w.add_tensor("token_embd.weight", q, raw_dtype=GGMLQuantizationType.Q8_0)
            continue
        if name in ("lm_head.weight", "lm_head.bias"):
            if not c.tie_word_embeddings:
                w.add_tensor(name.replace("lm_head", "output"), a)
            continue
        if name == "model.embedding_norm.weight":  # LFM2's last norm, as llama.cpp names it
            w.add_tensor("token_embd_norm.weight", a)
            continue
        if name.endswith("conv.conv.weight"):
            a = a.squeeze(1)  # as llama.cpp's LFM2Model stores it
        name = name.replace("model.final_layernorm.", "model.norm.")  # (Phi's name for it)
        if name in ("model.norm.weight", "model.norm.bias"):
            w.add_tensor(name.replace("model.norm", "output_norm"), a)
            continue
        layer, rest = name.removeprefix("model.layers.").split(".", 1)
        rest = rest.replace("block_sparse_moe.", "mlp.").replace("mlp.router.", "mlp.gate.")
        if rest.startswith("mlp.experts."):  # all of a layer's experts, gate and up fused
            if rest == "mlp.experts.gate_up_proj":
                gate, up = np.split(a, 2, axis=1)
                w.add_tensor(f"blk.{layer}.ffn_gate_exps.weight", np.ascontiguousarray(gate))
                w.add_tensor(f"blk.{layer}.ffn_up_exps.weight", np.ascontiguousarray(up))
            else:
                w.add_tensor(f"blk.{layer}.ffn_down_exps.weight", a)
            continue
        if rest == "mlp.shared_expert_gate.weight":  # llama.cpp's is a vector
            w.add_tensor(f"blk.{layer}.ffn_gate_inp_shexp.weight", a.reshape(-1))
            continue
        module, kind = rest.rsplit(".", 1)
        if arch in LLAMA_CPP_PERMUTED and module == "self_attn.q_proj":
            a = llama_cpp_permute(a, c.num_attention_heads)
        elif arch in LLAMA_CPP_PERMUTED and module == "self_attn.k_proj":
            a = llama_cpp_permute(a, c.num_key_value_heads)
        if fused_qkv and module in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"):
            fused.setdefault((layer, kind), []).append(a)
            if module.endswith("v_proj"):  # (q, k and v come in that order)
                w.add_tensor(f"blk.{layer}.attn_qkv.{kind}",
                             np.ascontiguousarray(np.concatenate(fused[layer, kind])))
            continue
        if arch in BY_GGUF_NAMES:  # named by gguf's own map, as llama.cpp's converter does
            gguf_name = gguf.get_tensor_name_map(ARCH_BY_NAME[arch], c.num_hidden_layers)
            w.add_tensor(f"{gguf_name.get_name(f'model.layers.{layer}.{module}')}.{kind}",
                         np.ascontiguousarray(a))
            continue
        sandwiched = arch in ("olmo2", "gemma2", "gemma3")  # norms after each sublayer
        gguf_module = ("post_attention_norm" if sandwiched and
                       module == "post_attention_layernorm" else _GGUF_LAYER[module])
        w.add_tensor(f"blk.{layer}.{gguf_module}.{kind}", np.ascontiguousarray(a))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
