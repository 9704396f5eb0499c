"""The window over the real Engine (tiny-test model) on its worker thread: control changes posted
from the panel reach the engine at the next step; calibration can be re-run from the window; closing
while the model loads or calibrates stops the worker and the process exits 0."""
import os
import re
import subprocess
import sys
import threading
import time

import pytest

from app.engine_factory import EngineSpec
from app.main_window import MainWindow
from app.progress import Progress
from app.theme import Theme
from app.worker import EngineHost
from engine.thread_tuner import physical_cores


@pytest.mark.slow
def test_controls_reach_the_real_engine(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path / "cache"))
    window = MainWindow(Theme.load("dark"))
    qtbot.addWidget(window)
    window.show()
    window.start_live(EngineSpec(model="tiny-test", dtype="fp32", device="cpu", agents=6,
                                 trace_out=str(tmp_path / "live.jsonl")))
    qtbot.waitUntil(lambda: len(window.history) > 5, timeout=120_000)
    engine = window.engine
    # the status bar says how full the KV cache is, as the engine holds it
    kv = re.fullmatch(r"KV cache (\d+)% held · ([\d,]+) prompt tokens shared · (\d+) preempted",
                      window.kv_label.text())
    assert kv and 0 < int(kv[1]) <= 100 and window.kv_label.isVisibleTo(window)
    window.controls.policy.setCurrentText("off")
    window.controls.batch_ceiling.setValue(2)
    qtbot.waitUntil(lambda: (engine.controls.policy, engine.controls.batch_ceiling) == ("off", 2),
                    timeout=30_000)
    mark = engine.records.total
    qtbot.waitUntil(lambda: len(window.history) > mark + 8, timeout=60_000)
    later = window.history.records(mark)
    assert all(lane.k == 0 for rec in later for lane in rec.lanes)
    assert all(rec.batch <= 2 for rec in later)
    assert any(e.get("type") == "control" for e in window.history.events_from(0)[0])

    before = window.calibration
    with qtbot.waitSignal(window.host.worker.recalibrated, timeout=120_000):
        window.controls.recalibrate_button.click()
    # The window's slot and waitSignal's both hear the queued signal, in either order.
    qtbot.waitUntil(lambda: window.calibration is engine.calibration, timeout=5_000)
    assert window.calibration is not before
    assert window.controls.recalibrate_button.isEnabled()
    ns, _ = window.dashboard.cost.curve.getData()
    assert list(ns) == [n for n, _ in engine.calibration.points]
    mark = engine.records.total
    qtbot.waitUntil(lambda: len(window.history) > mark + 2, timeout=60_000)
    assert window.history.record(-1).budget == engine.calibration.budget
    window.close()
    assert window.host is None and (tmp_path / "live.jsonl").stat().st_size > 0


@pytest.mark.slow
@pytest.mark.skipif(physical_cores() < 2, reason="one core: no other thread count to choose")
def test_the_real_engine_switches_cpu_threads_from_the_panel(qtbot, tmp_path, monkeypatch):
    """The count chosen is measured on the worker (nothing cached), in force from the next
    step, and logged in the trace as the curve it brought."""
    from engine.telemetry.trace_reader import read_trace
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path / "cache"))
    window = MainWindow(Theme.load("dark"))
    qtbot.addWidget(window)
    window.show()
    trace = tmp_path / "live.jsonl"
    window.start_live(EngineSpec(model="tiny-test", dtype="fp32", device="cpu", agents=4,
                                 threads=2, trace_out=str(trace)))
    qtbot.waitUntil(lambda: len(window.history) > 3, timeout=120_000)
    engine = window.engine
    assert window.controls.threads.currentText() == "2" == str(engine.calibration.threads)
    with qtbot.waitSignal(window.host.worker.recalibrated, timeout=120_000):
        window.controls.threads.setCurrentText("1")
    qtbot.waitUntil(lambda: window.calibration is engine.calibration, timeout=5_000)
    assert engine.calibration.threads == 1  # read on the worker, where torch's count is set
    mark = engine.records.total
    qtbot.waitUntil(lambda: len(window.history) > mark + 2, timeout=60_000)
    assert window.history.record(-1).budget == engine.calibration.budget
    window.close()
    logged = [e["changes"]["calibration"] for e in read_trace(trace).controls]
    assert [c["threads"] for c in logged] == [1]
    assert read_trace(trace).session["calibration"]["threads"] == 2


@pytest.mark.slow
def test_the_real_engine_starts_with_tuned_cpu_threads(qtbot, tmp_path, monkeypatch):
    """threads="auto": the build has every count's curve (measured, nothing cached), and the
    panel shows auto with the count in force."""
    from engine.thread_tuner import default_counts
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path / "cache"))
    window = MainWindow(Theme.load("dark"))
    qtbot.addWidget(window)
    window.show()
    window.start_live(EngineSpec(model="tiny-test", dtype="fp32", device="cpu", agents=3,
                                 threads="auto", trace_out=None))
    qtbot.waitUntil(lambda: len(window.history) > 3, timeout=120_000)
    engine = window.engine
    assert engine.thread_tuner.counts == default_counts(physical_cores())
    cached = list((tmp_path / "cache" / "calibration").glob("cpu-*threads_tiny-test-*"))
    assert len(cached) == len(engine.thread_tuner.counts)
    qtbot.waitUntil(lambda: window.controls.threads.currentText()  # a switch may be on its way
                    == f"auto · {engine.calibration.threads} now", timeout=5_000)
    window.close()


def test_closing_mid_calibration_stops_the_worker(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path / "cache"))  # nothing cached: measure
    spec = EngineSpec(model="tiny-test", dtype="fp32", device="cpu", agents=2)
    calibrating, closed = threading.Event(), threading.Event()
    heard = []

    class Gated(Progress):
        """The worker's progress, held inside calibrate_or_load's timing loop (every message after
        its first) until the window has asked the worker to stop."""
        def __init__(self, inner):
            super().__init__(inner, threading.Event())
            self._inner = inner

        def check(self):
            self._inner.check()

        def __call__(self, message, fraction):
            if any(m.startswith("calibrating tiny-test") for m in heard):
                calibrating.set()
                closed.wait(30)
            heard.append(message)
            super().__call__(message, fraction)

    def build(progress):
        return spec.build(Gated(progress))
    host = EngineHost(build)
    ready = []
    host.worker.ready.connect(ready.append)
    host.start()
    try:
        qtbot.waitUntil(calibrating.is_set, timeout=120_000)
        host.worker.stop()
        closed.set()
        start = time.perf_counter()
        assert host.stop(timeout_ms=10_000)
        assert time.perf_counter() - start < 5
    finally:
        closed.set()
        host.stop()
    assert ready == [] and host.worker.engine is None
    assert not list((tmp_path / "cache").rglob("*.json"))  # the cut-short curve was not cached


@pytest.mark.parametrize("quit_after", ["0.3", "2.5"])
def test_quit_while_loading_or_calibrating_exits_0(tmp_path, quit_after):
    env = {**os.environ, "SWARMSCOPE_CACHE": str(tmp_path / "cache"), "QT_QPA_PLATFORM": "offscreen"}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "app.main", "--model", "tiny-test", "--dtype",
                           "fp32", "--quit-after", quit_after, "--trace-out", "none"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "QThread" not in done.stderr and time.perf_counter() - start < 60
