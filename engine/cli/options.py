"""Checks of option values that name the option as the user typed it: the configs' own errors
name their fields (swarm_size for --agents), and a draft model folder is read only when a step
first drafts with it."""
from __future__ import annotations

import argparse
import functools
import json
import math
from importlib import metadata
from pathlib import Path

from engine.errors import ModelLoadError, SwarmscopeError
from engine.serve.http_api import DEFAULT_HOST, DEFAULT_PORT
from engine.thread_tuner import AUTO, usable_cores

MODEL_HELP = ("default | tiny-test | a model folder | a GGUF file (converted once) | ORG/NAME in "
              "the Hugging Face cache | ollama:NAME[:TAG] (a model Ollama has pulled)")
DTYPE_HELP = "auto (bf16 on GPUs and on CPUs with bf16 dot instructions, else fp32) | bf16 | fp32 | fp16 (GPU)"
DEVICE_HELP = "auto | cpu | cuda | rocm | cuda:N"


def add_version_option(parser: argparse.ArgumentParser) -> None:
    """--version, read from the installed package only when asked: a source checkout run with
    PYTHONPATH (as on a lent GPU machine) has none installed, and must still start."""
    parser.add_argument("--version", action=_PrintVersion)


class _PrintVersion(argparse.Action):
    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                         nargs=0, help="show the version and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            found = metadata.version("swarmscope")
        except metadata.PackageNotFoundError:
            found = "(not installed: run from a source checkout)"
        print(f"swarmscope {found}")
        parser.exit()


def add_thinking_option(parser: argparse.ArgumentParser) -> None:
    """--thinking / --no-thinking: the chat template's enable_thinking (None: not passed)."""
    parser.add_argument("--thinking", action=argparse.BooleanOptionalAction, default=None,
                        help="--no-thinking turns a thinking model's reasoning off (the chat "
                             "template's enable_thinking, as Qwen3's); default: the template's")


def add_serve_option(parser: argparse.ArgumentParser, session: str) -> None:
    """--serve [HOST:]PORT: answer OpenAI's chat completions API (engine/serve/)."""
    parser.add_argument("--serve", type=_address, metavar="[HOST:]PORT",
                        help="answer OpenAI's chat completions API there (host default "
                             f"{DEFAULT_HOST}): each conversation is an agent of {session}")


def add_serve_address(parser: argparse.ArgumentParser) -> None:
    """`swarmscope serve`'s [HOST:]PORT, optional."""
    parser.add_argument("serve", nargs="?", type=_address,
                        default=(DEFAULT_HOST, DEFAULT_PORT), metavar="[HOST:]PORT",
                        help="where to answer OpenAI's chat completions API (default "
                             f"{DEFAULT_PORT}; host default {DEFAULT_HOST})")


def parse_address(text: str) -> tuple[str, int]:
    """`PORT` or `HOST:PORT` (an IPv6 host in brackets); the host defaults to DEFAULT_HOST."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or DEFAULT_HOST
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected PORT or HOST:PORT, got {text!r}")
    return host, int(port)


def _address(text: str) -> tuple[str, int]:
    try:
        return parse_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_device_options(parser: argparse.ArgumentParser, threads: bool = True,
                       tuned: bool = False) -> None:
    """--dtype, --device and (unless `threads` is False) --threads N: the CPU threads of the
    forward pass (default: torch's, one per core); with `tuned`, also --threads auto."""
    parser.add_argument("--dtype", default="auto", help=DTYPE_HELP)
    parser.add_argument("--device", default="auto", help=DEVICE_HELP)
    if not threads:
        return
    parser.add_argument("--threads", type=functools.partial(thread_count, tuned=tuned),
                        metavar=f"N{'|' + AUTO if tuned else ''}",
                        help="CPU threads for the forward pass (default: one per core); fewer "
                             "can be faster where other programs keep cores busy. t(N) is "
                             "calibrated per thread count" + (
                                 f"; {AUTO}: tuned as the session runs, as other programs "
                                 "take or free cores" if tuned else ""))


def thread_count(text: str, tuned: bool = False) -> int | str:
    """A --threads value: a count this machine can run (or, `tuned`, AUTO)."""
    if tuned and text == AUTO:
        return AUTO
    cores = usable_cores()
    if not text.isdigit() or not 1 <= int(text) <= cores:
        raise argparse.ArgumentTypeError(f"must be 1..{cores} (the cores this process may run on)"
                                         f"{' or ' + AUTO if tuned else ''}, got {text!r}")
    return int(text)


def check_at_least(options: dict[str, tuple[float | None, float]]) -> None:
    """option -> (value, least): each value given must be finite and at least its least."""
    for option, (value, lowest) in options.items():
        if value is not None and not lowest <= value < math.inf:  # nan fails too
            number = "" if isinstance(value, int) else "a finite number "
            raise SwarmscopeError(f"{option} must be {number}>= {lowest}, got {value:g}")


RESPONSE_FORMAT_HELP = ("json (any JSON object) | a JSON Schema file the answers keep to (after a "
                        "thinking model's reasoning)")


def read_response_format(choice: str) -> dict:
    """The JSON schema --response-format names: any object for `json`, else the file's."""
    if choice == "json":
        return {"type": "object"}
    try:
        schema = json.loads(Path(choice).read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SwarmscopeError(f"--response-format: {choice}: cannot read a JSON Schema "
                              f"({exc})") from None
    if not isinstance(schema, dict):
        raise SwarmscopeError(f"--response-format: {choice}: a JSON Schema is an object")
    return schema


def check_drafter(option: str, drafter: str, target=None) -> None:
    """A drafter other than lookup and self is a draft model folder: its config, tokenizer and
    weights' headers must read now, not when a step first drafts with it (in a short run, never);
    asked again once the target (its LoadedModel) is loaded, its tokenizer must be the target's.
    `option` names where the value came from, as typed."""
    from engine.loading import MODEL_NAMES, check_model_folder, model_source
    from engine.loading.hub_cache import cache_dir
    from engine.spec.draft_model import check_draft_folder
    from engine.spec.drafters import DRAFTER_NAMES

    if drafter in DRAFTER_NAMES or drafter in MODEL_NAMES:  # by name: read as they load
        return
    try:
        if not model_source(drafter)[0].exists():
            raise SwarmscopeError(f"{option} {drafter}: no such folder; a drafter is "
                                  f"{', '.join(DRAFTER_NAMES + MODEL_NAMES)}, a draft model "
                                  f"folder or a repo id downloaded to {cache_dir()}")
        if target is None:
            check_model_folder(drafter, chats=False)
        else:
            check_draft_folder(drafter, target)
    except ModelLoadError as exc:
        raise SwarmscopeError(f"{option} {drafter}: {exc}") from None
