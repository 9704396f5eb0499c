"""The CPU linear (weight @ x.T, rows padded) equals F.linear, for any number of rows."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from engine.linear import PREFILL_ROW_BUCKET, WARM_ROWS, _gemm_rows, linear, onednn_rows

TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-12, torch.bfloat16: 2e-2}


@pytest.mark.parametrize("dtype", list(TOLERANCE))
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 8, 9, 17])
@pytest.mark.parametrize("with_bias", [False, True])
def test_linear_matches_f_linear(dtype, rows, with_bias):
    gen = torch.Generator().manual_seed(rows)
    x, weight, bias = (torch.randn(shape, generator=gen) for shape in ((rows, 24), (40, 24), 40))
    x, weight, bias = x.to(dtype), weight.to(dtype), bias.to(dtype) if with_bias else None
    got = linear(x, weight, bias)
    want = F.linear(x.double(), weight.double(), None if bias is None else bias.double())
    assert got.shape == (rows, 40) and got.dtype == dtype and got.is_contiguous()
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol * 10)


def test_gemm_rows_are_two_four_or_multiples_of_eight():
    assert [_gemm_rows(n) for n in range(1, 18)] == [2, 2, 4, 4] + [8] * 4 + [16] * 8 + [24]
    assert all(_gemm_rows(n) >= n for n in range(1, 600))


def test_onednn_meets_few_row_counts_past_the_warmed_range():
    """Every count up to WARM_ROWS as it is; past it a multiple of PREFILL_ROW_BUCKET, never
    more than PREFILL_ROW_BUCKET - 1 rows wasted: up to 2000 rows, 59 counts past the range,
    not 1872."""
    counts = [onednn_rows(n) for n in range(1, 2001)]
    assert counts[:WARM_ROWS] == list(range(1, WARM_ROWS + 1))
    assert all(n <= rows < n + PREFILL_ROW_BUCKET for n, rows in enumerate(counts, 1))
    assert len(set(counts[WARM_ROWS:])) == -(-(2000 - WARM_ROWS) // PREFILL_ROW_BUCKET)


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")
@pytest.mark.parametrize("rows", [1, WARM_ROWS, WARM_ROWS + 1, 200, 224])
def test_prepacked_linear_pads_rows_past_the_warmed_range(rows):
    gen = torch.Generator().manual_seed(rows)
    x, weight, bias = (torch.randn(shape, generator=gen) for shape in ((rows, 24), (40, 24), 40))
    packed = torch.ops.mkldnn._reorder_linear_weight(weight, None)
    got = linear(x, packed, bias)
    assert got.shape == (rows, 40) and got.is_contiguous()
    torch.testing.assert_close(got.double(), F.linear(x.double(), weight.double(), bias.double()),
                               rtol=1e-5, atol=1e-4)


def test_warm_up_runs_every_row_count_and_only_where_kernels_are_built():
    from engine.config import PRESETS
    from engine.linear import SLOW_CPU_BF16_GEMM, prepacks
    from engine.model import LlamaModel
    fp32 = LlamaModel.random(PRESETS["tiny-test"], dtype=torch.float32)
    bf16 = LlamaModel.random(PRESETS["tiny-test"], dtype=torch.bfloat16)
    fp64 = LlamaModel.random(PRESETS["tiny-test"], dtype=torch.float64)
    assert not fp64.builds_kernels_per_row_count  # MKL's GEMM, no kernels built
    assert fp32.builds_kernels_per_row_count == prepacks(torch.device("cpu"), torch.float32)
    assert bf16.builds_kernels_per_row_count == (not SLOW_CPU_BF16_GEMM)
    seen = []
    bf16.warm_up(max_rows=5, done=seen.append)
    assert seen == [1, 2, 3, 4, 5]


def test_warm_up_keeps_every_row_count_it_ran():
    """oneDNN caches two kernels a prepacked linear, 1024 by default: the tiny model's warm-up (5
    weight shapes x 128 row counts) evicted its own first counts, those decode steps use, which
    a step then built again. `import engine` makes room for them (engine/__init__.py). Run in a
    fresh process, as oneDNN reads its cache's size at its first kernel."""
    from engine.config import PRESETS
    from engine.linear import SLOW_CPU_BF16_GEMM, prepacks
    from engine.model import LlamaModel
    dtype = ("bfloat16" if not SLOW_CPU_BF16_GEMM else
             "float32" if prepacks(torch.device("cpu"), torch.float32) else None)
    if dtype is None:
        pytest.skip("this CPU builds no oneDNN kernels per row count (no prepacked weights)")
    shapes = {tuple(w.shape) for w in LlamaModel.random(PRESETS["tiny-test"]).linear_weights()}
    assert 2 * WARM_ROWS * len(shapes) > 1024  # more than oneDNN's default cache holds
    code = f"""
import torch, engine
from engine.config import PRESETS
from engine.linear import linear
from engine.model import LlamaModel
model = LlamaModel.random(PRESETS["tiny-test"], dtype=torch.{dtype})
model.warm_up()
print("warmed", flush=True)
with torch.inference_mode():
    for weight in model.linear_weights():
        linear(torch.zeros(1, weight.shape[1], dtype=model.dtype), weight)
"""
    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}
    env["ONEDNN_VERBOSE"] = "profile_create"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300, check=True).stdout
    after = [line for line in out.split("warmed", 1)[1].splitlines() if "inner_product" in line]
    assert after and all("cache_hit" in line for line in after), after[:3]
