"""Tokenizer, ByteTokenizer and chat templates."""
from __future__ import annotations

import datetime

import pytest
import tokenizers
from hypothesis import given, settings, strategies as st

from engine.chat_template import CHATML, ChatTemplateError, render_chat
from engine.errors import ModelLoadError
from engine.loading import load_model
from engine.tokenizer import ByteTokenizer, Tokenizer

from .conftest import make_sentencepiece_tokenizer_json, make_tokenizer_json


@pytest.fixture(scope="module")
def bpe(tmp_path_factory) -> Tokenizer:
    path = make_tokenizer_json(tmp_path_factory.mktemp("tok") / "tokenizer.json")
    return Tokenizer.from_file(path, {"eos_token": {"content": "<|im_end|>"}}, eos_ids=(0,))


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_byte_tokenizer_round_trips(text):
    tok = ByteTokenizer()
    ids = tok.encode(text)
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_bpe_tokenizer_round_trips(bpe, text):
    assert bpe.decode(bpe.encode(text)) == text


def test_byte_tokenizer_specials_are_single_ids():
    tok = ByteTokenizer()
    assert tok.encode("<|im_start|>a<|im_end|></s>") == [258, 97, 259, 257]
    assert tok.decode([104, 105, 259], skip_special=True) == "hi"
    assert tok.decode([300]) == ""  # in the model's vocab, names nothing
    assert tok.eos_ids == (257, 259)


def test_bpe_specials_eos_and_vocab(bpe):
    assert bpe.encode("<|im_start|>x<|im_end|>") == [1, bpe.inner.token_to_id("x"), 2]
    assert bpe.decode([1, 2], skip_special=True) == ""
    # config's eos first, then tokenizer_config's eos_token (an AddedToken dict here), which is
    # the template's eos_token, as transformers passes it.
    assert bpe.eos_ids == (0, 2) and bpe.eos_token == "<|im_end|>"
    assert bpe.vocab_size == 265


def test_tiny_test_preset_has_byte_tokenizer_and_chatml():
    loaded = load_model("tiny-test", dtype="fp32", device="cpu")
    assert loaded.name == "tiny-test" and isinstance(loaded.tokenizer, ByteTokenizer)
    assert loaded.model.config.vocab_size >= loaded.tokenizer.vocab_size
    prompt = loaded.tokenizer.chat_prompt("hi", system="sys")
    assert prompt == ("<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
                      "<|im_start|>assistant\n")


def test_chat_template_defaults_to_chatml_and_reports_errors():
    messages = [{"role": "user", "content": "q"}]
    assert render_chat(None, messages) == render_chat(CHATML, messages)
    with pytest.raises(ChatTemplateError, match="does not parse"):
        render_chat("{% for %}", messages)
    with pytest.raises(ChatTemplateError, match="no system"):
        render_chat("{{ raise_exception('no system') }}", messages)


# Gemma 2's template, as it ships (roles alternate; a system message is refused)
GEMMA2 = ("{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role "
          "not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == "
          "'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must "
          "alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == "
          "'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
          "{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + "
          "'<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}"
          "{{'<start_of_turn>model\\n'}}{% endif %}")


def test_a_template_that_refuses_a_system_message_gets_it_before_the_users():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"}, {"role": "user", "content": "bye"}]
    assert render_chat(GEMMA2, messages, bos_token="<bos>") == (
        "<bos><start_of_turn>user\nBe brief.\n\nhi<end_of_turn>\n<start_of_turn>model\nhello"
        "<end_of_turn>\n<start_of_turn>user\nbye<end_of_turn>\n<start_of_turn>model\n")
    # with no user message to fold it into, the template's own refusal stands
    with pytest.raises(ChatTemplateError, match="System role not supported"):
        render_chat(GEMMA2, [{"role": "system", "content": "s"}, messages[2]])


def test_granite_3s_roles_take_past_calls_and_tool_answers():
    """A template with Granite 3's roles gets an assistant's words, then its calls as a JSON list
    in a message of role assistant_tool_call, and a tool's answer as role tool_response."""
    template = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}" \
               "{# assistant_tool_call #}"
    call = {"id": "c1", "type": "function",
            "function": {"name": "ls", "arguments": {"dir": "."}}}
    messages = [{"role": "user", "content": "q"},
                {"role": "assistant", "content": "Looking.", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "a.py"}]
    assert render_chat(template, messages) == (
        '[user] q\n[assistant] Looking.\n[assistant_tool_call] [{"name": "ls", "arguments": '
        '{"dir": "."}}]\n[tool_response] a.py\n')


def test_chat_template_has_transformers_helpers():
    """Llama 3.1-3.3 templates date their system header with strftime_now when it is defined."""
    template = ("{% if strftime_now is defined %}{{ strftime_now('%Y-%m-%d') }}{% endif %}"
                "{{ messages[0]['content'] }}")
    before = datetime.date.today()
    rendered = render_chat(template, [{"role": "user", "content": "q"}])
    assert rendered in (f"{before}q", f"{datetime.date.today()}q")  # midnight may pass


def test_a_template_renders_tokenizer_configs_eos_token(tmp_path):
    """Llama 3.1's config.json lists <|end_of_text|> first and its tokenizer_config names
    <|eot_id|>: a template's eos_token is the latter, as in transformers. An eos_token the
    vocabulary lacks leaves config.json's first."""
    path = make_tokenizer_json(tmp_path / "tokenizer.json")
    template = "{{ messages[0]['content'] }}{{ eos_token }}"
    tok = Tokenizer.from_file(path, {"eos_token": "<|im_end|>", "chat_template": template},
                              eos_ids=(0,))
    assert tok.chat_prompt("q") == "q<|im_end|>" and tok.eos_ids == (0, 2)
    tok = Tokenizer.from_file(path, {"eos_token": "<nope>", "chat_template": template},
                              eos_ids=(0,))
    assert tok.chat_prompt("q") == "q<|endoftext|>" and tok.eos_ids == (0,)


def test_a_template_marking_the_reply_for_training_renders():
    """transformers' {% generation %} tag (fine-tuned models' templates wrap the assistant's
    reply in it for training masks) is its body in a prompt, not a parse error."""
    template = ("{% for m in messages %}{% if m['role'] == 'assistant' %}{% generation %}"
                "{{ m['content'] }}{% endgeneration %}{% else %}[{{ m['content'] }}]{% endif %}"
                "{% endfor %}")
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    assert render_chat(template, messages) == "[q]a"


# SmolLM2's template: a default system message when the conversation starts without one.
DEFAULT_SYSTEM = ("{% for m in messages %}{% if loop.first and m['role'] != 'system' %}"
                  "<|im_start|>system\nYou are SmolLM.<|im_end|>\n{% endif %}<|im_start|>"
                  "{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                  "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# Llama 2's shape: BOS once, the assistant's turn closed by EOS.
LLAMA2 = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST] "
          "{{ m['content'] }} [/INST]{% else %}{{ m['content'] }}{{ eos_token }}{% endif %}"
          "{% endfor %}")
USER_ONLY = "{% for m in messages %}{% if m['role'] == 'user' %}[{{ m['content'] }}]{% endif %}{% endfor %}"


@pytest.mark.parametrize("template, follow_up", [
    (DEFAULT_SYSTEM, "<|im_end|>\n<|im_start|>user\nls: 3 files<|im_end|>\n<|im_start|>assistant\n"),
    (LLAMA2, "<|endoftext|>[INST] ls: 3 files [/INST]"),
    (USER_ONLY, "[ls: 3 files]"),  # the assistant's words not shown: a conversation of its own
    (GEMMA2, "<end_of_turn>\n<start_of_turn>user\nls: 3 files<end_of_turn>\n"
             "<start_of_turn>model\n"),  # which trims each message's words, as Llama 3's:
    ("{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
     "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
     "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}", "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
                               "ls: 3 files<|eot_id|><|start_header_id|>assistant"
                               "<|end_header_id|>\n\n"),
    ("{% if messages | length > 1 %}{{ raise_exception('one only') }}{% endif %}"
     "{{ messages[0]['content'] }}", "ls: 3 files"),
])
def test_a_tool_answer_continues_the_conversation_without_writing_its_start_again(
        tmp_path, template, follow_up):
    path = make_tokenizer_json(tmp_path / "tokenizer.json")
    tok = Tokenizer.from_file(path, {"chat_template": template, "bos_token": "<s>",
                                     "eos_token": "<|endoftext|>"})
    assert tok.follow_up("ls: 3 files") == follow_up
    assert ByteTokenizer().follow_up("hi") == ("<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
                                               "<|im_start|>assistant\n")


def test_sentencepiece_style_text_round_trips_through_byte_fallback(tmp_path):
    """Llama 2 and Mistral tokenizers spell a character outside their vocab (CJK, emoji) as its
    UTF-8 bytes; generated ids decode back to it, and a character cut short decodes to U+FFFD,
    not an error."""
    tok = Tokenizer.from_file(make_sentencepiece_tokenizer_json(tmp_path / "tokenizer.json"))
    for text in ("the cat", "你好，世界", "naïve café 😀🚀", "def f(x):\n\treturn x", "<s>the</s>"):
        assert tok.decode(tok.encode(text)) == text
    assert [tok.inner.id_to_token(i) for i in tok.encode("the 😀")] == \
        ["▁the", "▁", "<0xF0>", "<0x9F>", "<0x98>", "<0x80>"]
    assert tok.decode(tok.encode("😀")[:3]) == "\ufffd" * 2  # one for each byte
    assert tok.decode(tok.encode("<s>the</s>"), skip_special=True) == "the"


def test_plain_text_gets_what_the_post_processor_adds_and_chat_text_does_not(tmp_path):
    """Llama 2's tokenizer.json adds BOS to plain text; a chat template writes its own."""
    path = make_sentencepiece_tokenizer_json(tmp_path / "tokenizer.json")
    inner = tokenizers.Tokenizer.from_file(str(path))
    inner.post_processor = tokenizers.processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", 1)])
    inner.save(str(path))
    tok = Tokenizer.from_file(path)
    assert tok.encode_plain("the cat") == [1, *tok.encode("the cat")]
    assert tok.encode("the cat")[0] != 1


def test_truncation_or_padding_saved_in_tokenizer_json_is_not_applied(tmp_path):
    """A tokenizer.json saved with them on would cut every long prompt, or pad a short one with
    pad tokens, without a word; transformers turns both off unless a call asks for them."""
    import json

    path = make_tokenizer_json(tmp_path / "tokenizer.json")
    saved = json.loads(path.read_text())
    saved["truncation"] = {"direction": "Right", "max_length": 4, "strategy": "LongestFirst",
                           "stride": 0}
    saved["padding"] = {"strategy": {"Fixed": 64}, "direction": "Right", "pad_to_multiple_of": None,
                        "pad_id": 0, "pad_type_id": 0, "pad_token": "<|endoftext|>"}
    path.write_text(json.dumps(saved))
    tok = Tokenizer.from_file(path)
    text = "the agent reads the whole prompt"
    assert tok.decode(tok.encode(text)) == text


def test_tokenizer_file_errors(tmp_path):
    with pytest.raises(ModelLoadError, match="not found"):
        Tokenizer.from_file(tmp_path / "tokenizer.json")
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    with pytest.raises(ModelLoadError) as info:
        Tokenizer.from_file(bad)
    assert info.value.path == str(bad)


@pytest.mark.parametrize("eos_token", [5, {"content": 5}, {"content": None}, ["<|im_end|>"]])
def test_special_tokens_of_the_wrong_type_are_ignored(tmp_path, eos_token):
    """A tokenizer_config.json spelling a special token oddly loses that token, not the model."""
    path = make_tokenizer_json(tmp_path / "tokenizer.json")
    tok = Tokenizer.from_file(path, {"eos_token": eos_token, "bos_token": {"content": 1}},
                              eos_ids=(0,))
    assert tok.eos_ids == (0,) and tok.bos_token is None
