"""Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens), checked with
Anthropic's own client: the same answers as the chat completions API gives, whole and streamed,
tool uses read from what the model writes and their results rendered back, errors as Anthropic
writes them."""
import anthropic
import pytest

from engine.controls import Controls
from engine.generate import generate
from engine.serve.http_api import ApiServer
from tests.engine.serve.serving import (CALL_TEXT, HERMES, QWEN3, ScriptedEngine, call_tokenizer,
                                        serving)

USER = "def add(a, b):\n    return a + b\n\nRepeat the function."
READ_FILE = {"name": "read_file", "description": "Read a file", "input_schema": {
    "type": "object", "properties": {"path": {"type": "string"}}}}


def client_of(server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.root, api_key="unused", max_retries=0)


@pytest.fixture
def served(tiny, calibration):
    with serving(tiny, calibration, max_context=512, client_lanes=4) as (engine, server):
        yield engine, client_of(server)


def test_an_answer_whole_and_streamed_is_the_models(served, tiny):
    engine, client = served
    engine.mailbox.post(policy="off")
    expected = generate(tiny, [USER], Controls(policy="off"), max_new_tokens=12)[0].text
    # greedy: this client has no temperature of its own (Anthropic's API defaults to 1, as here)
    ask = {"model": "any", "max_tokens": 12, "extra_body": {"temperature": 0},
           "messages": [{"role": "user", "content": USER}]}
    reply = client.messages.create(**ask)
    assert [block.type for block in reply.content] == ["text"]
    assert reply.content[0].text == expected and reply.stop_reason == "max_tokens"
    assert reply.role == "assistant" and reply.id.startswith("msg_")
    prompt = len(tiny.tokenizer.encode(tiny.tokenizer.chat_prompt(USER)))
    assert reply.usage.output_tokens == 12
    assert reply.usage.input_tokens + reply.usage.cache_read_input_tokens == prompt
    assert client.messages.count_tokens(model="any", messages=ask["messages"]).input_tokens \
        == prompt
    # output_config's format holds the answer to a JSON schema, as response_format does
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
              "additionalProperties": False,  # the random model's whitespace kept short
              "x-guidance": {"whitespace_pattern": " ?"}}
    held = client.messages.create(**ask, output_config={"format": {"type": "json_schema",
                                                                   "schema": schema}})
    assert "".join(held.content[0].text.split()).startswith('{"n"')

    with client.messages.stream(**ask) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) > 1 and "".join(pieces) == expected == final.content[0].text
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 12
    # the same prompt again: its start's KV blocks were held, as the final usage says
    assert final.usage.cache_read_input_tokens > 0
    assert final.usage.input_tokens + final.usage.cache_read_input_tokens == prompt

    stop = expected[-4:-1]  # a stop sequence ends the answer before it, and is named
    reply = client.messages.create(**ask, stop_sequences=[stop])
    assert "".join(block.text for block in reply.content) == expected[:expected.index(stop)]
    assert (reply.stop_reason, reply.stop_sequence) == ("stop_sequence", stop)


def test_a_tool_use_is_read_and_its_result_goes_back_through_the_template(tmp_path):
    engine = ScriptedEngine(call_tokenizer(tmp_path, HERMES), "Let me look." + CALL_TEXT)
    server = ApiServer(lambda: engine, "127.0.0.1", 0).start()
    try:
        client = client_of(server)
        ask = [{"role": "user", "content": "What is in a.py?"}]
        reply = client.messages.create(model="any", max_tokens=64, messages=ask,
                                       tools=[READ_FILE])
        text, use = reply.content
        assert (text.type, text.text) == ("text", "Let me look.")
        assert (use.type, use.name, use.input) == ("tool_use", "read_file", {"path": "a.py"})
        assert reply.stop_reason == "tool_use"
        assert '"name": "read_file"' in engine.prompts[-1]  # the tool was offered

        with client.messages.stream(model="any", max_tokens=64, messages=ask,
                                    tools=[READ_FILE]) as stream:
            final = stream.get_final_message()
        assert [block.type for block in final.content] == ["text", "tool_use"]
        assert final.content[1].input == {"path": "a.py"} and final.stop_reason == "tool_use"

        client.messages.create(model="any", max_tokens=64, tools=[READ_FILE], messages=[
            *ask, {"role": "assistant", "content": [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": use.id, "name": "read_file", "input": use.input}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": use.id, "content": "x = 1"}]}])
        rendered = engine.prompts[-1]
        assert '{"name": "read_file", "arguments": {"path": "a.py"}}' in rendered
        assert "<tool_response>\nx = 1\n</tool_response>" in rendered
    finally:
        server.close()


def test_a_thinking_models_reasoning_comes_back_as_a_thinking_block(tmp_path):
    engine = ScriptedEngine(call_tokenizer(tmp_path, QWEN3),
                            "<think>\nI should read it.\n</think>\n\n" + CALL_TEXT)
    server = ApiServer(lambda: engine, "127.0.0.1", 0).start()
    try:
        client = client_of(server)
        ask = {"model": "any", "max_tokens": 64, "tools": [READ_FILE],
               "messages": [{"role": "user", "content": "What is in a.py?"}]}
        reply = client.messages.create(**ask)
        with client.messages.stream(**ask) as stream:
            final = stream.get_final_message()
    finally:
        server.close()
    for message in (reply, final):
        thinking, use = message.content
        assert (thinking.type, thinking.thinking.strip()) == ("thinking", "I should read it.")
        assert (use.type, use.input, message.stop_reason) == ("tool_use", {"path": "a.py"},
                                                              "tool_use")


def test_what_cannot_be_served_is_refused_as_anthropics_api_refuses_it(served):
    _, client = served
    with pytest.raises(anthropic.BadRequestError, match="max_tokens: required"):
        client.post("/v1/messages", cast_to=object, body={
            "model": "any", "messages": [{"role": "user", "content": "hi"}]})
    with pytest.raises(anthropic.BadRequestError,
                       match=r"messages\[0\].content\[0\]: a user's content blocks may be text "
                             r"and tool_result, got 'image'"):
        client.messages.create(model="any", max_tokens=4, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "url", "url": "http://x/y.png"}}]}])
    with pytest.raises(anthropic.BadRequestError,
                       match=r"messages\[0\].content\[0\]: a tool_result block needs the "
                             "tool_use_id it answers"):
        client.messages.create(model="any", max_tokens=4, messages=[{"role": "user", "content": [
            {"type": "tool_result", "content": "x"}]}])
    with pytest.raises(anthropic.BadRequestError, match=r"tools\[0\]: 'web_search_20250305': "
                                                       "only tools the client runs"):
        client.messages.create(model="any", max_tokens=4, messages=[
            {"role": "user", "content": "hi"}], tools=[{"type": "web_search_20250305",
                                                         "name": "web_search"}])
    with pytest.raises(anthropic.BadRequestError, match="tools: not supported by this model"):
        client.messages.create(model="any", max_tokens=4, tools=[READ_FILE],
                               messages=[{"role": "user", "content": "hi"}])
