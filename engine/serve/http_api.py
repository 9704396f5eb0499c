"""OpenAI's completions API (chat and text), and Anthropic's Messages API, over HTTP, answered by
the running engine, so that a swarm of real agents (any OpenAI or Anthropic client) can be
watched and steered: each conversation is a
client agent of the engine (engine/serve/client_agent.py), batched and speculated for with the
rest.

Endpoints: GET /v1/models, POST /v1/chat/completions (with tools where the model's template
offers them: call_forms.py) and /v1/completions (streamed or not), Anthropic's POST
/v1/messages and /v1/messages/count_tokens (messages.py), GET /health, GET /metrics
(the engine's numbers for Prometheus: metrics.py), and vLLM's POST /tokenize, POST /detokenize
and GET /tokenizer_info (tokenize.py). One thread a connection (the standard library's
server); requests reach the engine through its `submit`, a
Completion for each answer asked (`n`, or a text completion's prompts), and each comes back token
by token through it, read as a Choice (choice.py)."""
from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from engine.errors import SwarmscopeError
from engine.serve import messages, metrics, tokenize
from engine.serve.call_forms import form_of
from engine.serve.choice import Choice, usage
from engine.serve.completion import Completion
from engine.serve.request import ApiRequest, RequestError, parse_choices
from engine.telemetry.totals import Guarded
from engine.thinking import thinks

# This machine only, unless asked for: nothing beyond it reaches the engine by default
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8000
MAX_BODY = 64 * 2 ** 20  # bytes a request body may have
CLIENT_LANES = 8  # lanes of full context a serving session's KV cache holds for its clients
COMPLETIONS = {"/v1/chat/completions": True, "/v1/completions": False}  # path -> chat
TOKENIZING = ("/tokenize", "/detokenize")  # POST, vLLM's (tokenize.py)
MESSAGES = ("/v1/messages", "/v1/messages/count_tokens")  # POST, Anthropic's (messages.py)
ANTHROPIC_ERRORS = {"server_error": "api_error"}  # OpenAI's error types Anthropic names otherwise


class ApiServer:
    """Serves the engine `engine_of()` returns (None while none runs: a window loading its
    model), from start() until close()."""

    def __init__(self, engine_of: Callable[[], object | None], host: str = DEFAULT_HOST,
                 port: int = DEFAULT_PORT) -> None:
        self.served = Guarded(metrics.ServedTotals())
        handler = type("Handler", (_Handler,), {"engine_of": staticmethod(engine_of),
                                                "served": self.served})
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
        """The API's base URL, as OpenAI's clients take it."""
        return f"{self.root}/v1"

    @property
    def metrics_url(self) -> str:
        return f"{self.root}/metrics"

    @property
    def root(self) -> str:
        """The server's address, as Anthropic's clients take it for their base URL."""
        host, port = self._server.server_address[:2]
        return f"http://{f'[{host}]' if ':' in host else host}:{port}"

    def describe(self, engine) -> str:
        """What this server offers with `engine`'s model: its address, tools, reasoning and the
        sampling it gives a request that leaves it out."""
        tokenizer = engine.loaded.tokenizer
        form = form_of(tokenizer.template_for(tools=True))
        tools = (f"tools offered, calls read as {form.name}" if form else
                 "no tools (its chat template asks for tool calls in no form read here)")
        reasoning = "; reasoning apart" if thinks(tokenizer.template_for(tools=False)) else ""
        defaults = engine.loaded.sampling_defaults
        sampling = ("; by default " + ", ".join(f"{name} {value:g}" for name, value in
                                                 defaults.items()) if defaults else "")
        return f"{self.url}: {engine.loaded.name}, {tools}{reasoning}{sampling}"

    def start(self) -> "ApiServer":
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    engine_of: Callable[[], object | None]
    served: Guarded[metrics.ServedTotals]
    server_version = "swarmscope"
    _anthropic = False  # a POST to Anthropic's API, whose errors are written its way

    def log_message(self, format, *args) -> None:  # the engine's records say what ran
        pass

    def do_GET(self) -> None:
        path = self.path.split("?")[0].rstrip("/")
        engine = self.engine_of()
        if path == "/health":
            self._json(200 if engine else 503, {"status": "ok" if engine else "loading"})
        elif path == "/metrics":
            self._send(200, metrics.render(engine, self.served.snapshot()).encode(),
                       metrics.CONTENT_TYPE)
        elif path == "/tokenizer_info" and engine is None:
            self._error(503, "the model is still loading", "server_error")
        elif path == "/tokenizer_info":
            self._json(200, tokenize.tokenizer_info(engine.loaded.tokenizer, engine.max_context))
        elif path == "/v1/models":
            names = [engine.loaded.name] if engine else []
            self._json(200, {"object": "list", "data": [
                {"id": name, "object": "model", "created": 0, "owned_by": "swarmscope"}
                for name in names]})
        else:
            self._error(404, f"no such endpoint: GET {path}", "not_found_error")

    def do_POST(self) -> None:
        arrived = time.perf_counter()
        path = self.path.split("?")[0].rstrip("/")
        self._anthropic = path in MESSAGES  # its errors as Anthropic's API writes them
        if path not in (*COMPLETIONS, *MESSAGES, *TOKENIZING):
            *others, last = (*COMPLETIONS, *MESSAGES, *TOKENIZING)
            self._error(404, f"no such endpoint: POST {path} (this server answers "
                        f"{', '.join(others)} and {last})", "not_found_error")
            return
        engine = self.engine_of()
        if engine is None:
            self._error(503, "the model is still loading", "server_error")
            return
        tokenizer, room = engine.loaded.tokenizer, engine.max_context
        try:
            body = self._body()
            if path in TOKENIZING:
                self._json(200, tokenize.tokenize(body, tokenizer, room) if path == "/tokenize"
                           else tokenize.detokenize(body, tokenizer))
                return
            if path == "/v1/messages/count_tokens":  # which asks no max_tokens
                body = {**body, "max_tokens": 1} if isinstance(body, dict) else body
            requests = parse_choices(messages.chat_body(body) if self._anthropic else body,
                                     tokenizer, room, chat=COMPLETIONS.get(path, True),
                                     defaults=engine.loaded.sampling_defaults)
        except RequestError as exc:
            self._error(400, str(exc), "invalid_request_error")
            return
        if path == "/v1/messages/count_tokens":
            self._json(200, {"input_tokens": len(requests[0].prompt_ids)})
        else:
            self._answer(requests, engine, arrived)

    # -- answers --
    def _answer(self, requests: list[ApiRequest], engine, arrived: float) -> None:
        """The engine's answers to `requests` (a request's choices), whole or streamed, in the
        API's own form; counted for /metrics once they ended (or the client left)."""
        completions = Completion.choices(requests)
        for completion in completions:
            engine.submit(completion)
        choices = [Choice(completion, engine.loaded.tokenizer) for completion in completions]
        chat = requests[0].chat
        head = {"id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}",
                "created": int(time.time()), "model": engine.loaded.name}
        try:
            if self._anthropic:
                self._message(choices[0], engine.loaded.name)
            elif requests[0].stream:
                self._stream(choices, head)
            else:
                self._whole(choices, head)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client left
        finally:
            for completion in completions:
                completion.cancel()  # ends the turn if the engine is still on it
            firsts = [choice.first_token_at for choice in choices if choice.first_token_at]
            self.served.add([choice.finish_reason for choice in choices], usage(choices),
                            min(firsts) - arrived if firsts else None,
                            time.perf_counter() - arrived)

    def _whole(self, choices: list[Choice], head: dict) -> None:
        try:
            for _ in _answers(choices):
                pass  # each choice keeps its text
        except _EngineFailed as failed:
            self._error(503, str(failed), "server_error")
            return
        chat = choices[0].request.chat
        self._json(200, {**head, "choices": [choice.whole() for choice in choices],
                         "usage": usage(choices),
                         "object": "chat.completion" if chat else "text_completion"})

    def _stream(self, choices: list[Choice], head: dict) -> None:
        self._open_stream()
        request = choices[0].request
        head = {**head, "object": "chat.completion.chunk" if request.chat else "text_completion"}
        if request.chat:  # a chat stream opens with the speaker
            for choice in choices:
                self._event({**head, "choices": [choice.opening()]})
        try:
            for choice, piece, reason in _answers(choices):
                for chunk in choice.chunks(piece, reason):
                    self._event({**head, "choices": [chunk]})
            if request.include_usage:
                self._event({**head, "choices": [], "usage": usage(choices)})
        except _EngineFailed as failed:
            self._event({"error": {"message": str(failed), "type": "server_error"}})
        self.wfile.write(b"data: [DONE]\n\n")

    def _message(self, choice: Choice, model: str) -> None:
        """Anthropic's message, whole or as its stream of named events."""
        if not choice.request.stream:
            try:
                for _ in _answers([choice]):
                    pass
            except _EngineFailed as failed:
                self._error(503, str(failed), "server_error")
                return
            self._json(200, messages.message(choice, model))
            return
        self._open_stream()
        events = messages.EventStream(choice, model)
        self._events(events.opening())
        try:
            for _, piece, reason in _answers([choice]):
                self._events(events.chunks(piece, reason))
        except _EngineFailed as failed:
            self._events([("error", messages.error(str(failed), "api_error"))])

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

    def _open_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()

    def _events(self, named: list[tuple[str, dict]]) -> None:
        """Server-sent events with names, as Anthropic's stream has them."""
        for name, payload in named:
            self.wfile.write(f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode())
        self.wfile.flush()

    def _event(self, payload: dict) -> None:
        self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
        self.wfile.flush()

    def _json(self, status: int, payload: dict) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str, kind: str) -> None:
        if self._anthropic:
            self._json(status, messages.error(message, ANTHROPIC_ERRORS.get(kind, kind)))
        else:
            self._json(status, {"error": {"message": message, "type": kind, "code": None}})


class _EngineFailed(Exception):
    """The engine could not answer (it stopped, or failed a step); the message says why."""


def _answers(choices: list[Choice]):
    """(choice, piece, finish reason or None) as the choices' answers come, until every one
    ended; _EngineFailed where the engine fails one."""
    ended = 0
    while ended < len(choices):
        index, kind, value = choices[0].completion.next_event()
        choice = choices[index]
        if kind == "error":
            raise _EngineFailed(value)
        if choice.finish_reason:  # a stop string ended it, and the engine's end came after
            continue
        piece, reason = choice.take(kind, value)
        ended += reason is not None
        yield choice, piece, reason
