"""Shadow checks: free evidence of acceptance for lanes that did not draft.

A drafter whose proposals cost nothing (prompt lookup) offers drafts every step whether or not
the policy sends them. For a lane that drafted nothing, the engine keeps what the drafter offered
and compares it with the tokens the lane then emits, one step at a time: a draft the target would
have accepted is exactly a token the lane goes on to emit (greedy: the argmax; sampling with a
one-hot draft: accepted with probability p(x), the same chance that x is sampled). So the counts
are the acceptance those drafts would have had, without spending a row of the forward pass on
them, and a lane the plan parks keeps being measured and can come back."""
from __future__ import annotations

SHADOW_MAX = 4  # tokens watched per check: short checks resolve within a few steps


class ShadowChecks:
    """At most one pending check per lane: the offered tokens and how many have matched so far."""

    def __init__(self, max_tokens: int = SHADOW_MAX) -> None:
        if max_tokens < 1:
            raise ValueError(f"shadow checks need at least one token, got {max_tokens}")
        self.max_tokens = max_tokens
        self._pending: dict[int, tuple[list[int], int]] = {}  # seq_id -> (offered, matched)

    def watch(self, seq_id: int, offered: list[int]) -> None:
        """Start checking what was offered to an idle lane (ignored while a check is pending)."""
        if offered and seq_id not in self._pending:
            self._pending[seq_id] = (list(offered[:self.max_tokens]), 0)

    def observe(self, seq_id: int, emitted: list[int]) -> tuple[int, int] | None:
        """Feed the tokens the lane just committed; returns (k, accepted) once the check is
        decided (a mismatch, or every offered token matched), else None."""
        pending = self._pending.get(seq_id)
        if pending is None:
            return None
        offered, matched = pending
        for token in emitted:
            if token != offered[matched]:
                del self._pending[seq_id]
                return len(offered), matched
            matched += 1
            if matched == len(offered):
                del self._pending[seq_id]
                return len(offered), matched
        self._pending[seq_id] = (offered, matched)
        return None

    def forget(self, seq_id: int) -> None:
        self._pending.pop(seq_id, None)
