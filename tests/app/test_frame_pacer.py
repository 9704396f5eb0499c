"""The frame pacer holds redraws back until the GUI thread's CPU share is within its limit."""
import time

import pytest

from app.frame_pacer import FramePacer


class _Clocks:
    """The GUI thread's CPU time and the wall time, advanced by hand: a loaded machine cannot
    stretch a burn's wall time and move the answer."""

    def __init__(self) -> None:
        self.cpu = self.wall = 0.0

    def draw(self, seconds: float) -> None:   # a frame's work: CPU and wall together
        self.cpu += seconds
        self.wall += seconds

    def idle(self, seconds: float) -> None:   # the engine runs, the GUI thread sleeps
        self.wall += seconds


def _pacer(clocks: _Clocks, share: float) -> FramePacer:
    return FramePacer(share, cpu_clock=lambda: clocks.cpu, wall_clock=lambda: clocks.wall)


def test_a_costly_frame_delays_the_next_until_the_share_allows():
    clocks = _Clocks()
    pacer = _pacer(clocks, share=0.25)
    assert pacer.ready()              # the first frame is never held
    clocks.draw(0.05)                 # a 50 ms frame: the next may start 200 ms after this one
    assert not pacer.ready()
    assert pacer.wait_s() == pytest.approx(0.15)
    clocks.idle(0.149)
    assert not pacer.ready()
    clocks.idle(0.001)
    assert pacer.ready() and pacer.wait_s() == 0.0  # the next frame is paced from this one


def test_cheap_frames_come_at_the_timer_rate():
    clocks = _Clocks()
    pacer = _pacer(clocks, share=0.25)
    ready = []
    for _ in range(5):                # 40 ms ticks, 2 ms of drawing each: 5 % of the time
        ready.append(pacer.ready())
        clocks.draw(0.002)
        clocks.idle(0.038)
    assert ready == [True] * 5


def test_the_default_clocks_count_this_threads_cpu_not_the_wall():
    pacer = FramePacer(share=0.05)    # a low share, so a loaded CI machine still holds this frame
    assert pacer.ready()
    end = time.thread_time() + 0.01   # 10 ms of this thread's CPU: 200 ms of wall to wait out
    while time.thread_time() < end:
        pass
    assert not pacer.ready()
    time.sleep(0.25)                  # sleeping uses no CPU, so the share comes back
    assert pacer.ready()


def test_share_is_validated():
    with pytest.raises(ValueError):
        FramePacer(share=0.0)
    pacer = FramePacer()
    with pytest.raises(ValueError):
        pacer.share = 1.5
