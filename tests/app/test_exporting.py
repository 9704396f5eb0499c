"""The window's exports: each format from the file name, clear errors for what cannot be done."""
import csv
import json

import pytest
from PySide6.QtWidgets import QLabel

from app.exporting import export
from engine.errors import SwarmscopeError
from engine.telemetry.trace_reader import read_trace
from tests.app.fake_engine import record_trace


@pytest.fixture
def trace(tmp_path):
    return record_trace(tmp_path / "session.jsonl", 30)


@pytest.fixture
def window(qtbot):
    widget = QLabel("swarmscope")
    widget.resize(200, 100)
    qtbot.addWidget(widget)
    return widget


def test_each_format_follows_the_file_name(trace, window, tmp_path):
    assert "copied trace" in export(trace, str(tmp_path / "copy.jsonl"), window)
    assert (tmp_path / "copy.jsonl").read_bytes() == open(trace, "rb").read()
    assert "ui.perfetto.dev" in export(trace, str(tmp_path / "p.json"), window)
    assert json.loads((tmp_path / "p.json").read_text())["traceEvents"]
    steps_csv = tmp_path / "s.csv"
    assert export(trace, str(steps_csv), window) == f"wrote 30 steps to {steps_csv}"
    assert len(list(csv.DictReader(steps_csv.open()))) == 30
    assert "summary of 30 steps" in export(trace, str(tmp_path / "summary.txt"), window)
    summary = (tmp_path / "summary.txt").read_text()
    assert summary.startswith("steps") and "tokens/s" in summary and "acceptance" in summary
    assert "gzipped" in export(trace, str(tmp_path / "copy.jsonl.gz"), window)
    assert read_trace(tmp_path / "copy.jsonl.gz") == read_trace(trace)  # the other format
    assert "saved window" in export(None, str(tmp_path / "w.png"), window)  # needs no trace
    assert (tmp_path / "w.png").stat().st_size > 0


def test_what_cannot_be_exported_says_why(trace, window, tmp_path):
    with pytest.raises(SwarmscopeError, match="records no trace"):
        export(None, str(tmp_path / "s.csv"), window)
    with pytest.raises(SwarmscopeError, match="unknown export format"):
        export(trace, str(tmp_path / "s.xlsx"), window)
    with pytest.raises(SwarmscopeError, match="cannot write"):
        export(trace, str(tmp_path / "missing" / "summary.txt"), window)
