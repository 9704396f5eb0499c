"""Kernels against their references on a GPU: fresh random inputs each case, and the caching
allocator poisoned with NaN first, so a row a kernel forgets to write shows up. Skipped (with the
reason) where the kernels are not available."""
import math

import pytest
import torch

import hip_kernels
from hip_kernels import reference
from kernel_cases import assert_close_scaled, ragged_batch

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def kernels():
    if not hip_kernels.available():
        pytest.skip(f"kernels not available: {hip_kernels.why_unavailable()}")


def poison_allocator(mib: int = 256) -> None:
    # Freed blocks go back to torch's cache; the op's torch.empty outputs reuse them, NaN and all.
    junk = torch.full((mib * 2**18,), float("nan"), device="cuda")
    del junk


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("dtype, rel", [(torch.float32, 1e-4), (torch.float16, 5e-3), (torch.bfloat16, 2e-2)])
def test_paged_attention_matches_reference(seed, dtype, rel):
    gen = torch.Generator().manual_seed(1000 + seed)
    batch = ragged_batch(gen, lanes=1 + 3 * seed, max_q=9, max_ctx=(300, 3000)[seed % 2], num_kv_heads=(1, 2, 8)[seed % 3],
                         group=(1, 4, 2)[seed % 3], head_dim=(64, 128)[seed % 2], dtype=dtype, device="cuda")
    scale = 1 / math.sqrt(batch[0].shape[-1])
    poison_allocator()
    got = hip_kernels.paged_attention(*batch, scale)
    torch.cuda.synchronize()
    assert torch.isfinite(got).all()
    assert_close_scaled(got, reference.paged_attention(*batch, scale), rel)


@pytest.mark.parametrize("head_dim", [64, 36])
@pytest.mark.parametrize("dtype, rel", [(torch.float32, 1e-4), (torch.bfloat16, 2e-2)])
def test_paged_attention_with_an_empty_lane_and_prompt_chunks(dtype, rel, head_dim):
    """A lane with no query row among prompt chunks; and a head_dim that is no multiple of 4."""
    batch = ragged_batch(torch.Generator().manual_seed(12), lanes=8, min_q=0, max_q=70, max_ctx=700,
                         num_kv_heads=2, group=4, head_dim=head_dim, dtype=dtype, device="cuda")
    q_lens = (batch[4][1:] - batch[4][:-1]).tolist()
    assert 0 in q_lens and max(q_lens) >= 40
    scale = 1 / math.sqrt(head_dim)
    poison_allocator()
    got = hip_kernels.paged_attention(*batch, scale)
    torch.cuda.synchronize()
    assert torch.isfinite(got).all()
    assert_close_scaled(got, reference.paged_attention(*batch, scale), rel)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_write_kv_matches_reference(dtype):
    gen = torch.Generator().manual_seed(5)
    k_cache = torch.randn(64, 16, 4, 128, generator=gen).to(dtype).cuda()
    v_cache = torch.randn_like(k_cache)
    k = torch.randn(40, 4, 128, generator=gen).to(dtype).cuda()
    v = torch.randn_like(k)
    slots = torch.randperm(64 * 16, generator=gen)[:40]
    slots[::7] = -1
    slots = slots.cuda()
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    reference.write_kv(k, v, expected_k, expected_v, slots)
    hip_kernels.write_kv(k, v, k_cache, v_cache, slots)
    assert torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)


@pytest.mark.parametrize("seed", range(4))
def test_verify_greedy_matches_reference(seed):
    gen = torch.Generator().manual_seed(seed)
    ks = torch.randint(0, 9, (1 + 7 * seed,), generator=gen)
    cu = torch.cat([torch.zeros(1, dtype=torch.int64), ks.cumsum(0)]).int().cuda()
    targets = torch.randint(0, 3, (int(ks.sum()) + len(ks),), generator=gen).cuda()
    drafts = torch.randint(0, 3, (int(ks.sum()),), generator=gen).cuda()
    poison_allocator()
    got = hip_kernels.verify_greedy(drafts, cu, targets)
    expected = reference.verify_greedy(drafts, cu, targets)
    assert all(torch.equal(a, b) for a, b in zip(got, expected))


@pytest.mark.parametrize("one_hot", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_verify_rejection_matches_reference(seed, one_hot):
    gen = torch.Generator().manual_seed(seed)
    vocab = 49152
    ks = torch.randint(0, 9, (1 + 5 * seed,), generator=gen)
    cu = torch.cat([torch.zeros(1, dtype=torch.int64), ks.cumsum(0)]).int().cuda()
    total = int(ks.sum())
    target = torch.softmax(torch.randn(total + len(ks), vocab, generator=gen) * 3, -1).cuda()
    draft_probs = None if one_hot else torch.softmax(torch.randn(total, vocab, generator=gen) * 3, -1).cuda()
    # Drafts from the target's own likely tokens, so that some are accepted and some rejected.
    drafts = target[:total].argmax(-1) if total else torch.zeros(0, dtype=torch.int64, device="cuda")
    u, v = torch.rand(total, generator=gen).cuda(), torch.rand(len(ks), generator=gen).cuda()
    poison_allocator()
    got = hip_kernels.verify_rejection(drafts, cu, draft_probs, target, u, v)
    expected = reference.verify_rejection(drafts, cu, draft_probs, target, u, v)
    assert torch.equal(got[0], expected[0])
    # Inverse-CDF sums run in another order than torch.cumsum; a uniform within float rounding of
    # a boundary may land one token over, which these seeds do not hit.
    assert torch.equal(got[1], expected[1])
