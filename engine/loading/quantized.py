"""A quantized checkpoint's weights, dequantized as they are read (engine/loading/weights.py):
swarmscope computes in bf16 or fp32, so a weight stored in 8 bits or fewer is read back as the
matrix its scales give, as transformers does when it dequantizes one on a CPU. How the
checkpoint stores them comes from its config (quantization_config.py).

Layouts: "scaled" (fp8, fbgemm_fp8, compressed-tensors): `weight` in fp8 or int8, or
`weight_packed` in int32 words with `weight_shape`, and `weight_scale` (`weight_scale_inv` for
fp8) per tensor, row, group of columns or block, `weight_zero_point` where asymmetric,
`weight_g_idx` where columns were grouped out of order. GPTQ: `qweight` [in / n, out] packed
down its columns, `qzeros` [groups, out / n], `scales` [groups, out], `g_idx` [in]. AWQ:
`qweight` [in, out / 8] and `qzeros` packed along the rows in AutoAWQ's order, `scales`
[groups, out]. bitsandbytes: 4-bit `weight` [values / 2, 1] in uint8 (two codes a byte, the
first in its high half), `weight.quant_map` (nf4's or fp4's 16 values), `weight.absmax` per
block (itself 8-bit with `weight.nested_absmax` and `nested_quant_map` where double quantized),
and `weight.quant_state.bitsandbytes__nf4` (JSON: the block size, the matrix's shape); 8-bit
`weight` in int8 and `SCB`, each row's absmax. Activations' and the KV cache's scales are read
past: those are computed unquantized."""
from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable

import torch

from engine.loading.quantization_config import Quantization

# Tensors beside a weight that are not the model's: what reading it back takes, and the
# activations' and KV cache's scales (read past)
WEIGHT_PARTS = ("weight_scale", "weight_scale_inv", "weight_zero_point", "weight_g_idx",
                "weight_shape", "qzeros", "scales", "g_idx", "SCB", "weight_format")
READ_PAST = ("input_scale", "input_zero_point", "input_scale_ub", "activation_scale",
             "output_scale", "output_zero_point", "k_scale", "v_scale")
PACKED = ("weight_packed", "qweight")  # packed weights, read as the plain `weight`
QUANTIZED_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2, torch.int8, torch.uint8, torch.int32)
BNB_STATES = ("quant_state.bitsandbytes__nf4", "quant_state.bitsandbytes__fp4")
AWQ_COLUMNS = [0, 4, 1, 5, 2, 6, 3, 7]  # AutoAWQ packs columns 0 2 4 6 1 3 5 7 of each word

Read = Callable[[str], "torch.Tensor | None"]  # a stored tensor by name; None where there is none


def plain_names(stored: Iterable[str]) -> dict[str, str]:
    """The model's tensors among `stored`, plain name -> stored name: a packed weight's
    `X.qweight` read as `X.weight`, scales and the like left out."""
    names = {}
    for name in stored:
        base, _, last = name.rpartition(".")
        if last not in WEIGHT_PARTS and last not in READ_PAST and ".weight." not in name:
            names[f"{base}.weight" if last in PACKED else name] = name  # (".weight.": bnb's)
    return names


def plain_shape(quantization: Quantization, plain: str, stored: str,
                header: Callable[[str], tuple[int, ...]], read: Read) -> tuple[int, ...]:
    """The shape of the matrix a weight holds (`header`: a stored tensor's shape)."""
    if quantization.layout == "bnb":
        state = _bnb_state(plain, read)
        return tuple(state["shape"]) if state else header(stored)
    if not stored.endswith(PACKED):
        return header(stored)
    if quantization.layout == "scaled":
        shape = read(plain.removesuffix("weight") + "weight_shape")
        if shape is None:
            raise ValueError("has no weight_shape beside it")
        return tuple(int(n) for n in shape.flatten())
    *lead, rows, columns = header(stored)
    per_word = 32 // quantization.packed_bits[0]
    if quantization.layout == "gptq":  # [in / per_word, out]
        return (*lead, columns, rows * per_word)
    return (*lead, columns * per_word, rows)  # AWQ's [in, out / per_word]


def read_plain(quantization: Quantization, plain: str, stored: str, shape: tuple[int, ...],
               read: Read) -> torch.Tensor:
    """The model's tensor `plain` (of `shape`: its expert's matrix the last two), stored as
    `stored`, dequantized where it is stored quantized; ValueError says what does not fit."""
    base = plain.removesuffix("weight")
    weight = read(stored)
    if weight.dtype not in QUANTIZED_DTYPES:
        return weight
    rows, columns = shape[-2:]
    if quantization.layout == "bnb":
        return _bnb(plain, weight, shape, read)
    if quantization.layout == "gptq":
        return _gptq(quantization, base, weight, rows, columns, read)
    if quantization.layout == "awq":
        return _awq(quantization, base, weight, rows, columns, read)
    zero = read(base + "weight_zero_point")
    if stored.endswith(PACKED):
        weight = _unpacked(weight, rows, columns, quantization.packed_bits)
        if zero is not None and zero.dtype == torch.int32:  # packed down its columns
            zero = _unpacked(zero.T, zero.shape[1], rows, quantization.packed_bits).T
    scale = read(base + "weight_scale_inv")
    return dequantize(weight, scale if scale is not None else read(base + "weight_scale"), zero,
                      read(base + "weight_g_idx"), quantization.blocks)


def _gptq(quantization: Quantization, base: str, words: torch.Tensor, rows: int, columns: int,
          read: Read) -> torch.Tensor:
    bits = quantization.packed_bits[0]
    values = unpack(words.T.contiguous(), bits, rows, columns)  # [out, in]
    zeros, scales = _needed(read, base, "qzeros", "scales")  # [groups, out / n], [groups, out]
    zero = unpack(zeros, bits, zeros.shape[0], rows).T.int() + quantization.zero_offset
    return dequantize(values, scales.T, zero, read(base + "g_idx"), quantization.blocks)


def _awq(quantization: Quantization, base: str, words: torch.Tensor, rows: int, columns: int,
         read: Read) -> torch.Tensor:
    values = _awq_columns(unpack(words, 4, columns, rows))  # [in, out]
    zeros, scales = _needed(read, base, "qzeros", "scales")  # [groups, out / 8], [groups, out]
    zero = _awq_columns(unpack(zeros, 4, zeros.shape[0], rows))
    # scaled as stored, each group of rows by its scale, and handed on as a transposed view:
    # the copy into the model's weight transposes it (in bf16: half the bytes of a transposed
    # fp32 copy made here; with the unpacking above, AWQ matrices read back ~1.4x faster)
    blocks = tuple((wide, high) for high, wide in quantization.blocks)
    return dequantize(values, scales, zero, None, blocks).T


def _awq_columns(values: torch.Tensor) -> torch.Tensor:
    """AutoAWQ's columns back in order, each word's eight."""
    words = values.shape[1] // 8
    return values.reshape(-1, words, 8)[:, :, AWQ_COLUMNS].reshape(values.shape)


def _bnb(plain: str, weight: torch.Tensor, shape: tuple[int, ...], read: Read) -> torch.Tensor:
    if weight.dtype == torch.int8:  # LLM.int8: each row scaled by its absmax / 127
        (absmax,) = _needed(read, plain.removesuffix("weight"), "SCB")
        return dequantize(weight, absmax / 127, None, None, ())
    state = _bnb_state(plain, read)
    if state is None:
        raise ValueError("has no quant_state.bitsandbytes__nf4 (or __fp4) beside it")
    values, absmax = _needed(read, plain + ".", "quant_map", "absmax")
    if "nested_blocksize" in state:  # the absmaxes 8-bit blockwise too, about an offset
        code, top = _needed(read, plain + ".", "nested_quant_map", "nested_absmax")
        absmax = (code[absmax.long()] * top.repeat_interleave(state["nested_blocksize"])[
            :absmax.numel()] + state["nested_offset"])
    codes = torch.stack([weight.flatten() >> 4, weight.flatten() & 15], 1).flatten()
    count = math.prod(shape)
    if codes.numel() < count or absmax.numel() * state["blocksize"] < count:
        raise ValueError(f"does not hold the {count} values of its quant_state's shape {shape}")
    scale = absmax.float().repeat_interleave(state["blocksize"])[:count]
    return (values.float()[codes[:count].long()] * scale).reshape(shape)


def _bnb_state(plain: str, read: Read) -> dict | None:
    """A bitsandbytes 4-bit weight's quant_state, its JSON stored as bytes."""
    for name in BNB_STATES:
        stored = read(f"{plain}.{name}")
        if stored is not None:
            try:
                return json.loads(bytes(stored.tolist()))
            except ValueError:
                raise ValueError(f"its {name} is not JSON") from None
    return None


def _needed(read: Read, base: str, *names: str) -> list[torch.Tensor]:
    tensors = [read(base + name) for name in names]
    missing = [name for name, tensor in zip(names, tensors) if tensor is None]
    if missing:
        raise ValueError(f"has no {' or '.join(base + name for name in missing)} beside it")
    return tensors


def dequantize(stored: torch.Tensor, scale: torch.Tensor | None, zero: torch.Tensor | None,
               groups: torch.Tensor | None, blocks: tuple[tuple[int, int], ...]
               ) -> torch.Tensor:
    """The fp32 matrix [rows, columns] a quantized one stores: (stored - zero) x scale, the
    scale (and zero) expanded over the block of the matrix each covers; `groups`: the scale
    column of each matrix column, where columns were grouped out of order."""
    assert stored.ndim == 2, stored.shape
    if scale is None:
        raise ValueError("has no weight_scale or weight_scale_inv beside it")
    values, scale = stored.float().contiguous(), _scale_values(scale)
    rows, columns = values.shape
    if groups is not None and scale.ndim == 2 and torch.equal(
            groups, torch.arange(columns) * scale.shape[1] // columns):
        groups = None  # (GPTQ stores each column's group even where they are in order)
    if groups is None and scale.ndim == 2:
        high, wide = _block(rows, columns, *scale.shape, blocks)
        if rows % high == 0 and columns % wide == 0:  # whole blocks: each a broadcast view
            tiles = values.view(rows // high, high, columns // wide, wide)
            if zero is not None:
                tiles -= zero.float()[:, None, :, None]
            tiles *= scale[:, None, :, None]
            return values
    if zero is not None:
        values -= _spread(zero.float(), values.shape, groups, blocks)
    return values.mul_(_spread(scale, values.shape, groups, blocks))


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
            raise ValueError(f"a group index of shape {tuple(groups.shape)} does not fit a "
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
    """Packed values undone: `bits`-bit values, value i of a row at bit i x bits of its int32
    words (as compressed-tensors, GPTQ and AWQ pack), less 2^(bits - 1) (compressed-tensors
    stores each so offset; for GPTQ's and AWQ's values and zeros alike the offset cancels)
    -> int8 [rows, columns]."""
    assert words.dtype == torch.int32 and 32 % bits == 0, (words.dtype, bits)
    per_word = 32 // bits
    if words.shape != (rows, math.ceil(columns / per_word)):
        raise ValueError(f"{tuple(words.shape)} packed words do not hold a {rows} x {columns} "
                         f"matrix of {bits}-bit values")
    # Byte by byte, the words' least significant first (a little-endian machine's order), each
    # byte's values from its low bits up: a quarter of int32's memory moved in each pass, and
    # the result one byte a value (`swarmscope bench dequant` on machine A, this code and the
    # int32 unpacking before it run in turn: GPTQ int4 matrices read back ~1.6x faster)
    stored = words.contiguous().view(torch.uint8)
    if bits == 8:  # v - 128 is v with its top bit flipped, read as signed
        return (stored ^ 0x80).view(torch.int8).reshape(rows, -1)[:, :columns]
    values = (stored.unsqueeze(-1) >> torch.arange(0, 8, bits, dtype=torch.uint8)
              ) & ((1 << bits) - 1)
    return values.view(torch.int8).reshape(rows, -1)[:, :columns] - (1 << (bits - 1))


def _unpacked(words: torch.Tensor, rows: int, columns: int, widths: tuple[int, ...]
              ) -> torch.Tensor:
    """Packed values of the one configured width the words fit."""
    for bits in widths:
        if words.shape[-1] == math.ceil(columns / (32 // bits)):
            return unpack(words, bits, rows, columns)
    raise ValueError(f"{tuple(words.shape)} packed words hold no {rows} x {columns} matrix of "
                     f"{' or '.join(map(str, widths)) or 'any'}-bit values")
