"""The drafter interface every draft source follows, and choosing one by name.

A step asks the drafter how many drafts each decoding lane *could* get (`available`), lets the
policy pick k per lane within that, then asks for them (`propose`). After verification the
drafter hears what was kept (`commit`) so any state of its own follows the target's accepted
prefix. `cost_ms` is the drafter's own share of the step time, so policies can charge for it;
a drafter whose proposals cost nothing says so (`free`), and the engine then checks the drafts it
did not send against the output (spec/shadow.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from engine.sequence import Sequence


@dataclass(slots=True)
class Draft:
    tokens: list[int]
    probs: torch.Tensor | None = None  # [len(tokens), vocab] the draft distribution; None: one-hot
    match: int = 0  # context tokens the proposal was matched on (lookup's n-gram); 0: a model's

    def __post_init__(self) -> None:
        if self.probs is not None and self.probs.shape[0] != len(self.tokens):
            raise ValueError(f"draft probs rows {self.probs.shape[0]} != {len(self.tokens)} tokens")

    def cut(self, k: int) -> "Draft":
        """The first k drafts (this draft itself when it has no more)."""
        if len(self.tokens) <= k:
            return self
        return Draft(self.tokens[:k], None if self.probs is None else self.probs[:k], self.match)

    @classmethod
    def make_dummy(cls, n: int = 3) -> "Draft":
        return cls(tokens=list(range(20, 20 + n)))


class Drafter(Protocol):
    name: str
    free: bool  # proposing costs nothing (no model): unsent proposals are shadow-checked

    def available(self, seq: Sequence, cap: int) -> int:
        """How many drafts (<= cap) this lane can get now; 0 when the drafter has nothing."""

    def propose(self, seqs: list[Sequence], ks: list[int]) -> list[Draft]:
        """Up to ks[i] drafts continuing seqs[i].token_ids, for all lanes at once."""

    def cost_ms(self, ks: list[int]) -> float:
        """Expected wall time of proposing `ks` (zero for drafters without a model)."""

    def commit(self, seq: Sequence, drafted: int, accepted: int) -> None:
        """seq.token_ids now holds the verified tokens; `accepted` of `drafted` drafts were kept."""

    def release(self, seq_id: int) -> None:
        """Forget the sequence (it finished or was evicted)."""


DRAFTER_NAMES = ("lookup", "self")  # anything else is a path to a draft model


def make_drafter(name: str, target, num_blocks: int = 4096) -> Drafter:
    """`lookup`, `self` (the target's first layers) or a path/preset of a draft model that shares
    the target's tokenizer. `target` is the target's LoadedModel; a model drafter gets a KV cache
    of `num_blocks` blocks (size it like the target's: it holds the same contexts)."""
    from engine.spec.prompt_lookup import PromptLookupDrafter
    if name == "lookup":
        return PromptLookupDrafter()
    from engine.spec.draft_model import DraftModelDrafter
    if name == "self":
        return DraftModelDrafter.self_draft(target, num_blocks=num_blocks)
    return DraftModelDrafter.from_path(name, target, num_blocks=num_blocks)
