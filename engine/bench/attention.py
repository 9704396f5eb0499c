"""The engine's attention: the GPU kernel against the torch path, parted calls against one.

On a GPU where hip_kernels built, the engine's attention runs its kernel; elsewhere, and as the
fallback, its torch path (SDPA over gathered blocks, grouped by a plan made once per step). This
times both on the same inputs, side by side, so the kernel's worth is a ratio from one run:

    swarmscope bench attention [--device auto] [--dtype auto] [--heads 32 --kv-heads 8 --head-dim 128]
                               [--lanes 1 4 16] [--drafts 0 2 4 8] [--contexts 512 8192] [--json]

Each shape is B lanes of 1 + k query tokens at context ctx, in blocks of 16. Times are medians in
ms of one call; the plan, made once per step for every layer, is timed apart. Where no kernel is
built (a CPU) only the torch path is timed, and the report says why. Where the plan parts a
shape's lanes into calls that each gather at most GATHER_MAX_BYTES of keys and values
(attention.split_by_context), the torch path is timed with them in one call too ("whole"), the
plan the engine made before: the parting's worth, again a ratio from one run.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import hip_kernels
from hip_kernels.bench import verify_batch
from engine.attention import (plan_attention, position_bytes, runs_kernels,
                              torch_paged_attention)
from engine.cli.options import add_device_options, check_at_least
from engine.devices import (cpu_threads, dtype_name, hardware, resolve_device, resolve_dtype,
                            set_cpu_threads, synchronize)
from engine.errors import SwarmscopeError

BLOCK_SIZE = 16


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_device_options(parser)
    parser.add_argument("--heads", type=int, default=32, help="query heads (default 32)")
    parser.add_argument("--kv-heads", type=int, default=8, help="KV heads (default 8)")
    parser.add_argument("--head-dim", type=int, default=128, help="(default 128)")
    parser.add_argument("--lanes", type=int, nargs="+", default=[1, 4, 16], metavar="B")
    parser.add_argument("--drafts", type=int, nargs="+", default=[0, 2, 4, 8], metavar="K",
                        help="drafts per lane: 1 + K query tokens each")
    parser.add_argument("--contexts", type=int, nargs="+", default=[512, 8192], metavar="CTX")
    parser.add_argument("--repeats", type=int, default=20, help="timed calls per shape")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")


def median_ms(fn, device: torch.device, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def run(args: argparse.Namespace) -> int:
    check_at_least({"--heads": (args.heads, 1), "--kv-heads": (args.kv_heads, 1),
                    "--head-dim": (args.head_dim, 2), "--repeats": (args.repeats, 1)})
    for option, values, least in (("--lanes", args.lanes, 1), ("--drafts", args.drafts, 0),
                                  ("--contexts", args.contexts, 1)):
        for value in values:
            check_at_least({option: (value, least)})
    if args.heads % args.kv_heads:
        raise SwarmscopeError(f"--heads {args.heads} is not a multiple of --kv-heads {args.kv_heads}")
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    set_cpu_threads(args.threads)
    kernels = runs_kernels(torch.empty(0, device=device))  # as the engine decides
    key_bytes = position_bytes(args.kv_heads, args.head_dim, dtype)
    scale = args.head_dim ** -0.5
    torch.manual_seed(0)
    rows = []
    for lanes in args.lanes:
        for drafts in args.drafts:
            for ctx in args.contexts:
                batch = verify_batch(lanes, drafts, ctx, args.heads, args.kv_heads,
                                     args.head_dim, dtype, BLOCK_SIZE, device)
                plan_args = (batch[3], batch[4], batch[5], BLOCK_SIZE,
                             args.heads // args.kv_heads, dtype)
                plan = plan_attention(*plan_args, key_bytes=key_bytes)
                whole = plan_attention(*plan_args)  # no bound on what a call gathers
                row = {"lanes": lanes, "drafts": drafts, "ctx": ctx,
                       "torch_ms": median_ms(lambda: torch_paged_attention(*batch, scale, plan),
                                             device, args.repeats),
                       "plan_ms": median_ms(lambda: plan_attention(*plan_args,
                                                                   key_bytes=key_bytes),
                                            device, args.repeats),
                       "calls": len(plan.groups), "whole_ms": None, "parted_over_whole": None,
                       "kernel_ms": None, "kernel_over_torch": None}
                if len(whole.groups) < len(plan.groups):
                    row["whole_ms"] = median_ms(
                        lambda: torch_paged_attention(*batch, scale, whole), device, args.repeats)
                    row["parted_over_whole"] = row["torch_ms"] / row["whole_ms"]
                if kernels:
                    row["kernel_ms"] = median_ms(lambda: hip_kernels.paged_attention(*batch, scale),
                                                 device, args.repeats)
                    row["kernel_over_torch"] = row["kernel_ms"] / row["torch_ms"]
                rows.append(row)
    report = {"device": str(device), "threads": cpu_threads(device), "dtype": dtype_name(dtype),
              "heads": args.heads, "kv_heads": args.kv_heads, "head_dim": args.head_dim,
              "block_size": BLOCK_SIZE, "kernels": kernels,
              "kernels_why_not": "" if kernels else (hip_kernels.why_unavailable()
                                                     or "the kernels are for GPUs"),
              "shapes": rows}
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"attention on {hardware(str(device), report['threads'])}, {report['dtype']}, heads "
          f"{args.heads}/{args.kv_heads}, head_dim {args.head_dim}, blocks of {BLOCK_SIZE}; "
          f"medians of {args.repeats} calls")
    if not kernels:
        print(f"the kernel is not timed: {report['kernels_why_not']}")
    print(f"{'B':>3} {'k':>2} {'ctx':>6} | {'kernel ms':>9} {'torch ms':>9} {'plan ms':>8} "
          f"{'calls':>5} {'whole ms':>9} | {'kernel/torch':>12} {'parted/whole':>12}")
    for row in rows:
        kernel = "-" if row["kernel_ms"] is None else f"{row['kernel_ms']:.3f}"
        ratio = "-" if row["kernel_over_torch"] is None else f"{row['kernel_over_torch']:.2f}"
        whole = "-" if row["whole_ms"] is None else f"{row['whole_ms']:.3f}"
        parted = "-" if row["parted_over_whole"] is None else f"{row['parted_over_whole']:.2f}"
        print(f"{row['lanes']:>3} {row['drafts']:>2} {row['ctx']:>6} | {kernel:>9} "
              f"{row['torch_ms']:>9.3f} {row['plan_ms']:>8.3f} {row['calls']:>5} {whole:>9} | "
              f"{ratio:>12} {parted:>12}", flush=True)
    return 0
