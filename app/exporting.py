"""Session exports from the window: the trace itself, Perfetto, CSV, the summary a headless run
prints (the engine's exporters) and PNG. The format follows the chosen file name, so one dialog
serves them all."""
from __future__ import annotations

import gzip
import shutil
from pathlib import Path

from PySide6.QtWidgets import QWidget

from engine.errors import SwarmscopeError

FILTERS = ("Trace (*.jsonl *.jsonl.gz)", "Perfetto / Chrome trace (*.json)", "Steps CSV (*.csv)",
           "Summary (*.txt)", "PNG of the window (*.png)")


def export(trace_path: str | None, out: str, window: QWidget) -> str:
    """Write `out` in the format its suffix names; returns a one-line description of what was done."""
    target = Path(out)
    name = target.name.lower()
    if name.endswith(".png"):
        if not window.grab().save(str(target)):
            raise SwarmscopeError(f"{target}: could not write PNG")
        return f"saved window to {target}"
    if trace_path is None or not Path(trace_path).exists():
        raise SwarmscopeError("this session records no trace (started with --trace-out none?), "
                              "so only PNG can be exported")
    if name.endswith(".jsonl") or name.endswith(".jsonl.gz"):
        if Path(trace_path).suffix == target.suffix:
            _writing(target, lambda: shutil.copyfile(trace_path, target))
            return f"copied trace to {target}"
        from engine.telemetry.trace_reader import complete_lines

        text = "".join(line + "\n" for line in complete_lines(trace_path))
        gzipped = name.endswith(".gz")
        _writing(target, lambda: target.write_bytes(gzip.compress(text.encode()) if gzipped
                                                    else text.encode()))
        return f"wrote the trace {'gzipped ' if gzipped else ''}to {target}"
    from engine.telemetry.csv_export import write_csv
    from engine.telemetry.perfetto_export import write_perfetto
    from engine.telemetry.summary import format_summary, summarize
    from engine.telemetry.trace_reader import read_trace

    # lenient: a live trace may end mid-line at the last flush
    trace = read_trace(trace_path, lenient=True)
    if name.endswith(".json"):
        write_perfetto(trace, target)
        return f"wrote Perfetto trace to {target} (open it at ui.perfetto.dev)"
    if name.endswith(".csv"):
        write_csv(trace.steps, target)
        return f"wrote {len(trace.steps)} steps to {target}"
    if name.endswith(".txt"):
        if not trace.steps:
            raise SwarmscopeError(f"{target}: no step recorded yet, nothing to summarise")
        text = format_summary(summarize(trace.steps)) + "\n"
        _writing(target, lambda: target.write_text(text))
        return f"wrote the summary of {len(trace.steps)} steps to {target}"
    raise SwarmscopeError(f"{target}: unknown export format (use .jsonl, .json, .csv, .txt or "
                          ".png)")


def _writing(target: Path, write) -> None:
    try:
        write()
    except OSError as exc:
        raise SwarmscopeError(f"{target}: cannot write ({exc.strerror or exc})") from None
