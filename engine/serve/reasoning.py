"""A thinking model's reasoning, kept apart from its answer. Qwen3, SmolLM3 and DeepSeek-R1's
distills write their reasoning between <think> and </think> before the answer (DeepSeek's
template opens the tag in the prompt itself). OpenAI-compatible servers (vLLM, llama.cpp) hand
it back as `reasoning_content`, so that a client's `content` is the answer alone; the templates
drop it from the conversation anyway when it comes back."""
from __future__ import annotations

from engine.serve.held_text import tag_start

OPEN, CLOSE = "<think>", "</think>"


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


class ReasoningSplit:
    """An answer, as its text comes, split into reasoning and the answer proper: what follows an
    opening <think> (or the start, where the prompt opened it) up to </think> is reasoning, the
    rest answer; an answer that does not start with <think> is all answer. Text that may be the
    start of a tag waits until it is not; the answer's leading blank lines are dropped."""

    def __init__(self, inside: bool) -> None:
        self._state = "reasoning" if inside else "start"
        self._text = ""  # what came and is not handed out yet

    def add(self, piece: str, last: bool = False) -> tuple[str, str]:
        """(reasoning, answer) that may go out now; with `last`, all that is left."""
        self._text += piece
        reasoning = answer = ""
        if self._state == "start":
            head = self._text.lstrip()
            if head.startswith(OPEN):
                self._state, self._text = "reasoning", head[len(OPEN):]
            elif OPEN.startswith(head) and not last:
                return "", ""  # may yet open
            else:
                self._state = "answer"
        if self._state == "reasoning":
            at = self._text.find(CLOSE)
            if at >= 0:
                reasoning, self._text = self._text[:at], self._text[at + len(CLOSE):]
                self._state = "answer start"
            else:
                end = len(self._text) - (0 if last else tag_start(self._text, CLOSE))
                reasoning, self._text = self._text[:end], self._text[end:]
        if self._state == "answer start":
            self._text = self._text.lstrip()
            if self._text:
                self._state = "answer"
        if self._state == "answer":
            answer, self._text = self._text, ""
        return reasoning, answer
