"""One worker thread owns the engine: it builds it (model load and calibration, with progress),
then loops engine.step() until stopped. The GUI never calls into the engine from its own thread
except the thread-safe mailbox and ring buffers; failures arrive as a signal with a message."""
from __future__ import annotations

import logging
import queue
import sys
import threading
from typing import Callable

from PySide6.QtCore import QObject, QThread, Qt, Signal, Slot

from app.progress import Cancelled, Progress
from engine.errors import SwarmscopeError
from engine.thread_tuner import AUTO

log = logging.getLogger(__name__)
STOP_WAIT_MS = 15_000  # calibration reports once per round of timed shapes (seconds)
IDLE_WAIT_S = 0.005  # when a step had nothing to run; the engine sleeps too, this is a backstop
# The engine thread's Python (scheduling, verification, the model's per-layer glue) shares the GIL
# with the window's drawing; a shorter switch interval than CPython's 5 ms hands it back to the
# engine sooner when a redraw holds it.
GIL_SWITCH_S = 0.001

# build(progress) -> engine; progress(message, fraction 0..1) is called on the worker thread and
# raises Cancelled once the window has asked the worker to stop.
EngineBuilder = Callable[[Progress], object]


class EngineWorker(QObject):
    progress = Signal(str, float)
    ready = Signal(object)        # the engine, built and about to run
    recalibrated = Signal(object)  # the new Calibration, in force from the next step (asked
                                   # for, or a switch of the engine's tuned CPU threads)
    failed = Signal(str)          # a message for the window; the session's records are kept
    finished = Signal()

    def __init__(self, build: EngineBuilder) -> None:
        super().__init__()
        self._build = build
        self._stop = threading.Event()
        self._recalibrate = threading.Event()
        self._threads: queue.SimpleQueue[int | str] = queue.SimpleQueue()  # asked for, in order
        self._report = Progress(self.progress.emit, self._stop)
        self.engine = None

    def stop(self) -> None:
        self._stop.set()

    def request_recalibration(self) -> None:
        self._recalibrate.set()

    def request_threads(self, threads: int | str) -> None:
        """Switch the CPU threads (a count, or AUTO: tuned) between steps; the last of several
        requests wins."""
        self._threads.put(threads)

    @Slot()
    def run(self) -> None:
        try:
            self.engine = self._build(self._report)
            self.ready.emit(self.engine)
            while not self._stop.is_set():
                if self._recalibrate.is_set():
                    self._recalibrate.clear()
                    self._new_curve("re-measuring t(N)…", self.engine.recalibrate)
                threads = None
                while not self._threads.empty():
                    threads = self._threads.get()
                if threads == AUTO:
                    self._new_curve("tuning CPU threads…", self.engine.tune_threads)
                elif threads is not None:
                    self._new_curve(f"switching to {threads} CPU threads…",
                                    lambda progress: self.engine.use_threads(threads, progress))
                shown = self.engine.calibration
                if self.engine.step() is None:
                    self._stop.wait(IDLE_WAIT_S)
                elif self.engine.calibration is not shown:  # the tuner switched threads
                    self._announce(self.engine.calibration)
        except Cancelled:
            pass
        except SwarmscopeError as exc:
            self.failed.emit(str(exc))
        except Exception as exc:  # noqa: BLE001 - any engine bug must reach the window, not kill it
            log.exception("engine failed")
            self.failed.emit(f"engine error: {type(exc).__name__}: {exc}")
        finally:
            if self.engine is not None:
                try:
                    self.engine.close()
                except Exception:  # noqa: BLE001 - closing after a failure must not hide it
                    log.exception("engine close failed")
            self.finished.emit()

    def _new_curve(self, message: str, plan: Callable[[Callable[[str], None]], object]) -> None:
        """Put the curve `plan(progress)` returns in force (measuring it checks for a close at
        every forward pass) and tell the window."""
        self.progress.emit(message, 0.0)
        with self._report.checking(self.engine.loaded.model):
            calibration = plan(self._report.calibration(0.0, 1.0))
        self._announce(calibration)

    def _announce(self, calibration) -> None:
        """Tell the window of the curve now in force (asked for, or the tuner's)."""
        tuned = " (tuned)" if self.engine.thread_tuner is not None else ""
        self.progress.emit(f"t(N) on {calibration.hardware}{tuned} · T = {calibration.budget}", 1.0)
        self.recalibrated.emit(calibration)


class EngineHost(QObject):
    """The worker and its QThread; stop() joins the thread so Qt never tears down a running one."""

    def __init__(self, build: EngineBuilder, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.thread = QThread()
        self.worker = EngineWorker(build)
        self.worker.moveToThread(self.thread)
        self.thread.started.connect(self.worker.run)
        # Direct: quit from the worker thread itself, so stop() may block the GUI thread in wait()
        # without waiting on a queued call that only the blocked GUI thread could deliver.
        self.worker.finished.connect(self.thread.quit, Qt.ConnectionType.DirectConnection)

    def start(self) -> None:
        sys.setswitchinterval(GIL_SWITCH_S)
        self.thread.start()

    def stop(self, timeout_ms: int = STOP_WAIT_MS) -> bool:
        """Ask the loop to end after the current step (or calibration point) and wait; True if
        the thread ended. A False leaves the thread running: keep this host referenced."""
        self.worker.stop()
        if not self.thread.isRunning():
            return True
        return self.thread.wait(timeout_ms)
