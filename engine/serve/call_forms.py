"""How models write tool calls, and reading them back out of an answer, whole or as it streams,
as vLLM's and llama.cpp's servers read these models'. Six forms, each asked for by the chat
templates that hold its marker:
- tagged (Hermes'): each call a JSON object {"name", "arguments"} between <tool_call> tags,
  anywhere in the answer: Qwen2.5, Qwen3, SmolLM3, Hermes;
- bare JSON (Llama 3.1-3.3's): the whole answer a JSON object {"name", "parameters"}, or several
  separated by semicolons, after an optional <|python_tag|>;
- listed (Mistral's to v0.3): [TOOL_CALLS] and a JSON list of {"name", "arguments"}, after any
  text; its templates want call ids of nine letters and digits;
- named (Mistral's since its v11 tokenizers: Mistral Small 3.2, Devstral, Magistral): each call
  [TOOL_CALLS]name[ARGS] and its arguments as a JSON object ([CALL_ID]id before [ARGS] in some),
  after any text;
- Granite 3's: <|tool_call|> and a JSON list of {"name", "arguments"}, after any text;
- pythonic (LFM2's): a Python list of calls, name(argument=value, ...), between
  <|tool_call_start|> and <|tool_call_end|>, anywhere in the answer;
- XML (Qwen3.5's and Qwen3-Coder's): each call <function=name> with an element
  <parameter=argument>value</parameter> an argument, between <tool_call> tags, anywhere in the
  answer; a value is text, read as JSON where its tool's schema types it otherwise.
A model writes what it likes: an answer that is not well-formed calls in its form (not JSON, no
name, a call cut short) is text, as the model wrote it. Where a request forces a call
(tool_choice), the answer is held to calls in its model's form (`grammar`, output_format.py),
each call's JSON to its tool's parameters."""
from __future__ import annotations

import ast
import json
import re
import uuid
from dataclasses import dataclass
from typing import Callable

from engine.chat_template import LFM2_CALLS, LFM2_TOOLS
from engine.output_format import json_rule
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
        return _held_at_marker(self.OPEN, text, sent)

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
        return _held_at_marker(self.OPEN, text, sent)

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
                          *(f"args{i}: {json_rule(_parameters(tool), CALL_SPACING)}"
                            for i, tool in enumerate(tools))])


class GraniteCalls(ListedCalls):
    name = "<|tool_call|> and a JSON list"
    marker = OPEN = "<|tool_call|>"
    new_id = CallForm.new_id  # its templates take any id


class PythonicCalls(TaggedCalls):
    """Each call a Python call of keyword arguments whose values are literals (JSON's true,
    false and null read as Python's, as a model may write them): LFM2's form."""
    name = "a Python list of calls in <|tool_call_start|> tags"
    marker = LFM2_TOOLS
    OPEN, CLOSE = LFM2_CALLS
    _BLOCK = re.compile(re.escape(OPEN) + r"(.*?)" + re.escape(CLOSE), re.S)
    _JSON_NAMES = {"true": True, "false": False, "null": None}

    def block_calls(self, body: str) -> list[ToolCall] | None:
        """`body` read as a list of calls (or one call)."""
        try:
            tree = ast.parse(body, mode="eval").body
        except (SyntaxError, ValueError):
            return None
        calls = [self._call(node) for node in (tree.elts if isinstance(tree, ast.List)
                                               else [tree])]
        return calls if calls and None not in calls else None

    def _call(self, node: ast.expr) -> ToolCall | None:
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and not node.args and all(k.arg for k in node.keywords)):
            return None
        try:
            arguments = {k.arg: self._value(k.value) for k in node.keywords}
            return ToolCall(node.func.id, json.dumps(arguments, ensure_ascii=False),
                            self.new_id())
        except (ValueError, TypeError):  # not a literal, or not one JSON holds
            return None

    def _value(self, node: ast.expr):
        if isinstance(node, ast.Name) and node.id in self._JSON_NAMES:
            return self._JSON_NAMES[node.id]
        if isinstance(node, ast.List):
            return [self._value(item) for item in node.elts]
        if isinstance(node, ast.Dict):
            return {self._value(key): self._value(value)
                    for key, value in zip(node.keys, node.values)}
        return ast.literal_eval(node)

    def grammar(self, tools: list[dict], parallel: bool, tag: Callable[[str], str]) -> str:
        """Each tool's call with its arguments in the order its schema lists them (those it
        requires, then any of the others), each value JSON under its schema; a tool whose
        parameters name none takes any keyword arguments."""
        more = ' ("," " "? call)*' if parallel else ""
        rules = [f'calls: {tag(self.OPEN)} "[" call{more} "]" {tag(self.CLOSE)}',
                 "call: " + " | ".join(f"call{i}" for i in range(len(tools))),
                 f'keyword: /[A-Za-z_][A-Za-z0-9_]*/ "=" {json_rule({}, CALL_SPACING)}']
        for i, tool in enumerate(tools):
            parameters = _parameters(tool)
            properties = parameters.get("properties") or {}
            required = [name for name in properties if name in parameters.get("required", [])]
            ordered = required + [name for name in properties if name not in required]
            items = [f"arg{i}_{k}" for k in range(len(ordered))]
            rules += [f"{item}: {json.dumps(name + '=')} "
                      f"{json_rule(properties[name], CALL_SPACING)}"
                      for item, name in zip(items, ordered)]
            arguments = (_arguments(items, len(required)) if properties else
                         '(keyword (", " keyword)*)?')
            rules.append(f"call{i}: {json.dumps(tool['function']['name'] + '(')} {arguments} "
                         '")"')
        return "\n".join(rules)


class XmlCalls(TaggedCalls):
    """Each call <function=NAME>, then <parameter=KEY>value</parameter> an argument (a newline
    after the opening tag and before the closing one, as the templates write them, not part of
    the value), one call between each pair of <tool_call> tags: Qwen3.5's and Qwen3-Coder's
    form. A value is text; an argument its tool's schema types as anything but a string is read
    as JSON (or a Python literal), as vLLM's qwen3_coder parser reads it."""
    name = "<function=...> and <parameter=...> values in <tool_call> tags"
    marker = "<function="
    _FUNCTION = re.compile(r"\s*<function=([^>\n]+)>(.*?)</function>\s*", re.S)
    _PARAMETER = re.compile(r"\s*<parameter=([^>\n]+)>(.*?)</parameter>\s*", re.S)

    def __init__(self, tools: list[dict] = ()) -> None:
        # each tool's parameters' schemas, which type its arguments' values
        self._schemas = {tool["function"]["name"]: _parameters(tool).get("properties") or {}
                         for tool in tools}

    def for_tools(self, tools: list[dict]) -> "XmlCalls":
        return XmlCalls(tools)

    def block_calls(self, body: str) -> list[ToolCall] | None:
        """The one call between a pair of tags; None where it is not that."""
        call = self._FUNCTION.fullmatch(body)
        if call is None:
            return None
        name, inside = call.group(1).strip(), call.group(2)
        schemas, arguments, at = self._schemas.get(name, {}), {}, 0
        for parameter in self._PARAMETER.finditer(inside):
            if parameter.start() != at:
                return None  # text between the parameters
            key, at = parameter.group(1).strip(), parameter.end()
            value = parameter.group(2).removeprefix("\n").removesuffix("\n")
            arguments[key] = _typed(value, schemas.get(key))
        if inside[at:].strip():
            return None
        return [ToolCall(name, json.dumps(arguments, ensure_ascii=False), self.new_id())]

    def grammar(self, tools: list[dict], parallel: bool, tag: Callable[[str], str]) -> str:
        """Each tool's call with its arguments in the order its schema lists them (those it
        requires, then any of the others), a string's value any text up to the closing tag and
        the others' JSON under their schemas; a tool whose parameters name none takes any
        arguments as text."""
        more = f" ({NEWLINE} block)*" if parallel else ""
        rules = [f"calls: block{more}",
                 f"block: {tag(self.OPEN)} {NEWLINE} call {NEWLINE} {tag(self.CLOSE)}",
                 "call: " + " | ".join(f"call{i}" for i in range(len(tools))),
                 # a value ends at its first closing tag: text that ends in it and holds it
                 # nowhere before (llguidance's lexer does not go back on a longer match, and
                 # a lazy /...*?/ lost the special tokens after it)
                 r"TEXT: /(.|\n)*\n<\/parameter>/ & ~/(.|\n)*\n<\/parameter>(.|\n)+/",
                 r'any: "<parameter=" /[A-Za-z_][A-Za-z0-9_]*/ ">\n" TEXT "\n"']
        for i, tool in enumerate(tools):
            parameters = _parameters(tool)
            properties = parameters.get("properties") or {}
            required = [name for name in properties if name in parameters.get("required", [])]
            ordered = required + [name for name in properties if name not in required]
            items = [f"arg{i}_{k}" for k in range(len(ordered))]
            rules += [f"{item}: {json.dumps(f'<parameter={name}>' + chr(10))} "
                      + ("TEXT" if _is_text(properties[name]) else
                         f'{json_rule(properties[name], CALL_SPACING)} {NEWLINE} "</parameter>"')
                      + f" {NEWLINE}" for item, name in zip(items, ordered)]
            arguments = _arguments(items, len(required), "") if properties else "any*"
            rules.append(f"call{i}: {json.dumps('<function=' + tool['function']['name'] + '>')} "
                         f"{NEWLINE} {arguments} \"</function>\"")
        return "\n".join(rules)


def _is_text(schema: dict | None) -> bool:
    """Whether a parameter's value is written as it is (a string, or a schema that says no
    type), not as JSON."""
    kinds = (schema or {}).get("type")
    return not kinds or "string" in ([kinds] if isinstance(kinds, str) else kinds)


def _typed(value: str, schema: dict | None):
    """An XML call's argument value as its schema types it: text for a string (or where the
    tool names no such parameter), else JSON or a Python literal where it reads as one."""
    if schema is None or _is_text(schema) and schema.get("type"):
        return value
    for read in (json.loads, ast.literal_eval):
        try:
            return read(value)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return value


def _arguments(items: list[str], required: int, separator: str = '", "') -> str:
    """The first `required` of `items` in order, then any of the rest in order, `separator`
    between."""
    def after(start: int) -> str:
        return " ".join(f"({separator} {item})?" if separator else f"{item}?"
                        for item in items[start:])
    glue = f" {separator} " if separator else " "
    if required:
        return glue.join(items[:required]) + " " + after(required)
    return "(" + " | ".join(f"{item} {after(k + 1)}" for k, item in enumerate(items)) + ")?"


# (XML's templates hold <tool_call> too: asked before the tagged form)
FORMS = (XmlCalls(), TaggedCalls(), JsonCalls(), NamedCalls(), ListedCalls(), GraniteCalls(),
         PythonicCalls())


def form_of(template: str | None) -> CallForm | None:
    """The form a chat template asks for calls in; None where it asks for none read here."""
    return next((form for form in FORMS if template and form.marker in template), None)


def _parameters(tool: dict) -> dict:
    return tool["function"].get("parameters") or {"type": "object"}


def _call_schema(tools: list[dict], arguments: str) -> dict:
    """A call of one of the tools: {"name": its name, `arguments`: its parameters' JSON}."""
    return {"anyOf": [{"type": "object", "additionalProperties": False,
                       "properties": {"name": {"const": tool["function"]["name"]},
                                      arguments: _parameters(tool)},
                       "required": ["name", arguments]} for tool in tools]}


def _call_rule(tools: list[dict], arguments: str) -> str:
    return json_rule(_call_schema(tools, arguments), CALL_SPACING)


def _held_at_marker(marker: str, text: str, sent: int) -> int:
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
