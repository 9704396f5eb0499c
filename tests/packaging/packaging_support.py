"""Paths, the bundle manifest and a desktop-entry parser shared by the packaging tests. The module
name is unique on purpose: these test folders have no __init__.py, and `packaging` itself is the
PyPI library of that name, so the manifest is loaded by file path."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGING = ROOT / "packaging"
DESKTOP_FILE = PACKAGING / "swarmscope.desktop"
METAINFO_FILE = PACKAGING / "io.github.swarmscope.metainfo.xml"


def load_manifest():
    spec = importlib.util.spec_from_file_location("bundle_manifest",
                                                  PACKAGING / "bundle_manifest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_desktop(path: Path) -> dict[str, dict[str, str]]:
    """Groups of a desktop entry file; raises AssertionError on lines the format forbids."""
    groups: dict[str, dict[str, str]] = {}
    current = None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        where = f"{path}:{number}"
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            assert line.endswith("]") and line[1:-1] not in groups, f"{where}: bad group {line!r}"
            current = groups[line[1:-1]] = {}
            continue
        assert current is not None, f"{where}: key before the first group"
        key, sep, value = line.partition("=")
        assert sep and key == key.strip() and key, f"{where}: not key=value: {line!r}"
        assert value == value.strip(), f"{where}: stray whitespace in {key}"
        assert key not in current, f"{where}: duplicate key {key}"
        current[key] = value
    return groups
