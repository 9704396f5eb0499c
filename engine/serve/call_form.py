"""One way models write tool calls (call_forms.py lists them): the calls read out of an answer
(ToolCall), what a form must say (CallForm), and a streamed answer's text with its calls held
back (CallStream)."""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Callable

from engine.serve.held_text import tag_start

NEWLINE = json.dumps("\n")  # a Lark string
CALL_SPACING = " ?"  # between a call's JSON tokens: models write calls compact


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: str  # JSON text, as OpenAI's API carries it
    id: str

    def as_api(self, index: int | None = None) -> dict:
        """The call as a message lists it; with `index`, as a stream's delta does."""
        call = {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}
        return call if index is None else {"index": index, **call}


class CallForm:
    """One way of writing calls: the marker in a chat template that asks for it, how to split an
    answer into its text and its calls, and where a streamed answer must be held back."""
    name: str    # as a person reads it
    marker: str

    def split(self, text: str) -> tuple[str, list[ToolCall]]:
        """The answer's text outside its calls, and the calls; (text, []) where it makes none."""
        raise NotImplementedError

    def held_from(self, text: str, sent: int) -> int:
        """Where the answer so far, of which `sent` characters went out, must be held back from
        (len(text): nowhere): what may be, or begin, a call."""
        raise NotImplementedError

    def new_id(self) -> str:
        return f"call_{uuid.uuid4().hex[:24]}"

    def grammar(self, tools: list[dict], parallel: bool, tag: Callable[[str], str]) -> str:
        """Lark rules whose `calls` is one call of the `tools` in this form (one or more, where
        `parallel`); `tag(text)` names a tag as the tokenizer has it."""
        raise NotImplementedError

    def for_tools(self, tools: list[dict]) -> "CallForm":
        """This form as it reads the calls of a request offering `tools`."""
        return self

    def call(self, value) -> ToolCall | None:
        """A parsed JSON value as a call: an object with a name, and arguments (or parameters,
        as Llama writes them)."""
        if not isinstance(value, dict) or not isinstance(value.get("name"), str) or \
                not value["name"]:
            return None
        arguments = value.get("arguments", value.get("parameters", {}))
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        return ToolCall(value["name"], arguments, self.new_id())

    def calls(self, body: str, separator: str = "") -> list[ToolCall] | None:
        """`body` read as JSON values, each a call or a list of calls, `separator` (or nothing)
        between them; None where it is not that."""
        calls, at, decoder = [], 0, json.JSONDecoder()
        while at < len(body):
            try:
                value, at = decoder.raw_decode(body, at)
            except json.JSONDecodeError:
                return None
            found = [self.call(v) for v in (value if isinstance(value, list) else [value])]
            if not found or None in found:
                return None
            calls += found
            rest = body[at:].lstrip()
            at = len(body) - len(rest.removeprefix(separator).lstrip() if separator else rest)
        return calls or None


def parameters(tool: dict) -> dict:
    """A tool's parameters' JSON schema (an object of any fields where it gives none)."""
    return tool["function"].get("parameters") or {"type": "object"}


def held_at_marker(marker: str, text: str, sent: int) -> int:
    """Where `marker` starts in `text`, or a tail of it that may begin the marker."""
    at = text.find(marker, max(0, sent - len(marker) + 1))
    return at if at >= 0 else len(text) - tag_start(text, marker)


class CallStream:
    """A streamed answer's text with its tool calls held back: what may be, or begin, a call (as
    its form says) waits for the end, where it is read as calls, or as text where it is none."""

    def __init__(self, form: CallForm) -> None:
        self.form = form
        self._text = ""
        self._sent = 0  # characters handed out, all before the first call

    def add(self, piece: str) -> str:
        """The text that may go out now."""
        self._text += piece
        end = max(self._sent, self.form.held_from(self._text, self._sent))
        piece, self._sent = self._text[self._sent:end], end
        return piece

    def end(self) -> tuple[str, list[ToolCall]]:
        """At the answer's end: the text not yet handed out, and the calls."""
        text, calls = self.form.split(self._text)
        return text[self._sent:], calls
