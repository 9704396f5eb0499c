"""Memory benchmark: the process's resident memory over one long seeded swarm session.

A live session runs for hours, and every step must leave memory as it found it: a native cache
that keeps something for each new shape of a step (oneDNN's kernels for every row count, SDPA's
brgemm kernels for every block shape) grows the process by gigabytes over a day though no tensor
is leaked. The swarm runs on the "measured" clock (tool waits skipped), resident memory sampled
`--samples` times; the verdict is the growth over the second half, MB per 1000 steps, where the
first half has met the shapes a session meets early. Reads /proc (Linux)."""
from __future__ import annotations

import json
import math
import sys

from engine.cli.options import MODEL_HELP, add_device_options, check_at_least
from engine.errors import SwarmscopeError


def add_arguments(parser) -> None:
    parser.add_argument("--model", default="default", help=MODEL_HELP)
    add_device_options(parser)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--duration", type=float, default=300.0,
                        help="session seconds (tool waits included, not waited)")
    parser.add_argument("--samples", type=int, default=10,
                        help="resident memory readings, evenly over the session")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")


def run(args) -> int:
    try:
        if not 0 < args.duration < math.inf:
            raise ValueError(f"--duration must be a finite number > 0, got {args.duration:g}")
        check_at_least({"--agents": (args.agents, 1), "--samples": (args.samples, 2)})
        samples = measure(args)
    except (SwarmscopeError, ValueError) as exc:
        print(f"swarmscope bench memory: {exc}", file=sys.stderr)
        return 2
    growth = growth_per_1000_steps(samples)
    if args.json:
        print(json.dumps({"samples": samples, "second_half_mb_per_1000_steps": growth}, indent=1))
        return 0
    print(f"{'session s':>10}{'steps':>8}{'resident MB':>13}")
    for s in samples:
        print(f"{s['session_s']:>10.0f}{s['steps']:>8}{s['resident_mb']:>13.0f}")
    print(f"growth over the second half: {growth:.1f} MB per 1000 steps")
    return 0


def measure(args) -> list[dict]:
    from engine.controls import Controls
    from engine.engine import Engine
    from engine.loading import load_model
    from engine.swarm.config import SwarmConfig

    resident_mb()  # fails before the model loads where /proc is missing
    loaded = load_model(args.model, dtype=args.dtype, device=args.device, threads=args.threads)
    engine = Engine(loaded, SwarmConfig(seed=args.seed, clock="measured"),
                    Controls(swarm_size=args.agents))
    samples = []
    try:
        for i in range(1, args.samples + 1):
            engine.run(duration_s=i * args.duration / args.samples - engine.now())
            samples.append({"session_s": engine.now(), "steps": engine.records.total,
                            "resident_mb": resident_mb()})
            print(f"  {engine.now():.0f} s, {engine.records.total} steps: "
                  f"{samples[-1]['resident_mb']:.0f} MB", file=sys.stderr)
    finally:
        engine.close()
    return samples


def growth_per_1000_steps(samples: list[dict]) -> float:
    """Resident memory gained from the middle sample to the last, per 1000 steps between them."""
    middle, last = samples[(len(samples) - 1) // 2], samples[-1]
    steps = max(last["steps"] - middle["steps"], 1)
    return 1000 * (last["resident_mb"] - middle["resident_mb"]) / steps


def resident_mb() -> float:
    """This process's resident memory, MB (VmRSS)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError as exc:
        raise SwarmscopeError(f"cannot read resident memory from /proc/self/status: {exc}")
    raise SwarmscopeError("/proc/self/status has no VmRSS line")
