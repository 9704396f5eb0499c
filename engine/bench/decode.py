"""Decode step time vs batch size and verify length, beside the weight-bandwidth floor.

A decode step streams every weight once, so its floor is weight bytes / memory bandwidth, both
measured here in the same run. Printed: step time for B = 1..32 decode lanes at a fixed context,
and for one lane verifying N = 1..64 tokens (the curve t(N) whose knee is the draft budget).

    swarmscope bench decode [--model default|random:smollm2-135m|PATH] [--dtype auto|fp32|bf16]
"""
from __future__ import annotations

import argparse
import json
import time

import torch

from engine.cli.options import add_device_options
from engine.config import PRESETS
from engine.devices import (cpu_threads, dtype_name, hardware, resolve_device, resolve_dtype,
                            set_cpu_threads, synchronize)
from engine.errors import SwarmscopeError
from engine.forward_batch import LaneInput
from engine.kv_cache import PagedKVCache
from engine.model import LlamaModel
from engine.runner import ModelRunner

BATCHES = (1, 2, 4, 8, 16, 32)
VERIFY_LENS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="default",
                        help="anything `swarmscope generate --model` takes, or random:PRESET for "
                             f"random weights of a preset's shapes ({', '.join(PRESETS)})")
    add_device_options(parser)
    parser.add_argument("--ctx", type=int, default=256, help="context length of every lane")
    parser.add_argument("--repeats", type=int, default=7, help="timed steps per point (best of; the minimum is what the code can do on a machine shared with other work)")
    parser.add_argument("--layout", default="packed", choices=("packed", "padded"))
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")


def _load(spec: str, dtype: str, device: str) -> LlamaModel:
    if spec.startswith("random:"):
        preset = spec.split(":", 1)[1]
        if preset not in PRESETS:
            raise SystemExit(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
        torch_device = resolve_device(device)
        return LlamaModel.random(PRESETS[preset], dtype=resolve_dtype(dtype, torch_device),
                                 device=torch_device)
    from engine.loading import load_model
    return load_model(spec, dtype=dtype, device=device).model


def measure_read_bandwidth(device: torch.device, num_bytes: int = 1 << 29) -> float:
    """Bytes per second of a streaming read (sum over a tensor far larger than any cache)."""
    data = torch.ones(num_bytes // 4, dtype=torch.float32, device=device)
    times = []
    for _ in range(5):
        synchronize(device)
        start = time.perf_counter()
        data.sum()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return num_bytes / min(times)


def _time_step(runner: ModelRunner, lanes: list[LaneInput], layout: str, repeats: int) -> float:
    """Best seconds of one forward over `lanes`; the cache is rolled back after each."""
    blocks, device = runner.kv.blocks, runner.model.device
    times = []
    for i in range(repeats + 2):  # two warm-up steps
        synchronize(device)
        start = time.perf_counter()
        runner.forward(lanes, layout=layout)
        synchronize(device)
        if i >= 2:
            times.append(time.perf_counter() - start)
        for lane in lanes:
            blocks.truncate(lane.seq_id, lane.start_pos)
    return min(times)


def run(args: argparse.Namespace) -> int:
    if args.ctx < 1 or args.repeats < 1:
        raise SwarmscopeError("--ctx and --repeats must be >= 1")
    torch.manual_seed(0)
    set_cpu_threads(args.threads)
    model = _load(args.model, args.dtype, args.device)
    config, device = model.config, model.device
    bandwidth = measure_read_bandwidth(device)
    floor_s = model.streamed_weight_bytes() / bandwidth
    block_size = 16
    per_lane_blocks = -(-(args.ctx + max(VERIFY_LENS)) // block_size)
    kv = PagedKVCache(config, max(BATCHES) * per_lane_blocks + 1, block_size, model.dtype, device)
    # KV contents do not change the cost, so lanes get room for ctx tokens without a prefill.
    for seq in range(max(BATCHES)):
        kv.blocks.ensure(seq, args.ctx)
        if kv.recurrent is not None:  # an empty state stands for the context
            kv.recurrent.start(seq, args.ctx)
    kv.k.normal_()
    kv.v.normal_()
    runner = ModelRunner(model, kv)
    token = lambda seq, n: [(seq * 31 + i * 7) % config.vocab_size for i in range(n)]
    batch_rows = []
    for b in BATCHES:
        # every token a guess, so that each timed pass starts where the last did
        lanes = [LaneInput(seq, token(seq, 1), args.ctx, 1, 1) for seq in range(b)]
        step = _time_step(runner, lanes, args.layout, args.repeats)
        batch_rows.append({"batch": b, "step_ms": 1e3 * step, "tokens_per_s": b / step,
                           "x_floor": step / floor_s})
    verify_rows = []
    for n in VERIFY_LENS:
        step = _time_step(runner, [LaneInput(0, token(0, n), args.ctx, n, n)], args.layout,
                          args.repeats)
        verify_rows.append({"n": n, "step_ms": 1e3 * step})
    t1 = verify_rows[0]["step_ms"]
    for row in verify_rows:
        row["x_t1"] = row["step_ms"] / t1
    report = {
        "model": args.model, "dtype": dtype_name(model.dtype),
        "device": str(device), "threads": cpu_threads(device), "ctx": args.ctx,
        "layout": args.layout, "weight_bytes": model.streamed_weight_bytes(),
        "read_bandwidth_gb_s": bandwidth / 1e9, "floor_ms": 1e3 * floor_s,
        "batches": batch_rows, "verify": verify_rows,
        "b8_speedup": batch_rows[3]["tokens_per_s"] / batch_rows[0]["tokens_per_s"],
    }
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"{args.model} {report['dtype']} on {hardware(str(device), report['threads'])}, ctx "
          f"{args.ctx}, {args.layout}: {report['weight_bytes'] / 1e6:.1f} MB of weights at "
          f"{report['read_bandwidth_gb_s']:.1f} GB/s -> floor {report['floor_ms']:.2f} ms/step")
    print(f"{'B':>4} {'step ms':>9} {'tok/s':>9} {'x floor':>8}")
    for row in batch_rows:
        print(f"{row['batch']:>4} {row['step_ms']:>9.2f} {row['tokens_per_s']:>9.1f} "
              f"{row['x_floor']:>8.2f}")
    print(f"B=8 aggregate tokens/s = {report['b8_speedup']:.2f} x B=1")
    print(f"{'N':>4} {'step ms':>9} {'x t(1)':>8}   (one lane verifying N tokens)")
    for row in verify_rows:
        print(f"{row['n']:>4} {row['step_ms']:>9.2f} {row['x_t1']:>8.2f}")
    return 0
