"""What live steps cost beyond the calibrated decode shapes (Calibration.step_ms).

Calibration times lanes at a short context, one of them drafting. A live step costs more, in
three ways that the policy's choices move (measured for SmolLM2-135M on two CPU cores, 16 lanes at
400 tokens of context, against the one-lane curve t(N) that the policy planned with before the
decode shapes):
- per lane: every lane's attention reads its whole context, and each lane has work around the
  pass (drafting, verification, bookkeeping): about 2 ms a lane;
- per draft: a draft's attention reads its lane's long context too, which one lane at 64 tokens
  did not: about half a millisecond a draft;
- per group: lanes are attended in one call per query length, neighbouring lengths merged where
  padding their queries costs less than a call (attention.py), so a distinct draft count can add
  a call per layer: about 6 ms a group in fp32, 1.5-2 ms in bf16 (16 lanes, ctx 300-400). The
  calibrated shapes already hold the call of one lane drafting among lanes that do not, so only
  the lengths beyond those are counted (extra_groups).
Goodput weighs a draft's cost against the whole step's, so all three matter: without the first
every step looks cheaper than it is and drafts look dearer; without the others deep or uneven
drafts look cheap.

The excess of each decode step over the calibrated shapes is fitted as per_lane * B + per_draft *
D + per_group * extra_groups by decayed least squares (D drafted tokens), the draft and group terms
shrunk slightly towards zero; they stay zero until steps with drafts are seen, and fade back to zero
as those steps age without new ones (LiveOverhead.EVIDENCE). Counted as G - 1 (G
distinct query lengths), every step in which one lane of two drafted had a group, so the group
term could take up what its drafts took beyond the shapes: in chat at 2 lanes, where goodput's
drafting steps were deep ones, it came to 1-5 ms, a lone lane's two drafts were planned at +2-5 ms
against +1.1 measured (fixed 2), and goodput drafted deep or not at all.
The per-lane term may come out negative: the machine can be faster now than when it was
calibrated (CPU speed here swings by 1.5x). Held at zero, it left steps without drafts planned
20 ms too slow at B=8 in chat, and the fit then explained the drafting steps' excess with that
offset instead of with drafts (+5 % planned for 6 drafts, +37 % measured), so goodput drafted
where it did not pay. The draft and group terms are never taken below zero, though a calibration
measured under load can price drafts too high (an AVX2 EPYC, fp32: a lane's two drafts at B=2
planned +26 ms, measured +5-8). Let below zero, they fixed that (chat B=2 0.948x -> 0.972x the
best), but at 16 chat lanes a window of steps holds about one drafting step, its noise took them
negative, and goodput drafted three times as often at half the run's rate (0.994x -> 0.977x off;
docs/PERFORMANCE.md, machine B)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Overhead:
    per_lane_ms: float = 0.0
    per_draft_ms: float = 0.0
    per_group_ms: float = 0.0

    def ms(self, lanes: int, drafts: float, groups: int) -> float:
        return (self.per_lane_ms * lanes + self.per_draft_ms * drafts
                + self.per_group_ms * extra_groups(lanes, drafts, groups))


def query_groups(ks: list[int]) -> int:
    """Distinct query lengths of decoding lanes drafting `ks` (one per distinct 1 + k): the
    attention calls per layer before merging."""
    return len(set(ks))


def extra_groups(lanes: int, drafts: float, groups: int) -> int:
    """Query lengths beyond those of the calibrated decode shape of `lanes` lanes and `drafts`
    drafts, which times one lane drafting among lanes that do not: two lengths where a lane
    drafts, one without drafts or for a lone lane. The feature the fit prices. Lanes drafting
    alike have a length fewer, but counted 0, not -1: a step that took less than its shape
    would then price every extra call dearer."""
    return max(0, groups - (2 if drafts and lanes > 1 else 1))


class LiveOverhead:
    RIDGE = 1e-3  # relative shrinkage of the draft and group terms towards zero
    # The draft and group terms are trusted as far as recent steps back them: each is scaled by
    # e / (e + EVIDENCE), e being the decayed sum of its feature squared, so that while no
    # drafts are sent they fade back to the calibrated shapes. Held as fitted, one slow drafting
    # step (the first at a new shape) kept its cost for good, and each faster step without drafts
    # after it raised that: at code-edit B=16 goodput planned a draft at +1.5 ms from then on,
    # sent none, and ran at off's 509 tok/s where it otherwise ran 560-620. (A prior in the fit
    # itself moves the terms' cost to the per-lane term: lanes and query lengths grow together.)
    EVIDENCE = 4.0

    def __init__(self, decay: float = 0.95) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"decay must be in (0, 1), got {decay}")
        self.decay = decay
        # Plain lists, not numpy: this 3 x 3 fit runs every step, and numpy's per-call cost
        # made it 0.2 ms of the step in the running engine (0.04 ms now).
        self._xx = [[0.0] * 3 for _ in range(3)]  # decayed sums of x x^T, x = (B, D, extra groups)
        self._xy = [0.0] * 3                      # decayed sums of x * excess

    def observe(self, ks: list[int], excess_ms: float) -> None:
        """One decode step with `ks` drafts per lane took `excess_ms` longer than the
        calibrated shapes."""
        if not ks:
            return
        drafts = sum(ks)
        x = (len(ks), drafts, extra_groups(len(ks), drafts, query_groups(ks)))
        for i, row in enumerate(self._xx):
            self._xy[i] = self._xy[i] * self.decay + x[i] * excess_ms
            for j in range(3):
                row[j] = row[j] * self.decay + x[i] * x[j]

    def estimate(self) -> Overhead:
        if self._xx[0][0] <= 0:
            return Overhead()
        terms = [0.0] * 3
        free = [0, 1, 2]
        while free:  # least squares; a draft or group term that comes out negative is held at 0
            # The ridge keeps the system positive definite while a term's feature has never
            # been non-zero (no drafts yet: D = extra groups = 0); B >= 1 always.
            ridge = {i: self.RIDGE * self._xx[i][i] + 1e-6 for i in free if i > 0}
            system = [[self._xx[i][j] + (ridge.get(i, 0.0) if i == j else 0.0) for j in free]
                      for i in free]
            solved = _solve(system, [self._xy[i] for i in free])
            # Only the draft and group terms are bounded; the per-lane one (index 0) may be < 0.
            bounded = [value if i > 0 else 0.0 for i, value in zip(free, solved)]
            if min(bounded) >= 0:
                for i, value in zip(free, solved):
                    seen = self._xx[i][i]
                    terms[i] = value if i == 0 else value * seen / (seen + self.EVIDENCE)
                break
            free.pop(bounded.index(min(bounded)))
        return Overhead(*terms)


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """x with a x = b, by Gaussian elimination with partial pivoting (a is at most 3 x 3)."""
    n = len(b)
    rows = [row[:] + [value] for row, value in zip(a, b)]  # augmented [a | b]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(rows[r][col]))
        rows[col], rows[pivot] = rows[pivot], rows[col]
        for r in range(col + 1, n):
            factor = rows[r][col] / rows[col][col]
            for c in range(col, n + 1):
                rows[r][c] -= factor * rows[col][c]
    x = [0.0] * n
    for r in reversed(range(n)):
        x[r] = (rows[r][n] - sum(rows[r][c] * x[c] for c in range(r + 1, n))) / rows[r][r]
    return x
