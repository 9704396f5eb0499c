"""Continuous batching over sequences. It counts tokens and has no phases (STYLE rule 4): each
sequence has tokens and a count of those cached; a step feeds some of the uncached ones. A chunk
that reaches a sequence's last token makes it a decoding lane (the executor adds drafts).

Sequences are in one of three places:
- running: admitted, at most `batch_ceiling` of them; each gets tokens every step.
- waiting: want compute but are not admitted (FIFO; preempted ones go to the front).
- idle:    want no compute now (their agent is in a tool call) but keep their KV blocks, so the
           tool output only needs its own prefill. Idle sequences are the first to lose their
           blocks when the cache runs out (least recently parked first), then the running ones
           admitted last. A preempted sequence keeps its tokens; num_cached drops to 0 and it is
           recomputed when scheduled again — no agent loses its text.

Admission is FIFO and stops at the first waiting sequence whose next chunk would not fit the
free blocks plus those held by idle sequences (vLLM does the same), so a full cache does not
thrash. Fair rotation: a running sequence that has held its place for `rotate_after_steps` steps while
others wait goes to the back of the queue (its KV stays).

Shared prefixes (`share_prefixes`): a sequence admitted with nothing cached starts with the KV
blocks of the longest prefix it shares with a sequence holding KV, a block of it at least (a
swarm's system prompt, an agent framework's instructions and tools): those tokens are neither
fed again nor held twice (BlockManager.share). Where a running sequence is still feeding a
block more of that prefix than any holds, the new one waits for it rather than feeding it too
(agents that start at once share one prefill).

A recurrent model's sequence (Qwen3.5's DeltaNet layers, `states`) needs, besides the blocks, the
holder's state as of the shared prefix's end, and a state cannot be taken back to a position
(recurrent_state.py). So it shares only from a holder whose state stands at the end of the whole
blocks they share, and its copy of that state goes with the blocks (`RecurrentStates.fork`); a
prompt being fed that starts as a waiting one does stops its chunk at the end of their common
blocks, so that agents that start at once still feed their system prompt once. A state at the
end of a prefix of KEPT_PREFIX_BLOCKS or more is also kept (`RecurrentStates.keep`) for the
sequences that start with it later: the one that shares it, and one being fed that starts as a
holder does, whose chunk stops there for it (the second to come feeds a prefix again, the rest
share it)."""
from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from engine.errors import KVCacheFull
from engine.sequence import Sequence, common_prefix, longest_held_prefix


# Least whole blocks of a prompt prefix whose recurrent state is kept for later sequences: each
# kept state is as much memory as a sequence's, and a short prefix saves little feeding.
KEPT_PREFIX_BLOCKS = 4


@dataclass(slots=True)
class SchedulerConfig:
    max_step_tokens: int = 256     # tokens fed per step (decode tokens + prefill chunks; not drafts)
    rotate_after_steps: int = 256  # steps a sequence may run while others wait

    def __post_init__(self) -> None:
        if self.max_step_tokens < 1 or self.rotate_after_steps < 1:
            raise ValueError(f"max_step_tokens and rotate_after_steps must be >= 1: {self}")


@dataclass(slots=True)
class SchedulerOutput:
    scheduled: list[tuple[Sequence, int]]  # (sequence, uncached tokens to feed this step)
    preempted: list[Sequence] = field(default_factory=list)  # lost their KV this step
    shared: list[tuple[Sequence, int]] = field(default_factory=list)  # (admitted, prefix tokens)

    @property
    def num_tokens(self) -> int:
        return sum(n for _, n in self.scheduled)

    @classmethod
    def make_dummy(cls, n: int = 3) -> "SchedulerOutput":
        return cls(scheduled=[(Sequence.make_dummy(i), 1) for i in range(n)])


class Scheduler:
    def __init__(self, config: SchedulerConfig, blocks, share_prefixes: bool = False,
                 states=None) -> None:
        self.config = config
        self.blocks = blocks  # engine.block_manager.BlockManager
        self.share_prefixes = share_prefixes
        self.states = states  # a recurrent model's RecurrentStates; None without such layers
        self.running: list[Sequence] = []
        self.waiting: deque[Sequence] = deque()
        self.idle: OrderedDict[int, Sequence] = OrderedDict()
        # Membership by id: Sequence is a dataclass whose == compares every token.
        self._place: dict[int, str] = {}    # seq_id -> "running" | "waiting" | "idle"
        self._ran_for: dict[int, int] = {}  # seq_id -> steps run since admitted
        self.num_preemptions = 0

    # -- what the engine tells it --
    def add(self, seq: Sequence) -> None:
        """`seq` wants compute (a new turn or tool output was appended)."""
        if self._place.get(seq.seq_id) in ("running", "waiting"):
            return
        self.idle.pop(seq.seq_id, None)
        self.waiting.append(seq)
        self._place[seq.seq_id] = "waiting"

    def park(self, seq: Sequence) -> None:
        """`seq` wants no compute for now (its agent called a tool); its KV stays."""
        self._unlink(seq)
        self.idle[seq.seq_id] = seq
        self._place[seq.seq_id] = "idle"

    def drop(self, seq: Sequence) -> None:
        """`seq` is gone (agent finished or started a fresh task): free its blocks."""
        self._unlink(seq)
        self.blocks.free(seq.seq_id)
        seq.num_cached = 0

    def place(self, seq: Sequence) -> str | None:
        return self._place.get(seq.seq_id)

    # -- each step --
    def schedule(self, batch_ceiling: int) -> SchedulerOutput:
        self._fit_ceiling(batch_ceiling)
        self._rotate()
        shared_prefixes, held_back = [], []
        while self.waiting and len(self.running) < batch_ceiling:
            source, shared = self._shared_prefix(self.waiting[0])
            if shared is None:  # waits, first in the queue, for a prefix being fed
                held_back.append(self.waiting.popleft())
                continue
            if self.running and not self._fits(self.waiting[0], shared):
                break
            seq = self.waiting.popleft()
            if shared:
                seq.num_cached = self.blocks.share(source, seq.seq_id, shared)
                if self.states is not None:
                    self._share_state(source, seq, shared)
                shared_prefixes.append((seq, seq.num_cached))
            self._admit(seq)
        self.waiting.extendleft(reversed(held_back))
        preempted: list[Sequence] = []
        scheduled: list[tuple[Sequence, int]] = []
        budget = self.config.max_step_tokens
        # Decode lanes (one token to feed) first, so a long prefill never stalls the batch;
        # then prefill chunks in admission order from what is left of the token budget.
        for seq in sorted(self.running, key=lambda s: s.pending > 1):
            if self._place.get(seq.seq_id) != "running":  # preempted for an earlier lane
                continue
            n = min(seq.pending, budget, self._state_stop(seq) - seq.num_cached)
            if n <= 0:
                continue
            if not self._reserve(seq, seq.num_cached + n, preempted):
                break  # seq itself was preempted: nothing later fits either
            scheduled.append((seq, n))
            budget -= n
        # A lane scheduled early may have been preempted for a later one's blocks: it lost its
        # KV, so it sits this step out.
        scheduled = [(s, n) for s, n in scheduled if self._place.get(s.seq_id) == "running"]
        for seq, _ in scheduled:
            self._ran_for[seq.seq_id] += 1
        return SchedulerOutput(scheduled=scheduled, preempted=preempted,
                               shared=shared_prefixes)

    def preempt_one(self, keep: Sequence | None = None) -> Sequence | None:
        """Free one victim's blocks: an idle sequence holding KV (least recently parked), else
        a waiting one holding KV, else the running sequence admitted last other than `keep`. Of
        the idle and waiting ones, the first whose blocks are not all shared with others (that
        one's going would free none)."""
        # Waiting sequences can hold KV too (sent back by a lowered ceiling or by rotation).
        holders = [s for s in self.idle.values() if s.num_cached > 0] + \
            [s for s in reversed(self.waiting) if s.num_cached > 0 and s is not keep]
        if holders:
            victim = next((s for s in holders if self.blocks.sole_blocks(s.seq_id)), holders[0])
            self.blocks.free(victim.seq_id)
            victim.num_cached = 0
            self.num_preemptions += 1
            return victim
        for victim in reversed(self.running):
            if victim is not keep:
                self._unlink(victim)
                self.blocks.free(victim.seq_id)
                victim.num_cached = 0
                self.waiting.appendleft(victim)
                self._place[victim.seq_id] = "waiting"
                self.num_preemptions += 1
                return victim
        return None

    # -- internals --
    def _shared_prefix(self, seq: Sequence) -> tuple[int | None, int | None]:
        """The sequence (id) whose KV `seq` is best started from and the tokens of the whole
        blocks they share (None, 0: none), or (None, None) where a running sequence is feeding a
        block more of `seq`'s prefix than that: `seq` had better wait for it."""
        if not self.share_prefixes or seq.num_cached or seq.prompt_logprobs is not None:
            return None, 0
        if self.states is not None:
            return self._shared_state(seq)
        source, cached = longest_held_prefix(seq.token_ids, (
            (other.seq_id, other.token_ids, other.num_cached) for other in self._holders()))
        # a running sequence feeds all its tokens
        _, fed = longest_held_prefix(seq.token_ids, ((other.seq_id, other.token_ids,
                                                      len(other.token_ids))
                                                     for other in self.running))
        block = self.blocks.block_size
        cached -= cached % block
        if fed >= cached + block:
            return None, None
        return (source, cached) if cached else (None, 0)

    def _shared_state(self, seq: Sequence) -> tuple[int | None, int | None]:
        """`_shared_prefix` for a recurrent model: only from a holder whose state stands at the
        end of the whole blocks it shares with `seq`; waits for a running sequence still short
        of a longer such end (`_state_stop` stops its chunk there)."""
        block, last = self.blocks.block_size, len(seq.token_ids) - 1
        source, cached = holder, held = None, 0  # held: the most any holder's blocks hold
        for other in self._holders():
            common = _whole_blocks(other.token_ids, seq.token_ids, min(other.num_cached, last),
                                   block)
            if cached < common and common in self.states.reach(other.seq_id):
                source, cached = other.seq_id, common
            if held < common:
                holder, held = other.seq_id, common
        kept = self.states.kept_prefix(seq.token_ids, held)
        if cached < kept:
            source, cached = holder, kept
        if any(other.num_cached < common and cached < common
               for other in self.running
               for common in [_whole_blocks(other.token_ids, seq.token_ids, last, block)]):
            return None, None
        return (source, cached) if cached else (None, 0)

    def _state_stop(self, seq: Sequence) -> int:
        """Where `seq`'s chunk ends at most: for a recurrent model, the nearest end past its
        cached tokens of the whole blocks it starts with alike with a waiting sequence that holds
        nothing (which shares them from there), or of KEPT_PREFIX_BLOCKS or more alike with a
        holder, where no state is kept yet (kept there, for later ones); its last token
        otherwise."""
        stop = len(seq.token_ids)
        if self.states is None or not self.share_prefixes or seq.pending <= 1:
            return stop
        block = self.blocks.block_size
        for other in self.waiting:
            if not other.num_cached:
                common = _whole_blocks(seq.token_ids, other.token_ids, len(other.token_ids) - 1,
                                       block)
                if seq.num_cached < common < stop:
                    stop = common
        for other in self._holders():
            if other is seq:
                continue
            common = _whole_blocks(seq.token_ids, other.token_ids, other.num_cached, block)
            if common < KEPT_PREFIX_BLOCKS * block:
                continue
            if common == seq.num_cached:  # it stands there now
                self.states.keep(seq.seq_id, seq.token_ids[:common])
            elif (seq.num_cached < common < stop
                  and self.states.kept_prefix(seq.token_ids, common) < common):
                stop = common
        return stop

    def _share_state(self, source: int, seq: Sequence, shared: int) -> None:
        """`seq`'s recurrent state as of the `shared` tokens it starts with from `source`'s
        blocks, kept for later ones too where that is a prefix worth keeping."""
        prefix = seq.token_ids[:shared]
        self.states.share(source, seq.seq_id, prefix)
        if shared >= KEPT_PREFIX_BLOCKS * self.blocks.block_size:
            self.states.keep(seq.seq_id, prefix)

    def _holders(self):
        """The sequences holding KV."""
        return (other for other in (*self.running, *self.waiting, *self.idle.values())
                if other.num_cached)

    def _reserve(self, seq: Sequence, num_tokens: int, preempted: list[Sequence]) -> bool:
        """Blocks for `num_tokens` of `seq`, preempting others as needed. False when `seq`
        itself had to be preempted (it was the last admitted)."""
        while True:
            try:
                self.blocks.ensure(seq.seq_id, num_tokens)
                return True
            except KVCacheFull:
                alone = len(self.running) == 1 and self.running[0] is seq
                holders = any(s.num_cached for s in (*self.idle.values(), *self.waiting))
                victim = None if alone and not holders else self.preempt_one()
                if victim is None:
                    raise KVCacheFull(f"sequence {seq.seq_id} needs KV for {num_tokens} tokens, "
                                      f"more than the whole cache holds") from None
                preempted.append(victim)
                if victim is seq:
                    return False

    def _fits(self, seq: Sequence, shared: int) -> bool:
        """Whether `seq`'s next chunk, after the `shared` tokens it would start with, fits in
        free blocks plus those idle sequences alone hold, so admitting it does not just preempt
        someone running (or itself) straight away."""
        bs = self.blocks.block_size
        start = seq.num_cached + shared  # one of them is 0
        tokens = start + min(len(seq.token_ids) - start, self.config.max_step_tokens)
        needed = -(-tokens // bs) - (self.blocks.capacity_tokens(seq.seq_id) + shared) // bs
        reclaimable = sum(self.blocks.sole_blocks(s.seq_id) for s in self.idle.values())
        return needed <= self.blocks.num_free_blocks + reclaimable

    def _admit(self, seq: Sequence) -> None:
        self.running.append(seq)
        self._place[seq.seq_id] = "running"
        self._ran_for[seq.seq_id] = 0

    def _fit_ceiling(self, batch_ceiling: int) -> None:
        # A lowered ceiling sends the last admitted back to the front of the queue (KV kept).
        while len(self.running) > batch_ceiling:
            seq = self.running[-1]
            self._unlink(seq)
            self.waiting.appendleft(seq)
            self._place[seq.seq_id] = "waiting"

    def _rotate(self) -> None:
        if not self.waiting:
            return
        for seq in [s for s in self.running
                    if self._ran_for[s.seq_id] >= self.config.rotate_after_steps]:
            self._unlink(seq)
            self.waiting.append(seq)
            self._place[seq.seq_id] = "waiting"

    def _unlink(self, seq: Sequence) -> None:
        place = self._place.pop(seq.seq_id, None)
        if place == "running":
            self.running = [s for s in self.running if s is not seq]
        elif place == "waiting":
            self.waiting = deque(s for s in self.waiting if s is not seq)
        elif place == "idle":
            del self.idle[seq.seq_id]
        self._ran_for.pop(seq.seq_id, None)


def _whole_blocks(a: list[int], b: list[int], limit: int, block: int) -> int:
    """Tokens of the whole blocks `a` and `b` start with alike, `limit` tokens at most."""
    common = common_prefix(a, b, max(limit, 0))
    return common - common % block
