"""Speculation policies: how many drafts each decoding lane gets this step (DESIGN.md §1).

- off: none; fixed: K for every lane; uniform: the seed rule k = floor((T - B) / B);
- goodput (default): per-lane k maximising expected emitted tokens per second, from each lane's
  estimated acceptance and the measured step time (spec/goodput.py, which plans the drafts).

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

Looking costs time too: the drafter's offers and goodput's plan took about 0.25 ms of a 21 ms
step at 16 chat lanes (1.2 %), and there nine plans in ten send nothing. Past the budget, where
every draft costs what a lane does and must pay for itself, the look must too. So goodput keeps,
per batch size, the time its plans were expected to save (their accepted drafts at the run's
rate, less what the drafts add to the step; 0 for a plan that sends none) and the time its looks
took. After a look that sends nothing, while looks save less than they take, the next look comes
2, 4, then 8 steps later (LOOK_MAX; a step without a look leaves the plan's state as it was). A
look that sends drafts, or looks that pay, make it every step again; a change of batch size
brings a look at once. Within the budget goodput looks every step: a draft there is nearly free,
and a skipped look costs more than its time, since the shadow checks it would have made are what
the next plan knows a lane's run by (chat at 2 lanes, T = 6: 0.969x the best other policy with
looks spaced there). With a virtual clock (no measured times) looks are never spaced.

Guards for every policy: no drafting when the batch exceeds the speculation ceiling; a lane or
category whose rolling acceptance is below the minimum stops drafting (re-probed on the same
backed-off clock with one draft for fixed and uniform, unless shadow checks watch it); and
(adaptive policies) hysteresis, so a change of k by one applies only after the wish has persisted
for HOLD_STEPS steps. Starting and stopping (k rising from or falling to 0) apply at once: the
thrash worth damping is k wobbling on a drafting lane, while a lane that should start drafting
loses a step's tokens for every step it waits, and held drafts that do not pay are pure cost.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from engine.controls import Controls
from engine.spec.acceptance import AcceptanceStats, Estimate, Rate
from engine.spec.calibration import Calibration
from engine.spec.goodput import expected_accepted, fill_free, plan_drafts, probe_size
from engine.spec.live_cost import Overhead, query_groups

MIN_TRIALS = 4      # tested drafts before a category's rate is trusted (or may switch it off)
PROBE_EVERY = 4     # idle steps before the first re-probe of a lane (a failed first look
                    # often lands before the copying starts)
PROBE_MAX = 256     # longest wait between probes, however often they failed
HOLD_STEPS = 3      # steps a one-step change of k must persist before it is applied
LOOK_MAX = 8        # most steps between goodput's looks while they do not pay
LOOK_DECAY = 0.9    # weight kept by older looks' savings and times (~10 looks)
SPEEDUP_DECAY = 0.9  # goodput's recent speed-up, which prices its milliseconds: ~10 steps
MIN_CURVE_SHARE = 0.25  # least share of the calibrated t(N) a step is planned to take
# What every rate of an estimate is shrunk towards when nothing is known. Code edits run on
# (prompt-lookup runs went on 0.85-0.93 of the time with SmolLM2-135M), but a prior of 0.8 made
# goodput draft too much for the swarm's JSON and chat agents (bench swarm 57-60 tok/s against 66
# with 0.5).
PRIOR = 0.5
NOTHING_TO_DRAFT = Estimate((0.0,))  # a lane's estimate when its plan allows no drafts


@dataclass(slots=True)
class LaneView:
    """What a policy knows about one decoding lane."""

    seq_id: int
    cat: str
    available: int  # drafts the drafter can propose now (already capped by controls.k)
    match: int = 0  # context tokens the proposal was matched on (Draft.match)

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


@dataclass(slots=True)
class LookPace:
    """Whether goodput's looks pay at one batch size (drafts cost more the more lanes there are):
    the ms its plans were expected to save and the ms the looks took, per look, and how far
    apart the looks are."""

    saved: Rate = field(default_factory=Rate)
    took: Rate = field(default_factory=Rate)
    every: int = 1  # steps from one look to the next
    skip: int = 0   # steps still to go without a look


class SpeculationPolicy:
    """Stateful across steps (probe clocks, hysteresis); one instance per engine."""

    def __init__(self, stats: AcceptanceStats) -> None:
        self.stats = stats
        self._held: dict[int, int] = {}     # seq_id -> k in force (hysteresis)
        self._streak: dict[int, int] = {}   # seq_id -> steps the wish has differed
        self._idle: dict[int, int] = {}     # seq_id -> idle steps since the last probe
        self._wait: dict[int, int] = {}     # seq_id -> idle steps due before the next probe
        self._speedup = Rate()  # goodput's planned tokens per token the batch alone would emit
        self._looks: dict[int, LookPace] = {}  # batch size -> whether goodput's looks pay
        self._batch = 0  # the batch size of the last step asked about

    def decide(self, lanes: list[LaneView], prefill: int, controls: Controls,
               calibration: Calibration, draft_cost_ms: Callable[[list[int]], float],
               shadowed: bool = False,
               overhead: Callable[[], Overhead] = Overhead) -> Decision:
        """The whole policy for a step: `idle`'s decision, else `plan`'s (the executor asks the
        two apart, and the drafter for its offers between them)."""
        return (self.idle([lane.seq_id for lane in lanes], controls, calibration)
                or self.plan(lanes, prefill, controls, calibration, draft_cost_ms, shadowed,
                             overhead))

    def plan(self, lanes: list[LaneView], prefill: int, controls: Controls,
             calibration: Calibration, draft_cost_ms: Callable[[list[int]], float],
             shadowed: bool = False,
             overhead: Callable[[], Overhead] = Overhead) -> Decision:
        """The decision for a step `idle` had none for (the executor asks the drafter for its
        offers in between). `shadowed`: the drafter's unsent proposals are checked against the
        output (free evidence for idle lanes), so no lane needs a probe. `overhead`: what a live
        step takes beyond the calibrated t(N) (spec/live_cost.py), asked for only when there is
        a plan to make (the live fit solves a small system each time)."""
        batch = len(lanes)
        seq_ids = [lane.seq_id for lane in lanes]
        # A lane with nothing on offer gets no drafts under any policy, so only the others are
        # planned: in chat at 16 lanes one or two a step, where every lane's bookkeeping in
        # the plan cost goodput a share of the step that off does not pay.
        offering = [i for i, lane in enumerate(lanes) if lane.available]
        if not offering:
            if controls.policy == "goodput":
                self._pace(batch).saved.add(0.0, 1, LOOK_DECAY)
            return self._rest(seq_ids, controls.policy,
                              f"{controls.policy}: B={batch}, no lane has drafts to offer")
        self._park([lane.seq_id for lane in lanes if not lane.available], controls.policy)
        decision = self._plan_offers([lanes[i] for i in offering], batch, prefill, controls,
                                     calibration, draft_cost_ms, shadowed, overhead)
        ks = [0] * batch
        for i, k in zip(offering, decision.ks):
            ks[i] = k
        return Decision(ks, decision.reason)

    def _plan_offers(self, lanes: list[LaneView], batch: int, prefill: int, controls: Controls,
                     calibration: Calibration, draft_cost_ms: Callable[[list[int]], float],
                     shadowed: bool, overhead: Callable[[], Overhead]) -> Decision:
        """The decision for the lanes with drafts on offer, in a batch of `batch` lanes whose
        others send none: they are priced as one more query group of a single query."""
        parked = {0} if batch > len(lanes) else set()  # the draft counts of the other lanes
        budget = controls.budget_override or calibration.budget
        excess = overhead()
        limits, muted = self._guard(lanes, controls.min_acceptance)
        scale = calibration.budget / controls.budget_override if controls.budget_override else 1

        priced = {}  # (drafts, groups, drafter ms) -> planned ms: a plan is priced again and again

        def planned_ms(drafts: int, groups: int, drafter_ms: float) -> float:
            """Planned time of a step with `drafts` drafts in `groups` query lengths: the
            measured decode shapes (or, under an overridden budget, the one-lane curve with its
            knee moved there), what live steps take beyond them, and the drafter's own time."""
            shape = (drafts, groups, drafter_ms)
            if shape not in priced:
                curve = (calibration.t_ms((batch + prefill + drafts) * scale) if scale != 1 else
                         calibration.step_ms(batch, drafts, prefill))
                # The live excess can be negative (a machine faster than at calibration), fitted
                # at recent batch sizes; extrapolated far past them it must not plan a step at 0.
                priced[shape] = max(curve + excess.ms(batch, drafts, groups),
                                    MIN_CURVE_SHARE * curve) + drafter_ms
            return priced[shape]

        def step_ms(ks: list[int]) -> float:
            return planned_ms(sum(ks), query_groups([*ks, *parked]), draft_cost_ms(ks))

        fresh = rates = None  # goodput's lanes with nothing to plan with, and its estimates
        unplanned = 0  # free drafts goodput gives those lanes outside its plan
        if controls.policy == "fixed":
            ks = [min(controls.k, limit) for limit in limits]
            reason = f"fixed K={controls.k}"
        elif controls.policy == "uniform":
            k = _uniform_k(budget, batch)
            ks = self._hold(lanes, [min(k, limit) for limit in limits], limits)
            reason = f"uniform: floor((T={budget} - B={batch}) / B) = {k}"
        else:
            fresh = [self._fresh(lane) for lane in lanes]
            planned = [0 if new else limit for new, limit in zip(fresh, limits)]
            rates = [self.stats.estimate(lane.seq_id, lane.cat, PRIOR, match=lane.match,
                                         depth=limit) if limit else NOTHING_TO_DRAFT
                     for lane, limit in zip(lanes, planned)]
            alone = batch / step_ms([0] * len(lanes))  # tokens per ms without drafts
            least_drafter_ms = draft_cost_ms([1])

            # A lane the plan cannot give drafts keeps one query, apart from the drafting lanes
            # (in chat at 16 lanes, most of them): then no plan with drafts has fewer than two.
            least_groups = 2 if parked or 0 in planned else 1

            def least_ms(drafts: int) -> float:
                """The least a step with `drafts` drafts takes: in the fewest query groups, with
                the drafter's time for one. The decode shapes and the live terms grow with drafts
                and a drafter's time with its longest lane; only the groups can fall (lanes that
                come to draft alike)."""
                return planned_ms(drafts, least_groups, least_drafter_ms)
            # The bound holds where planned times rise with drafts: not with a prefill chunk in
            # the step (its share of the curve can fall) nor past the measured batch shapes.
            bounded = scale != 1 or (not prefill and calibration.rises_with_drafts(batch))
            ks, reason, saved_ms = plan_drafts(rates, planned, batch, budget, step_ms, alone,
                                               least_ms if bounded else None, parked,
                                               self._speedup.value)
            self._pace(batch).saved.add(saved_ms, 1, LOOK_DECAY)
            ks = self._hold(lanes, ks, planned)
            if shadowed:  # no guessing where it costs: fresh lanes wait for their shadow checks
                planned_drafts = sum(ks)
                fill_free(ks, [limit if new else 0 for new, limit in zip(fresh, limits)],
                          step_ms, calibration.eps)
                unplanned = sum(ks) - planned_drafts
        probes = [] if shadowed else self._probes(lanes, ks, muted, fresh)
        for i in probes:
            if controls.policy == "goodput":
                ks[i] = probe_size(lanes[i].available, i, ks, step_ms, calibration.eps)
            else:
                ks[i] = min(1, lanes[i].available)
        if rates is not None:
            self._speedup.add(batch + expected_accepted(rates, ks), alone * step_ms(ks),
                              SPEEDUP_DECAY)
        notes = []
        if any(muted):
            notes.append(f"{sum(muted)} lane(s) below min acceptance {controls.min_acceptance:g}")
        if probes:
            notes.append(f"{len(probes)} probed")
        if unplanned:
            notes.append(f"{unplanned} free draft(s) to lanes without evidence")
        return Decision(ks, reason + ("; " + ", ".join(notes) if notes else ""))

    def idle(self, seq_ids: list[int], controls: Controls,
             calibration: Calibration) -> Decision | None:
        """The decision for a step in which no lane may draft, whatever its drafter would offer,
        else None. The step then need not ask the drafter: at 16 chat lanes, uniform's lookups
        (its k is 0 past the budget) cost it 1-1.3 % of the step against off."""
        batch = len(seq_ids)
        if controls.policy == "off" or not seq_ids:
            return Decision([0] * batch, "off" if controls.policy == "off" else "no lanes")
        budget = controls.budget_override or calibration.budget
        if batch > controls.spec_ceiling:
            reason = f"B={batch} > spec ceiling {controls.spec_ceiling}"
        elif controls.policy == "uniform" and _uniform_k(budget, batch) == 0:
            reason = f"uniform: floor((T={budget} - B={batch}) / B) = 0"
        elif controls.policy == "goodput" and self._skips_look(batch, budget):
            pace = self._looks[batch]
            self._speedup.add(batch, batch, SPEEDUP_DECAY)
            return Decision([0] * batch, f"goodput: B={batch}, no look this step: looks saved "
                            f"{pace.saved.value:.3f} ms, took {pace.took.value:.3f} ms; one in "
                            f"{pace.every} steps")
        else:
            return None
        return self._rest(seq_ids, controls.policy, reason)

    def looked(self, batch: int, ms: float, drafted: bool) -> None:
        """What goodput's last look at `batch` lanes (the drafter's offers and the plan) took,
        and whether it sent drafts: while looks that send none save less than they take, they
        come further apart."""
        pace = self._pace(batch)
        pace.took.add(ms, 1, LOOK_DECAY)
        saved = pace.saved.value
        if drafted or saved is None or saved >= pace.took.value:
            pace.every = 1
        else:
            pace.every = min(2 * pace.every, LOOK_MAX)
        pace.skip = pace.every - 1

    def _skips_look(self, batch: int, budget: int) -> bool:
        """Whether goodput skips this step's look: never within the budget, and not after a
        change of batch size: lanes came or went, and one that came may be about to copy (an
        agent back from a tool call goes on from what it read)."""
        changed, self._batch = batch != self._batch, batch
        pace = self._looks.get(batch)
        if changed or batch <= budget or pace is None or not pace.skip:
            return False  # the look that follows sets the pace's skip anew (`looked`)
        pace.skip -= 1
        return True

    def _pace(self, batch: int) -> LookPace:
        pace = self._looks.get(batch)
        if pace is None:
            pace = self._looks[batch] = LookPace()
        return pace

    def _rest(self, seq_ids: list[int], policy: str, reason: str) -> Decision:
        """What a plan decides when no lane drafts (in chat at B >= 8 many steps have nothing
        to offer), without its cost (a tenth of a millisecond, 0.4 % of a chat step at B=16):
        the lanes parked, and a step at the batch's own speed for goodput's recent speed-up."""
        self._park(seq_ids, policy)
        if policy == "goodput":
            self._speedup.add(len(seq_ids), len(seq_ids), SPEEDUP_DECAY)
        return Decision([0] * len(seq_ids), reason)

    def _park(self, seq_ids: list[int], policy: str) -> None:
        """What a plan keeps for lanes that may not draft: the k in force kept as a capped
        lane's is, and no probe due."""
        for seq_id in seq_ids:
            if policy != "fixed":
                self._held.setdefault(seq_id, 0)
                self._streak[seq_id] = 0
            self._idle.pop(seq_id, None)
            self._wait.pop(seq_id, None)

    def forget(self, seq_id: int) -> None:
        for table in (self._held, self._streak, self._idle, self._wait):
            table.pop(seq_id, None)

    # -- guards and exploration --
    def _guard(self, lanes: list[LaneView], min_acceptance: float):
        """Per-lane draft limits after the minimum-acceptance guard, and which lanes it muted."""
        limits, muted = [], []
        for lane in lanes:
            low = any(
                c is not None and c.trials >= MIN_TRIALS and c.rate < min_acceptance
                for c in (self.stats.lane(lane.seq_id), self.stats.category(lane.cat)))
            limits.append(0 if low else lane.available)
            muted.append(low)
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
            idle = ks[i] == 0 and (muted[i] or fresh is not None)
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
        HOLD_STEPS steps. A lane capped by what its drafter can offer takes the cap without moving
        its held k."""
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


def _uniform_k(budget: int, batch: int) -> int:
    """The seed rule: the budget left after the batch's own tokens, shared equally."""
    return max(0, (budget - batch) // batch)
