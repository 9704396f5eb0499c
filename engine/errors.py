"""Errors the engine raises on bad input. The CLI and the app show their message, never a traceback."""
from __future__ import annotations

from pathlib import Path


class SwarmscopeError(Exception):
    """Base of every error a user can cause; its message is meant to be shown as is."""


class ModelLoadError(SwarmscopeError):
    def __init__(self, path: str | Path, problem: str) -> None:
        self.path, self.problem = str(path), problem
        super().__init__(f"{path}: {problem}")


class TraceError(SwarmscopeError):
    def __init__(self, path: str | Path, line: int | None, problem: str) -> None:
        self.path, self.line, self.problem = str(path), line, problem
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {problem}")


class KVCacheFull(SwarmscopeError):
    """The paged KV cache has no free block for a lane; the scheduler preempts and retries."""
