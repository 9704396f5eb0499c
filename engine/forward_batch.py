"""What one forward pass is asked to compute, and what it gives back.

Every lane in a step is just "these new tokens, starting at this position": a prefill chunk, a
decode token, or the last committed token followed by its drafts. The scheduler and the
speculation code build these; the model runner turns them into a packed or padded batch."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.sampling import greedy_tokens


@dataclass(slots=True)
class LaneInput:
    seq_id: int            # the lane's sequence in the paged KV cache
    token_ids: list[int]   # new query tokens this step
    start_pos: int         # position of token_ids[0]; KV for 0..start_pos-1 is already cached
    logits_rows: int       # trailing rows that need logits: 0 (mid-prefill), 1, or len(token_ids)
    # trailing tokens that are guesses a later pass may go back on (drafts, a timing pass's
    # tokens): recurrent layers keep their state from before them (engine/recurrent_state.py)
    guesses: int = 0
    # the state after the certain tokens is a checkpoint a later cut may go back to (a client's
    # turn's prompt's end)
    checkpoint: bool = False

    def __post_init__(self) -> None:
        if not self.token_ids:
            raise ValueError(f"seq {self.seq_id}: a lane needs at least one token")
        if self.start_pos < 0 or not 0 <= self.logits_rows <= len(self.token_ids) \
                or not 0 <= self.guesses <= len(self.token_ids):
            raise ValueError(f"seq {self.seq_id}: bad start_pos={self.start_pos}, "
                             f"logits_rows={self.logits_rows} or guesses={self.guesses} for "
                             f"{len(self.token_ids)} tokens")

    @property
    def end_pos(self) -> int:
        """Context length once this step's tokens are cached."""
        return self.start_pos + len(self.token_ids)

    @classmethod
    def make_dummy(cls, seq_id: int = 0, n: int = 3, start_pos: int = 0) -> "LaneInput":
        return cls(seq_id=seq_id, token_ids=[(seq_id * 7 + i) % 100 + 1 for i in range(n)],
                   start_pos=start_pos, logits_rows=n)


@dataclass(slots=True)
class ForwardOutput:
    logits: list[torch.Tensor]  # per lane: [logits_rows, vocab], float32
    pad: list[int] = field(default_factory=list)  # per lane: padded slots wasted (padded layout)
    rows: torch.Tensor | None = None  # every lane's logits rows in one tensor (None: not kept)

    def greedy(self) -> list[list[int]]:
        """Each lane's rows' highest-scoring tokens, from one argmax and one copy to the host
        over all the rows: on a GPU one wait a step, not one a lane. (On the 2-core CPU, where
        the argmax reads the logits cold either way, 16 chat lanes took 128 us against 148.)"""
        tokens = greedy_tokens(self.rows if self.rows is not None else torch.cat(self.logits))
        lanes, start = [], 0
        for logits in self.logits:
            lanes.append(tokens[start:start + logits.shape[0]])
            start += logits.shape[0]
        return lanes

    @classmethod
    def make_dummy(cls, rows: tuple[int, ...] = (1, 3), vocab: int = 16) -> "ForwardOutput":
        return cls(logits=[torch.zeros(r, vocab) for r in rows], pad=[0] * len(rows))
