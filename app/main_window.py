"""The window's shell: the dashboard in the middle, the error banner over it and the replay bar
under it, the controls docked on the left, progress in the status bar. What runs in it is each in
a part of its own: a live session (live_session.py), the replay of a trace (trace_replay.py), the
menus and their actions (window_actions.py). Errors appear in the banner; records are never
dropped."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import (QApplication, QDockWidget, QMainWindow, QProgressBar, QScrollArea,
                               QVBoxLayout, QWidget)

from app.controls_panel import ControlsPanel
from app.dashboard import Dashboard
from app.history import History
from app.live_session import LIVE_KEPT, LiveSessionMixin
from app.replay import ReplayPanel
from app.session_traces import SessionTraces
from app.theme import RESOURCES, Theme, apply_theme
from app.trace_replay import TraceReplayMixin
from app.views.banner import Banner
from app.window_actions import WindowActionsMixin

# The least window: the menus, the replay bar and a screenful of the grid (which scrolls; it
# used to hold the window larger than asked). Smaller, the menu bar and the replay bar crowd.
LEAST_SIZE = (640, 400)
CONTROLS_DOCK_PX = 270


class MainWindow(LiveSessionMixin, TraceReplayMixin, WindowActionsMixin, QMainWindow):
    def __init__(self, theme: Theme, traces: SessionTraces | None = None) -> None:
        super().__init__()
        self.setWindowTitle("swarmscope")
        self.setMinimumSize(*LEAST_SIZE)
        self.setWindowIcon(QIcon(str(RESOURCES / "icons" / "swarmscope.svg")))
        self.theme = theme
        # What the views show: the live session's, or the replayed trace's.
        self.history = History(keep=LIVE_KEPT)
        self.trace_path: str | None = None  # the live session's trace, or the replayed one
        self.calibration = None   # the t(N) curve of the live engine or of the replayed trace
        self._init_live_session(traces)
        self._init_trace_replay()

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
        self.controls.threads_changed.connect(self._switch_threads)
        self.controls.setEnabled(False)
        scroll = QScrollArea()
        scroll.setWidget(self.controls)
        scroll.setWidgetResizable(True)
        dock = QDockWidget("Controls")
        dock.setWidget(scroll)
        dock.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetMovable
                         | QDockWidget.DockWidgetFeature.DockWidgetClosable)
        dock.setMinimumWidth(CONTROLS_DOCK_PX)
        self.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, dock)
        self._controls_dock = dock
        self._fitted_to_width = False

        self.progress = QProgressBar()
        self.progress.setMaximumWidth(220)
        self.progress.hide()
        self.statusBar().addPermanentWidget(self.progress)
        self.statusBar().addPermanentWidget(self.kv_label)
        self.statusBar().addPermanentWidget(self.api_label)
        self._build_menus()

    def _wire_dashboard(self) -> None:
        self.dashboard.batch.follow_lost.connect(lambda: self.follow_action.setChecked(False))
        self.dashboard.batch.range_selected.connect(self.replay.show_range)
        self.dashboard.batch.set_replay(self.replaying)

    def _sync_ceilings(self) -> None:
        """The batch plot's ceilings as the controls panel shows them (live: as set; in replay:
        in force at the scrubbed step)."""
        self.dashboard.batch.set_ceilings(self.controls.batch_ceiling.value(),
                                          self.controls.spec_ceiling.value())

    def show_error(self, message: str, records_kept: bool = True) -> None:
        """The banner over the views; `records_kept`: say that the session's records stay."""
        self.banner.show_message(f"⚠ {message}" + ("   (the session's records so far are kept)"
                                                   if records_kept else ""))
        self.progress.hide()
        self.statusBar().showMessage(message)

    def set_theme(self, name: str) -> None:
        """Rebuild the views in the new theme (plots take colours at construction)."""
        self.theme = Theme.load(name)
        apply_theme(QApplication.instance(), self.theme)
        self._new_dashboard()
        stop = self.replay.stop_index() if self.replaying else len(self.history)
        self.dashboard.show_history(self.history, stop, force=True)

    def show_calibration(self, calibration, tuned: bool = False) -> None:
        """The t(N) curve the views plan with (None: none to show), and its CPU thread count
        (`tuned`: picked by the engine's tuner)."""
        self.calibration = calibration
        self.dashboard.set_calibration(calibration)
        self.controls.set_threads(calibration and calibration.threads, tuned)

    def _new_dashboard(self) -> None:
        """Views built afresh (plots take colours at construction, and a new session must not
        show the last one's lines while its model loads)."""
        old, self.dashboard = self.dashboard, Dashboard(self.theme)
        self._central_layout.replaceWidget(old, self.dashboard)
        old.deleteLater()
        self._wire_dashboard()
        self._sync_ceilings()
        self.dashboard.set_calibration(self.calibration)

    def showEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().showEvent(event)
        if not self._fitted_to_width:
            self._fitted_to_width = True
            self._fit_controls_to_width()

    def _fit_controls_to_width(self) -> None:
        """A window opened too narrow for both the controls and every view's columns opens with
        the controls hidden, rather than the grid scrolling sideways; C shows them. Only at the
        first show: later the panel is where the user put it."""
        if self.width() < CONTROLS_DOCK_PX + self.dashboard.least_grid_size().width():
            self._controls_dock.hide()
            self.statusBar().showMessage("the controls panel is hidden to leave the views room; "
                                         "C shows it")

    def closeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        self.hide()  # gone at once, while the engine finishes its step or calibration point
        self.stop_serving()
        self.stop_engine()
        super().closeEvent(event)
