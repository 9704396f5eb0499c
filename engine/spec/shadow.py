"""Shadow checks: free evidence of acceptance from predictions that were never sent.

A drafter whose proposals cost nothing (prompt lookup) offers drafts every step whether or not
the policy sends them. For each lane the engine keeps the offered token just after the ones it
sent, its prediction of the token the lane emits after its drafts. If every sent draft is
accepted (a lane that sent none included), the lane's next token, the bonus, lands exactly
there, and comparing the two is the verdict that draft would have had (greedy: the argmax;
sampling with a one-hot draft: accepted with probability p(x), the chance that x is sampled).
So a lane the plan parks keeps being measured, one token a step, without spending a row of the
forward pass, and the statistics know whether a lane is copying right now."""
from __future__ import annotations


class ShadowChecks:
    """Per lane, the offered token after the sent drafts, until that lane's verdict."""

    def __init__(self) -> None:
        self._next: dict[int, int | None] = {}  # seq_id -> predicted token (None: none offered)

    def watch(self, seq_id: int, offered: list[int], sent: int) -> None:
        self._next[seq_id] = offered[sent] if len(offered) > sent else None

    def check(self, seq_id: int, sent: int, accepted: int, bonus: int) -> bool | None:
        """Whether the watched prediction was the bonus; None when nothing was watched, nothing
        was offered, or a sent draft was rejected (the bonus then replaced that draft)."""
        predicted = self._next.pop(seq_id, None)
        if predicted is None or accepted < sent:
            return None
        return predicted == bonus

    def forget(self, seq_id: int) -> None:
        self._next.pop(seq_id, None)
