"""Models in the Hugging Face hub's local cache, as huggingface_hub lays it out:
<cache>/models--ORG--NAME/{refs/main, snapshots/COMMIT/, blobs/}. A repo id (ORG/NAME) found
there loads, so does a repo's folder (its main revision), and a snapshot is called NAME. Nothing
is downloaded."""
from __future__ import annotations

import os
import re
from pathlib import Path

from engine.errors import ModelLoadError

REPO_ID = re.compile(r"[\w.-]+/[\w.-]+")


def cache_dir() -> Path:
    """Where huggingface_hub keeps downloads: $HF_HUB_CACHE, else $HF_HOME/hub, else
    huggingface/hub in $XDG_CACHE_HOME (~/.cache)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache",
                                             "huggingface")
    return Path(home).expanduser() / "hub"


def model_folder(spec: str) -> Path:
    """The folder `spec` names: a folder as given, or, for a repo id that is no path here, its
    folder in the cache; a repo's folder stands for its main revision's snapshot. A path that
    is none of these comes back as given, for the caller to say it is missing."""
    folder = Path(spec).expanduser()
    if not folder.exists() and REPO_ID.fullmatch(spec):
        cached = cache_dir() / ("models--" + spec.replace("/", "--"))
        folder = cached if cached.is_dir() else folder
    if (folder / "snapshots").is_dir():
        return _main_snapshot(folder)
    return folder


def model_name(folder: Path) -> str:
    """The folder's name, or, for a snapshot (models--ORG--NAME/snapshots/COMMIT), NAME."""
    folder = folder.resolve()
    repo = folder.parent.parent.name
    if folder.parent.name == "snapshots" and repo.startswith("models--"):
        return repo.removeprefix("models--").split("--", 1)[-1]
    return folder.name


def _main_snapshot(repo: Path) -> Path:
    ref = repo / "refs" / "main"
    if ref.is_file():
        snapshot = repo / "snapshots" / ref.read_text().strip()
        if snapshot.is_dir():
            return snapshot
    snapshots = sorted(p for p in (repo / "snapshots").iterdir() if p.is_dir())
    if len(snapshots) == 1:
        return snapshots[0]
    raise ModelLoadError(repo, f"a Hugging Face cache folder with {len(snapshots)} snapshots "
                               f"and no refs/main naming one: give the snapshot folder to load "
                               f"(in {repo / 'snapshots'})")


def cached_models() -> list[str]:
    """The repo ids of the models in the cache that would load: a main snapshot with a
    config.json."""
    found = []
    for repo in sorted(cache_dir().glob("models--*--*")):
        try:
            snapshot = _main_snapshot(repo)
        except (ModelLoadError, OSError):
            continue
        if (snapshot / "config.json").is_file():
            found.append(repo.name.removeprefix("models--").replace("--", "/", 1))
    return found
