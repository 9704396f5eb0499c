"""Quantized checkpoints (engine/loading/quantized.py): transformers' fp8 layout,
compressed-tensors' formats, GPTQ's, AWQ's and bitsandbytes', written here as their own code
writes them, read back to the logits transformers (or the quantizer's own code) gives; and every
layout not read, refused naming its file."""
from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.errors import ModelLoadError
from engine.loading import load_model
from engine.loading.hf_folder import read_config
from engine.loading.quantized import dequantize, unpack
from engine.loading.weights import Weights

from .conftest import (MINISTRAL3_ROPE, engine_logits, hf_mistral3, hf_tiny, reference_logits,
                       save_hf_folder)

PROMPT = [5, 17, 99, 3, 250, 42, 7, 7, 120, 64, 1, 200]
FP8_MAX = 448.0  # e4m3's largest


def _quantized_names(name: str, tensor: torch.Tensor) -> bool:
    """The tensors quantization tools quantize: the text model's linear layers' weights
    (experts' too), not the embedding, head, norms, routers or a vision tower."""
    return (tensor.ndim >= 2 and name.endswith("weight") and "embed" not in name
            and "lm_head" not in name and "norm" not in name and "router" not in name
            and not name.endswith("mlp.gate.weight") and "vision_tower" not in name
            and "multi_modal_projector" not in name)


def _rewrite(folder, quantization_config: dict, quantize) -> None:
    """The saved folder's weights quantized by `quantize(name, tensor)` -> its stored tensors,
    and its config naming the quantization."""
    path = folder / "model.safetensors"
    stored = {}
    for name, tensor in load_file(path).items():
        stored |= quantize(name, tensor.float()) if _quantized_names(name, tensor) else {
            name: tensor}
    save_file({k: v.contiguous() for k, v in stored.items()}, path, metadata={"format": "pt"})
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"] = quantization_config
    (folder / "config.json").write_text(json.dumps(config))


def fp8_blocks(weight: torch.Tensor, high: int, wide: int) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek's (and transformers' fp8) layout: each high x wide block (the last ones cut
    short) in e4m3 and its scale, weight_scale_inv, by which it is multiplied back."""
    rows, columns = weight.shape[-2:]
    grid = math.ceil(rows / high), math.ceil(columns / wide)
    padded = torch.nn.functional.pad(weight, (0, grid[1] * wide - columns,
                                              0, grid[0] * high - rows))
    blocks = padded.reshape(*weight.shape[:-2], grid[0], high, grid[1], wide)
    scale = blocks.abs().amax(dim=(-3, -1)) / FP8_MAX  # [..., grid rows, grid columns]
    values = (blocks / scale[..., :, None, :, None]).reshape(padded.shape)
    return values[..., :rows, :columns].to(torch.float8_e4m3fn), scale


def _fp8_quantizer(block):
    def quantize(name: str, weight: torch.Tensor) -> dict[str, torch.Tensor]:
        values, scale = fp8_blocks(weight, *(block or weight.shape[-2:]))
        return {name: values, name + "_scale_inv": scale if block else scale.reshape(())}
    return quantize


@pytest.mark.parametrize("arch,block", [("llama", [32, 32]), ("llama", None),
                                        ("qwen3", [16, 32]), ("glm4", [32, 32])])
def test_fp8_checkpoint_logits_match_transformers(tmp_path, arch, block):
    """Per block (Qwen3-FP8's, 128 x 128 there) or per tensor (Ministral 3's); GLM-4's fused
    gate and up split after dequantizing. transformers dequantizes on a CPU as this engine does."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")  # (transformers' fp8 loading needs it)
    folder = save_hf_folder(hf_tiny(arch), tmp_path / arch)
    _rewrite(folder, {"quant_method": "fp8", "activation_scheme": "dynamic",
                      "weight_block_size": block}, _fp8_quantizer(block))
    reference = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    loaded = load_model(str(folder), dtype="fp32", device="cpu")
    assert loaded.config.quantization == "fp8"
    assert "fp8 weights dequantized" in loaded.config.describe()
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(reference.eval(), PROMPT), atol=1e-5, rtol=0)


def test_ministral3_as_it_ships_in_fp8(tmp_path):
    """Ministral 3's releases: the text model's weights in fp8, one scale each, with the static
    activation scales its fp8 kernels use (read past: activations are computed unquantized, as
    transformers computes them on a CPU); the vision tower left as it was."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")

    def quantize(name: str, weight: torch.Tensor) -> dict[str, torch.Tensor]:
        values, scale = fp8_blocks(weight, *weight.shape)
        return {name: values, name + "_scale_inv": scale.reshape(()),
                name.removesuffix("weight") + "activation_scale": torch.tensor(0.02)}

    folder = save_hf_folder(hf_mistral3("ministral3", rope_parameters=MINISTRAL3_ROPE),
                            tmp_path / "ministral3")
    _rewrite(folder, {"quant_method": "fp8", "activation_scheme": "static",
                      "weight_block_size": None,
                      "modules_to_not_convert": ["model.vision_tower",
                                                 "model.multi_modal_projector", "lm_head"]},
             quantize)
    reference = transformers.AutoModelForImageTextToText.from_pretrained(
        folder, dtype=torch.float32)
    loaded = load_model(str(folder), dtype="fp32", device="cpu")
    assert (loaded.config.architecture, loaded.config.quantization) == ("ministral3", "fp8")
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(reference.eval(), PROMPT), atol=1e-5, rtol=0)


def test_ue8m0_scales_are_powers_of_two(tmp_path):
    """DeepSeek V3.1's scale_fmt ue8m0: a block's scale stored as its biased exponent."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")

    def quantize(name: str, weight: torch.Tensor) -> dict[str, torch.Tensor]:
        _, scale = fp8_blocks(weight, 32, 32)
        exponent = torch.ceil(torch.log2(scale))  # a power of two at least the scale
        values = weight / exponent.exp2().repeat_interleave(32, 0).repeat_interleave(32, 1)
        return {name: values.to(torch.float8_e4m3fn),
                name + "_scale_inv": (exponent + 127).to(torch.uint8)}

    folder = save_hf_folder(hf_tiny("llama"), tmp_path / "ue8m0")
    _rewrite(folder, {"quant_method": "fp8", "weight_block_size": [32, 32],
                      "scale_fmt": "ue8m0"}, quantize)
    reference = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    loaded = load_model(str(folder), dtype="fp32", device="cpu")
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(reference.eval(), PROMPT), atol=1e-5, rtol=0)


def _compressed_tensors(form: str, weights: dict):
    """(quantization_config, quantize) as llm-compressor writes a checkpoint of `form`: the
    scales and zero points compressed-tensors computes from each group's range, the weights
    compressed by its own compressor (packed into int32 for pack-quantized)."""
    pytest.importorskip("compressed_tensors")
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import (QuantizationArgs, QuantizationConfig,
                                                 QuantizationScheme)
    from compressed_tensors.quantization.utils import calculate_qparams

    args = QuantizationArgs(**weights)
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    compressor = BaseCompressor.load_from_registry(form)

    def compress(weight: torch.Tensor) -> dict[str, torch.Tensor]:
        low, high = _ranges(weight, args)
        scale, zero = calculate_qparams(low, high, args)
        return compressor.compress({"weight": weight, "weight_scale": scale.float(),
                                    "weight_zero_point": zero}, scheme)

    def quantize(name: str, weight: torch.Tensor) -> dict[str, torch.Tensor]:
        if weight.ndim == 3:  # GraniteMoE's stacked experts, each compressed on its own
            parts = [compress(expert) for expert in weight]
            stacked = {key: torch.stack([p[key] for p in parts]) for key in parts[0]
                       if key != "weight_shape"}
            if "weight_shape" in parts[0]:  # the whole's
                stacked["weight_shape"] = torch.tensor(weight.shape)
            return {name.removesuffix("weight") + key: t for key, t in stacked.items()}
        return {name.removesuffix("weight") + key: t for key, t in compress(weight).items()}

    config = QuantizationConfig(config_groups={"group_0": scheme}, format=form,
                                quantization_status="compressed", ignore=["lm_head"])
    return config.model_dump(exclude_none=True) | {"quant_method": "compressed-tensors"}, quantize


def _ranges(weight: torch.Tensor, args) -> tuple[torch.Tensor, torch.Tensor]:
    """Each scale's group's least and greatest value, as the strategy groups a matrix."""
    rows, columns = weight.shape
    if args.strategy == "tensor":
        return weight.min().reshape(1), weight.max().reshape(1)
    if args.strategy == "channel":
        return weight.amin(1, keepdim=True), weight.amax(1, keepdim=True)
    if args.strategy == "group":
        groups = weight.reshape(rows, columns // args.group_size, args.group_size)
        return groups.amin(-1), groups.amax(-1)
    high, wide = args.block_structure
    grid = math.ceil(rows / high), math.ceil(columns / wide)
    padded = torch.nn.functional.pad(weight, (0, grid[1] * wide - columns,
                                              0, grid[0] * high - rows))
    blocks = padded.reshape(grid[0], high, grid[1], wide)
    return blocks.amin((1, 3)), blocks.amax((1, 3))


FP8 = {"num_bits": 8, "type": "float"}
# (format, weights' quantization args): RedHatAI's FP8-dynamic (per row), per tensor, DeepSeek-
# like blocks, w8a8 int8, w4a16 (int4 in groups of columns, symmetric and with zero points),
# int8 packed, and int4 stored a value to a byte
COMPRESSED = [
    ("float-quantized", FP8 | {"strategy": "channel"}),
    ("float-quantized", FP8 | {"strategy": "tensor"}),
    ("float-quantized", FP8 | {"strategy": "block", "block_structure": [32, 32]}),
    ("int-quantized", {"num_bits": 8, "type": "int", "strategy": "channel"}),
    ("pack-quantized", {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 32}),
    ("pack-quantized", {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 16,
                        "symmetric": False}),
    ("pack-quantized", {"num_bits": 8, "type": "int", "strategy": "channel"}),
    ("naive-quantized", {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 32,
                         "symmetric": False}),
]


@pytest.mark.parametrize("form,weights", COMPRESSED)
def test_compressed_tensors_logits_match_transformers(tmp_path, form, weights):
    transformers = pytest.importorskip("transformers")
    config, quantize = _compressed_tensors(form, weights)
    folder = save_hf_folder(hf_tiny("llama"), tmp_path / "ct")
    _rewrite(folder, config, quantize)
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32,
        quantization_config=transformers.CompressedTensorsConfig(dequantize=True))
    loaded = load_model(str(folder), dtype="fp32", device="cpu")
    kind = f"{'fp' if weights['type'] == 'float' else 'int'}{weights['num_bits']}"
    assert loaded.config.quantization == f"compressed-tensors {kind}"
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(reference.eval(), PROMPT), atol=1e-5, rtol=0)


def test_blocks_cut_short_at_the_edges(tmp_path):
    """Qwen3's key rows (48) are not a whole number of 32-row blocks: the last block is cut
    short, as compressed-tensors pads it."""
    transformers = pytest.importorskip("transformers")
    config, quantize = _compressed_tensors(
        "float-quantized", FP8 | {"strategy": "block", "block_structure": [32, 32]})
    folder = save_hf_folder(hf_tiny("qwen3"), tmp_path / "qwen3")
    _rewrite(folder, config, quantize)
    assert load_file(folder / "model.safetensors")[
        "model.layers.0.self_attn.k_proj.weight_scale"].shape == (2, 2)  # [48, 64] in 32s
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32,
        quantization_config=transformers.CompressedTensorsConfig(dequantize=True))
    loaded = load_model(str(folder), dtype="fp32", device="cpu")
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(reference.eval(), PROMPT), atol=1e-5, rtol=0)


@pytest.mark.parametrize("arch,form,weights", [
    ("qwen3_moe", "fp8", None),
    ("qwen3_moe", "pack-quantized", {"num_bits": 4, "type": "int", "strategy": "group",
                                     "group_size": 16, "symmetric": False}),
    ("granitemoe", "fp8", None),
    ("granitemoe", "pack-quantized", {"num_bits": 4, "type": "int", "strategy": "group",
                                      "group_size": 16})])
def test_quantized_experts_read_as_each_experts_matrix(tmp_path, arch, form, weights):
    """Qwen3-MoE's experts stored one by one, GraniteMoE's stacked (each expert's part of the
    weights, scales and zero points read). transformers' own dequantizing of quantized experts
    is off for both (its fp8 experts' logits differ from their dequantized weights' by 0.03 and
    0.8 here, with transformers 5.25), so the reference is the model holding the matrices the
    quantizer's own dequantization gives."""
    if form == "fp8":
        config, quantize = ({"quant_method": "fp8", "weight_block_size": [32, 32]},
                            _fp8_quantizer([32, 32]))
    else:
        config, quantize = _compressed_tensors(form, weights)
    transformers = pytest.importorskip("transformers")
    hf = hf_tiny(arch)
    folder = save_hf_folder(hf, tmp_path / arch)
    _rewrite(folder, config, quantize)
    stored = load_file(folder / "model.safetensors")
    plain = save_hf_folder(hf, tmp_path / "dequantized")  # the same model, those matrices in it
    tensors = load_file(plain / "model.safetensors")
    save_file({name: _reference_dequantized(stored, name, form, weights)
               if _quantized_names(name, tensor) else tensor
               for name, tensor in tensors.items()}, plain / "model.safetensors")
    reference = transformers.AutoModelForCausalLM.from_pretrained(plain, dtype=torch.float32)
    loaded = load_model(str(folder), dtype="fp32", device="cpu")
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(reference.eval(), PROMPT), atol=1e-5, rtol=0)


def _reference_dequantized(stored: dict, name: str, form: str, weights: dict | None):
    """A weight as its quantizer's own code reads it back (each expert's on its own)."""
    base = name.removesuffix("weight")
    if form == "fp8":
        values, scale = stored[name], stored[name + "_scale_inv"]
        spread = scale.repeat_interleave(32, -2)[..., :values.shape[-2], :]
        return values.float() * spread.repeat_interleave(32, -1)[..., :values.shape[-1]]
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    scheme = QuantizationScheme(targets=["Linear"], weights=QuantizationArgs(**weights))
    compressor = BaseCompressor.load_from_registry(form)
    parts = {key.removeprefix(base): t for key, t in stored.items()
             if key.startswith(base) and "." not in key.removeprefix(base)}
    if parts["weight_packed"].ndim == 2:
        return compressor.decompress(parts, scheme)["weight"]
    shape = parts["weight_shape"]
    return torch.stack([compressor.decompress(
        {key: t[e] for key, t in parts.items() if key != "weight_shape"}
        | {"weight_shape": shape[1:]}, scheme)["weight"] for e in range(shape[0])])


def _groupwise(weight: torch.Tensor, bits: int, group: int, order: torch.Tensor | None = None,
               symmetric: bool = False):
    """Round-to-nearest in groups of `group` input columns, as GPTQ and AWQ store it: (values
    [in, out] in 0..2^bits - 1, zeros [groups, out], scales [groups, out], each column's
    group); with `order` (GPTQ's desc_act), the columns taken into groups in that order;
    symmetric as GPTQ's sym (every zero 2^(bits - 1))."""
    top = (1 << bits) - 1
    columns = weight.T  # [in, out]
    order = torch.arange(columns.shape[0]) if order is None else order
    groups = torch.empty(columns.shape[0], dtype=torch.int32)
    groups[order] = torch.arange(columns.shape[0], dtype=torch.int32) // group
    count = int(groups.max()) + 1
    low = torch.stack([columns[groups == g].amin(0) for g in range(count)]).clamp(max=0)
    high = torch.stack([columns[groups == g].amax(0) for g in range(count)]).clamp(min=0)
    if symmetric:
        high = torch.maximum(-low, high)
        low = -high
    scales = ((high - low) / top).clamp(min=1e-8)
    zeros = (torch.full_like(scales, (top + 1) // 2) if symmetric else
             torch.round(-low / scales).clamp(0, top))
    values = torch.round(columns / scales[groups] + zeros[groups]).clamp(0, top)
    return values.int(), zeros.int(), scales, groups


def _pack(values: torch.Tensor, bits: int, order=None) -> torch.Tensor:
    """Values [rows, columns] packed along each row into int32 words, value j of a word at bit
    j x bits (`order`: the columns a word holds, in its order)."""
    per_word = 32 // bits
    grouped = values.reshape(values.shape[0], -1, per_word)
    if order is not None:
        grouped = grouped[:, :, order]
    words = torch.zeros(grouped.shape[:2], dtype=torch.int64)
    for j in range(per_word):
        words |= grouped[:, :, j].long() << (bits * j)
    return (words - (words >= 1 << 31).long() * (1 << 32)).int()  # as int32's bits


@pytest.mark.parametrize("bits,form,desc_act", [(4, "gptq", False), (4, "gptq", True),
                                                (8, "gptq_v2", False), (2, "gptq_v2", True)])
def test_gptq_checkpoints_read_as_autogptq_packs_them(tmp_path, bits, form, desc_act):
    """As AutoGPTQ's QuantLinear.pack writes them (and GPTQModel, in its v2): qweight packed
    down the input columns, qzeros along the output rows (the first layout stores each zero
    less 1, so its releases are symmetric: a zero of 0 would not pack), g_idx each input
    column's group (out of order with desc_act). No GPTQ library installs here, so the
    reference is the model holding scale x (value - zero) by g_idx."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    hf = hf_tiny("llama")
    folder = save_hf_folder(hf, tmp_path / "gptq")
    expected = {}

    def quantize(name: str, weight: torch.Tensor) -> dict[str, torch.Tensor]:
        order = torch.randperm(weight.shape[1]) if desc_act else None
        values, zeros, scales, groups = _groupwise(weight, bits, 16, order,  # values [in, out]
                                                   symmetric=form == "gptq")
        scales = scales.half()  # as stored
        expected[name] = ((values - zeros[groups]) * scales[groups].float()).T
        base = name.removesuffix("weight")
        stored_zeros = zeros - (1 if form == "gptq" else 0)
        return {base + "qweight": _pack(values.T, bits).T.contiguous(),
                base + "qzeros": _pack(stored_zeros, bits), base + "scales": scales,
                base + "g_idx": groups}

    _rewrite(folder, {"quant_method": "gptq", "bits": bits, "group_size": 16,
                      "desc_act": desc_act, "sym": form == "gptq", "checkpoint_format": form},
             quantize)
    reference = _holding(transformers, hf, tmp_path / "reference", expected)
    heard = []
    loaded = load_model(str(folder), dtype="fp32", device="cpu",
                        progress=lambda message, fraction: heard.append((message, fraction)))
    assert loaded.config.quantization == f"gptq int{bits}"
    reads = [fraction for message, fraction in heard if message.startswith("reading model.")]
    assert "reading model.layers.1.mlp.down_proj.weight" in dict(heard)  # tensor by tensor
    assert reads == sorted(reads) and reads[0] > 0.1 and reads[-1] == pytest.approx(0.5)
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(reference, PROMPT), atol=1e-5, rtol=0)


def test_awq_checkpoints_read_as_compressed_tensors_converts_them(tmp_path):
    """AutoAWQ's GEMM layout: qweight [in, out / 8] and qzeros packed along each row in its
    column order (0 2 4 6 1 3 5 7 of each eight), scales [groups, out]. The reference is
    compressed-tensors' own converter from that layout to its pack-quantized one, read by
    transformers (scales kept in fp32: it computes in theirs, fp16 as AutoAWQ stores them)."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("compressed_tensors")
    from compressed_tensors.entrypoints.convert.converters.autoawq import AutoAWQConverter

    awq_order = [0, 2, 4, 6, 1, 3, 5, 7]

    def quantize(name: str, weight: torch.Tensor) -> dict[str, torch.Tensor]:
        values, zeros, scales, _ = _groupwise(weight, 4, 16)
        base = name.removesuffix("weight")
        return {base + "qweight": _pack(values, 4, awq_order),
                base + "qzeros": _pack(zeros, 4, awq_order), base + "scales": scales}

    awq_config = {"quant_method": "awq", "bits": 4, "group_size": 16, "zero_point": True,
                  "version": "gemm"}
    folder = save_hf_folder(hf_tiny("llama"), tmp_path / "awq")
    _rewrite(folder, awq_config, quantize)
    converter = AutoAWQConverter.from_autoawq_config(awq_config)
    converted = save_hf_folder(hf_tiny("llama"), tmp_path / "converted")
    save_file({k: v.contiguous() for k, v in converter.process(
        load_file(folder / "model.safetensors")).items()}, converted / "model.safetensors")
    config = json.loads((converted / "config.json").read_text())
    config["quantization_config"] = converter.update_config(None).model_dump(
        exclude_none=True) | {"quant_method": "compressed-tensors"}
    (converted / "config.json").write_text(json.dumps(config))
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        converted, dtype=torch.float32,
        quantization_config=transformers.CompressedTensorsConfig(dequantize=True))
    loaded = load_model(str(folder), dtype="fp32", device="cpu")
    assert loaded.config.quantization == "awq int4"
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(reference.eval(), PROMPT), atol=1e-5, rtol=0)


def _holding(transformers, hf, folder, matrices: dict):
    """transformers' model `hf` saved to `folder` with `matrices` for its weights, read back."""
    save_hf_folder(hf, folder)
    tensors = load_file(folder / "model.safetensors")
    save_file(tensors | matrices, folder / "model.safetensors")
    return transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


@pytest.mark.parametrize("kind,nested", [("nf4", True), ("nf4", False), ("fp4", False),
                                         ("int8", False)])
def test_bitsandbytes_weights_read_back_as_its_quantizer_coded_them(tmp_path, kind, nested):
    """unsloth's -bnb-4bit releases (nf4, double quantized) and LLM.int8, as transformers saves
    them: each weight read back is one bitsandbytes' own quantizer codes to the bytes stored
    (the matrix it meant). Its CPU dequantizer is not the reference: bitsandbytes 0.50.2's
    scales each 4-bit block by the previous block's absmax (0.17 mean error against the
    weights, 0.07 from its codes)."""
    functional = pytest.importorskip("bitsandbytes.functional")
    transformers = pytest.importorskip("transformers")
    hf = hf_tiny("llama")
    folder = save_hf_folder(hf, tmp_path / kind)
    stored = {}

    def quantize(name: str, weight: torch.Tensor) -> dict[str, torch.Tensor]:
        if kind == "int8":
            values, absmax, _ = functional.int8_vectorwise_quant(weight.half())
            stored[name] = values
            return {name: values, name.removesuffix("weight") + "SCB": absmax}
        values, state = functional.quantize_4bit(weight, blocksize=64, quant_type=kind,
                                                 compress_statistics=nested)
        stored[name] = values
        return {name: values} | {f"{name}.{key}": part
                                 for key, part in state.as_dict(packed=True).items()}

    _rewrite(folder, {"quant_method": "bitsandbytes", "load_in_4bit": kind != "int8",
                      "load_in_8bit": kind == "int8", "bnb_4bit_quant_type": kind,
                      "bnb_4bit_use_double_quant": nested}, quantize)
    weights = Weights(folder)
    for name, values in stored.items():
        read = weights[name]
        assert read.shape == weights.shapes[name] == hf.state_dict()[name].shape
        if kind == "int8":
            again, _, _ = functional.int8_vectorwise_quant(read.half())
            assert torch.equal(again, values), name
        else:  # the same codes (fp4's two zeros alike: a tie either way)
            again, state = functional.quantize_4bit(read, blocksize=64, quant_type=kind,
                                                    compress_statistics=False)
            assert torch.equal(state.code[_nibbles(again)], state.code[_nibbles(values)]), name
        error = (read - hf.state_dict()[name]).abs().mean() / hf.state_dict()[name].abs().mean()
        assert error < (0.02 if kind == "int8" else 0.15), (name, error)  # near what it coded
    loaded = load_model(str(folder), dtype="fp32", device="cpu")
    assert loaded.config.quantization == f"bitsandbytes {kind}"
    reference = _holding(transformers, hf, tmp_path / "reference",
                         {name: weights[name] for name in stored})
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(reference, PROMPT), atol=1e-5, rtol=0)


def _nibbles(packed: torch.Tensor) -> torch.Tensor:
    """bitsandbytes' 4-bit codes, two a byte, the first in its high half."""
    return torch.stack([packed.flatten() >> 4, packed.flatten() & 15], 1).flatten().long()


def test_columns_grouped_out_of_order_take_their_groups_scales():
    """Older GPTQ-made compressed-tensors checkpoints (actorder "group") give each column's
    group in weight_g_idx: the matrix is as if its columns were sorted by group, each group
    scaled as one, and put back."""
    torch.manual_seed(0)
    values = torch.randint(-8, 8, (6, 8), dtype=torch.int8)
    scale = torch.rand(6, 2) + 0.5  # two groups of four columns
    groups = torch.tensor([1, 0, 0, 1, 1, 0, 1, 0])
    order = torch.argsort(groups, stable=True)  # the columns grouped: 0s, then 1s
    in_order = values[:, order].float() * scale.repeat_interleave(4, 1)
    expected = torch.empty_like(in_order)
    expected[:, order] = in_order
    torch.testing.assert_close(dequantize(values, scale, None, groups, ()), expected)


def test_unpack_reads_every_bit_width_compressed_tensors_packs():
    packing = pytest.importorskip("compressed_tensors.compressors.pack_quantized.helpers")
    torch.manual_seed(0)
    for bits in (1, 2, 4, 8):
        values = torch.randint(-(1 << (bits - 1)), 1 << (bits - 1), (5, 37), dtype=torch.int8)
        words = packing.pack_to_int32(values, bits)
        assert torch.equal(unpack(words, bits, 5, 37), values.int()), bits


@pytest.mark.parametrize("config,named", [
    ({"quant_method": "gptq", "bits": 3}, "3-bit"),
    ({"quant_method": "gptq", "bits": 4, "checkpoint_format": "marlin"}, "marlin"),
    ({"quant_method": "awq", "bits": 4, "version": "gemv"}, "gemv"),
    ({"quant_method": "awq", "bits": 4, "zero_point": False}, "zero_point false"),
    ({"quant_method": "bitsandbytes"}, "neither load_in_4bit"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "int4"},
     "int4"),
    ({"quant_method": "hqq", "nbits": 4}, "hqq"),
    ({"quant_method": "fp8", "weight_block_size": [128]}, "weight_block_size"),
    ({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
      "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "float",
                                                "strategy": "tensor_group"}}}},
     "nvfp4-pack-quantized"),
    ({"quant_method": "compressed-tensors", "format": "float-quantized",
      "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float",
                                                "strategy": "channel"}}},
      "transform_config": {"config_groups": {}}}, "transform_config"),
    ({"quant_method": "compressed-tensors", "format": "float-quantized",
      "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float",
                                                "strategy": "channel"}}},
      "sparsity_config": {"format": "sparse-24-bitmask"}}, "sparse-24-bitmask"),
    ({"quant_method": "compressed-tensors", "format": "pack-quantized",
      "config_groups": {"group_0": {"weights": {"num_bits": 3, "type": "int",
                                                "strategy": "channel"}}}}, "3-bit int"),
    ({"quant_method": "compressed-tensors", "format": "float-quantized",
      "quantization_status": "frozen", "config_groups": {}}, "frozen")])
def test_layouts_not_read_are_refused_naming_config_json(tmp_path, config, named):
    folder = save_hf_folder(hf_tiny("llama"), tmp_path / "q")
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(cfg | {"quantization_config": config}))
    with pytest.raises(ModelLoadError, match=named) as err:
        read_config(folder)
    assert err.value.path == str(folder / "config.json")


def test_a_quantized_weight_without_its_scale_is_named(tmp_path):
    folder = save_hf_folder(hf_tiny("llama"), tmp_path / "q")
    _rewrite(folder, {"quant_method": "fp8", "weight_block_size": [32, 32]},
             lambda name, weight: {name: fp8_blocks(weight, 32, 32)[0]})
    with pytest.raises(ModelLoadError, match="q_proj.weight: has no weight_scale") as err:
        load_model(str(folder), dtype="fp32", device="cpu")
    assert err.value.path == str(folder / "model.safetensors")


def test_scales_that_do_not_tile_the_weight_are_named(tmp_path):
    def quantize(name: str, weight: torch.Tensor) -> dict[str, torch.Tensor]:
        values, scale = fp8_blocks(weight, 32, 32)
        return {name: values, name + "_scale_inv": torch.cat([scale, scale], 1)[:, :3]}

    folder = save_hf_folder(hf_tiny("llama"), tmp_path / "q")
    _rewrite(folder, {"quant_method": "fp8", "weight_block_size": [32, 32]}, quantize)
    with pytest.raises(ModelLoadError, match=r"scales of shape \(2, 3\) do not tile"):
        load_model(str(folder), dtype="fp32", device="cpu")
