"""Anthropic's Messages API over the same engine, so that agents written for Anthropic's clients
are served, watched and steered as OpenAI's are: a request is read into the chat completion it
asks for (request.py checks that one's fields), and the answer, read by a Choice as any is, goes
back as Anthropic's content blocks (thinking, text, tool_use), whole or as its stream of events."""
from __future__ import annotations

import json
import uuid

from engine.serve.choice import Choice, usage
from engine.serve.request import RequestError

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
# Fields that ask for what runs on Anthropic's side (code execution, MCP servers): refused, not
# ignored. Others that only steer its service (metadata, service_tier, …) are ignored.
UNSUPPORTED = ("container", "mcp_servers")
TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}  # and {"type": "tool", name}
SAMPLING = (("temperature", "temperature"), ("top_p", "top_p"), ("top_k", "top_k"),
            ("stop_sequences", "stop"), ("stream", "stream"))  # theirs -> OpenAI's


def chat_body(body) -> dict:
    """The chat completion request (OpenAI's fields) that a Messages request asks for."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    asked = [name for name in UNSUPPORTED if body.get(name)]
    if asked:
        raise RequestError(f"{', '.join(asked)}: not supported")
    if body.get("max_tokens") is None:
        raise RequestError("max_tokens: required")
    messages = [] if body.get("system") is None else [
        {"role": "system", "content": _text(body["system"], "system")}]
    turns = body.get("messages")
    if not isinstance(turns, list) or not turns:
        raise RequestError("messages: must be a non-empty list of {role, content} objects")
    for i, turn in enumerate(turns):
        messages += _turn(turn, f"messages[{i}]")
    chat = {"messages": messages, "max_tokens": body["max_tokens"],
            **{ours: body[theirs] for theirs, ours in SAMPLING if theirs in body}}
    if body.get("tools"):
        chat["tools"] = [_tool(tool, f"tools[{i}]") for i, tool in enumerate(_list(
            body["tools"], "tools"))]
    if body.get("tool_choice") is not None:
        chat.update(_tool_choice(body["tool_choice"]))
    output = body.get("output_config") or {}
    if isinstance(output, dict) and isinstance(output.get("format"), dict):
        chat["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "output", "schema": output["format"].get("schema")}}
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") in ("enabled", "disabled"):
        chat["chat_template_kwargs"] = {"enable_thinking": thinking["type"] == "enabled"}
    return chat


def message(choice: Choice, model: str) -> dict:
    """The ended answer as Anthropic's message."""
    whole = choice.whole()
    return {"id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant",
            "model": model, "content": _blocks(whole["message"]),
            **_stop(choice, whole["finish_reason"]), "usage": _usage(choice)}


class EventStream:
    """An answer's stream of Anthropic's events (event name, data), made from the chunks the
    Choice makes for OpenAI's stream: a content block opened for each kind the chunks carry
    (thinking, text, each tool call) and closed before the next."""

    def __init__(self, choice: Choice, model: str) -> None:
        self._choice, self._model = choice, model
        self._index = -1          # the block open now, or last
        self._open: str | None = None

    def opening(self) -> list[tuple[str, dict]]:
        prompt = _usage(self._choice)
        return [("message_start", {"type": "message_start", "message": {
            "id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant",
            "model": self._model, "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {**prompt, "output_tokens": 0}}})]

    def chunks(self, piece: str, reason: str | None) -> list[tuple[str, dict]]:
        events = []
        for chunk in self._choice.chunks(piece, reason):
            delta = chunk.get("delta", {})
            if delta.get("reasoning_content"):
                events += self._block("thinking", {"thinking": ""})
                events.append(self._delta({"type": "thinking_delta",
                                           "thinking": delta["reasoning_content"]}))
            if delta.get("content"):
                events += self._block("text", {"text": ""})
                events.append(self._delta({"type": "text_delta", "text": delta["content"]}))
            for call in delta.get("tool_calls") or []:
                events += self._block("tool_use", {"id": call["id"],
                                                   "name": call["function"]["name"], "input": {}})
                events.append(self._delta({"type": "input_json_delta",
                                           "partial_json": call["function"]["arguments"]}))
                events += self._close()  # a block of its own for each call
            if chunk.get("finish_reason"):
                events += self._close()
                events += [("message_delta", {"type": "message_delta",
                                              "delta": _stop(self._choice, chunk["finish_reason"]),
                                              # cumulative: the prompt's KV held is known now
                                              "usage": _usage(self._choice)}),
                           ("message_stop", {"type": "message_stop"})]
        return events

    def _block(self, kind: str, empty: dict) -> list[tuple[str, dict]]:
        if self._open == kind and kind != "tool_use":
            return []
        events = self._close()
        self._index += 1
        self._open = kind
        return events + [("content_block_start", {"type": "content_block_start",
                                                  "index": self._index,
                                                  "content_block": {"type": kind, **empty}})]

    def _delta(self, delta: dict) -> tuple[str, dict]:
        return "content_block_delta", {"type": "content_block_delta", "index": self._index,
                                       "delta": delta}

    def _close(self) -> list[tuple[str, dict]]:
        if self._open is None:
            return []
        self._open = None
        return [("content_block_stop", {"type": "content_block_stop", "index": self._index})]


def error(message: str, kind: str) -> dict:
    """An error as Anthropic's API writes one (kind: invalid_request_error, api_error, …)."""
    return {"type": "error", "error": {"type": kind, "message": message}}


# -- reading a request --
def _turn(turn, where: str) -> list[dict]:
    """One Anthropic message as the chat messages it stands for: a user's tool results each a
    tool message (first, as they answer the calls before), an assistant's tool uses its calls."""
    if not isinstance(turn, dict) or turn.get("role") not in ("user", "assistant"):
        raise RequestError(f"{where}: must be an object whose role is user or assistant")
    content = turn.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    if not isinstance(blocks, list):
        raise RequestError(f"{where}.content: must be text or a list of content blocks")
    texts, calls, thinking, results = [], [], [], []
    for j, block in enumerate(blocks):
        at = f"{where}.content[{j}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(_text(block.get("text"), at))
        elif kind == "thinking" and turn["role"] == "assistant":
            thinking.append(_text(block.get("thinking"), at))
        elif kind == "redacted_thinking" and turn["role"] == "assistant":
            continue  # nothing a template could show
        elif kind == "tool_use" and turn["role"] == "assistant":
            if not (isinstance(block.get("id"), str) and isinstance(block.get("name"), str)
                    and isinstance(block.get("input", {}), dict)):
                raise RequestError(f"{at}: a tool_use block needs an id, a name and an input "
                                   "object")
            calls.append({"id": block["id"], "type": "function", "function": {
                "name": block["name"], "arguments": json.dumps(block.get("input", {}))}})
        elif kind == "tool_result" and turn["role"] == "user":
            if not isinstance(block.get("tool_use_id"), str):
                raise RequestError(f"{at}: a tool_result block needs the tool_use_id it answers")
            results.append({"role": "tool", "tool_call_id": block["tool_use_id"],
                            "content": _text(block.get("content", ""), at)})
        else:
            raise RequestError(f"{at}: a {turn['role']}'s content blocks may be text"
                               + (", thinking and tool_use" if turn["role"] == "assistant"
                                  else " and tool_result") + f", got {kind!r}")
    said = {"role": turn["role"], "content": "".join(texts)}
    if calls:
        said["tool_calls"] = calls
    if thinking:
        said["reasoning_content"] = "".join(thinking)
    return results + ([said] if texts or calls or not results else [])


def _text(content, where: str) -> str:
    """Text given as a string or as a list of text blocks."""
    if isinstance(content, list) and all(isinstance(b, dict) and b.get("type") == "text"
                                         for b in content):
        content = "".join(str(b.get("text", "")) for b in content)
    if not isinstance(content, str):
        raise RequestError(f"{where}: must be text or a list of text blocks")
    return content


def _list(value, where: str) -> list:
    if not isinstance(value, list):
        raise RequestError(f"{where}: must be a list")
    return value


def _tool(tool, where: str) -> dict:
    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
        raise RequestError(f"{where}: must be an object with a name and an input_schema")
    if tool.get("type") not in (None, "custom"):
        raise RequestError(f"{where}: {tool['type']!r}: only tools the client runs (an "
                           "input_schema, no type or custom) are supported")
    return {"type": "function", "function": {
        "name": tool["name"], "description": tool.get("description", ""),
        "parameters": tool.get("input_schema", {"type": "object"})}}


def _tool_choice(choice) -> dict:
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "tool" and isinstance(choice.get("name"), str):
        chosen = {"tool_choice": {"type": "function", "function": {"name": choice["name"]}}}
    elif kind in TOOL_CHOICES:
        chosen = {"tool_choice": TOOL_CHOICES[kind]}
    else:
        raise RequestError(f"tool_choice: {{type: auto | any | none}} or {{type: tool, name}}, "
                           f"got {choice!r}")
    if choice.get("disable_parallel_tool_use"):
        chosen["parallel_tool_calls"] = False
    return chosen


# -- writing an answer --
def _blocks(said: dict) -> list[dict]:
    """A chat message's reasoning, text and calls as content blocks."""
    blocks = []
    if said.get("reasoning_content"):
        blocks.append({"type": "thinking", "thinking": said["reasoning_content"],
                       "signature": ""})
    if said.get("content"):
        blocks.append({"type": "text", "text": said["content"]})
    for call in said.get("tool_calls") or []:
        blocks.append({"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
                       "input": json.loads(call["function"]["arguments"])})
    return blocks


def _stop(choice: Choice, finish_reason: str) -> dict:
    stop = choice.answer.stop_string
    return {"stop_reason": "stop_sequence" if stop else STOP_REASONS[finish_reason],
            "stop_sequence": stop}


def _usage(choice: Choice) -> dict:
    counted = usage([choice])
    cached = counted["prompt_tokens_details"]["cached_tokens"]
    return {"input_tokens": counted["prompt_tokens"] - cached, "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": 0, "output_tokens": counted["completion_tokens"]}
