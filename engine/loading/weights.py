"""A Hugging Face folder's safetensors weights, read lazily under the names the model gives them
(engine/checkpoint_layout.py `hf_shapes`): a multimodal model's text part as a text-only
model's, Mixtral's experts as the other mixtures name theirs, GraniteMoE's stacked experts as
each one's, GLM-4's norms and fused gate and up as the others', StarCoder2's and Phi-2's MLP as
the others without a gate (and Phi-2's attention output and last norm as the others'); a quantized
checkpoint's weights dequantized (quantized.py)."""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from engine.errors import ModelLoadError
from engine.loading.config_fields import read_json
from engine.loading.quantization_config import read_quantization
from engine.loading.quantized import plain_names, plain_shape, read_plain

# Multimodal checkpoints' tensor name prefixes: the text model's, as a text-only model names them
# (transformers' older layout and its newer), and the rest's, which are not read (with Qwen3.5's
# multi-token prediction head)
TEXT_PREFIXES = {"language_model.model.": "model.", "model.language_model.": "model.",
                 "language_model.lm_head.": "lm_head.", "model.text_model.": "model."}
OTHER_PREFIXES = ("vision_tower.", "multi_modal_projector.", "model.vision_tower.",
                  "model.multi_modal_projector.", "visual.", "model.visual.",
                  "model.vision_model.", "model.connector.", "image_newline",
                  "model.image_newline", "mtp.")
# Mixtral's router and experts: block_sparse_moe.gate and block_sparse_moe.experts.E.w1, w3, w2
MIXTRAL_NAME = re.compile(r"(.*)\.block_sparse_moe\.(gate|experts\.\d+\.(w[123]))\.weight")
MIXTRAL_PROJECTIONS = {"w1": "gate_proj", "w2": "down_proj", "w3": "up_proj"}
# GraniteMoE's router (router.layer) and a layer's experts stacked: input_linear
# [experts, 2 x width, hidden], each one's gate then up, and output_linear [experts, hidden, width]
GRANITE_MOE_NAME = re.compile(
    r"(.*)\.block_sparse_moe\.(router\.layer|input_linear|output_linear)\.weight")
# GLM-4's norms around each sublayer, as Gemma 2's are named, and its gate and up fused
GLM4_NORMS = {"post_self_attn_layernorm": "post_attention_layernorm",
              "post_attention_layernorm": "pre_feedforward_layernorm",
              "post_mlp_layernorm": "post_feedforward_layernorm"}
GLM4_NAME = re.compile(r"(.*)\.(post_self_attn_layernorm|post_attention_layernorm|"
                       r"post_mlp_layernorm|mlp\.gate_up_proj)\.weight")
# StarCoder2's and Phi-2's MLP without a gate, Phi-2's attention output and last norm, as the
# others name them
GATELESS_NAME = re.compile(r"(.*)\.(mlp\.c_fc|mlp\.c_proj|mlp\.fc1|mlp\.fc2|self_attn\.dense|"
                           r"final_layernorm)\.(weight|bias)")
GATELESS_NAMES = {"mlp.c_fc": "mlp.up_proj", "mlp.c_proj": "mlp.down_proj",
                  "mlp.fc1": "mlp.up_proj", "mlp.fc2": "mlp.down_proj",
                  "self_attn.dense": "self_attn.o_proj", "final_layernorm": "norm"}
# Granite 4.0's MLP: its gate and up one tensor, its down another
GRANITE_SHARED_NAME = re.compile(r"(.*)\.shared_mlp\.(input_linear|output_linear)\.weight")
# LFM2's names for its norms, its MLP (feed_forward, its w1, w3 and w2 Mixtral's; LFM2-MoE's
# router, experts and expert bias under it), its attention's output and q/k norms, its last norm
LFM2_NAME = re.compile(r"(.*)\.(operator_norm|ffn_norm|feed_forward|self_attn\.out_proj|"
                       r"self_attn\.[qk]_layernorm|embedding_norm|post_operator_norm|"
                       r"post_ffn_norm)(\..+)")
LFM2_NAMES = {"operator_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
              "feed_forward": "mlp", "self_attn.out_proj": "self_attn.o_proj",
              "self_attn.q_layernorm": "self_attn.q_norm",
              "self_attn.k_layernorm": "self_attn.k_norm", "embedding_norm": "norm"}
# LFM3's, where its sublayers' outputs are normed too (as Gemma 2's are named)
LFM3_SANDWICH = {"post_operator_norm": "post_attention_layernorm",
                 "ffn_norm": "pre_feedforward_layernorm",
                 "post_ffn_norm": "post_feedforward_layernorm"}
# What each renaming reads as what, for a mismatch's message (Weights.namings)
NAMINGS = {
    "mixtral": "Mixtral's block_sparse_moe.gate and block_sparse_moe.experts.E.w1, w3, w2 named "
               "as mlp.gate and mlp.experts.E.gate_proj, up_proj, down_proj",
    "granitemoe": "GraniteMoE's block_sparse_moe.router.layer named as mlp.gate, and expert E's "
                  "halves of input_linear[E] and output_linear[E] as mlp.experts.E.gate_proj, "
                  "up_proj and down_proj",
    "glm4": "GLM-4's post_self_attn_layernorm, post_attention_layernorm and post_mlp_layernorm "
            "named as post_attention_layernorm, pre_feedforward_layernorm and "
            "post_feedforward_layernorm, and mlp.gate_up_proj's halves as mlp.gate_proj and "
            "up_proj",
    "granitemoehybrid": "Granite 4.0's shared_mlp.input_linear's halves named as "
                        "mlp.gate_proj and up_proj, and its output_linear as mlp.down_proj",
    "gateless": "StarCoder2's mlp.c_fc and c_proj, and Phi-2's mlp.fc1 and fc2, named as "
                "mlp.up_proj and down_proj, Phi-2's self_attn.dense and model.final_layernorm "
                "as self_attn.o_proj and model.norm",
    "lfm2": "LFM2's operator_norm, ffn_norm, feed_forward (its w1, w3, w2), "
            "self_attn.out_proj, q_layernorm, k_layernorm and model.embedding_norm named as "
            "input_layernorm, post_attention_layernorm, mlp (gate_proj, up_proj, down_proj), "
            "self_attn.o_proj, q_norm, k_norm and model.norm (LFM3's post_operator_norm, "
            "ffn_norm and post_ffn_norm, where it has the first, as post_attention_layernorm, "
            "pre_feedforward_layernorm and post_feedforward_layernorm)"}


def weight_files(folder: Path) -> dict[str, Path]:
    """Tensor name -> the .safetensors file holding it (one file, or sharded with an index)."""
    index_path = folder / "model.safetensors.index.json"
    if index_path.is_file():
        weight_map = read_json(index_path).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ModelLoadError(index_path, "no weight_map")
        if not all(isinstance(file, str) for file in weight_map.values()):
            raise ModelLoadError(index_path, "weight_map must name a file for every tensor")
        return {name: folder / file for name, file in weight_map.items()}
    single = folder / "model.safetensors"
    # As transformers, only model.safetensors where it is: Mistral's repos also hold their own
    # format's consolidated.safetensors, and a merged fine-tune may keep adapter_model.safetensors.
    files = [single] if single.is_file() else sorted(folder.glob("*.safetensors"))
    if not files:
        pickled = sorted(p.name for pattern in ("*.bin", "*.pt", "*.pth")
                         for p in folder.glob(pattern))
        hint = (f"; {pickled[0]} is a PyTorch pickle, which is not loaded (it can run code): "
                "save the model again with transformers' save_pretrained (safetensors is its "
                "default)") if pickled else ""
        raise ModelLoadError(folder, "no *.safetensors weights (and no "
                                     "model.safetensors.index.json)" + hint)
    names: dict[str, Path] = {}
    for file in files:
        for name in _open(file).keys():
            names[name] = file
    return names


def _open(file: Path):
    if not file.is_file():
        raise ModelLoadError(file, "file not found")
    try:
        return safe_open(str(file), framework="pt")
    except (SafetensorError, OSError) as exc:
        raise ModelLoadError(file, f"not a readable safetensors file ({exc})") from None


@dataclass(frozen=True, slots=True)
class _Part:
    """Where a tensor is stored: a whole stored tensor, or its expert's matrix in a stacked one,
    or the first or second half of its (its expert's) rows where `half` is 0 or 1."""
    name: str
    expert: int | None = None
    half: int | None = None


def _gate_up_halves(layer: str, name: str) -> dict[str, _Part]:
    """A layer's gate and up, stored as one tensor's first and second halves (GLM-4's, Granite
    4.0's)."""
    return {f"{layer}.mlp.gate_proj.weight": _Part(name, half=0),
            f"{layer}.mlp.up_proj.weight": _Part(name, half=1)}


class Weights(Mapping[str, torch.Tensor]):
    """A folder's tensors by the model's names, each read from its memory-mapped file when asked
    for, in the file's dtype: a model cast on load (stored in fp32, run in bf16, or the other
    way) then holds one cast tensor at a time, not a cast copy of all of them (the default model
    in bf16 took 530 MB of memory beyond the page cache, now 283, its own size). `shapes` come
    from the files' headers, so names and shapes are checked before any tensor is read."""

    def __init__(self, folder: Path,
                 progress: Callable[[str, float], None] = lambda message, fraction: None
                 ) -> None:
        """progress(message, fraction of the tensors read) hears about each tensor read (a big
        model's, or a quantized one's, dequantized, take a while)."""
        self.progress, self._reads = progress, 0
        self.files = weight_files(folder)  # stored name -> the file holding it
        self._handles = {file: _open(file) for file in set(self.files.values())}
        config = folder / "config.json"
        self.quantization = read_quantization(read_json(config, required=False) or {}, config)
        # the model's tensors' stored names by their plain ones (a quantized weight's scales are
        # not among them, a packed one's plain name is its unpacked one's)
        self.plain = (plain_names(self.files) if self.quantization else
                      {name: name for name in self.files})
        self.namings: set[str] = set()  # the NAMINGS these weights were read with
        # GLM-4's names mean others' where its own norm after the attention is among them
        self.glm4 = any(name.endswith(".post_self_attn_layernorm.weight") for name in self.plain)
        # LFM's names as the others', LFM3's norms after each sublayer where it has them
        self.lfm_names = LFM2_NAMES | (LFM3_SANDWICH if any(
            name.endswith(".post_operator_norm.weight") for name in self.plain) else {})
        self.stored: dict[str, _Part] = {}  # the model's name -> where it is stored
        for name in self.plain:
            if not name.startswith(OTHER_PREFIXES):  # (a vision tower's, not read)
                self.stored |= self._parts(name)
        self.shapes = {ours: self._shape(part) for ours, part in self.stored.items()}

    def __getitem__(self, name: str) -> torch.Tensor:
        self._reads += 1
        self.progress(f"reading {name}", min(1.0, self._reads / len(self.stored)))
        part = self.stored[name]
        if self.quantization:
            return self._dequantized(part)
        index: tuple = () if part.expert is None else (part.expert,)  # what the slice reads
        if part.half is not None:
            rows = self._stored_shape(part.name)[len(index)]
            index += (slice(part.half * rows // 2, (part.half + 1) * rows // 2),)
        if not index:
            return self._read(part.name, lambda handle: handle.get_tensor(part.name))
        return self._read(part.name, lambda handle: handle.get_slice(part.name)[index])

    def _dequantized(self, part: _Part) -> torch.Tensor:
        """A quantized checkpoint's tensor, dequantized where it is stored quantized (of stacked
        experts, its expert's part of the weights, scales and all)."""
        stored = self.plain[part.name]
        try:
            tensor = read_plain(self.quantization, part.name, stored,
                                self._stored_shape(part.name),
                                lambda name: self._tensor(name, part.expert))
        except ValueError as exc:
            raise ModelLoadError(self.files[stored], f"{stored}: {exc}") from None
        if part.half is None:
            return tensor
        rows = tensor.shape[0]
        return tensor[part.half * rows // 2:(part.half + 1) * rows // 2]

    def __iter__(self):
        return iter(self.stored)

    def __len__(self) -> int:
        return len(self.stored)

    def _parts(self, name: str) -> dict[str, _Part]:
        """The model's tensors a stored one holds, by the model's names: a multimodal model's
        text tensors as a text-only model names them, then as the others name theirs."""
        ours = next((text + name[len(prefix):] for prefix, text in TEXT_PREFIXES.items()
                     if name.startswith(prefix)), name)
        mixtral = MIXTRAL_NAME.fullmatch(ours)
        if mixtral:
            self.namings.add("mixtral")
            layer, part, projection = mixtral.groups()
            if projection:
                part = part.replace(projection, MIXTRAL_PROJECTIONS[projection])
            return {f"{layer}.mlp.{part}.weight": _Part(name)}
        shared = GRANITE_SHARED_NAME.fullmatch(ours)
        if shared:
            self.namings.add("granitemoehybrid")
            layer, kind = shared.groups()
            if kind == "output_linear":
                return {f"{layer}.mlp.down_proj.weight": _Part(name)}
            return _gate_up_halves(layer, name)
        gateless = GATELESS_NAME.fullmatch(ours)
        if gateless:
            self.namings.add("gateless")
            prefix, kind, part = gateless.groups()
            return {f"{prefix}.{GATELESS_NAMES[kind]}.{part}": _Part(name)}
        lfm2 = LFM2_NAME.fullmatch(ours)
        if lfm2:
            self.namings.add("lfm2")
            prefix, kind, rest = lfm2.groups()
            rest = re.sub(r"\.(w[123])\.", lambda w: f".{MIXTRAL_PROJECTIONS[w[1]]}.", rest)
            return {f"{prefix}.{self.lfm_names.get(kind, kind)}{rest}": _Part(name)}
        glm4 = GLM4_NAME.fullmatch(ours) if self.glm4 else None
        if glm4:
            self.namings.add("glm4")
            layer, kind = glm4.groups()
            if kind == "mlp.gate_up_proj":
                return _gate_up_halves(layer, name)
            return {f"{layer}.{GLM4_NORMS[kind]}.weight": _Part(name)}
        granite = GRANITE_MOE_NAME.fullmatch(ours)
        shape = self._stored_shape(name) if granite else ()
        if granite and (granite[2] == "router.layer" or len(shape) == 3):
            self.namings.add("granitemoe")
            layer, kind = granite.groups()
            if kind == "router.layer":
                return {f"{layer}.mlp.gate.weight": _Part(name)}
            projections = ({"gate_proj": 0, "up_proj": 1} if kind == "input_linear" else
                           {"down_proj": None})
            return {f"{layer}.mlp.experts.{e}.{projection}.weight": _Part(name, e, half)
                    for e in range(shape[0]) for projection, half in projections.items()}
        return {ours: _Part(name)}

    def _shape(self, part: _Part) -> tuple[int, ...]:
        shape = self._stored_shape(part.name)
        if part.expert is not None:
            shape = shape[1:]
        return shape if part.half is None else (shape[0] // 2, *shape[1:])

    def _stored_shape(self, name: str) -> tuple[int, ...]:
        """A model's tensor's shape as stored whole (a packed one's as unpacked)."""
        stored = self.plain[name]
        if self.quantization is None:
            return self._header_shape(name)
        try:
            return plain_shape(self.quantization, name, stored, self._header_shape,
                               self._tensor)
        except ValueError as exc:
            raise ModelLoadError(self.files[stored], f"{stored}: {exc}") from None

    def _tensor(self, name: str, expert: int | None = None) -> torch.Tensor | None:
        """A stored tensor (its `expert`'s part where given); None where there is none."""
        if name not in self.files:
            return None
        return self._read(name, lambda handle: handle.get_tensor(name) if expert is None else
                          handle.get_slice(name)[expert])

    def _header_shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._read(name, lambda handle: handle.get_slice(name).get_shape()))

    def _read(self, name: str, read):
        file = self.files[name]
        try:
            return read(self._handles[file])
        except (SafetensorError, OSError) as exc:
            raise ModelLoadError(file, f"cannot read tensor {name!r} ({exc})") from None
