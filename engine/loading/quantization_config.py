"""config.json's quantization_config: how a quantized checkpoint stores its weights, checked and
reduced to what reading them back needs (engine/loading/quantized.py); a ModelLoadError naming
config.json for a kind that is not read.

Read: transformers' `fp8` (Qwen3's and Mistral's FP8 releases, DeepSeek's layout) and
`fbgemm_fp8`; compressed-tensors' (llm-compressor's: RedHatAI's `-FP8-dynamic`,
`-quantized.w8a8`, `-quantized.w4a16`) `float-quantized`, `int-quantized`, `naive-quantized`
and `pack-quantized` weights; GPTQ's (AutoGPTQ's and GPTQModel's: 2, 4 and 8 bits, its first
layout or its v2), AWQ's (AutoAWQ's GEMM, 4 bits) and bitsandbytes' (nf4 and fp4, double
quantized too, and LLM.int8: unsloth's `-bnb-4bit` releases). Refused: nvfp4 and mxfp4, 3-bit
packing, rotated or 2:4-sparse compressed-tensors weights, and the rest."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.errors import ModelLoadError

# compressed-tensors' formats: weights stored a value each, or packed into int32 words
CT_FORMATS = ("float-quantized", "int-quantized", "naive-quantized", "pack-quantized")
CT_STRATEGIES = ("tensor", "channel", "group", "block")
PACKED_BITS = (1, 2, 4, 8)  # widths that pack whole into 32-bit words
READ = ("fp8, fbgemm_fp8, compressed-tensors' fp8 and int weights, GPTQ's, AWQ's (GEMM) and "
        "bitsandbytes'")


@dataclass(frozen=True, slots=True)
class Quantization:
    """How a checkpoint's quantized weights are stored."""
    label: str  # what the weights are, as a user reads it: "fp8", "gptq int4"
    # "scaled" (weight and weight_scale...), "gptq" or "awq" (qweight...), "bnb" (bitsandbytes')
    layout: str = "scaled"
    blocks: tuple[tuple[int, int], ...] = ()  # (rows, columns) a scale may cover, as configured
    packed_bits: tuple[int, ...] = ()  # bits of a packed value: one width, or one per group
    zero_offset: int = 0  # added to each stored zero point (GPTQ's first layout stores z - 1)


def read_quantization(cfg: dict, path: Path) -> Quantization | None:
    """config.json's (at `path`) quantization_config; None where it has none."""
    config = cfg.get("quantization_config")
    if not config:
        return None
    if not isinstance(config, dict):
        raise ModelLoadError(path, f"quantization_config must be an object, got {config!r}")
    method = config.get("quant_method")
    readers = {"fp8": _fp8, "fbgemm_fp8": lambda _, __: Quantization("fp8 (fbgemm)"),
               "compressed-tensors": _compressed_tensors, "gptq": _gptq, "awq": _awq,
               "bitsandbytes": _bitsandbytes}
    if method not in readers:
        raise ModelLoadError(path, f"quantized checkpoints by {method or config!r} are not read "
                                   f"(read: {READ}); use the model's unquantized weights or its "
                                   "GGUF file")
    return readers[method](config, path)


def _refusal(path: Path, method: str):
    return lambda problem: ModelLoadError(path, f"{method} quantization_config: {problem}")


def _fp8(config: dict, path: Path) -> Quantization:
    refuse = _refusal(path, "fp8")
    block = config.get("weight_block_size")
    if block is not None and not _positive_ints(block, 2):
        raise refuse(f"weight_block_size must be two positive integers, got {block!r}")
    if config.get("expert_dtype", "fp8") != "fp8":
        raise refuse(f"expert_dtype {config['expert_dtype']!r} is not read (fp8 is)")
    return Quantization("fp8", blocks=(tuple(block),) if block else ())


def _compressed_tensors(config: dict, path: Path) -> Quantization:
    refuse = _refusal(path, "compressed-tensors")
    status = config.get("quantization_status", "compressed")
    if status != "compressed":
        raise refuse(f"quantization_status {status!r} is not read (compressed is)")
    if config.get("transform_config"):  # weights rotated, to be turned back at run time
        raise refuse("transform_config is not read")
    sparsity = config.get("sparsity_config") or {}
    form = sparsity.get("format", "dense") if isinstance(sparsity, dict) else sparsity
    if form != "dense":
        raise refuse(f"sparsity_config's format {form!r} is not read")
    groups = config.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise refuse("config_groups must name at least one group")
    blocks, bits, kinds = [], [], []
    for name, group in groups.items():
        weights = group.get("weights") if isinstance(group, dict) else None
        if not isinstance(weights, dict):
            raise refuse(f"group {name!r} has no weights")
        form = group.get("format") or config.get("format")
        if form not in CT_FORMATS:
            raise refuse(f"format {form!r} is not read ({', '.join(CT_FORMATS)} are)")
        kind, width = weights.get("type"), weights.get("num_bits")
        if not (kind == "float" and width == 8 or kind == "int" and width in PACKED_BITS):
            raise refuse(f"group {name!r}'s {width}-bit {kind} weights are not read (8-bit "
                         "float and 1, 2, 4 or 8-bit int are)")
        kinds.append(f"{'fp' if kind == 'float' else 'int'}{width}")
        strategy = weights.get("strategy")
        if strategy not in CT_STRATEGIES:
            raise refuse(f"group {name!r}'s strategy {strategy!r} is not read "
                         f"({', '.join(CT_STRATEGIES)} are)")
        if strategy == "group":
            if not _positive_ints([weights.get("group_size")], 1):
                raise refuse(f"group {name!r}'s group_size must be a positive integer")
            blocks.append((1, weights["group_size"]))
        elif strategy == "block":
            if not _positive_ints(weights.get("block_structure"), 2):
                raise refuse(f"group {name!r}'s block_structure must be two positive integers")
            blocks.append(tuple(weights["block_structure"]))
        if form == "pack-quantized":
            bits.append(width)
    return Quantization(f"compressed-tensors {'/'.join(dict.fromkeys(kinds))}",
                        blocks=tuple(dict.fromkeys(blocks)),
                        packed_bits=tuple(dict.fromkeys(bits)))


def _gptq(config: dict, path: Path) -> Quantization:
    refuse = _refusal(path, "gptq")
    bits = config.get("bits")
    if bits not in PACKED_BITS[1:]:
        raise refuse(f"{bits}-bit weights are not read (2, 4 and 8-bit are)")
    form = config.get("checkpoint_format", "gptq")
    if form not in ("gptq", "gptq_v2"):
        raise refuse(f"checkpoint_format {form!r} is not read (gptq and gptq_v2 are)")
    return Quantization(f"gptq int{bits}", "gptq", _group(config, refuse), (bits,),
                        zero_offset=1 if form == "gptq" else 0)


def _awq(config: dict, path: Path) -> Quantization:
    refuse = _refusal(path, "awq")
    if config.get("bits", 4) != 4:
        raise refuse(f"{config['bits']}-bit weights are not read (4-bit are)")
    version = str(config.get("version", "gemm")).lower()
    if version != "gemm":  # GEMV's and the kernels' own orders are other layouts
        raise refuse(f"version {version!r} is not read (gemm is)")
    if config.get("zero_point", True) is not True:
        raise refuse("zero_point false is not read (AutoAWQ's default, true, is)")
    return Quantization("awq int4", "awq", _group(config, refuse), (4,))


def _bitsandbytes(config: dict, path: Path) -> Quantization:
    """4-bit (its quant type's codes, each block's absmax) or 8-bit (each row's absmax)."""
    if config.get("load_in_4bit"):
        kind = config.get("bnb_4bit_quant_type", "fp4")
        if kind not in ("nf4", "fp4"):
            raise _refusal(path, "bitsandbytes")(f"bnb_4bit_quant_type {kind!r} is not read "
                                                 "(nf4 and fp4 are)")
        return Quantization(f"bitsandbytes {kind}", "bnb")
    if config.get("load_in_8bit"):
        return Quantization("bitsandbytes int8", "bnb")
    raise _refusal(path, "bitsandbytes")("neither load_in_4bit nor load_in_8bit is set")


def _group(config: dict, refuse) -> tuple[tuple[int, int], ...]:
    """GPTQ's and AWQ's group_size as a block of one row (-1: the whole row, one group)."""
    size = config.get("group_size", 128)
    if size == -1:
        return ()
    if not _positive_ints([size], 1):
        raise refuse(f"group_size must be a positive integer or -1, got {size!r}")
    return ((1, size),)


def _positive_ints(values, count: int) -> bool:
    return (isinstance(values, (list, tuple)) and len(values) == count and
            all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values))
