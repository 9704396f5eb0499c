"""One worker thread owns the engine: it builds it (model load and calibration, with progress),
then loops engine.step() until stopped. The GUI never calls into the engine from its own thread
except the thread-safe mailbox and ring buffers; failures arrive as a signal with a message."""
from __future__ import annotations

import logging
import threading
from typing import Callable

from PySide6.QtCore import QObject, QThread, Qt, Signal, Slot

from engine.errors import SwarmscopeError

log = logging.getLogger(__name__)
IDLE_WAIT_S = 0.005  # when a step had nothing to run; the engine sleeps too, this is a backstop

# build(progress) -> engine; progress(message, fraction 0..1) may be called from the worker thread.
EngineBuilder = Callable[[Callable[[str, float], None]], object]


class _Cancelled(Exception):
    """Raised from the progress callback when the window closes while the engine is being built."""


class EngineWorker(QObject):
    progress = Signal(str, float)
    ready = Signal(object)        # the engine, built and about to run
    failed = Signal(str)          # a message for the window; the session's records are kept
    finished = Signal()

    def __init__(self, build: EngineBuilder) -> None:
        super().__init__()
        self._build = build
        self._stop = threading.Event()
        self._recalibrate = threading.Event()
        self.engine = None

    def stop(self) -> None:
        self._stop.set()

    def request_recalibration(self) -> None:
        self._recalibrate.set()

    def _progress(self, message: str, fraction: float) -> None:
        if self._stop.is_set():  # model loading reports progress often: a cheap place to stop
            raise _Cancelled
        self.progress.emit(message, fraction)

    @Slot()
    def run(self) -> None:
        try:
            self.engine = self._build(self._progress)
            self.ready.emit(self.engine)
            while not self._stop.is_set():
                if self._recalibrate.is_set():
                    self._recalibrate.clear()
                    self.engine.recalibrate(progress=self.progress.emit)
                if self.engine.step() is None:
                    self._stop.wait(IDLE_WAIT_S)
        except _Cancelled:
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
        self.thread.start()

    def stop(self, timeout_ms: int = 30_000) -> bool:
        """Ask the loop to end after the current step and wait; True if the thread ended."""
        self.worker.stop()
        if not self.thread.isRunning():
            return True
        return self.thread.wait(timeout_ms)
