from hypothesis import given, settings
from hypothesis import strategies as st

from engine.sequence import Prediction, Sequence
from engine.spec.prompt_lookup import PREDICTED, NgramIndex, PromptLookupDrafter


def _seq(tokens, seq_id=0):
    return Sequence(seq_id=seq_id, token_ids=list(tokens), prompt_len=len(tokens))


def test_proposes_what_followed_the_longest_match():
    drafter = PromptLookupDrafter(ngram_sizes=(3, 2, 1))
    seq = _seq([1, 2, 3, 4, 5, 6, 9, 2, 3, 4])
    assert drafter.available(seq, cap=3) == 3
    draft = drafter.propose([seq], [3])[0]
    assert draft.tokens == [5, 6, 9] and draft.match == 3  # matched on (2, 3, 4)
    assert drafter.propose([_seq([4, 1, 5, 1])], [2])[0].match == 1  # only (1,) occurs before


def test_prefers_the_most_recent_occurrence_and_respects_k():
    drafter = PromptLookupDrafter(ngram_sizes=(2,))
    seq = _seq([7, 8, 1, 1, 7, 8, 2, 2, 7, 8])
    assert drafter.propose([seq], [1])[0].tokens == [2]


def test_no_match_proposes_nothing():
    drafter = PromptLookupDrafter()
    seq = _seq([1, 2, 3, 4])
    assert drafter.available(seq, cap=5) == 0
    assert drafter.propose([seq], [0])[0].tokens == []


def test_index_grows_incrementally_with_committed_tokens():
    index = NgramIndex((2,))
    tokens = [1, 2, 3]
    index.extend(tokens)
    assert index.indexed_upto == 3
    tokens += [1, 2]
    index.extend(tokens)
    assert index.indexed_upto == 5
    # the tail (1, 2) itself is not a match; the earlier (1, 2) was followed by 3, 1, 2 and then,
    # the lane copying itself, by 3 again
    assert index.continuation(tokens, 4) == ([3, 1, 2, 3], 2)


def test_rewritten_context_rebuilds_the_index():
    drafter = PromptLookupDrafter(ngram_sizes=(1,))
    drafter.available(_seq([5, 6, 7, 8, 5]), 2)
    assert drafter.available(_seq([9, 4, 9]), 2) == 2  # [4, 9]: only a fresh index knows (9,)


def test_a_lane_following_its_source_reads_on_past_a_more_recent_decoy():
    """(12, 13) occurs last in a decoy, but the lane is copying the earlier text: the next
    proposal reads on from there. Once the lane writes something else it is looked up afresh."""
    copied, decoy = [10, 11, 12, 13, 14, 15, 16], [50, 12, 13, 99, 51]
    seq = _seq(copied + decoy + [10, 11])
    drafter = PromptLookupDrafter(ngram_sizes=(2,))
    assert drafter.propose([seq], [4])[0].tokens == [12, 13, 14, 15]
    seq.token_ids += [12, 13]                          # two drafts accepted
    followed = drafter.propose([seq], [3])[0]
    assert followed.tokens == [14, 15, 16] and followed.match == 2
    assert PromptLookupDrafter(ngram_sizes=(2,)).propose([seq], [2])[0].tokens == [99, 51]
    seq.token_ids += [14, 99]                          # the lane left the copy
    assert drafter.propose([seq], [2])[0].tokens == []  # (14, 99) occurs nowhere before


def test_a_lane_in_a_loop_is_proposed_the_loop_past_the_end_of_its_context():
    """What followed the match runs into the present: the lane is copying its own last three
    tokens, so the proposal goes on repeating them rather than stopping at the context's end."""
    drafter = PromptLookupDrafter(ngram_sizes=(3,))
    seq = _seq([9, 1, 2, 3, 1, 2, 3])
    assert drafter.available(seq, cap=7) == 7
    assert drafter.propose([seq], [7])[0].tokens == [1, 2, 3, 1, 2, 3, 1]
    seq.token_ids += [1, 2, 3, 1]                      # four drafts accepted: still following
    assert drafter.propose([seq], [5])[0].tokens == [2, 3, 1, 2, 3]


@settings(max_examples=200, deadline=None)
@given(tokens=st.lists(st.integers(0, 3), min_size=1, max_size=60),
       grow=st.lists(st.integers(1, 5), max_size=12))
def test_the_index_finds_what_a_scan_of_the_context_finds(tokens, grow):
    """Fed a context a few tokens at a time, the incremental index matches the longest suffix at
    its latest earlier occurrence, as a scan of the whole context does (and finds nothing where
    the scan finds nothing: the shortest suffix is probed first)."""
    index, sizes, end = NgramIndex((4, 3, 2)), (4, 3, 2), 0
    for step in [*grow, len(tokens)]:
        end = min(len(tokens), end + step)
        context = tokens[:end]
        index.extend(context)
        expected = next(((e, n) for n in sizes if len(context) > n
                         for e in range(len(context) - 1, n - 1, -1)
                         if context[e - n:e] == context[-n:]), (None, 0))
        assert index._looked_up(context) == expected


def _answering(drafter, seq, written, cap=4):
    """The drafter's proposal after the answer wrote `written` more tokens."""
    seq.token_ids.extend(written)
    drafter.available(seq, cap)
    return drafter.propose([seq], [cap])[0]


def test_a_predicted_answer_is_drafted_from_its_start_and_past_an_edit():
    """OpenAI's Predicted Outputs: the client sends what it expects (a file an edit leaves
    mostly as it was); the context, ending in the turn's prompt, offers nothing yet."""
    drafter = PromptLookupDrafter(ngram_sizes=(3, 2))
    predicted = [10, 11, 12, 13, 14, 15, 16, 17, 12, 13, 18]
    seq = Sequence(0, [1, 2, 3], 3, prediction=Prediction(predicted))
    first = _answering(drafter, seq, [])
    assert (first.tokens, first.match) == ([10, 11, 12, 13], PREDICTED)
    assert _answering(drafter, seq, [10, 11]).tokens == [12, 13, 14, 15]  # reads on
    # an edit (14 -> 99, 98), then the prediction's text again: found past where it left
    assert _answering(drafter, seq, [12, 13, 99, 98]).tokens == []  # no prediction, no context
    assert _answering(drafter, seq, [15, 16]).tokens == [17, 12, 13, 18]
    # where the prediction has nothing to offer, the context's own lookup drafts
    from_context = _answering(drafter, seq, [17, 12, 13, 18, 12, 13, 99, 98])
    assert (from_context.tokens, from_context.match) == ([15, 16, 17, 12], 3)


def test_a_new_turns_prediction_starts_afresh():
    drafter = PromptLookupDrafter(ngram_sizes=(2,))
    seq = Sequence(0, [1, 2], 2, prediction=Prediction([10, 11, 12]))
    _answering(drafter, seq, [10, 11])
    seq.prompt_len, seq.prediction = len(seq.token_ids), Prediction([20, 21])
    assert _answering(drafter, seq, []).tokens == [20, 21]
