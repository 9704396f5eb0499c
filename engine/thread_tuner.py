"""Automatic CPU threads: the count that runs the swarm's steps fastest now.

On a CPU every op ends at a barrier of all its threads, so one thread whose core another program
takes stalls the rest: beside one busy core of two, two threads ran a swarm at a third of one
thread's speed, while with both cores free two ran 1.2-1.3x faster (`swarmscope bench threads`).
Which count is best moves with what else runs.

Where the system tells what other programs run (`others`: Linux's /proc/stat), a change in it
decides at once: over each LOAD_S of steps the cores they keep busy are counted, and where the
most threads that fit beside them (FIT cores of their load may overlap) moved to another count
for two such windows in a row, the tuner moves there. Fewer threads do not speed up when cores
come free, so nothing but this sees them come free.

The steps' own times say the rest. Each step's time is divided by what one reference curve (t(N)
of the most threads) gives for its shape, so that steps of any batch, drafts and prefill compare.
Even so one step's ratio swings by a fifth, and a second's median by a sixth, with the batch's
make-up and contexts (machine C, bf16, 8 agents), where neighbouring steps differ far less: so a
probe runs PAIRS pairs of steps, one at a neighbouring count (the next fewer or more threads of
`counts`) beside one at the count in force, and the neighbour is kept when the median of its
pairs' ratios is faster by MARGIN (the median of 8 pairs swung by 4 %, a second's median by
16 %); one clearly lost (beside a busy core, two threads' steps took 3x as long) ends early. A
probe comes after the first BLOCK_S of steps, then every PERIOD_S, the wait doubling
after each lost probe (to LONGEST_PERIOD_S, or LONGEST_TOLD_S where the system tells of changes),
so that a machine that stays as it is loses little to them; and, where the system does not tell,
at once when the count in force's last two blocks of BLOCK_S ran SHIFT slower than those before,
fewer threads tried first.

Switching is setting the count: each count's kernels are warmed and its curve at hand before
tuning starts, and the curve the policy plans with changes only when the count in force does."""
from __future__ import annotations

import os
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

AUTO = "auto"  # what users ask for tuned threads with (--threads auto, the panel's item)


def usable_cores() -> int:
    """The cores this process may run on: those of its affinity where the system says (a
    container's cpuset, `taskset`; torch's own default counts them too), else the machine's."""
    cores = affinity()
    return len(cores) if cores else os.cpu_count() or 1


def physical_cores(cpus: str = "/sys/devices/system/cpu") -> int:
    """The physical cores among `usable_cores`: a core's second hardware thread shares its
    arithmetic units, so a forward pass gains nothing from it (torch's default count is
    physical cores too). Linux's sysfs topology; elsewhere `usable_cores`."""
    cores = set()
    for cpu in affinity() or ():
        try:
            with open(f"{cpus}/cpu{cpu}/topology/thread_siblings_list") as siblings:
                cores.add(siblings.read().strip())
        except OSError:
            return usable_cores()
    return len(cores) or usable_cores()


def affinity() -> set[int] | None:
    """The cores this process may run on; None where the system does not say."""
    try:
        return os.sched_getaffinity(0)
    except (AttributeError, OSError):  # macOS, Windows
        return None


def default_counts(cores: int) -> list[int]:
    """The counts tried on `cores` cores: all of them, then halvings down to one."""
    counts = []
    while cores >= 1:
        counts.append(cores)
        cores //= 2
    return sorted(counts)


class ThreadTuner:
    LOAD_S = 0.5             # other programs' load is counted over windows this long
    FIT = 0.5                # cores of others' load a count may overlap and still fit
    BLOCK_S = 1.0            # steps of the count in force are looked at in blocks this long ...
    MIN_STEPS = 5            # ... and of at least this many steps
    PAIRS = 8                # a probe's pairs of steps, one at each count
    MARGIN = 0.1             # a probe's count must be this much faster to be kept
    CLEAR_LOSS = (3, 1.3)    # a probe whose first 3 pairs all ran 1.3x slower ends there
    PERIOD_S = 10.0          # between probes, doubling after each lost one ...
    LONGEST_PERIOD_S = 40.0  # ... up to this
    LONGEST_TOLD_S = 160.0   # ... or this where the system tells of changes
    SHIFT = 1.3              # untold, the count in force this much slower: probe now

    def __init__(self, counts: list[int], current: int,
                 step_ms: Callable[[int, float, int], float],
                 others: Callable[[], tuple[float, float] | None] = lambda: None) -> None:
        """`counts`: those to choose among (with `current`, the one in force; the most is taken
        for the cores); `step_ms(batch, drafts, prefill)`: the reference curve's time for a
        step's shape; `others()`: the CPU seconds other programs ran and the monotonic seconds
        now (devices.others_cpu_seconds), or None where the system does not say."""
        self.counts = sorted(set(counts) | {current})
        self.current = current
        self._step_ms, self._others = step_ms, others
        self._reading = others()
        self._told = self._reading is not None
        self._load = [0.0, 0.0]  # others' CPU seconds and the wall seconds of the window
        self._fit = current  # the most threads that fit beside others, as last acted on
        self._misfits = 0  # windows in a row where another count fitted
        self._look_afresh()
        self._period = self.PERIOD_S
        self._next_probe_t: float | None = None  # set by the first step seen
        self._fewer_first = True
        self._running = current  # the count the step under way runs at
        self.probes = 0  # made so far
        self.ran_s: dict[int, float] = {}  # step time run at each count

    def shares(self) -> dict[int, float]:
        """Each count's share of the step time seen, most threads first."""
        total = sum(self.ran_s.values()) or 1.0
        return {count: self.ran_s[count] / total for count in sorted(self.ran_s, reverse=True)}

    def observe(self, t: float, dt_ms: float, batch: int, drafts: float, prefill: int) -> int:
        """A step that started at session time `t` took `dt_ms`; returns the count to run the
        next step at (`current` then is the count in force)."""
        self.ran_s[self._running] = self.ran_s.get(self._running, 0.0) + dt_ms / 1000
        self._running = self._next_count(t, dt_ms, batch, drafts, prefill)
        return self._running

    def _next_count(self, t: float, dt_ms: float, batch: int, drafts: float, prefill: int) -> int:
        if self._next_probe_t is None:
            self._next_probe_t = t + self.BLOCK_S
        ratio = dt_ms / max(self._step_ms(batch, drafts, prefill), 1e-9)
        fitting = self._fitting_count(dt_ms)
        if self._probe is not None:
            return self._probing(t, ratio)
        if fitting is not None:
            self._misfits = self._misfits + 1 if fitting != self._fit else 0
            if self._misfits >= 2:  # the machine got busier or freer
                self._fit = fitting
                if fitting != self.current:
                    self._switch(fitting, t)
                    return self.current
        block = self._block
        block.add(t, ratio)
        if len(block.ratios) < self.MIN_STEPS or t - block.start_t < self.BLOCK_S:
            return self.current
        self._block = _Block()
        self._blocks.append(statistics.median(block.ratios))
        blocks = list(self._blocks)
        slowed = (not self._told and len(blocks) > 2 and
                  min(blocks[-2:]) > self.SHIFT * statistics.median(blocks[:-2]))
        if t < self._next_probe_t and not slowed:
            return self.current
        target = self._neighbour(fewer_first=slowed or self._fewer_first)
        if not slowed:
            self._fewer_first = not self._fewer_first
        if target is None:
            return self.current
        self._probe = _Probe(target)
        self.probes += 1
        return target

    def _fitting_count(self, dt_ms: float) -> int | None:
        """At the end of each LOAD_S window, the most threads that fit beside what other
        programs ran in it; None between windows, or where the system does not say. A step
        after far more wall time than it took (a pause, another engine's turn in a benchmark)
        is left out: what others ran meanwhile says nothing of it."""
        reading, before = self._others(), self._reading
        self._reading = reading
        if reading is None or before is None:
            return None
        wall = reading[1] - before[1]
        if not 0 < wall <= 1.5 * dt_ms / 1000 + 0.005:
            return None
        self._load[0] += reading[0] - before[0]
        self._load[1] += wall
        if self._load[1] < self.LOAD_S:
            return None
        busy, self._load = self._load[0] / self._load[1], [0.0, 0.0]
        free = self.counts[-1] - busy + self.FIT
        return max((count for count in self.counts if count <= free), default=self.counts[0])

    def _switch(self, count: int, t: float) -> None:
        """`count` in force from the next step; its steps are looked at afresh."""
        self.current, self._misfits = count, 0
        self._look_afresh()
        self._period, self._next_probe_t = self.PERIOD_S, t + self.PERIOD_S

    def _probing(self, t: float, ratio: float) -> int:
        """The probe's steps take turns, its count's first; each pair's ratio of the two."""
        probe = self._probe
        if probe.at_probed:
            probe.probed_ratio = ratio
        else:
            probe.pairs.append(probe.probed_ratio / ratio)
        probe.at_probed = not probe.at_probed
        pairs, slower = self.CLEAR_LOSS
        lost = len(probe.pairs) == pairs and min(probe.pairs) > slower
        if len(probe.pairs) < self.PAIRS and not lost:
            return probe.count if probe.at_probed else self.current
        if statistics.median(probe.pairs) < 1 - self.MARGIN:  # kept: its count is in force
            self._switch(probe.count, t)
            return self.current
        self._look_afresh()
        self._period = min(2 * self._period,
                           self.LONGEST_TOLD_S if self._told else self.LONGEST_PERIOD_S)
        self._next_probe_t = t + self._period
        return self.current

    def _look_afresh(self) -> None:
        """No probe under way, and the count in force's steps looked at from the next one."""
        self._probe: _Probe | None = None
        self._block = _Block()
        self._blocks: deque[float] = deque(maxlen=6)  # block medians of the count in force

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
    """BLOCK_S of steps of the count in force: their time ratios."""
    start_t: float | None = None
    ratios: list[float] = field(default_factory=list)

    def add(self, t: float, ratio: float) -> None:
        if self.start_t is None:
            self.start_t = t
        self.ratios.append(ratio)
