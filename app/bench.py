"""GUI frame rate with 16 lanes and 10,000 steps of history; engine tokens/s with the window open
vs headless on the same seeded swarm. Run: `swarmscope bench gui [--model tiny-test]`."""
from __future__ import annotations

import argparse
import json
import time


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=10_000, help="history length for the fps test")
    parser.add_argument("--lanes", type=int, default=16)
    parser.add_argument("--frames", type=int, default=90, help="redraws timed for the fps test")
    parser.add_argument("--model", default="tiny-test", help="model for the tokens/s comparison")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--duration", type=float, default=20.0,
                        help="seconds per engine run (headless, then windowed)")
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--skip-engine", action="store_true", help="only the frame-rate test")
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


def engine_rate(args, windowed: bool) -> float:
    """Emitted tokens per second of the same seeded swarm (measured clock), window open or not."""
    from engine.controls import Controls
    from engine.engine import Engine
    from engine.loading import load_model
    from engine.swarm import SwarmConfig

    loaded = load_model(args.model, dtype=args.dtype)
    engine = Engine(loaded, SwarmConfig(seed=0, clock="measured"),
                    controls=Controls(swarm_size=args.agents))
    if not windowed:
        # The same loop the app's worker runs, minus the window, for the same wall time.
        start = time.perf_counter()
        while time.perf_counter() - start < args.duration:
            engine.step()
        elapsed = time.perf_counter() - start
    else:
        from PySide6.QtCore import QTimer

        app, window = _open_window()
        start = time.perf_counter()
        window.start_live(build=lambda progress: engine)
        QTimer.singleShot(int(args.duration * 1000), window.close)
        app.exec()
        elapsed = time.perf_counter() - start
    emitted = sum(rec.emitted for rec in engine.records.snapshot())
    engine.close()
    return emitted / elapsed


def run(args) -> int:
    fps = frame_rate(args.steps, args.lanes, args.frames)
    result = {"fps": round(fps, 1), "steps": args.steps, "lanes": args.lanes}
    if not args.skip_engine:
        headless = engine_rate(args, windowed=False)
        windowed = engine_rate(args, windowed=True)
        result.update(headless_tok_s=round(headless, 1), windowed_tok_s=round(windowed, 1),
                      ratio=round(windowed / headless, 3))
    if args.json:
        print(json.dumps(result))
    else:
        print(f"GUI redraw: {result['fps']} fps with {args.lanes} lanes and {args.steps} steps "
              f"of history (target >= 30)")
        if "ratio" in result:
            print(f"engine: {result['headless_tok_s']} tok/s headless, "
                  f"{result['windowed_tok_s']} tok/s with the window open, "
                  f"ratio {result['ratio']} (target >= 0.95)")
    return 0
