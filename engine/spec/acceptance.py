"""Acceptance statistics, per lane and per workload category.

Two views of the same verified drafts:
- **per draft position**: of the drafts proposed at position j (1-based), how many were accepted —
  cumulative counts, for plots and reports;
- **rolling rates**, exponentially decayed, for the policies: the per-token rate (accepted over
  tested drafts; the minimum-acceptance guard reads it) and the two rates the planner uses,
  because drafts are closer to all-or-nothing than to independent coin flips (a prompt-lookup
  match is either the text being copied, and then runs on, or a coincidence that fails at once):
  `first`, the chance the first draft is accepted, and `cont`, the chance a draft is accepted
  given the one before it was. The j-th draft is then accepted with probability first * cont**(j-1).
  A step with k drafts and `acc` accepted tests `acc + (acc < k)` drafts: drafts after the first
  rejected one were never tested, so they are not counted as failures.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Rate:
    """A decayed success/trial count."""

    successes: float = 0.0
    trials: float = 0.0

    def add(self, successes: int, trials: int, decay: float) -> None:
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
    decay: float = 0.95           # weight kept by older steps at each update (~20 steps)
    tokens: Rate = field(default_factory=Rate)  # every tested draft
    first: Rate = field(default_factory=Rate)   # first drafts
    cont: Rate = field(default_factory=Rate)    # drafts after an accepted one
    proposed_at: list[int] = field(default_factory=list)  # [position] drafts proposed
    accepted_at: list[int] = field(default_factory=list)  # [position] drafts accepted
    steps: int = 0                # verifications with at least one draft

    def update(self, k: int, acc: int) -> None:
        if not 0 <= acc <= k:
            raise ValueError(f"accepted {acc} outside 0..{k}")
        if k == 0:
            return
        missed = 1 if acc < k else 0
        self.tokens.add(acc, acc + missed, self.decay)
        self.first.add(1 if acc else 0, 1, self.decay)
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

    @property
    def trials(self) -> float:
        """Decayed count of tested drafts."""
        return self.tokens.trials

    @property
    def rate(self) -> float | None:
        """Rolling per-token acceptance rate; None before any draft was tested."""
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
    """Counters per lane (sequence id) and per category, fed once per verified lane."""

    def __init__(self, decay: float = 0.95) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"decay must be in (0, 1), got {decay}")
        self.decay = decay
        self.lanes: dict[int, AcceptanceCounter] = {}
        self.categories: dict[str, AcceptanceCounter] = {}

    def record(self, seq_id: int, cat: str, k: int, acc: int) -> None:
        self.lanes.setdefault(seq_id, AcceptanceCounter(self.decay)).update(k, acc)
        self.categories.setdefault(cat, AcceptanceCounter(self.decay)).update(k, acc)

    def lane(self, seq_id: int) -> AcceptanceCounter | None:
        return self.lanes.get(seq_id)

    def category(self, cat: str) -> AcceptanceCounter | None:
        return self.categories.get(cat)

    def estimate(self, seq_id: int, cat: str, prior: Estimate = Estimate(0.5, 0.5),
                 weight: float = 4.0) -> Estimate:
        """A lane's rates for planning: its rolling counts shrunk towards its category's rates
        (or `prior` without one) by `weight` pseudo-trials, so a few unlucky drafts do not pin a
        lane at zero and a new lane starts from what its category does."""
        category, lane = self.categories.get(cat), self.lanes.get(seq_id)
        rates = []
        for part in ("first", "cont"):
            base = getattr(prior, part)
            if category is not None:
                base = getattr(category, part).shrunk(base, weight)
            rates.append(getattr(lane, part).shrunk(base, weight) if lane is not None else base)
        return Estimate(*rates)

    def forget(self, seq_id: int) -> None:
        self.lanes.pop(seq_id, None)
