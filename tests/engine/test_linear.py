"""The CPU linear (weight @ x.T, rows padded) equals F.linear, for any number of rows."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.model import _gemm_rows, _linear

TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-12, torch.bfloat16: 2e-2}


@pytest.mark.parametrize("dtype", list(TOLERANCE))
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 8, 9, 17])
@pytest.mark.parametrize("with_bias", [False, True])
def test_linear_matches_f_linear(dtype, rows, with_bias):
    gen = torch.Generator().manual_seed(rows)
    x, weight, bias = (torch.randn(shape, generator=gen) for shape in ((rows, 24), (40, 24), 40))
    x, weight, bias = x.to(dtype), weight.to(dtype), bias.to(dtype) if with_bias else None
    got = _linear(x, weight, bias)
    want = F.linear(x.double(), weight.double(), None if bias is None else bias.double())
    assert got.shape == (rows, 40) and got.dtype == dtype and got.is_contiguous()
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol * 10)


def test_gemm_rows_are_two_four_or_multiples_of_eight():
    assert [_gemm_rows(n) for n in range(1, 18)] == [2, 2, 4, 4] + [8] * 4 + [16] * 8 + [24]
    assert all(_gemm_rows(n) >= n for n in range(1, 600))


def test_warm_up_runs_every_row_count_and_only_where_kernels_are_built():
    from engine.config import PRESETS
    from engine.model import LlamaModel, _SLOW_CPU_BF16_GEMM, prepacks
    fp32 = LlamaModel.random(PRESETS["tiny-test"], dtype=torch.float32)
    bf16 = LlamaModel.random(PRESETS["tiny-test"], dtype=torch.bfloat16)
    fp64 = LlamaModel.random(PRESETS["tiny-test"], dtype=torch.float64)
    assert not fp64.builds_kernels_per_row_count  # MKL's GEMM, no kernels built
    assert fp32.builds_kernels_per_row_count == prepacks(torch.device("cpu"), torch.float32)
    assert bf16.builds_kernels_per_row_count == (not _SLOW_CPU_BF16_GEMM)
    seen = []
    bf16.warm_up(max_rows=5, done=seen.append)
    assert seen == [1, 2, 3, 4, 5]
