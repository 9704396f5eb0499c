"""Model folders converted from GGUF files and kept in the user cache: written beside their
place and renamed into it when whole, with a stamp saying what they were made from, so an
interrupted conversion never leaves a folder that looks complete and a changed source is
converted again."""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from engine.errors import ModelLoadError

STAMP = "swarmscope_source.json"


def is_cached(folder: Path, stamp: dict) -> bool:
    """True when `folder` is a complete conversion of what `stamp` names."""
    try:
        return json.loads((folder / STAMP).read_text()) == stamp
    except (OSError, ValueError):
        return False


def convert_into(folder: Path, stamp: dict, write: Callable[[Path, Path], None]) -> None:
    """Make `folder` anew: `write(scratch, staged)` writes the model into `staged` (scratch: a
    folder beside it for what it needs on the way), then the stamp goes in and it replaces
    `folder`. A cache that cannot be written is a ModelLoadError saying what to do."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{folder.name}-") as tmp:
            staged = Path(tmp) / folder.name
            write(Path(tmp), staged)
            (staged / STAMP).write_text(json.dumps(stamp))
            if folder.exists():
                shutil.rmtree(folder)
            staged.rename(folder)
    except OSError as exc:  # a read-only cache, a full disk
        raise ModelLoadError(folder, f"cannot write the model cache ({exc.strerror or exc}); set "
                                     "SWARMSCOPE_CACHE to a writable folder with room for the "
                                     "converted model") from None
