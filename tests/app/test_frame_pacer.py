"""The frame pacer holds redraws back until the GUI thread's CPU share is within its limit."""
import time

import pytest

from app.frame_pacer import FramePacer


def _burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_a_costly_frame_delays_the_next_until_the_share_allows():
    pacer = FramePacer(share=0.25)
    assert pacer.ready()              # the first frame is never held
    _burn(0.05)                       # a 50 ms frame: the next may start 200 ms after this one
    assert not pacer.ready()
    assert pacer.wait_s() == pytest.approx(0.2, abs=0.05)
    time.sleep(pacer.wait_s() + 0.01)  # idle (no CPU) while the engine runs
    assert pacer.ready() and pacer.wait_s() < 0.01  # the next frame is paced from this one


def test_cheap_frames_come_at_the_timer_rate():
    pacer = FramePacer(share=0.25)
    ready = []
    for _ in range(5):                # 40 ms ticks, 2 ms of drawing each: 5 % of the time
        ready.append(pacer.ready())
        _burn(0.002)
        time.sleep(0.038)
    assert ready == [True] * 5


def test_share_is_validated():
    with pytest.raises(ValueError):
        FramePacer(share=0.0)
    pacer = FramePacer()
    with pytest.raises(ValueError):
        pacer.share = 1.5
