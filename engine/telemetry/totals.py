"""Running totals, kept as things happen, for readers that ask at any time (the API's `/metrics`,
engine/serve/metrics.py): a session's step records, every one of them (the ring buffer lets old
ones go), and histograms as Prometheus counts them. Guarded hands them from the thread that adds
to the threads that read."""
from __future__ import annotations

import bisect
import copy
import itertools
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Generic, TypeVar

from engine.telemetry.records import StepRecord

T, R = TypeVar("T"), TypeVar("R")

# Upper bounds (seconds) of the step-time histogram's buckets: a one-lane CPU step to a long prefill
STEP_BUCKETS_S = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


@dataclass(slots=True)
class Histogram:
    """Values counted in buckets of upper bounds `bounds`, as Prometheus has a histogram."""
    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)  # per bucket, not cumulative; then past all
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = self.counts or [0] * (len(self.bounds) + 1)

    def add(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """(bound, values at most it) for each bound, as Prometheus' buckets count them."""
        return list(zip(self.bounds, itertools.accumulate(self.counts)))


@dataclass(slots=True)
class Totals:
    steps: int = 0
    prefill: int = 0
    padding: int = 0
    pass_tokens: int = 0            # every token a forward pass computed
    emitted: dict[str, int] = field(default_factory=lambda: defaultdict(int))   # by category
    drafted: dict[str, int] = field(default_factory=lambda: defaultdict(int))   # by category
    accepted: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # by category
    step_s: Histogram = field(default_factory=lambda: Histogram(STEP_BUCKETS_S))  # time in steps
    last: StepRecord | None = None  # the newest step

    def add(self, rec: StepRecord) -> None:
        self.steps += 1
        self.prefill += rec.prefill
        self.padding += rec.padding
        self.pass_tokens += rec.pass_tokens
        for lane in rec.lanes:
            self.emitted[lane.cat] += 1 + lane.acc
            self.drafted[lane.cat] += lane.k
            self.accepted[lane.cat] += lane.acc
        self.step_s.add(rec.dt_ms / 1000)
        self.last = rec


class Guarded(Generic[T]):
    """Totals added to from one thread and read, copied, from any other."""

    def __init__(self, totals: T) -> None:
        self._totals = totals
        self._lock = threading.Lock()

    def add(self, *args) -> None:
        with self._lock:
            self._totals.add(*args)

    def snapshot(self) -> T:
        with self._lock:
            return copy.deepcopy(self._totals)

    def read(self, reader: Callable[[T], R]) -> R:
        """What `reader` makes of the totals, under the lock: a few numbers without copying the
        whole (the window asks each frame)."""
        with self._lock:
            return reader(self._totals)
