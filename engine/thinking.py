"""Thinking models: Qwen3, SmolLM3 and DeepSeek-R1's distills write their reasoning between
<think> and </think> before the answer (DeepSeek's template opens the tag in the prompt itself).
How to tell from a chat's rendered prompt whether its answer reasons first, and the grammars
that let it, so that an answer held to a schema or to forced calls (output_format.py) reasons
first all the same. The server hands the reasoning back apart (serve/reasoning.py)."""
from __future__ import annotations

import re

from engine.output_format import (WHITESPACE, OutputFormat, json_format, json_rule, lark_format,
                                  lark_tag)

OPEN, CLOSE = "<think>", "</think>"


def _as_regex(text: str) -> str:
    """`text` as a Lark /regex/ matches it."""
    return re.escape(text).replace("/", "\\/")


def thinks(template: str | None) -> bool:
    """Whether a chat template is a thinking model's (it writes or strips the closing tag)."""
    return template is not None and CLOSE in template


def opened(prompt: str) -> bool:
    """Whether the prompt opens the reasoning, so that the answer starts inside it."""
    return prompt.rstrip().endswith(OPEN)


def closed(prompt: str) -> bool:
    """Whether the prompt closes the reasoning, empty (Qwen3's template with enable_thinking
    false), so that the answer has none."""
    return prompt.rstrip().endswith(CLOSE)


def reasons(tokenizer, prompt: str, tools: bool = False) -> bool:
    """Whether a chat's answer to `prompt` (rendered, with or without `tools`) may reason first."""
    return thinks(tokenizer.template_for(tools)) and not closed(prompt)


def json_answer(schema: dict, tokenizer, prompt: str | None) -> OutputFormat:
    """Answers to `prompt` (a chat's, rendered; None: a plain text's) that are JSON valid under
    `schema`: after the reasoning, where the model reasons first."""
    if prompt is None or not reasons(tokenizer, prompt):
        return json_format(schema, tokenizer)
    return answer_format(f"answer: {json_rule(schema)}", tokenizer, prompt)


def answer_format(rules: str, tokenizer, prompt: str | None, tools: bool = False) -> OutputFormat:
    """Answers to `prompt` (as json_answer's) held to the Lark `rules`, whose rule `answer` is the
    answer: after the reasoning, where the model reasons first."""
    before = reasoning = ""
    if prompt is not None and reasons(tokenizer, prompt, tools):
        before, reasoning = _reasoning_rules(tokenizer, opened(prompt))
    return lark_format(f"start: {before}answer\n{rules}\n{reasoning}", tokenizer)


def _reasoning_rules(tokenizer, inside: bool) -> tuple[str, str]:
    """How a grammar lets a thinking model reason before the answer it holds: (what comes before
    the answer's rule in `start`, the Lark rules that names). The reasoning's text is free, but
    neither the answer's end nor a special token may come in it, so the answer held to comes
    after; where the prompt opened the reasoning (`inside`) it must close, else it may be
    skipped. Where the tags are special tokens (as in Qwen3's and SmolLM3's tokenizers) the
    reasoning runs to the closing one; where they are text, to the first `</think>`."""
    opening, closing = lark_tag(tokenizer, OPEN), lark_tag(tokenizer, CLOSE)
    if closing.startswith("<["):
        thought = f"reasoning_text: THOUGHT {closing}\nTHOUGHT: /(?s:.*)/"
    else:
        thought = f"reasoning_text[lazy]: /(?s:.*){_as_regex(CLOSE)}/"
    after = f"REASONED: /{WHITESPACE}/"  # Qwen3 leaves a blank line before the answer
    if inside:
        return "reasoning_text REASONED ", f"{thought}\n{after}"
    return "(reasoning REASONED)? ", f"reasoning: {opening} reasoning_text\n{thought}\n{after}"
