"""Speculation policies: how many drafts each decoding lane gets this step (DESIGN.md §1).

- off: none; fixed: K for every lane; uniform: the seed rule k = floor((T - B) / B);
- goodput (default): per-lane k maximising expected emitted tokens per second. The j-th draft of
  lane i is accepted with probability first_i * cont_i ** (j - 1) (acceptance.Estimate: `first`
  is high while the lane is copying), so a step emits B + the sum of those over every draft in
  t(B + sum k + prefill) + drafting ms, where t is the calibrated curve plus the live overhead
  (spec/live_cost.py). Drafts are added greedily, best marginal gain first; the allocation kept
  is the prefix of that order with the best rate (so a curve with a cost jump from 1 to 2 rows,
  or a draft model whose first pass is costly, can still pay off over several drafts). Where the
  curve is flat every draft with positive gain is nearly free; past it a draft must pay for
  itself.

Lanes that do not draft still need evidence, or a lane the plan parks could never come back.
With a drafter whose proposals cost nothing (prompt lookup) the engine checks the prediction it
did not send against what the lane then emitted (spec/shadow.py): that is the acceptance the
draft would have had, for free, so such lanes are never probed, and a lane with nothing to go on
yet (no evidence of its own, too little in its category) drafts only as far as drafts are free
(the pass costs at most eps more than without them), until its shadow checks come in. With a
costly drafter (a draft model) goodput explores by probing: a lane with no history of its own,
in a category without enough history to go on, is probed before it is planned with a guessed
rate; a lane the plan leaves idle is probed again now and then. A probe gets as many drafts as
add no more than (1 + eps) times one draft's cost, and each probe that does not win the lane a
place in the plan doubles the wait before the next (PROBE_EVERY, 2x, ... PROBE_MAX steps), so a
stream that never accepts costs a vanishing share of the step time.

Guards for every policy: no drafting when the batch exceeds the speculation ceiling; a lane or
category whose rolling acceptance is below the minimum stops drafting (re-probed on the same
backed-off clock with one draft for fixed and uniform, unless shadow checks watch it); and
(adaptive policies) hysteresis, so a change of k by one applies only after the wish has persisted
for HOLD_STEPS steps. Starting and stopping (k rising from or falling to 0) apply at once: the
thrash worth damping is k wobbling on a drafting lane, while a lane that should start drafting
loses a step's tokens for every step it waits, and held drafts that do not pay are pure cost.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Callable

from engine.controls import Controls
from engine.spec.acceptance import AcceptanceStats, Estimate
from engine.spec.calibration import Calibration
from engine.spec.live_cost import Overhead

MIN_TRIALS = 4      # tested drafts before a category's rate is trusted (or may switch it off)
PROBE_EVERY = 4     # idle steps before the first re-probe of a lane (a failed first look
                    # often lands before the copying starts)
PROBE_MAX = 256     # longest wait between probes, however often they failed
HOLD_STEPS = 3      # steps a one-step change of k must persist before it is applied
# What an estimate is shrunk towards when nothing is known: a coin flip for a prediction from cold,
# and runs that go on once started (prompt-lookup runs went on 0.85-0.93 of the time in code edits
# and chat with SmolLM2-135M).
PRIOR = Estimate(first=0.5, cont=0.8)


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
        self._idle: dict[int, int] = {}     # seq_id -> idle steps since the last probe
        self._wait: dict[int, int] = {}     # seq_id -> idle steps due before the next probe

    def decide(self, lanes: list[LaneView], prefill: int, controls: Controls,
               calibration: Calibration, draft_cost_ms: Callable[[list[int]], float],
               shadowed: bool = False, overhead: Overhead = Overhead()) -> Decision:
        """`shadowed`: the drafter's unsent proposals are checked against the output (free
        evidence for idle lanes), so no lane needs a probe. `overhead`: what a live step takes
        beyond the calibrated t(N) (spec/live_cost.py)."""
        batch = len(lanes)
        budget = controls.budget_override or calibration.budget
        if controls.policy == "off" or not lanes:
            return Decision([0] * batch, "off" if controls.policy == "off" else "no lanes")
        if batch > controls.spec_ceiling:
            return Decision([0] * batch, f"B={batch} > spec ceiling {controls.spec_ceiling}")
        limits, muted = self._guard(lanes, controls.min_acceptance)
        scale = calibration.budget / controls.budget_override if controls.budget_override else 1

        def t_ms(n: float) -> float:
            """Planned time of a pass of n tokens: the measured curve (its knee moved to an
            overridden budget) plus what live steps take beyond it."""
            return calibration.t_ms(n * scale) + overhead.ms(batch, n - batch - prefill)

        fresh = None  # goodput's lanes with nothing to plan with
        if controls.policy == "fixed":
            ks = [min(controls.k, limit) for limit in limits]
            reason = f"fixed K={controls.k}"
        elif controls.policy == "uniform":
            k = max(0, (budget - batch) // batch)
            ks = self._hold(lanes, [min(k, limit) for limit in limits], limits)
            reason = f"uniform: floor((T={budget} - B={batch}) / B) = {k}"
        else:
            fresh = [self._fresh(lane) for lane in lanes]
            planned = [0 if new else limit for new, limit in zip(fresh, limits)]
            ks, reason = self._goodput(lanes, planned, prefill, budget, t_ms, draft_cost_ms)
            ks = self._hold(lanes, ks, planned)
            if shadowed:  # no guessing where it costs: fresh lanes wait for their shadow checks
                fresh_limits = [limit if new else 0 for new, limit in zip(fresh, limits)]
                _fill_within(ks, fresh_limits, _slack(t_ms, batch + prefill, calibration.eps,
                                                      sum(ks) + sum(fresh_limits)))
        probes = [] if shadowed else self._probes(lanes, ks, muted, fresh)
        tokens = batch + prefill + sum(ks)
        for i in probes:
            if controls.policy == "goodput":
                ks[i] = _probe_size(lanes[i].available, i, ks, tokens, t_ms, draft_cost_ms,
                                    calibration.eps)
            else:
                ks[i] = min(1, lanes[i].available)
            tokens += ks[i]
        notes = []
        if any(muted):
            notes.append(f"{sum(muted)} lane(s) below min acceptance {controls.min_acceptance:g}")
        if probes:
            notes.append(f"{len(probes)} probed")
        return Decision(ks, reason + ("; " + ", ".join(notes) if notes else ""))

    def forget(self, seq_id: int) -> None:
        for table in (self._held, self._streak, self._idle, self._wait):
            table.pop(seq_id, None)

    # -- guards and exploration --
    def _guard(self, lanes: list[LaneView], min_acceptance: float):
        """Per-lane draft limits after the minimum-acceptance guard, and which lanes it muted."""
        limits, muted = [], []
        for lane in lanes:
            low = any(c is not None and c.trials >= MIN_TRIALS and c.rate < min_acceptance
                      for c in (self.stats.lane(lane.seq_id), self.stats.category(lane.cat)))
            limits.append(0 if low else lane.available)
            muted.append(low and lane.available > 0)
        return limits, muted

    def _fresh(self, lane: LaneView) -> bool:
        """Nothing to plan with: no tested draft of its own, too few in its category."""
        own, category = self.stats.lane(lane.seq_id), self.stats.category(lane.cat)
        return (own is None or own.trials == 0) and (category is None
                                                     or category.trials < MIN_TRIALS)

    def _probes(self, lanes: list[LaneView], ks: list[int], muted: list[bool],
                fresh: list[bool] | None) -> list[int]:
        """Lanes to probe this step. A lane drafting by plan resets its clock; an idle lane that
        could draft (muted, or planned at 0 by goodput) waits PROBE_EVERY steps, doubled after
        each probe; a fresh lane is probed at once (goodput only)."""
        due = []
        for i, lane in enumerate(lanes):
            idle = ks[i] == 0 and lane.available > 0 and (muted[i] or fresh is not None)
            if not idle:
                self._idle.pop(lane.seq_id, None)
                self._wait.pop(lane.seq_id, None)
                continue
            wait = self._wait.setdefault(lane.seq_id, PROBE_EVERY)
            idle_steps = self._idle.get(lane.seq_id, 0) + 1
            if fresh is not None and fresh[i]:  # the first look, not a failed probe
                due.append(i)
                idle_steps = 0
            elif idle_steps >= wait:
                due.append(i)
                idle_steps = 0
                self._wait[lane.seq_id] = min(2 * wait, PROBE_MAX)
            self._idle[lane.seq_id] = idle_steps
        return due

    def _hold(self, lanes: list[LaneView], wished: list[int], limits: list[int]) -> list[int]:
        """Hysteresis: big changes, starting and stopping apply at once, a change of one waits
        HOLD_STEPS steps. A lane capped by what its drafter can offer takes the cap without moving its held k."""
        ks = []
        for lane, wish, limit in zip(lanes, wished, limits):
            held = self._held.setdefault(lane.seq_id, wish)
            if wish == held or 0 in (wish, held) or (wish == limit and wish < held):
                self._streak[lane.seq_id] = 0
                self._held[lane.seq_id] = held if wish == limit and wish < held else wish
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
        # max-heap of each lane's next draft's expected gain, first * cont ** k
        heap = [(-rates[i].first, i) for i in range(batch) if limits[i] > 0 and rates[i].first > 0]
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
                heapq.heappush(heap, (neg_gain * rates[i].cont, i))
        rate, ks, tokens, elapsed = best
        first = sum(r.first for r in rates) / batch
        cont = sum(r.cont for r in rates) / batch
        reason = (f"goodput: B={batch} T={budget} mean first={first:.2f} cont={cont:.2f} -> "
                  f"sum k={sum(ks)}, {tokens:.1f} tok in {elapsed:.1f} ms")
        return ks, reason


def _slack(t_ms: Callable[[float], float], base: int, eps: float, most: int) -> int:
    """Tokens (up to `most`) a pass of `base` tokens can take on for at most eps more time: the
    budget's T - B on a roofline; on a curve with a cost jump, the flat stretch past it."""
    room = 0
    while room < most and t_ms(base + room + 1) <= (1 + eps) * t_ms(base):
        room += 1
    return room


def _fill_within(ks: list[int], limits: list[int], room: int) -> None:
    """Give lanes drafts one at a time, round robin up to `limits`, while the pass takes at most
    `room` drafts in all: such drafts are free, whatever they are worth."""
    room -= sum(ks)
    while room > 0:
        takers = [i for i, limit in enumerate(limits) if ks[i] < limit][:room]
        if not takers:
            return
        for i in takers:
            ks[i] += 1
        room -= len(takers)


def _probe_size(available: int, lane: int, ks: list[int], tokens: int,
                t_ms: Callable[[float], float], draft_cost_ms: Callable[[list[int]], float],
                eps: float) -> int:
    """Most drafts for `lane` whose extra cost, on top of the `tokens` already in the pass, is at
    most (1 + eps) x that of one draft: past a cost jump (1 -> 2 rows on a CPU) the curve is flat,
    so a longer probe costs what a one-draft probe does and tells more; on a rising stretch it
    is one draft."""
    def cost(k: int) -> float:
        trial = list(ks)
        trial[lane] = k
        return t_ms(tokens + k) + draft_cost_ms(trial)

    if available <= 0:
        return 0
    base = cost(0)
    limit, size = base + (1 + eps) * (cost(1) - base), 1
    while size < available and cost(size + 1) <= limit:
        size += 1
    return size
