"""The HTTP API end to end: a server on a free port, the tiny model's engine stepping on a
thread of its own (wall clock), and a plain HTTP client."""
import http.client
import json
import pathlib
import re
import signal
import subprocess
import sys
import threading
import urllib.parse

import pytest
import tokenizers
import torch
from tokenizers import AddedToken

from engine.controls import Controls
from engine.errors import SwarmscopeError
from engine.generate import generate
from engine.sampling import SamplingParams
from engine.cli.options import parse_address
from engine.serve.http_api import ApiServer
from engine.telemetry.trace_reader import read_trace
from engine.tokenizer import Tokenizer
from tests.engine.loading.conftest import engine_logits, make_tokenizer_json
from tests.engine.serve.serving import scripted_client, serving

ROOT = pathlib.Path(__file__).resolve().parents[3]

USER = "def add(a, b):\n    return a + b\n\nRepeat the function."


@pytest.fixture
def served(tiny, calibration):
    """(engine, server) with the engine stepping until the test ends."""
    with serving(tiny, calibration, max_context=512, client_lanes=4) as pair:
        yield pair


def call(server, method, path, body=None):
    host, port = server._server.server_address[:2]
    connection = http.client.HTTPConnection(host, port, timeout=60)
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    connection.request(method, path, body=data,
                       headers={"Content-Type": "application/json"} if data else {})
    response = connection.getresponse()
    return response.status, response.read().decode()


def chat(**body):
    return {"messages": [{"role": "user", "content": USER}], "temperature": 0, "max_tokens": 12,
            **body}


def test_an_answer_and_its_usage(served, tiny):
    engine, server = served
    status, text = call(server, "POST", "/v1/chat/completions", chat())
    reply = json.loads(text)
    expected = generate(tiny, [USER], Controls(policy="off"), max_new_tokens=12)[0]
    assert status == 200 and reply["object"] == "chat.completion"
    assert reply["choices"][0]["message"] == {"role": "assistant", "content": expected.text}
    assert reply["choices"][0]["finish_reason"] == "length"
    assert reply["usage"]["completion_tokens"] == 12
    assert reply["usage"]["prompt_tokens"] == len(tiny.tokenizer.encode(
        tiny.tokenizer.chat_prompt(USER)))
    assert reply["model"] == engine.loaded.name


def test_penalties_and_a_logit_bias_shape_the_answer_as_generate_has_it(served, tiny):
    """The API's fields reach the lane: its answer is generate's with the same sampling."""
    _, server = served
    asked = dict(presence_penalty=0.5, frequency_penalty=1.0, repetition_penalty=1.5,
                 logit_bias={str(ord("x")): 8})
    status, text = call(server, "POST", "/v1/chat/completions", chat(**asked))
    answer = json.loads(text)["choices"][0]["message"]["content"]
    sampling = SamplingParams(presence_penalty=0.5, frequency_penalty=1.0,
                              repetition_penalty=1.5, logit_bias=((ord("x"), 8.0),))
    expected = generate(tiny, [USER], Controls(policy="off"), max_new_tokens=12,
                        sampling=sampling)[0].text
    assert status == 200 and answer == expected
    assert "x" in answer and answer != generate(tiny, [USER], Controls(policy="off"),
                                                max_new_tokens=12)[0].text


def test_a_predicted_answer_is_drafted_from_and_kept_as_the_model_writes_it(served, tiny):
    """OpenAI's Predicted Outputs: the prediction is what the lane drafts from; the answer is the
    model's whatever it predicts, and usage says how many of its tokens were kept. (Penalties
    and a bias make the tiny model write letters it never repeats, which the context alone
    cannot predict.)"""
    engine, server = served
    engine.mailbox.post(policy="fixed", k=4)
    letters = {ord(c): 3.0 for c in "abcdefghijklmnopqrstuvwxyz"}
    sampling = SamplingParams(presence_penalty=2, frequency_penalty=2,
                              logit_bias=tuple(letters.items()))
    expected = generate(tiny, [USER], Controls(policy="off"), max_new_tokens=16,
                        sampling=sampling)[0].text
    asked = chat(max_tokens=16, presence_penalty=2, frequency_penalty=2,
                 logit_bias={str(token): bias for token, bias in letters.items()})
    kept = {}
    for prediction in (expected, expected[:5] + "And then a different answer."):
        status, text = call(server, "POST", "/v1/chat/completions",
                            {**asked, "prediction": {"type": "content", "content": prediction}})
        reply = json.loads(text)
        assert status == 200 and reply["choices"][0]["message"]["content"] == expected
        kept[prediction] = reply["usage"]["completion_tokens_details"]
    assert len(set(expected)) == len(expected) == 16  # nothing to copy from the context
    assert kept[expected] == {"accepted_prediction_tokens": 12, "rejected_prediction_tokens": 0}
    assert [kept[p]["accepted_prediction_tokens"] for p in kept] == [12, 4]
    status, text = call(server, "POST", "/v1/chat/completions", asked)
    assert "completion_tokens_details" not in json.loads(text)["usage"]


def test_log_probabilities_come_with_each_token_whole_streamed_and_as_text(served, tiny):
    """The model's own, each token's text and bytes with its row's likeliest; a greedy
    answer's tokens are their rows' likeliest. Streamed, they come with the chunks, in order."""
    _, server = served
    status, text = call(server, "POST", "/v1/chat/completions",
                        chat(logprobs=True, top_logprobs=2))
    reply = json.loads(text)
    choice = reply["choices"][0]
    entries = choice["logprobs"]["content"]
    assert status == 200 and len(entries) == reply["usage"]["completion_tokens"] == 12
    assert "".join(entry["token"] for entry in entries) == choice["message"]["content"]
    for entry in entries:
        assert bytes(entry["bytes"]).decode() == entry["token"] and entry["logprob"] <= 0
        assert len(entry["top_logprobs"]) == 2
        assert entry["top_logprobs"][0]["logprob"] == pytest.approx(entry["logprob"])
    _, streamed = call(server, "POST", "/v1/chat/completions",
                       chat(logprobs=True, top_logprobs=2, stream=True))
    chunks = [json.loads(event.removeprefix("data: ")) for event in streamed.split("\n\n")
              if event.startswith("data: {")]
    streamed_entries = [entry for chunk in chunks for entry in
                        (chunk["choices"][0].get("logprobs") or {}).get("content", [])]
    # the same tokens; their log-probabilities to fp32's rounding, which moves with the rows a
    # pass holds (a token verified among drafts, or decoded alone: speculation's timing decides)
    assert _without_logprobs(streamed_entries) == _without_logprobs(entries)
    assert _logprobs(streamed_entries) == pytest.approx(_logprobs(entries), rel=1e-5)
    _, text = call(server, "POST", "/v1/completions", {"prompt": USER, "max_tokens": 5,
                                                        "temperature": 0, "logprobs": 1})
    legacy = json.loads(text)["choices"][0]
    given = legacy["logprobs"]
    assert "".join(given["tokens"]) == legacy["text"] and len(given["token_logprobs"]) == 5
    assert given["text_offset"] == [sum(map(len, given["tokens"][:i])) for i in range(5)]
    assert all(len(top) == 1 for top in given["top_logprobs"])
    _, text = call(server, "POST", "/v1/chat/completions", chat())
    assert "logprobs" not in json.loads(text)["choices"][0]


def _without_logprobs(entries: list[dict]) -> list[dict]:
    """Log-probability entries' tokens and bytes, theirs and their rows' likeliest."""
    return [{"token": entry["token"], "bytes": entry["bytes"],
             "top": _without_logprobs(entry.get("top_logprobs", []))} for entry in entries]


def _logprobs(entries: list[dict]) -> list[float]:
    """Every log-probability in the entries, each entry's then its rows' likeliest."""
    return [value for entry in entries
            for value in [entry["logprob"], *_logprobs(entry.get("top_logprobs", []))]]


def test_a_streamed_answer_comes_in_server_sent_events(served, tiny):
    _, server = served
    status, text = call(server, "POST", "/v1/chat/completions",
                        chat(stream=True, stream_options={"include_usage": True}))
    events = [line.removeprefix("data: ") for line in text.split("\n\n") if line]
    assert status == 200 and events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert content == generate(tiny, [USER], Controls(policy="off"), max_new_tokens=12)[0].text
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 12


def test_a_stop_string_ends_the_answer_and_the_turn(served):
    engine, server = served
    # one token a step, so the engine is far from max_tokens when the stop string cancels it
    engine.mailbox.post(policy="off")
    # the tiny model's greedy answer is newlines: it ends before the first two
    status, text = call(server, "POST", "/v1/chat/completions",
                        chat(stop=["x", "\n\n"], max_tokens=400))
    reply = json.loads(text)
    assert status == 200 and reply["choices"][0]["message"]["content"] == ""
    assert reply["choices"][0]["finish_reason"] == "stop"
    assert reply["usage"]["completion_tokens"] < 400
    for _ in range(100):  # the engine ends the turn at its next step
        if [agent.state for agent in engine.agents()] == ["tool"]:
            break
        threading.Event().wait(0.05)
    assert [agent.state for agent in engine.agents()] == ["tool"]
    assert engine.agents()[0].tokens < 400


def test_openais_own_client_talks_to_it(served, tiny):
    """The client agents are written against: its parsing of answers, streams and errors."""
    import openai
    _, server = served
    client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
    expected = generate(tiny, [USER], Controls(policy="off"), max_new_tokens=12)[0].text
    reply = client.chat.completions.create(model="any", **chat())
    assert reply.choices[0].message.content == expected and reply.usage.completion_tokens == 12
    stream = client.chat.completions.create(model="any", stream=True, **chat())
    assert "".join(chunk.choices[0].delta.content or "" for chunk in stream) == expected
    with pytest.raises(openai.BadRequestError, match="max_tokens: must be an integer"):
        client.chat.completions.create(model="any", **chat(max_tokens=-1))
    # what it makes of the fields that come on request: log-probabilities and a prediction's use
    asked = client.chat.completions.create(
        model="any", logprobs=True, top_logprobs=1,
        prediction={"type": "content", "content": expected}, **chat())
    assert [entry.token for entry in asked.choices[0].logprobs.content] == list(expected)
    assert asked.usage.completion_tokens_details.accepted_prediction_tokens >= 0
    assert [model.id for model in client.models.list()] == [tiny.name]


def test_a_text_completion_continues_the_prompt_as_given(served, tiny):
    """/v1/completions: no chat template, the prompt as transformers' tokenizer(text) encodes
    it; the answer what `generate` gives it plain, whole or streamed."""
    import openai
    _, server = served
    body = {"prompt": USER, "temperature": 0, "max_tokens": 12}
    expected = generate(tiny, [USER], Controls(policy="off"), max_new_tokens=12,
                        chat=False)[0].text
    status, text = call(server, "POST", "/v1/completions", body)
    reply = json.loads(text)
    assert status == 200 and reply["object"] == "text_completion"
    assert reply["choices"][0]["text"] == expected and reply["id"].startswith("cmpl-")
    assert reply["usage"]["prompt_tokens"] == len(tiny.tokenizer.encode_plain(USER))
    client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
    stream = client.completions.create(model="any", stream=True, **body)
    assert "".join(chunk.choices[0].text for chunk in stream) == expected
    with pytest.raises(openai.BadRequestError, match="prompt: must be non-empty text"):
        client.completions.create(model="any", prompt="", max_tokens=2)


def prompt_logprobs(model, ids: list[int]) -> list[float]:
    """Each prompt token's log-probability after those before it, from one forward pass over
    the whole prompt (a fresh KV cache of its own)."""
    rows = engine_logits(model, ids)
    return rows[:-1].log_softmax(-1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0].tolist()


def test_an_echoed_prompt_comes_first_with_its_tokens_log_probabilities(served, tiny):
    """`echo` with `logprobs`, as evaluation harnesses (lm-evaluation-harness's
    local-completions) ask for a text's likelihood: the prompt's tokens each with the
    log-probability the model gives it after those before it (the first null), fed in chunks
    (the prompt is longer than a step's tokens), then the answer's."""
    engine, server = served
    prompt = USER * 6  # 330 bytes: two prefill chunks of at most 256 tokens
    ids = tiny.tokenizer.encode_plain(prompt)
    assert len(ids) > engine.config.max_step_tokens
    answer = generate(tiny, [prompt], Controls(policy="off"), max_new_tokens=3, chat=False)[0]
    status, text = call(server, "POST", "/v1/completions", {
        "prompt": prompt, "echo": True, "logprobs": 2, "max_tokens": 3, "temperature": 0})
    assert status == 200, text
    reply = json.loads(text)["choices"][0]
    given = reply["logprobs"]
    assert reply["text"] == prompt + answer.text == "".join(given["tokens"])
    assert len(given["tokens"]) == len(ids) + 3
    assert given["token_logprobs"][0] is None and given["top_logprobs"][0] is None
    assert given["token_logprobs"][1:len(ids)] == pytest.approx(
        prompt_logprobs(tiny.model, ids), abs=1e-4)
    assert given["text_offset"][len(ids)] == len(prompt)
    for logprob, top in zip(given["token_logprobs"][1:], given["top_logprobs"][1:]):
        assert len(top) == 2 and max(top.values()) >= logprob - 1e-6
    # the answer's tokens are greedy: each its row's likeliest, as a harness reads it
    assert all(logprob == pytest.approx(max(top.values())) for logprob, top in
               zip(given["token_logprobs"][len(ids):], given["top_logprobs"][len(ids):]))

    # the conversation goes on with echo: fed whole again, none of its KV taken as held
    longer = prompt + answer.text + "And again."
    status, text = call(server, "POST", "/v1/completions", {
        "prompt": longer, "echo": True, "logprobs": 0, "max_tokens": 2, "temperature": 0})
    reply = json.loads(text)
    longer_ids = tiny.tokenizer.encode_plain(longer)
    assert reply["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert reply["choices"][0]["logprobs"]["token_logprobs"][1:len(longer_ids)] == \
        pytest.approx(prompt_logprobs(tiny.model, longer_ids), abs=1e-4)


def test_an_echoed_prompt_asked_for_no_answer_is_scored_alone(served, tiny):
    """max_tokens 0 with echo, as OpenAI's legacy completions took it: the prompt's text and
    log-probabilities, nothing written; without echo, at least one token is asked."""
    _, server = served
    ids = tiny.tokenizer.encode_plain(USER)
    for stream in (False, True):
        status, text = call(server, "POST", "/v1/completions", {
            "prompt": USER, "echo": True, "logprobs": 1, "max_tokens": 0, "stream": stream,
            "stream_options": {"include_usage": True} if stream else None})
        assert status == 200, text
        chunks = events_of(text) if stream else [json.loads(text)]
        choices = [choice for chunk in chunks for choice in chunk["choices"]]
        assert "".join(choice["text"] for choice in choices) == USER
        assert choices[-1]["finish_reason"] == "length"
        assert chunks[-1]["usage"]["completion_tokens"] == 0
        token_logprobs = [lp for choice in choices if choice["logprobs"]
                          for lp in choice["logprobs"]["token_logprobs"]]
        assert token_logprobs[1:] == pytest.approx(prompt_logprobs(tiny.model, ids), abs=1e-4)
    status, text = call(server, "POST", "/v1/completions", {"prompt": USER, "max_tokens": 0})
    assert status == 400 and "max_tokens: must be an integer >= 1, got 0" in text


def test_the_models_sampling_serves_where_a_request_leaves_it_out(tmp_path):
    """As vLLM serves generation_config.json's sampling: a request's own fields win, the
    model's fill in the rest (OpenAI's defaults where the model has none)."""
    tok = Tokenizer(tokenizers.Tokenizer.from_file(str(make_tokenizer_json(
        tmp_path / "tokenizer.json"))), eos_tokens=("<|im_end|>",))
    with scripted_client(tok, "hi") as (engine, client):
        engine.loaded.sampling_defaults = {"temperature": 0.7, "top_k": 20}
        client.chat.completions.create(model="any", messages=[{"role": "user", "content": "a"}])
        client.chat.completions.create(model="any", temperature=0, top_p=0.5,
                                       messages=[{"role": "user", "content": "a"}])
    given, asked = (request.sampling for request in engine.requests)
    assert (given.temperature, given.top_k, given.top_p) == (0.7, 20, 1.0)
    assert (asked.temperature, asked.top_k, asked.top_p) == (0.0, 20, 0.5)


def test_a_code_models_hole_is_filled_between_the_prompt_and_its_suffix(tmp_path):
    """OpenAI's client sends a text completion with a suffix, as a code editor does: the model
    is prompted in its fill-in-the-middle tokens (Qwen2.5-Coder's here), special tokens as the
    vocabulary has them, and the answer is the hole's text alone."""
    inner = tokenizers.Tokenizer.from_file(str(make_tokenizer_json(tmp_path / "tokenizer.json")))
    marks = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")
    inner.add_special_tokens([AddedToken(mark, special=True, normalized=False) for mark in marks])
    tok = Tokenizer(inner, eos_tokens=("<|im_end|>",))
    with scripted_client(tok, "x, y") as (engine, client):
        reply = client.completions.create(model="any", prompt="def add(", suffix="):\n",
                                          max_tokens=8)
        assert reply.choices[0].text == "x, y"
        assert engine.prompts == ["<|fim_prefix|>def add(<|fim_suffix|>):\n<|fim_middle|>"]
        assert [inner.id_to_token(i) for i in tok.encode_plain(engine.prompts[0])
                if inner.id_to_token(i) in marks] == list(marks)  # one token each


def test_echo_without_logprobs_and_streamed_starts_with_the_prompt(served, tiny):
    _, server = served
    body = {"prompt": USER, "echo": True, "max_tokens": 4, "temperature": 0}
    answer = generate(tiny, [USER], Controls(policy="off"), max_new_tokens=4, chat=False)[0]
    reply = json.loads(call(server, "POST", "/v1/completions", body)[1])["choices"][0]
    assert reply["text"] == USER + answer.text and reply["logprobs"] is None
    _, streamed = call(server, "POST", "/v1/completions", {**body, "stream": True})
    pieces = [event["choices"][0]["text"] for event in events_of(streamed)]
    assert pieces[0].startswith(USER) and "".join(pieces) == USER + answer.text
    status, text = call(server, "POST", "/v1/chat/completions", chat(echo=True))
    assert status == 400 and "echo: only /v1/completions" in text


def test_a_text_completions_end_token_has_its_entry_and_a_chats_has_none(served, tiny):
    """An evaluation harness reads a text completion's log-probabilities by position: every
    token the usage counts has its entry, the end token too (as OpenAI's legacy completions
    and vLLM give it); a chat's content has none for it, as its text has none."""
    _, server = served
    end = {str(tiny.tokenizer.EOS): 100}  # the answer ends at once
    reply = json.loads(call(server, "POST", "/v1/completions", {
        "prompt": "abc", "echo": True, "logprobs": 1, "max_tokens": 3, "temperature": 0,
        "logit_bias": end})[1])
    given = reply["choices"][0]["logprobs"]
    assert reply["choices"][0]["text"] == "abc" and reply["usage"]["completion_tokens"] == 1
    assert given["tokens"] == ["a", "b", "c", "</s>"] and given["text_offset"][-1] == 3
    assert len(given["token_logprobs"]) == 3 + 1 and given["token_logprobs"][-1] <= 0
    chat_end = {str(tiny.tokenizer.IM_END): 100}
    reply = json.loads(call(server, "POST", "/v1/chat/completions",
                            chat(logprobs=True, logit_bias=chat_end))[1])
    assert reply["choices"][0]["message"]["content"] == ""
    assert reply["choices"][0]["logprobs"]["content"] == []


def test_a_sampled_answer_is_the_same_with_its_prompt_echoed_and_scored(served):
    """The rows a step adds for the prompt's log-probabilities come before the rows the answer
    is sampled from: the same seed samples the same answer."""
    engine, server = served
    engine.mailbox.post(policy="off")  # one draw a token, however the drafts would go
    body = {"prompt": USER, "max_tokens": 8, "temperature": 1.0, "seed": 7}
    plain = json.loads(call(server, "POST", "/v1/completions", body)[1])["choices"][0]["text"]
    echoed = json.loads(call(server, "POST", "/v1/completions", {
        **body, "echo": True, "logprobs": 1})[1])["choices"][0]["text"]
    assert echoed == USER + plain


def events_of(streamed: str) -> list[dict]:
    return [json.loads(event.removeprefix("data: ")) for event in streamed.split("\n\n")
            if event.startswith("data: {")]


def test_n_answers_are_each_the_answer_its_seed_gives_alone(served, tiny):
    """n choices, each its own lane (seeds one after another), whole or streamed (chunks told
    apart by their index); usage counts the prompt once and every answer's tokens."""
    engine, server = served
    engine.mailbox.post(policy="off")  # a sampled answer is its seed's with the same drafts
    sampled = chat(temperature=1, seed=7)
    alone = [json.loads(call(server, "POST", "/v1/chat/completions", {**sampled, "seed": seed})[1])
             ["choices"][0]["message"]["content"] for seed in (7, 8, 9)]
    status, text = call(server, "POST", "/v1/chat/completions", {**sampled, "n": 3})
    reply = json.loads(text)
    assert status == 200 and [c["index"] for c in reply["choices"]] == [0, 1, 2]
    assert [c["message"]["content"] for c in reply["choices"]] == alone
    assert len(set(alone)) == 3  # different seeds, different answers
    prompt = len(tiny.tokenizer.encode(tiny.tokenizer.chat_prompt(USER)))
    assert reply["usage"]["prompt_tokens"] == prompt
    assert reply["usage"]["completion_tokens"] == 36
    _, streamed = call(server, "POST", "/v1/chat/completions",
                       {**sampled, "n": 3, "stream": True,
                        "stream_options": {"include_usage": True}})
    chunks = events_of(streamed)
    assert [c["choices"][0]["delta"]["role"] for c in chunks[:3]] == ["assistant"] * 3
    texts, ends = ["", "", ""], {}
    for chunk in chunks[3:-1]:
        (choice,) = chunk["choices"]
        texts[choice["index"]] += choice["delta"].get("content", "")
        if choice["finish_reason"]:
            ends[choice["index"]] = choice["finish_reason"]
    assert texts == alone and ends == {0: "length", 1: "length", 2: "length"}
    assert chunks[-1]["usage"] == reply["usage"]


def test_a_text_completion_answers_each_prompt_given_as_text_or_ids(served, tiny):
    """A list of prompts, text or token ids, gets its choices prompt by prompt (n each), each
    what generate gives that prompt; OpenAI's client reads them."""
    import openai
    _, server = served
    prompts = [USER, "Say hello."]
    expected = [r.text for r in generate(tiny, prompts, Controls(policy="off"),
                                         max_new_tokens=6, chat=False)]
    ids = tiny.tokenizer.encode_plain(prompts[1])
    body = {"prompt": [prompts[0], ids], "n": 2, "temperature": 0, "max_tokens": 6}
    status, text = call(server, "POST", "/v1/completions", body)
    reply = json.loads(text)
    assert status == 200 and [c["text"] for c in reply["choices"]] == [
        expected[0], expected[0], expected[1], expected[1]]
    assert reply["usage"]["prompt_tokens"] == len(tiny.tokenizer.encode_plain(USER)) + len(ids)
    _, text = call(server, "POST", "/v1/completions", {**body, "prompt": ids, "n": 1})
    assert json.loads(text)["choices"][0]["text"] == expected[1]
    client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
    stream = client.completions.create(model="any", stream=True, **body)
    texts = [""] * 4
    for chunk in stream:
        texts[chunk.choices[0].index] += chunk.choices[0].text
    assert texts == [c["text"] for c in reply["choices"]]
    answered = client.chat.completions.create(model="any", n=2, **chat())
    assert [c.index for c in answered.choices] == [0, 1]


def test_a_client_that_leaves_mid_stream_ends_its_turn(served):
    engine, server = served
    engine.mailbox.post(policy="off")  # one token a step: the answer would take a while
    host, port = server._server.server_address[:2]
    connection = http.client.HTTPConnection(host, port, timeout=60)
    connection.request("POST", "/v1/chat/completions", json.dumps(chat(stream=True,
                                                                       max_tokens=400)))
    response = connection.getresponse()
    response.fp.readline()  # the first event, then away
    connection.close()
    response.close()
    for _ in range(200):
        if [agent.state for agent in engine.agents()] == ["tool"] and server.served.snapshot(
                ).answers:
            break
        threading.Event().wait(0.05)
    assert [agent.state for agent in engine.agents()] == ["tool"]
    assert engine.agents()[0].tokens < 400
    assert server.served.snapshot().answers == {"unfinished": 1}  # as /metrics counts it


def test_models_health_and_errors_are_json(served):
    engine, server = served
    status, text = call(server, "GET", "/v1/models")
    assert status == 200 and [m["id"] for m in json.loads(text)["data"]] == [engine.loaded.name]
    assert call(server, "GET", "/health") == (200, '{"status": "ok"}')
    status, text = call(server, "POST", "/v1/chat/completions", chat(temperature=9))
    assert status == 400 and "temperature: must be a number" in json.loads(text)["error"]["message"]
    status, text = call(server, "POST", "/v1/chat/completions", b"{not json")
    assert status == 400 and "the body is not JSON" in json.loads(text)["error"]["message"]
    status, text = call(server, "POST", "/v1/embeddings", chat())
    assert status == 404 and "answers /v1/chat/completions, /v1/completions, /v1/messages, " \
        "/v1/messages/count_tokens, /tokenize and /detokenize" in json.loads(text)["error"][
            "message"]


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_without_an_engine_the_server_says_it_is_loading(host):
    try:
        server = ApiServer(lambda: None, host, 0).start()
    except SwarmscopeError as exc:  # a machine without IPv6 loopback says so
        pytest.skip(str(exc))
    try:
        assert call(server, "GET", "/health")[0] == 503
        status, text = call(server, "POST", "/v1/chat/completions", chat())
        assert status == 503 and "loading" in text
        assert json.loads(call(server, "GET", "/v1/models")[1])["data"] == []
    finally:
        server.close()


def test_a_port_in_use_is_a_clear_error_and_addresses_parse():
    server = ApiServer(lambda: None, "127.0.0.1", 0)
    try:
        with pytest.raises(SwarmscopeError, match=r"cannot serve the API on 127.0.0.1:\d+"):
            ApiServer(lambda: None, "127.0.0.1", server._server.server_address[1])
    finally:
        server.close()
    assert parse_address("8000") == ("127.0.0.1", 8000)
    assert parse_address("0.0.0.0:80") == ("0.0.0.0", 80)
    assert parse_address("[::1]:9") == ("::1", 9)
    with pytest.raises(ValueError, match="expected PORT or HOST:PORT"):
        parse_address("host:http")


@pytest.mark.parametrize("command", [["run", "--headless", "--serve", "127.0.0.1:0"],
                                     ["serve", "127.0.0.1:0"]])
def test_a_headless_session_serves_until_interrupted_and_summarises_its_clients(tmp_path,
                                                                               command):
    """`swarmscope run --headless --serve 127.0.0.1:0`, or `swarmscope serve 127.0.0.1:0`: no
    simulated agents by default, the addresses on stderr, requests answered and counted in the
    metrics, Ctrl+C ends it with a summary and a trace."""
    trace = tmp_path / "served.jsonl"
    # -X faulthandler: a process that does not end is made to say where it waits (SIGABRT)
    process = subprocess.Popen(
        [sys.executable, "-X", "faulthandler", "-c", "import sys; from engine.cli.main import "
         "main; sys.exit(main(sys.argv[1:]))", *command, "--model", "tiny-test",
         "--dtype", "fp32", "--json", "--trace", str(trace)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        # as a terminal starts it, Ctrl+C heard: a test run started in the background of a
        # script ignores SIGINT, and Python then leaves it ignored in its children
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines, out = [], []  # stderr and stdout, read as they come: a full pipe holds nothing up
    address = threading.Event()

    def read_stderr():
        for line in process.stderr:
            lines.append(line)
            if "serving OpenAI's chat completions API at" in line:
                address.set()

    readers = [threading.Thread(target=read_stderr, daemon=True),
               threading.Thread(target=lambda: out.append(process.stdout.read()), daemon=True)]
    for reader in readers:
        reader.start()
    try:
        assert address.wait(60), "".join(lines)
        line = next(line for line in lines if "serving OpenAI's" in line)
        url = urllib.parse.urlparse(line.split(" at ")[1].split()[0])
        connection = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
        for _ in range(600):  # 503 while the model loads
            connection.request("GET", "/health")
            if connection.getresponse().read() == b'{"status": "ok"}':
                break
            threading.Event().wait(0.05)
        connection.request("POST", url.path + "/chat/completions", json.dumps(chat()))
        assert json.loads(connection.getresponse().read())["usage"]["completion_tokens"] == 12
        metrics_at = urllib.parse.urlparse(line.split("Prometheus metrics at ")[1].split()[0])
        connection.request("GET", metrics_at.path)
        scraped = connection.getresponse().read().decode()
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGABRT)  # its threads' stacks to stderr, then gone
            process.wait(timeout=30)
            readers[0].join(10)
            raise AssertionError("no end after Ctrl+C:\n" + "".join(lines[-60:])) from None
    for reader in readers:
        reader.join(10)
    err = "".join(lines)
    assert process.returncode == 0, err
    summary = json.loads(out[0])
    assert summary["tokens_by_agent"] == {"0": 12} and summary["engine_error"] is None
    assert 'swarmscope_emitted_tokens_total{category="api"} 12\n' in scraped
    assert "0 agents" in err and "ready at http://127.0.0.1:" in err
    assert "tiny-test, no tools (its chat template asks for tool calls in no form" in err
    assert read_trace(trace).steps  # the session was recorded


def test_the_example_agents_run_against_it(served):
    """examples/openai_agents.py, as the README tells users to run it."""
    _, server = served
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "openai_agents.py"), "--url", server.url,
         "--agents", "2", "--turns", "2", "--tool-seconds", "0", "--max-tokens", "8",
         "--file-chars", "200"],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = sorted(done.stdout.splitlines())
    assert [line.split(":")[0] for line in lines] == ["agent 0 turn 1", "agent 0 turn 2",
                                                       "agent 1 turn 1", "agent 1 turn 2"]
    assert all(re.search(r" 8 tokens, \d+ kept from the prediction", line) for line in lines)
    held = [tuple(map(int, re.search(r"(\d+) of (\d+) prompt", line).groups()))
            for line in lines]  # (tokens already held, prompt tokens) of each turn
    # turn 2 went on from turn 1's KV; the turns 1 start alike, so the second to start may
    # have copied what they share (the other's prefill is waited for, not repeated)
    assert held[1][0] >= held[0][1] and held[3][0] >= held[2][1]
    assert min(held[0][0], held[2][0]) == 0
