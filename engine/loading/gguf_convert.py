"""GGUF -> Hugging Face folder: dequantized weights under Hugging Face names, config.json (read
by gguf_config.py) and a rebuilt tokenizer.json.

llama.cpp's llama (Llama, Mistral, SmolLM; Mixtral with its experts), smollm3, granite, qwen2,
qwen3, olmo2, phi3 (Phi-3, Phi-3.5, Phi-4-mini), gemma, gemma2, gemma3, exaone4, ernie4_5, glm4
(the 0414 models), command-r (Cohere's: Aya, Command R), cohere2 (Command R7B), stablelm,
starcoder2, arcee, nemotron, phi2 (its q, k and v one tensor or three), lfm2 (its short
convolutions), qwen35 (its gated DeltaNet: gguf_delta.py), the text models of qwen2vl, qwen25vl
and qwen3vl, and the mixtures qwen2moe, qwen3moe, olmoe, granitemoe and qwen35moe are read,
with the tokenizers gguf_tokenizer.py rebuilds; other architectures are refused naming theirs."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize
from safetensors.torch import save_file

from engine.errors import ModelLoadError
from engine.loading.gguf_config import (ARCHITECTURES, GEMMAS, ROPE_TENSORS, SANDWICHED, Gguf,
                                         gguf_config)
from engine.loading.gguf_delta import DELTA_ARCHITECTURES, DELTA_NAMES, hugging_face_layout
from engine.loading.gguf_tokenizer import gguf_tokenizer

Progress = Callable[[str, float], None]

FUSED = ("phi3",)  # architectures whose q/k/v and gate/up are one tensor each, as Phi-3's
# llama.cpp stored their norms' 1 + weight (Qwen3.5's but its DeltaNet's: gguf_delta.py)
PLUS_ONE_NORMS = GEMMAS + ("nemotron",) + DELTA_ARCHITECTURES
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
    # LFM2's short convolutions
    "shortconv.conv": "conv.conv", "shortconv.in_proj": "conv.in_proj",
    "shortconv.out_proj": "conv.out_proj",
}
EXPERT = "{expert}"
_FUSED_NAMES = {"attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"}
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
    if gguf_name == "token_embd_norm.weight" and arch == "lfm2":  # LFM2's last norm
        return "model.norm.weight"
    delta = re.fullmatch(r"blk\.(\d+)\.(.+)", gguf_name) if arch in DELTA_ARCHITECTURES else None
    if delta and delta.group(2) in DELTA_NAMES:
        return f"model.layers.{delta.group(1)}.{DELTA_NAMES[delta.group(2)]}"
    m = re.fullmatch(r"blk\.(\d+)\.(\w+(?:\.\w+)?)\.(weight|bias)", gguf_name)
    names = {**_LAYER_NAMES, **(_FUSED_NAMES if arch in FUSED else {}),
             **({"ffn_norm": "pre_feedforward_layernorm"} if arch in SANDWICHED else {}),
             **(_GLM4_NAMES if arch == "glm4" else {}),
             **({"attn_qkv": f"self_attn.{QKV}_proj"} if arch == "phi2" else {})}
    if m and m.group(2) in names:
        return f"model.layers.{m.group(1)}.{names[m.group(2)]}.{m.group(3)}"
    return None


def _past_the_layers(gguf_name: str, layers: int) -> bool:
    """Whether the tensor is of a layer past the model's (Qwen3.5's multi-token prediction
    block, which llama.cpp writes as one more: not read)."""
    layer = re.match(r"blk\.(\d+)\.", gguf_name)
    return layer is not None and int(layer.group(1)) >= layers


def unpermute_rope(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation. GGUF stores each head's rows interleaved
    (pairs 0,1 / 2,3 rotate together); rotate_half RoPE pairs row j with row j + head_dim/2."""
    rows = w.shape[0]
    # [n_heads, head_dim/2, 2, in] -> [n_heads, 2, head_dim/2, in]
    return w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _tensors(g: Gguf, t, config: dict, dequantized: torch.dtype,
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
    if arch in PLUS_ONE_NORMS and name.endswith("norm.weight") and ".linear_attn." not in name:
        w = w - 1  # back to the checkpoint's weight, which the model scales by 1 + it
    if arch in DELTA_ARCHITECTURES:
        w = hugging_face_layout(name, w, config)
    if name.endswith("shared_expert_gate.weight"):
        w = w.reshape(1, -1)  # llama.cpp keeps the gate's one row as a vector
    if name.endswith("conv.conv.weight"):
        w = w.reshape(w.shape[0], 1, -1)  # a depthwise Conv1d's, which llama.cpp squeezed
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


def _write_weights(g: Gguf, config: dict, out: Path, progress: Progress,
                   dequantized: torch.dtype) -> list[Path]:
    """The tensors written as safetensors, a shard of at most SHARD_BYTES at a time (so that
    converting holds no more than that), with the index that names them where there are
    several; the files written."""
    tensors = [t for t in g.reader.tensors  # the RoPE ones are in the config
               if t.name not in ROPE_TENSORS and not t.name.startswith(_VISION_PREFIXES)
               and not _past_the_layers(t.name, config["num_hidden_layers"])]
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
    g = Gguf(Path(gguf_path))
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
    _write_metadata(Gguf(Path(gguf_path)), out_dir)


def gguf_shapes(gguf_path: str | Path) -> dict[str, tuple[int, ...]]:
    """Each tensor's shape, as torch has it, by its GGUF name (read from the header alone);
    a vision tower's left out, as converting leaves it."""
    return {t.name: tuple(int(d) for d in reversed(t.shape))
            for t in Gguf(Path(gguf_path)).reader.tensors
            if not t.name.startswith(_VISION_PREFIXES)}


def _vocabulary_within(g: Gguf, size: int):
    """g.get, with the vocabulary's lists cut to the model's `size` tokens: Ollama's Gemma 3
    lists tokens past its embedding's rows (<image_soft_token>), which no text can use."""
    per_token = ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores")

    def get(key: str, default=None):
        value = g.get(key, default)
        return value[:size] if key in per_token else value
    return get


def _write_metadata(g: Gguf, out: Path) -> dict:
    """config.json, tokenizer.json, tokenizer_config.json and generation_config.json; the
    config."""
    config = gguf_config(g)
    tok, add_bos = gguf_tokenizer(g.path, _vocabulary_within(g, config["vocab_size"]))
    tok.save(str(out / "tokenizer.json"))
    tokens = g.get("tokenizer.ggml.tokens")
    bos_id, eos_id = config["bos_token_id"], config["eos_token_id"][0]
    tokenizer_config = {
        "tokenizer_class": "GPT2Tokenizer", "add_bos_token": add_bos,
        # (a file may name no BOS token: Qwen's)
        "bos_token": None if bos_id is None else tokens[bos_id], "eos_token": tokens[eos_id],
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


def _templates(g: Gguf) -> str | list[dict]:
    """The chat template, with the named ones llama.cpp keeps beside it
    (tokenizer.chat_template.NAME: tool_use) as tokenizer_config.json lists them."""
    prefix = "tokenizer.chat_template."
    named = [{"name": key[len(prefix):], "template": g.get(key)}
             for key in g.reader.fields if key.startswith(prefix)]
    default = g.get("tokenizer.chat_template", "")
    return [{"name": "default", "template": default}, *named] if named else default
