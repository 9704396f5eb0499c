"""The files the bundle must carry besides Python modules: resources that app/ and engine/ open by
path at run time (`RESOURCES / "qss" / "app.qss"`, `WORKLOAD_DIR / "chat.json"`, ...).

swarmscope.spec and tests/packaging read this one list. Loaded by file path, not imported as
`packaging.bundle_manifest`, because `packaging` is also the name of a PyPI library that pip and
pytest import."""
from __future__ import annotations

from pathlib import Path

# (folder under the repository root, glob patterns). Patterns name file types rather than "*" so a
# new kind of resource (a font, an icon folder) fails tests/packaging until the recipe names it.
RESOURCE_PATTERNS = (
    ("resources/qss", ("*.qss",)),
    ("resources/themes", ("*.json",)),
    ("resources/icons", ("*.svg", "*.png")),
    ("resources/workloads", ("*.json", "*.md")),  # corpora; bench serve's agent prompt
    # Every file here is corpus text for code-edit tasks, whatever its language.
    ("resources/workloads/sources", ("*",)),
)


def resource_files(root: Path) -> list[Path]:
    """Every file the patterns name, relative to `root`, sorted."""
    found = {path.relative_to(root)
             for folder, patterns in RESOURCE_PATTERNS
             for pattern in patterns
             for path in (root / folder).glob(pattern) if path.is_file()}
    return sorted(found)


def pyinstaller_datas(root: Path) -> list[tuple[str, str]]:
    """(source file, destination folder in the bundle) pairs. The layout under the bundle root is
    the checkout's, because app/theme.py and engine/swarm/workload.py find resources relative to
    their own __file__, which PyInstaller places at the bundle root."""
    return [(str(root / rel), str(rel.parent)) for rel in resource_files(root)]
