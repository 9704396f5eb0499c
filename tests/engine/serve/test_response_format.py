"""response_format in the chat API: answers held to JSON (a schema, or any object), whole and
streamed, and what cannot be held to one refused with the reason."""
import json

import pytest

from engine.loading import load_model
from engine.output_format import OutputFormat
from engine.serve.request import ApiRequest, RequestError
from tests.engine.serve.serving import ASK, call_tokenizer, serving, thinker

# At most a space between tokens, as x-guidance lets a schema say: random models' answers are
# whitespace wherever the grammar allows it
CHOICE = {"type": "object", "properties": {"ok": {"type": "boolean"},
                                           "pick": {"enum": ["alpha", "beta", "gamma"]}},
          "required": ["ok", "pick"], "additionalProperties": False,
          "x-guidance": {"whitespace_pattern": " ?"}}
SCHEMA = {"type": "json_schema", "json_schema": {"name": "choice", "schema": CHOICE}}
# Qwen3's way, in brief: it thinks unless enable_thinking is false, and then the prompt closes
# an empty reasoning
QWEN3_LIKE = ("{% for m in messages %}{{ m.content }}{% endfor %}<|im_start|>assistant\n"
              "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n"
              "{% endif %}")
# DeepSeek-R1's distills' way, in brief: the prompt opens the reasoning
DEEPSEEK_LIKE = ("{% for m in messages %}{{ m.content }}{% endfor %}<|im_start|>assistant\n"
                 "<think>\n{# its answers come back without their </think> #}")


def client_of(server):
    import openai
    return openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)


@pytest.mark.parametrize("model", ["tiny", "qwen2"])
def test_an_answer_keeps_to_the_schema_whole_and_streamed(model, tiny, qwen2, calibration):
    """The byte tokenizer and a BPE one (tokenizer.json, read by llguidance)."""
    loaded = tiny if model == "tiny" else load_model(str(qwen2), dtype="fp32", device="cpu")
    with serving(loaded, calibration, max_context=512, client_lanes=2) as (_, server):
        client = client_of(server)
        whole = client.chat.completions.create(model="x", messages=ASK, temperature=0,
                                               max_tokens=60, response_format=SCHEMA).choices[0]
        streamed = client.chat.completions.create(model="x", messages=ASK, temperature=0,
                                                  max_tokens=60, response_format=SCHEMA,
                                                  stream=True)
        pieces = "".join(chunk.choices[0].delta.content or "" for chunk in streamed
                         if chunk.choices)
    answer = json.loads(whole.message.content)
    assert whole.finish_reason == "stop" and pieces == whole.message.content
    assert set(answer) == {"ok", "pick"} and answer["pick"] in ("alpha", "beta", "gamma")


def test_a_json_object_is_any_object_and_text_is_no_format(tiny):
    def takes(response_format, text: str) -> bool:
        held_to = ApiRequest.parse({"messages": ASK, "response_format": response_format},
                                   tiny.tokenizer, 512).output_format
        ids = tiny.tokenizer.encode(text)
        return held_to.allowed(ids) == len(ids)

    assert takes({"type": "json_object"}, '{"any": ["thing", 1]}')
    assert not takes({"type": "json_object"}, '["thing", 1]')
    assert not takes(SCHEMA, '{"any": 1}') and takes(SCHEMA, '{"ok": true')
    for text in ({"type": "text"}, None):
        assert ApiRequest.parse({"messages": ASK, "response_format": text}, tiny.tokenizer,
                                512).output_format is None


@pytest.mark.parametrize("response_format, says", [
    ({"type": "xml"}, "response_format: an object whose type is text, json_object, json_schema"),
    ("json", "response_format: an object whose type is"),
    ({"type": "json_schema"}, "response_format: json_schema must be an object whose schema"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "sentence"}}},
     "response_format: the answer cannot be held to it: Invalid type: sentence"),
])
def test_a_format_that_cannot_be_kept_is_refused_with_why(tiny, calibration, response_format,
                                                          says):
    import openai
    with serving(tiny, calibration, max_context=512, client_lanes=1) as (_, server):
        with pytest.raises(openai.BadRequestError, match=says):
            client_of(server).chat.completions.create(model="x", messages=ASK,
                                                      response_format=response_format)


@pytest.mark.parametrize("template", [QWEN3_LIKE, DEEPSEEK_LIKE])
def test_a_thinking_models_answer_keeps_to_the_schema_after_its_reasoning(
        tagged_qwen2, calibration, template, monkeypatch):
    """Qwen3 opens its reasoning itself; DeepSeek-R1's distills have the prompt open it."""
    loaded = thinker(tagged_qwen2, template)
    written = []  # the answers' tokens as the grammar took them
    advance = OutputFormat.advance
    monkeypatch.setattr(OutputFormat, "advance",
                        lambda held_to, tokens: (written.extend(tokens), advance(held_to, tokens)))
    with serving(loaded, calibration, max_context=512, client_lanes=2) as (_, server):
        client = client_of(server)
        completion = client.chat.completions.create(model="x", messages=ASK, temperature=0,
                                                    max_tokens=60, response_format=SCHEMA)
        streamed = client.chat.completions.create(model="x", messages=ASK, temperature=0,
                                                  max_tokens=60, response_format=SCHEMA,
                                                  stream=True)
        reasoning = "".join(getattr(chunk.choices[0].delta, "reasoning_content", None) or ""
                            for chunk in streamed if chunk.choices)
    whole = completion.choices[0]
    answer = json.loads(whole.message.content)
    assert set(answer) == {"ok", "pick"} and whole.finish_reason == "stop"
    assert not whole.message.reasoning_content and not reasoning  # closed as soon as opened
    text = loaded.tokenizer.decode(written)
    assert text.startswith("<think></think>" if template is QWEN3_LIKE else "</think>"), text


def test_a_thinking_models_format_is_held_after_the_reasoning_unless_it_is_off(tmp_path):
    thinking = call_tokenizer(tmp_path, QWEN3_LIKE)
    request = ApiRequest.parse({"messages": ASK, "response_format": SCHEMA}, thinking, 512)
    ids = thinking.encode('<think>\nBeta.</think>\n\n{"ok": true, "pick": "beta"}')
    assert request.thinking and request.output_format.allowed(ids) == len(ids)
    # Qwen3's own switch, as vLLM and SGLang take it: the prompt closes an empty reasoning
    off = ApiRequest.parse({"messages": ASK, "response_format": SCHEMA,
                            "chat_template_kwargs": {"enable_thinking": False}}, thinking, 512)
    assert thinking.decode(off.prompt_ids).endswith("<think>\n\n</think>\n\n")
    assert not off.thinking and off.output_format.allowed(ids) == 0
    with pytest.raises(RequestError, match="chat_template_kwargs: an object of the template's"):
        ApiRequest.parse({"messages": ASK, "chat_template_kwargs": {"messages": []}}, thinking,
                         512)
