"""The window over a live (fake) engine on the worker thread, replay of a recorded trace, errors
shown in the banner, screenshots and clean shutdown."""
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import zlib
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage

from app.main import main
from app.worker import EngineHost
from engine.thread_tuner import AUTO
from engine.telemetry.trace_reader import read_trace
from tests.app.fake_engine import FakeEngine, record_trace
from tests.recording import wait_for_steps


def _non_blank(path) -> bool:
    image = QImage(str(path)).convertToFormat(QImage.Format.Format_RGB888)
    array = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.bytesPerLine())
    return image.width() > 100 and len(np.unique(array[:, :image.width() * 3])) > 20


def test_worker_signals_progress_ready_and_finished(qtbot):
    engine = FakeEngine()

    def build(progress):
        progress("loading", 0.5)
        return engine
    host = EngineHost(build)
    seen = []
    host.worker.progress.connect(lambda msg, frac: seen.append((msg, frac)))
    with qtbot.waitSignal(host.worker.ready, timeout=5000) as ready:
        host.start()
    assert ready.args == [engine] and seen == [("loading", 0.5)]
    qtbot.waitUntil(lambda: engine.records.total > 5, timeout=5000)
    with qtbot.waitSignal(host.worker.finished, timeout=5000):
        assert host.stop()
    assert engine.closed and not host.thread.isRunning()


def test_worker_reports_failures_as_messages(qtbot):
    from engine.errors import ModelLoadError

    def bad_folder(progress):
        raise ModelLoadError("/nowhere/model", "no config.json")
    host = EngineHost(bad_folder)
    with qtbot.waitSignal(host.worker.failed, timeout=5000) as failed:
        host.start()
    assert failed.args == ["/nowhere/model: no config.json"]
    assert host.stop()


def test_live_controls_reach_the_engine(window, qtbot):
    engine = FakeEngine()
    window.start_live(build=lambda progress: engine)
    qtbot.waitUntil(lambda: len(window.history) > 10, timeout=5000)
    window.controls.policy.setCurrentText("off")
    window.controls.batch_ceiling.setValue(2)
    qtbot.waitUntil(lambda: (engine.controls.policy, engine.controls.batch_ceiling) == ("off", 2),
                    timeout=5000)
    mark = engine.records.total  # every record from here on was stepped under the new controls
    qtbot.waitUntil(lambda: len(window.history) > mark + 10, timeout=5000)
    later = window.history.records(mark)
    assert all(lane.k == 0 for rec in later for lane in rec.lanes)
    assert all(rec.batch <= 2 for rec in later)
    assert window.dashboard.batch.batch_ceiling.value() == 2
    window.toggle_pause()  # Space
    qtbot.waitUntil(lambda: engine.controls.paused, timeout=5000)


def test_s_turns_speculation_off_and_back_on_with_its_policy_and_k(window, qtbot):
    engine = FakeEngine()
    window.start_live(build=lambda progress: engine)
    qtbot.waitUntil(lambda: window.engine is not None, timeout=5000)
    window.controls.policy.setCurrentText("fixed")
    window.controls.k.setValue(6)
    qtbot.waitUntil(lambda: (engine.controls.policy, engine.controls.k) == ("fixed", 6),
                    timeout=5000)
    qtbot.keyClick(window, Qt.Key.Key_S)
    qtbot.waitUntil(lambda: engine.controls.policy == "off", timeout=5000)
    qtbot.keyClick(window, Qt.Key.Key_S)
    qtbot.waitUntil(lambda: (engine.controls.policy, engine.controls.k) == ("fixed", 6),
                    timeout=5000)


def test_one_key_shortcuts_work_while_a_spin_box_has_the_focus(window, qtbot):
    """After a value is typed the box keeps the focus: digits are its, S and Space the window's."""
    engine = FakeEngine()
    window.start_live(build=lambda progress: engine)
    qtbot.waitUntil(lambda: window.engine is not None, timeout=5000)
    window.activateWindow()
    box = window.controls.swarm_size
    box.setFocus()
    qtbot.waitUntil(box.hasFocus, timeout=2000)
    box.selectAll()
    qtbot.keyClicks(box, "5")
    assert box.value() == 5
    qtbot.keyClick(box, Qt.Key.Key_S)
    qtbot.waitUntil(lambda: engine.controls.policy == "off", timeout=5000)
    qtbot.keyClick(box, Qt.Key.Key_Space)
    assert window.controls.pause.isChecked()


def test_every_pane_says_what_it_shows(window):
    """Hovering over a pane, or Help -> What the views show, explains it to someone new."""
    from PySide6.QtWidgets import QGroupBox

    from app.window_actions import views_text
    boxes = window.dashboard.findChildren(QGroupBox)
    assert len(boxes) == 7 and all(len(box.toolTip()) > 60 for box in boxes)
    assert all(f"{box.title()}: {box.toolTip()}" in views_text() for box in boxes)
    assert "What the views show" in [action.text() for action in window.actions()]


def test_help_lists_every_shortcut_and_says_what_runs(window, qtbot):
    lines = window.shortcuts_text().splitlines()
    for key, name in (("Ctrl+O", "Open trace"), ("Ctrl+E", "Export"), ("Space", "Pause"),
                      ("F", "Follow live"), ("F1", "Keyboard shortcuts"), ("Ctrl+M", "Load model"),
                      ("Ctrl+Shift+M", "Load GGUF model file"),
                      ("S", "Speculation on / off"), ("C", "Controls panel")):
        assert any(line.startswith(key + "\t") and name in line for line in lines), lines
    assert "PyTorch" in window.about_text() and "T = " not in window.about_text()
    window.start_live(build=lambda progress: FakeEngine())
    qtbot.waitUntil(lambda: window.engine is not None, timeout=5000)
    assert "fake (fake; llama, 2 layers), none on dummy: T = 13" in window.about_text()
    assert "context" not in window.about_text()  # a curve that does not say
    window.calibration.context = 300
    assert "T = 13, t(1) = 25.0 ms, calibrated with lanes at context 300" in window.about_text()


def test_engine_failure_keeps_the_window_and_the_records(window, qtbot, monkeypatch):
    shown_on = []
    show_error = window.show_error
    monkeypatch.setattr(window, "show_error", lambda *a, **k: (
        shown_on.append(threading.current_thread()), show_error(*a, **k)))
    engine = FakeEngine(fail_at=30)
    window.start_live(build=lambda progress: engine)
    qtbot.waitUntil(window.banner.isVisible, timeout=5000)
    assert "injected failure" in window.banner.text()
    # by the GUI thread: widgets touched from the worker's thread crashed the app at times
    assert shown_on == [threading.main_thread()]
    window.stop_engine()
    assert len(window.history) == 30 and engine.closed


def test_a_trace_that_stops_being_written_is_shown_once_and_the_session_runs_on(
        window, qtbot, tmp_path):
    engine = FakeEngine(trace_path=str(tmp_path / "session.jsonl"))
    window.start_live(build=lambda progress: engine)
    qtbot.waitUntil(lambda: len(window.history) > 5, timeout=5000)
    engine._writer.error = "session.jsonl: trace writing stopped (No space left on device)"
    qtbot.waitUntil(window.banner.isVisible, timeout=5000)
    assert "No space left on device" in window.banner.text()
    steps = len(window.history)
    qtbot.waitUntil(lambda: len(window.history) > steps + 5, timeout=5000)  # still stepping


def test_replay_of_a_recorded_trace(window, qtbot, tmp_path):
    trace = tmp_path / "session.jsonl"
    engine = FakeEngine(trace_path=str(trace))
    for _ in range(120):
        engine.step()
    engine.mailbox.post(policy="off")
    for _ in range(20):
        engine.step()
    engine.close()
    assert window.open_trace(str(trace))
    assert len(window.history) == 140 and window.replay.isVisible()
    assert window.controls.policy.currentText() == "off"  # the last step's controls
    window.replay.scrubber.setValue(60)
    assert window.dashboard.batch.headline.text().startswith(
        f"B = {window.history.record(59).batch}")
    assert window.controls.policy.currentText() == "goodput"  # before the change, as recorded
    assert not window.controls.isEnabled()  # a replay is not steered
    window.replay.show_range(0, 120)
    assert window.replay.stats.text().startswith("range: 120 steps")
    window.replay.speed.setCurrentIndex(window.replay.speed.count() - 1)  # fastest
    window.replay.scrubber.setValue(100)
    window.toggle_pause()  # Space plays in replay
    qtbot.waitUntil(lambda: window.replay.stop_index() == 140, timeout=10000)
    assert not window.replay.play.isChecked()


def test_the_status_bar_says_how_full_the_kv_cache_is_while_live(window, qtbot, tmp_path):
    engine = FakeEngine(trace_path=str(tmp_path / "session.jsonl"))
    window.start_live(build=lambda progress: engine)
    qtbot.waitUntil(lambda: len(window.history) > 10, timeout=5000)
    window.stop_engine()
    usage = engine.kv_usage()  # as the last frame drew it: the engine has stopped
    assert window.kv_label.text() == (f"KV cache {usage.held_bytes / usage.total_bytes:.0%} "
                                      f"held · {usage.shared_tokens:,} prompt tokens shared · "
                                      "0 preempted") and window.kv_label.isVisibleTo(window)
    assert "16.8 MB at most" in window.kv_label.toolTip()
    assert window.open_trace(str(tmp_path / "session.jsonl"))
    assert not window.kv_label.isVisibleTo(window)  # a trace records no KV cache


def test_a_replay_shows_the_curve_each_step_was_planned_with(window, tmp_path):
    """A switch of CPU threads and a recalibration mid-session: scrubbed before them, the
    views show the session's first curve; after each, the one then in force."""
    trace = tmp_path / "session.jsonl"
    engine = FakeEngine(trace_path=str(trace))
    first = engine.calibration
    for steps, change in ((30, lambda: engine.use_threads(1)), (30, engine.recalibrate),
                          (30, None)):
        for _ in range(steps):
            engine.step()
        if change:
            change()
    recalibrated = engine.calibration
    engine.close()
    assert window.open_trace(str(trace))
    budget_label = window.dashboard.cost.budget_line.label
    window.replay.scrubber.setValue(20)
    assert window.calibration == first and not window.controls.threads.isVisibleTo(window)
    assert budget_label.format == f"T = {first.budget}"
    window.replay.scrubber.setValue(45)
    assert window.calibration.threads == 1 and window.controls.threads.currentText() == "1"
    assert window.controls.threads.isVisibleTo(window)
    window.replay.scrubber.setValue(90)
    assert window.calibration == recalibrated and recalibrated.budget != first.budget
    assert budget_label.format == f"T = {recalibrated.budget}"


def test_a_replay_shows_when_the_cpu_threads_were_tuned(window, tmp_path):
    """A session tuned from its 20th step, whose tuner picked one thread, then set to two: the
    threads row reads as the live panel did at each step."""
    trace = tmp_path / "session.jsonl"
    engine = FakeEngine(trace_path=str(trace))
    for steps, change in ((20, engine.tune_threads), (30, lambda: engine.use_threads(2)),
                          (20, None)):
        for _ in range(steps):
            engine.step()
        if change:
            change()
    engine.close()
    assert window.open_trace(str(trace))
    shown = []
    for step in (10, 23, 40, 60):
        window.replay.scrubber.setValue(step)
        shown.append(window.controls.threads.currentText()
                     if window.controls.threads.isVisibleTo(window) else None)
    assert shown == [None, f"{AUTO} · 2 now", f"{AUTO} · 1 now", "2"]


def test_a_trace_whose_calibration_and_controls_do_not_read_still_replays(window, tmp_path):
    trace = tmp_path / "session.jsonl"
    record_trace(trace, 20)
    lines = trace.read_text().splitlines()
    session = json.loads(lines[0])
    session["calibration"]["points"][0][1] = float("nan")  # json writes NaN, and reads it
    session["controls"]["k"] = 999
    trace.write_text("\n".join([json.dumps(session)] + lines[1:]) + "\n")
    assert window.open_trace(str(trace))
    assert len(window.history) == 20 and window.calibration is None
    message = window.statusBar().currentMessage()
    assert "unreadable: its calibration (calibration times must be positive" in message
    assert "unreadable: its controls (k must be in 0..64" in message


def test_malformed_trace_shows_a_message_with_the_line(window, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "session", "version": 1}\n{"type": "step", "step": \n')
    assert not window.open_trace(str(bad))
    assert window.banner.isVisible() and "bad.jsonl:2" in window.banner.text()


def test_a_damaged_trace_replays_the_steps_that_read_and_says_what_was_skipped(window, tmp_path):
    """A copy cut short mid-record, with a garbled line in the middle: strictly refused (as
    `trace check` does), the window replays the rest and names the first fault."""
    lines = Path(record_trace(tmp_path / "s.jsonl", 30)).read_text().splitlines(keepends=True)
    steps = [i for i, line in enumerate(lines) if line.startswith('{"type":"step"')]
    lines[steps[10]] = "garbage\n"
    cut = tmp_path / "cut.jsonl"
    cut.write_text("".join(lines)[:-20])  # the last line cut short
    assert window.open_trace(str(cut)) and window.replaying
    assert len(window.history) == 28
    text = window.banner.text()
    assert window.banner.isVisible() and f"cut.jsonl:{steps[10] + 1}: not JSON" in text
    assert "replaying the 28 steps that read (2 line(s) skipped)" in text
    # gzipped by a writer that never closed it: its warning is not a skipped line
    deflate = zlib.compressobj(6, zlib.DEFLATED, 31)
    unclosed = tmp_path / "cut.jsonl.gz"
    unclosed.write_bytes(deflate.compress(cut.read_bytes()) + deflate.flush(zlib.Z_SYNC_FLUSH))
    assert window.open_trace(str(unclosed))
    assert "replaying the 28 steps that read (2 line(s) skipped)" in window.banner.text()


def test_theme_switch_rebuilds_views(window, qtbot):
    engine = FakeEngine()
    window.start_live(build=lambda progress: engine)
    qtbot.waitUntil(lambda: len(window.history) > 5, timeout=5000)
    old = window.dashboard
    window.set_theme("light")
    assert window.dashboard is not old and window.theme.name == "light"
    qtbot.waitUntil(lambda: window.dashboard.batch.batch_curve.getData()[0] is not None,
                    timeout=5000)


def test_main_replays_saves_a_non_blank_screenshot_and_exits_0(qtbot, tmp_path):
    trace = record_trace(tmp_path / "s.jsonl", 80)
    shot = tmp_path / "replay.png"
    code = main(["--replay", trace, "--screenshot", str(shot), "--quit-after", "0.5",
                 "--size", "1200x800"])
    assert code == 0 and _non_blank(shot)
    assert QImage(str(shot)).size().toTuple() == (1200, 800)


def test_the_windows_no_thinking_and_threads_reach_the_model_load(qtbot, monkeypatch):
    """--no-thinking starts the session with the chat template's thinking off, --threads with
    the CPU threads given."""
    import engine.loading
    from app.main_window import MainWindow
    from engine.errors import SwarmscopeError
    specs, asked = [], []
    start_session = MainWindow.start_session
    monkeypatch.setattr(MainWindow, "start_session",
                        lambda self, spec: (specs.append(spec), start_session(self, spec)))

    def load_model(*args, **kwargs):
        asked.append((kwargs.get("thinking"), kwargs.get("threads")))
        raise SwarmscopeError("stop here")

    monkeypatch.setattr(engine.loading, "load_model", load_model)
    assert main(["--model", "tiny-test", "--no-thinking", "--threads", "1", "--trace-out", "none",
                 "--quit-after", "1"]) == 0
    assert [(spec.thinking, spec.threads) for spec in specs] == [(False, 1)]
    assert asked == [(False, 1)]


def test_a_session_with_nowhere_to_record_runs_and_says_so(qtbot, tmp_path, monkeypatch):
    """The user data dir cannot hold traces (read-only, or a file in its place): the window
    still runs the engine, unrecorded, and its banner says why and what to do."""
    from app import session_traces
    from app.main_window import MainWindow
    from engine.spec import calibration

    def no_folder(given):
        raise NotADirectoryError(20, "Not a directory", "/data/swarmscope/traces")

    monkeypatch.setattr(session_traces, "default_trace_path", no_folder)
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path))
    monkeypatch.setattr(calibration, "measure",
                        lambda *a, **k: calibration.Calibration.make_dummy())
    shown = []
    monkeypatch.setattr(MainWindow, "show_error",
                        lambda self, message, records_kept=True: shown.append(message))
    assert main(["--model", "tiny-test", "--dtype", "fp32", "--quit-after", "1.5"]) == 0
    assert shown == ["this session is not recorded: cannot write its trace "
                     "(/data/swarmscope/traces: Not a directory); --trace-out FILE records "
                     "elsewhere"]


def test_a_bad_window_size_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--size", "wide", "--replay", "x"])
    assert exit_.value.code == 2 and "'wide' is not WIDTHxHEIGHT" in capsys.readouterr().err
    assert main(["--quit-after", "-1", "--replay", "x"]) == 2
    assert "--quit-after must be a number of seconds >= 0, got -1.0" in capsys.readouterr().err


def test_recalibration_runs_on_the_worker_and_redraws_the_curve(window, qtbot):
    engine = FakeEngine()
    window.start_live(build=lambda progress: engine)
    qtbot.waitUntil(lambda: window.controls.recalibrate_button.isEnabled(), timeout=5000)
    heard = []
    window.host.worker.progress.connect(lambda msg, frac: heard.append((msg, frac)))
    with qtbot.waitSignal(window.host.worker.recalibrated, timeout=5000):
        window.controls.recalibrate_button.click()
        assert not window.controls.recalibrate_button.isEnabled()  # one at a time
    # waitSignal's receiver runs in the worker's thread; the window's slot is queued after it
    qtbot.waitUntil(lambda: window.calibration is engine.calibration, timeout=5000)
    # knee 10 (t = 26.25 ms), then 1 ms a token: t(11) = 27.25 <= 1.1 * 25 = 27.5 < t(12)
    assert window.dashboard.cost.budget_line.value() == engine.calibration.budget == 11
    fractions = [f for _, f in heard]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and len(fractions) >= 4
    assert window.controls.recalibrate_button.isEnabled()


def test_cpu_threads_switch_on_the_worker_and_show_in_the_panel(window, qtbot):
    """A CPU session's curve names its threads; choosing another count switches on the worker,
    both re-planning controls wait for it, and the panel and About follow. A GPU's curve has no
    thread count, and the row is hidden."""
    engine = FakeEngine()
    engine.calibration = dataclasses.replace(engine.calibration, device="cpu", threads=2)
    window.start_live(build=lambda progress: engine)
    threads = window.controls.threads
    qtbot.waitUntil(lambda: window.engine is not None and threads.isEnabled(), timeout=5000)
    assert not threads.isHidden() and threads.currentText() == "2"
    with qtbot.waitSignal(window.host.worker.recalibrated, timeout=5000):
        threads.setCurrentText("1")
        assert not threads.isEnabled() and not window.controls.recalibrate_button.isEnabled()
    qtbot.waitUntil(lambda: window.calibration is engine.calibration, timeout=5000)
    assert engine.threads_asked == [1] and threads.currentText() == "1" and threads.isEnabled()
    assert " on cpu, 1 thread: T = " in window.about_text()
    window.controls.set_threads(None)
    assert threads.isHidden()


def test_tuned_cpu_threads_show_the_count_the_tuner_picked(window, qtbot):
    """auto asks the worker to tune; each switch of the engine's tuner then shows in the panel
    and the views as a recalibration does; a count chosen ends tuning."""
    engine = FakeEngine()
    engine.calibration = dataclasses.replace(engine.calibration, device="cpu", threads=2)
    window.start_live(build=lambda progress: engine)
    threads = window.controls.threads
    qtbot.waitUntil(lambda: window.engine is not None and threads.isEnabled(), timeout=5000)
    assert threads.itemText(0) == "auto"
    with qtbot.waitSignal(window.host.worker.recalibrated, timeout=5000):
        threads.setCurrentIndex(0)
    qtbot.waitUntil(lambda: threads.currentText() == "auto · 1 now", timeout=5000)
    assert engine.threads_asked == ["auto"] and window.calibration.threads == 1
    assert " on cpu, 1 thread (tuned): T = " in window.about_text()
    assert window.statusBar().currentMessage().startswith("t(N) on cpu, 1 thread (tuned) · T = ")
    assert window.calibration is engine.calibration and threads.isEnabled()
    with qtbot.waitSignal(window.host.worker.recalibrated, timeout=5000):
        threads.setCurrentText("2")
    qtbot.waitUntil(lambda: window.calibration.threads == 2, timeout=5000)
    assert engine.thread_tuner is None and threads.currentText() == "2"
    assert threads.itemText(0) == "auto"


def _live_with_redraws_noted(window, qtbot) -> list[int]:
    """A live session of a fake engine a few steps in; the list gets the step count of every
    redraw from now on."""
    engine = FakeEngine()
    window.start_live(build=lambda progress: engine)
    qtbot.waitUntil(lambda: len(window.history) > 5, timeout=5000)
    drawn = []
    original = window.dashboard.show_history
    window.dashboard.show_history = lambda *a, **k: (drawn.append(a[1]), original(*a, **k))
    return drawn


def test_live_redraws_are_paced_and_smooth_redraw_lifts_the_limit(window, qtbot):
    """Engine first: a costly frame holds the next back; records keep arriving meanwhile and
    the views catch up. View → Smooth redraw draws at the timer's rate."""
    drawn = _live_with_redraws_noted(window, qtbot)
    polls = []
    original_poll = window.poll
    window.timer.timeout.disconnect()
    window.timer.timeout.connect(lambda: (polls.append(1), original_poll()))
    window.pacer.share = 0.001                 # a frame may take 0.1 % of the wall time
    qtbot.wait(1000)
    paced = len(drawn)
    assert paced <= 3 and len(window.history) > 20  # the history still grows at full speed
    assert len(polls) <= 8  # and the timer sleeps while the pacer holds frames (25 Hz: 25)
    window.smooth_action.trigger()
    assert window.pacer.share == 1.0
    drawn.clear()
    qtbot.wait(1000)
    assert len(drawn) >= 10 and drawn[-1] >= len(window.history) - 5  # and catches up at once


def test_a_minimized_window_draws_nothing_and_catches_up_when_restored(window, qtbot):
    """Minimized, nobody sees the views: their updates would only take the engine's CPU."""
    drawn = _live_with_redraws_noted(window, qtbot)
    window.smooth_action.trigger()  # unpaced: every tick with new steps would draw
    window.showMinimized()
    qtbot.waitUntil(window.isMinimized, timeout=2000)
    drawn.clear()
    steps = len(window.history)
    qtbot.wait(600)
    assert drawn == [] and len(window.history) > steps + 5  # the records still arrive
    window.showNormal()
    qtbot.waitUntil(lambda: bool(drawn) and drawn[-1] >= len(window.history) - 5, timeout=2000)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_closes_the_window_like_its_close_button(tmp_path, sig):
    """The engine stops and the gzipped trace gets its trailer; before, Ctrl+C printed a
    traceback from inside a slot and the window ran on."""
    trace = tmp_path / "session.jsonl.gz"
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "SWARMSCOPE_CACHE": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "engine.cli.main", "--model", "tiny-test",
                             "--dtype", "fp32", "--trace-out", str(trace)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for_steps(trace)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0 and "Traceback" not in err
    assert len(read_trace(trace).steps) > 0  # strict read: the gzip stream is complete


def test_no_display_is_a_message_before_qt_aborts(monkeypatch, capsys):
    """Qt without a display (or, on X11, without libxcb-cursor) aborts with a core dump and a
    hint to reinstall; the window, and the GUI bench, say what is missing first."""
    import app.display as display
    from engine.cli.main import main as cli_main

    monkeypatch.setattr(display.sys, "platform", "linux")
    for name in ("QT_QPA_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY"):
        monkeypatch.delenv(name, raising=False)
    assert main(["--model", "tiny-test"]) == 2
    assert "no display to open the window on" in capsys.readouterr().err
    assert cli_main(["bench", "gui", "--skip-engine", "--frames", "2"]) == 2
    assert "swarmscope bench gui: no display" in capsys.readouterr().err
    monkeypatch.setenv("DISPLAY", ":0")

    def missing(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(display.ctypes, "CDLL", missing)
    assert "sudo apt install libxcb-cursor0" in display.display_problem()
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")  # what the user chose, Qt is left to it
    assert display.display_problem() is None
