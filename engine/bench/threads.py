"""CPU threads benchmark: one seeded swarm at each thread count, with every core free and with
other processes keeping cores busy.

Each op of a forward pass waits at its end for the slowest of its threads, so where another
program holds a core, the thread that lost it holds up all the others, and fewer threads can be
faster. Each count plans with its own t(N) (cached per count; measured first where missing), as
the window's *CPU threads* control would switch it. The engines run on the "measured" clock
(session time is the steps' wall time; tool waits are skipped) and take turns in phases of
`--phase` session seconds, so a spell of this machine running slow lands on every count alike.
The "busy" swarms run beside the busy processes, the "swing" ones beside them in every other
phase of theirs (another program that comes and goes), the "idle" ones alone. `auto` is a swarm
whose count is tuned as it runs (Engine.tune_threads, engine/thread_tuner.py), starting at one
thread per core; its row says how its steps' time split between counts."""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from contextlib import contextmanager

from engine.cli.options import MODEL_HELP, add_device_options, check_at_least, thread_count
from engine.thread_tuner import AUTO, physical_cores

LOADS = ("idle", "busy", "swing")


def add_arguments(parser) -> None:
    parser.add_argument("--model", default="default", help=MODEL_HELP)
    add_device_options(parser, threads=False)
    parser.add_argument("--counts", default=None, metavar="N,M,...",
                        help="thread counts to compare, auto among them for the tuned count "
                             "(default: one per core, half that, 1, auto)")
    parser.add_argument("--busy", type=int, default=1, metavar="PROCESSES",
                        help="processes spinning on a core each beside the busy swarms, and "
                             "in every other phase of the swinging ones (0: idle only)")
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
          f"{'x first':>9}  time at each count")
    for r in rows:
        split = ", ".join(f"{count}: {share:.0%}" for count, share in r["time_at"].items())
        print(f"{r['threads']:>7} {r['load']:<5}{r['tokens_per_s']:>10.1f}{r['step_ms_p50']:>13.1f}"
              f"{r['mean_batch']:>7.2f}{r['steps']:>7}{r['x_first']:>9.2f}  {split}")
    return 0


def _counts(text: str | None) -> list[int | str]:
    """The counts asked for (numbers and `auto`), in order, the first the one the others are
    compared with."""
    cores = physical_cores()
    if text is None:
        return list(dict.fromkeys((cores, max(cores // 2, 1), 1, AUTO)))
    try:
        counts = [thread_count(part.strip(), tuned=True) for part in text.split(",")]
    except argparse.ArgumentTypeError as exc:
        raise ValueError(f"--counts: each {exc}") from None
    return list(dict.fromkeys(counts))


def measure(args, counts: list[int | str]) -> list[dict]:
    import torch

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
    cores = physical_cores()
    engines, threads, curve = {}, {}, None
    progress = lambda message: print(f"  {message}", file=sys.stderr)
    for load in loads:
        for count in counts:  # each plans with its count's curve, the one before's until then
            engine = Engine(loaded, SwarmConfig(seed=args.seed, clock="measured"),
                            Controls(swarm_size=args.agents, tool_latency_s=args.tool_latency),
                            calibration=curve)
            curve = engine.use_threads(cores if count == AUTO else count, progress=progress)
            if count == AUTO:
                engine.tune_threads(progress)
            engines[load, count], threads[load, count] = engine, curve.threads
    print(f"  threads {', '.join(map(str, counts))} in turn, {args.phase:g} s phases, "
          f"{args.duration:g} s of session time each" +
          (f"; {args.busy} busy process(es)" if args.busy else ""), file=sys.stderr)
    rounds = 0
    while any(e.now() < args.duration for e in engines.values()):
        rounds += 1
        for load in loads:
            with _busy(args.busy if load == "busy" or load == "swing" and rounds % 2 else 0):
                for count in counts:
                    engine = engines[load, count]
                    if engine.now() < args.duration:
                        set_cpu_threads(threads[load, count])  # its curve, kernels: set above
                        engine.run(duration_s=min(args.phase, args.duration - engine.now()))
                        threads[load, count] = torch.get_num_threads()  # auto's may move
    rows = []
    for (load, count), engine in engines.items():
        engine.close()
        summary = summarize(engine.records.snapshot())
        rows.append({"threads": count, "load": load,
                     "tokens_per_s": summary.emitted / engine.now(),
                     "step_ms_p50": summary.step_ms_p50, "mean_batch": summary.mean_batch,
                     "steps": summary.steps, "t1_ms": engine.calibration.t_ms(1),
                     "time_at": {count: 1.0} if count != AUTO else engine.thread_tuner.shares()})
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
