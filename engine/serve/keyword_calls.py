"""The forms of tool calls that write each argument apart, not as one JSON object (call_forms.py
lists them all): LFM2's Python keyword calls and Qwen3.5's XML elements."""
from __future__ import annotations

import ast
import json
import re
from typing import Callable

from engine.chat_template import LFM2_CALLS, LFM2_TOOLS
from engine.output_format import json_rule
from engine.serve.call_form import CALL_SPACING, NEWLINE, ToolCall, parameters
from engine.serve.json_calls import TaggedCalls


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
            properties, ordered, required = _in_order(tool)
            items = [f"arg{i}_{k}" for k in range(len(ordered))]
            rules += [f"{item}: {json.dumps(name + '=')} "
                      f"{json_rule(properties[name], CALL_SPACING)}"
                      for item, name in zip(items, ordered)]
            arguments = (_arguments(items, required) if properties else
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
        self._schemas = {tool["function"]["name"]: parameters(tool).get("properties") or {}
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
            properties, ordered, required = _in_order(tool)
            items = [f"arg{i}_{k}" for k in range(len(ordered))]
            rules += [_element(item, name, properties[name]) for item, name in zip(items, ordered)]
            arguments = _arguments(items, required, "") if properties else "any*"
            rules.append(f"call{i}: {json.dumps('<function=' + tool['function']['name'] + '>')} "
                         f"{NEWLINE} {arguments} \"</function>\"")
        return "\n".join(rules)


def _element(rule: str, name: str, schema: dict) -> str:
    """The Lark rule `rule` for an argument's element: its value text up to the closing tag, or
    JSON under `schema` and then the closing tag."""
    value = ("TEXT" if _is_text(schema) else
             f'{json_rule(schema, CALL_SPACING)} {NEWLINE} "</parameter>"')
    return f"{rule}: {json.dumps(f'<parameter={name}>')} {NEWLINE} {value} {NEWLINE}"


def _in_order(tool: dict) -> tuple[dict, list[str], int]:
    """A tool's parameters' schemas, their names in the order a forced call writes them (those
    its schema requires, then the others, each in the schema's order), and how many it
    requires."""
    schema = parameters(tool)
    properties = schema.get("properties") or {}
    required = [name for name in properties if name in schema.get("required", [])]
    return properties, required + [name for name in properties if name not in required], \
        len(required)


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
