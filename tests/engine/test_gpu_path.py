"""On a GPU the engine's attention runs hip_kernels' kernels; its logits must match the CPU path."""
import pytest
import torch

import hip_kernels
from engine.config import PRESETS
from engine.forward_batch import LaneInput
from engine.kv_cache import PagedKVCache
from engine.model import LlamaModel
from engine.runner import ModelRunner

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a ROCm or CUDA device")
def test_gpu_runner_matches_cpu_runner():
    if not hip_kernels.available():
        pytest.fail(f"a GPU is present but hip_kernels did not build: {hip_kernels.why_unavailable()}")
    config = PRESETS["tiny-test"]
    lanes = [LaneInput.make_dummy(0, n=37), LaneInput.make_dummy(1, n=5), LaneInput.make_dummy(2, n=1)]
    logits = []
    for device in ("cpu", "cuda"):
        model = LlamaModel.random(config, seed=0, dtype=torch.float32, device=device)
        runner = ModelRunner(model, PagedKVCache(config, num_blocks=16, dtype=torch.float32,
                                                 device=device))
        logits.append([x.cpu() for x in runner.forward(lanes).logits])
    for cpu, gpu in zip(*logits):
        torch.testing.assert_close(gpu, cpu, rtol=1e-4, atol=1e-4)
