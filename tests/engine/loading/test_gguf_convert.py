"""GGUF -> Hugging Face folder, on a tiny llama GGUF written here the way llama.cpp writes one."""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import dequantize, quantize

from engine.errors import ModelLoadError
from engine.loading import load_model
from engine.loading.gguf_convert import convert_gguf, unpermute_rope
from engine.tokenizer import Tokenizer

from .conftest import (MERGES, SPECIALS, engine_logits, hf_tiny, llama_cpp_permute,
                       reference_logits, vocab_tokens)

PROMPT = [1, 40, 77, 3, 200, 264, 10, 90, 90, 15]
_GGUF_LAYER = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
               "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
               "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
               "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def write_tiny_gguf(hf_model, path: Path, arch: str = "llama") -> Path:
    """What llama.cpp's converter would write for hf_model: Q/K rows permuted, the token
    embedding quantized to Q8_0 (so the reference must use its dequantized values)."""
    c = hf_model.config
    w = GGUFWriter(str(path), arch)
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_freq_base(c.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
    w.add_vocab_size(c.vocab_size)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    tokens = vocab_tokens()
    w.add_token_list(tokens)
    w.add_token_types([3 if t in SPECIALS else 1 for t in tokens])
    w.add_token_merges([" ".join(m) for m in MERGES])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_chat_template("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                        "<|im_end|>\n{% endfor %}{{ '<|im_start|>assistant\\n' }}")
    for name, t in hf_model.state_dict().items():
        a = t.float().numpy()
        if name == "model.embed_tokens.weight":
            q = quantize(a, GGMLQuantizationType.Q8_0)
            w.add_tensor("token_embd.weight", q, raw_dtype=GGMLQuantizationType.Q8_0)
            continue
        if name == "lm_head.weight":
            continue  # tied
        if name == "model.norm.weight":
            w.add_tensor("output_norm.weight", a)
            continue
        layer, rest = name.removeprefix("model.layers.").split(".", 1)
        module, kind = rest.rsplit(".", 1)
        if module == "self_attn.q_proj":
            a = llama_cpp_permute(a, c.num_attention_heads)
        elif module == "self_attn.k_proj":
            a = llama_cpp_permute(a, c.num_key_value_heads)
        w.add_tensor(f"blk.{layer}.{_GGUF_LAYER[module]}.{kind}", np.ascontiguousarray(a))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    hf = hf_tiny("llama", tie_word_embeddings=True)
    path = write_tiny_gguf(hf, tmp_path_factory.mktemp("gguf") / "tiny.gguf")
    return path, hf


def test_unpermute_inverts_llama_cpp_permute():
    rng = np.random.default_rng(0)
    for n_heads, head_dim, cols in [(9, 64, 576), (3, 64, 576), (2, 8, 5)]:
        w = rng.standard_normal((n_heads * head_dim, cols)).astype(np.float32)
        permuted = llama_cpp_permute(w, n_heads)
        assert not np.array_equal(permuted, w)
        np.testing.assert_array_equal(unpermute_rope(permuted, n_heads), w)


def test_converted_gguf_logits_match_transformers(tiny_gguf, tmp_path):
    path, hf = tiny_gguf
    convert_gguf(path, tmp_path / "converted")
    loaded = load_model(str(tmp_path / "converted"), dtype="fp32", device="cpu")
    assert loaded.config.tie_word_embeddings and loaded.config.rope_theta == 5000.0
    hf = copy.deepcopy(hf)
    embed = hf.model.embed_tokens.weight
    q8 = quantize(embed.detach().numpy(), GGMLQuantizationType.Q8_0)
    with torch.no_grad():  # the reference sees what the GGUF holds
        embed.copy_(torch.from_numpy(dequantize(q8, GGMLQuantizationType.Q8_0)))
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(hf, PROMPT), atol=1e-4, rtol=0)
    tok = loaded.tokenizer
    assert tok.eos_ids == (2,)
    assert tok.chat_prompt("hi") == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_gguf_tokenizer_matches_transformers_converter(tiny_gguf, tmp_path):
    transformers = pytest.importorskip("transformers")
    path, _ = tiny_gguf
    convert_gguf(path, tmp_path / "c")
    ours = Tokenizer.from_file(tmp_path / "c" / "tokenizer.json")
    ref = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    # No digits here: transformers' converter leaves out SmolLM's Digits pre-tokenizer.
    for text in ["the theme in a tin", "Ünïcode ✓ 日本語 🙂\n\ttabs", "def f(x):\n    return x",
                 "<|im_start|>user\nthe<|im_end|>\n"]:
        ids = ours.encode(text)
        assert ids == ref.encode(text, add_special_tokens=False), text
        assert ours.decode(ids) == text


def test_gguf_tokenizer_digits_and_control_tokens(tiny_gguf, tmp_path):
    path, _ = tiny_gguf
    convert_gguf(path, tmp_path / "c")
    tok = Tokenizer.from_file(tmp_path / "c" / "tokenizer.json")
    one, two = tok.inner.token_to_id("1"), tok.inner.token_to_id("2")
    # The vocabulary has a "12" merge, but every digit is its own word before BPE.
    assert tok.encode("12") == [one, two]
    assert tok.encode("<|im_start|><|im_end|>") == [1, 2]
    assert tok.encode(" the") == [len(vocab_tokens()) - len(MERGES) + 2]  # the "Ġthe" merge


def test_corrupt_gguf(tmp_path, tiny_gguf):
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"GGUF" + bytes(range(256)) * 4)
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(tiny_gguf[0].read_bytes()[:5000])
    for path in (garbage, truncated, tmp_path / "missing.gguf"):
        with pytest.raises(ModelLoadError) as info:
            convert_gguf(path, tmp_path / "out")
        assert info.value.path == str(path)


def test_gguf_other_architecture_is_refused(tmp_path):
    path = write_tiny_gguf(hf_tiny("llama"), tmp_path / "gemma.gguf", arch="gemma")
    with pytest.raises(ModelLoadError, match="gemma"):
        convert_gguf(path, tmp_path / "out")
