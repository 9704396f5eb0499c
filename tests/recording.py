"""Waiting on a trace that another process is writing."""
import time
from pathlib import Path

from engine.errors import TraceError
from engine.telemetry.trace_reader import read_trace


def wait_for_steps(trace: Path, timeout_s: float = 60.0) -> bool:
    """Whether the trace holds a step record within `timeout_s` (read leniently: its writer is
    mid-stream)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if trace.exists() and read_trace(trace, lenient=True).steps:
                return True
        except TraceError:  # the session line itself is still being written
            pass
        time.sleep(0.2)
    return False
