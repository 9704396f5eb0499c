"""Recurrent layers' benchmark: a gated DeltaNet hybrid's steps against the same model attending.

    swarmscope bench recurrent [--device auto] [--dtype auto] [--hidden 1024] [--layers 24]
                               [--vocab 248320] [--ctx 512] [--lanes 8] [--rounds 5] [--json]

Random weights of Qwen3.5's shape (by default its 0.8B's: 24 layers of 1024, three in four gated
DeltaNet of hidden / 64 heads of 128, the others attending with hidden / 128 query heads and 2
KV heads of 256, an MLP 3.5 x hidden wide), and the same model with attention in every layer,
each with --lanes lanes filled to --ctx tokens. Then steps alternating between the two, --rounds
times: one lane one token, one lane verifying 5 and 9 tokens, and --lanes lanes one token each
(every token a guess, so that each step starts where the last did). The median milliseconds of
each, the hybrid's ratio, and the bytes a lane holds beside the cache's blocks."""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from engine.cli.options import add_device_options, check_at_least
from engine.config import ModelConfig
from engine.devices import (cpu_threads, dtype_name, hardware, resolve_device, resolve_dtype,
                            set_cpu_threads, synchronize)
from engine.errors import SwarmscopeError
from engine.forward_batch import LaneInput
from engine.kv_cache import PagedKVCache, recurrent_bytes_per_sequence
from engine.model import LlamaModel
from engine.runner import ModelRunner

BLOCK_SIZE = 16
VERIFY = (5, 9)  # tokens one lane verifies: a draft of 4 and of 8


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_device_options(parser)
    parser.add_argument("--hidden", type=int, default=1024,
                        help="hidden size, a multiple of 256 (default 1024: Qwen3.5-0.8B's)")
    parser.add_argument("--layers", type=int, default=24,
                        help="layers, a multiple of 4 (default 24)")
    parser.add_argument("--vocab", type=int, default=248_320, help="(default 248320)")
    parser.add_argument("--ctx", type=int, default=512, help="tokens each lane holds (default 512)")
    parser.add_argument("--lanes", type=int, default=8,
                        help="lanes of the batched step (default 8)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")


def shapes(hidden: int, layers: int, vocab: int) -> tuple[ModelConfig, ModelConfig]:
    """Qwen3.5's shape at this size: the hybrid, and the same with attention in every layer."""
    attending = ModelConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 7 // 2,
        num_layers=layers, num_heads=hidden // 128, num_kv_heads=2, head_dim=256, rotary_dim=64,
        qk_norm=True, gemma_norms=True, output_gate=True, tie_word_embeddings=True,
        conv_kernel=4, delta_key_heads=hidden // 64, delta_value_heads=hidden // 64)
    return attending.with_(delta_layers=tuple(i for i in range(layers) if (i + 1) % 4)), attending


def run(args: argparse.Namespace) -> int:
    check_at_least({"--hidden": (args.hidden, 256), "--layers": (args.layers, 4),
                    "--vocab": (args.vocab, 2), "--ctx": (args.ctx, 1),
                    "--lanes": (args.lanes, 1), "--rounds": (args.rounds, 1)})
    if args.hidden % 256 or args.layers % 4:  # (query heads a multiple of the 2 KV heads)
        raise SwarmscopeError("--hidden must be a multiple of 256 and --layers of 4")
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    set_cpu_threads(args.threads)
    torch.manual_seed(0)
    hybrid, attending = shapes(args.hidden, args.layers, args.vocab)
    runners = {"hybrid": _filled(hybrid, args, dtype, device),
               "attention": _filled(attending, args, dtype, device)}
    steps = ([("1 lane, 1 token", 1, 1)] + [(f"1 lane verifying {n}", 1, n) for n in VERIFY]
             + [(f"{args.lanes} lanes, 1 token each", args.lanes, 1)])
    rows = []
    for label, lanes, tokens in steps:
        times = {name: [] for name in runners}
        for _ in range(args.rounds + 1):  # the first round warms up
            for name, runner in runners.items():
                times[name].append(_step_ms(runner, lanes, tokens, args.ctx))
        ms = {name: statistics.median(t[1:]) for name, t in times.items()}
        rows.append({"step": label, "hybrid_ms": ms["hybrid"], "attention_ms": ms["attention"],
                     "x_attention": ms["hybrid"] / ms["attention"]})
    report = {"device": str(device), "threads": cpu_threads(device), "dtype": dtype_name(dtype),
              "hidden": args.hidden, "layers": args.layers, "ctx": args.ctx,
              "state_bytes_per_lane": recurrent_bytes_per_sequence(hybrid, dtype),
              "kv_bytes_per_token": {
                  name: PagedKVCache.bytes_per_block(c, BLOCK_SIZE, dtype) // BLOCK_SIZE
                  for name, c in (("hybrid", hybrid), ("attention", attending))},
              "steps": rows}
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"gated DeltaNet hybrid against attention in every layer on "
          f"{hardware(str(device), report['threads'])}, {report['dtype']}, {args.layers} layers "
          f"of {args.hidden}, lanes at {args.ctx} tokens, median of {args.rounds} rounds")
    print(f"{'step':<28}{'hybrid ms':>11}{'attention ms':>14}{'ratio':>8}")
    for row in rows:
        print(f"{row['step']:<28}{row['hybrid_ms']:>11.1f}{row['attention_ms']:>14.1f}"
              f"{row['x_attention']:>8.2f}")
    print(f"a lane's recurrent states: {report['state_bytes_per_lane'] / 1e6:.1f} MB; KV a token: "
          f"{report['kv_bytes_per_token']['hybrid']} B (hybrid), "
          f"{report['kv_bytes_per_token']['attention']} B (attention)")
    return 0


def _filled(config: ModelConfig, args, dtype: torch.dtype, device) -> ModelRunner:
    """A runner of the random model of `config` whose lanes hold --ctx tokens each."""
    model = LlamaModel.random(config, dtype=dtype, device=device)
    blocks = args.lanes * (-(-(args.ctx + max(VERIFY)) // BLOCK_SIZE) + 1)
    runner = ModelRunner(model, PagedKVCache(config, blocks, BLOCK_SIZE, dtype, device))
    for lane in range(args.lanes):
        runner.forward([LaneInput(lane, [(7 * i + lane) % config.vocab_size
                                         for i in range(args.ctx)], 0, 1)])
    return runner


def _step_ms(runner: ModelRunner, lanes: int, tokens: int, ctx: int) -> float:
    """One step's milliseconds, its tokens taken back after it."""
    step = [LaneInput(lane, [(lane + j) % runner.model.config.vocab_size
                             for j in range(tokens)], ctx, 1, tokens) for lane in range(lanes)]
    synchronize(runner.model.device)
    start = time.perf_counter()
    runner.forward(step)
    synchronize(runner.model.device)
    ms = 1e3 * (time.perf_counter() - start)
    for lane in range(lanes):
        runner.kv.truncate(lane, ctx)
    return ms
