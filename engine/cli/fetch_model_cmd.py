"""`swarmscope fetch-model [default]`: fetch and convert the embedded model if it is missing."""
from __future__ import annotations

import sys

from engine.errors import SwarmscopeError
from engine.loading import default_model


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "fetch-model", help="download and convert the default model into the cache (a no-op "
                            "when it is there)")
    parser.add_argument("model", nargs="?", default="default", choices=["default"],
                        help="which model to fetch (only the embedded default)")
    parser.add_argument("--force", action="store_true",
                        help="fetch and convert it again, over a cached copy (a damaged one)")
    parser.set_defaults(func=run)


def _print_progress(message: str, fraction: float) -> None:
    print(f"[{fraction:4.0%}] {message}", flush=True)


def run(args) -> int:
    try:
        folder = default_model.ensure_default_model(_print_progress, force=args.force)
    except SwarmscopeError as exc:
        print(f"swarmscope fetch-model: {exc}", file=sys.stderr)
        return 1
    print(f"{default_model.NAME}: {folder}")
    return 0
