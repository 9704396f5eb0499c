"""How models write tool calls, and reading them back out of an answer, whole or as it streams,
as vLLM's and llama.cpp's servers read these models'. Two forms, each asked for by the chat
templates that hold its marker:
- tagged (Hermes'): each call a JSON object {"name", "arguments"} between <tool_call> tags,
  anywhere in the answer: Qwen2.5, Qwen3, SmolLM3, Hermes;
- bare JSON (Llama 3.1-3.3's): the whole answer a JSON object {"name", "parameters"}, or several
  separated by semicolons, after an optional <|python_tag|>.
A model writes what it likes: an answer that is not well-formed calls in its form (not JSON, no
name, a call cut short) is text, as the model wrote it."""
from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: str  # JSON text, as OpenAI's API carries it
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")

    def as_api(self, index: int | None = None) -> dict:
        """The call as a message lists it; with `index`, as a stream's delta does."""
        call = {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}
        return call if index is None else {"index": index, **call}


class CallForm:
    """One way of writing calls: the marker in a chat template that asks for it, how to split an
    answer into its text and its calls, and where a streamed answer must be held back."""
    marker: str

    def split(self, text: str) -> tuple[str, list[ToolCall]]:
        """The answer's text outside its calls, and the calls; (text, []) where it makes none."""
        raise NotImplementedError

    def held_from(self, text: str, sent: int) -> int:
        """Where the answer so far, of which `sent` characters went out, must be held back from
        (len(text): nowhere): what may be, or begin, a call."""
        raise NotImplementedError


class TaggedCalls(CallForm):
    marker = OPEN = "<tool_call>"
    CLOSE = "</tool_call>"
    _BLOCK = re.compile(re.escape(OPEN) + r"(.*?)" + re.escape(CLOSE), re.S)

    def split(self, text: str) -> tuple[str, list[ToolCall]]:
        calls, outside, end = [], [], 0
        for block in self._BLOCK.finditer(text):
            call = _parse(block.group(1))
            if call is None:
                return text, []
            calls.append(call)
            outside.append(text[end:block.start()])
            end = block.end()
        rest = text[end:]
        if not calls or self.OPEN in rest:  # a block left open: an answer cut short
            return text, []
        return "".join(outside) + rest, calls

    def held_from(self, text: str, sent: int) -> int:
        at = text.find(self.OPEN, max(0, sent - len(self.OPEN) + 1))
        if at >= 0:
            return at
        return len(text) - max((n for n in range(len(self.OPEN) - 1, 0, -1)
                                if text.endswith(self.OPEN[:n])), default=0)


class JsonCalls(CallForm):
    marker = '"parameters": dictionary of argument name and its value'
    PYTHON_TAG = "<|python_tag|>"

    def split(self, text: str) -> tuple[str, list[ToolCall]]:
        body = text.strip().removeprefix(self.PYTHON_TAG).strip()
        if not body.startswith("{"):
            return text, []
        calls, at, decoder = [], 0, json.JSONDecoder()
        while at < len(body):
            try:
                value, at = decoder.raw_decode(body, at)
            except json.JSONDecodeError:
                return text, []
            call = _call(value)
            if call is None:
                return text, []
            calls.append(call)
            rest = body[at:].lstrip()
            at = len(body) - len(rest.removeprefix(";").lstrip())
        return "", calls

    def held_from(self, text: str, sent: int) -> int:
        start = len(text) - len(text.lstrip())
        head = text[start:]
        if sent <= start and (head.startswith(("{", self.PYTHON_TAG)) or
                              self.PYTHON_TAG.startswith(head)):
            return start  # the answer may be a call: none of it goes out before its end
        return len(text)


FORMS = (TaggedCalls(), JsonCalls())


def form_of(template: str | None) -> CallForm | None:
    """The form a chat template asks for calls in; None where it asks for none read here."""
    return next((form for form in FORMS if template and form.marker in template), None)


def _parse(body: str) -> ToolCall | None:
    try:
        return _call(json.loads(body))
    except json.JSONDecodeError:
        return None


def _call(value) -> ToolCall | None:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or \
            not value["name"]:
        return None
    arguments = value.get("arguments", value.get("parameters", {}))  # Llama writes the latter
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return ToolCall(value["name"], arguments)


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
