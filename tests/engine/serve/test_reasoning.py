"""A thinking model's reasoning apart from its answer: split whole and as it streams, and handed
back as reasoning_content, tool calls after it read as ever."""
import json

import pytest
from hypothesis import given, strategies as st

from engine.serve.reasoning import ReasoningSplit
from engine.thinking import opened, thinks
from tests.engine.serve.serving import (ASK, CALL_TEXT, HERMES, QWEN3, TOOLS, call_tokenizer,
                                        scripted_client)


def split(text, inside=False):
    return ReasoningSplit(inside).add(text, last=True)


@pytest.mark.parametrize("text, inside, parts", [
    ("<think>\nread a.py first\n</think>\n\nIt adds.", False, ("\nread a.py first\n", "It adds.")),
    ("  <think>plan</think>answer", False, ("plan", "answer")),
    ("read a.py first</think>\n\nIt adds.", True, ("read a.py first", "It adds.")),
    ("It adds.", False, ("", "It adds.")),
    ("<think>\nstill thinking when cut", False, ("\nstill thinking when cut", "")),
    ("<thin", False, ("", "<thin")),                # never opened
    ("<b>bold</b>", False, ("", "<b>bold</b>")),
    ("a </think> in an answer", False, ("", "a </think> in an answer")),
])
def test_reasoning_is_what_the_think_tags_hold(text, inside, parts):
    assert split(text, inside) == parts


PIECES = st.lists(st.sampled_from(["<", "think", ">", "</", "</think>", "<think>", "\n", " ",
                                   "plan", "answer", "<b>"]), max_size=12)


@given(PIECES, st.booleans())
def test_streamed_it_splits_as_whole(pieces, inside):
    stream = ReasoningSplit(inside)
    out = [stream.add(piece) for piece in pieces] + [stream.add("", last=True)]
    assert ("".join(r for r, _ in out), "".join(a for _, a in out)) == split(
        "".join(pieces), inside)


def test_a_thinking_template_and_a_prompt_that_opens_the_reasoning_are_known():
    assert thinks(QWEN3) and not thinks(HERMES) and not thinks(None)
    assert opened("<|im_start|>assistant\n<think>\n") and not opened("<think>\n\n</think>\n\n")


def test_the_reasoning_comes_back_apart_and_a_call_after_it_is_read(tmp_path):
    with scripted_client(call_tokenizer(tmp_path, QWEN3),
                         "<think>\nI should read it.\n</think>\n\n" + CALL_TEXT) as (engine,
                                                                                 client):
        whole = client.chat.completions.create(model="x", messages=ASK, tools=TOOLS).choices[0]
        chunks = list(client.chat.completions.create(model="x", messages=ASK, tools=TOOLS,
                                                     stream=True))
        engine.answer = "<think>\nEasy.\n</think>\n\nIt adds two numbers."
        plain = client.chat.completions.create(model="x", messages=ASK).choices[0]
    assert whole.message.reasoning_content == "I should read it." and whole.message.content is None
    assert [json.loads(c.function.arguments) for c in whole.message.tool_calls] == [
        {"path": "a.py"}] and whole.finish_reason == "tool_calls"
    deltas = [chunk.choices[0].delta for chunk in chunks if chunk.choices]
    assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == \
        "\nI should read it.\n"
    assert not any(d.content for d in deltas) and sum(bool(d.tool_calls) for d in deltas) == 1
    assert (plain.message.reasoning_content, plain.message.content) == ("Easy.",
                                                                         "It adds two numbers.")
