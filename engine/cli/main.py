"""`swarmscope`: with no subcommand it starts the desktop app; otherwise runs a subcommand.

Each subcommand lives in its own module under engine/cli/ exposing `register(subparsers)`, which
adds its parser and sets `func` to a callable taking the parsed args and returning an exit code."""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from engine.cli.options import add_version_option
from engine.errors import SwarmscopeError

# Modules under engine/cli/ that each add one subcommand.
COMMANDS = (
    "generate_cmd",
    "fetch_model_cmd",
    "models_cmd",
    "run_cmd",
    "trace_cmd",
    "calibrate_cmd",
    "bench_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="swarmscope",
        description="Watch and steer how batching and speculative decoding share one pool of "
                    "compute slack. With no subcommand, starts the desktop app.")
    add_version_option(parser)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"engine.cli.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # the command as typed ("generate", "bench spec"), for messages: known before the parse
    name = " ".join(argv[:2] if argv[:1] == ["bench"] else argv[:1])
    if name.startswith("-"):
        name = ""  # the window's options
    try:
        return _run(argv, name)
    except KeyboardInterrupt:  # Ctrl+C where a command does not stop by itself: a model
        # loading, the imports before anything runs
        print(f"swarmscope{' ' + name if name else ''}: interrupted", file=sys.stderr)
        return 130


def _run(argv: list[str], name: str) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        return _help()
    if not argv or argv[0].startswith("-") and argv[0] != "--version":
        # The app owns its own options (--model, --trace-out, --screenshot, ...); engine/ never
        # imports Qt, so the app is loaded by name only here.
        return importlib.import_module("app.main").main(argv)
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except SwarmscopeError as exc:  # the commands report their own; this is the net under them
        print(f"swarmscope {name}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `swarmscope trace check t.jsonl | head`: the reader had enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 0


def _help() -> int:
    """The commands, then the window's own options (no COMMAND)."""
    build_parser().print_help()
    print("\nWith no COMMAND, the window:\n")
    try:
        importlib.import_module("app.main").build_parser().print_help()
    except ImportError as exc:  # Qt's libraries missing: the commands still work
        print(f"(its options cannot be listed here: {exc})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
