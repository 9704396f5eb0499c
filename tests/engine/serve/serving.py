"""An engine stepping on a thread of its own (wall clock) behind an API server, for the tests
that talk to it over HTTP."""
import contextlib
import threading

from engine.controls import Controls
from engine.engine import Engine
from engine.serve.http_api import ApiServer
from engine.swarm.config import SwarmConfig


@contextlib.contextmanager
def serving(loaded, calibration, max_context: int, client_lanes: int):
    """(engine, server) until the block ends."""
    engine = Engine(loaded, SwarmConfig(max_context=max_context, client_lanes=client_lanes),
                    Controls(swarm_size=0), calibration=calibration)
    stop = threading.Event()
    stepping = threading.Thread(target=engine.run, kwargs={"stop": stop})
    stepping.start()
    server = ApiServer(lambda: engine, "127.0.0.1", 0).start()
    try:
        yield engine, server
    finally:
        server.close()
        stop.set()
        stepping.join()
        engine.close()
