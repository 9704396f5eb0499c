"""llama.cpp's qwen35 and qwen35moe GGUFs (Qwen3.5): their gated DeltaNet layers' metadata as
config.json's fields, and their tensors back in Hugging Face's layout, undoing what llama.cpp's
converter changed (as transformers' own GGUF reader does): the DeltaNet's names, its A_log
stored as -exp(A_log), its convolution squeezed, and its value heads tiled (value head j of key
head j % key_heads, as ggml repeats heads) where Hugging Face groups them (j // heads_per_key);
the zero-centred norms' 1 + weight is undone with Gemma's (gguf_convert.PLUS_ONE_NORMS), but for
the DeltaNet's own. llama.cpp also counts the multi-token-prediction block as a last layer,
which is not read."""
from __future__ import annotations

import numpy as np

DELTA_ARCHITECTURES = ("qwen35", "qwen35moe")
# a layer's GGUF tensor (its name after blk.N.) -> Hugging Face's
DELTA_NAMES = {
    "attn_qkv.weight": "linear_attn.in_proj_qkv.weight",
    "attn_gate.weight": "linear_attn.in_proj_z.weight",
    "ssm_alpha.weight": "linear_attn.in_proj_a.weight",
    "ssm_beta.weight": "linear_attn.in_proj_b.weight",
    "ssm_conv1d.weight": "linear_attn.conv1d.weight",
    "ssm_norm.weight": "linear_attn.norm.weight",
    "ssm_out.weight": "linear_attn.out_proj.weight",
    "ssm_a": "linear_attn.A_log", "ssm_dt.bias": "linear_attn.dt_bias",
}
# tensors with a row for each value head, and with a block of rows for each (from an offset)
_BY_HEAD = ("A_log", "dt_bias", "in_proj_a.weight", "in_proj_b.weight")
_BY_VALUE = ("in_proj_z.weight", "in_proj_qkv.weight", "conv1d.weight")


def delta_fields(g, arch: str) -> dict:
    """config.json's gated DeltaNet fields: the value heads are llama.cpp's time_step_rank, the
    key heads its group_count, their widths state_size and inner_size / value heads."""
    def key(name: str) -> int:
        return int(g.get(f"{arch}.{name}"))
    value_heads = key("ssm.time_step_rank")
    return {"full_attention_interval": key("full_attention_interval"),
            "linear_conv_kernel_dim": key("ssm.conv_kernel"),
            "linear_key_head_dim": key("ssm.state_size"),
            "linear_num_key_heads": key("ssm.group_count"),
            "linear_num_value_heads": value_heads,
            "linear_value_head_dim": key("ssm.inner_size") // value_heads}


def hugging_face_layout(name: str, w: np.ndarray, config: dict) -> np.ndarray:
    """A DeltaNet tensor of llama.cpp's (under its Hugging Face `name`) as Hugging Face holds
    it; any other tensor as it is."""
    if ".linear_attn." not in name:
        return w
    key_heads = config["linear_num_key_heads"]
    per_key = config["linear_num_value_heads"] // key_heads
    value_dim = config["linear_value_head_dim"]
    if name.endswith("A_log"):
        w = np.log(-w)
    if name.endswith(_BY_HEAD):
        w = w[_grouped(key_heads, per_key, 1)]
    elif name.endswith(_BY_VALUE):
        start = 0 if name.endswith("in_proj_z.weight") else \
            2 * key_heads * config["linear_key_head_dim"]  # q and k, then v
        w = np.concatenate((w[:start], w[start:][_grouped(key_heads, per_key, value_dim)]))
    elif name.endswith("out_proj.weight"):  # the one that reads the value heads
        w = w[:, _grouped(key_heads, per_key, value_dim)]
    if name.endswith("conv1d.weight"):
        w = w.reshape(w.shape[0], 1, -1)  # a depthwise Conv1d's, which llama.cpp squeezed
    return w


def _grouped(key_heads: int, per_key: int, width: int) -> np.ndarray:
    """Where each of Hugging Face's grouped elements lies in llama.cpp's tiled order."""
    grouped = np.arange(key_heads * per_key * width).reshape(key_heads, per_key, width)
    return grouped.transpose(1, 0, 2).reshape(-1).argsort()
