"""Verification told as stories (greedy) and checked statistically (rejection sampling)."""
import torch

from engine.spec.verification import Verdict, verify_greedy, verify_sampled

VOCAB = 8


def test_greedy_perfect_match_takes_every_draft_and_the_bonus():
    verdict = verify_greedy([3, 1, 4], [3, 1, 4, 6])
    assert verdict == Verdict(accepted=3, tokens=[3, 1, 4, 6])
    assert verdict.bonus == 6


def test_greedy_early_mismatch_keeps_the_prefix_and_corrects():
    verdict = verify_greedy([3, 1, 4], [3, 2, 4, 6])
    assert verdict == Verdict(accepted=1, tokens=[3, 2])


def test_greedy_first_draft_wrong_commits_only_the_target_token():
    assert verify_greedy([5, 1], [2, 1, 0]) == Verdict(accepted=0, tokens=[2])


def test_greedy_empty_draft_is_plain_decoding():
    assert verify_greedy([], [7]) == Verdict(accepted=0, tokens=[7])


def _chi_square(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = probs * counts.sum()
    mask = expected > 0
    return float((((counts - expected) ** 2)[mask] / expected[mask]).sum())


def _first_token_counts(draft_probs, one_hot: bool, samples: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1234)
    draft_gen = torch.Generator().manual_seed(99)
    p = torch.tensor([[0.05, 0.30, 0.10, 0.25, 0.00, 0.20, 0.05, 0.05],
                      [0.125] * 8])  # [2, vocab]: first token's p, then the bonus row
    counts = torch.zeros(VOCAB)
    for _ in range(samples):
        if one_hot:
            token, q = 3, None  # prompt lookup always proposes 3
        else:
            token = torch.multinomial(draft_probs, 1, generator=draft_gen).item()
            q = draft_probs.unsqueeze(0)
        verdict = verify_sampled([token], p, q, gen)
        counts[verdict.tokens[0]] += 1
    return counts, p[0]


def test_rejection_sampling_reproduces_the_target_distribution_with_a_draft_model():
    q = torch.tensor([0.30, 0.05, 0.20, 0.05, 0.10, 0.10, 0.10, 0.10])
    counts, p = _first_token_counts(q, one_hot=False, samples=20000)
    # 6 degrees of freedom (7 tokens with p > 0); the 0.999 quantile is 22.5
    assert _chi_square(counts, p) < 22.5, counts
    assert counts[4] == 0  # a token the target never produces is never committed


def test_rejection_sampling_with_one_hot_lookup_drafts_reproduces_the_target():
    counts, p = _first_token_counts(None, one_hot=True, samples=20000)
    assert _chi_square(counts, p) < 22.5, counts


def test_rejection_sampling_accepts_a_draft_the_target_is_sure_of():
    p = torch.zeros(3, VOCAB)
    p[0, 2] = p[1, 5] = p[2, 1] = 1.0
    verdict = verify_sampled([2, 5], p, None, torch.Generator().manual_seed(0))
    assert verdict == Verdict(accepted=2, tokens=[2, 5, 1])
