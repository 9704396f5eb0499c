"""Prompt-lookup drafting: agents re-emit what they read, so the lane's own context predicts it.

Match the lane's last n tokens (several n, longest first) at an earlier place in its context and
propose what followed there. Each sequence keeps an incremental n-gram index (n-gram -> where its
most recent earlier occurrence ended), extended only by the tokens committed since the last
call, so a proposal costs O(max_n) dictionary work however long the context grows."""
from __future__ import annotations

from dataclasses import dataclass, field

from engine.sequence import Sequence
from engine.spec.drafters import Draft


@dataclass(slots=True)
class NgramIndex:
    """n-gram -> end position (exclusive) of its latest occurrence that is not the context's tail."""

    ngram_sizes: tuple[int, ...]
    ends: dict[tuple[int, ...], int] = field(default_factory=dict)
    indexed_upto: int = 0  # end positions < this are in `ends`

    def extend(self, tokens: list[int]) -> None:
        # The n-gram ending at len(tokens) is the query itself; index it only once more follows.
        for end in range(max(self.indexed_upto, 1), len(tokens)):
            for n in self.ngram_sizes:
                if end >= n:
                    self.ends[tuple(tokens[end - n:end])] = end
        self.indexed_upto = max(self.indexed_upto, len(tokens))

    def continuation(self, tokens: list[int], limit: int) -> tuple[list[int], int]:
        """What followed the most recent earlier occurrence of the longest matching suffix, and
        that suffix's length (0: none matched)."""
        for n in self.ngram_sizes:  # longest first
            if len(tokens) <= n:
                continue
            end = self.ends.get(tuple(tokens[-n:]))
            if end is not None:
                return tokens[end:end + limit], n
        return [], 0


class PromptLookupDrafter:
    """Drafts from each lane's own context; no model, so its cost is zero."""

    name = "lookup"
    free = True

    def __init__(self, ngram_sizes: tuple[int, ...] = (4, 3, 2), max_k: int = 64) -> None:
        if not ngram_sizes or min(ngram_sizes) < 1:
            raise ValueError(f"ngram sizes must be >= 1, got {ngram_sizes}")
        self.ngram_sizes = tuple(sorted(set(ngram_sizes), reverse=True))
        self.max_k = max_k
        self._indexes: dict[int, NgramIndex] = {}
        self._proposals: dict[int, Draft] = {}  # seq_id -> proposal made by available()

    def _index(self, seq: Sequence) -> NgramIndex:
        index = self._indexes.get(seq.seq_id)
        if index is None or index.indexed_upto > len(seq.token_ids):  # context was rewritten
            index = self._indexes[seq.seq_id] = NgramIndex(self.ngram_sizes)
        index.extend(seq.token_ids)
        return index

    def available(self, seq: Sequence, cap: int) -> int:
        tokens, match = self._index(seq).continuation(seq.token_ids, min(cap, self.max_k))
        self._proposals[seq.seq_id] = Draft(tokens, match=match)
        return len(tokens)

    def propose(self, seqs: list[Sequence], ks: list[int]) -> list[Draft]:
        drafts = []
        for seq, k in zip(seqs, ks):
            proposal = self._proposals.pop(seq.seq_id, None)
            if proposal is None:
                self.available(seq, k)
                proposal = self._proposals.pop(seq.seq_id)
            drafts.append(Draft(proposal.tokens[:k], match=proposal.match))
        return drafts

    def cost_ms(self, ks: list[int]) -> float:
        return 0.0

    def commit(self, seq: Sequence, drafted: int, accepted: int) -> None:
        """Nothing to do: the index catches up with committed tokens on the next call."""

    def release(self, seq_id: int) -> None:
        self._indexes.pop(seq_id, None)
        self._proposals.pop(seq_id, None)
