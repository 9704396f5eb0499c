"""Keeps the live window's redraws to a share of one CPU core, so the engine keeps the rest.

Where the engine is CPU-bound (the forward pass on every core), each millisecond the GUI thread
spends drawing is taken from the engine, and through the GIL it costs the engine more than that.
The pacer measures the GUI thread's own CPU time (time.thread_time: building, painting, event
handling, whatever Qt does on this thread) and lets a redraw start only while the thread has
used at most `share` of the wall time since the previous redraw began: cheap frames come at the
timer's rate, costly ones as often as the share allows. Qt-free."""
from __future__ import annotations

import time
from collections.abc import Callable

ENGINE_FIRST_SHARE = 0.03  # the live window's default: 3 % of one core
SMOOTH_SHARE = 1.0         # no limit: every timer tick may redraw


class FramePacer:
    def __init__(self, share: float = ENGINE_FIRST_SHARE, *,
                 cpu_clock: Callable[[], float] = time.thread_time,
                 wall_clock: Callable[[], float] = time.monotonic) -> None:
        self.share = share
        self._cpu_clock, self._wall_clock = cpu_clock, wall_clock
        self._wall: float | None = None  # when the last redraw began
        self._cpu = 0.0                  # the GUI thread's CPU time then

    @property
    def share(self) -> float:
        return self._share

    @share.setter
    def share(self, value: float) -> None:
        if not 0.0 < value <= 1.0:
            raise ValueError(f"a CPU share must be in (0, 1], got {value}")
        self._share = value

    def wait_s(self) -> float:
        """Seconds until the share allows a redraw, if the thread used no more CPU meanwhile."""
        if self._wall is None:
            return 0.0
        used, elapsed = self._cpu_clock() - self._cpu, self._wall_clock() - self._wall
        return max(0.0, used / self._share - elapsed)

    def ready(self) -> bool:
        """Whether a redraw may start now; if so, the next one is paced from here."""
        wall, cpu = self._wall_clock(), self._cpu_clock()
        if self._wall is not None and cpu - self._cpu > self._share * (wall - self._wall):
            return False
        self._wall, self._cpu = wall, cpu
        return True
