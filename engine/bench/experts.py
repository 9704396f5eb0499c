"""A mixture of experts beside a dense model of its active width: each one's t(N) and budget T.

    swarmscope bench experts [--hidden 1024] [--layers 16] [--experts 64] [--per-token 8]
                             [--expert-size 384] [--dtype auto] [--device auto] [--threads N]
                             [--repeats 5] [--json]

A decode step streams the weights once, so a dense model's next few tokens are nearly free. A
mixture's step reads only the experts its tokens chose, and each further token, a lane's or a
draft's, chooses experts of its own: the same step buys far fewer tokens. Both models have random
weights (their routers spread tokens over the experts about evenly; a trained router's skew
leaves somewhat more room) and the same attention, in 64-wide heads, four query heads to a KV
head; the dense model's MLP is as wide as the experts a token runs. Each is calibrated as
`swarmscope calibrate` times a model, for one lane of N = 1..32 tokens and B = 2..16 lanes of one.
"""
from __future__ import annotations

import argparse
import json
import sys

import torch

from engine.checkpoint_layout import num_weights
from engine.cli.options import add_device_options, check_at_least
from engine.config import ModelConfig
from engine.devices import (cpu_threads, dtype_name, free_memory_bytes, hardware,
                            resolve_device, resolve_dtype, set_cpu_threads)
from engine.errors import SwarmscopeError
from engine.kv_cache import PagedKVCache
from engine.model import LlamaModel
from engine.runner import ModelRunner
from engine.spec.calibration import BATCH_SHAPES, DEFAULT_CONTEXT, measure

QUERY_SIZES = (1, 2, 4, 8, 16, 32)
HEAD_DIM = 64
BLOCK_SIZE = 16


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_device_options(parser)
    parser.add_argument("--hidden", type=int, default=1024,
                        help="model width, a multiple of 64 (default 1024)")
    parser.add_argument("--layers", type=int, default=16, help="(default 16)")
    parser.add_argument("--experts", type=int, default=64, help="experts a layer (default 64)")
    parser.add_argument("--per-token", type=int, default=8,
                        help="experts a token runs (default 8)")
    parser.add_argument("--expert-size", type=int, default=384,
                        help="each expert's MLP width (default 384); the dense model's is "
                             "--per-token times it")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (default 5)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")


def configs(args: argparse.Namespace) -> dict[str, ModelConfig]:
    """The dense model and the mixture, alike but for their MLPs (Qwen3-MoE's shape, scaled)."""
    heads = args.hidden // HEAD_DIM
    dense = ModelConfig(vocab_size=1024, hidden_size=args.hidden,
                        intermediate_size=args.per_token * args.expert_size,
                        num_layers=args.layers, num_heads=heads, num_kv_heads=max(1, heads // 4),
                        max_position=4096, tie_word_embeddings=True)
    return {"dense": dense,
            "mixture": dense.with_(num_experts=args.experts, experts_per_token=args.per_token,
                                   expert_size=args.expert_size, normalize_expert_weights=True)}


def run(args: argparse.Namespace) -> int:
    check_at_least({"--hidden": (args.hidden, HEAD_DIM), "--layers": (args.layers, 1),
                    "--experts": (args.experts, 1), "--per-token": (args.per_token, 1),
                    "--expert-size": (args.expert_size, 1), "--repeats": (args.repeats, 1)})
    if args.hidden % HEAD_DIM or args.per_token > args.experts:
        raise SwarmscopeError(f"--hidden must be a multiple of {HEAD_DIM} and --per-token at "
                              f"most --experts, got {args.hidden}, {args.per_token} and "
                              f"{args.experts}")
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    set_cpu_threads(args.threads)
    models = configs(args)
    # random weights are drawn in fp32 on the CPU, then cast: the mixture's both at once
    needed = num_weights(models["mixture"]) * (4 + dtype.itemsize)
    free = free_memory_bytes(torch.device("cpu"))
    if free is not None and needed > free:
        raise SwarmscopeError(f"the mixture's random weights need {needed / 1e9:.1f} GB and "
                              f"{free / 1e9:.1f} GB is free; give fewer --layers or --experts")
    say = (lambda message: None) if args.json else (lambda message: print(message,
                                                                          file=sys.stderr))
    rows = {}
    for name, config in models.items():
        say(f"{name}: random weights, building matmul kernels")
        model = LlamaModel.random(config, dtype=dtype, device=device)
        if model.builds_kernels_per_row_count:  # as loading does (model.warm_up)
            model.warm_up()
        tokens = DEFAULT_CONTEXT + max(QUERY_SIZES)
        kv = PagedKVCache(config, max(BATCH_SHAPES) * -(-tokens // BLOCK_SIZE), BLOCK_SIZE,
                          dtype, device)
        say(f"{name}: timing forward passes")
        calibration = measure(ModelRunner(model, kv), config.vocab_size, device=str(device),
                              model=name, dtype=dtype_name(dtype), repeats=args.repeats,
                              query_sizes=QUERY_SIZES, decode_drafts=(), progress=say)
        t1 = calibration.t_ms(1)
        rows[name] = {"t1_ms": round(t1, 2), "budget": calibration.budget,
                      "weight_bytes": model.num_weight_bytes(),
                      "streamed_bytes": model.streamed_weight_bytes(),
                      "t_n_over_t1": {n: round(calibration.t_ms(n) / t1, 3)
                                      for n in QUERY_SIZES[1:]},
                      "t_b_over_t1": {b: round(ms / t1, 3) for b, ms in calibration.batch_points}}
        del model, kv  # the next model's room
    report = {"hardware": hardware(str(device), cpu_threads(device)), "dtype": dtype_name(dtype),
              "rows": rows}
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"{'':8} {'t(1) ms':>8} {'MB read':>8} " +
          " ".join(f"{'t(' + str(n) + ')':>6}" for n in QUERY_SIZES[1:]) + " " +
          " ".join(f"{'B=' + str(b):>6}" for b in BATCH_SHAPES) + f" {'T':>3}")
    for name, row in rows.items():
        print(f"{name:8} {row['t1_ms']:8.2f} {row['streamed_bytes'] / 1e6:8.1f} " +
              " ".join(f"{r:6.2f}" for r in row["t_n_over_t1"].values()) + " " +
              " ".join(f"{r:6.2f}" for r in row["t_b_over_t1"].values()) +
              f" {row['budget']:3d}")
    print(f"(t(N) and B lanes as ratios to each model's own t(1); MB read: a one-token step's "
          f"weights; {report['hardware']}, {report['dtype']})")
    return 0
