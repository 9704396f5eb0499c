"""Where a window records its live sessions: each in a file of its own, never one that an
earlier session or a replayed trace is in. `--trace-out` says where: by default a new dated file
in the user data dir, else the file named (later sessions of the window beside it, numbered),
or 'none'."""
from __future__ import annotations

import time
from pathlib import Path

import platformdirs

from engine.telemetry.trace_writer import same_file


def unused(path: Path) -> Path:
    """`path`, or where a file is there already, the first of `name-2`, `name-3`, … with its
    suffixes (session.jsonl.gz -> session-2.jsonl.gz)."""
    suffix = "".join(path.suffixes[-2:]) if path.suffix == ".gz" else path.suffix
    stem, n = path.name[:len(path.name) - len(suffix)], 1
    while path.exists():
        n += 1
        path = path.with_name(f"{stem}-{n}{suffix}")
    return path


def default_trace_path() -> str:
    """A new file in the user data dir's traces folder, named by the time."""
    folder = Path(platformdirs.user_data_dir("swarmscope")) / "traces"
    folder.mkdir(parents=True, exist_ok=True)
    # gzipped: a session writes ~11 KB a second as text, a seventh of that gzipped, and a window
    # killed mid-session still leaves a readable file (its sync-flushed stream). Numbered where
    # taken: two windows started within a second must not share a file.
    return str(unused(folder / time.strftime("session-%Y%m%d-%H%M%S.jsonl.gz")))


class SessionTraces:
    def __init__(self, requested: str | None = "none") -> None:
        self.requested = requested  # --trace-out: None the default folder, 'none' nothing
        self._sessions = 0

    def next(self, replayed: str | None = None) -> str | None:
        """The file for the window's next live session; None: not recorded. The first session
        writes the file named over, as asked, unless it is the trace `replayed`. Raises OSError
        where the default folder cannot be made or the file named cannot be written: the
        session then runs unrecorded, where a failed trace would have stopped it before it
        began."""
        self._sessions += 1
        if self.requested == "none":
            return None
        if self.requested is None:
            return default_trace_path()
        named = Path(self.requested)
        if self._sessions > 1 or replayed and same_file(named, replayed):
            named = unused(named)
        _check_writable(named)
        return str(named)


def _check_writable(path: Path) -> None:
    """Open it for appending (no harm to what is there), and leave no file that was not. Its
    folder is made, as `run --trace` makes it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    existed = path.exists()
    path.open("ab").close()
    if not existed:
        path.unlink()
