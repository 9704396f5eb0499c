"""What recurrent layers (gated DeltaNet, engine/gated_delta.py) keep of each sequence between
steps: its state as of its last certain token, and a ring of its newest rows (a row: what the
layer's convolution and its fold need of a position).

A paged cache rolls a lane back by forgetting positions; a state that sums all of them cannot
be. So a pass's rows are certain (fed tokens) or guesses (drafts, `LaneInput.guesses`): the
state is kept after the certain ones, and the next pass folds in, from the ring, the guesses
its lane has since accepted. The ring holds the last conv_kernel - 1 + MAX_GUESSES positions,
enough for both. Hence what a sequence of such a model can do: go on from any position between
its last certain token and the end of its last pass (`reach`), or start again from its first;
it can fork there too, and so another sequence shares its prompt's blocks only where its state
stands at their end (swarm/scheduler.py), or from a copy of the state kept there for those that
come later (`share`, `kept_prefix`: a few prompt prefixes, the least recently used let go). A
sequence cut back past its last certain token starts again, or from its checkpoint where it has
one: an API client's conversation keeps its state as of each turn's prompt's end
(`LaneInput.checkpoint`), where the next turn goes on (its template may write the answer back
otherwise), so that a turn does not feed the whole conversation again.

Bookkeeping in plain Python beside the tensors, as the block manager's: per slot the sequence,
its certain positions and its written ones. A slot whose sequence the block manager no longer
holds is freed at the next step; a pass's lanes are moved to the first slots, so that its layers
read and write their states as one view."""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch
from torch import Tensor

from engine.config import ModelConfig

# most guessed rows of a pass the ring keeps (Controls.k's ceiling): past them a lane cannot go
# on from its guesses (calibration's passes of up to 128 tokens go back to their first)
MAX_GUESSES = 64
# prompt prefixes whose states are kept for sequences that start with them later (a swarm's
# system prompts, an agent framework's tools), each as much memory as a sequence's states
MAX_PREFIXES = 8


@dataclass(slots=True)
class RecurrentPlan:
    """Where the recurrent layers read and write one step's rows; built once per step by
    RecurrentStates.plan, shared by every such layer. The pass's lanes hold slots 0 to lanes - 1
    and are listed here in slot order. A lane's rows run as columns: the context its
    convolution reads (conv_kernel - 1 positions) and the rows it folds in, from the ring,
    right-aligned at column F (the most any lane folds in), then its pass's rows."""
    lanes: int             # the pass's lanes: their states are slots 0 to lanes - 1
    before: Tensor         # [lanes, F + conv_kernel - 1] int64 ring rows (the zero row: none)
    rows: Tensor           # [lanes, width] int64 the pass's packed rows (n, a zero row: none)
    certain_mask: Tensor   # [lanes, F + most certain rows] bool: rows folded in, then certain
    guess_mask: Tensor | None  # [lanes, width] bool: the pass's guesses; None: no lane has any
    out_lane: Tensor       # [n] int64 each packed row's lane (its slot)
    out_row: Tensor        # [n] int64 and its index among the lane's pass rows
    ring_to: Tensor        # [written] int64 ring rows the pass's rows go to
    ring_from: Tensor      # [written] int64 and the packed rows they are


class RecurrentStates:
    def __init__(self, config: ModelConfig, row_width: int, dtype: torch.dtype, device) -> None:
        c = config
        self.span = c.conv_kernel
        self.ring = c.conv_kernel - 1 + MAX_GUESSES
        self.dtype, self.device = dtype, device
        self._layers = len(c.delta_layers)
        self._state_shape = (c.delta_value_heads, c.delta_key_dim, c.delta_value_dim)
        self._row_width = row_width
        self.bytes_per_sequence = self.bytes_for(config, row_width, dtype)
        self.states = self.rows = torch.empty(0)
        self._grow(0)
        self._slot: dict[int, int] = {}      # seq_id -> slot
        self._certain: dict[int, int] = {}   # seq_id -> positions the state holds
        self._written: dict[int, int] = {}   # seq_id -> positions the ring's rows reach
        self._free: list[int] = []
        self._peak = 0  # the most states held at once
        # seq_id -> (its states and ring as of a checkpoint, the checkpoint's position)
        self._checkpoints: dict[int, tuple[Tensor, Tensor, int]] = {}
        # a prompt prefix's tokens -> the states and ring as of its end, least recently used first
        self._prefixes: OrderedDict[tuple[int, ...], tuple[Tensor, Tensor]] = OrderedDict()

    @property
    def capacity(self) -> int:
        return self.states.shape[1]

    @staticmethod
    def bytes_for(config: ModelConfig, row_width: int, dtype: torch.dtype) -> int:
        """What a sequence holds here: its states (fp32) and its ring, every recurrent
        layer's."""
        c = config
        ring = c.conv_kernel - 1 + MAX_GUESSES
        return len(c.delta_layers) * (4 * c.delta_value_heads * c.delta_key_dim
                                      * c.delta_value_dim + ring * row_width * dtype.itemsize)

    @property
    def num_bytes(self) -> int:
        return (self.capacity + len(self._checkpoints) + len(self._prefixes)) \
            * self.bytes_per_sequence

    @property
    def held_bytes(self) -> int:
        return self._held_count * self.bytes_per_sequence

    @property
    def _held_count(self) -> int:
        """States held: the sequences', their checkpoints' and the kept prefixes'."""
        return len(self._slot) + len(self._checkpoints) + len(self._prefixes)

    @property
    def peak_bytes(self) -> int:
        return self._peak * self.bytes_per_sequence

    def reach(self, seq_id: int) -> range:
        """The positions `seq_id` can go on from (a pass may start at): its first, or between its
        last certain token and the end of its last pass."""
        if seq_id not in self._slot:
            return range(0, 1)
        return range(self._certain[seq_id], self._written[seq_id] + 1)

    def plan(self, lanes, cu_q_lens: list[int], held) -> RecurrentPlan:
        """The plan of a pass over `lanes` (LaneInputs, packed rows from `cu_q_lens`); `held`:
        whether the block manager holds a sequence (the slots of the others are freed).
        ValueError where a lane starts where its state cannot go on from (`reach`)."""
        for seq_id in [s for s in self._slot if not held(s)]:
            self.release(seq_id)
        fold, fresh = [], []
        for lane in lanes:
            if lane.start_pos == 0:
                self._slot_of(lane.seq_id)
                fresh.append(lane.seq_id)
                self._certain[lane.seq_id] = self._written[lane.seq_id] = 0
            elif lane.start_pos not in self.reach(lane.seq_id):
                raise ValueError(
                    f"sequence {lane.seq_id} goes on from position {lane.start_pos}, but its "
                    f"recurrent layers' state can go on only from "
                    f"{_positions(self.reach(lane.seq_id))}: such a sequence is fed again from "
                    f"its first token")
            fold.append(lane.start_pos - self._certain[lane.seq_id] if lane.start_pos else 0)
        self._to_front([lane.seq_id for lane in lanes])
        if fresh:
            self.states[:, [self._slot[seq_id] for seq_id in fresh]] = 0
        return self._layout(lanes, cu_q_lens, [self._slot[lane.seq_id] for lane in lanes], fold)

    def commit(self, lanes) -> None:
        """After a pass over `lanes` went through: each state holds its certain rows (kept as a
        checkpoint too where the lane asks)."""
        for lane in lanes:
            self._certain[lane.seq_id] = lane.end_pos - lane.guesses
            self._written[lane.seq_id] = _kept_end(lane)
            if lane.checkpoint:
                self._checkpoints[lane.seq_id] = (*self._copy_of(lane.seq_id),
                                                  self._certain[lane.seq_id])
                self._peak = max(self._peak, self._held_count)

    def rewind(self, seq_id: int, num_tokens: int) -> int:
        """`seq_id` back at its checkpoint, where that is at most `num_tokens` in: the positions it
        goes on from (0 where it has no such checkpoint: it is fed again from its first)."""
        checkpoint = self._checkpoints.get(seq_id)
        if checkpoint is None or checkpoint[2] > num_tokens or seq_id not in self._slot:
            self.release(seq_id)
            return 0
        states, rows, position = checkpoint
        self._copy_into(seq_id, states, rows)
        # (the ring's rows past the checkpoint were a pass's guesses: none can be folded in)
        self._certain[seq_id] = self._written[seq_id] = position
        return position

    def lose(self, lanes) -> None:
        """After a pass over `lanes` failed part way: their states are of no position."""
        for lane in lanes:
            self.release(lane.seq_id)

    # (the tensors may be made in a forward pass, as inference tensors: written in one alone)
    @torch.inference_mode()
    def start(self, seq_id: int, position: int) -> None:
        """Let `seq_id` go on from `position` with an empty state, as if its context were
        blank (benchmarks that time passes at a context they never fed)."""
        slot = self._slot_of(seq_id)  # (first: a new slot may grow the tensors)
        self.states[:, slot] = 0
        self._certain[seq_id] = self._written[seq_id] = position

    @torch.inference_mode()
    def fork(self, source_id: int, target_id: int, num_tokens: int) -> None:
        """Give `target_id` a copy of `source_id`'s state and rows, to go on from `num_tokens`."""
        if num_tokens not in self.reach(source_id) or source_id not in self._slot:
            raise ValueError(f"sequence {source_id} cannot be forked at {num_tokens}: its "
                             f"recurrent layers' state can go on only from "
                             f"{_positions(self.reach(source_id))}")
        self._copy_into(target_id, *self._held(self._slot[source_id]))
        self._certain[target_id] = self._certain[source_id]
        self._written[target_id] = self._written[source_id]

    def share(self, source_id: int, target_id: int, prefix: list[int]) -> None:
        """Let `target_id` go on from the end of `prefix`, the tokens it starts with alike with
        `source_id`: from a copy of the source's state where that stands there, else from the
        state kept for `prefix` (`keep`)."""
        n, key = len(prefix), tuple(prefix)
        if n in self.reach(source_id):
            self.fork(source_id, target_id, n)
        elif key in self._prefixes:
            self._prefixes.move_to_end(key)
            self._copy_into(target_id, *self._prefixes[key])
            self._certain[target_id] = self._written[target_id] = n
        else:
            raise ValueError(f"sequence {target_id} cannot start from sequence {source_id}'s "
                             f"first {n} tokens: no state stands there")

    def keep(self, seq_id: int, prefix: list[int]) -> None:
        """Keep `seq_id`'s state as of the end of `prefix`, its first tokens, where it stands
        there, for sequences that start with them later (`share`)."""
        key = tuple(prefix)
        if key in self._prefixes or self._certain.get(seq_id) != len(prefix):
            return
        self._prefixes[key] = self._copy_of(seq_id)
        if len(self._prefixes) > MAX_PREFIXES:
            self._prefixes.popitem(last=False)
        self._peak = max(self._peak, self._held_count)

    def kept_prefix(self, tokens: list[int], limit: int) -> int:
        """The longest prefix of `tokens`, `limit` tokens at most, whose state is kept (0:
        none)."""
        return max((len(key) for key in self._prefixes
                    if len(key) <= limit and tuple(tokens[:len(key)]) == key), default=0)

    def release(self, seq_id: int) -> None:
        self._checkpoints.pop(seq_id, None)
        slot = self._slot.pop(seq_id, None)
        if slot is not None:
            self._free.append(slot)
            del self._certain[seq_id], self._written[seq_id]

    def _slot_of(self, seq_id: int) -> int:
        """`seq_id`'s slot, a free one given it where it has none (the slots grow as needed)."""
        if seq_id in self._slot:
            return self._slot[seq_id]
        if not self._free:
            old = self.capacity
            self._grow(max(4, 2 * old))
            self._free = list(range(self.capacity - 1, old - 1, -1))
        slot = self._slot[seq_id] = self._free.pop()
        self._certain[seq_id] = self._written[seq_id] = 0
        self._peak = max(self._peak, self._held_count)
        return slot

    def _copy_of(self, seq_id: int) -> tuple[Tensor, Tensor]:
        """Copies of `seq_id`'s states and ring rows (a checkpoint, a kept prefix)."""
        states, rows = self._held(self._slot[seq_id])
        return states.clone(), rows.clone()

    # (the tensors may be made in a forward pass, as inference tensors: written in one alone)
    @torch.inference_mode()
    def _copy_into(self, seq_id: int, states: Tensor, rows: Tensor) -> None:
        """`seq_id`'s slot (a new one where it has none) holding a copy of `states` and `rows`."""
        # (a new slot may grow the tensors; views of the old ones, as a fork's source, still
        # hold their values)
        slot = self._slot_of(seq_id)
        for held, copied in zip(self._held(slot), (states, rows)):
            held.copy_(copied)

    def _held(self, slot: int) -> tuple[Tensor, Tensor]:
        """A slot's states and ring rows, every layer's (views)."""
        return self.states[:, slot], self.rows[:, slot * self.ring:(slot + 1) * self.ring]

    def _to_front(self, seq_ids: list[int]) -> None:
        """Give the pass's sequences slots 0 to len(seq_ids) - 1, trading slots with the
        sequences (or free slots) there: its layers then read and write the states in place,
        as one view, where gathering them and scattering them back took a third of a DeltaNet
        layer's time at 8 lanes. A batch that keeps its lanes moves nothing."""
        front = len(seq_ids)
        movers = [seq_id for seq_id in seq_ids if self._slot[seq_id] >= front]
        if not movers:
            return
        taken = {self._slot[seq_id] for seq_id in seq_ids}
        owners = {slot: seq_id for seq_id, slot in self._slot.items()}
        for seq_id, spot in zip(movers, (i for i in range(front) if i not in taken)):
            old = self._slot[seq_id]
            for at_old, at_spot in zip(self._held(old), self._held(spot)):
                moved = at_old.clone()
                at_old.copy_(at_spot)
                at_spot.copy_(moved)
            self._slot[seq_id] = spot
            if spot in owners:
                self._slot[owners[spot]] = old
            else:
                self._free[self._free.index(spot)] = old

    def _grow(self, capacity: int) -> None:
        """Room for `capacity` sequences, what is held kept (the ring's zero row stays last)."""
        old = self.capacity if self.states.dim() > 1 else 0
        states = torch.zeros((self._layers, capacity, *self._state_shape), dtype=torch.float32,
                             device=self.device)
        rows = torch.zeros((self._layers, capacity * self.ring + 1, self._row_width),
                           dtype=self.dtype, device=self.device)
        if old:
            states[:, :old] = self.states
            rows[:, :old * self.ring] = self.rows[:, :old * self.ring]
        self.states, self.rows = states, rows

    def _layout(self, lanes, cu_q_lens: list[int], slots: list[int], fold: list[int]
                ) -> RecurrentPlan:
        ring, back, zero = self.ring, self.span - 1, self.capacity * self.ring
        reach = max(fold)
        q_lens = [len(lane.token_ids) for lane in lanes]
        width = max(q_lens)
        certain = [n - lane.guesses for lane, n in zip(lanes, q_lens)]
        columns = reach + max(certain)  # of the certain rows' mask
        before, rows, certain_mask, guess_mask = [], [], [], []
        ring_to, ring_from, out_lane, out_row = [], [], [], []
        for i in sorted(range(len(lanes)), key=slots.__getitem__):  # in slot order
            lane, slot, f, n, c = lanes[i], slots[i], fold[i], q_lens[i], certain[i]
            s, row0 = lane.start_pos, cu_q_lens[i]
            # the ring's positions s - f - back .. s - 1 (none before the first), left-padded
            before.append([zero] * (reach - f) + [slot * ring + p % ring if p >= 0 else zero
                                                  for p in range(s - f - back, s)])
            rows.append([row0 + j for j in range(n)] + [cu_q_lens[-1]] * (width - n))
            certain_mask.append([reach - f <= col < reach + c for col in range(columns)])
            guess_mask.append([c <= j < n for j in range(width)])
            # the newest positions the lane can go on from alone fit the ring
            stop = _kept_end(lane) - s
            kept = range(max(0, stop - ring), stop)
            ring_to += [slot * ring + (s + j) % ring for j in kept]
            ring_from += [row0 + j for j in kept]
        for i, slot in enumerate(slots):  # in row order
            span = cu_q_lens[i + 1] - cu_q_lens[i]  # padded: its padding rows read any column
            out_lane += [slot] * span
            out_row += [min(j, width - 1) for j in range(span)]

        def tensor(values, dtype=torch.int64) -> Tensor:
            return torch.tensor(values, dtype=dtype, device=self.device)

        return RecurrentPlan(
            lanes=len(lanes), before=tensor(before), rows=tensor(rows),
            certain_mask=tensor(certain_mask, torch.bool),
            guess_mask=(tensor(guess_mask, torch.bool) if any(lane.guesses for lane in lanes)
                        else None),
            out_lane=tensor(out_lane), out_row=tensor(out_row),
            ring_to=tensor(ring_to), ring_from=tensor(ring_from))


def _kept_end(lane) -> int:
    """Where the rows a lane's pass leaves in the ring end: its last, or MAX_GUESSES past its
    last certain one (with the conv_kernel - 1 before that one, as many as the ring holds)."""
    return min(lane.end_pos, lane.end_pos - lane.guesses + MAX_GUESSES)


def _positions(reach: range) -> str:
    return (f"position {reach.start}" if len(reach) == 1 else
            f"positions {reach.start} to {reach.stop - 1}")
