"""Answers held to a JSON schema (engine/output_format.py): the grammar, the masks row by row,
and that speculation within a format changes no token (fp32, the tiny random model, whose
answers the masks alone make JSON)."""
import json

import pytest
import torch

from engine.controls import Controls
from engine.generate import generate
from engine.output_format import json_format

# At most a space between tokens (llguidance's x-guidance options, as a schema may give them):
# the random model's answers are whitespace wherever the grammar allows it
TIGHT = {"x-guidance": {"whitespace_pattern": " ?"}}
CHOICE = {"type": "object", "properties": {"ok": {"type": "boolean"},
                                           "pick": {"enum": ["alpha", "beta", "gamma"]}},
          "required": ["ok", "pick"], "additionalProperties": False, **TIGHT}
# The prompt shows the answer's text, so that prompt lookup has drafts to offer (and the grammar
# some to cut: the tiny model follows it no further than its masks make it)
PROMPT = 'Answer as {"ok": true, "pick": "beta"} or {"ok": false, "pick": "gamma"}.'


def test_a_schema_that_cannot_be_kept_to_is_an_error_saying_why(tiny):
    with pytest.raises(ValueError, match="Invalid type: sentence"):
        json_format({"type": "sentence"}, tiny.tokenizer)


def test_drafts_are_cut_where_the_grammar_refuses_and_each_row_masked_after_the_ones_before(
        tiny):
    held_to = json_format(CHOICE, tiny.tokenizer)
    answer = tiny.tokenizer.encode('{"ok": true, "pick": "beta"}')
    assert held_to.allowed(answer) == len(answer)
    assert held_to.allowed(tiny.tokenizer.encode('{"ok": maybe')) == len('{"ok": ')
    logits = torch.zeros(4, tiny.config.vocab_size)
    rows = held_to.mask(logits, answer[:3])  # after '', '{', '{"'
    allowed = [set(torch.nonzero(row > -1).flatten().tolist()) for row in rows]
    assert allowed[0] == {ord("{")}  # an object opens (no room for whitespace before it)
    assert ord('"') in allowed[1] and ord("}") not in allowed[1]  # ok and pick are required
    assert allowed[2] <= {ord("o"), ord("p")} and allowed[3] == {ord("k")}
    assert held_to.allowed(answer) == len(answer)  # the masks stepped back where they began
    held_to.advance(answer)
    [ends] = held_to.mask(logits[:1], [])
    assert set(torch.nonzero(ends > -1).flatten().tolist()) == set(tiny.tokenizer.eos_ids)


def test_a_greedy_row_keeps_its_best_token_where_the_grammar_allows_it_else_the_best_allowed(
        tiny):
    held_to = json_format(CHOICE, tiny.tokenizer)
    logits = torch.zeros(3, tiny.config.vocab_size)
    logits[:, ord("x")] = 5.0  # the best of all, which the grammar never allows here
    logits[0, ord("{")] = logits[2, ord("o")] = 1.0
    logits[1, ord('"')] = 9.0  # the best of all, and allowed
    top = [ord("x"), ord('"'), ord("x")]
    assert held_to.greedy(logits, [ord("{"), ord('"')], top) == [ord("{"), ord('"'), ord("o")]
    assert held_to.allowed([ord("{")]) == 1  # stepped back where it began


def test_an_id_the_tokenizer_does_not_name_is_refused_and_the_grammar_goes_on(tiny):
    """The tiny model's ids 260..319 name no text: the matcher, shown one, would stop for good."""
    held_to = json_format(CHOICE, tiny.tokenizer)
    assert held_to.allowed([ord("{"), 300, ord('"')]) == 1 and held_to.allowed([300]) == 0
    assert held_to.allowed(tiny.tokenizer.encode('{"ok": true')) == len('{"ok": true')


def test_an_end_token_is_taken_only_where_the_answer_may_end(tiny):
    """llguidance's own check passes an end token anywhere, and one consumed where the answer
    may not end stops its matcher for good (found in a swarm: a lookup draft of `}<|im_end|>`
    closing one brace of two)."""
    held_to = json_format(CHOICE, tiny.tokenizer)
    end = tiny.tokenizer.eos_ids[0]
    half = tiny.tokenizer.encode('{"ok": true')
    whole = tiny.tokenizer.encode('{"ok": true, "pick": "beta"}')
    assert held_to.allowed(half + [end]) == len(half)
    assert held_to.allowed(whole + [end, ord("x")]) == len(whole) + 1
    assert held_to.greedy(torch.zeros(3, tiny.config.vocab_size), [ord("{"), end],
                          [ord("{"), 7, 8]) == [ord("{"), ord(" "), 8]  # no row past the end
    held_to.advance(whole + [end])
    assert held_to.allowed([end]) == 1 and held_to.allowed([ord(" ")]) <= 1


@pytest.mark.parametrize("drafter", ["lookup", "self"])
def test_speculation_within_a_format_changes_no_token_and_the_answers_keep_to_it(
        tiny, calibration, drafter):
    held_to = json_format(CHOICE, tiny.tokenizer)
    prompts = [PROMPT, "Pick one.", PROMPT + " Go."]
    plain = generate(tiny, prompts, Controls(policy="off"), max_new_tokens=40,
                     output_format=held_to)
    drafted = generate(tiny, prompts, Controls(policy="fixed", k=6, drafter=drafter),
                       max_new_tokens=40, calibration=calibration, output_format=held_to)
    assert [r.token_ids for r in drafted] == [r.token_ids for r in plain]
    assert sum(r.drafted for r in drafted) > 0 and sum(r.accepted for r in drafted) > 0
    for result in plain:
        answer = json.loads(result.text)
        assert set(answer) == {"ok", "pick"} and isinstance(answer["ok"], bool)
        assert answer["pick"] in CHOICE["properties"]["pick"]["enum"]


def test_a_sampled_answer_keeps_to_the_format_too(tiny):
    from engine.sampling import SamplingParams
    held_to = json_format({"type": "object", "properties": {"n": {"type": "integer"}},
                           "required": ["n"], "additionalProperties": False, **TIGHT},
                          tiny.tokenizer)
    results = generate(tiny, ["a", "b", "c"], Controls(policy="off"), max_new_tokens=40,
                       sampling=SamplingParams(temperature=1.0, seed=3), output_format=held_to)
    finished = [json.loads(r.text) for r in results if r.token_ids[-1] in tiny.tokenizer.eos_ids]
    assert finished and all(isinstance(answer["n"], int) for answer in finished)
