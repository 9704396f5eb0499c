"""Sampling parameters and the per-lane sampler (each lane owns a seeded generator, so its tokens
never depend on who shares its batch)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0: greedy
    top_k: int = 0            # 0: off
    top_p: float = 1.0        # 1: off
    seed: int = 0

    def __post_init__(self) -> None:
        if self.temperature < 0 or self.top_k < 0 or not 0 < self.top_p <= 1:
            raise ValueError(f"bad sampling params: {self}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0
