"""config.json's fields read with their types checked: every problem is a ModelLoadError naming
the file and the field (engine/loading/hf_folder.py and the families' readers beside it)."""
from __future__ import annotations

import json
from pathlib import Path

from engine.errors import ModelLoadError


def read_json(path: Path, required: bool = True) -> dict | None:
    if not path.is_file():
        if required:
            raise ModelLoadError(path, "file not found")
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ModelLoadError(path, f"not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ModelLoadError(path, "expected a JSON object")
    return data


def token_ids(value, path: Path, field: str) -> list[int]:
    """Token ids given as one id or a list of them."""
    ids = [] if value is None else value if isinstance(value, list) else [value]
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise ModelLoadError(path, f"{field} must be a token id or a list of them, got {value!r}")
    return ids


_REQUIRED = object()


def integer(cfg: dict, path: Path, name: str, default=_REQUIRED) -> int:
    """config.json's integer field `name`; absent or null, `default` where there is one."""
    value = cfg.get(name)
    if value is None and default is not _REQUIRED:
        return default
    if name not in cfg:
        raise ModelLoadError(path, f"missing field {name!r}")
    if isinstance(value, float) and value.is_integer():  # 4096.0, as some writers save it
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ModelLoadError(path, f"{name} must be an integer, got {value!r}")
    return value


def number(cfg: dict, path: Path, name: str, default: float) -> float:
    value = cfg.get(name)
    if value is None:
        return default
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ModelLoadError(path, f"{name} must be a number, got {value!r}")
    return float(value)


def boolean(cfg: dict, path: Path, name: str, default: bool) -> bool:
    value = cfg.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):  # "false" would read as true
        raise ModelLoadError(path, f"{name} must be true or false, got {value!r}")
    return value
