"""The KV write reference against a per-token loop; negative slots are padding and skipped."""
import torch

from hip_kernels import write_kv


def test_write_kv_scatters_rows_and_skips_padding():
    gen = torch.Generator().manual_seed(0)
    k_cache = torch.zeros(6, 4, 2, 8, dtype=torch.bfloat16)
    v_cache = torch.zeros_like(k_cache)
    k = torch.randn(5, 2, 8, generator=gen).bfloat16()
    v = torch.randn(5, 2, 8, generator=gen).bfloat16()
    slots = torch.tensor([3, 22, -1, 0, 9])
    write_kv(k, v, k_cache, v_cache, slots)
    expected_k, expected_v = torch.zeros_like(k_cache), torch.zeros_like(v_cache)
    for token, slot in enumerate(slots.tolist()):
        if slot >= 0:
            expected_k[slot // 4, slot % 4] = k[token]
            expected_v[slot // 4, slot % 4] = v[token]
    assert torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)
    assert int((k_cache != 0).any(-1).any(-1).sum()) == 4  # the padding row wrote nothing
