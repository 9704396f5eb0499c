"""Where swarmscope keeps what it fetches and measures: models/ and calibration/."""
from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def cache_root() -> Path:
    """$SWARMSCOPE_CACHE, else the platform's user cache dir for swarmscope."""
    return Path(os.environ.get("SWARMSCOPE_CACHE") or platformdirs.user_cache_dir("swarmscope"))
