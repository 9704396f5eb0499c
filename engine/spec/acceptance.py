"""Acceptance statistics, per lane and per workload category.

Two views of the same verified drafts:
- **per draft position**: of the drafts proposed at position j (1-based), how many were accepted —
  cumulative counts, for plots and reports;
- **rolling rate**: the per-token acceptance probability a (the chance the next draft is accepted
  given the previous one was), as an exponentially decayed estimate, for the policies. A step with
  k drafts and `acc` accepted gives `acc` successes in `acc + (acc < k)` trials: drafts after the
  first rejected one were never tested, so they are not counted as failures.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class AcceptanceCounter:
    decay: float = 0.9            # weight kept by older steps at each update
    successes: float = 0.0        # decayed accepted drafts
    trials: float = 0.0           # decayed tested drafts
    proposed_at: list[int] = field(default_factory=list)  # [position] drafts proposed
    accepted_at: list[int] = field(default_factory=list)  # [position] drafts accepted
    steps: int = 0                # verifications with at least one draft

    def update(self, k: int, acc: int) -> None:
        if not 0 <= acc <= k:
            raise ValueError(f"accepted {acc} outside 0..{k}")
        if k == 0:
            return
        tested = acc + (1 if acc < k else 0)
        self.successes = self.successes * self.decay + acc
        self.trials = self.trials * self.decay + tested
        self.steps += 1
        if len(self.proposed_at) < k:
            grow = k - len(self.proposed_at)
            self.proposed_at += [0] * grow
            self.accepted_at += [0] * grow
        for j in range(k):
            self.proposed_at[j] += 1
            self.accepted_at[j] += 1 if j < acc else 0

    @property
    def rate(self) -> float | None:
        """Rolling per-token acceptance probability; None before any draft was tested."""
        return self.successes / self.trials if self.trials > 0 else None

    def per_position(self) -> list[float]:
        """Fraction of drafts accepted at each draft position (index 0 = first draft)."""
        return [a / p for a, p in zip(self.accepted_at, self.proposed_at)]


class AcceptanceStats:
    """Counters per lane (sequence id) and per category, fed once per verified lane."""

    def __init__(self, decay: float = 0.9) -> None:
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

    def estimate(self, seq_id: int, cat: str, prior: float = 0.5, weight: float = 2.0) -> float:
        """A lane's acceptance for planning: its rolling counts shrunk towards its category's
        rate (or `prior` without one) by `weight` pseudo-trials, so a few unlucky drafts do not
        pin a lane at zero and a new lane starts from what its category does."""
        category = self.categories.get(cat)
        if category is not None and category.rate is not None:
            prior = (category.successes + prior * weight) / (category.trials + weight)
        lane = self.lanes.get(seq_id)
        if lane is None:
            return prior
        return (lane.successes + prior * weight) / (lane.trials + weight)

    def forget(self, seq_id: int) -> None:
        self.lanes.pop(seq_id, None)
