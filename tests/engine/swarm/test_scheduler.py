"""Scheduler unit tests on dummy sequences and a real (pure Python) block manager; no model."""
import pytest
from hypothesis import given, settings, strategies as st

from engine.block_manager import BlockManager
from engine.errors import KVCacheFull
from engine.sequence import Sequence
from engine.swarm.scheduler import Scheduler, SchedulerConfig, SchedulerOutput


def make(num_blocks=64, block_size=4, max_step_tokens=32, rotate_after_steps=256):
    return Scheduler(SchedulerConfig(max_step_tokens, rotate_after_steps),
                     BlockManager(num_blocks, block_size))


def feed(out: SchedulerOutput) -> None:
    """What the executor does to a sequence: cache the fed tokens; a lane that reached its end
    decodes one new token."""
    for seq, n in out.scheduled:
        seq.num_cached += n
        if seq.pending == 0:
            seq.token_ids.append(7)


def test_chunked_prefill_mixes_with_decode_under_the_token_budget():
    sched = make(max_step_tokens=10)
    decoding = Sequence.make_dummy(0, prompt_len=5)
    decoding.num_cached = 4  # one token left: a decode lane
    long = Sequence.make_dummy(1, prompt_len=23)
    sched.add(decoding)
    sched.add(long)
    chunks = []
    for _ in range(4):
        out = sched.schedule(batch_ceiling=8)
        assert out.num_tokens <= 10
        assert out.scheduled[0] == (decoding, 1)  # the decode lane is never starved by prefill
        chunks.append(dict((s.seq_id, n) for s, n in out.scheduled).get(1))
        feed(out)
    assert chunks == [9, 9, 5, 1]  # 23 prompt tokens in chunks, then it decodes


def test_batch_ceiling_admits_fifo_and_lowering_it_requeues_the_last_admitted():
    sched = make()
    seqs = [Sequence.make_dummy(i, prompt_len=2) for i in range(5)]
    for s in seqs:
        sched.add(s)
    out = sched.schedule(batch_ceiling=3)
    assert [s.seq_id for s, _ in out.scheduled] == [0, 1, 2]
    assert [s.seq_id for s in sched.waiting] == [3, 4]
    feed(out)
    out = sched.schedule(batch_ceiling=2)
    assert [s.seq_id for s, _ in out.scheduled] == [0, 1]
    assert [s.seq_id for s in sched.waiting] == [2, 3, 4]
    assert seqs[2].num_cached == 2  # sent back with its KV


def test_fair_rotation_lets_waiting_sequences_in():
    sched = make(rotate_after_steps=3)
    seqs = [Sequence.make_dummy(i, prompt_len=1) for i in range(3)]
    for s in seqs:
        sched.add(s)
    seen = []
    for _ in range(12):
        out = sched.schedule(batch_ceiling=2)
        assert len(out.scheduled) == 2
        seen += [s.seq_id for s, _ in out.scheduled]
        feed(out)
    counts = [seen.count(i) for i in range(3)]
    assert min(counts) >= 6 and max(counts) - min(counts) <= 3, counts


def test_park_keeps_kv_and_add_resumes_without_recompute():
    sched = make()
    seq = Sequence.make_dummy(0, prompt_len=6)
    sched.add(seq)
    feed(sched.schedule(4))
    assert seq.num_cached == 6
    sched.park(seq)
    assert sched.schedule(4).scheduled == []
    seq.token_ids += [1, 2, 3]  # tool output
    sched.add(seq)
    out = sched.schedule(4)
    assert out.scheduled == [(seq, 4)] and seq.num_cached == 6  # only the new tokens + last


def test_kv_exhaustion_preempts_idle_first_then_last_admitted_and_keeps_text():
    sched = make(num_blocks=6, block_size=4)  # 24 tokens in all
    idle = Sequence.make_dummy(0, prompt_len=10)
    sched.add(idle)
    feed(sched.schedule(4))
    sched.park(idle)
    a, b = Sequence.make_dummy(1, prompt_len=8), Sequence.make_dummy(2, prompt_len=8)
    sched.add(a)
    sched.add(b)
    text_b = list(b.token_ids)
    out = sched.schedule(4)  # 3 + 2 + 2 blocks do not fit 6: idle loses its KV
    assert out.preempted == [idle] and idle.num_cached == 0
    assert idle.token_ids[:10] == Sequence.make_dummy(0, prompt_len=10).token_ids
    feed(out)
    for _ in range(8):  # a and b grow until one must yield
        out = sched.schedule(4)
        feed(out)
        if out.preempted:
            break
    assert out.preempted == [b] and b.num_cached == 0 and b.token_ids[:8] == text_b
    assert sched.place(b) == "waiting" and sched.waiting[0] is b
    assert sched.num_preemptions == 2


def test_a_sequence_larger_than_the_cache_is_an_error():
    sched = make(num_blocks=2, block_size=4)
    sched.add(Sequence.make_dummy(0, prompt_len=20))
    with pytest.raises(KVCacheFull, match="more than the whole cache"):
        sched.schedule(4)


def test_drop_frees_blocks_and_preempt_one_spares_keep():
    sched = make(num_blocks=8, block_size=4)
    a, b = Sequence.make_dummy(0, prompt_len=4), Sequence.make_dummy(1, prompt_len=4)
    sched.add(a)
    sched.add(b)
    feed(sched.schedule(4))
    assert sched.preempt_one(keep=b) is a and a.num_cached == 0
    assert sched.preempt_one(keep=b) is None or sched.running == [b]
    free_before = sched.blocks.num_free_blocks
    sched.drop(b)
    assert sched.blocks.num_free_blocks > free_before and sched.place(b) is None


def test_a_lane_preempted_after_it_was_scheduled_sits_the_step_out():
    sched = make(num_blocks=4, block_size=4)
    prefilling = Sequence.make_dummy(0, prompt_len=12)
    decoding = Sequence.make_dummy(1, prompt_len=8)
    sched.add(prefilling)
    sched.add(decoding)
    sched.blocks.ensure(0, 4)
    prefilling.num_cached = 4
    sched.blocks.ensure(1, 8)
    decoding.num_cached = 7
    out = sched.schedule(batch_ceiling=4)  # decode lane goes first, then loses its blocks
    assert out.scheduled == [(prefilling, 8)] and out.preempted == [decoding]
    assert decoding.num_cached == 0 and sched.place(decoding) == "waiting"


def sharing(num_blocks=64, max_step_tokens=8):
    return Scheduler(SchedulerConfig(max_step_tokens), BlockManager(num_blocks, 4),
                     share_prefixes=True)


SYSTEM = list(range(100, 112))  # a prompt's shared start: 12 tokens, 3 blocks of 4


def test_agents_that_start_at_once_feed_their_shared_prefix_once():
    sched = sharing()
    first = Sequence(seq_id=0, token_ids=SYSTEM + [1, 2], prompt_len=14)
    second = Sequence(seq_id=1, token_ids=SYSTEM + [3, 4, 5], prompt_len=15)
    sched.add(first)
    sched.add(second)
    out = sched.schedule(batch_ceiling=8)
    # the second waits for the first to feed what they share, rather than feeding it too
    assert [s.seq_id for s, _ in out.scheduled] == [0] and list(sched.waiting) == [second]
    feed(out)
    assert sched.schedule(batch_ceiling=8).shared == []  # 8 of 12 fed
    first.num_cached = 12
    out = sched.schedule(batch_ceiling=8)
    assert out.shared == [(second, 12)]
    assert dict((s.seq_id, n) for s, n in out.scheduled)[1] == 3  # only its own tokens
    # the same three blocks in both tables, then each its own
    first_table, second_table = sched.blocks.block_table(0), sched.blocks.block_table(1)
    assert second_table[:3] == first_table[:3] and second_table[3] != first_table[3]


def test_a_prefix_is_shared_from_an_idle_sequence_in_whole_blocks_and_only_a_block_or_more():
    sched = sharing()
    parked = Sequence(seq_id=0, token_ids=SYSTEM + [1, 2], prompt_len=14, num_cached=14)
    sched.add(parked)
    sched.blocks.ensure(0, 14)
    sched.park(parked)
    alike = Sequence(seq_id=1, token_ids=SYSTEM[:6] + [9] * 6, prompt_len=12)
    longer = Sequence(seq_id=2, token_ids=SYSTEM + [1, 2, 3], prompt_len=15)
    sched.add(alike)
    sched.add(longer)
    out = sched.schedule(batch_ceiling=8)
    # 6 tokens alike: a block and a half, the whole block shared; 14 for the other: 3 blocks
    assert out.shared == [(alike, 4), (longer, 12)]
    assert alike.num_cached == 4 and longer.num_cached == 12
    short = Sequence(seq_id=3, token_ids=SYSTEM[:3] + [8] * 5, prompt_len=8)
    sched.add(short)
    assert sched.schedule(batch_ceiling=8).shared == [] and short.num_cached == 0


def test_a_shared_prefix_takes_no_free_blocks_and_outlives_the_sequence_it_came_from():
    sched = sharing(num_blocks=5)
    holder = Sequence(seq_id=0, token_ids=SYSTEM + [1], prompt_len=13, num_cached=12)
    sched.blocks.ensure(0, 13)  # 4 of the 5 blocks
    sched.add(holder)
    sched.schedule(batch_ceiling=8)
    newcomer = Sequence(seq_id=1, token_ids=SYSTEM + [2], prompt_len=13)
    sched.add(newcomer)
    out = sched.schedule(batch_ceiling=8)
    # its 12 shared tokens are in the holder's blocks; its last token takes the one free block
    assert out.shared == [(newcomer, 12)] and sched.blocks.num_free_blocks == 0
    sched.drop(holder)  # only the holder's own last block comes back
    assert sched.blocks.num_free_blocks == 1 and sched.blocks.sole_blocks(1) == 4


def test_an_idle_sequence_whose_blocks_are_all_shared_is_not_preempted_for_nothing():
    sched = sharing()
    holder = Sequence(seq_id=0, token_ids=SYSTEM + [1], prompt_len=13, num_cached=12)
    sched.blocks.ensure(0, 13)
    sched.add(holder)
    sched.schedule(batch_ceiling=8)
    alike = Sequence(seq_id=1, token_ids=SYSTEM + [2], prompt_len=13)
    sched.add(alike)
    sched.schedule(batch_ceiling=8)  # it starts with the holder's three blocks
    own = Sequence(seq_id=2, token_ids=[5] * 9, prompt_len=9, num_cached=8)
    sched.blocks.ensure(2, 9)
    sched.add(own)
    alike.num_cached = 12  # parked before its last token was fed: all its KV is shared
    sched.blocks.truncate(1, 12)
    for seq in (alike, own):
        sched.park(seq)
    assert sched.blocks.sole_blocks(1) == 0
    free = sched.blocks.num_free_blocks
    # the least recently parked would free nothing: the next one goes, and frees its blocks
    assert sched.preempt_one() is own and sched.blocks.num_free_blocks == free + 3
    assert alike.num_cached == 12


class StatesAt:
    """A recurrent model's states as the scheduler sees them (RecurrentStates): each sequence's
    state stands where its cached tokens end; a prefix's state is kept where one stands there."""

    def __init__(self, *seqs: Sequence) -> None:
        self.seqs = {seq.seq_id: seq for seq in seqs}
        self.shares: list[tuple[int, int, int]] = []  # (source, target, tokens)
        self.kept: set[tuple[int, ...]] = set()

    def reach(self, seq_id: int) -> range:
        seq = self.seqs.get(seq_id)
        return range(seq.num_cached, seq.num_cached + 1) if seq else range(0, 1)

    def share(self, source_id: int, target_id: int, prefix: list[int]) -> None:
        assert len(prefix) in self.reach(source_id) or tuple(prefix) in self.kept
        assert self.seqs[source_id].token_ids[:len(prefix)] == prefix
        self.shares.append((source_id, target_id, len(prefix)))

    def keep(self, seq_id: int, prefix: list[int]) -> None:
        if len(prefix) in self.reach(seq_id):
            self.kept.add(tuple(prefix))

    def kept_prefix(self, tokens: list[int], limit: int) -> int:
        return max((len(key) for key in self.kept
                    if len(key) <= limit and tuple(tokens[:len(key)]) == key), default=0)


def sharing_states(*seqs: Sequence, max_step_tokens=32) -> Scheduler:
    return Scheduler(SchedulerConfig(max_step_tokens), BlockManager(64, 4), share_prefixes=True,
                     states=StatesAt(*seqs))


def test_a_recurrent_prompt_stops_where_a_waiting_one_diverges_and_hands_it_its_state_there():
    first = Sequence(seq_id=0, token_ids=SYSTEM + [1, 2, 3, 4, 5], prompt_len=17)
    second = Sequence(seq_id=1, token_ids=SYSTEM + [6, 7], prompt_len=14)
    longer = Sequence(seq_id=2, token_ids=SYSTEM + [1, 2, 3, 4, 9, 9], prompt_len=18)
    sched = sharing_states(first, second, longer)
    for seq in (first, second, longer):
        sched.add(seq)
    out = sched.schedule(batch_ceiling=8)
    # the others wait; the first feeds its prompt up to the end of the three blocks it shares
    # with the second, though the token budget would take all 17
    assert out.scheduled == [(first, 12)] and list(sched.waiting) == [second, longer]
    feed(out)
    out = sched.schedule(batch_ceiling=8)
    # the second starts there with a copy of the first's state; the longer one waits for the
    # first's next stop, four tokens on, where they part
    assert out.shared == [(second, 12)] and sched.states.shares == [(0, 1, 12)]
    assert dict((s.seq_id, n) for s, n in out.scheduled) == {0: 4, 1: 2}
    feed(out)
    out = sched.schedule(batch_ceiling=8)
    assert out.shared == [(longer, 16)] and sched.states.shares[-1] == (0, 2, 16)


def test_a_recurrent_holder_past_a_shared_prefix_shares_nothing():
    holder = Sequence(seq_id=0, token_ids=SYSTEM + [1, 2], prompt_len=14, num_cached=14)
    sched = sharing_states(holder)
    sched.blocks.ensure(0, 14)
    sched.add(holder)
    sched.park(holder)
    newcomer = Sequence(seq_id=1, token_ids=SYSTEM + [3, 4], prompt_len=14)
    sched.add(newcomer)
    out = sched.schedule(batch_ceiling=8)
    # its state holds 14 tokens, none of which can be taken out: the 12 alike are fed again
    assert out.shared == [] and out.scheduled == [(newcomer, 14)]
    assert sched.states.shares == [] and sched.states.kept == set()  # 3 blocks: not worth it


def test_a_recurrent_prompt_that_starts_as_a_holders_keeps_its_state_there_for_later_ones():
    system = list(range(200, 220))  # 5 blocks of 4: a prefix worth keeping
    holder = Sequence(seq_id=0, token_ids=system + [1, 2], prompt_len=22, num_cached=22)
    second = Sequence(seq_id=1, token_ids=system + [3, 4, 5], prompt_len=23)
    third = Sequence(seq_id=2, token_ids=system + [6], prompt_len=21)
    sched = sharing_states(holder, second, third)
    sched.blocks.ensure(0, 22)
    sched.add(holder)
    sched.park(holder)  # its state holds all 22 tokens: the first 20 cannot be shared
    sched.add(second)
    out = sched.schedule(batch_ceiling=8)
    # fed again, but only to the end of the 20 alike, where its state is kept next step
    assert out.shared == [] and out.scheduled == [(second, 20)]
    feed(out)
    out = sched.schedule(batch_ceiling=8)
    assert out.scheduled == [(second, 3)] and sched.states.kept == {tuple(system)}
    feed(out)
    sched.add(third)
    out = sched.schedule(batch_ceiling=8)
    # the third starts from the kept state and a holder's blocks
    assert out.shared == [(third, 20)] and sched.states.shares[-1][1:] == (2, 20)
    assert dict((s.seq_id, n) for s, n in out.scheduled)[2] == 1


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_recurrent_sequences_coming_and_going_share_only_states_that_stand_at_their_prefix(data):
    """Sequences starting with one of a few system prompts, arriving over time, decoding a few
    tokens and leaving: each shares only a prefix whose state stands at its end, in a holder or
    kept (StatesAt checks both), every chunk feeds something, and every sequence finishes."""
    systems = [list(range(100 * s, 100 * s + n))
               for s, n in enumerate(data.draw(st.lists(st.integers(0, 40), min_size=1,
                                                        max_size=3)), start=1)]
    seqs = [Sequence(seq_id=i, token_ids=data.draw(st.sampled_from(systems))
                     + data.draw(st.lists(st.integers(1, 9), min_size=1, max_size=12)),
                     prompt_len=0, max_new_tokens=data.draw(st.integers(1, 4)))
            for i in range(data.draw(st.integers(1, 8)))]
    for seq in seqs:
        seq.prompt_len = len(seq.token_ids)
    arrivals = sorted(data.draw(st.integers(0, 30)) for _ in seqs)
    sched = sharing_states(*seqs, max_step_tokens=data.draw(st.integers(4, 32)))
    done = set()
    for step in range(400):
        for seq, at in zip(seqs, arrivals):
            if at == step:
                sched.add(seq)
        out = sched.schedule(batch_ceiling=data.draw(st.integers(1, 8)))
        assert all(n > 0 for _, n in out.scheduled)
        feed(out)
        for seq, _ in out.scheduled:
            if seq.num_output >= seq.max_new_tokens:
                sched.drop(seq)
                done.add(seq.seq_id)
        if len(done) == len(seqs):
            break
    assert len(done) == len(seqs)
