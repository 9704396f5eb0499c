"""Where a window records its live sessions: each in a file of its own, never one that an
earlier session or a replayed trace is in. `--trace-out` says where: by default a new dated file
in the user data dir, else the file named (later sessions of the window beside it, numbered),
or 'none'."""
from __future__ import annotations

import time
from pathlib import Path

import platformdirs

from engine.telemetry.trace_writer import same_file


def unused(path: Path, given: set[str] = frozenset()) -> Path:
    """`path`, or where a file is there already or the path was `given` to a session whose
    engine has not made its file yet, the first of `name-2`, `name-3`, … with its suffixes
    (session.jsonl.gz -> session-2.jsonl.gz)."""
    suffix = "".join(path.suffixes[-2:]) if path.suffix == ".gz" else path.suffix
    stem, n = path.name[:len(path.name) - len(suffix)], 1
    while path.exists() or str(path) in given:
        n += 1
        path = path.with_name(f"{stem}-{n}{suffix}")
    return path


def default_trace_path(given: set[str] = frozenset()) -> str:
    """A new file in the user data dir's traces folder, named by the time."""
    folder = Path(platformdirs.user_data_dir("swarmscope")) / "traces"
    folder.mkdir(parents=True, exist_ok=True)
    # gzipped: a session writes ~11 KB a second as text, a seventh of that gzipped, and a window
    # killed mid-session still leaves a readable file (its sync-flushed stream). Numbered where
    # taken: two windows started within a second must not share a file.
    return str(unused(folder / time.strftime("session-%Y%m%d-%H%M%S.jsonl.gz"), given))


class SessionTraces:
    """`requested` is --trace-out as given: None (not given) records to the default folder,
    'none' records nothing, anything else names the file. A window built without one (tests,
    the GUI bench) records nothing."""

    def __init__(self, requested: str | None = "none") -> None:
        self.requested = requested
        # paths handed out: a session's engine makes its file only once its model has loaded,
        # and a session stopped while loading can still make it then
        self._given: set[str] = set()

    def next(self, replayed: str | None = None) -> str | None:
        """The file for the window's next live session; None: not recorded. The first session
        writes the file named over, as asked, unless it is the trace `replayed`. Raises OSError
        where the default folder cannot be made or the file named cannot be written: the
        session then runs unrecorded, where a failed trace would have stopped it before it
        began."""
        if self.requested == "none":
            return None
        if self.requested is None:
            path = default_trace_path(self._given)
        else:
            named = Path(self.requested)
            if self._given or replayed and same_file(named, replayed):
                named = unused(named, self._given)
            _check_writable(named)
            path = str(named)
        self._given.add(path)
        return path


def _check_writable(path: Path) -> None:
    """Open it for appending (no harm to what is there), and leave no file that was not. Its
    folder is made, as `run --trace` makes it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    existed = path.exists()
    path.open("ab").close()
    if not existed:
        path.unlink()
