"""Swarm benchmark: one seeded swarm under off, fixed K, uniform and goodput, side by side.

Every policy replays the same scenario (seed, agents, tool latencies) on the "measured" clock:
session time advances by each step's real wall time and skips over waits for tools, so tokens/s
is real throughput of the engine while agents come and go, and the run takes only the busy time.
The four engines step in lockstep, one step each in turn, as bench spec's policies do: run one
after another, this machine's speed swings moved whole rows (off and uniform, which mostly behave
alike, came out 11 % apart).
Reports aggregate tokens/s, mean per-agent turn latency, mean live batch and acceptance.
`--k` is the fixed policy's K; uniform and goodput keep their default cap (engine/controls.py)."""
from __future__ import annotations

import json
import math
import sys

from engine.bench import in_turn
from engine.cli.options import MODEL_HELP, add_device_options, check_at_least
from engine.controls import ADAPTIVE_CAP, FIXED_K, Controls

POLICIES = ("off", "fixed", "uniform", "goodput")


def add_arguments(parser) -> None:
    parser.add_argument("--model", default="default", help=MODEL_HELP)
    add_device_options(parser)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--duration", type=float, default=90.0,
                        help="session seconds per policy (tool waits included, not waited)")
    parser.add_argument("--k", type=int, default=FIXED_K,
                        help=f"K for the fixed policy (uniform and goodput: up to {ADAPTIVE_CAP})")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tool-latency", type=float, default=1.0)
    parser.add_argument("--max-context", type=int, default=2048)
    parser.add_argument("--json", action="store_true")


def run(args) -> int:
    from engine.errors import SwarmscopeError
    from engine.swarm.config import MIN_CONTEXT
    try:
        if not 0 < args.duration < math.inf:
            raise ValueError(f"--duration must be a finite number > 0, got {args.duration:g}")
        check_at_least({"--agents": (args.agents, 1), "--max-context": (args.max_context,
                                                                        MIN_CONTEXT),
                        "--tool-latency": (args.tool_latency, 0)})
        rows = measure(args)
    except (SwarmscopeError, ValueError) as exc:  # ValueError: an option a config refused
        print(f"swarmscope bench swarm: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    header = f"{'policy':<10}{'tokens/s':>10}{'turn s':>9}{'turns':>7}{'batch':>7}" \
             f"{'accept':>8}{'steps':>7}{'preempt':>9}{'telem':>8}"
    print(header)
    for r in rows:
        acc = "-" if r["acceptance"] is None else f"{100 * r['acceptance']:.0f}%"
        turn = "-" if r["mean_turn_s"] is None else f"{r['mean_turn_s']:.2f}"
        print(f"{r['policy']:<10}{r['tokens_per_s']:>10.1f}{turn:>9}{r['turns']:>7}"
              f"{r['mean_batch']:>7.2f}{acc:>8}{r['steps']:>7}{r['preemptions']:>9}"
              f"{100 * r['telemetry_share']:>7.2f}%")
    best_other = max(r["tokens_per_s"] for r in rows if r["policy"] != "goodput")
    goodput = next(r["tokens_per_s"] for r in rows if r["policy"] == "goodput")
    print(f"goodput / best of the others: {goodput / best_other:.3f}")
    return 0


def measure(args) -> list[dict]:
    from engine.engine import Engine
    from engine.loading import load_model
    from engine.swarm.config import SwarmConfig
    from engine.telemetry.summary import summarize

    loaded = load_model(args.model, dtype=args.dtype, device=args.device, threads=args.threads)
    calibration = None
    engines = {}
    for policy in POLICIES:
        controls = Controls(policy=policy, k=args.k if policy == "fixed" else None,
                            swarm_size=args.agents, tool_latency_s=args.tool_latency)
        config = SwarmConfig(seed=args.seed, clock="measured", max_context=args.max_context)
        engines[policy] = Engine(loaded, config, controls, calibration=calibration)
        calibration = engines[policy].calibration  # measured (or loaded) once, shared by all
    print(f"  {', '.join(POLICIES)} in lockstep: {args.duration:.0f} s of session time each "
          f"(T={calibration.budget})", file=sys.stderr)
    _run_in_lockstep(list(engines.values()), args.duration)
    rows = []
    for policy, engine in engines.items():
        engine.close()
        summary = summarize(engine.records.snapshot())
        views = engine.agents()
        turns = sum(v.turns for v in views)
        turn_s = sum(v.mean_turn_s * v.turns for v in views if v.turns)
        rows.append({
            "policy": policy if policy != "fixed" else f"fixed{args.k}",
            "tokens_per_s": summary.emitted / engine.now(),
            "mean_turn_s": turn_s / turns if turns else None,
            "turns": turns, "mean_batch": summary.mean_batch,
            "acceptance": summary.acceptance, "steps": summary.steps,
            "preemptions": engine.kv_usage().preemptions,
            "telemetry_share": engine.telemetry_s / max(engine.busy_s, 1e-9)})
    return rows


def _run_in_lockstep(engines, duration_s: float) -> None:
    """One step of each engine in turn, the first rotating, until each has run `duration_s` of
    session time: a spell of this machine running slow lands on every policy alike."""
    turn = 0
    while True:
        running = [e for e in engines if e.now() < duration_s]
        if not running:
            return
        for engine in in_turn(running, turn):
            engine.step()
        turn += 1
