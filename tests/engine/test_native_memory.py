"""The engine hands freed native memory back at most once a period, between steps."""
import platform

import pytest

from engine.native_memory import MemoryTrimmer, _malloc_trim


def test_trims_once_a_period_however_often_asked():
    now, trims = [0.0], []
    trimmer = MemoryTrimmer(every_s=30, clock=lambda: now[0], trim=trims.append)
    for t in (0, 10, 29.9, 30, 31, 59, 60.5, 61):
        now[0] = t
        trimmer.maybe_trim()
    assert trims == [0, 0]  # at 30 and at 60.5: malloc_trim(0), keep no padding


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_glibc_malloc_trim_is_found_and_runs():
    trim = _malloc_trim()
    assert trim is not None and trim(0) in (0, 1)


def test_the_engine_trims_between_steps(monkeypatch):
    from engine.controls import Controls
    from engine.engine import Engine
    from engine.loading import load_model
    from engine.swarm.config import SwarmConfig
    trims = []
    monkeypatch.setattr("engine.engine.MemoryTrimmer",
                        lambda: MemoryTrimmer(every_s=0, trim=trims.append))
    engine = Engine(load_model("tiny-test"), SwarmConfig(seed=0, clock="virtual"),
                    Controls(swarm_size=2))
    engine.run(steps=3)
    engine.close()
    assert len(trims) >= 3
