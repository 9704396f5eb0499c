"""Quantized checkpoints, dequantized as they are read (engine/loading/weights.py): swarmscope
computes in bf16 or fp32, so a weight stored in 8 bits or fewer with its scales is read back as
the matrix those give, as transformers does when it dequantizes one on a CPU.

Read: transformers' `fp8` (Qwen3's and Mistral's FP8 releases, DeepSeek's layout: `weight_scale_inv`
per 128 x 128 block, per tensor or per row; ue8m0 scales too), `fbgemm_fp8` (`weight_scale` per
row), and compressed-tensors' (llm-compressor's, RedHatAI's `-FP8-dynamic`, `-quantized.w8a8`,
`-quantized.w4a16`): fp8 or int weights stored as they are (`float-quantized`, `int-quantized`,
`naive-quantized`) or packed into int32 (`pack-quantized`), with `weight_scale` per tensor, row,
group of columns or block, `weight_zero_point` where asymmetric, `weight_g_idx` where groups were
taken in activation order. Activations and the KV cache are computed unquantized: their scales
are read past. Others (GPTQ's and AWQ's own layouts, bitsandbytes, nvfp4, …) are refused."""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.errors import ModelLoadError

# Tensors that are not the model's, beside the weights they scale: the weights' (read with
# them), the activations' and the KV cache's (read past: those are computed unquantized)
WEIGHT_PARTS = ("weight_scale", "weight_scale_inv", "weight_zero_point", "weight_g_idx",
                "weight_shape")
READ_PAST = ("input_scale", "input_zero_point", "input_scale_ub", "activation_scale",
             "output_scale", "output_zero_point", "k_scale", "v_scale")
PACKED = "weight_packed"  # compressed-tensors' pack-quantized weights, in int32 words
# compressed-tensors' formats whose weights are stored one value each, or packed
STORED_FORMATS = ("float-quantized", "int-quantized", "naive-quantized")
FORMATS = STORED_FORMATS + ("pack-quantized",)
STRATEGIES = ("tensor", "channel", "group", "block")
QUANTIZED_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2, torch.int8, torch.uint8,
                    torch.int32)


@dataclass(frozen=True, slots=True)
class Quantization:
    """How a checkpoint's quantized weights are stored, as its quantization_config says."""
    label: str  # what the weights are, as a user reads it: "fp8", "compressed-tensors int4"
    blocks: tuple[tuple[int, int], ...] = ()  # (rows, columns) a scale may cover, as configured
    packed_bits: tuple[int, ...] = ()  # bits of a packed value (pack-quantized), one per group

    def plain_names(self, stored: Iterable[str]) -> dict[str, str]:
        """The model's tensors among `stored`: plain name -> stored name (a packed weight's
        `X.weight_packed` read as `X.weight`), scales and the like left out."""
        names = {}
        for name in stored:
            base, _, last = name.rpartition(".")
            if last in WEIGHT_PARTS or last in READ_PAST:
                continue
            names[f"{base}.weight" if last == PACKED else name] = name
        return names


def read_quantization(cfg: dict, path: Path) -> Quantization | None:
    """config.json's quantization_config (None where it has none); a ModelLoadError naming
    `path` where it is a kind this engine does not read."""
    config = cfg.get("quantization_config")
    if not config:
        return None
    if not isinstance(config, dict):
        raise ModelLoadError(path, f"quantization_config must be an object, got {config!r}")
    method = config.get("quant_method")
    if method == "fp8":
        return _fp8(config, path)
    if method == "fbgemm_fp8":
        return Quantization("fp8 (fbgemm)")
    if method == "compressed-tensors":
        return _compressed_tensors(config, path)
    raise ModelLoadError(path, f"quantized checkpoints by {method or config!r} are not read "
                               "(read: fp8, fbgemm_fp8 and compressed-tensors' fp8 and int "
                               "weights); use the model's unquantized weights, a compressed-"
                               "tensors release or its GGUF file")


def _fp8(config: dict, path: Path) -> Quantization:
    block = config.get("weight_block_size")
    if block is not None and not _positive_ints(block, 2):
        raise ModelLoadError(path, f"quantization_config's weight_block_size must be two "
                                   f"positive integers, got {block!r}")
    if config.get("expert_dtype", "fp8") != "fp8":
        raise ModelLoadError(path, f"quantization_config's expert_dtype "
                                   f"{config['expert_dtype']!r} is not read (fp8 is)")
    return Quantization("fp8", (tuple(block),) if block else ())


def _compressed_tensors(config: dict, path: Path) -> Quantization:
    def refuse(problem: str) -> ModelLoadError:
        return ModelLoadError(path, f"compressed-tensors quantization_config: {problem}")

    status = config.get("quantization_status", "compressed")
    if status != "compressed":
        raise refuse(f"quantization_status {status!r} is not read (compressed is)")
    for kind in ("sparsity_config", "transform_config"):  # a 2:4 layout, or rotated weights
        if config.get(kind) and (kind != "sparsity_config"
                                 or config[kind].get("format", "dense") != "dense"):
            raise refuse(f"{kind} is not read")
    groups = config.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise refuse("config_groups must name at least one group")
    blocks, bits, kinds = [], [], []
    for name, group in groups.items():
        weights = group.get("weights") if isinstance(group, dict) else None
        if not isinstance(weights, dict):
            raise refuse(f"group {name!r} has no weights")
        form = group.get("format") or config.get("format")
        if form not in FORMATS:
            raise refuse(f"format {form!r} is not read ({', '.join(FORMATS)} are)")
        kind, width = weights.get("type"), weights.get("num_bits")
        if not ((kind == "float" and width == 8) or
                (kind == "int" and isinstance(width, int) and width in (1, 2, 4, 8))):
            raise refuse(f"group {name!r}'s {width}-bit {kind} weights are not read (8-bit "
                         "float and 1, 2, 4 or 8-bit int are)")
        kinds.append(f"{'fp' if kind == 'float' else 'int'}{width}")
        strategy = weights.get("strategy")
        if strategy not in STRATEGIES:
            raise refuse(f"group {name!r}'s strategy {strategy!r} is not read "
                         f"({', '.join(STRATEGIES)} are)")
        if strategy == "group":
            size = weights.get("group_size")
            if not _positive_ints([size], 1):
                raise refuse(f"group {name!r}'s group_size must be a positive integer")
            blocks.append((1, size))
        elif strategy == "block":
            block = weights.get("block_structure")
            if not _positive_ints(block, 2):
                raise refuse(f"group {name!r}'s block_structure must be two positive integers")
            blocks.append(tuple(block))
        if form == "pack-quantized":
            bits.append(width)
    return Quantization(f"compressed-tensors {'/'.join(dict.fromkeys(kinds))}",
                        tuple(dict.fromkeys(blocks)), tuple(dict.fromkeys(bits)))


def _positive_ints(values, count: int) -> bool:
    return (isinstance(values, (list, tuple)) and len(values) == count and
            all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values))


def dequantize(stored: torch.Tensor, scale: torch.Tensor | None, zero: torch.Tensor | None,
               groups: torch.Tensor | None, blocks: tuple[tuple[int, int], ...]
               ) -> torch.Tensor:
    """The fp32 matrix [rows, columns] a quantized one stores: (stored - zero) x scale, the
    scale (and zero) expanded over the block of the matrix each covers; `groups`: the scale
    column of each matrix column, where columns were grouped out of order."""
    assert stored.ndim == 2, stored.shape
    if scale is None:
        raise ValueError("has no weight_scale or weight_scale_inv beside it")
    values = stored.float()
    if zero is not None:
        values -= _spread(zero.float(), values.shape, groups, blocks)
    return values.mul_(_spread(_scale_values(scale), values.shape, groups, blocks))


def _scale_values(scale: torch.Tensor) -> torch.Tensor:
    if scale.dtype == torch.uint8:  # ue8m0: a power of two by its biased exponent
        return (scale.float() - 127).exp2()
    return scale.float()


def _spread(grid: torch.Tensor, shape: torch.Size, groups: torch.Tensor | None,
            blocks: tuple[tuple[int, int], ...]) -> torch.Tensor:
    """`grid` (one value, one a row, or one a block) as a matrix of `shape`."""
    rows, columns = shape
    if grid.numel() == 1:
        return grid.reshape(())
    if grid.ndim == 1:  # one a row, stored flat
        grid = grid[:, None]
    if grid.ndim != 2:
        raise ValueError(f"scales of shape {tuple(grid.shape)} do not fit a "
                         f"{rows} x {columns} weight")
    if groups is not None:  # each column's group by an index
        if (groups.shape != (columns,) or grid.shape[0] not in (1, rows)
                or int(groups.max()) >= grid.shape[1]):
            raise ValueError(f"weight_g_idx of shape {tuple(groups.shape)} does not fit a "
                             f"{rows} x {columns} weight with {grid.shape[1]} groups")
        return grid[:, groups.long()]
    high, wide = _block(rows, columns, *grid.shape, blocks)
    return grid.repeat_interleave(high, 0)[:rows].repeat_interleave(wide, 1)[:, :columns]


def _block(rows: int, columns: int, grid_rows: int, grid_columns: int,
           blocks: tuple[tuple[int, int], ...]) -> tuple[int, int]:
    """The rows and columns each scale covers: a configured block that many of tile the
    matrix (the last ones cut short), else the one an exact division gives."""
    for high, wide in blocks:
        if math.ceil(rows / high) == grid_rows and math.ceil(columns / wide) == grid_columns:
            return high, wide
    if rows % grid_rows == 0 and columns % grid_columns == 0:
        return rows // grid_rows, columns // grid_columns
    raise ValueError(f"scales of shape ({grid_rows}, {grid_columns}) do not tile a "
                     f"{rows} x {columns} weight")


def unpack(words: torch.Tensor, bits: int, rows: int, columns: int) -> torch.Tensor:
    """compressed-tensors' packing undone: `bits`-bit values, value i of a row at bit i x bits
    of its int32 words, stored offset by 2^(bits - 1) -> signed int32 [rows, columns]."""
    assert words.dtype == torch.int32 and 32 % bits == 0, (words.dtype, bits)
    per_word = 32 // bits
    if words.shape != (rows, math.ceil(columns / per_word)):
        raise ValueError(f"{tuple(words.shape)} packed words do not hold a {rows} x {columns} "
                         f"matrix of {bits}-bit values")
    shifts = torch.arange(0, 32, bits, dtype=torch.int32)
    values = (words.unsqueeze(-1) >> shifts) & ((1 << bits) - 1)  # [rows, words, per_word]
    return values.reshape(rows, -1)[:, :columns] - (1 << (bits - 1))


def read_plain(plain: str, stored: str, shape: tuple[int, ...],
               read: Callable[[str], torch.Tensor | None], quantization: Quantization
               ) -> torch.Tensor:
    """The model's tensor `plain` (of `shape`, an expert's matrix the last two), stored as
    `stored`, dequantized where it is stored quantized; `read(name)` reads a stored tensor
    (None where there is none); ValueError says what does not fit."""
    base = plain.removesuffix("weight")
    weight = read(stored)
    if weight.dtype not in QUANTIZED_DTYPES:
        return weight
    zero = read(base + "weight_zero_point")
    if stored.endswith(PACKED):
        rows, columns = shape[-2:]
        weight = _unpacked(weight, rows, columns, quantization.packed_bits)
        if zero is not None and zero.dtype == torch.int32:  # packed down its columns
            zero = _unpacked(zero.T, zero.shape[1], rows, quantization.packed_bits).T
    scale = read(base + "weight_scale_inv")
    return dequantize(weight, scale if scale is not None else read(base + "weight_scale"), zero,
                      read(base + "weight_g_idx"), quantization.blocks)


def _unpacked(words: torch.Tensor, rows: int, columns: int, widths: tuple[int, ...]
              ) -> torch.Tensor:
    """Packed values of the one configured width the words fit."""
    for bits in widths:
        if words.shape[-1] == math.ceil(columns / (32 // bits)):
            return unpack(words, bits, rows, columns)
    raise ValueError(f"{tuple(words.shape)} packed words hold no {rows} x {columns} matrix of "
                     f"{' or '.join(map(str, widths)) or 'any'}-bit values")
