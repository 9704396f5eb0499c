"""The window over the real Engine (tiny-test model) on its worker thread: control changes posted
from the panel reach the engine at the next step."""
import pytest

from app.engine_factory import EngineSpec
from app.main_window import MainWindow
from app.theme import Theme


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
    window.controls.policy.setCurrentText("off")
    window.controls.batch_ceiling.setValue(2)
    qtbot.waitUntil(lambda: (engine.controls.policy, engine.controls.batch_ceiling) == ("off", 2),
                    timeout=30_000)
    mark = engine.records.total
    qtbot.waitUntil(lambda: len(window.history) > mark + 8, timeout=60_000)
    later = window.history.records[mark:]
    assert all(lane.k == 0 for rec in later for lane in rec.lanes)
    assert all(rec.batch <= 2 for rec in later)
    assert any(e.get("type") == "control" for e in window.history.events)
    window.close()
    assert window.host is None and (tmp_path / "live.jsonl").stat().st_size > 0
