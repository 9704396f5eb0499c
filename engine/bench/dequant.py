"""Dequantizing benchmark: what reading a quantized checkpoint's weight back costs.

    swarmscope bench dequant [--rows 11008] [--columns 4096] [--repeats 5] [--json]

swarmscope computes in bf16 or fp32, so a quantized checkpoint's weights are dequantized as they
load (engine/loading/quantized.py). Each format's weight, of random values in the layout its
quantizer writes, is read back as loading reads it (`read_plain`) and timed beside reading the
same matrix stored plain in bf16 (one copy into the model's bf16 parameter), in one run: the
median milliseconds per matrix, and the ratio to the plain read."""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from engine.cli.options import check_at_least
from engine.errors import SwarmscopeError
from engine.loading.quantization_config import read_quantization
from engine.loading.quantized import read_plain

GROUP = 128  # the group of columns (or block side) the formats below scale by


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=11008,
                        help="the matrix's rows (default 11008: a 7B model's MLP)")
    parser.add_argument("--columns", type=int, default=4096, help="its columns (default 4096)")
    parser.add_argument("--repeats", type=int, default=5, help="timed reads each (default 5)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")


def run(args: argparse.Namespace) -> int:
    try:
        check_at_least({"--repeats": (args.repeats, 1), "--rows": (args.rows, GROUP),
                        "--columns": (args.columns, GROUP)})
        if args.rows % GROUP or args.columns % GROUP:
            raise ValueError(f"--rows and --columns must be multiples of {GROUP}")
        results = measure(args.rows, args.columns, args.repeats)
    except (ValueError, SwarmscopeError) as exc:
        print(f"swarmscope bench dequant: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"rows": args.rows, "columns": args.columns, "formats": results},
                         indent=1))
        return 0
    print(f"{args.rows} x {args.columns} matrix, median of {args.repeats} reads")
    print(f"{'format':<18}{'ms':>9}{'x plain bf16':>14}")
    for row in results:
        print(f"{row['format']:<18}{row['ms']:>9.1f}{row['x_plain']:>14.1f}")
    return 0


def measure(rows: int, columns: int, repeats: int) -> list[dict]:
    """Each format's median milliseconds to read one matrix back, and its ratio to the plain
    bf16 read, timed in turn round by round (so a change in the machine's load falls on all)."""
    readers = {"bf16 (plain)": _plain(rows, columns)} | {
        label: _quantized(config, tensors(rows, columns), rows, columns)
        for label, (config, tensors) in FORMATS.items()}
    times: dict[str, list[float]] = {label: [] for label in readers}
    for _ in range(repeats):
        for label, read in readers.items():
            start = time.perf_counter()
            read()
            times[label].append((time.perf_counter() - start) * 1e3)
    plain = statistics.median(times["bf16 (plain)"])
    return [{"format": label, "ms": statistics.median(ms),
             "x_plain": statistics.median(ms) / plain} for label, ms in times.items()]


def _plain(rows: int, columns: int) -> Callable[[], None]:
    stored = torch.randn(rows, columns).to(torch.bfloat16)
    param = torch.empty_like(stored)
    return lambda: param.copy_(stored)


def _quantized(config: dict, stored: dict[str, torch.Tensor], rows: int,
               columns: int) -> Callable[[], None]:
    quantization = read_quantization({"quantization_config": config}, Path("config.json"))
    name = "w.qweight" if "w.qweight" in stored else "w.weight"
    param = torch.empty(rows, columns, dtype=torch.bfloat16)
    # copied in as LlamaModel.from_state_dict fills a parameter
    return lambda: param.copy_(read_plain(quantization, "w.weight", name, (rows, columns),
                                          stored.get))


def _gptq(rows: int, columns: int) -> dict[str, torch.Tensor]:
    """AutoGPTQ's int4 layout: qweight [in / 8, out], qzeros [groups, out / 8], scales."""
    return {"w.qweight": _words(columns // 8, rows), "w.qzeros": _zeros(rows, columns),
            "w.scales": _scales(rows, columns)}


def _awq(rows: int, columns: int) -> dict[str, torch.Tensor]:
    """AutoAWQ's GEMM layout: qweight [in, out / 8], qzeros [groups, out / 8], scales."""
    return {"w.qweight": _words(columns, rows // 8), "w.qzeros": _zeros(rows, columns),
            "w.scales": _scales(rows, columns)}


def _fp8_blocks(rows: int, columns: int) -> dict[str, torch.Tensor]:
    """transformers' fp8: e4m3 weights, a scale per 128 x 128 block (Qwen3's -FP8)."""
    return {"w.weight": torch.randn(rows, columns).to(torch.float8_e4m3fn),
            "w.weight_scale_inv": torch.rand(rows // GROUP, columns // GROUP) / 100}


def _words(rows: int, columns: int) -> torch.Tensor:
    return torch.randint(-2 ** 31, 2 ** 31 - 1, (rows, columns), dtype=torch.int32)


def _zeros(rows: int, columns: int) -> torch.Tensor:
    """GPTQ's and AWQ's zero points, packed eight a word: [groups, out / 8]."""
    return _words(columns // GROUP, rows // 8)


def _scales(rows: int, columns: int) -> torch.Tensor:
    return torch.rand(columns // GROUP, rows, dtype=torch.float16) / 100


FORMATS = {
    "gptq int4": ({"quant_method": "gptq", "bits": 4, "group_size": GROUP, "desc_act": False},
                  _gptq),
    "awq int4": ({"quant_method": "awq", "bits": 4, "group_size": GROUP, "version": "gemm"},
                 _awq),
    "fp8 blocks": ({"quant_method": "fp8", "weight_block_size": [GROUP, GROUP]}, _fp8_blocks),
}
