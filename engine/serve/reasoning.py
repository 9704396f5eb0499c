"""A thinking model's reasoning, kept apart from its answer (engine/thinking.py tells one).
OpenAI-compatible servers (vLLM, llama.cpp) hand it back as `reasoning_content`, so that a
client's `content` is the answer alone; the templates drop it from the conversation anyway when
it comes back."""
from __future__ import annotations

from engine.serve.held_text import tag_start
from engine.thinking import CLOSE, OPEN


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
