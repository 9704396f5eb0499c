"""Serving real agents: OpenAI's chat completions API over HTTP, each conversation a client
agent of the engine beside (or instead of) the simulated swarm."""
from engine.serve.completion import AnswerText, Completion
from engine.serve.http_api import ApiServer, parse_address
from engine.serve.request import ChatRequest, RequestError

__all__ = ["AnswerText", "ApiServer", "ChatRequest", "Completion", "RequestError", "parse_address"]
