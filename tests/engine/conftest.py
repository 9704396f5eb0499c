"""Shared fixtures: a tiny random model and a runner over a fresh paged KV cache."""
from __future__ import annotations

import pytest
import torch

from engine.config import PRESETS, ModelConfig
from engine.kv_cache import PagedKVCache
from engine.loading import load_model
from engine.model import LlamaModel
from engine.runner import ModelRunner
from engine.spec.calibration import Calibration


@pytest.fixture(scope="session")
def tiny():
    """The tiny-test model, loaded as the engine loads a model."""
    return load_model("tiny-test", dtype="fp32", device="cpu")


@pytest.fixture
def calibration():
    # A fixed step-cost curve: the virtual clock then advances identically on every machine.
    return Calibration.make_dummy(t1_ms=20.0, per_token_ms=1.0, knee=8)


@pytest.fixture(scope="session")
def tiny_config() -> ModelConfig:
    return PRESETS["tiny-test"]


@pytest.fixture(scope="session")
def tiny_model64(tiny_config) -> LlamaModel:
    """fp64, so layouts and batch mixes can be compared almost exactly."""
    return LlamaModel.random(tiny_config, seed=1, dtype=torch.float64)


@pytest.fixture
def make_runner():
    def make(model: LlamaModel, num_blocks: int = 64, block_size: int = 4) -> ModelRunner:
        kv = PagedKVCache(model.config, num_blocks, block_size, model.dtype, model.device)
        return ModelRunner(model, kv)
    return make
