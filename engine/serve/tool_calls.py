"""Tools in OpenAI's chat API, the request's side: the tools a request offers, checked, and an
assistant's past calls, as the model's chat template takes them. What the model writes is read
after the fact (call_forms.py); where the request forces a call, its answer is held to calls in
that form (request.py). A model whose template asks for calls in no form read there is refused
tools (HTTP 400), not answered as if it had been offered them."""
from __future__ import annotations

import json


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
