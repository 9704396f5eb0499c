"""Writes a trace file (DESIGN.md §3): JSON Lines, gzipped when the name ends in `.gz`.

Crash safety: lines collect in memory and go to the file as whole lines, in one `os.write` per
flush; a gzip file is written as a raw deflate stream sync-flushed at each flush point. So a
process killed at any moment leaves a file that reads cleanly up to its last flush (a gzip file
then only lacks its trailer, which the reader accepts with a warning). A background thread
flushes at least every `flush_interval_s`, also while the engine is idle."""
from __future__ import annotations

import json
import os
import threading
import zlib
from pathlib import Path

from engine.errors import TraceError
from engine.telemetry.records import StepRecord

TRACE_VERSION = 1  # text records came later, additively: version-1 files without them still read
SEGMENT_KINDS = ("prompt", "tool", "committed", "accepted_draft")  # of a text record's segments


class TraceWriter:
    def __init__(self, path: str | Path, session: dict, flush_interval_s: float = 0.5) -> None:
        self.path = Path(path)
        self._gzip = self.path.name.endswith(".gz")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            raise TraceError(self.path, None, f"cannot write trace: {exc.strerror}") from exc
        # wbits=31: a gzip header and trailer around the deflate stream.
        self._deflate = zlib.compressobj(6, zlib.DEFLATED, 31) if self._gzip else None
        self._pending: list[str] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        # Why writing stopped (a full disk, a vanished drive); later lines are dropped, and the
        # session runs on: its records are in memory, and the file keeps what came before.
        self.error: str | None = None
        self._write_line({"type": "session", "version": TRACE_VERSION, **session})
        self.flush()
        if self.error:
            os.close(self._fd)
            raise TraceError(self.path, None, f"cannot write trace: {self._reason}")
        self._flusher = threading.Thread(target=self._flush_loop, args=(flush_interval_s,),
                                         name="trace-flush", daemon=True)
        self._flusher.start()

    def write_step(self, rec: StepRecord) -> None:
        # Built by hand: dataclasses.asdict deep-copies recursively and costs ~5x more, and this
        # runs once per engine step (telemetry must stay under 2 % of step time).
        self._write_line({
            "type": "step", "step": rec.step, "t": rec.t, "dt_ms": rec.dt_ms, "batch": rec.batch,
            "prefill": rec.prefill, "budget": rec.budget, "policy": rec.policy,
            "ragged": rec.ragged,
            "lanes": [{"agent": l.agent, "cat": l.cat, "k": l.k, "acc": l.acc, "pad": l.pad,
                       "ctx": l.ctx} for l in rec.lanes],
            "reason": rec.reason})

    def write_control(self, t: float, changes: dict) -> None:
        self._write_line({"type": "control", "t": t, "changes": changes})

    def write_agent(self, t: float, agent: int, event: str) -> None:
        self._write_line({"type": "agent", "t": t, "agent": agent, "event": event})

    def write_text(self, t: float, agent: int, segments: list) -> None:
        """An agent's transcript since its last text record: [[text, kind], ...]."""
        self._write_line({"type": "text", "t": t, "agent": agent, "segments": segments})

    def _write_line(self, obj: dict) -> None:
        line = json.dumps(obj, separators=(",", ":")) + "\n"
        with self._lock:
            if self._closed.is_set():
                raise TraceError(self.path, None, "trace writer is closed")
            if self.error is None:
                self._pending.append(line)

    def flush(self) -> None:
        with self._lock:
            self._flush_locked(final=False)

    def _flush_locked(self, final: bool) -> None:
        if self.error or (not self._pending and not final):
            return
        data = "".join(self._pending).encode()
        self._pending.clear()
        if self._deflate is not None:
            data = self._deflate.compress(data) + \
                self._deflate.flush(zlib.Z_FINISH if final else zlib.Z_SYNC_FLUSH)
        try:
            while data:
                written = os.write(self._fd, data)
                data = data[written:]
        except OSError as exc:
            self._reason = exc.strerror or str(exc)
            self.error = (f"{self.path}: trace writing stopped ({self._reason}); the file keeps "
                          "the steps before")

    def _flush_loop(self, interval_s: float) -> None:
        while not self._closed.wait(interval_s):
            self.flush()

    def close(self) -> None:
        with self._lock:
            if self._closed.is_set():
                return
            self._closed.set()
            self._flush_locked(final=True)
            os.close(self._fd)
        self._flusher.join()

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether writing at `a` would write over `b` (through links and other spellings)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False  # one does not exist
