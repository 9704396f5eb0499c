"""Serving from the window: `swarmscope --serve` answers the API with the live engine, API
clients only unless --agents says otherwise; Session → Serve OpenAI's API starts and stops it
later; the status bar and About say where."""
import http.client
import json
import re
import threading

from PySide6.QtWidgets import QInputDialog

from app import live_session
from app.main import main
from app.main_window import MainWindow

BODY = {"messages": [{"role": "user", "content": "hello"}], "temperature": 0, "max_tokens": 12}


def call(url_address, method, path, body=None):
    host, port = url_address
    connection = http.client.HTTPConnection(host, port, timeout=60)
    connection.request(method, path, body=None if body is None else json.dumps(body))
    response = connection.getresponse()
    return response.status, response.read()


def test_the_window_serves_its_live_engine(qtbot, tmp_path, monkeypatch):
    from engine.spec import calibration
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path))
    monkeypatch.setattr(calibration, "measure",
                        lambda *a, **k: calibration.Calibration.make_dummy())
    windows, replies = [], []
    serve = MainWindow.serve
    monkeypatch.setattr(MainWindow, "serve",
                        lambda self, *address: (windows.append(self), serve(self, *address)))

    def ask() -> None:  # as a client would: wait for the model, then ask
        while not windows or windows[0].server is None:
            threading.Event().wait(0.05)
        window = windows[0]
        address = window.server._server.server_address[:2]
        while call(address, "GET", "/health")[0] != 200:
            threading.Event().wait(0.05)
        replies.append(json.loads(call(address, "POST", "/v1/chat/completions", BODY)[1]))
        window.about = window.about_text()
        window.url = window.server.url

    asking = threading.Thread(target=ask, daemon=True)
    asking.start()
    assert main(["--model", "tiny-test", "--dtype", "fp32", "--serve", "127.0.0.1:0",
                 "--trace-out", "none", "--quit-after", "6"]) == 0
    asking.join(timeout=30)
    assert replies and replies[0]["usage"]["completion_tokens"] == 12
    window = windows[0]
    root = window.url.removesuffix("/v1")
    assert f"Serving OpenAI's chat completions API at {window.url}, Anthropic's Messages API at " \
        f"{root}, Prometheus metrics at {root}/metrics" in window.about
    assert window.controls.swarm_size.value() == 0  # API clients only
    assert re.fullmatch(rf"API {window.url} · 1 answered, first token in \d+\.\d\d s",
                        window.api_label.text())
    lanes = [lane for record in window.history.records() for lane in record.lanes]
    assert lanes and {lane.cat for lane in lanes} == {"api"}  # the views had the client's steps
    assert window.server is None  # closing the window stopped serving


def test_the_session_menu_starts_and_stops_serving(window, qtbot, monkeypatch):
    answers = iter([("127.0.0.1:0", True), ("nowhere", True), ("127.0.0.1:0", False)])
    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: next(answers))
    window.serve_action.trigger()
    assert window.serve_action.isChecked() and window.server is not None
    address = window.server._server.server_address[:2]
    assert window.api_label.text() == f"API {window.server.url}" and window.api_label.isVisibleTo(
        window)
    assert call(address, "GET", "/health")[0] == 503  # no engine yet: the replay, say
    window.serve_action.trigger()  # unchecked: stop
    assert window.server is None and not window.serve_action.isChecked()
    assert not window.api_label.isVisibleTo(window)
    window.serve_action.trigger()  # a bad address: said, and not serving
    assert window.server is None and not window.serve_action.isChecked()
    assert "not serving: expected PORT or HOST:PORT" in window.banner.text()
    window.serve_action.trigger()  # cancelled
    assert window.server is None and not window.serve_action.isChecked()


def test_a_session_started_while_serving_has_room_for_the_clients(window, monkeypatch):
    specs = []
    monkeypatch.setattr(live_session.LiveSessionMixin, "start_live",
                        lambda self, spec=None, build=None: specs.append(spec))
    window.start_session(live_session.EngineSpec(model="tiny-test"))
    window.serve("127.0.0.1", 0)
    window.start_session(live_session.EngineSpec(model="tiny-test"))
    window.stop_serving()
    assert [spec.serving for spec in specs] == [False, True]
