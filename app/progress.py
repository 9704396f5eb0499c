"""What the worker hands to long work (building an engine, re-running calibration): call it to
report progress; it raises `Cancelled` once the window has asked the worker to stop.

Calibration reports only once per round of timed shapes (tens of seconds on a loaded CPU), so
`checking(model)` also checks before every forward pass of the model: closing the window then
stops the work within one pass. Qt-free; safe to call from the worker thread."""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator


class Cancelled(Exception):
    """The window asked the worker to stop while it was building or recalibrating."""


class Progress:
    def __init__(self, emit: Callable[[str, float], None], stop: threading.Event) -> None:
        self._emit, self._stop = emit, stop

    def __call__(self, message: str, fraction: float) -> None:
        self.check()
        self._emit(message, fraction)

    def check(self) -> None:
        if self._stop.is_set():
            raise Cancelled

    @contextmanager
    def checking(self, model) -> Iterator[None]:
        """Check before every forward pass of `model` (a torch module) inside the block."""
        handle = model.register_forward_pre_hook(lambda module, args: self.check())
        try:
            yield
        finally:
            handle.remove()

    def calibration(self, lo: float, hi: float) -> Callable[[str], None]:
        """Adapt the calibration's message-only progress to (message, fraction in [lo, hi)). How
        many messages a calibration sends is its own business, so each one moves the bar a share
        of the way that is left: it always advances and never claims to be done."""
        heard = 0

        def report(message: str) -> None:
            nonlocal heard
            heard += 1
            self(message.strip(), lo + (hi - lo) * heard / (heard + 3))
        return report
