"""A thinking model's answer held to a grammar (engine/thinking.py): the reasoning may come first,
and the answer held to must follow it; with the tags as special tokens (Qwen3's) or as text."""
import pytest
import tokenizers

from engine.swarm.workload import Workload
from engine.thinking import json_answer, reasons
from engine.tokenizer import Tokenizer
from tests.engine.loading.conftest import make_tokenizer_json
from tests.engine.serve.serving import call_tokenizer

CHOICE = {"type": "object", "properties": {"pick": {"enum": ["alpha", "beta"]}},
          "required": ["pick"], "additionalProperties": False}
ANSWER = '{"pick": "beta"}'
THINKS = "{{ messages[0].content }}<|im_start|>assistant\n{# strips </think> #}"
ASKED, OPENED, CLOSED = ("<|im_start|>assistant\n", "<|im_start|>assistant\n<think>\n",
                         "<|im_start|>assistant\n<think>\n\n</think>\n\n")


def takes(tokenizer, prompt: str | None):
    """Whether the answer to `prompt`, held to CHOICE, may be each text, whole and ended."""
    held_to = json_answer(CHOICE, tokenizer, prompt)

    def whole(text: str) -> bool:
        ids = tokenizer.encode(text) + list(tokenizer.eos_ids)
        return held_to.allowed(ids) == len(ids)
    return whole


@pytest.fixture
def tags_special(tmp_path):
    return call_tokenizer(tmp_path, THINKS)  # <think> and </think> are special tokens


@pytest.fixture
def tags_text(tmp_path):
    inner = tokenizers.Tokenizer.from_file(str(make_tokenizer_json(tmp_path / "tokenizer.json")))
    return Tokenizer(inner, chat_template=THINKS, eos_tokens=("<|im_end|>",))


@pytest.mark.parametrize("tags", ["tags_special", "tags_text"])
def test_the_reasoning_may_come_first_and_then_the_answer_must(tags, request):
    tokenizer = request.getfixturevalue(tags)
    whole = takes(tokenizer, ASKED)
    assert reasons(tokenizer, ASKED)
    assert whole(f'<think>\nBeta, as {{asked}}.\n</think>\n\n{ANSWER}')
    assert whole(ANSWER)  # no reasoning
    assert not whole("<think>\nBeta.")  # no end before the answer
    assert not whole("<think>\nBeta.\n</think>\n\nbeta")
    assert not whole(f"\n<think>\nBeta.</think>{ANSWER}")  # the answer begins with it or JSON
    if tags == "tags_text":  # the first </think> closes the reasoning
        assert not whole(f"<think>\nBeta.</think> or </think>{ANSWER}")


def test_no_special_token_in_the_reasoning(tags_special):
    held_to = json_answer(CHOICE, tags_special, ASKED)
    ids = tags_special.encode("<think>\nCall it?<tool_call>")
    assert held_to.allowed(ids) == len(ids) - 1


def test_a_prompt_that_opened_the_reasoning_has_it_closed_before_the_answer(tags_special):
    whole = takes(tags_special, OPENED)
    assert whole(f"Beta.\n</think>\n\n{ANSWER}") and whole(f"</think>{ANSWER}")
    assert not whole(ANSWER)  # still reasoning: no end
    assert not whole(f"<think>Beta.</think>{ANSWER}")  # opened once


@pytest.mark.parametrize("prompt", [CLOSED, None])
def test_a_prompt_that_closed_the_reasoning_or_is_no_chat_has_the_answer_at_once(tags_special,
                                                                                  prompt):
    whole = takes(tags_special, prompt)
    assert whole(ANSWER) and not whole(f"<think>\nBeta.</think>{ANSWER}")


def test_the_swarms_json_agents_reason_first_too(tags_special):
    """A workload's schema, compiled once for every answer, asks the template how they begin."""
    held_to = Workload().answer_format("json", tags_special)
    ids = tags_special.encode('<think>\nRead it.</think>\n{"tool": "read_file", "arguments": {}}')
    assert held_to.allowed(ids) == len(ids)
