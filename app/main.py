"""`swarmscope` with no subcommand: the desktop window. A script can start it, let it run, save a
screenshot and exit 0: `swarmscope --screenshot out.png --quit-after 20` (also offscreen)."""
from __future__ import annotations

import argparse
import math
import os
import signal
import sys
from typing import Callable

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from app.engine_factory import EngineSpec
from app.display import display_problem
from app.main_window import MainWindow
from app.session_traces import SessionTraces
from app.theme import THEMES, Theme, apply_theme
from engine.cli.options import (MODEL_HELP, add_device_options, add_serve_option,
                                add_thinking_option, add_version_option)
from engine.errors import SwarmscopeError


DEFAULT_SIZE = (1600, 1000)


def _close_on_signals(window: MainWindow) -> Callable[[], None]:
    """Ctrl+C in the terminal, or SIGTERM, closes the window as its close button does: the
    engine stops and the trace is finished (a gzipped one needs its trailer). Qt's loop runs no
    Python while idle, so a timer lets the interpreter see the signal; without this, Ctrl+C
    printed a traceback from inside a slot and the window ran on. Returns the undoing of it, for
    when the window is gone (a timer left calling Python as the process ends can crash it)."""
    previous = {sig: signal.signal(sig, lambda *_: window.close())
                for sig in (signal.SIGINT, signal.SIGTERM)}
    wake = QTimer()
    wake.timeout.connect(lambda: None)
    wake.start(200)

    def undo() -> None:
        wake.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return undo


def _default_size(app: QApplication) -> tuple[int, int]:
    """DEFAULT_SIZE, or less on a smaller screen (a laptop's), so the window does not run past
    its edges. Offscreen (screenshots, tests) there is no screen to fit."""
    if app.platformName() == "offscreen":
        return DEFAULT_SIZE
    screen = app.primaryScreen().availableGeometry()
    return min(DEFAULT_SIZE[0], screen.width()), min(DEFAULT_SIZE[1], screen.height())


def _size(text: str) -> tuple[int, int]:
    width, x, height = text.lower().partition("x")
    if not (x and width.isdigit() and height.isdigit() and int(width) > 0 and int(height) > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not WIDTHxHEIGHT in pixels, e.g. 1280x800")
    return int(width), int(height)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="swarmscope", description="The swarmscope window.")
    parser.add_argument("--model", default="default",
                        help=MODEL_HELP)
    add_device_options(parser, tuned=True)
    parser.add_argument("--agents", type=int, default=None,
                        help="simulated agents at start (default 8, or 0 with --serve)")
    add_serve_option(parser, "the live session")
    add_thinking_option(parser)
    parser.add_argument("--trace-out", metavar="FILE",
                        help="record the session here, later ones (Ctrl+M) beside it, "
                             "numbered (default: a new file in the user data dir each; 'none' "
                             "records nothing)")
    parser.add_argument("--replay", metavar="TRACE", help="open a recorded trace instead of "
                        "running the engine")
    parser.add_argument("--screenshot", metavar="PNG", help="save the window here before quitting")
    parser.add_argument("--quit-after", type=float, metavar="SECONDS",
                        help="close the window after this many seconds")
    parser.add_argument("--theme", choices=THEMES, default="dark")
    add_version_option(parser)
    parser.add_argument("--size", type=_size, default=None,
                        help=f"window size WxH (default {DEFAULT_SIZE[0]}x{DEFAULT_SIZE[1]}, "
                             "or the screen's size where that is smaller)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.agents is None:
        args.agents = 0 if args.serve else 8
    if args.agents < (0 if args.serve else 1):
        print(f"swarmscope: --agents must be >= {0 if args.serve else 1}", file=sys.stderr)
        return 2
    if args.quit_after is not None and not 0 <= args.quit_after < math.inf:
        print(f"swarmscope: --quit-after must be a number of seconds >= 0, got {args.quit_after}",
              file=sys.stderr)
        return 2
    problem = display_problem()
    if problem:
        print(f"swarmscope: {problem}", file=sys.stderr)
        return 2
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("swarmscope")
    theme = Theme.load(args.theme)
    apply_theme(app, theme)
    window = MainWindow(theme, SessionTraces(args.trace_out))
    try:  # before the window shows: a port in use is an error, not a window that cannot serve
        if args.serve:
            window.serve(*args.serve)
    except SwarmscopeError as exc:
        print(f"swarmscope: {exc}", file=sys.stderr)
        return 2
    least = window.minimumSize()
    if args.size and (args.size[0] < least.width() or args.size[1] < least.height()):
        print(f"swarmscope: --size {args.size[0]}x{args.size[1]} is below the window's least size "
              f"{least.width()}x{least.height()}; it opens at that or larger", file=sys.stderr)
    window.resize(*(args.size or _default_size(app)))
    stop_closing_on_signals = _close_on_signals(window)
    window.show()
    if args.replay:
        window.open_trace(args.replay)
    else:
        window.start_session(EngineSpec(args.model, args.dtype, args.device, args.agents,
                                        thinking=args.thinking, threads=args.threads))
    if args.quit_after is not None:
        def finish() -> None:
            if args.screenshot:
                window.poll(force=True)
                window.grab().save(args.screenshot)
            window.close()
        QTimer.singleShot(int(args.quit_after * 1000), finish)
    app.exec()
    stop_closing_on_signals()
    # Join the engine thread before Python tears down Qt objects (avoids crashes at exit).
    window.stop_engine()
    if not window.join_threads():
        # Python's teardown would destroy the still-running QThread, which aborts (exit 134);
        # the engine reports progress at least once per calibration point, so this is a hang.
        print("swarmscope: the engine thread did not stop; exiting without waiting for it",
              file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(0)
    window.deleteLater()
    app.processEvents()
    return 0


if __name__ == "__main__":
    sys.exit(main())
