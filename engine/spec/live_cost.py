"""What live steps cost beyond the calibrated curve.

Calibration times one lane at a short context. A live step with B lanes also reads every lane's
context and does per-lane work around the pass (drafting, verification, bookkeeping), so it takes
longer than t(N): 5-10 ms a lane for SmolLM2-135M on two CPU cores. Each draft costs more than
the curve's slope, too, since its attention reads the whole long context of its lane. Goodput
weighs a draft's cost against the whole step's, so both matter: without the first every step
looks cheaper than it is and drafts look dearer; without the second deep drafts look cheap.

The excess of each decode step over t(N) is fitted as per_lane * B + per_draft * D (D drafted
tokens) by decayed least squares. The per-draft term is held towards zero by a small ridge, so
it stays zero until steps with different draft counts tell it apart from the per-lane term.
Neither term is taken below zero: a calibration measured under load would otherwise make drafts
look cheap."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Overhead:
    per_lane_ms: float = 0.0
    per_draft_ms: float = 0.0

    def ms(self, lanes: int, drafts: float) -> float:
        return self.per_lane_ms * lanes + self.per_draft_ms * drafts


class LiveOverhead:
    RIDGE = 16.0  # drafts^2: weight of the prior that a draft costs what the curve says

    def __init__(self, decay: float = 0.8) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"decay must be in (0, 1), got {decay}")
        self.decay = decay
        self._sums = [0.0] * 5  # decayed sums of B*B, B*D, D*D, B*excess, D*excess

    def observe(self, lanes: int, drafts: int, excess_ms: float) -> None:
        """One decode step of `lanes` lanes and `drafts` drafts took `excess_ms` longer than
        the calibrated curve."""
        terms = (lanes * lanes, lanes * drafts, drafts * drafts, lanes * excess_ms,
                 drafts * excess_ms)
        self._sums = [s * self.decay + term for s, term in zip(self._sums, terms)]

    def estimate(self) -> Overhead:
        bb, bd, dd, by, dy = self._sums
        dd += self.RIDGE
        det = bb * dd - bd * bd
        if bb <= 0 or det <= 0:
            return Overhead()
        per_draft = max(0.0, (bb * dy - bd * by) / det)
        per_lane = max(0.0, (by - bd * per_draft) / bb)
        return Overhead(per_lane, per_draft)
