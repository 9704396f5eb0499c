"""GUI frame rate with 16 lanes and 10,000 steps of history; engine tokens/s with the window open
vs headless on the same seeded swarm. Run: `swarmscope bench gui [--model tiny-test]`.

The engine comparison runs the same work both ways: a seeded swarm on the virtual clock (session
time advances by the calibrated t(N), not by the wall clock) with the fixed-K policy takes the
same steps and emits the same tokens however fast the machine is, so only the wall time differs.
(Goodput's plan depends on measured step times, spec/live_cost.py, so two runs of it may draft
differently.) Each run is a process of its own, as a user runs them: headless, the engine steps
on the main thread (`swarmscope run --headless`); windowed, the app's worker thread loads the
model and steps while the window draws. (Torch work on two threads of one process costs both:
each gets an OpenMP team, and on a machine with few cores they contend.) Headless and windowed
runs alternate for `--rounds` rounds, so a slow spell of the machine touches both; the ratio's ±
is its standard error over those paired rounds (a 2-core machine's speed drifts by a tenth from
one run to the next, more than the window's few percent)."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from app.display import display_problem
from engine.bench.spec import ratio_spread
from engine.cli.options import DTYPE_HELP


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=10_000, help="history length for the fps test")
    parser.add_argument("--lanes", type=int, default=16)
    parser.add_argument("--frames", type=int, default=90, help="redraws timed for the fps test")
    parser.add_argument("--model", default="tiny-test", help="model for the tokens/s comparison")
    parser.add_argument("--dtype", default="auto", help=DTYPE_HELP)
    parser.add_argument("--engine-steps", type=int, default=150,
                        help="engine steps per run (each round: headless, then windowed)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="headless and windowed runs alternate this many times")
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--skip-engine", action="store_true", help="only the frame-rate test")
    parser.add_argument("--one-run", choices=("headless", "windowed"), help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def frame_rate(steps: int, lanes: int, frames: int) -> float:
    """Full-window redraws per second while the newest record changes every frame."""
    from app.history import History
    from engine.spec.calibration import Calibration
    from engine.telemetry.records import StepRecord

    app, window = _open_window()
    history = History()
    history.extend([StepRecord.make_dummy(i, batch=1 + (i * 7919) % lanes, budget=24)
                    for i in range(steps + frames)])
    window.dashboard.set_calibration(Calibration.make_dummy())
    app.processEvents()
    start = time.perf_counter()
    for frame in range(frames):
        window.dashboard.show_history(history, steps + frame)
        app.processEvents()  # paints what changed, as the event loop of a visible window would
    fps = frames / (time.perf_counter() - start)
    window.close()
    return fps


def _open_window():
    """The dark-themed main window at a fixed size, shown (offscreen works too)."""
    from PySide6.QtWidgets import QApplication

    from app.main_window import MainWindow
    from app.theme import Theme, apply_theme
    app = QApplication.instance() or QApplication([])
    theme = Theme.load("dark")
    apply_theme(app, theme)
    window = MainWindow(theme)
    window.resize(1600, 1000)
    window.show()
    return app, window


def engine_seconds(args, windowed: bool) -> tuple[float, int]:
    """(wall seconds, emitted tokens) of `args.engine_steps` steps of the seeded swarm, in this
    process: stepped by this thread (headless) or built and stepped by the window's worker."""
    from engine.controls import Controls
    from engine.engine import Engine
    from engine.loading import load_model
    from engine.swarm import SwarmConfig

    def build(progress=None) -> Engine:
        return Engine(load_model(args.model, dtype=args.dtype), SwarmConfig(seed=0, clock="virtual"),
                      controls=Controls(swarm_size=args.agents, policy="fixed"))

    if not windowed:
        engine = build()
        start = time.perf_counter()
        while engine.records.total < args.engine_steps:
            engine.step()
        elapsed = time.perf_counter() - start
    else:
        from PySide6.QtCore import QTimer

        app, window = _open_window()
        counted = _StopAfter(args.engine_steps)
        window.start_live(build=lambda progress: counted.wrap(build(progress)))
        done = QTimer()  # the app's own event loop runs meanwhile, as for a user
        done.timeout.connect(lambda: counted.done_at is not None and app.quit())
        done.start(100)
        app.exec()
        elapsed = counted.done_at - counted.started_at
        engine = counted.engine
        window.close()
    emitted = sum(rec.emitted for rec in engine.records.snapshot()[:args.engine_steps])
    engine.close()
    return elapsed, emitted


def _engine_run_in_a_process(args, mode: str) -> tuple[float, int]:
    command = [sys.executable, "-m", "engine.cli.main", "bench", "gui", "--one-run", mode,
               "--model", args.model, "--dtype", args.dtype, "--agents", str(args.agents),
               "--engine-steps", str(args.engine_steps)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{mode} run failed: {done.stderr.strip()[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result["seconds"], result["emitted"]


class _StopAfter:
    """The engine as the window's worker sees it, idling after `steps` steps; notes when its
    first step began and its last ended."""

    def __init__(self, steps: int) -> None:
        self._steps = steps
        self.engine = None
        self.started_at: float | None = None
        self.done_at: float | None = None

    def wrap(self, engine) -> "_StopAfter":
        self.engine = engine
        return self

    def step(self):
        if self.done_at is not None:
            return None
        if self.started_at is None:
            self.started_at = time.perf_counter()
        record = self.engine.step()
        if self.engine.records.total >= self._steps:
            self.done_at = time.perf_counter()
        return record

    def __getattr__(self, name):
        return getattr(self.engine, name)


def run(args) -> int:
    if min(args.engine_steps, args.rounds, args.steps, args.lanes, args.frames, args.agents) < 1:
        print("swarmscope bench gui: --steps, --lanes, --frames, --engine-steps, --rounds and "
              "--agents must be >= 1", file=sys.stderr)
        return 2
    problem = display_problem()
    if problem:  # as the window: said before Qt aborts
        print(f"swarmscope bench gui: {problem}", file=sys.stderr)
        return 2
    if args.one_run:
        seconds, emitted = engine_seconds(args, windowed=args.one_run == "windowed")
        print(json.dumps({"seconds": seconds, "emitted": emitted}))
        return 0
    fps = frame_rate(args.steps, args.lanes, args.frames)
    result = {"fps": round(fps, 1), "steps": args.steps, "lanes": args.lanes}
    if not args.skip_engine:
        runs = {"headless": [], "windowed": []}
        try:
            for _ in range(args.rounds):
                for mode in runs:
                    runs[mode].append(_engine_run_in_a_process(args, mode))
        except RuntimeError as exc:
            print(f"swarmscope bench gui: {exc}", file=sys.stderr)
            return 1
        if len({emitted for run in runs.values() for _, emitted in run}) != 1:
            print("swarmscope bench gui: the runs emitted different token counts; the seeded "
                  "swarm was not reproduced", file=sys.stderr)
            return 1
        headless, windowed = (sum(e for _, e in runs[mode]) / sum(s for s, _ in runs[mode])
                              for mode in ("headless", "windowed"))
        per_round = {mode: [e / s for s, e in runs[mode]] for mode in runs}
        spread = ratio_spread(per_round["windowed"], per_round["headless"])
        result.update(headless_tok_s=round(headless, 1), windowed_tok_s=round(windowed, 1),
                      ratio=round(windowed / headless, 3),
                      ratio_se=None if spread is None else round(spread, 3),
                      round_ratios=[round(w / h, 3) for w, h in zip(per_round["windowed"],
                                                                     per_round["headless"])],
                      engine_steps=args.engine_steps, rounds=args.rounds)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"GUI redraw: {result['fps']} fps with {args.lanes} lanes and {args.steps} steps "
              f"of history (target >= 30)")
        if "ratio" in result:
            print(f"engine ({args.engine_steps} steps x {args.rounds} rounds, same tokens): "
                  f"{result['headless_tok_s']} tok/s headless, {result['windowed_tok_s']} tok/s "
                  f"with the window open, ratio {result['ratio']}{_plus_minus(result['ratio_se'])} "
                  f"(target >= 0.95)")
    return 0


def _plus_minus(spread: float | None) -> str:
    return "" if spread is None else f" ± {spread:.3f}"
