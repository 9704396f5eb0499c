"""Verification references: greedy stories, random batches against naive per-lane loops, and a
statistical check that rejection sampling emits exactly the target distribution."""
import pytest
import torch

from hip_kernels import verify_greedy, verify_rejection


def packed(lanes_drafts, lanes_targets):
    cu = torch.tensor([0] + [len(d) for d in lanes_drafts], dtype=torch.int32).cumsum(0).int()
    drafts = torch.tensor([t for d in lanes_drafts for t in d], dtype=torch.int64)
    targets = torch.tensor([t for ts in lanes_targets for t in ts], dtype=torch.int64)
    return drafts, cu, targets


@pytest.mark.parametrize("drafts, targets, accepted, next_token", [
    ([5, 6, 7], [5, 6, 7, 8], 3, 8),   # perfect match: all accepted, bonus token
    ([5, 6, 7], [4, 6, 7, 8], 0, 4),   # first draft wrong: target's correction
    ([5, 6, 7], [5, 9, 7, 8], 1, 9),   # early mismatch; the later match does not count
    ([], [3], 0, 3),                   # no drafts: plain decode
])
def test_greedy_stories(drafts, targets, accepted, next_token):
    got = verify_greedy(*packed([drafts], [targets]))
    assert got[0].tolist() == [accepted] and got[1].tolist() == [next_token]


def naive_greedy(drafts, cu, targets):
    accepted, nxt = [], []
    for lane in range(len(cu) - 1):
        d = drafts[cu[lane]:cu[lane + 1]].tolist()
        t = targets[cu[lane] + lane: cu[lane + 1] + lane + 1].tolist()
        a = 0
        while a < len(d) and d[a] == t[a]:
            a += 1
        accepted.append(a)
        nxt.append(t[a])
    return accepted, nxt


@pytest.mark.parametrize("seed", range(5))
def test_greedy_matches_naive_loop(seed):
    gen = torch.Generator().manual_seed(seed)
    ks = torch.randint(0, 9, (1 + seed * 3,), generator=gen).tolist()
    # A tiny vocabulary makes long accepted runs common.
    targets = [torch.randint(0, 3, (k + 1,), generator=gen).tolist() for k in ks]
    drafts = [torch.randint(0, 3, (k,), generator=gen).tolist() for k in ks]
    args = packed(drafts, targets)
    accepted, nxt = verify_greedy(*args)
    assert (accepted.tolist(), nxt.tolist()) == naive_greedy(*args)


def naive_rejection(drafts, cu, q_probs, p_probs, u, v):
    accepted, nxt = [], []
    for lane in range(len(cu) - 1):
        first, k = int(cu[lane]), int(cu[lane + 1] - cu[lane])
        a = 0
        while a < k:
            x = int(drafts[first + a])
            q = float(q_probs[first + a, x]) if q_probs is not None else 1.0
            if not float(u[first + a]) * q < float(p_probs[first + lane + a, x]):
                break
            a += 1
        p = p_probs[first + lane + a]
        if a < k:
            q = q_probs[first + a] if q_probs is not None else torch.nn.functional.one_hot(drafts[first + a], p.numel())
            residual = (p - q).clamp(min=0)
            weights = residual if residual.sum() > 0 else p
        else:
            weights = p
        running, threshold, token = 0.0, float(v[lane]) * float(weights.sum()), None
        for t, w in enumerate(weights.tolist()):
            running += w
            if w > 0 and running > threshold:
                token = t
                break
        accepted.append(a)
        nxt.append(token)
    return accepted, nxt


def random_probs(gen, rows, vocab, sharp):
    return torch.softmax(torch.randn(rows, vocab, generator=gen, dtype=torch.float64) * sharp, -1).float()


@pytest.mark.parametrize("one_hot", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_rejection_matches_naive_loop(seed, one_hot):
    gen = torch.Generator().manual_seed(seed)
    ks = torch.randint(0, 9, (1 + 2 * seed,), generator=gen)
    cu = torch.zeros(len(ks) + 1, dtype=torch.int32)
    cu[1:] = ks.cumsum(0)
    total, vocab = int(cu[-1]), 11
    q_probs = None if one_hot else random_probs(gen, total, vocab, 2.0)
    p_probs = random_probs(gen, total + len(ks), vocab, 2.0)
    drafts = (torch.multinomial(q_probs, 1).view(-1) if q_probs is not None
              else torch.randint(0, vocab, (total,), generator=gen))
    u = torch.rand(total, generator=gen)
    v = torch.rand(len(ks), generator=gen)
    accepted, nxt = verify_rejection(drafts, cu, q_probs, p_probs, u, v)
    assert (accepted.tolist(), nxt.tolist()) == naive_rejection(drafts, cu, q_probs, p_probs, u, v)


@pytest.mark.parametrize("one_hot", [False, True])
def test_rejection_emits_the_target_distribution(one_hot):
    # Many lanes, each one draft from q over a 5-token vocabulary: the first token emitted
    # (the accepted draft, else the correction) must be distributed as p whatever q is.
    gen = torch.Generator().manual_seed(11)
    lanes, vocab = 40_000, 5
    p = torch.tensor([0.05, 0.4, 0.1, 0.25, 0.2])
    q = torch.tensor([0.3, 0.1, 0.3, 0.2, 0.1])
    drafts = torch.multinomial(q, lanes, replacement=True, generator=gen)
    if one_hot:
        drafts = torch.full((lanes,), 2, dtype=torch.int64)  # a prompt-lookup style fixed guess
    cu = torch.arange(lanes + 1, dtype=torch.int32)
    target = p.repeat(2 * lanes, 1)
    draft_probs = None if one_hot else q.repeat(lanes, 1)
    accepted, nxt = verify_rejection(drafts, cu, draft_probs, target, torch.rand(lanes, generator=gen),
                                     torch.rand(lanes, generator=gen))
    first = torch.where(accepted == 1, drafts, nxt)
    freq = torch.bincount(first, minlength=vocab).double() / lanes
    sigma = (p.double() * (1 - p.double()) / lanes).sqrt()
    assert ((freq - p.double()).abs() <= 5 * sigma).all(), (freq, p)


def test_rejection_with_equal_distributions_accepts_everything():
    p = torch.tensor([[0.2, 0.8]] * 4)
    drafts = torch.tensor([1, 0, 1])
    cu = torch.tensor([0, 3], dtype=torch.int32)
    accepted, _ = verify_rejection(drafts, cu, p[:3].clone(), p, torch.full((3,), 0.999), torch.zeros(1))
    assert accepted.tolist() == [3]
