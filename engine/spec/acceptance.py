"""Acceptance statistics, per lane and per workload category.

Two views of the same drafts:
- **per draft position**: of the drafts proposed at position j (1-based), how many were accepted —
  cumulative counts of verified drafts, for plots and reports;
- **rolling rates**, exponentially decayed, for the policies. Drafts are closer to runs than to
  independent coin flips: a prompt-lookup match is either the text being copied, and then runs
  on, or a coincidence that fails at once. So each lane is modelled as a two-state chain over its
  tokens: *copying* while the drafter's prediction of the last token was right, *cold* otherwise.
  `start` is the chance a prediction is right from cold, `cont` the chance it is right while
  copying; a lane's j-th draft is accepted with probability first * cont**(j-1), where `first` is
  `cont` for a copying lane and `start` for a cold one. A cold start is kept apart by how much
  context the drafter matched (a 2-gram match is often a coincidence, a 4-gram one the text
  being copied). `tokens` is the plain per-token rate the minimum-acceptance guard reads.

Evidence comes from verified drafts (`record`: k drafts, `acc` accepted; drafts after the first
rejected one were never tested, so they are not counted as failures) and from shadow checks
(`record`'s `next_hit`): the drafter's unsent prediction of the token after the sent drafts,
compared with the token the lane emitted there (spec/shadow.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Rate:
    """A decayed success/trial count (also goodput's speed-up: tokens per baseline token)."""

    successes: float = 0.0
    trials: float = 0.0

    def add(self, successes: float, trials: float, decay: float) -> None:
        self.successes = self.successes * decay + successes
        self.trials = self.trials * decay + trials

    def shrunk(self, prior: float, weight: float) -> float:
        """The rate shrunk towards `prior` by `weight` pseudo-trials."""
        return (self.successes + prior * weight) / (self.trials + weight)

    @property
    def value(self) -> float | None:
        return self.successes / self.trials if self.trials > 0 else None


@dataclass(slots=True)
class AcceptanceCounter:
    decay: float = 0.95           # weight kept by older evidence at each update (~20 steps)
    tokens: Rate = field(default_factory=Rate)  # every tested prediction
    # Predictions made from cold, by the drafter's match size (prompt lookup: the n of the
    # n-gram it matched; 0 for a model's drafts). In code edits at 8 lanes a cold 2-gram match's
    # first draft was right 0.40 of the time, a 3- or 4-gram's 0.65.
    start: dict[int, Rate] = field(default_factory=dict)
    cont: Rate = field(default_factory=Rate)    # predictions made while copying
    proposed_at: list[int] = field(default_factory=list)  # [position] drafts proposed
    accepted_at: list[int] = field(default_factory=list)  # [position] drafts accepted
    steps: int = 0                # verifications with at least one draft

    def update(self, k: int, acc: int, copying: bool, match: int = 0) -> None:
        """k verified drafts, `acc` accepted, sent while the lane was copying or cold, proposed
        from a match of `match` tokens."""
        if not 0 <= acc <= k:
            raise ValueError(f"accepted {acc} outside 0..{k}")
        if k == 0:
            return
        missed = 1 if acc < k else 0
        self.tokens.add(acc, acc + missed, self.decay)
        if copying:
            self.cont.add(acc, acc + missed, self.decay)
        else:
            self.start.setdefault(match, Rate()).add(1 if acc else 0, 1, self.decay)
            if acc and k > 1:
                self.cont.add(acc - 1, acc - 1 + missed, self.decay)
        self.steps += 1
        if len(self.proposed_at) < k:
            grow = k - len(self.proposed_at)
            self.proposed_at += [0] * grow
            self.accepted_at += [0] * grow
        for j in range(k):
            self.proposed_at[j] += 1
            self.accepted_at[j] += 1 if j < acc else 0

    def observe(self, hit: bool, copying: bool, match: int = 0) -> None:
        """One shadow-checked prediction (not a sent draft: rates only)."""
        self.tokens.add(int(hit), 1, self.decay)
        rate = self.cont if copying else self.start.setdefault(match, Rate())
        rate.add(int(hit), 1, self.decay)

    @property
    def trials(self) -> float:
        """Decayed count of tested predictions."""
        return self.tokens.trials

    @property
    def rate(self) -> float | None:
        """Rolling per-token acceptance rate; None before anything was tested."""
        return self.tokens.value

    def per_position(self) -> list[float]:
        """Fraction of drafts accepted at each draft position (index 0 = first draft)."""
        return [a / p for a, p in zip(self.accepted_at, self.proposed_at)]


@dataclass(frozen=True, slots=True)
class Estimate:
    """What a policy plans with: the j-th draft (1-based) is accepted w.p. first * cont**(j-1)."""

    first: float
    cont: float

    def gain(self, j: int) -> float:
        return self.first * self.cont ** (j - 1)

    def expected(self, k: int) -> float:
        """Expected accepted drafts out of k."""
        return sum(self.gain(j) for j in range(1, k + 1))


class AcceptanceStats:
    """Counters per lane (sequence id) and per category, and whether each lane is copying."""

    def __init__(self, decay: float = 0.95) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"decay must be in (0, 1), got {decay}")
        self.decay = decay
        self.lanes: dict[int, AcceptanceCounter] = {}
        self.categories: dict[str, AcceptanceCounter] = {}
        self._copying: dict[int, bool] = {}

    def record(self, seq_id: int, cat: str, k: int, acc: int,
               next_hit: bool | None = None, match: int = 0) -> None:
        """One verified lane: `acc` of its `k` sent drafts accepted. `next_hit`: whether the
        drafter's unsent prediction of the token after the drafts matched the token emitted there
        (None: no prediction, or a draft was rejected so that token was never predicted).
        `match`: what the proposal was matched on (Draft.match)."""
        if k == 0 and next_hit is None:  # nothing predicted the token this lane just emitted
            self._copying[seq_id] = False
            return
        counters = (self.lanes.setdefault(seq_id, AcceptanceCounter(self.decay)),
                    self.categories.setdefault(cat, AcceptanceCounter(self.decay)))
        copying = self._copying.get(seq_id, False)
        if k:
            for counter in counters:
                counter.update(k, acc, copying, match)
            copying = acc == k  # all accepted: as far as anyone knows, the copy runs on
        if acc == k and next_hit is not None:
            for counter in counters:
                counter.observe(next_hit, copying, match)
            copying = next_hit
        self._copying[seq_id] = copying

    def lane(self, seq_id: int) -> AcceptanceCounter | None:
        return self.lanes.get(seq_id)

    def category(self, cat: str) -> AcceptanceCounter | None:
        return self.categories.get(cat)

    def copying(self, seq_id: int) -> bool:
        return self._copying.get(seq_id, False)

    def estimate(self, seq_id: int, cat: str, prior: Estimate = Estimate(0.5, 0.5),
                 weight: float = 4.0, match: int = 0) -> Estimate:
        """A lane's rates for planning: its rolling counts shrunk towards its category's rates
        (or `prior` without one) by `weight` pseudo-trials, so a few unlucky drafts do not pin a
        lane at zero and a new lane starts from what its category does. `prior.first` is the
        prior of `start`; a cold lane's `first` is the start rate of its proposal's `match`."""
        counters = [c for c in (self.categories.get(cat), self.lanes.get(seq_id)) if c]
        cont = prior.cont
        for counter in counters:
            cont = counter.cont.shrunk(cont, weight)
        if self.copying(seq_id):
            return Estimate(first=cont, cont=cont)
        start = prior.first
        for counter in counters:
            start = counter.start.get(match, Rate()).shrunk(start, weight)
        return Estimate(first=start, cont=cont)

    def forget(self, seq_id: int) -> None:
        self.lanes.pop(seq_id, None)
        self._copying.pop(seq_id, None)
