"""Automatic CPU threads: the count that runs the swarm's steps fastest now, found by trying.

On a CPU every op ends at a barrier of all its threads, so one thread whose core another program
takes stalls the rest: beside one busy core of two, two threads ran a swarm at a third of one
thread's speed, while with both cores free two ran 1.3x faster (`swarmscope bench threads`). Which
count is best moves with what else runs: the steps' own times say which, and (on Linux) the
system's count of what other programs ran says when to look again.

Each step's time is divided by what one reference curve (t(N) of the most threads) gives for its
shape, so that steps of any batch, drafts and prefill compare. Even so one step's ratio swings by
a fifth, and a second's median by a sixth, with the batch's make-up and contexts (machine C,
bf16, 8 agents), where neighbouring steps differ far less: so a probe runs PAIRS pairs of steps,
a step at the neighbour (the next fewer or more threads of `counts`) beside one at the count in
force, and the neighbour is kept when the median of its pairs' ratios is faster by MARGIN (the
median of 8 pairs swung by 4 % where a second's median swung by 16 %). Switching a count is
setting it: each count's kernels are warmed and its curve at hand before tuning starts; the
curve the policy plans with changes only when the count in force does.

When to probe: after the first BLOCK_S of steps (the machine may be busy from the start); at once
when the machine changes, that is when other programs' use of the cores (`others`, where the
system tells it) moved by OTHERS_MOVE cores over a block of BLOCK_S, or, where it does not tell,
the count in force's last two blocks ran SHIFT slower than the blocks before; and every PERIOD_S,
the wait doubling after each lost probe (to LONGEST_PERIOD_S, or LONGEST_TOLD_S where the system
tells of changes) so that a machine that stays as it is loses little to them. Fewer threads are
tried first when the machine got busier, more when it got freer: the only sign of cores coming
free, as fewer threads do not speed up when they do."""
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


class ThreadTuner:
    BLOCK_S = 1.0            # steps of the count in force are looked at in blocks this long ...
    MIN_STEPS = 5            # ... and of at least this many steps
    PAIRS = 8                # a probe's pairs of steps, one at each count
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
        self._blocks: deque[float] = deque(maxlen=6)  # block medians of the count in force
        self._reading = others()
        self._usual_busy: float | None = None  # cores others took when last compared
        self._probe: _Probe | None = None
        self._period = self.PERIOD_S
        self._next_probe_t: float | None = None  # set by the first step seen
        self._fewer_first = True
        self.probes = 0  # made so far

    def observe(self, t: float, dt_ms: float, batch: int, drafts: float, prefill: int) -> int:
        """A step that started at session time `t` took `dt_ms`; returns the count to run the
        next step at (`current` then is the count in force)."""
        if self._next_probe_t is None:
            self._next_probe_t = t + self.BLOCK_S
        ratio = dt_ms / max(self._step_ms(batch, drafts, prefill), 1e-9)
        others = self._others_during(dt_ms)
        if self._probe is not None:
            return self._probing(t, ratio)
        block = self._block
        block.add(t, ratio, others)
        if len(block.ratios) < self.MIN_STEPS or t - block.start_t < self.BLOCK_S:
            return self.current
        self._block = _Block()
        busy = block.busy()
        if self._usual_busy is None:
            self._usual_busy = busy
        self._blocks.append(statistics.median(block.ratios))
        blocks = list(self._blocks)
        moved = 0.0 if busy is None or self._usual_busy is None else busy - self._usual_busy
        if abs(moved) < self.OTHERS_MOVE:
            moved = 0.0
        slowed = (busy is None and len(blocks) > 2 and
                  min(blocks[-2:]) > self.SHIFT * statistics.median(blocks[:-2]))
        if t < self._next_probe_t and not slowed and not moved:
            return self.current
        if slowed or moved:  # busier: fewer threads first; freer: more
            target = self._neighbour(fewer_first=slowed or moved > 0)
        else:
            target = self._neighbour(fewer_first=self._fewer_first)
            self._fewer_first = not self._fewer_first
        self._usual_busy = busy
        if target is None:
            return self.current
        self._probe = _Probe(target)
        self.probes += 1
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

    def _probing(self, t: float, ratio: float) -> int:
        """The probe's steps take turns, its count's first; each pair's ratio of the two."""
        probe = self._probe
        if probe.at_probed:
            probe.probed_ratio = ratio
        else:
            probe.pairs.append(probe.probed_ratio / ratio)
        probe.at_probed = not probe.at_probed
        if len(probe.pairs) < self.PAIRS:
            return probe.count if probe.at_probed else self.current
        self._probe, self._blocks, self._block = None, deque(maxlen=6), _Block()
        self._usual_busy = None  # taken afresh at the count in force
        if statistics.median(probe.pairs) < 1 - self.MARGIN:  # kept: its count is in force
            self.current, self._period = probe.count, self.PERIOD_S
        else:
            longest = self.LONGEST_PERIOD_S if self._reading is None else self.LONGEST_TOLD_S
            self._period = min(2 * self._period, longest)
        self._next_probe_t = t + self._period
        return self.current

    def _neighbour(self, fewer_first: bool) -> int | None:
        i = self.counts.index(self.current)
        fewer = self.counts[i - 1] if i > 0 else None
        more = self.counts[i + 1] if i + 1 < len(self.counts) else None
        first, second = (fewer, more) if fewer_first else (more, fewer)
        return first if first is not None else second


@dataclass(slots=True)
class _Probe:
    count: int
    at_probed: bool = True  # the step running now is at `count`
    probed_ratio: float = 0.0  # of the pair's step at `count`
    pairs: list[float] = field(default_factory=list)  # its step's ratio over its neighbour's


@dataclass(slots=True)
class _Block:
    """BLOCK_S of steps of the count in force: their time ratios, and what other programs ran
    meanwhile."""
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
