"""Every step of a session (live or replayed) as numpy columns, so the views can draw 10,000
steps with setData and aggregate any range without Python loops, plus the step records and the
control, agent and text events themselves: all of them for a replay, the newest `keep` of each
for a live session (a record with its lanes is ~1.5 KB, 50-100 MB an hour of a swarm, and the
agents' text ~13 MB an hour; the trace keeps them all). Qt-free."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.telemetry.records import StepRecord

# Per-step numbers the views plot; each is a derived quantity of DESIGN §3 or a stored field.
COLUMNS = ("t", "dt_ms", "batch", "prefill", "budget", "drafted", "accepted", "emitted",
           "padding", "pass_tokens", "pad_if_padded", "speculating")


@dataclass(slots=True)
class RangeStats:
    steps: int
    seconds: float
    tokens: int              # emitted (committed + accepted drafts)
    tokens_per_s: float      # emitted per wall second over the range
    mean_batch: float
    max_batch: int
    acceptance_rate: float | None
    mean_acceptance_length: float | None  # bonus token counted (DESIGN §3)
    padding_waste: float     # padded slots / pass tokens

    def describe(self) -> str:
        rate = "–" if self.acceptance_rate is None else f"{self.acceptance_rate:.0%}"
        length = "–" if self.mean_acceptance_length is None else f"{self.mean_acceptance_length:.2f}"
        return (f"{self.steps} steps · {self.seconds:.1f} s · {self.tokens} tokens · "
                f"{self.tokens_per_s:.1f} tok/s · B mean {self.mean_batch:.1f} max {self.max_batch}"
                f" · acceptance {rate} · mean acc. length {length}"
                f" · padding {self.padding_waste:.0%}")


class History:
    def __init__(self, capacity: int = 1024, keep: int | None = None) -> None:
        self._cols = {name: np.zeros(capacity) for name in COLUMNS}
        self._records: list[StepRecord] = []  # the kept ones, from step index _first on
        self._first = 0
        self._count = 0
        self._events: list[dict] = []  # the kept ones, in time order, from number _first_event on
        self._first_event = 0
        self._keep = keep

    def __len__(self) -> int:
        return self._count

    def record(self, index: int) -> StepRecord | None:
        """The record of step `index` (from 0), or None where it was not kept."""
        if index < 0:
            index += self._count
        kept = index - self._first
        return self._records[kept] if 0 <= kept < len(self._records) else None

    def records(self, lo: int = 0, hi: int | None = None) -> list[StepRecord]:
        """The kept records of steps lo..hi-1 (those of a live session's oldest steps are not)."""
        hi = self._count if hi is None else hi
        return self._records[max(lo - self._first, 0):max(hi - self._first, 0)]

    def extend(self, records: list[StepRecord]) -> None:
        if not records:
            return
        start, stop = self._count, self._count + len(records)
        capacity = len(self._cols["t"])
        if stop > capacity:
            grown = max(stop, 2 * capacity)
            for name, col in self._cols.items():
                bigger = np.zeros(grown)
                bigger[:start] = col[:start]
                self._cols[name] = bigger
        rows = np.array([_row(r) for r in records], dtype=float)  # [n, len(COLUMNS)]
        for j, name in enumerate(COLUMNS):
            self._cols[name][start:stop] = rows[:, j]
        self._records.extend(records)
        self._count = stop
        self._first += self._trim(self._records)

    def add_events(self, events: list[dict]) -> None:
        """Control, agent and text events, in time order (each with its session time `t`)."""
        self._events.extend(events)
        self._first_event += self._trim(self._events)

    @property
    def event_count(self) -> int:
        """Events added so far, kept or not."""
        return self._first_event + len(self._events)

    def events_from(self, number: int) -> tuple[list[dict], int]:
        """The kept events numbered `number` (from 0) and later, and the number of the first of
        them: later than asked where a live session's older ones were not kept."""
        first = max(number, self._first_event)
        return self._events[first - self._first_event:], first

    def _trim(self, kept: list) -> int:
        """Drop all but the newest `keep` items once there are twice as many (in chunks: a list
        shifts all it keeps); how many were dropped."""
        if self._keep is None or len(kept) < 2 * self._keep:
            return 0
        dropped = len(kept) - self._keep
        del kept[:dropped]
        return dropped

    def column(self, name: str, lo: int = 0, hi: int | None = None) -> np.ndarray:
        hi = self._count if hi is None else hi
        return self._cols[name][lo:hi]

    def tokens_per_s(self, lo: int = 0, hi: int | None = None, window: int = 32) -> np.ndarray:
        """Emitted tokens per wall second over the `window` steps ending at each step."""
        hi = self._count if hi is None else hi
        first = max(0, lo - window)
        emitted = np.cumsum(self._cols["emitted"][first:hi])
        end_t = self._cols["t"][first:hi] + self._cols["dt_ms"][first:hi] / 1000.0
        start_t = self._cols["t"][first:hi]
        idx = np.arange(len(emitted))
        back = np.maximum(idx - window, -1)
        tokens = emitted - np.where(back >= 0, emitted[np.maximum(back, 0)], 0.0)
        begin = start_t[np.maximum(back + 1, 0)]
        rate = tokens / np.maximum(end_t - begin, 1e-6)
        return rate[lo - first:]

    def stats(self, lo: int, hi: int) -> RangeStats:
        lo, hi = max(0, lo), min(self._count, hi)
        if hi <= lo:
            return RangeStats(0, 0.0, 0, 0.0, 0.0, 0, None, None, 0.0)
        col = lambda name: self._cols[name][lo:hi]  # noqa: E731 - a local shorthand
        seconds = float(col("t")[-1] + col("dt_ms")[-1] / 1000.0 - col("t")[0])
        tokens = int(col("emitted").sum())
        drafted, accepted = col("drafted").sum(), col("accepted").sum()
        speculating = col("speculating").sum()
        pass_tokens = col("pass_tokens").sum()
        return RangeStats(
            steps=hi - lo, seconds=seconds, tokens=tokens,
            tokens_per_s=tokens / seconds if seconds > 0 else 0.0,
            mean_batch=float(col("batch").mean()), max_batch=int(col("batch").max()),
            acceptance_rate=float(accepted / drafted) if drafted else None,
            mean_acceptance_length=float(1 + accepted / speculating) if speculating else None,
            padding_waste=float(col("padding").sum() / pass_tokens) if pass_tokens else 0.0)

    def index_at(self, t: float) -> int:
        """Number of steps that started at or before session time `t`."""
        return int(np.searchsorted(self._cols["t"][:self._count], t, side="right"))


def _row(r: StepRecord) -> tuple:
    widest = max((lane.k for lane in r.lanes), default=0)
    pad_if_padded = widest * len(r.lanes) - r.drafted
    speculating = sum(1 for lane in r.lanes if lane.k > 0)
    return (r.t, r.dt_ms, r.batch, r.prefill, r.budget, r.drafted, r.accepted, r.emitted,
            r.padding, r.pass_tokens, pad_if_padded, speculating)
