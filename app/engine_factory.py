"""Builds the live engine the window watches: load the model, load the cached calibration for this
(device, model, dtype) or measure it, then the Engine. Every stage reports progress through one
callback, which is also where a closing window stops the build (it raises)."""
from __future__ import annotations

from dataclasses import dataclass

from app.progress import Progress
from engine.thread_tuner import AUTO


@dataclass(slots=True)
class EngineSpec:
    model: str = "default"        # default | tiny-test | a Hugging Face folder
    dtype: str = "auto"
    device: str = "auto"
    agents: int = 8
    trace_out: str | None = None  # None: no trace is written
    thinking: bool | None = None  # the chat template's enable_thinking (None: its default)
    threads: int | str | None = None  # CPU threads of the forward pass (None: one per core;
                                      # "auto": tuned as the session runs)
    serving: bool = False         # API clients' agents join the swarm (KV cache room for them)

    def __post_init__(self) -> None:
        if self.agents < 0:
            raise ValueError(f"agents must be >= 0, got {self.agents}")

    def build(self, progress: Progress):
        # Imported here: the app starts (and replays traces) without loading torch first.
        from engine.controls import Controls
        from engine.engine import Engine
        from engine.loading import load_model
        from engine.swarm import SwarmConfig

        from engine.spec.calibration import calibrate_or_load

        tuned = self.threads == AUTO
        loaded = load_model(self.model, dtype=self.dtype, device=self.device,
                            progress=lambda msg, frac: progress(msg, 0.7 * frac),
                            thinking=self.thinking, threads=None if tuned else self.threads)
        progress("calibrating t(N) (cached per device, model, dtype and CPU threads)…", 0.7)
        # Measured here rather than inside Engine(), where a window closed mid-calibration could
        # not stop it: here every forward pass checks for the close.
        with progress.checking(loaded.model):
            calibration = calibrate_or_load(loaded, progress=progress.calibration(0.7, 1.0))
        from engine.serve.http_api import CLIENT_LANES

        config = SwarmConfig(client_lanes=CLIENT_LANES if self.serving else 0)
        engine = Engine(loaded, config, controls=Controls(swarm_size=self.agents),
                        calibration=calibration, trace_path=self.trace_out)
        if tuned:  # every count's curve, measured where none is cached
            progress("CPU threads: each count's t(N)…", 0.7)
            with progress.checking(loaded.model):
                engine.tune_threads(progress.calibration(0.7, 1.0))
        progress(f"{loaded.name} ready · T = {engine.calibration.budget}", 1.0)
        return engine

