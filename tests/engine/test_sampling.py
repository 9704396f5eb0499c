"""LaneSampler: greedy, seeded reproducibility per lane, and the top-k / top-p masks."""
from __future__ import annotations

import pytest
import torch

from engine.sampling import LaneSampler, SamplingParams, greedy_tokens
from engine.spec.verification import verify_sampled


def _logits(rows: int = 4, vocab: int = 50, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed)) * 3


def _draw(sampler: LaneSampler, logits: torch.Tensor) -> int:
    """A lane's next token as the engine draws it: verification of no drafts."""
    return verify_sampled([], sampler.probs(logits), None, sampler.generator).bonus


def test_greedy_tokens_are_each_rows_first_highest_score():
    logits = _logits(rows=6, vocab=500)
    assert greedy_tokens(logits) == logits.argmax(-1).tolist()
    assert greedy_tokens(torch.tensor([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]])) == [1, 0]  # ties
    assert greedy_tokens(torch.zeros(0, 7)) == []


def test_greedy_is_argmax_and_one_hot():
    logits = _logits()
    probs = LaneSampler(SamplingParams()).probs(logits)
    assert probs.dtype == torch.float32
    assert torch.equal(probs.argmax(-1), logits.argmax(-1)) and torch.equal(probs.sum(-1), torch.ones(4))
    assert int((probs > 0).sum()) == 4


def test_seeded_lane_reproducible_and_independent_of_batch_mates():
    params = SamplingParams(temperature=1.0, seed=7)
    logits = _logits(rows=1)
    alone = LaneSampler(params)
    tokens_alone = [_draw(alone, logits) for _ in range(30)]
    # Same lane again, now interleaved with another lane drawing from its own stream (and from
    # the global generator): its tokens must not move.
    lane, mate = LaneSampler(params), LaneSampler(SamplingParams(temperature=1.0, seed=8))
    tokens_mixed = []
    for _ in range(30):
        _draw(mate, _logits(rows=1, seed=1))
        torch.rand(5)
        tokens_mixed.append(_draw(lane, logits))
    assert tokens_mixed == tokens_alone
    other = LaneSampler(SamplingParams(temperature=1.0, seed=8))
    assert [_draw(other, logits) for _ in range(30)] != tokens_alone


def test_top_k_keeps_exactly_the_k_largest():
    logits = _logits()
    probs = LaneSampler(SamplingParams(temperature=0.7, top_k=5)).probs(logits)
    kept = probs > 0
    assert kept.sum(-1).tolist() == [5] * 4
    assert torch.equal(kept, torch.zeros_like(kept).scatter_(-1, logits.topk(5).indices, True))
    torch.testing.assert_close(probs.sum(-1), torch.ones(4))


def test_top_p_keeps_smallest_prefix_reaching_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    for top_p, kept in ((0.5, [1, 0, 0, 0]), (0.6, [1, 1, 0, 0]), (0.8, [1, 1, 0, 0]),
                        (0.81, [1, 1, 1, 0]), (1.0, [1, 1, 1, 1])):
        probs = LaneSampler(SamplingParams(temperature=1.0, top_p=top_p)).probs(logits)
        assert (probs[0] > 0).int().tolist() == kept, top_p
        torch.testing.assert_close(probs.sum(), torch.tensor(1.0))
    probs = LaneSampler(SamplingParams(temperature=1.0, top_p=0.79)).probs(logits)
    torch.testing.assert_close(probs[0, :2], torch.tensor([0.625, 0.375]))


def test_temperature_sharpens_and_sampling_follows_probs():
    logits = torch.tensor([[1.0, 0.0, -1.0]])
    hot = LaneSampler(SamplingParams(temperature=2.0)).probs(logits)
    cold = LaneSampler(SamplingParams(temperature=0.5)).probs(logits)
    assert cold[0, 0] > hot[0, 0]
    sampler = LaneSampler(SamplingParams(temperature=1.0, seed=3))
    draws = torch.tensor([_draw(sampler, logits) for _ in range(20000)])
    freq = torch.bincount(draws, minlength=3).float() / 20000
    torch.testing.assert_close(freq, logits.softmax(-1)[0], atol=0.015, rtol=0)


@pytest.mark.parametrize("bad, says", [
    (dict(temperature=-1), "temperature must be >= 0"),
    (dict(temperature=float("nan")), "temperature must be >= 0"),  # NaN passed `< 0` once
    (dict(top_k=-1), "top_k must be >= 0"), (dict(top_p=0.0), r"top_p must be in \(0, 1\]"),
    (dict(top_p=float("nan")), "top_p must be in")])
def test_bad_params_rejected(bad, says):
    with pytest.raises(ValueError, match=says):
        SamplingParams(**bad)
