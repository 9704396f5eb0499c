"""What live steps cost beyond the calibrated curve.

Calibration times one lane at a short context. A live step costs more than t(N), in three ways
that the policy's choices move (measured for SmolLM2-135M on two CPU cores, 16 lanes at 400 tokens
of context):
- per lane: every lane's attention reads its whole context, and each lane has work around the
  pass (drafting, verification, bookkeeping): about 2 ms a lane;
- per draft: a draft's attention reads its lane's long context too, which one lane at 64 tokens
  did not: about half a millisecond a draft;
- per group: lanes are attended in one call per query length, neighbouring lengths merged where
  padding their queries costs less than a call (attention.py), so a distinct draft count can add
  a call per layer: about 6 ms a group in fp32, 1.5-2 ms in bf16 (16 lanes, ctx 300-400).
Goodput weighs a draft's cost against the whole step's, so all three matter: without the first
every step looks cheaper than it is and drafts look dearer; without the others deep or uneven
drafts look cheap.

The excess of each decode step over t(N) is fitted as per_lane * B + per_draft * D + per_group
* (G - 1) by decayed least squares (D drafted tokens, G distinct query lengths), the draft and
group terms shrunk slightly towards zero; they stay zero until steps with drafts are seen.
The per-lane term may come out negative: the machine can be faster now than when it was
calibrated (CPU speed here swings by 1.5x), and the calibration's running maximum lifts noisy
points. Held at zero, it left steps without drafts planned 20 ms too slow at B=8 in chat, and
the fit then explained the drafting steps' excess with that offset instead of with drafts
(+5 % planned for 6 drafts, +37 % measured), so goodput drafted where it did not pay. The draft
and group terms are never taken below zero: a calibration measured under load would otherwise
make drafts look cheap."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Overhead:
    per_lane_ms: float = 0.0
    per_draft_ms: float = 0.0
    per_group_ms: float = 0.0

    def ms(self, lanes: int, drafts: float, groups: int = 1) -> float:
        return (self.per_lane_ms * lanes + self.per_draft_ms * drafts
                + self.per_group_ms * max(0, groups - 1))


def query_groups(ks: list[int]) -> int:
    """Distinct query lengths of decoding lanes drafting `ks` (one per distinct 1 + k): the
    attention calls per layer before merging, a feature the fit prices from what steps took."""
    return len(set(ks))


class LiveOverhead:
    RIDGE = 1e-3  # relative shrinkage of the draft and group terms towards zero

    def __init__(self, decay: float = 0.95) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"decay must be in (0, 1), got {decay}")
        self.decay = decay
        self._xx = np.zeros((3, 3))  # decayed sums of x x^T, x = (B, D, G - 1)
        self._xy = np.zeros(3)       # decayed sums of x * excess

    def observe(self, ks: list[int], excess_ms: float) -> None:
        """One decode step with `ks` drafts per lane took `excess_ms` longer than the
        calibrated curve."""
        if not ks:
            return
        x = np.array([len(ks), sum(ks), query_groups(ks) - 1], dtype=float)
        self._xx = self._xx * self.decay + np.outer(x, x)
        self._xy = self._xy * self.decay + x * excess_ms

    def estimate(self) -> Overhead:
        if self._xx[0, 0] <= 0:
            return Overhead()
        terms = np.zeros(3)
        free = [0, 1, 2]
        while free:  # least squares; a draft or group term that comes out negative is held at 0
            # The ridge keeps the system positive definite while a term's feature has never
            # been non-zero (no drafts yet: D = G - 1 = 0); B >= 1 always.
            ridge = [0.0 if i == 0 else self.RIDGE * self._xx[i, i] + 1e-6 for i in free]
            solved = np.linalg.solve(self._xx[np.ix_(free, free)] + np.diag(ridge),
                                     self._xy[free])
            # Only the draft and group terms are bounded; the per-lane one (index 0) may be < 0.
            bounded = [value if i > 0 else 0.0 for i, value in zip(free, solved)]
            if min(bounded) >= 0:
                terms[free] = solved
                break
            free.pop(int(np.argmin(bounded)))
        return Overhead(*(float(v) for v in terms))
