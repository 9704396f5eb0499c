"""Whether Qt can open a window here, found out before it tries (Qt aborts the process)."""
from __future__ import annotations

import ctypes
import os
import sys


def display_problem() -> str | None:
    """Why Qt could not open a window here, found before it tries: without a display, or on X11
    without libxcb-cursor (Qt 6.5+ needs it), Qt aborts with a core dump and a hint to reinstall."""
    if not sys.platform.startswith("linux") or os.environ.get("QT_QPA_PLATFORM"):
        return None
    x11, wayland = os.environ.get("DISPLAY"), os.environ.get("WAYLAND_DISPLAY")
    if not x11 and not wayland:
        return ("no display to open the window on (DISPLAY and WAYLAND_DISPLAY are unset); "
                "`swarmscope run --headless` runs a session without one, and "
                "QT_QPA_PLATFORM=offscreen takes screenshots")
    if not wayland:
        try:
            ctypes.CDLL("libxcb-cursor.so.0")  # found as Qt's xcb plugin would find it
        except OSError:
            return ("the window needs the system library libxcb-cursor0 on X11 (Qt 6.5 and "
                    "later): sudo apt install libxcb-cursor0")
    return None
