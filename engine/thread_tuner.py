"""Automatic CPU threads: the count that runs the swarm's steps fastest now, found by trying.

On a CPU every op ends at a barrier of all its threads, so one thread whose core another program
takes stalls the rest: beside one busy core of two, two threads ran a swarm at a third of one
thread's speed, while with both cores free two ran 1.3x faster (`swarmscope bench threads`). Which
count is best moves with what else runs, and nothing but the steps' own times says so.

Each step's time is divided by what one reference curve (t(N) of the most threads) gives for its
shape, so steps of any batch, drafts and prefill compare, and the ratios are summed up per block
of PROBE_S (their median). The count in force is compared with a neighbour (the next fewer or more
threads of `counts`) by a probe: the neighbour runs one block, and is kept when it beats the
median of the count in force's last BEFORE blocks (those since the machine changed, where it
did) by MARGIN.

When to probe: once there are BEFORE blocks (the machine may be busy from the start); at once
when the machine changes, that is when other programs' use of the cores (`others`, where the
system tells it) moved by OTHERS_MOVE cores over a block, or, where it does not tell, the count
in force's last two blocks ran SHIFT slower than the blocks before; and every PERIOD_S, the wait
doubling after each lost probe (to LONGEST_PERIOD_S, or LONGEST_TOLD_S where the system tells of
changes) so that a machine that stays as it is loses little to them. Fewer threads are tried
first when the machine got busier, more when it got freer: the only sign of cores coming free,
as fewer threads do not speed up when they do."""
from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Callable


AUTO = "auto"  # what users ask for tuned threads with (--threads auto, the panel's item)


def default_counts(cores: int) -> list[int]:
    """The counts tried on `cores` cores: all of them, then halvings down to one."""
    counts = []
    while cores >= 1:
        counts.append(cores)
        cores //= 2
    return sorted(counts)


@dataclass(slots=True)
class _Probe:
    count: int
    back_to: int
    before: float  # the count in force's median ratio over the blocks before


class ThreadTuner:
    PROBE_S = 1.0            # a block of steps (and a probe's length) ...
    MIN_STEPS = 5            # ... with at least these steps, however long they take
    BEFORE = 3               # blocks of the count in force a probe is compared with
    SETTLE_STEPS = 2         # steps after a switch left out (their caches and pages refill)
    MARGIN = 0.1             # a probe's count must be this much faster to be kept
    PERIOD_S = 10.0          # between probes, doubling after each lost one ...
    LONGEST_PERIOD_S = 40.0  # ... up to this
    LONGEST_TOLD_S = 160.0   # ... or this where `others` tells when to probe
    SHIFT = 1.3              # the count in force this much slower than it was: probe now
    OTHERS_MOVE = 0.5        # cores other programs took or let go of: probe now

    def __init__(self, counts: list[int], current: int,
                 step_ms: Callable[[int, float, int], float],
                 others: Callable[[], tuple[float, float] | None] = lambda: None) -> None:
        """`counts`: those to choose among (with `current`, the one in force); `step_ms(batch,
        drafts, prefill)`: the reference curve's time for a step's shape; `others()`: the CPU
        seconds other programs ran and the monotonic seconds now (devices.others_cpu_seconds),
        or None where the system does not say."""
        self.counts = sorted(set(counts) | {current})
        self.current = current
        self._step_ms, self._others = step_ms, others
        self._block = _Block()
        self._blocks: deque[float] = deque(maxlen=2 * self.BEFORE)  # of the count in force
        self._reading = others()
        self._usual_busy: float | None = None  # cores others took when last compared
        self._probe: _Probe | None = None
        self._skip = 0
        self._period = self.PERIOD_S
        self._next_probe_t: float | None = None  # set by the first step seen
        self._fewer_first = True

    def observe(self, t: float, dt_ms: float, batch: int, drafts: float, prefill: int
                ) -> int | None:
        """A step that started at session time `t` took `dt_ms`; returns a count to switch to
        before the next step, or None to stay."""
        if self._next_probe_t is None:
            self._next_probe_t = t + self.BEFORE * self.PROBE_S
        others = self._others_during(dt_ms)
        if self._skip:
            self._skip -= 1
            return None
        block = self._block
        block.add(t, dt_ms / max(self._step_ms(batch, drafts, prefill), 1e-9), others)
        if len(block.ratios) < self.MIN_STEPS or t - block.start_t < self.PROBE_S:
            return None
        self._block = _Block()
        ratio, busy = statistics.median(block.ratios), block.busy()
        if self._probe is not None:
            return self._probed(t, ratio, busy)
        if self._usual_busy is None:
            self._usual_busy = busy
        self._blocks.append(ratio)
        blocks = list(self._blocks)
        moved = 0.0 if busy is None or self._usual_busy is None else busy - self._usual_busy
        if abs(moved) < self.OTHERS_MOVE:
            moved = 0.0
        slowed = (busy is None and len(blocks) > 2 and
                  min(blocks[-2:]) > self.SHIFT * statistics.median(blocks[:-2]))
        if t < self._next_probe_t and not slowed and not moved:
            return None
        if slowed or moved:  # busier: fewer threads first; freer: more
            target = self._neighbour(fewer_first=slowed or moved > 0)
        else:
            target = self._neighbour(fewer_first=self._fewer_first)
            self._fewer_first = not self._fewer_first
        self._usual_busy = busy
        if target is None:
            return None
        since = 2 if slowed else 1 if moved else self.BEFORE  # blocks since the machine changed
        self._probe = _Probe(target, self.current, statistics.median(blocks[-since:]))
        self._skip = self.SETTLE_STEPS
        return target

    def _others_during(self, dt_ms: float) -> tuple[float, float] | None:
        """(CPU seconds other programs ran, wall seconds) since the step before, or None where
        the system does not say, or where far more wall time passed than this step took (a
        pause, another engine's turn in a benchmark: what others ran then says nothing)."""
        reading, before = self._others(), self._reading
        self._reading = reading
        if reading is None or before is None:
            return None
        wall = reading[1] - before[1]
        if not 0 < wall <= 1.5 * dt_ms / 1000 + 0.005:
            return None
        return reading[0] - before[0], wall

    def _probed(self, t: float, ratio: float, busy: float | None) -> int | None:
        probe, self._probe = self._probe, None
        self._skip = self.SETTLE_STEPS
        self._blocks.clear()
        if ratio < probe.before * (1 - self.MARGIN):  # kept: its count is in force
            self.current, self._period = probe.count, self.PERIOD_S
            self._blocks.append(ratio)
            self._usual_busy = busy
            self._next_probe_t = t + self._period
            return None
        longest = self.LONGEST_PERIOD_S if busy is None else self.LONGEST_TOLD_S
        self._period = min(2 * self._period, longest)
        self._next_probe_t = t + self._period
        self._blocks.append(probe.before)  # the count in force's level, taken afresh
        return probe.back_to

    def _neighbour(self, fewer_first: bool) -> int | None:
        i = self.counts.index(self.current)
        fewer = self.counts[i - 1] if i > 0 else None
        more = self.counts[i + 1] if i + 1 < len(self.counts) else None
        first, second = (fewer, more) if fewer_first else (more, fewer)
        return first if first is not None else second


@dataclass(slots=True)
class _Block:
    """PROBE_S of steps of one count: their time ratios, and what other programs ran meanwhile."""
    start_t: float | None = None
    ratios: list[float] = field(default_factory=list)
    told: int = 0  # steps with what others ran known
    others_s: float = 0.0
    wall_s: float = 0.0

    def add(self, t: float, ratio: float, others: tuple[float, float] | None) -> None:
        if self.start_t is None:
            self.start_t = t
        self.ratios.append(ratio)
        if others is not None:
            self.told += 1
            self.others_s += others[0]
            self.wall_s += others[1]

    def busy(self) -> float | None:
        """The cores other programs took during the block's steps (None: unknown for most)."""
        return self.others_s / self.wall_s if 2 * self.told > len(self.ratios) else None
