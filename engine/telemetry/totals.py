"""Running totals of a session's step records, kept as the engine steps, for readers that ask at
any time and must not miss a step the bounded ring buffer has already let go: the API's
`/metrics` (engine/serve/metrics.py)."""
from __future__ import annotations

import bisect
import copy
import threading
from collections import defaultdict
from dataclasses import dataclass, field

from engine.telemetry.records import StepRecord

# Upper bounds (seconds) of the step-time histogram's buckets: a one-lane CPU step to a long prefill
STEP_BUCKETS_S = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


@dataclass(slots=True)
class Totals:
    steps: int = 0
    step_s: float = 0.0             # time inside steps
    prefill: int = 0
    padding: int = 0
    pass_tokens: int = 0            # every token a forward pass computed
    emitted: dict[str, int] = field(default_factory=lambda: defaultdict(int))   # by category
    drafted: dict[str, int] = field(default_factory=lambda: defaultdict(int))   # by category
    accepted: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # by category
    step_buckets: list[int] = field(default_factory=lambda: [0] * len(STEP_BUCKETS_S))
    last: StepRecord | None = None  # the newest step

    def add(self, rec: StepRecord) -> None:
        self.steps += 1
        self.step_s += rec.dt_ms / 1000
        self.prefill += rec.prefill
        self.padding += rec.padding
        self.pass_tokens += rec.pass_tokens
        for lane in rec.lanes:
            self.emitted[lane.cat] += 1 + lane.acc
            self.drafted[lane.cat] += lane.k
            self.accepted[lane.cat] += lane.acc
        # Not cumulative here (one increment a step); the reader sums them as Prometheus wants
        bucket = bisect.bisect_left(STEP_BUCKETS_S, rec.dt_ms / 1000)
        if bucket < len(STEP_BUCKETS_S):
            self.step_buckets[bucket] += 1
        self.last = rec


class RunningTotals:
    """Totals added to from the engine's thread and read, copied, from any other."""

    def __init__(self) -> None:
        self._totals = Totals()
        self._lock = threading.Lock()

    def add(self, rec: StepRecord) -> None:
        with self._lock:
            self._totals.add(rec)

    def snapshot(self) -> Totals:
        with self._lock:
            return copy.deepcopy(self._totals)
