"""The public ops: layout checks apply on every device, and without a GPU the references run and
the package says why."""
import pytest
import torch

import hip_kernels
from hip_kernels import LayoutError, paged_attention, verify_greedy, verify_rejection, write_kv
from hip_kernels.ops import MIN_SPLIT_KEYS, split_plan


def attention_args(**changes):
    args = dict(q=torch.zeros(3, 4, 8), k_cache=torch.zeros(5, 16, 2, 8), v_cache=torch.zeros(5, 16, 2, 8),
                block_tables=torch.zeros(2, 3, dtype=torch.int32), cu_q_lens=torch.tensor([0, 1, 3], dtype=torch.int32),
                ctx_lens=torch.tensor([4, 9], dtype=torch.int32), scale=0.5)
    args.update(changes)
    return args


@pytest.mark.parametrize("changes, problem", [
    (dict(q=torch.zeros(3, 4, 8, dtype=torch.float64)), "q dtype"),
    (dict(k_cache=torch.zeros(5, 16, 2, 8, dtype=torch.bfloat16)), "k_cache dtype"),
    (dict(q=torch.zeros(3, 8, 4).transpose(1, 2)), "q must be contiguous"),
    (dict(block_tables=torch.zeros(2, 3, dtype=torch.int64)), "block_tables dtype"),
    (dict(ctx_lens=torch.tensor([4], dtype=torch.int32)), "2 lanes need"),
    (dict(q=torch.zeros(3, 3, 8)), "not a multiple of num_kv_heads"),
    (dict(v_cache=torch.zeros(5, 16, 2, 4)), "k_cache .* != v_cache"),
])
def test_attention_layout_errors_name_the_problem(changes, problem):
    with pytest.raises(LayoutError, match=problem):
        paged_attention(**attention_args(**changes))


def test_write_kv_rejects_int32_slots():
    k = torch.zeros(2, 2, 8)
    with pytest.raises(LayoutError, match="slot_mapping dtype"):
        write_kv(k, k, torch.zeros(4, 4, 2, 8), torch.zeros(4, 4, 2, 8), torch.tensor([0, 1], dtype=torch.int32))


def test_verify_checks_row_counts():
    drafts, cu = torch.tensor([1, 2]), torch.tensor([0, 2, 2], dtype=torch.int32)
    with pytest.raises(LayoutError, match="need 4"):
        verify_greedy(drafts, cu, torch.tensor([1, 2, 3]))
    probs = torch.full((4, 3), 1 / 3)
    with pytest.raises(LayoutError, match="sample uniforms"):
        verify_rejection(drafts, cu, None, probs, torch.rand(2), torch.rand(3))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU fallback")
def test_without_gpu_the_references_run_and_say_why():
    assert not hip_kernels.available()
    assert "no GPU" in hip_kernels.why_unavailable()


def test_split_plan_fills_the_device_without_tiny_splits():
    assert split_plan(max_keys=8192, rows=32, multiprocessors=64) == (4, 2048)  # few rows: split
    assert split_plan(max_keys=8192, rows=4096, multiprocessors=64) == (1, 8192)  # enough rows already
    splits, split_len = split_plan(max_keys=300, rows=1, multiprocessors=132)
    assert splits == 1 and split_len == 300 and split_len >= MIN_SPLIT_KEYS


def test_check_names_the_error():
    with pytest.raises(hip_kernels.KernelError, match="error 1"):
        hip_kernels.check(1)
    hip_kernels.check(0)
