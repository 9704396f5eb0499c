"""common_prefix: how far two token lists agree, found by halving over slice compares."""
from hypothesis import given, strategies as st

from engine.sequence import common_prefix

TOKENS = st.lists(st.integers(0, 3), max_size=40)


@given(TOKENS, TOKENS, st.one_of(st.none(), st.integers(0, 50)))
def test_common_prefix_is_where_two_lists_first_differ(a, b, limit):
    same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    expected = same if limit is None else min(same, limit)
    assert common_prefix(a, b, limit) == expected
