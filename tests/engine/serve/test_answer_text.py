"""An answer's text comes in pieces that never change: whole characters, cut at a stop string."""
from engine.serve.completion import AnswerText
from engine.tokenizer import ByteTokenizer

TOK = ByteTokenizer()


def pieces(text_or_ids, stops=(), step=1):
    ids = TOK.encode(text_or_ids) if isinstance(text_or_ids, str) else text_or_ids
    answer = AnswerText(TOK, stops)
    out = [answer.add(ids[i:i + step]) for i in range(0, len(ids), step)]
    out.append(answer.add([], last=True))
    return out, answer


def test_pieces_join_to_the_whole_decode_and_a_character_waits_for_its_last_byte():
    text = "añb 漢字 ok"
    out, answer = pieces(text)
    assert "".join(out) == text and answer.tokens == len(text.encode())
    assert "\ufffd" not in "".join(out) and "ñ" in out and "漢" in out


def test_the_stop_token_is_counted_but_not_text():
    out, answer = pieces(TOK.encode("done") + [ByteTokenizer.IM_END])
    assert "".join(out) == "done" and answer.tokens == 5 and not answer.stopped


def test_the_answer_ends_before_a_stop_string_split_across_tokens():
    out, answer = pieces("first line\nEND of it", stops=("\nEND",))
    assert "".join(out) == "first line" and answer.stopped
    assert answer.tokens == len("first line\nEND")  # tokens past the stop are not taken


def test_tokens_that_came_with_a_stop_string_but_after_it_are_not_the_answers():
    """Speculation hands several tokens a step: the answer's count (usage, log-probabilities)
    stops at the token that ended the stop string, as it does one token a step."""
    text = "first line\nEND of it"
    for step in (1, 4, 7, len(text) + 1):
        out, answer = pieces(TOK.encode(text) + [ByteTokenizer.IM_END], stops=("\nEND",),
                             step=step)
        assert "".join(out) == "first line" and answer.tokens == len("first line\nEND"), step


def test_text_that_might_start_a_stop_string_waits_and_is_sent_when_it_does_not():
    out, answer = pieces("a\nEN b", stops=("\nEND",))
    assert "".join(out) == "a\nEN b" and not answer.stopped
    assert out[1:4] == ["", "", ""]  # "\n", "E", "N" held back while "\nEND" could follow


def test_the_first_of_several_stop_strings_cuts_and_a_cut_character_flushes_at_the_end():
    assert "".join(pieces("x = 1; y = 2", stops=("y", ";"))[0]) == "x = 1"
    out, _ = pieces(TOK.encode("ab") + list("é".encode())[:1], step=3)
    assert "".join(out) == "ab\ufffd"  # an answer cut mid-character (max_tokens) ends with it
