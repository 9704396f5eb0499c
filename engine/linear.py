"""Matrix products on the CPU at the speed the weights stream: which GEMM each dtype and CPU
gets, oneDNN's prepacked weights, and the row counts that keep its kernels few."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

# Where oneDNN has no bf16 kernels (an AVX2 CPU), torch's CPU bf16 GEMV still streams at memory
# speed but its bf16 GEMM runs ~10x slower than upcasting the weight and using fp32 GEMM
# (measured on the project's 2-core EPYC: 8 rows x [1728, 576], 3.9 ms vs 1.6 ms). With AVX-512
# but no bf16 dot instructions oneDNN converts on the fly, and that beats upcasting: 4 lanes of
# SmolLM2-135M on an Ice Lake Xeon, 100 ms a step against 146.
SLOW_CPU_BF16_GEMM = not torch.ops.mkldnn._is_mkldnn_bf16_supported()
_BF16_GEMV_MAX_ROWS = 2
_ONEDNN_PREPACK = (torch.backends.mkldnn.is_available()
                   and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
                   and hasattr(torch.ops.mkldnn, "_linear_pointwise"))


def prepacks(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether a model's linear weights are handed to oneDNN in its own blocked layout, once at
    load (`LlamaModel.prepack`). Where oneDNN runs bf16 matmuls, handed a plain weight it reorders
    it on every call, so a decode step read each weight twice; prepacked, the results are the
    same bits. SmolLM2-135M's linears and head on the 2-core EPYC (AVX512-BF16), ms a step: 1 row
    10.2 -> 6.4, 16 rows 13.6 -> 9.3. In fp32 oneDNN's prepacked GEMM replaces MKL's on AVX-512
    CPUs (row 0's result then no longer depends on the row count): there 1 row 13.2 -> 9.1 and 16
    rows 47.6 -> 16.7. With oneDNN held to AVX2 it was 10-18 % slower at one row, though a third
    faster from eight, so AVX2 CPUs keep MKL's path, which was tuned on one."""
    if device.type != "cpu" or not _ONEDNN_PREPACK:
        return False
    if dtype == torch.bfloat16:
        return not SLOW_CPU_BF16_GEMM
    return dtype == torch.float32 and torch.backends.cpu.get_cpu_capability().startswith("AVX512")


WARM_ROWS = 128  # the calibrated range: decode steps up to 16 lanes with their drafts
# oneDNN keeps a kernel for every row count it meets, and prefill chunks (up to 512 tokens a
# step, beside decoding lanes) meet hundreds past WARM_ROWS: linears at each of 129..512 rows
# grew the process by 285 MB (SmolLM2-135M, bf16), gigabytes over a day. Past WARM_ROWS rows are
# padded to a multiple of this, a few percent of a prefill chunk's arithmetic. Split into
# WARM_ROWS pieces instead, prefill passes took 3-17 % longer on the 2-core Xeon (AMX).
PREFILL_ROW_BUCKET = 32


def onednn_rows(n: int) -> int:
    """Rows to compute for n with a prepacked weight: n itself in the warmed range, past it
    the next multiple of PREFILL_ROW_BUCKET."""
    return n if n <= WARM_ROWS else -(-n // PREFILL_ROW_BUCKET) * PREFILL_ROW_BUCKET


def _gemm_rows(n: int) -> int:
    """Rows to compute for n on the CPU: MKL's fp32 GEMM streams the weights fastest when the
    row count is 2, 4 or a multiple of 8. Over SmolLM2-135M's weights on the 2-core EPYC (out of
    cache): 1 row 40 ms, 2 rows 31, 8 rows 48, 15 rows 138, 16 rows 78. Zero rows are cheap
    where the weights' streaming is the cost."""
    return 2 if n <= 2 else 4 if n <= 4 else -(-n // 8) * 8


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x @ weight.T (+ bias). A weight prepacked for oneDNN (`prepacks`) goes to it as it is.
    Otherwise, in fp32 on CPU, it is computed as weight @ x.T over `_gemm_rows` rows: with the
    weight as the tall left operand, MKL streams it at full speed, while F.linear's small-M GEMM
    against a transposed weight streams it at about half speed from 2 to 32 rows (same weights
    on an AVX2 EPYC: 2 rows 83 -> 36 ms, 8 rows 82 -> 57 ms). This is what makes a few draft
    tokens nearly free on that kind of CPU."""
    if x.device.type != "cpu":
        return F.linear(x, weight, bias)
    if weight.is_mkldnn:  # prepacked
        n = x.shape[0]
        pad = onednn_rows(n) - n if n > WARM_ROWS else 0  # decode steps skip the call
        if not pad:
            return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
        x = torch.cat((x, x.new_zeros(pad, x.shape[1])))
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")[:n]
    dtype, n = x.dtype, x.shape[0]
    if dtype == torch.bfloat16:
        if not SLOW_CPU_BF16_GEMM or n <= _BF16_GEMV_MAX_ROWS:
            return F.linear(x, weight, bias)
        x, weight = x.float(), weight.float()
        bias = None if bias is None else bias.float()
    rows = _gemm_rows(n)
    if rows > n:
        x = torch.cat((x, x.new_zeros(rows - n, x.shape[1])))
    y = weight @ x.t() if bias is None else torch.addmm(bias[:, None], weight, x.t())
    return y[:, :n].t().contiguous().to(dtype)
