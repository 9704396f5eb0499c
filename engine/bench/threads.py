"""CPU threads benchmark: one seeded swarm at each thread count, with every core free and with
other processes keeping cores busy.

Each op of a forward pass waits at its end for the slowest of its threads, so where another
program holds a core, the thread that lost it holds up all the others, and fewer threads can be
faster. Each count plans with its own t(N) (cached per count; measured first where missing), as
the window's *CPU threads* control would switch it. The engines run on the "measured" clock
(session time is the steps' wall time; tool waits are skipped) and take turns in phases of
`--phase` session seconds, so a spell of this machine running slow lands on every count alike;
the busy processes run in every other round of phases."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from contextlib import contextmanager

from engine.cli.options import MODEL_HELP, add_device_options, check_at_least

LOADS = ("idle", "busy")


def add_arguments(parser) -> None:
    parser.add_argument("--model", default="default", help=MODEL_HELP)
    add_device_options(parser, threads=False)
    parser.add_argument("--counts", default=None, metavar="N,M,...",
                        help="thread counts to compare (default: one per core, half that, 1)")
    parser.add_argument("--busy", type=int, default=1, metavar="PROCESSES",
                        help="processes spinning on a core each in the busy rounds (0: none)")
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--duration", type=float, default=40.0,
                        help="session seconds per count and load")
    parser.add_argument("--phase", type=float, default=5.0,
                        help="session seconds a count runs before the next takes its turn")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tool-latency", type=float, default=1.0)
    parser.add_argument("--json", action="store_true")


def run(args) -> int:
    from engine.errors import SwarmscopeError
    try:
        counts = _counts(args.counts)
        for option, value in (("--duration", args.duration), ("--phase", args.phase)):
            if not 0 < value < math.inf:
                raise ValueError(f"{option} must be a finite number > 0, got {value:g}")
        check_at_least({"--agents": (args.agents, 1), "--busy": (args.busy, 0),
                        "--tool-latency": (args.tool_latency, 0)})
        rows = measure(args, counts)
    except (SwarmscopeError, ValueError) as exc:
        print(f"swarmscope bench threads: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'threads':>7} {'load':<5}{'tokens/s':>10}{'step p50 ms':>13}{'batch':>7}{'steps':>7}"
          f"{'x first':>9}")
    for r in rows:
        print(f"{r['threads']:>7} {r['load']:<5}{r['tokens_per_s']:>10.1f}{r['step_ms_p50']:>13.1f}"
              f"{r['mean_batch']:>7.2f}{r['steps']:>7}{r['x_first']:>9.2f}")
    return 0


def _counts(text: str | None) -> list[int]:
    """The counts asked for, in order, the first the one the others are compared with."""
    cores = os.cpu_count() or 1
    if text is None:
        return list(dict.fromkeys((cores, max(cores // 2, 1), 1)))
    counts = []
    for part in text.split(","):
        if not part.strip().isdigit() or not 1 <= int(part) <= cores:
            raise ValueError(f"--counts: each must be 1..{cores} (this machine's cores), got "
                             f"{part.strip()!r}")
        counts.append(int(part))
    return list(dict.fromkeys(counts))


def measure(args, counts: list[int]) -> list[dict]:
    from engine.controls import Controls
    from engine.devices import set_cpu_threads
    from engine.engine import Engine
    from engine.errors import SwarmscopeError
    from engine.loading import load_model
    from engine.swarm.config import SwarmConfig
    from engine.telemetry.summary import summarize

    loaded = load_model(args.model, dtype=args.dtype, device=args.device)
    if loaded.device.type != "cpu":
        raise SwarmscopeError(f"threads set a CPU's pace, not {loaded.device}'s; use --device cpu")
    loads = LOADS if args.busy else LOADS[:1]
    engines, curve = {}, None
    for load in loads:
        for count in counts:  # each plans with its count's curve, the one before's until then
            engine = Engine(loaded, SwarmConfig(seed=args.seed, clock="measured"),
                            Controls(swarm_size=args.agents, tool_latency_s=args.tool_latency),
                            calibration=curve)
            curve = engine.use_threads(count, progress=lambda message: print(f"  {message}",
                                                                             file=sys.stderr))
            engines[load, count] = engine
    print(f"  threads {', '.join(map(str, counts))} in turn, {args.phase:g} s phases, "
          f"{args.duration:g} s of session time each" +
          (f"; {args.busy} busy process(es) every other round" if args.busy else ""),
          file=sys.stderr)
    while any(e.now() < args.duration for e in engines.values()):
        for load in loads:
            with _busy(args.busy if load == "busy" else 0):
                for count in counts:
                    engine = engines[load, count]
                    if engine.now() < args.duration:
                        set_cpu_threads(count)  # its curve and kernels: set up above
                        engine.run(duration_s=min(args.phase, args.duration - engine.now()))
    rows = []
    for (load, count), engine in engines.items():
        engine.close()
        summary = summarize(engine.records.snapshot())
        rows.append({"threads": count, "load": load,
                     "tokens_per_s": summary.emitted / engine.now(),
                     "step_ms_p50": summary.step_ms_p50, "mean_batch": summary.mean_batch,
                     "steps": summary.steps, "t1_ms": engine.calibration.t_ms(1)})
    for row in rows:
        first = next(r for r in rows if r["load"] == row["load"])
        row["x_first"] = row["tokens_per_s"] / first["tokens_per_s"]
    return rows


@contextmanager
def _busy(processes: int):
    """`processes` Pythons spinning, one core's worth each, for the block's duration."""
    spinning = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(processes)]
    try:
        yield
    finally:
        for process in spinning:
            process.kill()
            process.wait()
