"""The window: dashboard in the middle, controls on the left, replay bar at the bottom. Live, a
timer pulls new records from the engine's ring buffers at 25 Hz and redraws as often as the
frame pacer allows (by default 3 % of one core, so the engine keeps the machine; View → Smooth
redraw lifts it); in replay, the scrubber picks the step the views show. Errors appear in a
banner; records are never dropped."""
from __future__ import annotations

from dataclasses import replace
from importlib.metadata import version

import torch
from PySide6.QtCore import Qt, QTimer, qVersion
from PySide6.QtGui import QAction, QIcon, QKeySequence
from PySide6.QtWidgets import (QApplication, QDockWidget, QFileDialog, QMainWindow,
                               QMessageBox, QProgressBar, QScrollArea, QVBoxLayout, QWidget)

from app.agent_rows import AgentRow
from app.controls_panel import ControlsPanel
from app.dashboard import Dashboard
from app.engine_factory import EngineSpec
from app.exporting import FILTERS, export
from app.frame_pacer import ENGINE_FIRST_SHARE, SMOOTH_SHARE, FramePacer
from app.history import History
from app.replay import ControlsTimeline, ReplayPanel
from app.session_traces import SessionTraces
from app.views.banner import Banner
from app.views.agents_view import TRANSCRIPT_CHARS
from app.theme import RESOURCES, Theme, apply_theme
from app.worker import EngineBuilder, EngineHost
from engine.controls import Controls
from engine.errors import SwarmscopeError
from engine.loading import check_model_folder

FRAME_MS = 40  # 25 Hz: views redraw from the ring buffers on this timer, never once per step
# Step records, and events, a live window keeps (its plots keep every step's numbers; the trace,
# everything): the views read the newest few hundred, and a record is ~1.5 KB.
LIVE_KEPT = 20_000


class MainWindow(QMainWindow):
    def __init__(self, theme: Theme, traces: SessionTraces | None = None) -> None:
        super().__init__()
        self.setWindowTitle("swarmscope")
        self.setWindowIcon(QIcon(str(RESOURCES / "icons" / "swarmscope.svg")))
        self.theme = theme
        self.history = History(keep=LIVE_KEPT)
        self.engine = None
        self.host: EngineHost | None = None
        self._stuck_hosts: list[EngineHost] = []
        self.traces = traces or SessionTraces()  # where live sessions are recorded
        self.trace_path: str | None = None  # the live session's trace, or the replayed one
        self._spec: EngineSpec | None = None  # what the last session was started from
        self.calibration = None   # the t(N) curve of the live engine or of the replayed trace
        self.replaying = False
        self._trace_error_shown = False  # the live engine's trace stopped, and the user was told
        self._replay_controls: ControlsTimeline | None = None  # of the trace replayed
        self._replay_shown: Controls | None = None  # the controls its panel shows
        self._record_seq = self._event_seq = 0
        self.pacer = FramePacer()
        self._undrawn = False  # records pulled but not drawn yet (the pacer held the frame)

        self.banner = Banner()
        self.dashboard = Dashboard(theme)
        self.replay = ReplayPanel()
        self.replay.hide()
        self.replay.position_changed.connect(self._show_replay_step)
        central = QWidget()
        self._central_layout = QVBoxLayout(central)
        self._central_layout.setContentsMargins(0, 0, 0, 0)
        self._central_layout.addWidget(self.banner)
        self._central_layout.addWidget(self.dashboard, 1)
        self._central_layout.addWidget(self.replay)
        self.setCentralWidget(central)
        self._wire_dashboard()

        self.controls = ControlsPanel()
        self.controls.changed.connect(self._post_controls)
        self.controls.recalibrate.connect(self._recalibrate)
        self.controls.setEnabled(False)
        scroll = QScrollArea()
        scroll.setWidget(self.controls)
        scroll.setWidgetResizable(True)
        dock = QDockWidget("Controls")
        dock.setWidget(scroll)
        dock.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetMovable
                         | QDockWidget.DockWidgetFeature.DockWidgetClosable)
        dock.setMinimumWidth(270)
        self.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, dock)
        self._controls_dock = dock

        self.progress = QProgressBar()
        self.progress.setMaximumWidth(220)
        self.progress.hide()
        self.statusBar().addPermanentWidget(self.progress)
        self._build_menus()
        self.timer = QTimer(self)
        self.timer.setInterval(FRAME_MS)
        self.timer.timeout.connect(self.poll)

    # -- menus and shortcuts --
    def _build_menus(self) -> None:
        def action(menu, text: str, slot, shortcut=None, checkable=False) -> QAction:
            act = QAction(text, self)
            if shortcut:
                act.setShortcut(QKeySequence(shortcut))
            act.setCheckable(checkable)
            act.triggered.connect(slot)
            menu.addAction(act)
            self.addAction(act)  # shortcuts work even when the menu bar is hidden
            return act

        file = self.menuBar().addMenu("&File")
        action(file, "Open trace…", self._open_trace_dialog, "Ctrl+O")
        action(file, "Export…", self._export_dialog, "Ctrl+E")
        action(file, "Quit", self.close, "Ctrl+Q")
        session = self.menuBar().addMenu("&Session")
        action(session, "Pause / resume  (replay: play / pause)", self.toggle_pause, "Space")
        action(session, "Speculation on / off", self.toggle_speculation, "S")
        action(session, "Load model…", self._load_model_dialog, "Ctrl+M")
        action(session, "Re-run calibration", self._recalibrate)
        view = self.menuBar().addMenu("&View")
        self.follow_action = action(view, "Follow live", self._set_follow, "F", checkable=True)
        self.follow_action.setChecked(True)
        self.controls_action = self._controls_dock.toggleViewAction()  # a small window's room
        self.controls_action.setText("Controls panel")
        self.controls_action.setShortcut(QKeySequence("C"))
        view.addAction(self.controls_action)
        self.addAction(self.controls_action)
        self.smooth_action = action(view, "Smooth redraw (takes CPU from the engine)",
                                    self._set_smooth, checkable=True)
        for name in ("dark", "light"):
            action(view, f"{name.title()} theme", lambda _=False, n=name: self.set_theme(n))
        help_menu = self.menuBar().addMenu("&Help")
        action(help_menu, "Keyboard shortcuts",
               lambda: QMessageBox.information(self, "Keyboard shortcuts", self.shortcuts_text()),
               "F1")
        action(help_menu, "About swarmscope",
               lambda: QMessageBox.about(self, "About swarmscope", self.about_text()))

    def shortcuts_text(self) -> str:
        """Every action that has a shortcut, as its menu names it."""
        return "\n".join(
            f"{act.shortcut().toString(QKeySequence.SequenceFormat.NativeText)}\t{act.text()}"
            for act in self.actions() if not act.shortcut().isEmpty())

    def about_text(self) -> str:
        """Versions, and what the live engine runs: model, dtype, device and its budget."""
        lines = [f"swarmscope {version('swarmscope')} · PyTorch {torch.__version__} · "
                 f"Qt {qVersion()}"]
        if self.engine is not None:
            loaded, calibration = self.engine.loaded, self.calibration
            context = ("" if calibration.context is None else
                       f", calibrated with lanes at context {calibration.context}")
            lines.append(f"{loaded.name} ({loaded.source}), {calibration.dtype} on "
                         f"{calibration.device}: T = {calibration.budget}, "
                         f"t(1) = {calibration.t_ms(1):.1f} ms{context}")
        lines.append("The default model, SmolLM2-135M-Instruct, is Apache-2.0 (Hugging Face).")
        return "\n".join(lines)

    def _wire_dashboard(self) -> None:
        self.dashboard.batch.follow_lost.connect(lambda: self.follow_action.setChecked(False))
        self.dashboard.batch.range_selected.connect(self.replay.show_range)
        self.dashboard.batch.set_replay(self.replaying)

    # -- live session --
    def start_session(self, spec: EngineSpec) -> None:
        """A live session of `spec`'s model, recorded where `traces` says (`spec.trace_out` is
        set here)."""
        unrecorded = None
        try:
            trace = self.traces.next(replayed=self.trace_path if self.replaying else None)
        except OSError as exc:  # a read-only or misplaced data dir: run, unrecorded
            trace, unrecorded = None, (f"this session is not recorded: cannot write its trace "
                                       f"({exc.filename}: {exc.strerror}); --trace-out FILE "
                                       "records elsewhere")
        self.start_live(replace(spec, trace_out=trace))
        if unrecorded:
            self.show_error(unrecorded, records_kept=False)

    def start_live(self, spec: EngineSpec | None = None, build: EngineBuilder | None = None) -> None:
        """Start an engine on the worker thread: from `spec`, or from `build` (tests, benches).
        The views start afresh; the last session's records stay in its trace."""
        self.stop_engine()
        self._leave_replay()
        self.banner.hide()
        if len(self.history) or self.calibration is not None:  # views that showed something
            self.history = History(keep=LIVE_KEPT)
            self.calibration = None  # the new engine's, once it is ready
            self._new_dashboard()
        self._spec = spec
        self.trace_path = spec.trace_out if spec else None
        self.host = EngineHost(build or spec.build, self)
        self.host.worker.progress.connect(self._on_progress)
        self.host.worker.ready.connect(self._on_ready)
        self.host.worker.recalibrated.connect(self._on_recalibrated)
        self.host.worker.failed.connect(
            lambda message: self.show_error(message, records_kept=len(self.history) > 0))
        self.progress.show()
        self.host.start()

    def _on_progress(self, message: str, fraction: float) -> None:
        self.statusBar().showMessage(message)
        self.progress.setValue(int(100 * fraction))
        self.progress.setVisible(fraction < 1.0)

    def _on_ready(self, engine) -> None:
        self.engine = engine
        self._record_seq = self._event_seq = 0
        self._trace_error_shown = False
        self.calibration = engine.calibration
        self.dashboard.set_calibration(self.calibration)
        self.controls.set_controls(engine.controls)
        self.controls.setEnabled(True)
        self.controls.recalibrate_button.setEnabled(True)
        self._sync_ceilings()
        self.timer.start()

    def poll(self, force: bool = False) -> None:
        """Pull what the engine recorded since the last frame, then redraw once if the pacer
        allows (`force`: now, every view, as for a screenshot)."""
        engine = self.engine
        if engine is None:
            return
        if engine.trace_error and not self._trace_error_shown:  # once: the session runs on
            self._trace_error_shown = True
            self.show_error(engine.trace_error)
        records, self._record_seq = engine.records.since(self._record_seq)
        events, self._event_seq = engine.events.since(self._event_seq)
        self.history.extend(records)
        self.history.add_events(events)
        self._undrawn = self._undrawn or bool(records or events)
        if force or (self._undrawn and self.pacer.ready()):
            self._undrawn = False
            self.dashboard.show_history(self.history, len(self.history),
                                        agents=lambda: self._live_agents(engine), force=force)

    def _live_agents(self, engine) -> list[AgentRow]:
        """The engine's agents, decoding only the shown agent's transcript tail."""
        shown = self.dashboard.agents.selected
        views = engine.agents(set() if shown is None else {shown}, TRANSCRIPT_CHARS)
        return [AgentRow.from_view(view) for view in views]

    def _set_smooth(self, smooth: bool) -> None:
        self.pacer.share = SMOOTH_SHARE if smooth else ENGINE_FIRST_SHARE

    def _post_controls(self, changes: dict) -> None:
        if self.engine is not None:
            self.engine.mailbox.post(**changes)
        self._sync_ceilings(changes)

    def _sync_ceilings(self, changes: dict | None = None) -> None:
        self.dashboard.batch.set_ceilings(self.controls.batch_ceiling.value(),
                                          self.controls.spec_ceiling.value())

    def _recalibrate(self) -> None:
        """Re-measure t(N) on the worker thread between steps; the views keep drawing meanwhile."""
        if self.host is not None and self.engine is not None:
            self.controls.recalibrate_button.setEnabled(False)
            self.progress.show()
            self.host.worker.request_recalibration()

    def _on_recalibrated(self, calibration) -> None:
        self.calibration = calibration
        self.dashboard.set_calibration(calibration)
        self.controls.recalibrate_button.setEnabled(self.engine is not None)

    def toggle_pause(self) -> None:
        if self.replaying:
            self.replay.toggle()
        elif self.engine is not None:
            self.controls.pause.toggle()

    def toggle_speculation(self) -> None:
        if self.engine is not None and not self.replaying:
            self.controls.toggle_speculation()

    def stop_engine(self) -> None:
        """Stop the worker and wait for it; the history (and the trace file) stay."""
        self.timer.stop()
        if self.host is not None:
            if not self.host.stop():
                # Stuck in one long call that reports no progress: keep the host referenced so
                # its QThread is never destroyed while running (Qt aborts the process if it is).
                self.show_error("the engine did not stop in time; it is left to finish")
                self._stuck_hosts.append(self.host)
            self.poll(force=True)  # the last records since the previous frame, drawn
            self.host = None
        self.engine = None
        self.controls.setEnabled(False)

    def join_threads(self, timeout_ms: int = 20_000) -> bool:
        """Wait (bounded) for engines that did not stop when asked; True if none still runs."""
        self._stuck_hosts = [h for h in self._stuck_hosts if not h.thread.wait(timeout_ms)]
        return not self._stuck_hosts

    def show_error(self, message: str, records_kept: bool = True) -> None:
        """The banner over the views; `records_kept`: say that the session's records stay."""
        self.banner.show_message(f"⚠ {message}" + ("   (the session's records so far are kept)"
                                                   if records_kept else ""))
        self.progress.hide()
        self.statusBar().showMessage(message)

    # -- replay --
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
        self.dashboard.set_calibration(self.calibration)
        self.dashboard.batch.set_replay(True)
        self.dashboard.batch.follow = False
        try:  # the panel (read-only) and the ceilings follow the scrubbed step's controls
            start = Controls(**trace.session.get("controls", {}))
        except (TypeError, ValueError) as exc:
            start = Controls()
            unreadable.append(f"its controls ({exc}), so the defaults are shown")
        self._replay_controls, self._replay_shown = ControlsTimeline(start, trace.controls), None
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
        controls = self._replay_controls.at(self.history.record(stop - 1).t)
        if controls is not self._replay_shown:
            self._replay_shown = controls
            self.controls.set_controls(controls)
            self._sync_ceilings()
        self.dashboard.show_history(self.history, stop, force=True)

    def _leave_replay(self) -> None:
        if self.replaying:
            self.replaying = False
            self.replay.hide()
            self.dashboard.batch.set_replay(False)

    # -- dialogs --
    def _open_trace_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open trace", "", "Traces (*.jsonl *.jsonl.gz)")
        if path:
            self.open_trace(path)

    def _export_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export", "", ";;".join(FILTERS))
        if path:
            try:
                self.statusBar().showMessage(export(self.trace_path, path, self))
            except SwarmscopeError as exc:
                self.show_error(str(exc))

    def _load_model_dialog(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Hugging Face model folder")
        if folder:
            self.load_model(folder)

    def load_model(self, folder: str) -> None:
        """A new live session on the model in `folder`, with the last session's dtype and device
        and the swarm size the controls show; a folder that would not load is refused before the
        session shown stops."""
        try:
            check_model_folder(folder)
        except SwarmscopeError as exc:
            self.show_error(f"{exc}; nothing changed", records_kept=False)
            return
        self.start_session(replace(self._spec or EngineSpec(), model=folder,
                                   agents=self.controls.swarm_size.value()))

    def _set_follow(self, follow: bool) -> None:
        self.dashboard.batch.follow = follow

    def set_theme(self, name: str) -> None:
        """Rebuild the views in the new theme (plots take colours at construction)."""
        self.theme = Theme.load(name)
        apply_theme(QApplication.instance(), self.theme)
        self._new_dashboard()
        stop = self.replay.stop_index() if self.replaying else len(self.history)
        self.dashboard.show_history(self.history, stop, force=True)

    def _new_dashboard(self) -> None:
        """Views built afresh (plots take colours at construction, and a new session must not
        show the last one's lines while its model loads)."""
        old, self.dashboard = self.dashboard, Dashboard(self.theme)
        self._central_layout.replaceWidget(old, self.dashboard)
        old.deleteLater()
        self._wire_dashboard()
        self._sync_ceilings()
        self.dashboard.set_calibration(self.calibration)

    def closeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        self.hide()  # gone at once, while the engine finishes its step or calibration point
        self.stop_engine()
        super().closeEvent(event)
