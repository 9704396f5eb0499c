"""GGUF -> Hugging Face folder: dequantized weights, config.json and a rebuilt tokenizer.json.

Only the llama architecture with a GPT-2 style (byte-level BPE) vocabulary is handled: that is
what the embedded SmolLM2 GGUF holds."""
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
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from engine.errors import ModelLoadError

Progress = Callable[[str, float], None]

# GGUF tensor name -> Hugging Face name ("{i}" is the layer).
_LAYER_NAMES = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight",
                 "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}
_CONTROL_TOKEN_TYPE = 3  # llama.cpp's LLAMA_TOKEN_TYPE_CONTROL


def hf_name(gguf_name: str) -> str | None:
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.(weight|bias)", gguf_name)
    if m and m.group(2) in _LAYER_NAMES:
        return f"model.layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}.{m.group(3)}"
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
    """config.json for a llama GGUF (Hugging Face LlamaConfig field names)."""
    arch = g.get("general.architecture")
    if arch != "llama":
        raise ModelLoadError(g.path, f"GGUF architecture {arch!r} is not supported (only llama)")
    heads = int(g.get("llama.attention.head_count"))
    hidden = int(g.get("llama.embedding_length"))
    names = {t.name for t in g.reader.tensors}
    vocab = len(g.get("tokenizer.ggml.tokens"))
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": int(g.get("llama.vocab_size", vocab)), "hidden_size": hidden,
        "intermediate_size": int(g.get("llama.feed_forward_length")),
        "num_hidden_layers": int(g.get("llama.block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(g.get("llama.attention.head_count_kv", heads)),
        "head_dim": int(g.get("llama.rope.dimension_count", hidden // heads)),
        "rope_theta": float(g.get("llama.rope.freq_base", 10000.0)),
        "rms_norm_eps": float(g.get("llama.attention.layer_norm_rms_epsilon")),
        "max_position_embeddings": int(g.get("llama.context_length")),
        "tie_word_embeddings": "output.weight" not in names,
        "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
        "bos_token_id": int(g.get("tokenizer.ggml.bos_token_id")),
        "eos_token_id": int(g.get("tokenizer.ggml.eos_token_id")),
        "torch_dtype": "float32",
    }


def gguf_tokenizer(g: _Gguf) -> Tokenizer:
    """A byte-level BPE `tokenizers.Tokenizer` from the GGUF vocabulary and merges."""
    if g.get("tokenizer.ggml.model") != "gpt2":
        raise ModelLoadError(g.path, f"GGUF tokenizer {g.get('tokenizer.ggml.model')!r} is not "
                                     "supported (only gpt2-style byte-level BPE)")
    tokens = list(g.get("tokenizer.ggml.tokens"))
    types = list(g.get("tokenizer.ggml.token_type", [1] * len(tokens)))
    merges = [tuple(m.split(" ", 1)) for m in g.get("tokenizer.ggml.merges")]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges,
                               fuse_unk=False, byte_fallback=False))
    # SmolLM's pre-tokenizer (GGUF "smollm"): every digit is its own word, then GPT-2 byte-level.
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, kind in zip(tokens, types) if kind == _CONTROL_TOKEN_TYPE])
    return tok


def _weights(g: _Gguf, config: dict, progress: Progress) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    tensors = g.reader.tensors
    for n, t in enumerate(tensors):
        name = hf_name(t.name)
        if name is None:
            raise ModelLoadError(g.path, f"unexpected GGUF tensor {t.name!r}")
        try:
            w = np.asarray(dequantize(t.data, GGMLQuantizationType(t.tensor_type)),
                           dtype=np.float32)
        except (NotImplementedError, ValueError) as exc:
            raise ModelLoadError(g.path, f"cannot dequantize {t.name} ({exc})") from None
        # GGUF lists dims fastest-first; torch wants [out_features, in_features].
        w = w.reshape([int(d) for d in reversed(t.shape)])
        if name.endswith("q_proj.weight"):
            w = unpermute_rope(w, config["num_attention_heads"])
        elif name.endswith("k_proj.weight"):
            w = unpermute_rope(w, config["num_key_value_heads"])
        out[name] = torch.from_numpy(np.array(w, order="C"))  # a copy: GGUF data is a read-only mmap
        if n % 16 == 0 or n == len(tensors) - 1:
            progress(f"dequantizing {t.name}", (n + 1) / len(tensors))
    return out


def convert_gguf(gguf_path: str | Path, out_dir: str | Path,
                 progress: Progress = lambda message, fraction: None) -> None:
    """Write config.json, model.safetensors (fp32), tokenizer.json, tokenizer_config.json and
    generation_config.json for the GGUF at gguf_path into out_dir (created)."""
    g = _Gguf(Path(gguf_path))
    out = Path(out_dir)
    config = gguf_config(g)
    tok = gguf_tokenizer(g)
    weights = _weights(g, config, progress)
    out.mkdir(parents=True, exist_ok=True)
    # fp32 keeps the dequantized values exactly (Q4_1 scales are fp16, not bf16-representable).
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    tok.save(str(out / "tokenizer.json"))
    # safetensors writes 0600: as readable as the files written beside it, as the umask makes them
    os.chmod(out / "model.safetensors", (out / "tokenizer.json").stat().st_mode & 0o777)
    tokens = g.get("tokenizer.ggml.tokens")
    bos, eos = tokens[config["bos_token_id"]], tokens[config["eos_token_id"]]
    tokenizer_config = {
        "tokenizer_class": "GPT2Tokenizer", "add_bos_token": bool(
            g.get("tokenizer.ggml.add_bos_token", False)),
        "bos_token": bos, "eos_token": eos,
        "pad_token": tokens[int(g.get("tokenizer.ggml.padding_token_id", config["eos_token_id"]))],
        "chat_template": g.get("tokenizer.chat_template", ""),
        "model_max_length": config["max_position_embeddings"],
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"]}, indent=2))
    progress("converted", 1.0)
