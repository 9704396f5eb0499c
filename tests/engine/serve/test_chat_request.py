"""A client's request becomes prompt ids and sampling, or an error that names the field."""
import pytest

from engine.serve.request import MAX_CHOICES, ApiRequest, RequestError, parse_choices
from engine.tokenizer import ByteTokenizer

TOK = ByteTokenizer()
HELLO = [{"role": "user", "content": "hello"}]


def parse(max_context=256, **body):
    return ApiRequest.parse({"messages": HELLO, **body}, TOK, max_context)


def test_the_prompt_is_the_conversation_in_the_chat_template():
    messages = [{"role": "system", "content": "be brief"}, *HELLO,
                {"role": "assistant", "content": "hi"}, {"role": "user", "content": "again"}]
    request = ApiRequest.parse({"messages": messages}, TOK, 256)
    assert TOK.decode(request.prompt_ids) == TOK.chat_messages(messages)
    assert TOK.decode(request.prompt_ids).endswith("again<|im_end|>\n<|im_start|>assistant\n")


def test_text_parts_are_joined_and_a_missing_assistant_content_is_empty():
    parts = ApiRequest.parse({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "hel"}, {"type": "text", "text": "lo"}]},
        {"role": "assistant", "content": None}, *HELLO]}, TOK, 256)
    plain = ApiRequest.parse({"messages": [*HELLO, {"role": "assistant", "content": ""},
                                            *HELLO]}, TOK, 256)
    assert parts.prompt_ids == plain.prompt_ids


def test_defaults_follow_openais_api_and_max_tokens_is_held_to_the_room_left():
    request = parse()
    room = 256 - len(request.prompt_ids)
    assert (request.max_tokens, request.sampling.temperature, request.sampling.top_p,
            request.stop, request.stream) == (room, 1.0, 1.0, (), False)
    assert parse(max_tokens=10_000).max_tokens == room
    assert parse(max_tokens=5, max_completion_tokens=7).max_tokens == 7
    chosen = parse(temperature=0, seed=-3, stop="\n", stream=True,
                   stream_options={"include_usage": True})
    assert (chosen.sampling.temperature, chosen.sampling.seed, chosen.stop, chosen.stream,
            chosen.include_usage) == (0.0, 2 ** 31 - 3, ("\n",), True, True)


@pytest.mark.parametrize("body, says", [
    ({"messages": []}, "messages: must be a non-empty list"),
    ({"messages": [{"role": "robot", "content": "x"}]},
     "messages[0]: must be an object whose role"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content: must be text"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
     "messages[0].content: only text parts"),
    ({"max_tokens": 0}, "max_tokens: must be an integer >= 1, got 0"),
    ({"max_tokens": 2.5}, "max_tokens: must be an integer >= 1, got 2.5"),
    ({"temperature": 3}, "temperature: must be a number >= 0 and <= 2, got 3"),
    ({"temperature": "hot"}, "temperature: must be a number"),
    ({"top_p": 0}, "top_p: must be above 0"),
    ({"seed": True}, "seed: must be an integer"),
    ({"stop": ["a", "b", "c", "d", "e"]},
     "stop: must be a non-empty string or a list of at most 4"),
    ({"stop": [""]}, "stop: must be"),
    ({"stream": "yes"}, "stream: must be true or false"),
    ({"n": 0}, "n: must be an integer >= 1 and <= 64, got 0"),
    ({"top_logprobs": 2}, "top_logprobs: needs logprobs true"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs: must be an integer >= 0 and <= 20"),
    ({"logprobs": 1}, "logprobs: must be true or false"),
    ({"audio": {"voice": "x"}}, "audio: not supported"),
    ({"presence_penalty": 2.5}, "presence_penalty: must be a number >= -2 and <= 2, got 2.5"),
    ({"frequency_penalty": "high"}, "frequency_penalty: must be a number"),
    ({"repetition_penalty": 0}, "repetition_penalty: must be above 0"),
    ({"logit_bias": [1]}, "logit_bias: an object of token ids and biases"),
    ({"logit_bias": {"a": 1}}, "logit_bias: 'a' is not a token id of this model's (0 to 259)"),
    ({"logit_bias": {"260": 1}}, "logit_bias: '260' is not a token id"),
    ({"logit_bias": {"65": 101}}, "logit_bias[65]: must be a number >= -100 and <= 100, got 101"),
])
def test_a_bad_field_is_named(body, says):
    with pytest.raises(RequestError, match=None) as caught:
        ApiRequest.parse({"messages": HELLO, **body}, TOK, 256)
    assert says in str(caught.value)


def test_penalties_and_a_logit_bias_reach_the_lanes_sampling():
    sampling = parse(presence_penalty=0.5, frequency_penalty=-1, repetition_penalty=1.1,
                     logit_bias={"65": -100, "66": 2.5}).sampling
    assert (sampling.presence_penalty, sampling.frequency_penalty, sampling.repetition_penalty,
            sampling.logit_bias) == (0.5, -1.0, 1.1, ((65, -100.0), (66, 2.5)))
    assert not parse(presence_penalty=0, frequency_penalty=0, logit_bias={}).sampling.adjusts


def test_log_probabilities_are_asked_as_each_endpoint_asks_them():
    assert parse().logprobs is None and parse(logprobs=False).logprobs is None
    assert parse(logprobs=True).logprobs == 0 and parse(logprobs=True, top_logprobs=3).logprobs == 3
    text = ApiRequest.parse({"prompt": "hi", "logprobs": 2}, TOK, 256, chat=False)
    assert text.logprobs == 2
    with pytest.raises(RequestError, match="logprobs: must be an integer >= 0 and <= 5, got 6"):
        ApiRequest.parse({"prompt": "hi", "logprobs": 6}, TOK, 256, chat=False)


def test_a_text_prompt_is_encoded_as_given_and_checked():
    request = ApiRequest.parse({"prompt": ["hello"]}, TOK, 256, chat=False)
    assert not request.chat and request.prompt_ids == TOK.encode_plain("hello")
    for prompt, says in ((None, "prompt: must be non-empty text"), (["a", "b"], "prompt: must"),
                         ([1, 2.5], "prompt: must"),
                         ([260], "prompt: token ids of this model's are 0 to 259"),
                         ("x" * 300, "prompt: the prompt is 300")):
        with pytest.raises(RequestError, match=None) as caught:
            ApiRequest.parse({"prompt": prompt}, TOK, 256, chat=False)
        assert says in str(caught.value)
    with pytest.raises(RequestError, match="suffix: this model's vocabulary has no fill-in"):
        ApiRequest.parse({"prompt": "hi", "suffix": "there"}, TOK, 256, chat=False)
    # echo: the prompt as given, or its token ids' text; its log-probabilities where asked
    assert ApiRequest.parse({"prompt": ["hi"], "echo": True}, TOK, 256, chat=False).echo == "hi"
    ids = ApiRequest.parse({"prompt": [104, 105], "echo": True, "logprobs": 1}, TOK, 256,
                           chat=False)
    assert ids.echo == "hi" and ids.prompt_logprobs
    assert not ApiRequest.parse({"prompt": "hi", "logprobs": 1}, TOK, 256, chat=False).echo


class FimTokenizer(ByteTokenizer):
    """The byte tokenizer with one family's fill-in-the-middle tokens (`marks`) as its own."""

    def __init__(self, marks: tuple[str, ...]) -> None:
        super().__init__()
        self.marks = marks

    def has_token(self, text: str) -> bool:
        return text in self.marks or super().has_token(text)


@pytest.mark.parametrize("marks,prompt", [
    (("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),
     "<|fim_prefix|>def f(<|fim_suffix|>):\n    pass<|fim_middle|>"),
    (("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),
     "<fim_prefix>def f(<fim_suffix>):\n    pass<fim_middle>"),
    (("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),
     "<｜fim▁begin｜>def f(<｜fim▁hole｜>):\n    pass<｜fim▁end｜>"),
    (("[SUFFIX]", "[PREFIX]"), "[SUFFIX]):\n    pass[PREFIX]def f("),  # Codestral's order
])
def test_a_suffix_asks_for_what_fills_the_hole_in_the_models_own_tokens(marks, prompt):
    tok = FimTokenizer(marks)
    request = ApiRequest.parse({"prompt": "def f(", "suffix": "):\n    pass"}, tok, 256,
                               chat=False)
    assert request.prompt_ids == tok.encode_plain(prompt)
    for body, says in (({"prompt": [1, 2], "suffix": "x"}, "suffix: needs prompt as text"),
                       ({"prompt": "a", "suffix": 3}, "suffix: must be text"),
                       ({"prompt": "a", "suffix": "x", "echo": True}, "suffix: not with echo")):
        with pytest.raises(RequestError, match=says):
            ApiRequest.parse(body, tok, 256, chat=False)
    with pytest.raises(RequestError, match="suffix: only /v1/completions"):
        ApiRequest.parse({"messages": [{"role": "user", "content": "a"}], "suffix": "x"}, tok,
                         256)


def test_each_choice_is_a_request_of_its_own_in_openais_order():
    """n answers a prompt, seeded one after another; a text completion's prompts each get
    their n, prompt by prompt; each choice has its own place in a grammar and a prediction."""
    chats = parse_choices({"messages": HELLO, "n": 3, "seed": 7, "temperature": 1,
                           "response_format": {"type": "json_object"},
                           "prediction": {"type": "content", "content": "{}"}}, TOK, 256)
    assert [c.sampling.seed for c in chats] == [7, 8, 9] and {c.n for c in chats} == {3}
    assert len({id(c.output_format) for c in chats}) == len({id(c.prediction) for c in chats}) == 3
    assert all(c.prompt_ids == chats[0].prompt_ids and c.sampling.temperature == 1 for c in chats)
    texts = parse_choices({"prompt": ["ab", [104, 105]], "n": 2, "seed": 0}, TOK, 256, chat=False)
    assert [(c.prompt_ids, c.sampling.seed) for c in texts] == [
        (TOK.encode_plain("ab"), 0), (TOK.encode_plain("ab"), 1), ([104, 105], 0), ([104, 105], 1)]
    assert parse_choices({"prompt": [104, 105]}, TOK, 256, chat=False)[0].prompt_ids == [104, 105]
    assert len(parse_choices({"prompt": ["a"] * MAX_CHOICES}, TOK, 256, chat=False)) == MAX_CHOICES
    for body, says in (({"prompt": ["ab", ""]}, "prompt[1]: must be non-empty text or token ids"),
                       ({"prompt": ["ab", "x" * 300]}, "prompt[1]: the prompt is 300 tokens"),
                       ({"prompt": ["a", "b"], "n": 33}, "n: 2 prompts times n=33 asks for more "
                                                         "than the 64 answers")):
        with pytest.raises(RequestError, match=None) as caught:
            parse_choices(body, TOK, 256, chat=False)
        assert says in str(caught.value)


def test_a_body_that_is_not_an_object_and_a_prompt_past_the_context_are_refused():
    with pytest.raises(RequestError, match="must be a JSON object"):
        ApiRequest.parse(["hello"], TOK, 256)
    with pytest.raises(RequestError, match=r"leaves no room for an answer in the 30 tokens"):
        ApiRequest.parse({"messages": [{"role": "user", "content": "x" * 40}]}, TOK, 30)
