"""A stand-in with the Engine's public surface (mailbox, ring buffers, controls, calibration,
step/agents/close) emitting make_dummy() records that obey the controls, for testing the window
without a model. The real Engine is tested against the same window in test_live_engine.py."""
from __future__ import annotations

import dataclasses
import random
import time
from types import SimpleNamespace

import torch

from engine.config import PRESETS
from engine.controls import ControlMailbox, Controls
from engine.engine import KvUsage
from engine.spec.calibration import Calibration
from engine.thread_tuner import AUTO
from engine.swarm.agent import AgentView
from engine.telemetry.records import StepRecord
from engine.telemetry.ring_buffer import RingBuffer
from engine.telemetry.trace_writer import TraceWriter

CATS = ("code-edit", "chat", "json")


class FakeEngine:
    def __init__(self, seed: int = 0, step_s: float = 0.002, trace_path: str | None = None,
                 fail_at: int | None = None) -> None:
        self.mailbox = ControlMailbox()
        self.records = RingBuffer()
        self.events = RingBuffer()
        self.controls = Controls()
        self.calibration = Calibration.make_dummy(knee=12)
        self.loaded = SimpleNamespace(name="fake", source="fake", config=PRESETS["tiny-test"],
                                      model=torch.nn.Module())  # the worker hooks its forwards
        self.closed = False
        self.threads_asked: list[int | str] = []
        self.thread_tuner = None  # set by tune_threads: a fake tuner that picks one thread
        self._rng = random.Random(seed)
        self._step = 0
        self._batch = 4
        self._step_s = step_s
        self._fail_at = fail_at
        self._t0 = time.monotonic()
        self._writer = TraceWriter(trace_path, {"model": "fake", "device": "cpu", "dtype": "fp32",
                                                "calibration": self.calibration.to_dict(),
                                                "controls": self.controls.to_dict()}) \
            if trace_path else None

    def step(self) -> StepRecord | None:
        changes = self.mailbox.drain()
        t = time.monotonic() - self._t0
        if changes:
            self.controls = self.controls.updated(changes)
            self.events.append({"type": "control", "t": t, "changes": changes})
            if self._writer:
                self._writer.write_control(t, changes)
        if self.controls.paused:
            time.sleep(self._step_s)
            return None
        if self._fail_at is not None and self._step == self._fail_at:
            raise RuntimeError("injected failure")
        c = self.controls
        self._batch = max(1, min(c.swarm_size, self._batch + self._rng.choice((-1, 0, 1))))
        batch = min(self._batch, c.batch_ceiling)
        policy = "off" if batch > c.spec_ceiling else c.policy
        rec = StepRecord.make_dummy(self._step, batch=batch, budget=c.budget_override or 16,
                                    policy=policy, ragged=c.ragged, seed=self._rng.random())
        rec.t = t
        for lane in rec.lanes:
            if lane.agent % 5 == 4 and self._step % 7 == 0:
                self.events.append({"type": "agent", "t": t, "agent": lane.agent, "event": "tool"})
        time.sleep(self._step_s)
        self.records.append(rec)
        if self._writer:
            self._writer.write_step(rec)
        self._step += 1
        if self.thread_tuner is not None and self._step == self.thread_tuner.switch_at:
            self._put_in_force(dataclasses.replace(self.calibration, threads=1))
        return rec

    def agents(self, transcript_of: set[int] | None = None,
               tail_chars: int | None = None) -> list[AgentView]:
        """As Engine.agents: text only for the agents asked for (tail_chars is not needed here:
        the fake transcripts are short)."""
        text = [("Fix the bug in parser.py\n", "prompt"), ("def parse(", "committed"),
                ("text):\n    return", "accepted_draft"), (" json.loads", "committed")]
        return [AgentView(i, "decode" if i < self._batch else "tool", CATS[i % 3], 10 * i, 0.5,
                          text if transcript_of is None or i in transcript_of else [])
                for i in range(self.controls.swarm_size)]

    def kv_usage(self) -> KvUsage:
        """A cache of 64 MB, a MB held a lane."""
        return KvUsage(self._batch * 2**20, 16 * 2**20, 64 * 2**20, 16 * self._step, 0)

    def recalibrate(self, progress=None) -> Calibration:
        for n in (1, 2, 4):
            if progress:
                progress(f"  N={n} query tokens")
            time.sleep(self._step_s)
        return self._put_in_force(Calibration.make_dummy(knee=10))

    def use_threads(self, threads: int, progress=None) -> Calibration:
        self.threads_asked.append(threads)
        self.thread_tuner = None
        self.recalibrate(progress)
        return self._put_in_force(dataclasses.replace(self.calibration, device="cpu",
                                                      threads=threads))

    def tune_threads(self, progress=None) -> Calibration:
        """Tuned from now: five steps on, the fake tuner switches to one thread."""
        self.threads_asked.append(AUTO)
        self.thread_tuner = SimpleNamespace(switch_at=self._step + 5)
        return self._put_in_force(dataclasses.replace(self.calibration, device="cpu", threads=2))

    def _put_in_force(self, calibration: Calibration) -> Calibration:
        """As the engine does: the curve in force from the next step, logged as a control."""
        self.calibration = calibration
        t, changes = time.monotonic() - self._t0, {"calibration": calibration.to_dict()}
        if calibration.threads is not None:
            changes["threads_tuned"] = self.thread_tuner is not None
        self.events.append({"type": "control", "t": t, "changes": changes})
        if self._writer:
            self._writer.write_control(t, changes)
        return calibration

    @property
    def trace_error(self) -> str | None:
        return self._writer.error if self._writer else None

    def close(self) -> None:
        self.closed = True
        if self._writer:
            self._writer.close()


def record_trace(path, steps: int) -> str:
    """A trace of `steps` fake steps at `path`, closed; returns the path as text."""
    engine = FakeEngine(trace_path=str(path))
    for _ in range(steps):
        engine.step()
    engine.close()
    return str(path)

