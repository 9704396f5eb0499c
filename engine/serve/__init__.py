"""Serving real agents: OpenAI's chat completions API over HTTP (http_api), its requests
checked (request), each conversation a client agent of the engine (client_agent), answers
coming back token by token (completion)."""
