"""Speculation policies: how many drafts each decoding lane gets this step (DESIGN.md §1).

- off: none; fixed: K for every lane; uniform: the seed rule k = floor((T - B) / B);
- goodput (default): per-lane k maximising expected emitted tokens per second. The j-th draft of
  lane i is accepted with probability about a_i ** j, so a step emits B + sum_i sum_{j<=k_i} a_i**j
  tokens in t(B + sum k + prefill) + drafting ms. Drafts are added greedily, best marginal gain
  first; the allocation kept is the prefix of that order with the best rate (so a draft model
  whose first pass is costly can still pay off over several drafts). Inside the budget the
  measured curve is flat to within eps, so every draft with positive a_i is nearly free; past it
  a draft must pay for itself.

Guards for every policy: no drafting when the batch exceeds the speculation ceiling; a lane or
category whose rolling acceptance is below the minimum stops drafting, re-probed with one draft
every PROBE_EVERY steps so it can recover; and (adaptive policies) hysteresis, so k moves by one
only after the wish has persisted for HOLD_STEPS steps.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Callable

from engine.controls import Controls
from engine.spec.acceptance import AcceptanceStats
from engine.spec.calibration import Calibration

MIN_TRIALS = 4      # tested drafts before a low rate may switch a lane or category off
PROBE_EVERY = 16    # steps between one-draft probes of a switched-off lane
HOLD_STEPS = 3      # steps a one-step change of k must persist before it is applied
PRIOR = 0.5         # acceptance assumed for a lane and category with no history


@dataclass(slots=True)
class LaneView:
    """What a policy knows about one decoding lane."""

    seq_id: int
    cat: str
    available: int  # drafts the drafter can propose now (already capped by controls.k)

    def __post_init__(self) -> None:
        if self.available < 0:
            raise ValueError(f"lane {self.seq_id}: available drafts must be >= 0")


@dataclass(slots=True)
class Decision:
    ks: list[int]
    reason: str

    @classmethod
    def make_dummy(cls, batch: int = 2) -> "Decision":
        return cls(ks=[2] * batch, reason="dummy")


class SpeculationPolicy:
    """Stateful across steps (probe clocks, hysteresis); one instance per engine."""

    def __init__(self, stats: AcceptanceStats) -> None:
        self.stats = stats
        self._held: dict[int, int] = {}     # seq_id -> k in force (hysteresis)
        self._streak: dict[int, int] = {}   # seq_id -> steps the wish has differed
        self._since_probe: dict[int, int] = {}

    def decide(self, lanes: list[LaneView], prefill: int, controls: Controls,
               calibration: Calibration, draft_cost_ms: Callable[[list[int]], float]) -> Decision:
        batch = len(lanes)
        budget = controls.budget_override or calibration.budget
        if controls.policy == "off" or not lanes:
            return Decision([0] * batch, "off" if controls.policy == "off" else "no lanes")
        if batch > controls.spec_ceiling:
            return Decision([0] * batch, f"B={batch} > spec ceiling {controls.spec_ceiling}")
        limits, probes, muted = self._guard(lanes, controls.min_acceptance)
        if controls.policy == "fixed":
            ks = [min(controls.k, limit) for limit in limits]
            reason = f"fixed K={controls.k}"
        elif controls.policy == "uniform":
            k = max(0, (budget - batch) // batch)
            ks = self._hold(lanes, [min(k, limit) for limit in limits], limits)
            reason = f"uniform: floor((T={budget} - B={batch}) / B) = {k}"
        else:
            t_ms = calibration.t_ms
            if controls.budget_override:  # move the measured knee to the overridden budget
                scale = calibration.budget / controls.budget_override
                t_ms = lambda n: calibration.t_ms(n * scale)  # noqa: E731
            ks, reason = self._goodput(lanes, limits, prefill, budget, t_ms, draft_cost_ms)
            ks = self._hold(lanes, ks, limits)
        for i in probes:
            ks[i] = min(1, lanes[i].available)
        notes = []
        if muted:
            notes.append(f"{muted} lane(s) below min acceptance {controls.min_acceptance:g}")
        if probes:
            notes.append(f"{len(probes)} re-probed")
        return Decision(ks, reason + ("; " + ", ".join(notes) if notes else ""))

    def forget(self, seq_id: int) -> None:
        for table in (self._held, self._streak, self._since_probe):
            table.pop(seq_id, None)

    # -- guards --
    def _guard(self, lanes: list[LaneView], min_acceptance: float):
        """Per-lane draft limits after the minimum-acceptance guard, lanes due a probe, muted count."""
        limits, probes, muted = [], [], 0
        for i, lane in enumerate(lanes):
            low = any(c is not None and c.trials >= MIN_TRIALS and c.rate < min_acceptance
                      for c in (self.stats.lane(lane.seq_id), self.stats.category(lane.cat)))
            if not low:
                self._since_probe.pop(lane.seq_id, None)
                limits.append(lane.available)
                continue
            muted += 1
            limits.append(0)
            waited = self._since_probe.get(lane.seq_id, 0) + 1
            if waited >= PROBE_EVERY:
                probes.append(i)
                waited = 0
            self._since_probe[lane.seq_id] = waited
        return limits, probes, muted

    def _hold(self, lanes: list[LaneView], wished: list[int], limits: list[int]) -> list[int]:
        """Hysteresis: big changes apply at once, a change of one waits HOLD_STEPS steps. A lane
        capped by what its drafter can offer takes the cap without moving its held k."""
        ks = []
        for lane, wish, limit in zip(lanes, wished, limits):
            held = self._held.setdefault(lane.seq_id, wish)
            if wish == held or (wish == limit and wish < held):
                self._streak[lane.seq_id] = 0
                ks.append(wish)
                continue
            streak = self._streak.get(lane.seq_id, 0) + 1
            if abs(wish - held) >= 2 or streak >= HOLD_STEPS:
                self._held[lane.seq_id], streak = wish, 0
                ks.append(wish)
            else:
                ks.append(min(held, limit))
            self._streak[lane.seq_id] = streak
        return ks

    # -- goodput --
    def _goodput(self, lanes, limits, prefill, budget, t_ms, draft_cost_ms):
        batch = len(lanes)
        rates = [self.stats.estimate(lane.seq_id, lane.cat, PRIOR) for lane in lanes]
        ks = [0] * batch
        tokens = float(batch)
        elapsed = t_ms(batch + prefill)
        best = (tokens / elapsed, list(ks), tokens, elapsed)
        # max-heap of the next draft's expected gain a_i ** (k_i + 1) per lane
        heap = [(-rates[i], i) for i in range(batch) if limits[i] > 0 and rates[i] > 0]
        heapq.heapify(heap)
        drafted = 0
        while heap:
            neg_gain, i = heapq.heappop(heap)
            ks[i] += 1
            drafted += 1
            tokens += -neg_gain
            elapsed = t_ms(batch + drafted + prefill) + draft_cost_ms(ks)
            if tokens / elapsed > best[0] * (1 + 1e-9):
                best = (tokens / elapsed, list(ks), tokens, elapsed)
            if ks[i] < limits[i]:
                heapq.heappush(heap, (neg_gain * rates[i], i))
        rate, ks, tokens, elapsed = best
        mean_a = sum(rates) / batch
        reason = (f"goodput: B={batch} T={budget} mean a={mean_a:.2f} -> sum k={sum(ks)}, "
                  f"{tokens:.1f} tok in {elapsed:.1f} ms")
        return ks, reason
