"""On a GPU the engine's attention runs hip_kernels' kernels; its logits must match the CPU path.
The ops check the kernels' layouts on any device, so the model's calls into them are checked on
the CPU too, where the ops run their torch references."""
import pytest
import torch

import hip_kernels
from engine.config import PRESETS
from engine.forward_batch import LaneInput
from engine.kv_cache import PagedKVCache
from engine.model import LlamaModel
from engine.runner import ModelRunner

LANES = [LaneInput.make_dummy(0, n=37), LaneInput.make_dummy(1, n=5), LaneInput.make_dummy(2, n=1)]


def _logits(device: str) -> list[torch.Tensor]:
    config = PRESETS["tiny-test"]
    model = LlamaModel.random(config, seed=0, dtype=torch.float32, device=device)
    runner = ModelRunner(model, PagedKVCache(config, num_blocks=16, dtype=torch.float32,
                                             device=device))
    return [x.cpu() for x in runner.forward(LANES).logits]


def test_the_models_calls_meet_the_kernels_layouts(monkeypatch):
    """Every step through hip_kernels' ops, as on a GPU: a prefill's v is a view into qkv, which
    the kernels would misread, so the ops refuse it unless it is made contiguous first."""
    from engine import attention
    plain = _logits("cpu")
    monkeypatch.setattr(attention, "runs_kernels", lambda t: True)
    for through_ops, direct in zip(_logits("cpu"), plain):
        torch.testing.assert_close(through_ops, direct, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a ROCm or CUDA device")
def test_gpu_runner_matches_cpu_runner():
    if not hip_kernels.available():
        pytest.fail(f"a GPU is present but hip_kernels did not build: {hip_kernels.why_unavailable()}")
    for cpu, gpu in zip(_logits("cpu"), _logits("cuda")):
        torch.testing.assert_close(gpu, cpu, rtol=1e-4, atol=1e-4)


def _generated_ids(device: str, ragged: str, policy: str = "fixed") -> list[list[int]]:
    """Greedy text of a few prompts, drafts and the given layout included."""
    from engine.controls import Controls
    from engine.generate import generate
    from engine.loading import load_model
    from engine.spec.calibration import Calibration
    loaded = load_model("tiny-test", dtype="fp32", device=device)
    results = generate(loaded, ["abcabcabcabc", "hello hello hello", "x"],
                       Controls(policy=policy, k=3, ragged=ragged), max_new_tokens=24,
                       calibration=Calibration.make_dummy())
    assert policy == "off" or sum(r.drafted for r in results) > 0
    return [r.token_ids for r in results]


@pytest.mark.parametrize("ragged", ["packed", "padded"])
def test_speculative_decoding_through_the_kernels_ops_writes_the_same_text(ragged, monkeypatch):
    """Whole decode steps, drafts and both layouts included, as a GPU would run them."""
    from engine import attention
    direct = _generated_ids("cpu", ragged)
    monkeypatch.setattr(attention, "runs_kernels", lambda t: True)
    assert _generated_ids("cpu", ragged) == direct


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a ROCm or CUDA device")
@pytest.mark.parametrize("ragged", ["packed", "padded"])
def test_speculative_decoding_on_the_gpu_writes_the_text_of_plain_decoding(ragged):
    """Lossless on the device itself: drafts verified by the kernels change no token, and the
    text is the CPU's."""
    on_gpu = _generated_ids("cuda", ragged)
    assert on_gpu == _generated_ids("cuda", ragged, policy="off")
    assert on_gpu == _generated_ids("cpu", ragged)
