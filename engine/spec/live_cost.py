"""What live steps cost beyond the calibrated curve.

Calibration times one lane at a short context. A live step with B lanes also reads every lane's
context and does per-lane work around the pass (drafting, verification, bookkeeping), so it takes
longer than t(N), by an amount that grows with the lanes (5-10 ms a lane for SmolLM2-135M on two
CPU cores). Goodput weighs a draft's cost against the whole step's, so the excess matters:
without it every step looks cheaper than it is, and drafts look dearer. The excess per decoding
lane is learned from decode steps as a decayed mean; it is never negative, since a calibration
taken under load would otherwise make drafts look cheap."""
from __future__ import annotations


class LiveOverhead:
    def __init__(self, decay: float = 0.8) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"decay must be in (0, 1), got {decay}")
        self.decay = decay
        self._excess = 0.0  # decayed sum of excess ms per lane
        self._weight = 0.0  # decayed count of steps

    def observe(self, lanes: int, excess_ms: float) -> None:
        """One decode step of `lanes` lanes took `excess_ms` longer than the calibrated curve."""
        if lanes > 0:
            self._excess = self._excess * self.decay + excess_ms / lanes
            self._weight = self._weight * self.decay + 1

    @property
    def per_lane_ms(self) -> float:
        return max(0.0, self._excess / self._weight) if self._weight else 0.0

    def at(self, lanes: int) -> float:
        """Expected excess of a step with `lanes` decoding lanes."""
        return self.per_lane_ms * lanes
