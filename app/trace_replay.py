"""The window replaying a recorded trace: the scrubber picks the step the views show, and the
controls panel (read-only) and the batch plot's ceilings follow the controls in force at that
step. A damaged trace replays the steps that read, and the banner says what was skipped.

A part of MainWindow (app/main_window.py), whose history, calibration, dashboard, controls and
banner it shares with the live session."""
from __future__ import annotations

from app.history import History
from app.replay import SessionTimeline
from engine.controls import Controls
from engine.errors import SwarmscopeError


class TraceReplayMixin:
    def _init_trace_replay(self) -> None:
        self.replaying = False
        self._timeline: SessionTimeline | None = None  # of the trace replayed
        self._replay_shown: Controls | None = None  # the controls its panel shows
        self._replay_tuned = False  # whether its panel shows the CPU threads as tuned

    def open_trace(self, path: str) -> bool:
        from engine.spec.calibration import Calibration
        from engine.telemetry.trace_reader import read_trace
        damage = None
        try:
            trace = read_trace(path)
        except SwarmscopeError as exc:
            try:  # a damaged trace (cut short, a garbled line) replays what reads, and says so
                trace = read_trace(path, lenient=True)
            except SwarmscopeError:
                trace = None
            if trace is None or not trace.steps:
                self.show_error(str(exc), records_kept=False)  # what the window shows stays
                return False
            skipped = sum(warning.endswith("(skipped)") for warning in trace.warnings)
            damage = (f"{exc}; replaying the {len(trace.steps)} steps that read "
                      f"({skipped} line(s) skipped)")
        self.stop_engine()
        self.banner.hide()
        self.kv_label.hide()  # a trace records no KV cache
        self.history = History()
        self.history.extend(trace.steps)
        self.history.add_events(sorted(trace.controls + trace.agents + trace.texts,
                                       key=lambda e: e["t"]))
        self.trace_path = path
        self.replaying = True
        unreadable = []  # parts of the session that do not read: the steps replay anyway
        try:
            calibration = trace.session.get("calibration")
            self.calibration = Calibration.from_dict(calibration) if calibration else None
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            self.calibration = None
            unreadable.append(f"its calibration ({exc}), so no t(N) curve")
        self.show_calibration(self.calibration)
        self.dashboard.batch.set_replay(True)
        self.dashboard.batch.follow = False
        try:  # the panel (read-only) and the ceilings follow the scrubbed step's controls
            start = Controls(**trace.session.get("controls", {}))
        except (TypeError, ValueError) as exc:
            start = Controls()
            unreadable.append(f"its controls ({exc}), so the defaults are shown")
        self._timeline = SessionTimeline(start, self.calibration, trace.controls)
        self._replay_shown, self._replay_tuned = None, False
        if self._timeline.unreadable_curves:
            unreadable.append(f"{self._timeline.unreadable_curves} curve(s) put in force "
                              "mid-session, so the one before is shown")
        self.replay.load(self.history)
        self.replay.show()
        if len(self.history):  # the range starts as the whole session, its stats shown
            t = self.history.column("t")
            self.dashboard.batch.batch_plot.setXRange(t[0], t[-1], padding=0.02)
            self.dashboard.batch.select_range(t[0], t[-1])
            self.replay.show_range(0, len(self.history))
        self.statusBar().showMessage(f"replaying {path}: {len(trace.steps)} steps" + "".join(
            f"; unreadable: {part}" for part in unreadable))
        if damage:
            self.show_error(damage, records_kept=False)
        return True

    def _show_replay_step(self, stop: int) -> None:
        t = self.history.record(stop - 1).t
        controls = self._timeline.controls_at(t)
        if controls is not self._replay_shown:
            self._replay_shown = controls
            self.controls.set_controls(controls)
            self._sync_ceilings()
        calibration, tuned = self._timeline.calibration_at(t), self._timeline.threads_tuned_at(t)
        if calibration is not self.calibration or tuned != self._replay_tuned:
            self._replay_tuned = tuned  # recalibrated, another CPU thread count, or tuned
            self.show_calibration(calibration, tuned)
        self.dashboard.show_history(self.history, stop, force=True)

    def _leave_replay(self) -> None:
        if self.replaying:
            self.replaying = False
            self.replay.hide()
            self.dashboard.batch.set_replay(False)
