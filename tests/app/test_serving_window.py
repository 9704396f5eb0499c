"""`swarmscope --serve`: the window answers the API with its live engine, API clients only
unless --agents says otherwise, and says where in its status bar and About."""
import http.client
import json
import threading

from app import main as app_main
from app.main import main
from app.main_window import MainWindow

BODY = {"messages": [{"role": "user", "content": "hello"}], "temperature": 0, "max_tokens": 12}


def test_the_window_serves_its_live_engine(qtbot, tmp_path, monkeypatch):
    from engine.spec import calibration
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path))
    monkeypatch.setattr(calibration, "measure",
                        lambda *a, **k: calibration.Calibration.make_dummy())
    servers, windows, replies = [], [], []

    class Recorded(app_main.ApiServer):
        def __init__(self, engine_of, host, port):
            super().__init__(engine_of, host, port)
            servers.append(self)

    def ask() -> None:  # as a client would: wait for the model, then ask
        while not servers:
            threading.Event().wait(0.05)
        host, port = servers[0]._server.server_address[:2]
        for _ in range(400):
            connection = http.client.HTTPConnection(host, port, timeout=60)
            connection.request("GET", "/health")
            if connection.getresponse().status == 200:
                break
            threading.Event().wait(0.05)
        connection.request("POST", "/v1/chat/completions", json.dumps(BODY))
        replies.append(json.loads(connection.getresponse().read()))
        windows[0].about = windows[0].about_text()

    monkeypatch.setattr(app_main, "ApiServer", Recorded)
    show_serving = MainWindow.show_serving
    monkeypatch.setattr(MainWindow, "show_serving",
                        lambda self, url: (windows.append(self), show_serving(self, url)))
    asking = threading.Thread(target=ask, daemon=True)
    asking.start()
    assert main(["--model", "tiny-test", "--dtype", "fp32", "--serve", "127.0.0.1:0",
                 "--trace-out", "none", "--quit-after", "6"]) == 0
    asking.join(timeout=30)
    assert replies and replies[0]["usage"]["completion_tokens"] == 12
    window = windows[0]
    assert f"Serving OpenAI's chat completions API at {servers[0].url}" in window.about
    assert window.controls.swarm_size.value() == 0  # API clients only
    lanes = [lane for record in window.history.records() for lane in record.lanes]
    assert lanes and {lane.cat for lane in lanes} == {"api"}  # the views had the client's steps
