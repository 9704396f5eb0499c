"""vLLM's tokenizer endpoints (POST /tokenize, POST /detokenize, GET /tokenizer_info), as an
evaluation harness's remote tokenizer reads them: the server's tokens, the same as its
completions' prompts."""
import http.client
import json

import pytest
import tokenizers
from tokenizers import processors

from engine.serve.http_api import ApiServer
from engine.serve.request import RequestError
from engine.serve.tokenize import tokenize
from engine.tokenizer import Tokenizer
from tests.engine.loading.conftest import make_sentencepiece_tokenizer_json
from tests.engine.serve.serving import serving

USER = "def add(a, b):\n    return a + b\n\nRepeat the function."


def call(server, method, path, body=None) -> tuple[int, dict]:
    host, port = server._server.server_address[:2]
    connection = http.client.HTTPConnection(host, port, timeout=60)
    connection.request(method, path, body=None if body is None else json.dumps(body).encode())
    response = connection.getresponse()
    return response.status, json.loads(response.read())


def test_the_server_tokenizes_as_its_completions_do(tiny, calibration):
    with serving(tiny, calibration, max_context=512, client_lanes=2) as (_, server):
        # what lm-evaluation-harness asks before it tokenizes remotely
        status, info = call(server, "GET", "/tokenizer_info")
        assert status == 200 and info == {"bos_token": "<s>", "eos_token": "</s>",
                                          "chat_template": None, "model_max_length": 512,
                                          "vocab_size": tiny.tokenizer.vocab_size}
        status, told = call(server, "POST", "/tokenize", {"prompt": "test",
                                                          "add_special_tokens": False})
        assert status == 200 and told["tokens"] == list(b"test")

        ids = tiny.tokenizer.encode_plain(USER)
        assert call(server, "POST", "/tokenize", {"prompt": USER}) == (200, {
            "count": len(ids), "max_model_len": 512, "tokens": ids})
        assert call(server, "POST", "/detokenize", {"tokens": ids}) == (200, {"prompt": USER})
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": USER}]
        _, counted = call(server, "POST", "/tokenize", {"messages": messages})
        _, answer = call(server, "POST", "/v1/chat/completions", {
            "messages": messages, "max_tokens": 1, "temperature": 0})
        assert counted["count"] == answer["usage"]["prompt_tokens"]

        status, refused = call(server, "POST", "/detokenize", {"tokens": [1, 999]})
        assert status == 400 and "tokens: must be a list of this model's token ids, 0 to" in \
            refused["error"]["message"]
        status, refused = call(server, "POST", "/tokenize", {"prompt": 5})
        assert status == 400 and refused["error"]["message"] == "prompt: must be text"


def test_while_a_model_loads_the_tokenizer_is_not_there_yet():
    server = ApiServer(lambda: None, "127.0.0.1", 0).start()
    try:
        assert call(server, "GET", "/tokenizer_info")[0] == 503
        assert call(server, "POST", "/tokenize", {"prompt": "x"})[0] == 503
    finally:
        server.close()


def test_special_tokens_are_added_as_tokenizer_text_adds_them_unless_asked_not(tmp_path):
    inner = tokenizers.Tokenizer.from_file(str(make_sentencepiece_tokenizer_json(
        tmp_path / "tokenizer.json")))
    inner.post_processor = processors.TemplateProcessing(single="<s> $A",
                                                         special_tokens=[("<s>", 1)])
    tokenizer = Tokenizer(inner, bos_token="<s>", eos_tokens=("</s>",))
    with_bos = tokenize({"prompt": "the cat"}, tokenizer, 64)["tokens"]
    assert with_bos[0] == 1 and with_bos[1:] == tokenize(
        {"prompt": "the cat", "add_special_tokens": False}, tokenizer, 64)["tokens"]
    with pytest.raises(RequestError, match="add_special_tokens: must be true or false"):
        tokenize({"prompt": "the cat", "add_special_tokens": "no"}, tokenizer, 64)
