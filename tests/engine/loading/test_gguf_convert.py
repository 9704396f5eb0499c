"""GGUF -> Hugging Face folder, on a tiny llama GGUF written here the way llama.cpp writes one."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize

from engine.errors import ModelLoadError
from engine.loading import load_model
from engine.loading.gguf_convert import convert_gguf, unpermute_rope
from engine.tokenizer import Tokenizer

from .conftest import (MERGES, engine_logits, hf_tiny, llama_cpp_permute, reference_logits,
                       vocab_tokens, write_tiny_gguf)

PROMPT = [1, 40, 77, 3, 200, 264, 10, 90, 90, 15]
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
    path = write_tiny_gguf(hf_tiny("llama"), tmp_path / "mamba.gguf", arch="mamba")
    with pytest.raises(ModelLoadError, match="mamba"):
        convert_gguf(path, tmp_path / "out")
