"""The forms of tool calls written as JSON (call_forms.py lists them all): in <tool_call> tags,
an answer that is one, after [TOOL_CALLS] or <|tool_call|>, or [TOOL_CALLS]name[ARGS]."""
from __future__ import annotations

import json
import re
import uuid
from typing import Callable

from engine.output_format import json_rule
from engine.serve.call_form import (CALL_SPACING, NEWLINE, CallForm, ToolCall, held_at_marker,
                                    parameters)


class TaggedCalls(CallForm):
    name = "JSON in <tool_call> tags"
    marker = OPEN = "<tool_call>"
    CLOSE = "</tool_call>"
    _BLOCK = re.compile(re.escape(OPEN) + r"(.*?)" + re.escape(CLOSE), re.S)

    def split(self, text: str) -> tuple[str, list[ToolCall]]:
        calls, outside, end = [], [], 0
        for block in self._BLOCK.finditer(text):
            found = self.block_calls(block.group(1).strip())
            if found is None:
                return text, []
            calls += found
            outside.append(text[end:block.start()])
            end = block.end()
        rest = text[end:]
        if not calls or self.OPEN in rest:  # a block left open: an answer cut short
            return text, []
        return "".join(outside) + rest, calls

    def block_calls(self, body: str) -> list[ToolCall] | None:
        """The calls between a pair of tags; None where it is not calls."""
        return self.calls(body)

    def held_from(self, text: str, sent: int) -> int:
        return held_at_marker(self.OPEN, text, sent)

    def grammar(self, tools: list[dict], parallel: bool, tag: Callable[[str], str]) -> str:
        more = f" ({NEWLINE} block)*" if parallel else ""
        return "\n".join([f"calls: block{more}",
                          f"block: {tag(self.OPEN)} {NEWLINE} call {NEWLINE} "
                          f"{tag(self.CLOSE)}",
                          f"call: {_call_rule(tools, 'arguments')}"])


class JsonCalls(CallForm):
    name = "a JSON object for an answer"
    marker = '"parameters": dictionary of argument name and its value'
    PYTHON_TAG = "<|python_tag|>"

    def split(self, text: str) -> tuple[str, list[ToolCall]]:
        body = text.strip().removeprefix(self.PYTHON_TAG).strip()
        calls = self.calls(body, ";") if body.startswith("{") else None
        return ("", calls) if calls else (text, [])

    def held_from(self, text: str, sent: int) -> int:
        start = len(text) - len(text.lstrip())
        head = text[start:]
        if sent <= start and (head.startswith(("{", self.PYTHON_TAG)) or
                              self.PYTHON_TAG.startswith(head)):
            return start  # the answer may be a call: none of it goes out before its end
        return len(text)

    def grammar(self, tools: list[dict], parallel: bool, tag: Callable[[str], str]) -> str:
        more = f' ({json.dumps("; ")} call)*' if parallel else ""
        return f"calls: call{more}\ncall: {_call_rule(tools, 'parameters')}"


class ListedCalls(CallForm):
    name = "[TOOL_CALLS] and a JSON list"
    marker = OPEN = "[TOOL_CALLS]"

    def split(self, text: str) -> tuple[str, list[ToolCall]]:
        at = text.find(self.OPEN)
        body = text[at + len(self.OPEN):].strip() if at >= 0 else ""
        calls = self.calls(body) if body.startswith("[") else None
        return (text[:at], calls) if calls else (text, [])

    def held_from(self, text: str, sent: int) -> int:
        return held_at_marker(self.OPEN, text, sent)

    def new_id(self) -> str:
        return uuid.uuid4().hex[:9]  # Mistral's templates refuse other ids

    def grammar(self, tools: list[dict], parallel: bool, tag: Callable[[str], str]) -> str:
        listed = {"type": "array", "items": _call_schema(tools, "arguments"), "minItems": 1}
        if not parallel:
            listed["maxItems"] = 1
        return f'calls: {tag(self.OPEN)} " "? list\nlist: {json_rule(listed, CALL_SPACING)}'


class NamedCalls(ListedCalls):
    name = "[TOOL_CALLS]name[ARGS] and JSON arguments"
    marker = ARGS = "[ARGS]"  # its templates hold [TOOL_CALLS] too: asked before ListedCalls
    CALL_ID = "[CALL_ID]"

    def split(self, text: str) -> tuple[str, list[ToolCall]]:
        at = text.find(self.OPEN)
        if at < 0:
            return text, []
        calls = []
        for part in text[at + len(self.OPEN):].split(self.OPEN):
            head, _, arguments = part.partition(self.ARGS)
            name, _, call_id = head.partition(self.CALL_ID)
            try:
                value = json.loads(arguments) if arguments.strip().startswith("{") else None
            except json.JSONDecodeError:
                value = None
            call = (self.call({"name": name.strip(), "arguments": value})
                    if isinstance(value, dict) else None)
            if call is None or len(call.name.split()) != 1:  # a name is one word
                return text, []
            calls.append(ToolCall(call.name, call.arguments, call_id.strip() or call.id))
        return text[:at], calls

    def grammar(self, tools: list[dict], parallel: bool, tag: Callable[[str], str]) -> str:
        named = " | ".join(f"{json.dumps(tool['function']['name'])} {tag(self.ARGS)} args{i}"
                           for i, tool in enumerate(tools))
        return "\n".join([f"calls: call{'+' if parallel else ''}",
                          f"call: {tag(self.OPEN)} ({named})",
                          *(f"args{i}: {json_rule(parameters(tool), CALL_SPACING)}"
                            for i, tool in enumerate(tools))])


class GraniteCalls(ListedCalls):
    name = "<|tool_call|> and a JSON list"
    marker = OPEN = "<|tool_call|>"
    new_id = CallForm.new_id  # its templates take any id


def _call_schema(tools: list[dict], arguments: str) -> dict:
    """A call of one of the tools: {"name": its name, `arguments`: its parameters' JSON}."""
    return {"anyOf": [{"type": "object", "additionalProperties": False,
                       "properties": {"name": {"const": tool["function"]["name"]},
                                      arguments: parameters(tool)},
                       "required": ["name", arguments]} for tool in tools]}


def _call_rule(tools: list[dict], arguments: str) -> str:
    return json_rule(_call_schema(tools, arguments), CALL_SPACING)
