"""LaneSampler: greedy, seeded reproducibility per lane, the top-k / top-p masks, and the logit bias
and penalties that adjust a lane's logits row by row."""
from __future__ import annotations

import pytest
import torch

from engine.sampling import (LaneSampler, SamplingParams, adjusted_logits, greedy_tokens,
                             token_logprobs)
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
    (dict(top_p=float("nan")), "top_p must be in"),
    (dict(presence_penalty=2.5), r"presence_penalty must be in \[-2, 2\]"),
    (dict(frequency_penalty=-3), r"frequency_penalty must be in \[-2, 2\]"),
    (dict(repetition_penalty=0), "repetition_penalty must be > 0")])
def test_bad_params_rejected(bad, says):
    with pytest.raises(ValueError, match=says):
        SamplingParams(**bad)


def _adjusted_row(logits: torch.Tensor, params: SamplingParams, prompt: list[int],
                  answer: list[int]) -> torch.Tensor:
    """One row as the definitions read, token by token: the bias added, then a token in the
    prompt or answer divided by the repetition penalty (multiplied where negative), then the
    frequency penalty for each time the answer wrote it and the presence penalty once."""
    row = logits.clone()
    for token, bias in params.logit_bias:
        row[token] += bias
    for token in range(len(row)):
        if token in prompt or token in answer:
            penalty = params.repetition_penalty
            row[token] = row[token] / penalty if row[token] > 0 else row[token] * penalty
        row[token] -= params.frequency_penalty * answer.count(token)
        row[token] -= params.presence_penalty * (token in answer)
    return row


@pytest.mark.parametrize("params", [
    SamplingParams(presence_penalty=0.7, frequency_penalty=0.4),
    SamplingParams(repetition_penalty=1.3, logit_bias=((3, 5.0), (7, -100.0))),
    SamplingParams(presence_penalty=-1.5, frequency_penalty=2.0, repetition_penalty=0.8),
])
def test_each_row_is_adjusted_for_the_answer_and_the_drafts_before_it(params):
    logits = _logits(rows=4, vocab=12)
    prompt, answer, draft = [1, 2, 9], [2, 5, 5], [5, 6, 1]
    adjusted = adjusted_logits(logits, params, prompt + answer, len(prompt), draft)
    for j in range(4):
        torch.testing.assert_close(adjusted[j], _adjusted_row(logits[j], params, prompt,
                                                              answer + draft[:j]))
    assert not torch.equal(adjusted, logits)  # a copy, adjusted; the step's logits as they were
    assert torch.equal(logits, _logits(rows=4, vocab=12))
    assert params.adjusts and not SamplingParams(temperature=0.5).adjusts


def test_each_token_comes_with_its_log_probability_and_its_rows_likeliest():
    logits = _logits(rows=3, vocab=10)
    entries = token_logprobs(logits, [4, 7], top=3)  # a third row (an unused draft's) is left
    logprobs = logits.log_softmax(-1)
    assert [token for token, _, _ in entries] == [4, 7]
    for row, (token, logprob, alternatives) in enumerate(entries):
        assert logprob == pytest.approx(logprobs[row, token].item())
        best = logprobs[row].topk(3)
        assert alternatives == [(i, pytest.approx(v)) for i, v in zip(best.indices.tolist(),
                                                                       best.values.tolist())]
    assert token_logprobs(logits, [1], top=0) == [(1, pytest.approx(logprobs[0, 1].item()), [])]
