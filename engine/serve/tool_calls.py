"""Tool calls in OpenAI's chat API: the tools a request offers go into the model's chat template,
and the calls the model writes come back out of its answer as `tool_calls`.

The model is offered the tools, not forced to use them: its answer is read after the fact, as
vLLM's and llama.cpp's servers read these models'. The form read is Hermes': each call a JSON
object {"name", "arguments"} between <tool_call> tags, which the chat templates of Qwen2.5,
Qwen3, SmolLM3, Hermes and others ask for. A model whose template asks for no such thing is
refused tools (HTTP 400), not answered as if it had been offered them."""
from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(OPEN) + r"(.*?)" + re.escape(CLOSE), re.S)


def reads_calls(template: str | None) -> bool:
    """Whether a chat template asks for calls in the form read here."""
    return template is not None and OPEN in template


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


def split_calls(text: str) -> tuple[str, list[ToolCall]]:
    """The answer's text outside its tool calls, and the calls. A block that is not a call (not
    JSON, no name) makes the whole answer text, so a client sees what the model wrote; so does
    a block left open (an answer cut short)."""
    calls, outside, end = [], [], 0
    for block in _BLOCK.finditer(text):
        call = _parse(block.group(1))
        if call is None:
            return text, []
        calls.append(call)
        outside.append(text[end:block.start()])
        end = block.end()
    rest = text[end:]
    if not calls or OPEN in rest:
        return text, []
    return "".join(outside) + rest, calls


def _parse(body: str) -> ToolCall | None:
    try:
        call = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
        return None
    arguments = call.get("arguments", call.get("parameters", {}))  # some models write the latter
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return ToolCall(call["name"], arguments)


class CallStream:
    """A streamed answer's text with its tool calls held back: text before a call goes out as it
    comes; from the first <tool_call> on (and a tail that may begin one) it waits for the end,
    where it is read as calls, or as text where it is none."""

    def __init__(self) -> None:
        self._text = ""
        self._sent = 0  # characters handed out, all before the first call

    def add(self, piece: str) -> str:
        """The text that may go out now."""
        self._text += piece
        at = self._text.find(OPEN, max(0, self._sent - len(OPEN) + 1))
        if at < 0:
            at = len(self._text) - max((n for n in range(len(OPEN) - 1, 0, -1)
                                        if self._text.endswith(OPEN[:n])), default=0)
        piece, self._sent = self._text[self._sent:max(at, self._sent)], max(at, self._sent)
        return piece

    def end(self) -> tuple[str, list[ToolCall]]:
        """At the answer's end: the text not yet handed out, and the calls."""
        text, calls = split_calls(self._text)
        return text[self._sent:], calls


def offered_tools(tools, where: str = "tools") -> list[dict]:
    """A request's `tools`, checked, as chat templates take them (OpenAI's form, which
    transformers' apply_chat_template passes on as it is). ValueError names the field (`where`)
    and what is wrong with it."""
    if not isinstance(tools, list) or not tools:
        raise ValueError(f"{where}: must be a non-empty list of "
                         "{type: function, function: {name, ...}}")
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or \
                not isinstance(function, dict):
            raise ValueError(f"{where}[{i}]: must be {{type: function, function: {{name, ...}}}}")
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise ValueError(f"{where}[{i}].function.name: must be non-empty text")
        if not isinstance(function.get("parameters", {}), dict):
            raise ValueError(f"{where}[{i}].function.parameters: must be a JSON schema object")
    return tools


def template_calls(tool_calls, where: str) -> list[dict]:
    """An assistant message's `tool_calls` as chat templates take them: arguments as an object
    where they are a JSON object's text (Qwen2.5's template writes them with tojson, which
    would quote OpenAI's text a second time; vLLM parses them so too). ValueError names the
    field (`where`)."""
    if not isinstance(tool_calls, list):
        raise ValueError(f"{where}: must be a list of "
                         "{id, type: function, function: {name, arguments}}")
    calls = []
    for i, call in enumerate(tool_calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or \
                not isinstance(function.get("arguments", ""), str):
            raise ValueError(f"{where}[{i}]: must be {{id, type: function, function: {{name, "
                             "arguments (JSON text)}}}}")
        arguments = function.get("arguments", "")
        try:
            parsed = json.loads(arguments)
        except json.JSONDecodeError:
            parsed = None
        calls.append({**call, "function": {
            **function, "arguments": parsed if isinstance(parsed, dict) else arguments}})
    return calls
