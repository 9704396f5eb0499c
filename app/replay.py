"""Replay of a recorded trace: a timeline scrubber, play/pause and speed, and the aggregate stats
of a selected range. Playback follows the trace's own clock (session time `t`) times the speed."""
from __future__ import annotations

import bisect
import time

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPushButton, QSlider, QWidget

from app.history import History
from app.views.live_label import LiveLabel
from engine.controls import Controls

SPEEDS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 50.0)
TICK_MS = 40


class ReplayPanel(QWidget):
    position_changed = Signal(int)   # number of steps shown (the scrubber's stop index)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._history: History | None = None
        self.play = QPushButton("Play")
        self.play.setCheckable(True)
        self.speed = QComboBox()
        self.speed.addItems([f"{s:g}×" for s in SPEEDS])
        self.speed.setCurrentIndex(SPEEDS.index(1.0))
        self.scrubber = QSlider(Qt.Orientation.Horizontal)
        self.scrubber.setRange(0, 0)
        self.position = QLabel("no trace")
        # a long range's stats must not widen the window: cut short, whole in the tooltip
        self.stats = LiveLabel("select a range on the batch plot for aggregate stats",
                               role="muted")
        row = QHBoxLayout(self)
        row.setContentsMargins(4, 0, 4, 0)
        row.addWidget(self.play)
        row.addWidget(self.speed)
        row.addWidget(self.scrubber, 3)
        row.addWidget(self.position)
        row.addWidget(self.stats, 4)
        self._timer = QTimer(self)
        self._timer.setInterval(TICK_MS)
        self._timer.timeout.connect(self._advance)
        self._wall, self._t = 0.0, 0.0
        self.play.toggled.connect(self._on_play)
        self.scrubber.valueChanged.connect(self._on_scrub)

    def load(self, history: History) -> None:
        self._history = history
        self.play.setChecked(False)
        self.scrubber.setRange(1 if len(history) else 0, len(history))
        self.scrubber.setValue(len(history))
        self._on_scrub(len(history))

    def stop_index(self) -> int:
        return self.scrubber.value()

    def show_range(self, lo: int, hi: int) -> None:
        if self._history is not None:
            self.stats.setText("range: " + self._history.stats(lo, hi).describe())

    def toggle(self) -> None:
        self.play.toggle()

    def _on_play(self, playing: bool) -> None:
        self.play.setText("Pause" if playing else "Play")
        if not playing:
            self._timer.stop()
            return
        history = self._history
        if history is None or not len(history):
            self.play.setChecked(False)
            return
        if self.scrubber.value() >= len(history):
            self.scrubber.setValue(1)  # play from the start once the end was reached
        self._wall, self._t = time.monotonic(), history.record(self.scrubber.value() - 1).t
        self._timer.start()

    def _advance(self) -> None:
        history = self._history
        now = time.monotonic()
        self._t += (now - self._wall) * SPEEDS[self.speed.currentIndex()]
        self._wall = now
        stop = max(1, history.index_at(self._t))
        self.scrubber.setValue(stop)
        if stop >= len(history):
            self.play.setChecked(False)

    def _on_scrub(self, stop: int) -> None:
        if self._history is None or not len(self._history):
            self.position.setText("no steps in this trace" if self._history is not None else
                                  "no trace")
            return
        rec = self._history.record(stop - 1)
        self.position.setText(f"step {rec.step} · {rec.t:.1f} s")
        self.position_changed.emit(stop)


class SessionTimeline:
    """What was in force at each moment of a recorded session: the controls (those it started
    with, then each control event's changes applied in order; a change the engine rejected is
    recorded without changes, so it changes nothing here either), the t(N) curve (the
    session's, then each one a recalibration or a switch of CPU threads put in force) and
    whether the engine's tuner was picking the CPU threads."""

    def __init__(self, controls: Controls, calibration, events: list[dict]) -> None:
        from engine.spec.calibration import Calibration  # torch: imported once a trace opens
        self._controls, self._curves = _InForce(controls), _InForce(calibration)
        self._tuned = _InForce(False)
        self.unreadable_curves = 0  # logged curves that do not read: the one before stays
        for event in sorted(events, key=lambda e: e["t"]):
            changes = dict(event["changes"])
            tuned = changes.pop("threads_tuned", None)
            if isinstance(tuned, bool):
                self._tuned.change(event["t"], tuned)
            curve = changes.pop("calibration", None)
            if curve is not None:
                try:
                    self._curves.change(event["t"], Calibration.from_dict(curve))
                except (TypeError, ValueError, KeyError, AttributeError):
                    self.unreadable_curves += 1
            if changes:
                try:
                    self._controls.change(event["t"], self._controls.last.updated(changes))
                except (TypeError, ValueError):
                    continue  # a trace's event the reader let through but Controls refuses

    def controls_at(self, t: float) -> Controls:
        """In force at a step that started at session time t: changes apply at step boundaries,
        so one logged at t is in force for the step starting then."""
        return self._controls.at(t)

    def calibration_at(self, t: float):
        """The curve the step starting at session time t was planned with (None: unreadable)."""
        return self._curves.at(t)

    def threads_tuned_at(self, t: float) -> bool:
        """Whether the tuner picked the CPU threads of the step starting at session time t."""
        return self._tuned.at(t)


class _InForce:
    """A value and the times it was replaced."""

    def __init__(self, start) -> None:
        self._times, self._values = [float("-inf")], [start]

    @property
    def last(self):
        return self._values[-1]

    def change(self, t: float, value) -> None:
        self._times.append(t)
        self._values.append(value)

    def at(self, t: float):
        return self._values[bisect.bisect_right(self._times, t) - 1]
