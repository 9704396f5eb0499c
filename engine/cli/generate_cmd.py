"""`swarmscope generate`: run prompts as one batch, with or without speculation."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine.cli.options import (MODEL_HELP, RESPONSE_FORMAT_HELP, add_device_options,
                                add_thinking_option, check_drafter, read_response_format)
from engine.controls import Controls
from engine.errors import SwarmscopeError
from engine.sampling import SamplingParams


class PromptsFileError(SwarmscopeError):
    def __init__(self, path: str, line: int, problem: str) -> None:
        super().__init__(f"{path}:{line}: {problem}")


def read_prompts(path: str) -> list[str]:
    """JSON Lines: each line a JSON string or an object with a string "prompt"."""
    try:
        lines = Path(path).read_text(encoding="utf-8-sig").splitlines()  # a BOM is not text
    except (OSError, UnicodeDecodeError) as exc:
        raise SwarmscopeError(f"{path}: cannot read prompts file ({exc})") from None
    prompts = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PromptsFileError(path, number, f"not JSON ({exc.msg})") from None
        if isinstance(item, dict):
            item = item.get("prompt")
        if not isinstance(item, str):
            raise PromptsFileError(path, number, 'expected a JSON string or {"prompt": "..."}')
        prompts.append(item)
    if not prompts:
        raise SwarmscopeError(f"{path}: no prompts in file")
    return prompts


def register(subparsers) -> None:
    p = subparsers.add_parser("generate", help="generate text for one or more prompts")
    p.add_argument("--model", default="default", help=MODEL_HELP)
    p.add_argument("texts", nargs="*", metavar="PROMPT", help="prompts, as --prompt gives them")
    p.add_argument("--prompt", action="append", default=[], help="a prompt (repeatable)")
    p.add_argument("--prompts", help="JSON Lines file of prompts (strings or {\"prompt\": ...})")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--presence-penalty", type=float, default=0.0,
                   help="taken off the logit of each token the answer has written (-2 to 2)")
    p.add_argument("--frequency-penalty", type=float, default=0.0,
                   help="taken off a token's logit each time the answer wrote it (-2 to 2)")
    p.add_argument("--repetition-penalty", type=float, default=1.0,
                   help="divides the logit of a token in the prompt or answer (multiplies a "
                        "negative one; 1: none)")
    add_device_options(p)
    add_thinking_option(p)
    p.add_argument("--chat", action=argparse.BooleanOptionalAction, default=True,
                   help="wrap prompts in the model's chat template (default on)")
    p.add_argument("--json", action="store_true", help="one JSON object per prompt")
    p.add_argument("--spec", default="goodput", choices=("off", "fixed", "uniform", "goodput"))
    p.add_argument("--k", type=int, default=8, help="drafts per lane (fixed) / cap (others)")
    p.add_argument("--drafter", default="lookup",
                   help="lookup | self | a draft model folder or GGUF file")
    p.add_argument("--ragged", default="packed", choices=("packed", "padded"))
    p.add_argument("--response-format", metavar="json|FILE", help=RESPONSE_FORMAT_HELP)
    p.set_defaults(func=run)


def _held_to(choice: str, schema: dict, tokenizer, chat: bool):
    """The output_format.OutputFormat of the schema --response-format named (after the
    reasoning, where a chat's answer reasons first)."""
    from engine.thinking import json_answer
    try:
        return json_answer(schema, tokenizer, tokenizer.chat_prompt("") if chat else None)
    except ValueError as exc:
        raise SwarmscopeError(f"--response-format: {choice}: the schema cannot be kept to: "
                              f"{exc}") from None


def run(args) -> int:
    from engine.generate import generate
    from engine.loading import load_model
    try:
        prompts = [*args.texts, *args.prompt, *(read_prompts(args.prompts) if args.prompts else [])]
        if not prompts:
            raise SwarmscopeError("give a PROMPT, --prompt TEXT or --prompts FILE")
        if args.max_tokens < 1:
            raise SwarmscopeError("--max-tokens must be >= 1")
        try:
            sampling = SamplingParams(args.temperature, args.top_k, args.top_p, args.seed,
                                      args.presence_penalty, args.frequency_penalty,
                                      args.repetition_penalty)
        except ValueError as exc:
            raise SwarmscopeError(f"--temperature, --top-k, --top-p, --*-penalty: {exc}") from None
        try:  # --spec and --ragged are argparse's choices: what is left to refuse is K
            controls = Controls(policy=args.spec, k=args.k, drafter=args.drafter,
                                ragged=args.ragged)
        except ValueError as exc:
            raise SwarmscopeError(f"--k: {exc}") from None
        check_drafter("--drafter", args.drafter)
        schema = args.response_format and read_response_format(args.response_format)
        note = (lambda message, *_: print(message, file=sys.stderr)) if not args.json else None
        loaded = load_model(args.model, args.dtype, args.device, progress=note,
                            thinking=args.thinking, threads=args.threads)
        check_drafter("--drafter", args.drafter, loaded)  # now its tokenizer too
        held_to = schema and _held_to(args.response_format, schema, loaded.tokenizer,
                                      args.chat)
        results = generate(loaded, prompts, controls, args.max_tokens, sampling, args.chat,
                           progress=lambda message: print(message, file=sys.stderr),
                           output_format=held_to)
    except SwarmscopeError as exc:
        print(f"swarmscope generate: {exc}", file=sys.stderr)
        return 2
    for result in results:
        if args.json:
            print(json.dumps({"token_ids": result.token_ids, "text": result.text,
                              "drafted": result.drafted, "accepted": result.accepted}))
        else:
            print(result.text)
            if len(results) > 1:
                print("---")
    return 0
