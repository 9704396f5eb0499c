"""Builds the live engine the window watches: load the model (with progress), then the Engine,
which loads the cached calibration for this (device, model, dtype) or measures it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(slots=True)
class EngineSpec:
    model: str = "default"        # default | tiny-test | a Hugging Face folder
    dtype: str = "auto"
    device: str = "auto"
    agents: int = 8
    trace_out: str | None = None  # None: no trace is written

    def __post_init__(self) -> None:
        if self.agents < 1:
            raise ValueError(f"agents must be >= 1, got {self.agents}")

    def build(self, progress: Callable[[str, float], None]):
        # Imported here: the app starts (and replays traces) without loading torch first.
        from engine.controls import Controls
        from engine.engine import Engine
        from engine.loading import load_model
        from engine.swarm import SwarmConfig

        loaded = load_model(self.model, dtype=self.dtype, device=self.device,
                            progress=lambda msg, frac: progress(msg, 0.8 * frac))
        progress("calibrating t(N) (cached per device, model and dtype)…", 0.85)
        engine = Engine(loaded, SwarmConfig(), controls=Controls(swarm_size=self.agents),
                        trace_path=self.trace_out)
        progress(f"{loaded.name} ready · T = {engine.calibration.budget}", 1.0)
        return engine
