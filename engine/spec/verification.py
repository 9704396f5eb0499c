"""Verifying a lane's drafts against the target model, losslessly (DESIGN.md §3).

Vocabulary, defined once here and used everywhere else:
- a draft token is **accepted** when verification keeps it: the target would have produced it
  (greedy) or the rejection test passed (sampling);
- the first draft that is not kept is **rejected**, and every draft after it is discarded unseen;
- the **bonus** token is the target's own token after the last accepted draft: the correction at
  the rejected position, or the free extra token when every draft was accepted.
A verified lane therefore always commits `accepted + 1` tokens, and with no drafts it is plain
decoding (the bonus is the ordinary next token).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(slots=True)
class Verdict:
    accepted: int        # drafts accepted, 0..len(draft)
    tokens: list[int]    # committed tokens: the accepted drafts, then the bonus

    def __post_init__(self) -> None:
        if len(self.tokens) != self.accepted + 1:
            raise ValueError(f"a verdict commits accepted + 1 tokens, got {self.tokens} "
                             f"for accepted={self.accepted}")

    @property
    def bonus(self) -> int:
        return self.tokens[-1]

    @classmethod
    def make_dummy(cls, accepted: int = 2) -> "Verdict":
        return cls(accepted=accepted, tokens=list(range(10, 11 + accepted)))


def verify_greedy(draft: list[int], target: list[int]) -> Verdict:
    """Accept drafts while each equals the target's argmax, then add the target's own token.
    `target[j]`: the target's greedy token after draft[:j] (sampling.greedy_tokens of its
    logits rows)."""
    assert len(target) == len(draft) + 1, (len(target), len(draft))
    accepted = 0
    while accepted < len(draft) and draft[accepted] == target[accepted]:
        accepted += 1
    return Verdict(accepted=accepted, tokens=draft[:accepted] + [target[accepted]])


def verify_sampled(draft: list[int], target_probs: torch.Tensor, draft_probs: torch.Tensor | None,
                   generator: torch.Generator) -> Verdict:
    """Standard speculative rejection sampling: the committed tokens are distributed exactly as
    if the target had sampled them one at a time.

    Draft j is accepted with probability min(1, p_j(x) / q_j(x)); on rejection the bonus is drawn
    from the normalised residual max(p_j - q_j, 0). `draft_probs=None` means each draft was
    proposed with certainty (prompt lookup, greedy draft models): q is one-hot, so acceptance is
    p_j(x) and the residual is p_j with x removed. All randomness comes from the lane's own
    generator, so the lane's output does not depend on who shares its batch.
    """
    k = len(draft)
    # target_probs: [k + 1, vocab]; draft_probs: [k, vocab] or None
    assert target_probs.dim() == 2 and target_probs.shape[0] == k + 1, (target_probs.shape, k)
    assert draft_probs is None or draft_probs.shape == (k, target_probs.shape[1])
    p = target_probs.double()
    for j, token in enumerate(draft):
        p_x = p[j, token].item()
        q_x = 1.0 if draft_probs is None else draft_probs[j, token].item()
        u = torch.rand((), generator=generator, dtype=torch.float64).item()
        if q_x > 0 and u * q_x < p_x:  # u < p/q without dividing by a tiny q
            continue
        if draft_probs is None:
            residual = p[j].clone()
            residual[token] = 0.0
        else:
            residual = (p[j] - draft_probs[j].double()).clamp_min(0.0)
        if residual.sum() <= 0:  # p == q exactly: rejection had probability 0; keep p
            residual = p[j]
        bonus = torch.multinomial(residual, 1, generator=generator).item()
        return Verdict(accepted=j, tokens=list(draft[:j]) + [bonus])
    bonus = torch.multinomial(p[k], 1, generator=generator).item()
    return Verdict(accepted=k, tokens=list(draft) + [bonus])
