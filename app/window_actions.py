"""The window's menus and keyboard shortcuts, and what those actions do that no other part of the
window owns: the file dialogs, pause and speculation toggles that mean one thing live and another
in replay, the help texts.

A part of MainWindow (app/main_window.py)."""
from __future__ import annotations

from importlib.metadata import version

import torch
from PySide6.QtCore import qVersion
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QFileDialog, QInputDialog, QMessageBox

from app.dashboard import VIEW_HELP
from app.exporting import FILTERS, export
from engine.cli.options import parse_address
from engine.errors import SwarmscopeError
from engine.loading import hub_cache, known_models, ollama_store
from engine.serve.http_api import DEFAULT_HOST, DEFAULT_PORT


class WindowActionsMixin:
    def _build_menus(self) -> None:
        def action(menu, text: str, slot, shortcut=None, checkable=False) -> QAction:
            act = QAction(text, self)
            if shortcut:
                act.setShortcut(QKeySequence(shortcut))
            act.setCheckable(checkable)
            act.triggered.connect(slot)
            menu.addAction(act)
            self.addAction(act)  # shortcuts work even when the menu bar is hidden
            return act

        file = self.menuBar().addMenu("&File")
        action(file, "Open trace…", self._open_trace_dialog, "Ctrl+O")
        action(file, "Export…", self._export_dialog, "Ctrl+E")
        action(file, "Quit", self.close, "Ctrl+Q")
        session = self.menuBar().addMenu("&Session")
        action(session, "Pause / resume  (replay: play / pause)", self.toggle_pause, "Space")
        action(session, "Speculation on / off", self.toggle_speculation, "S")
        action(session, "Load model folder…", self._load_model_dialog, "Ctrl+M")
        action(session, "Load GGUF model file…", self._load_gguf_dialog, "Ctrl+Shift+M")
        known = session.addMenu("Load a model you have")
        known.aboutToShow.connect(lambda: self._list_known_models(known))
        action(session, "Re-run calibration", self._recalibrate)
        self.serve_action = action(session, "Serve OpenAI's API…", self._serve_dialog,
                                   checkable=True)
        view = self.menuBar().addMenu("&View")
        self.follow_action = action(view, "Follow live", self._set_follow, "F", checkable=True)
        self.follow_action.setChecked(True)
        self.controls_action = self._controls_dock.toggleViewAction()  # a small window's room
        self.controls_action.setText("Controls panel")
        self.controls_action.setShortcut(QKeySequence("C"))
        view.addAction(self.controls_action)
        self.addAction(self.controls_action)
        self.smooth_action = action(view, "Smooth redraw (takes CPU from the engine)",
                                    self._set_smooth, checkable=True)
        for name in ("dark", "light"):
            action(view, f"{name.title()} theme", lambda _=False, n=name: self.set_theme(n))
        help_menu = self.menuBar().addMenu("&Help")
        action(help_menu, "Keyboard shortcuts",
               lambda: QMessageBox.information(self, "Keyboard shortcuts", self.shortcuts_text()),
               "F1")
        action(help_menu, "What the views show",
               lambda: QMessageBox.information(self, "What the views show", views_text()))
        action(help_menu, "About swarmscope",
               lambda: QMessageBox.about(self, "About swarmscope", self.about_text()))

    def shortcuts_text(self) -> str:
        """Every action that has a shortcut, as its menu names it."""
        return "\n".join(
            f"{act.shortcut().toString(QKeySequence.SequenceFormat.NativeText)}\t{act.text()}"
            for act in self.actions() if not act.shortcut().isEmpty())

    def about_text(self) -> str:
        """Versions, and what the live engine runs: model, dtype, device and its budget."""
        lines = [f"swarmscope {version('swarmscope')} · PyTorch {torch.__version__} · "
                 f"Qt {qVersion()}"]
        if self.engine is not None:
            loaded, calibration = self.engine.loaded, self.calibration
            context = ("" if calibration.context is None else
                       f", calibrated with lanes at context {calibration.context}")
            tuned = " (tuned)" if self.engine.thread_tuner is not None else ""
            lines.append(f"{loaded.name} ({loaded.source}; {loaded.config.describe()}), "
                         f"{calibration.dtype} on "
                         f"{calibration.hardware}{tuned}: T = {calibration.budget}, "
                         f"t(1) = {calibration.t_ms(1):.1f} ms{context}")
        if self.server is not None:
            lines.append(f"Serving OpenAI's chat completions API at {self.server.url}, "
                         f"Anthropic's Messages API at {self.server.root}, Prometheus metrics "
                         f"at {self.server.metrics_url}")
        lines.append("The default model, SmolLM2-135M-Instruct, is Apache-2.0 (Hugging Face).")
        return "\n".join(lines)

    def _serve_dialog(self, checked: bool) -> None:
        """Checked: ask where, then serve there; unchecked: stop serving."""
        if not checked:
            self.stop_serving()
            return
        text, ok = QInputDialog.getText(
            self, "Serve OpenAI's API", f"Answer at [HOST:]PORT (the host {DEFAULT_HOST} unless "
            "given: this machine only; 0.0.0.0 for every network):",
            text=f"{DEFAULT_HOST}:{DEFAULT_PORT}")
        if ok:
            try:
                self.serve(*parse_address(text.strip()))
            except (ValueError, SwarmscopeError) as exc:
                self.show_error(f"not serving: {exc}", records_kept=False)
        self.serve_action.setChecked(self.server is not None)

    def toggle_pause(self) -> None:
        if self.replaying:
            self.replay.toggle()
        elif self.engine is not None:
            self.controls.pause.toggle()

    def toggle_speculation(self) -> None:
        if self.engine is not None and not self.replaying:
            self.controls.toggle_speculation()

    def _set_follow(self, follow: bool) -> None:
        self.dashboard.batch.follow = follow

    def _open_trace_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open trace", "", "Traces (*.jsonl *.jsonl.gz)")
        if path:
            self.open_trace(path)

    def _export_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export", "", ";;".join(FILTERS))
        if path:
            try:
                self.statusBar().showMessage(export(self.trace_path, path, self))
            except SwarmscopeError as exc:
                self.show_error(str(exc))

    def _load_model_dialog(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Hugging Face model folder")
        if folder:
            self.load_model(folder)

    def _list_known_models(self, menu) -> None:
        """The menu's entries, as it opens: the default model, and those the Hugging Face
        cache and Ollama's store hold."""
        menu.clear()
        for spec, where in known_models():
            menu.addAction(f"{spec.removeprefix(ollama_store.PREFIX)} ({where})").triggered.connect(
                lambda _=False, spec=spec: self.load_model(spec))
        if len(menu.actions()) == 1:
            menu.addAction(f"(none in {hub_cache.cache_dir()} or {ollama_store.models_dir()})"
                           ).setEnabled(False)

    def _load_gguf_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "GGUF model file (converted once)", "",
                                              "GGUF models (*.gguf);;All files (*)")
        if path:
            self.load_model(path)


def views_text() -> str:
    """Each pane's title and what it shows (hovering over a pane shows the same)."""
    return "\n\n".join(f"{title}: {text}" for title, text in VIEW_HELP.items())
