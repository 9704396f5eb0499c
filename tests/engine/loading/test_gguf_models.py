"""A GGUF file given as the model: llama.cpp's architectures (llama, qwen2, qwen3, phi3, olmo2,
smollm3, granite, gemma, gemma2, gemma3, exaone4, ernie4_5, glm4, command-r, cohere2,
stablelm, starcoder2, arcee, nemotron, phi2, qwen2vl, qwen25vl, qwen3vl; the mixtures' in
test_mixtures.py), their
tokenizers (byte-level BPE split as the file names, SentencePiece), converted once into the user
cache and loaded as a folder; what cannot be read is refused naming the file."""
from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import torch
from gguf import RopeScalingType
from safetensors import safe_open

from engine.errors import ModelLoadError
from engine.loading import check_model_folder, load_model

from .conftest import (MERGES, SPECIALS, as_stored, engine_logits, hf_tiny, reference_logits,
                       vocab_tokens, write_tiny_gguf)

PROMPT = [1, 40, 77, 3, 200, 264, 10, 90, 90, 15]
TEXTS = ["the theme in 2024, 12345 tins!", "I'm here; they'll\n\n  go\tnow", "Ünïcode ✓ 日本語 🙂",
         "def f(x):\n    return x  # done", "<|im_start|>user\nthe<|im_end|>\n"]


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path / "cache"))


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "phi3", "olmo2"])
def test_a_gguf_loads_as_the_model_it_holds(arch, tmp_path):
    """Logits as transformers' model with the same weights gives them, in fp32; the quantized
    tensor stored fp16 in the cache, the float ones as they were."""
    hf = hf_tiny(arch)
    path = write_tiny_gguf(hf, tmp_path / f"tiny-{arch}.gguf", arch=arch)
    messages = []
    loaded = load_model(str(path), dtype="fp32", device="cpu",
                        progress=lambda message, fraction: messages.append(message))
    assert loaded.name == f"tiny-{arch}" and loaded.config.architecture == arch
    assert any(m.startswith(f"converting tiny-{arch}.gguf") for m in messages)
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(as_stored(hf), PROMPT), atol=1e-4, rtol=0)
    with safe_open(os.path.join(loaded.source, "model.safetensors"), "pt") as weights:
        assert weights.get_tensor("model.embed_tokens.weight").dtype == torch.float16
        assert weights.get_tensor("lm_head.weight").dtype == torch.float32
    assert loaded.tokenizer.chat_prompt("hi") == \
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
        "attention_factor": 1.25, "beta_fast": 16.0, "beta_slow": 2.0}


def _yarn(writer):
    """YaRN as llama.cpp's converter writes it from YARN."""
    writer.add_rope_scaling_type(RopeScalingType.YARN)
    writer.add_rope_scaling_factor(YARN["factor"])
    writer.add_rope_scaling_orig_ctx_len(YARN["original_max_position_embeddings"])
    writer.add_rope_scaling_yarn_attn_factor(YARN["attention_factor"])
    writer.add_rope_scaling_yarn_beta_fast(YARN["beta_fast"])
    writer.add_rope_scaling_yarn_beta_slow(YARN["beta_slow"])


def test_a_ggufs_yarn_scaling_is_read_back(tmp_path):
    """A Qwen2 file with YaRN, its attention factor and betas: as transformers scales RoPE."""
    hf = hf_tiny("qwen2", rope_parameters={"rope_theta": 5000.0, **YARN})
    loaded = load_model(str(write_tiny_gguf(hf, tmp_path / "yarn.gguf", arch="qwen2",
                                            extra=_yarn)), dtype="fp32", device="cpu")
    s = loaded.config.rope_scaling
    assert (s.kind, s.factor, s.attention_factor, s.beta_fast, s.beta_slow) == (
        "yarn", 4.0, 1.25, 16.0, 2.0)
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(as_stored(hf), PROMPT), atol=1e-4, rtol=0)


def test_an_olmo2_gguf_with_windows_is_olmo3(tmp_path):
    """llama.cpp keeps OLMo 3 as olmo2 with a sliding window: three sliding layers to a full
    one, YaRN in the full ones alone."""
    hf = hf_tiny("olmo3", num_hidden_layers=4, sliding_window=5, rope_parameters={
        "full_attention": {"rope_theta": 5000.0, **YARN},
        "sliding_attention": {"rope_type": "default", "rope_theta": 5000.0}})

    def windows(writer):
        writer.add_sliding_window(5)
        _yarn(writer)

    loaded = load_model(str(write_tiny_gguf(hf, tmp_path / "olmo3.gguf", arch="olmo2",
                                            extra=windows)), dtype="fp32", device="cpu")
    c = loaded.config
    assert (c.architecture, c.sliding_layers, c.local_rope_theta) == ("olmo3", (0, 1, 2), 5000.0)
    assert c.rope_scaling.kind == "yarn"
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(as_stored(hf), PROMPT), atol=1e-4, rtol=0)


@pytest.mark.parametrize("arch,fields,pre", [
    # EXAONE 4 32B's kind: three sliding layers to a full one, RoPE in the sliding ones alone
    ("exaone4", {"num_hidden_layers": 4, "tie_word_embeddings": True, "sliding_window": 5,
                 "layer_types": ["sliding_attention"] * 3 + ["full_attention"]}, "exaone4"),
    ("exaone4", {"tie_word_embeddings": True, "sliding_window": None,  # 1.2B's kind
                 "layer_types": ["full_attention"] * 2}, "exaone4"),
    ("ernie4_5", {"tie_word_embeddings": True, "head_dim": 24}, "smollm"),
    ("glm4", {"head_dim": 16}, "glm4")])
def test_exaone4_ernie4_5_and_glm4_ggufs_load_as_the_models_they_hold(tmp_path, arch, fields,
                                                                       pre):
    """As llama.cpp's converters write them: their Hugging Face rows as they are (ERNIE 4.5's and
    GLM-4's RoPE turns adjacent pairs, as llama.cpp's does for them), EXAONE 4's windows flagged
    layer by layer, GLM-4's gate and up one tensor and its RoPE on half of each head."""
    hf = hf_tiny(arch, **fields)
    loaded = load_model(str(write_tiny_gguf(hf, tmp_path / f"{arch}.gguf", arch=arch, pre=pre)),
                        dtype="fp32", device="cpu")
    c = loaded.config
    assert c.architecture == arch
    if arch == "exaone4":
        windowed = fields["sliding_window"] is not None
        assert (c.sliding_layers, c.nope_layers) == (((0, 1, 2), (3,)) if windowed else ((), ()))
    if arch == "glm4":
        assert (c.qkv_bias, c.rotary_dim, c.head_dim) == (True, 8, 16)
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(as_stored(hf), PROMPT), atol=1e-4, rtol=0)


@pytest.mark.parametrize("gguf_arch,arch,fields", [
    ("command-r", "cohere", {"logit_scale": 0.125}),
    # llama.cpp's cohere2: every 4th layer full, as its code has it, RoPE in the others alone
    ("cohere2", "cohere2", {"num_hidden_layers": 8, "sliding_window": 5})])
def test_cohere_ggufs_load_as_the_models_they_hold(tmp_path, gguf_arch, arch, fields):
    """llama.cpp's command-r and cohere2: LayerNorms (their eps as such), logit_scale, Q/K rows
    as their folders have them (llama.cpp turns adjacent pairs for both, as Cohere does)."""
    hf = hf_tiny(arch, **fields)
    loaded = load_model(str(write_tiny_gguf(hf, tmp_path / f"{arch}.gguf", arch=gguf_arch,
                                            pre="command-r")), dtype="fp32", device="cpu")
    c = loaded.config
    assert (c.architecture, c.layer_norm) == (arch, True)
    assert c.logits_scaling == 1 / hf.config.logit_scale
    if arch == "cohere2":
        assert (c.sliding_layers, c.nope_layers) == ((0, 1, 2, 4, 5, 6), (3, 7))
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(as_stored(hf), PROMPT), atol=1e-4, rtol=0)


@pytest.mark.parametrize("arch,fields", [
    ("stablelm", {"use_qkv_bias": True}),  # StableLM 2 1.6B's kind
    ("stablelm", {"use_parallel_residual": True}),  # 12B's: no norm before the MLP
    ("starcoder2", {}),  # biases everywhere; llama.cpp runs it without its window
    ("arcee", {}),  # llama's, Q/K permuted, its MLP ReLU^2 without a gate
    ("nemotron", {}),  # its LayerNorms' 1 + weight stored, as llama.cpp's converter adds it
    ("phi2", {}), ("phi2", {"fused_qkv": True})])  # q, k and v apart, or one (Wqkv's) tensor
def test_layernormed_and_gateless_ggufs_load_as_the_models_they_hold(tmp_path, arch, fields):
    fused = fields.pop("fused_qkv", False)
    hf = hf_tiny("phi" if arch == "phi2" else arch, **fields)
    loaded = load_model(str(write_tiny_gguf(hf, tmp_path / f"{arch}.gguf", arch=arch,
                                            fused_qkv=fused)), dtype="fp32", device="cpu")
    c = loaded.config
    assert c.architecture == ("phi" if arch == "phi2" else arch)
    assert c.layer_norm == (arch != "arcee")
    assert c.gemma_norms == (arch == "nemotron")
    if arch == "stablelm":
        assert (c.rotary_dim, c.qkv_bias, c.parallel_block) == (
            4, fields.get("use_qkv_bias", False), fields.get("use_parallel_residual", False))
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(as_stored(hf), PROMPT), atol=1e-4, rtol=0)


@pytest.mark.parametrize("gguf_arch,arch", [("qwen2vl", "qwen2"), ("qwen25vl", "qwen2"),
                                           ("qwen3vl", "qwen3")])
def test_a_qwen_vl_ggufs_text_model_loads(tmp_path, gguf_arch, arch):
    """llama.cpp's qwen2vl and qwen3vl, Ollama's qwen25vl: their text model Qwen2's or Qwen3's
    tensors, the multimodal RoPE's sections (a key read past: plain RoPE on text), a vision
    tower in the same file (as Ollama keeps it) not read."""
    hf = hf_tiny(arch)

    def multimodal(writer):
        writer.add_array(f"{gguf_arch}.rope.dimension_sections", [4, 4, 4, 0])
        writer.add_tensor("v.blk.0.attn_q.weight", np.zeros((8, 8), np.float32))

    loaded = load_model(str(write_tiny_gguf(hf, tmp_path / f"{gguf_arch}.gguf", arch=gguf_arch,
                                            extra=multimodal)), dtype="fp32", device="cpu")
    assert loaded.config.architecture == arch
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(as_stored(hf), PROMPT), atol=1e-4, rtol=0)


def test_a_rope_scaling_not_read_is_refused_naming_the_file(tmp_path):
    def scaled(writer):
        writer.add_rope_scaling_type(RopeScalingType.LONGROPE)  # without its factors' tensors
        writer.add_rope_scaling_factor(4.0)

    path = write_tiny_gguf(hf_tiny("qwen2"), tmp_path / "odd.gguf", arch="qwen2", extra=scaled)
    with pytest.raises(ModelLoadError) as err:
        load_model(str(path), dtype="fp32")
    assert str(path) in str(err.value) and "RoPE scaling 'longrope' is not read" in str(err.value)


def test_a_smollm3_gguf_leaves_rope_out_of_every_fourth_layer(tmp_path):
    """llama.cpp's smollm3: llama's tensors (Q/K permuted), RoPE left out of every 4th layer
    by a fixed step the file does not store."""
    hf = hf_tiny("smollm3", tie_word_embeddings=True, num_hidden_layers=4)
    loaded = load_model(str(write_tiny_gguf(hf, tmp_path / "smollm3.gguf", arch="smollm3")),
                        dtype="fp32", device="cpu")
    assert loaded.config.nope_layers == (3,)
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(as_stored(hf), PROMPT), atol=1e-4, rtol=0)


def test_a_granite_ggufs_scalars_are_read_back(tmp_path):
    hf = hf_tiny("granite", tie_word_embeddings=True, embedding_multiplier=12.0,
                 residual_multiplier=0.22, attention_multiplier=0.1, logits_scaling=8.0)
    loaded = load_model(str(write_tiny_gguf(hf, tmp_path / "granite.gguf", arch="granite")),
                        dtype="fp32", device="cpu")
    assert (loaded.config.embedding_multiplier, loaded.config.logits_scaling) == (12.0, 8.0)
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(as_stored(hf), PROMPT), atol=1e-4, rtol=0)


def test_phi_4_minis_partial_longrope_is_read_back_from_its_gguf(tmp_path):
    """Phi-4-mini as llama.cpp writes it: RoPE on 12 of each head's 16 dimensions (its
    dimension count), longrope's factors as tensors, the original context and the attention
    factor as metadata; the logits transformers' model gives, within the original context."""
    hf = hf_tiny("phi3", original_max_position_embeddings=64, rope_parameters={
        "rope_theta": 5000.0, "rope_type": "longrope", "partial_rotary_factor": 0.75,
        "short_factor": [1.0, 1.3, 2.1, 3.4, 5.5, 8.9], "long_factor": [9.0] * 6,
        "original_max_position_embeddings": 64})
    loaded = load_model(str(write_tiny_gguf(hf, tmp_path / "phi4.gguf", arch="phi3")),
                        dtype="fp32", device="cpu")
    assert (loaded.config.rotary_dim, loaded.config.max_position) == (12, 64)
    assert loaded.config.rope_scaling.short_factors == pytest.approx((1.0, 1.3, 2.1, 3.4, 5.5, 8.9))
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(as_stored(hf), PROMPT), atol=1e-4, rtol=0)


def test_a_large_gguf_is_written_in_shards_and_loads_the_same(tmp_path, monkeypatch):
    """Converting holds one shard's tensors at a time; the folder's index names them all."""
    from engine.loading import gguf_convert
    hf = hf_tiny("llama")
    path = write_tiny_gguf(hf, tmp_path / "big.gguf")
    monkeypatch.setattr(gguf_convert, "SHARD_BYTES", 40_000)  # a layer or so each
    loaded = load_model(str(path), dtype="fp32", device="cpu")
    index = json.loads((tmp_path / loaded.source / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 3 and shards[0].startswith("model-00001-of-")
    assert not (tmp_path / loaded.source / "model.safetensors").exists()
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(as_stored(hf), PROMPT), atol=1e-4, rtol=0)


def test_a_gguf_is_converted_once_and_again_when_it_changes(tmp_path):
    path = write_tiny_gguf(hf_tiny("llama"), tmp_path / "tiny.gguf")
    heard, fractions = [], []

    def progress(message, fraction):
        heard.append(message)
        fractions.append(fraction)

    first = load_model(str(path), dtype="fp32", device="cpu", progress=progress).source
    converting = sum(m.startswith("converting") for m in heard)
    # one bar: converting its first half, loading the rest
    assert fractions == sorted(fractions) and fractions[0] == 0 and fractions[-1] == 1
    assert max(f for m, f in zip(heard, fractions) if "config.json" in m) == 0.5
    second = load_model(str(path), dtype="fp32", device="cpu", progress=progress).source
    assert first == second and converting == 1
    assert sum(m.startswith("converting") for m in heard) == 1  # the second load converted nothing
    os.utime(path, ns=(0, 0))
    load_model(str(path), dtype="fp32", device="cpu", progress=progress)
    assert sum(m.startswith("converting") for m in heard) == 2


@pytest.mark.parametrize("pre", ["qwen2", "llama-bpe", "tekken", "gpt2"])
def test_a_byte_level_vocabulary_is_split_as_the_file_names(pre, tmp_path):
    """Encodings as transformers' GGUF reader makes them (the models' own tokenizer.json)."""
    transformers = pytest.importorskip("transformers")
    path = write_tiny_gguf(hf_tiny("qwen2"), tmp_path / "tiny.gguf", arch="qwen2", pre=pre)
    ours = load_model(str(path), dtype="fp32", device="cpu").tokenizer
    ref = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=path.name)
    for text in TEXTS:
        assert ours.encode(text) == ref.encode(text, add_special_tokens=False), (pre, text)
        assert ours.decode(ours.encode(text)) == text
    decomposed = "e\u0301"  # é as e and a combining accent: Qwen's tokenizer composes it
    assert ours.encode(decomposed) == (ours.encode("\u00e9") if pre == "qwen2" else
                                       ref.encode(decomposed, add_special_tokens=False))
    words = [word for word, _ in ours.inner.pre_tokenizer.pre_tokenize_str("12345 It's")]
    assert words == {"qwen2": ["1", "2", "3", "4", "5", "ĠIt", "'s"],
                     "llama-bpe": ["123", "45", "ĠIt", "'s"],
                     "tekken": ["1", "2", "3", "4", "5", "ĠIt", "'s"],
                     "gpt2": ["12345", "ĠIt", "'s"]}[pre]


@pytest.mark.parametrize("pre,family", [("olmo", "gpt2"), ("mpt", "gpt2"), ("dbrx", "llama-bpe"),
                                        ("refact", "smollm"), ("starcoder", "smollm"),
                                        ("exaone", "smollm")])
def test_splits_llama_cpp_shares_a_regex_among_split_alike(pre, family, tmp_path):
    """llama.cpp gives several names one regex (llama-vocab.cpp): each splits and encodes as
    the name its family is tested under."""
    def tokenizer(name):
        path = write_tiny_gguf(hf_tiny("qwen2"), tmp_path / f"{name}.gguf", arch="qwen2", pre=name)
        return load_model(str(path), dtype="fp32", device="cpu").tokenizer

    ours, theirs = tokenizer(pre), tokenizer(family)
    assert [ours.encode(text) for text in TEXTS] == [theirs.encode(text) for text in TEXTS]
    assert ours.inner.pre_tokenizer.pre_tokenize_str("12345 It's") == \
        theirs.inner.pre_tokenizer.pre_tokenize_str("12345 It's")


def test_added_tokens_outside_the_byte_alphabet_are_matched_whole(tmp_path):
    """DeepSeek-R1's distills write their BOS as <｜begin▁of▁sentence｜>, no byte-level spelling:
    matched whole, as its own id, the vocabulary no larger."""
    bos = "<｜begin▁of▁sentence｜>"
    tokens = [*vocab_tokens(), bos]

    def deepseek(writer):
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre("deepseek-r1-qwen")
        writer.add_token_list(tokens)
        writer.add_token_types([3 if t in (*SPECIALS, bos) else 1 for t in tokens])
        writer.add_token_merges([" ".join(m) for m in MERGES])
        writer.add_bos_token_id(len(tokens) - 1)
        writer.add_eos_token_id(2)

    path = write_tiny_gguf(hf_tiny("qwen2", vocab_size=len(tokens)), tmp_path / "r1.gguf",
                           arch="qwen2", tokenizer=deepseek)
    tok = load_model(str(path), dtype="fp32", device="cpu").tokenizer
    assert tok.vocab_size == len(tokens) and tok.bos_token == bos
    assert tok.encode(f"{bos}the")[0] == len(tokens) - 1


# "yz" scores above "xy": "xyz" is x, yz (merges best-scored first)
PIECES = ["▁", *"abcdefghijklmnopqrstuvwxyz", "▁t", "he", "▁the", "▁c", "at", "▁cat", "in", "▁in",
          "yz", "xy"]
SPM_TOKENS = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), *PIECES, "<think>"]


def sentencepiece(writer):
    """Llama 2's kind of vocabulary: <unk> <s> </s>, byte tokens, pieces with scores (no
    merges), and a token added as user-defined."""
    writer.add_tokenizer_model("llama")
    writer.add_token_list(SPM_TOKENS)
    writer.add_token_scores([0.0] * 259 + [-float(i) for i in range(len(PIECES))] + [0.0])
    writer.add_token_types([2, 3, 3, *[6] * 256, *[1] * len(PIECES), 4])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)


GEMMA_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>",
                *(f"<0x{b:02X}>" for b in range(256)), *PIECES]
GEMMA_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m['role'] }}\n"
                  "{{ m['content'] }}<end_of_turn>\n{% endfor %}{{ '<start_of_turn>model\\n' }}")


def gemma_vocabulary(writer, extra: list[str] = ()):
    """Gemma's kind: SentencePiece, <eos> before <bos>, turns marked by control tokens, no
    space put before the text; `extra` control tokens listed past the model's."""
    writer.add_tokenizer_model("llama")
    writer.add_token_list(GEMMA_TOKENS + list(extra))
    writer.add_token_scores([0.0] * 262 + [-float(i) for i in range(len(PIECES))]
                            + [0.0] * len(extra))
    writer.add_token_types([3, 3, 3, 2, 3, 3, *[6] * 256, *[1] * len(PIECES), *[3] * len(extra)])
    writer.add_bos_token_id(2)
    writer.add_eos_token_id(1)
    writer.add_add_space_prefix(False)


# Gemma 2 with caps its scores and logits reach; Gemma 3 in its pattern of five sliding layers
# to a full one, which llama.cpp keeps in its code; both with windows of 5 of the 10 tokens
@pytest.mark.parametrize("arch,fields,sliding", [
    ("gemma", {}, ()),
    ("gemma2", {"attn_logit_softcapping": 0.05, "final_logit_softcapping": 0.02}, (0,)),
    ("gemma3", {"num_hidden_layers": 7}, (0, 1, 2, 3, 4, 6)),
])
def test_a_gemma_gguf_loads_as_the_model_it_holds(tmp_path, arch, fields, sliding):
    hf = hf_tiny(arch, tie_word_embeddings=True, vocab_size=len(GEMMA_TOKENS),
                 **({} if arch == "gemma" else {"query_pre_attn_scalar": 16}), **fields)
    path = write_tiny_gguf(hf, tmp_path / f"{arch}.gguf", arch=arch, tokenizer=gemma_vocabulary,
                           template=GEMMA_TEMPLATE)
    loaded = load_model(str(path), dtype="fp32", device="cpu")
    assert loaded.config.sliding_layers == sliding
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(as_stored(hf), PROMPT), atol=1e-4, rtol=0)
    tok = loaded.tokenizer
    assert set(tok.eos_ids) == {1, GEMMA_TOKENS.index("<end_of_turn>")}  # a turn ends a reply
    assert tok.encode("the cat") == [GEMMA_TOKENS.index(t) for t in ("t", "he", "▁cat")]
    assert tok.chat_prompt("hi") == \
        "<bos><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n"


def test_an_ollama_gemma_3_of_128k_context_has_its_rope_scaled_and_its_vocabulary_cut(tmp_path):
    """Ollama's converter left the 4B-27B's linear RoPE factor of 8 out, and listed tokens past
    the embedding's rows (<image_soft_token>): both as the model has them."""
    hf = hf_tiny("gemma3", tie_word_embeddings=True, vocab_size=len(GEMMA_TOKENS),
                 query_pre_attn_scalar=16, max_position_embeddings=131072,
                 rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0,
                                                     "rope_theta": 5e3},
                                  "sliding_attention": {"rope_type": "default",
                                                        "rope_theta": 10000.0}})

    def listing_more(writer):
        gemma_vocabulary(writer, extra=["<image_soft_token>"])

    path = write_tiny_gguf(hf, tmp_path / "gemma3.gguf", arch="gemma3", tokenizer=listing_more,
                           template=GEMMA_TEMPLATE, vocab_size=False)
    loaded = load_model(str(path), dtype="fp32", device="cpu")
    assert loaded.config.rope_scaling.factor == 8.0
    assert loaded.config.vocab_size == loaded.tokenizer.vocab_size == len(GEMMA_TOKENS)
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(as_stored(hf), PROMPT), atol=1e-4, rtol=0)


def test_an_ollama_gemma_3_reads_its_sliding_layers_and_local_base_and_not_its_vision(tmp_path):
    """Ollama's Gemma 3 files: a flag for each layer that slides, the local RoPE base named,
    and the vision tower and projector (v.*, mm.*) in the same file, not read."""
    hf = hf_tiny("gemma3", tie_word_embeddings=True, vocab_size=len(GEMMA_TOKENS),
                 query_pre_attn_scalar=16, layer_types=["full_attention", "sliding_attention"],
                 rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 5e3},
                                  "sliding_attention": {"rope_type": "default",
                                                        "rope_theta": 50.0}})

    def ollama(writer):
        writer.add_array("gemma3.attention.sliding_window_pattern", [False, True])
        writer.add_float32("gemma3.rope.local.freq_base", 50.0)
        writer.add_tensor("v.blk.0.attn_q.weight", np.ones((4, 4), np.float32))
        writer.add_tensor("mm.input_projection.weight", np.ones((4, 4), np.float32))

    path = write_tiny_gguf(hf, tmp_path / "gemma3.gguf", arch="gemma3", extra=ollama,
                           tokenizer=gemma_vocabulary, template=GEMMA_TEMPLATE)
    loaded = load_model(str(path), dtype="fp32", device="cpu")
    assert loaded.config.sliding_layers == (1,) and loaded.config.local_rope_theta == 50.0
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(as_stored(hf), PROMPT), atol=1e-4, rtol=0)


def test_a_sentencepiece_vocabulary_encodes_as_transformers_reads_it(tmp_path):
    transformers = pytest.importorskip("transformers")
    path = write_tiny_gguf(hf_tiny("llama", vocab_size=len(SPM_TOKENS)), tmp_path / "spm.gguf",
                           tokenizer=sentencepiece)
    loaded = load_model(str(path), dtype="fp32", device="cpu")
    ours = loaded.tokenizer
    ref = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=path.name)
    for text in ["the cat in the hat", "thecat  in", "Zürich ✓", "a\nb", "so<think>in", "xyz"]:
        assert ours.encode(text) == ref.encode(text, add_special_tokens=False), text
        assert ours.decode(ours.encode(text)) == text
    assert ours.encode("xyz")[-2:] == [SPM_TOKENS.index("x"), SPM_TOKENS.index("yz")]
    assert ours.encode_plain("the cat")[0] == 1  # BOS, as llama.cpp adds it to SentencePiece
    assert ours.encode("the cat<think>") == [SPM_TOKENS.index(t)
                                             for t in ("▁the", "▁cat", "<think>")]
    assert loaded.config.eos_token_ids == (2,)


def test_the_sampling_a_gguf_recommends_is_the_apis_default(tmp_path):
    """llama.cpp's general.sampling.* keys, as the sampling generation_config.json gives."""
    def recommends(writer):
        writer.add_float32("general.sampling.temp", 0.6)
        writer.add_int32("general.sampling.top_k", 20)
        writer.add_float32("general.sampling.top_p", 0.95)

    path = write_tiny_gguf(hf_tiny("llama"), tmp_path / "tiny.gguf", extra=recommends)
    defaults = load_model(str(path), dtype="fp32", device="cpu").sampling_defaults
    assert defaults == pytest.approx({"temperature": 0.6, "top_k": 20, "top_p": 0.95})
    plain = write_tiny_gguf(hf_tiny("llama"), tmp_path / "plain.gguf")
    assert load_model(str(plain), dtype="fp32", device="cpu").sampling_defaults == {}


def test_end_of_turn_tokens_end_the_answer_and_a_sliding_window_slides_in_every_layer(tmp_path):
    def extra(writer):
        writer.add_eot_token_id(0)
        writer.add_sliding_window(128)

    path = write_tiny_gguf(hf_tiny("llama"), tmp_path / "tiny.gguf", extra=extra)
    loaded = load_model(str(path), dtype="fp32", device="cpu")
    assert loaded.config.eos_token_ids == (2, 0) and set(loaded.tokenizer.eos_ids) == {0, 2}
    assert loaded.config.sliding_window == 128 and loaded.config.sliding_layers == (0, 1)
    assert loaded.config.max_position == 256  # the window does not bound the context


def llama_cpp_rope_factors(head_dim: int, theta: float, factor: float, original: int):
    """llama.cpp convert_hf_to_gguf.py's rope_freqs for Llama 3's scaling, written out."""
    factors = []
    for i in range(0, head_dim, 2):
        wavelen = 2 * math.pi * theta ** (i / head_dim)
        if wavelen < original / 4:
            factors.append(1.0)
        elif wavelen > original / 1:
            factors.append(factor)
        else:
            smooth = (original / wavelen - 1) / (4 - 1)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)


def test_llama_3s_rope_factors_are_read_as_its_scaling(tmp_path):
    """Llama 3.1-3.3's files keep their RoPE scaling as per-dimension factors: read back as the
    scaling that gives them, the logits are the scaled model's."""
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    hf = hf_tiny("llama", rope_parameters={"rope_theta": 5000.0, **scaling})
    factors = llama_cpp_rope_factors(16, 5000.0, 8.0, 64)
    assert 1.0 < factors[1] < factors[2] < 8.0  # blended dimensions among them
    path = write_tiny_gguf(hf, tmp_path / "llama31.gguf",
                           extra=lambda w: w.add_tensor("rope_freqs.weight", factors))
    loaded = load_model(str(path), dtype="fp32", device="cpu")
    assert loaded.config.rope_scaling.original_max_position == 64
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(as_stored(hf), PROMPT), atol=1e-4, rtol=0)


@pytest.mark.parametrize("problem, says", [
    ({"pre": "falcon"}, "GGUF pre-tokenizer 'falcon' is not supported"),
    ({"arch": "mamba"}, "GGUF architecture 'mamba' is not supported"),
    ({"extra": lambda w: w.add_tensor("rope_freqs.weight", np.arange(1, 9, dtype=np.float32))},
     "RoPE factors .rope_freqs. are not Llama 3's scaling"),
])
def test_a_gguf_that_cannot_be_read_is_refused_before_it_converts(problem, says, tmp_path):
    path = write_tiny_gguf(hf_tiny("llama"), tmp_path / "bad.gguf", **problem)
    for read in (check_model_folder, lambda spec: load_model(spec, dtype="fp32", device="cpu")):
        with pytest.raises(ModelLoadError, match=says) as info:
            read(str(path))
        assert info.value.path == str(path)
    assert not (tmp_path / "cache" / "models" / "gguf").exists() or not any(
        (tmp_path / "cache" / "models" / "gguf").iterdir())


def test_a_gguf_too_large_for_the_free_memory_is_refused_before_it_converts(tmp_path,
                                                                            monkeypatch):
    """Minutes of conversion and gigabytes of cache are not spent on a model that cannot load."""
    from engine import loading
    path = write_tiny_gguf(hf_tiny("llama"), tmp_path / "big.gguf")
    monkeypatch.setattr(loading, "free_memory_bytes", lambda device: 1000)
    with pytest.raises(ModelLoadError, match="its weights need .* and 0.0 MB of cpu memory") as info:
        load_model(str(path), dtype="fp32", device="cpu")
    assert info.value.path == str(path)
    assert not (tmp_path / "cache" / "models" / "gguf").exists()


def test_a_gguf_whose_chat_template_fails_is_refused_before_it_converts(tmp_path):
    """A window's Ctrl+Shift+M asks first: the file's template renders the agents' first
    conversation, or the file is refused, naming it, before anything is converted."""
    path = write_tiny_gguf(hf_tiny("llama"), tmp_path / "odd.gguf", extra=lambda w: w.add_string(
        "tokenizer.chat_template.tool_use", "{{ raise_exception('no') }}"))
    check_model_folder(str(path))  # the default template renders; the tool one is not asked
    broken = write_tiny_gguf(hf_tiny("llama"), tmp_path / "broken.gguf",
                             template="{{ raise_exception('system messages are not taken') }}")
    with pytest.raises(ModelLoadError, match="chat template") as info:
        check_model_folder(str(broken))
    assert info.value.path == str(broken)
    assert not (tmp_path / "cache" / "models" / "gguf").exists()


def test_a_damaged_gguf_is_named_and_a_converted_one_is_checked_as_a_folder(tmp_path):
    path = write_tiny_gguf(hf_tiny("llama"), tmp_path / "tiny.gguf")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:3000])
    with pytest.raises(ModelLoadError) as info:
        check_model_folder(str(cut))
    assert info.value.path == str(cut) and "not a readable GGUF" in str(info.value)
    check_model_folder(str(path))  # reads the metadata only: nothing converted yet
    assert not (tmp_path / "cache" / "models" / "gguf").exists()
    folder = load_model(str(path), dtype="fp32", device="cpu").source
    config = json.loads((tmp_path / folder / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    check_model_folder(str(path))  # the converted folder, checked as any


def test_a_gguf_drafts_for_a_target_that_shares_its_tokenizer(tmp_path):
    from engine.spec.draft_model import DraftModelDrafter, check_draft_folder
    draft = write_tiny_gguf(hf_tiny("llama", num_hidden_layers=1), tmp_path / "draft.gguf")
    target = load_model(str(write_tiny_gguf(hf_tiny("llama"), tmp_path / "target.gguf")),
                        dtype="fp32", device="cpu")
    check_draft_folder(str(draft), target)
    drafter = DraftModelDrafter.from_path(str(draft), target)
    assert drafter.name == "draft" and drafter.runner.model.config.num_layers == 1


def ollama_store(tmp_path, monkeypatch, gguf, name="tiny", tag="0.5b", namespace="library",
                 params: str | None = None):
    """Ollama's store as `ollama pull` leaves it: a manifest naming the GGUF by digest, and
    its parameters' blob (JSON text) where there are `params`."""
    store = tmp_path / "ollama"
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    digest, params_digest = "sha256:" + "ab" * 32, "sha256:" + "cd" * 32
    (store / "blobs").mkdir(parents=True, exist_ok=True)
    (store / "blobs" / digest.replace(":", "-")).write_bytes(gguf.read_bytes())
    layers = [{"mediaType": "application/vnd.ollama.image.model", "digest": digest, "size": 1},
              {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:00"}]
    if params is not None:
        (store / "blobs" / params_digest.replace(":", "-")).write_text(params)
        layers.append({"mediaType": "application/vnd.ollama.image.params",
                       "digest": params_digest})
    manifest = store / "manifests" / "registry.ollama.ai" / namespace / name / tag
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))
    return store, manifest


def test_an_ollama_models_parameters_are_the_apis_sampling_defaults(tmp_path, monkeypatch):
    """As Ollama's gemma3 has them: its temperature, top_k and top_p (and repeat_penalty),
    beside parameters that are not sampling (stop)."""
    gguf = write_tiny_gguf(hf_tiny("llama"), tmp_path / "x.gguf")
    store, _ = ollama_store(tmp_path, monkeypatch, gguf, params=json.dumps(
        {"stop": ["<end_of_turn>"], "temperature": 1, "top_k": 64, "top_p": 0.95,
         "repeat_penalty": 1.1}))
    assert load_model("ollama:tiny:0.5b", dtype="fp32", device="cpu").sampling_defaults == {
        "temperature": 1.0, "top_k": 64, "top_p": 0.95, "repetition_penalty": 1.1}
    params = store / "blobs" / ("sha256-" + "cd" * 32)
    params.write_text('{"top_p": 7}')
    with pytest.raises(ModelLoadError, match="top_p 7 is outside the API's range") as info:
        load_model("ollama:tiny:0.5b", dtype="fp32", device="cpu")
    assert info.value.path == str(params)


def test_a_model_ollama_pulled_loads_by_its_name(tmp_path, monkeypatch):
    hf = hf_tiny("qwen2")
    store, _ = ollama_store(tmp_path, monkeypatch,
                            write_tiny_gguf(hf, tmp_path / "x.gguf", arch="qwen2"))
    check_model_folder("ollama:tiny:0.5b")
    loaded = load_model("ollama:tiny:0.5b", dtype="fp32", device="cpu")
    assert loaded.name == "tiny:0.5b"
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(as_stored(hf), PROMPT), atol=1e-4, rtol=0)
    # its file, named by digest alone, is known for a GGUF by its first bytes
    assert load_model(str(next((store / "blobs").iterdir())), dtype="fp32",
                      device="cpu").config.architecture == "qwen2"


def test_an_ollama_name_that_does_not_load_says_why(tmp_path, monkeypatch):
    store, manifest = ollama_store(tmp_path, monkeypatch,
                                   write_tiny_gguf(hf_tiny("llama"), tmp_path / "x.gguf"))
    for spec, path, says in (
            ("ollama:other", manifest.parent.parent / "other" / "latest",
             r"Ollama has not pulled other \(in .*: tiny:0.5b\)"),
            ("ollama:", "ollama:", "an Ollama model is ollama:MODEL"),
            ("ollama:a/b/c/d", "ollama:a/b/c/d", "an Ollama model is ollama:MODEL")):
        with pytest.raises(ModelLoadError, match=says) as info:
            load_model(spec, dtype="fp32", device="cpu")
        assert info.value.path == str(path)
    manifest.write_text("{}")
    with pytest.raises(ModelLoadError, match="not an Ollama manifest with a model layer"):
        check_model_folder("ollama:tiny:0.5b")
    for blob in (store / "blobs").iterdir():
        blob.unlink()
    manifest.write_text(json.dumps({"layers": [{"mediaType": "application/vnd.ollama.image.model",
                                                "digest": "sha256:" + "ab" * 32}]}))
    with pytest.raises(ModelLoadError, match="missing from Ollama's store"):
        load_model("ollama:tiny:0.5b", dtype="fp32", device="cpu")
