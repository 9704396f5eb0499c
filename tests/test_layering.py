"""engine/ and hip_kernels/ never import Qt; hip_kernels/ never imports engine or app."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
QT = re.compile(r"^\s*(from|import)\s+(PySide6|PyQt5|PyQt6|pyqtgraph|app)\b", re.M)
ENGINE = re.compile(r"^\s*(from|import)\s+(engine|app)\b", re.M)


def _sources(folder: str):
    return sorted((ROOT / folder).rglob("*.py"))


def test_engine_never_imports_qt_or_app():
    offenders = [str(p) for p in _sources("engine") if QT.search(p.read_text())]
    assert not offenders, f"engine/ imports Qt or app: {offenders}"


def test_hip_kernels_stand_alone():
    offenders = [str(p) for p in _sources("hip_kernels")
                 if QT.search(p.read_text()) or ENGINE.search(p.read_text())]
    assert not offenders, f"hip_kernels/ imports Qt, app or engine: {offenders}"


def test_examples_use_only_the_api():
    """examples/ are agents as users write them: they reach the engine over HTTP, never import it."""
    offenders = [str(p) for p in _sources("examples") if ENGINE.search(p.read_text())]
    assert _sources("examples") and not offenders, f"examples/ import engine or app: {offenders}"
