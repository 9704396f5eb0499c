"""Each live session of a window in a trace of its own (Ctrl+M never writes over the last one,
nor over a replayed trace), a model folder that would not load refused before the session shown
stops, and the error banner dismissed."""
from pathlib import Path

import pytest
from PySide6.QtWidgets import QToolButton

from app import live_session, session_traces
from app.engine_factory import EngineSpec
from app.session_traces import SessionTraces, unused
from engine.telemetry.trace_reader import read_trace
from tests.app.fake_engine import FakeEngine, record_trace


def test_sessions_started_within_a_second_get_a_trace_each(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.setattr(session_traces.time, "strftime",
                        lambda pattern: "session-20261205-120000.jsonl.gz")
    traces = SessionTraces(None)
    # one window: a session's engine makes its file only once its model has loaded
    paths = [traces.next(), traces.next()]
    for path in paths:
        Path(path).write_text("")
    paths.append(SessionTraces(None).next())  # another window, the files made
    assert [Path(p).name for p in paths] == ["session-20261205-120000.jsonl.gz",
                                             "session-20261205-120000-2.jsonl.gz",
                                             "session-20261205-120000-3.jsonl.gz"]


def test_a_named_trace_is_the_first_session_and_later_ones_are_numbered_beside_it(tmp_path):
    named = tmp_path / "run.jsonl"
    named.write_text("an earlier run, written over as asked")
    traces = SessionTraces(str(named))
    assert traces.next() == str(named)
    assert traces.next() == str(tmp_path / "run-2.jsonl")
    assert traces.next() == str(tmp_path / "run-3.jsonl")  # run-2's engine has not made it yet
    assert SessionTraces("none").next() is None
    assert not (tmp_path / "run-3.jsonl").exists()  # checked, not left behind
    assert SessionTraces(str(tmp_path / "new" / "dir" / "s.jsonl.gz")).next()
    assert (tmp_path / "new" / "dir").is_dir()
    with pytest.raises(IsADirectoryError):  # the window then runs the session unrecorded
        SessionTraces(str(tmp_path)).next()
    (tmp_path / "a.b.jsonl.gz").write_text("")
    assert unused(tmp_path / "a.b.jsonl.gz") == tmp_path / "a.b-2.jsonl.gz"


@pytest.fixture
def fake_builds(monkeypatch):
    """Sessions the window starts from a spec run a fake engine recording to the spec's trace."""
    monkeypatch.setattr(EngineSpec, "build",
                        lambda spec, progress: FakeEngine(trace_path=spec.trace_out))


def test_loading_a_model_starts_a_session_of_its_own(window, qtbot, tmp_path, monkeypatch,
                                                     fake_builds):
    first = tmp_path / "first.jsonl"
    window.traces = SessionTraces(str(first))
    window.start_session(EngineSpec("default", dtype="fp32", agents=3))
    qtbot.waitUntil(lambda: len(window.history) > 20, timeout=5000)
    old_engine = window.engine

    # A folder that would not load: refused, and the session shown goes on.
    window.load_model(str(tmp_path))
    assert window.banner.isVisible() and "config.json" in window.banner.text()
    assert "nothing changed" in window.banner.text()
    steps = len(window.history)
    qtbot.waitUntil(lambda: len(window.history) > steps + 5, timeout=5000)
    assert window.engine is old_engine

    # One that loads: a new session, recorded beside the first, with the same dtype and the
    # swarm size and CPU threads the controls were set to.
    window.controls.swarm_size.setValue(5)
    with qtbot.waitSignal(window.host.worker.recalibrated, timeout=5000):
        window._switch_threads(1)
    qtbot.waitUntil(lambda: window.calibration is old_engine.calibration, timeout=5000)
    monkeypatch.setattr(live_session, "check_model_folder", lambda folder: None)
    window.load_model("/models/other")
    assert old_engine.closed and not window.banner.isVisible()
    x, _ = window.dashboard.batch.batch_curve.getData()  # no old lines while the model loads
    assert x is None or len(x) == 0
    assert window.trace_path == str(tmp_path / "first-2.jsonl")
    assert (window._spec.model, window._spec.dtype, window._spec.agents, window._spec.threads) \
        == ("/models/other", "fp32", 5, 1)
    qtbot.waitUntil(lambda: window.engine is not None and len(window.history) > 5,
                    timeout=5000)
    # the views start afresh: the new session's steps only, its clock from 0
    t = window.history.column("t")
    assert t[0] < 1.0 and all(a <= b for a, b in zip(t, t[1:]))
    window.stop_engine()
    assert len(read_trace(str(first)).steps) >= steps  # the first one intact


def test_a_gguf_file_is_read_before_the_session_stops_then_loaded(window, qtbot, tmp_path,
                                                                  monkeypatch, fake_builds):
    """Session -> Load GGUF model file: one that would not convert is refused, naming it, and
    the session goes on; one that would is what the next session loads (converting it there,
    on the worker, with progress)."""
    from app import window_actions
    from tests.engine.loading.conftest import hf_tiny, write_tiny_gguf
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path / "cache"))
    window.start_session(EngineSpec("default", dtype="fp32", agents=2, trace_out=None))
    qtbot.waitUntil(lambda: window.engine is not None, timeout=5000)
    old_engine = window.engine
    bad = write_tiny_gguf(hf_tiny("llama"), tmp_path / "odd.gguf", pre="falcon")
    good = write_tiny_gguf(hf_tiny("llama"), tmp_path / "tiny.gguf")
    for path in (bad, good):
        monkeypatch.setattr(window_actions.QFileDialog, "getOpenFileName",
                            lambda *args, path=path: (str(path), "GGUF models (*.gguf)"))
        window._load_gguf_dialog()
        if path is bad:
            assert window.banner.isVisible() and "odd.gguf" in window.banner.text()
            assert "pre-tokenizer 'falcon'" in window.banner.text()
            assert window.engine is old_engine and not old_engine.closed
    assert old_engine.closed and window._spec.model == str(good)


def test_the_models_at_hand_are_listed_to_load(window, qtbot, tmp_path, monkeypatch,
                                               fake_builds):
    """Session -> Load a model you have: the default, the Hugging Face cache's models and
    Ollama's, each loading as its name on the command line would."""
    from PySide6.QtWidgets import QMenu
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    snapshot = tmp_path / "hub" / "models--org--tiny" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "hub" / "models--org--empty" / "snapshots" / "abc").mkdir(parents=True)
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    for manifest in ("registry.ollama.ai/library/qwen2.5/0.5b", "hf.co/org/repo/Q4_K_M"):
        (tmp_path / "ollama" / "manifests" / manifest).parent.mkdir(parents=True)
        (tmp_path / "ollama" / "manifests" / manifest).write_text("{}")
    menu = QMenu(window)
    window._list_known_models(menu)
    texts = [action.text() for action in menu.actions()]
    assert texts == ["default (SmolLM2-135M-Instruct, embedded)", "org/tiny (Hugging Face cache)",
                     "hf.co/org/repo:Q4_K_M (Ollama)", "qwen2.5:0.5b (Ollama)"]
    window.start_session(EngineSpec("default", dtype="fp32", agents=2, trace_out=None))
    qtbot.waitUntil(lambda: window.engine is not None, timeout=5000)
    monkeypatch.setattr(live_session, "check_model_folder", lambda folder: None)
    menu.actions()[3].trigger()
    assert window._spec.model == "ollama:qwen2.5:0.5b"
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "none"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "none"))
    window._list_known_models(menu)
    assert len(menu.actions()) == 2 and not menu.actions()[1].isEnabled()


def test_a_model_loaded_while_threads_are_tuned_is_tuned_too(window, qtbot, monkeypatch,
                                                             fake_builds):
    window.start_session(EngineSpec("default", dtype="fp32", agents=3, trace_out=None))
    qtbot.waitUntil(lambda: window.engine is not None, timeout=5000)
    with qtbot.waitSignal(window.host.worker.recalibrated, timeout=5000):
        window._switch_threads("auto")
    monkeypatch.setattr(live_session, "check_model_folder", lambda folder: None)
    window.load_model("/models/other")
    assert window._spec.threads == "auto"
    window.stop_engine()


def test_loading_a_model_while_replaying_never_writes_the_replayed_trace(
        window, qtbot, tmp_path, monkeypatch, fake_builds):
    replayed = record_trace(tmp_path / "replayed.jsonl", 40)
    before = Path(replayed).read_bytes()
    window.traces = SessionTraces(str(tmp_path / "new.jsonl"))
    assert window.open_trace(replayed)
    monkeypatch.setattr(live_session, "check_model_folder", lambda folder: None)
    window.load_model("/models/other")
    assert not window.replaying and window.trace_path == str(tmp_path / "new.jsonl")
    qtbot.waitUntil(lambda: len(window.history) > 5, timeout=5000)
    window.stop_engine()
    assert Path(replayed).read_bytes() == before


def test_a_session_never_records_over_the_trace_it_was_started_from(
        window, qtbot, tmp_path, monkeypatch, fake_builds):
    """`swarmscope --replay X --trace-out X`, then Ctrl+M: the named file is the replayed one."""
    replayed = record_trace(tmp_path / "x.jsonl", 30)
    before = Path(replayed).read_bytes()
    window.traces = SessionTraces(replayed)
    assert window.open_trace(replayed)
    monkeypatch.setattr(live_session, "check_model_folder", lambda folder: None)
    window.load_model("/models/other")
    assert window.trace_path == str(tmp_path / "x-2.jsonl")
    qtbot.waitUntil(lambda: len(window.history) > 5, timeout=5000)
    window.stop_engine()
    assert Path(replayed).read_bytes() == before


def test_a_start_that_fails_before_any_step_does_not_claim_records_were_kept(window, qtbot):
    def no_model(progress):
        raise live_session.SwarmscopeError("/nope: no such model folder")
    window.start_live(build=no_model)
    qtbot.waitUntil(window.banner.isVisible, timeout=5000)
    assert window.banner.text() == "⚠ /nope: no such model folder"


def test_the_banner_goes_when_dismissed_or_when_a_trace_opens(window, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    assert not window.open_trace(str(bad))
    assert window.banner.isVisible() and "records so far are kept" not in window.banner.text()
    assert window.open_trace(record_trace(tmp_path / "good.jsonl", 20))
    assert not window.banner.isVisible()
    window.show_error("something")
    window.banner.findChild(QToolButton).click()
    assert not window.banner.isVisible()
