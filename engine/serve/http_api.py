"""OpenAI's completions API (chat and text) over HTTP, answered by the running engine, so that a
swarm of real agents (any OpenAI client) can be watched and steered: each conversation is a
client agent of the engine (engine/serve/client_agent.py), batched and speculated for with the
rest.

Endpoints: GET /v1/models, POST /v1/chat/completions (with tools where the model's template
offers them: call_forms.py) and /v1/completions (streamed or not), GET /health. One thread a
connection (the standard library's server); requests reach the engine through its `submit`, and
the answer comes back token by token through a Completion."""
from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from engine.errors import SwarmscopeError
from engine.serve.call_forms import CallStream, ToolCall, form_of
from engine.serve.completion import AnswerText, Completion
from engine.serve.logprobs import AnswerLogprobs
from engine.serve.reasoning import ReasoningSplit
from engine.serve.request import ApiRequest, RequestError
from engine.thinking import thinks

# This machine only, unless asked for: nothing beyond it reaches the engine by default
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8000
MAX_BODY = 64 * 2 ** 20  # bytes a request body may have
CLIENT_LANES = 8  # lanes of full context a serving session's KV cache holds for its clients
COMPLETIONS = {"/v1/chat/completions": True, "/v1/completions": False}  # path -> chat


class ApiServer:
    """Serves the engine `engine_of()` returns (None while none runs: a window loading its
    model), from start() until close()."""

    def __init__(self, engine_of: Callable[[], object | None], host: str = DEFAULT_HOST,
                 port: int = DEFAULT_PORT) -> None:
        handler = type("Handler", (_Handler,), {"engine_of": staticmethod(engine_of)})
        server = type("Server", (ThreadingHTTPServer,), {  # an IPv6 host needs its family
            "address_family": socket.AF_INET6 if ":" in host else socket.AF_INET})
        try:
            self._server = server((host, port), handler)
        except OSError as exc:
            raise SwarmscopeError(f"cannot serve the API on {host}:{port}: {exc.strerror or exc}") \
                from None
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="api-server",
                                        daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/v1"

    def describe(self, engine) -> str:
        """What this server offers with `engine`'s model: its address, tools and reasoning."""
        tokenizer = engine.loaded.tokenizer
        form = form_of(tokenizer.template_for(tools=True))
        tools = (f"tools offered, calls read as {form.name}" if form else
                 "no tools (its chat template asks for tool calls in no form read here)")
        reasoning = "; reasoning apart" if thinks(tokenizer.template_for(tools=False)) else ""
        return f"{self.url}: {engine.loaded.name}, {tools}{reasoning}"

    def start(self) -> "ApiServer":
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    engine_of: Callable[[], object | None]
    server_version = "swarmscope"

    def log_message(self, format, *args) -> None:  # the engine's records say what ran
        pass

    def do_GET(self) -> None:
        path = self.path.split("?")[0].rstrip("/")
        engine = self.engine_of()
        if path == "/health":
            self._json(200 if engine else 503, {"status": "ok" if engine else "loading"})
        elif path == "/v1/models":
            names = [engine.loaded.name] if engine else []
            self._json(200, {"object": "list", "data": [
                {"id": name, "object": "model", "created": 0, "owned_by": "swarmscope"}
                for name in names]})
        else:
            self._error(404, f"no such endpoint: GET {path}", "not_found_error")

    def do_POST(self) -> None:
        path = self.path.split("?")[0].rstrip("/")
        if path not in COMPLETIONS:
            self._error(404, f"no such endpoint: POST {path} (this server answers "
                        f"{' and '.join(COMPLETIONS)})", "not_found_error")
            return
        engine = self.engine_of()
        if engine is None:
            self._error(503, "the model is still loading", "server_error")
            return
        try:
            request = ApiRequest.parse(self._body(), engine.loaded.tokenizer, engine.max_context,
                                       chat=COMPLETIONS[path])
        except RequestError as exc:
            self._error(400, str(exc), "invalid_request_error")
            return
        completion = Completion(request)
        engine.submit(completion)
        # the tags of tool calls and reasoning may be special tokens (Hermes', Llama's): an
        # answer read for them keeps them
        answer = AnswerText(engine.loaded.tokenizer, request.stop,
                            keep_special=request.tool_form is not None or request.thinking)
        logprobs = (AnswerLogprobs(completion, engine.loaded.tokenizer, request.chat)
                    if request.logprobs is not None else None)
        head = {"id": f"{'chatcmpl' if request.chat else 'cmpl'}-{uuid.uuid4().hex[:24]}",
                "created": int(time.time()), "model": engine.loaded.name}
        try:
            if request.stream:
                self._stream(completion, answer, logprobs, head)
            else:
                self._whole(completion, answer, logprobs, head)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client left
        finally:
            completion.cancel()  # ends the turn if the engine is still on it

    # -- answers --
    def _whole(self, completion: Completion, answer: AnswerText,
               logprobs: AnswerLogprobs | None, head: dict) -> None:
        pieces = []
        for kind, value in _pieces(completion, answer):
            if kind == "text":
                pieces.append(value)
            elif kind == "error":
                self._error(503, value, "server_error")
                return
            else:
                request = completion.request
                text = "".join(pieces)
                choice = (_message(request, text, value) if request.chat else
                          _choice(False, text, value))
                if logprobs:
                    choice["logprobs"] = logprobs.take(answer.tokens, always=True)
                self._json(200, {**head, "choices": [choice], "usage": _usage(completion, answer),
                                 "object": "chat.completion" if request.chat else
                                 "text_completion"})

    def _stream(self, completion: Completion, answer: AnswerText,
                logprobs: AnswerLogprobs | None, head: dict) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()

        request = completion.request
        chat = request.chat
        head = {**head, "object": "chat.completion.chunk" if chat else "text_completion"}
        if chat:  # a chat stream opens with the speaker
            self._event({**head, "choices": [{"index": 0, "finish_reason": None,
                                              "delta": {"role": "assistant", "content": ""}}]})
        split = ReasoningSplit(request.inside_reasoning) if request.thinking else None
        held = CallStream(request.tool_form) if request.tool_form else None

        def emit(choice: dict) -> None:
            """A chunk of one choice, with the log-probabilities of the tokens come since the
            last, where they are asked for."""
            if logprobs and (taken := logprobs.take(answer.tokens)):
                choice = {**choice, "logprobs": taken}
            self._event({**head, "choices": [choice]})

        def send(piece: str, last: bool = False) -> None:
            """A piece of the answer's text: its reasoning, then what is not a call."""
            reasoning, text = split.add(piece, last) if split else ("", piece)
            if reasoning:
                emit({"index": 0, "finish_reason": None,
                      "delta": {"reasoning_content": reasoning}})
            if text := held.add(text) if held else text:
                emit(_choice(chat, text, None))

        for kind, value in _pieces(completion, answer):
            if kind == "text":
                send(value)
            elif kind == "error":
                self._event({"error": {"message": value, "type": "server_error"}})
            else:
                send("", last=True)
                rest, calls = held.end() if held else ("", [])
                if rest:
                    emit(_choice(chat, rest, None))
                if calls := _kept(request, calls):
                    emit({"index": 0, "finish_reason": None, "delta": {
                        "tool_calls": [call.as_api(i) for i, call in enumerate(calls)]}})
                    value = "tool_calls"
                emit(_choice(chat, None, value))
                if request.include_usage:
                    self._event({**head, "choices": [], "usage": _usage(completion, answer)})
        self.wfile.write(b"data: [DONE]\n\n")

    # -- plumbing --
    def _body(self):
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            raise RequestError("the request needs a Content-Length header") from None
        if not 0 < length <= MAX_BODY:
            raise RequestError(f"the body must be 1 to {MAX_BODY} bytes, got {length}")
        try:
            return json.loads(self.rfile.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise RequestError(f"the body is not JSON: {exc}") from None

    def _event(self, payload: dict) -> None:
        self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
        self.wfile.flush()

    def _json(self, status: int, payload: dict) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str, kind: str) -> None:
        self._json(status, {"error": {"message": message, "type": kind, "code": None}})


def _pieces(completion: Completion, answer: AnswerText):
    """("text", piece) as the answer's text comes, then ("end", finish_reason) or ("error",
    message). A stop string met cancels the completion, so the engine stops at its next step."""
    while True:
        kind, value = completion.next_event()
        if kind == "error":
            yield "error", value
            return
        piece = answer.add(value) if kind == "tokens" else answer.add([], last=True)
        if piece:
            yield "text", piece
        if answer.stopped or kind == "finish":
            completion.cancel()
            yield "end", "stop" if answer.stopped else value
            return


def _choice(chat: bool, text: str | None, reason: str | None) -> dict:
    """A choice as each endpoint spells a piece of text: a chat stream's delta (none at the end),
    or a text completion's text."""
    if not chat:
        return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": reason}
    return {"index": 0, "delta": {} if text is None else {"content": text},
            "finish_reason": reason}


def _message(request: ApiRequest, text: str, reason: str) -> dict:
    """A whole chat answer's choice: its message, with the reasoning and the tool calls it
    makes where any."""
    message = {"role": "assistant"}
    if request.thinking:
        reasoning, text = ReasoningSplit(request.inside_reasoning).add(text, last=True)
        message["reasoning_content"] = reasoning.strip("\n") or None
    content, calls = request.tool_form.split(text) if request.tool_form else (text, [])
    if calls := _kept(request, calls):
        message.update(content=content.strip() or None,
                       tool_calls=[call.as_api() for call in calls])
        reason = "tool_calls"
    else:
        message["content"] = content
    return {"index": 0, "message": message, "finish_reason": reason}


def _kept(request: ApiRequest, calls: list[ToolCall]) -> list[ToolCall]:
    """The calls an answer makes: with parallel_tool_calls false, its first only."""
    return calls if request.parallel_tool_calls else calls[:1]


def _usage(completion: Completion, answer: AnswerText) -> dict:
    """OpenAI's usage; where the request predicted its answer, the drafts read from the
    prediction that the answer kept and refused (read once the answer ended: the engine counts
    them before it says so)."""
    request = completion.request
    prompt = len(request.prompt_ids)
    usage = {"prompt_tokens": prompt, "completion_tokens": answer.tokens,
             "total_tokens": prompt + answer.tokens,
             "prompt_tokens_details": {"cached_tokens": completion.reused_tokens}}
    if request.prediction is not None:
        usage["completion_tokens_details"] = {
            "accepted_prediction_tokens": request.prediction.kept,
            "rejected_prediction_tokens": request.prediction.refused}
    return usage
