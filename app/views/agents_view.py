"""The agents table (state, category, tokens, acceptance) and the selected agent's transcript,
with accepted draft tokens highlighted so the user can see what speculation produced."""
from __future__ import annotations

import html
import re

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QHeaderView, QSplitter, QTableWidget, QTableWidgetItem, QTextEdit,
                               QVBoxLayout, QWidget)

from app.agent_rows import AgentRow
from app.theme import Theme
from engine.controls import CATEGORIES

COLUMNS = ("agent", "state", "category", "tokens", "acceptance")
# The widest text each column holds besides its name: columns sized to them once, the table is
# as wide as its columns whatever rows come (columns sized to their contents cut the last one
# when the table was given a share of a 1366-px window, and changed width as rows filled in).
WIDEST_CELLS = ("999", "waiting", max(CATEGORIES, key=len), "999999", "100%")
CELL_PADDING_PX = 16
TRANSCRIPT_MIN_PX = 120
TRANSCRIPT_CHARS = 6000  # the tail shown; long transcripts would make every refresh slow
# A small random model emits arbitrary bytes; control characters would blank the HTML pane.
_UNPRINTABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\ufffd]")


class AgentsView(QWidget):
    selection_changed = Signal()  # live rows carry only the selected agent's text: fetch anew

    def __init__(self, theme: Theme, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._theme = theme
        self._rows: list[AgentRow] = []
        self._selected: int | None = None
        self._shown_key: tuple[int, int] | None = None  # (agent, length) last rendered
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().setVisible(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        header.setStretchLastSection(True)
        metrics = self.table.fontMetrics()
        widths = [CELL_PADDING_PX + max(map(metrics.horizontalAdvance, texts))
                  for texts in zip(COLUMNS, WIDEST_CELLS)]
        for column, width in enumerate(widths):
            header.resizeSection(column, width)
        self.table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.table.setMinimumWidth(sum(widths) + 2 * self.table.frameWidth()
                                   + self.table.verticalScrollBar().sizeHint().width())
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QTableWidget.SelectionMode.SingleSelection)
        self.table.itemSelectionChanged.connect(self._on_select)
        self.transcript = QTextEdit()
        self.transcript.setReadOnly(True)
        self.transcript.setMinimumWidth(TRANSCRIPT_MIN_PX)
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self.table)
        splitter.addWidget(self.transcript)
        splitter.setStretchFactor(1, 1)  # the table keeps its width; the transcript the rest
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(splitter)

    @property
    def selected(self) -> int | None:
        """The agent whose transcript is shown."""
        return self._selected

    def set_rows(self, rows: list[AgentRow]) -> None:
        self._rows = rows
        self.table.blockSignals(True)
        self.table.setRowCount(len(rows))
        state_colour = {"decode": "committed", "tool": "free", "waiting": "muted", "done": "muted"}
        for r, row in enumerate(rows):
            acc = "–" if row.acceptance is None else f"{row.acceptance:.0%}"
            for c, text in enumerate((str(row.id), row.state, row.cat, str(row.tokens), acc)):
                item = self.table.item(r, c)
                if item is None:
                    item = QTableWidgetItem()
                    self.table.setItem(r, c, item)
                item.setText(text)
                if c == 1:
                    item.setForeground(self._theme.qcolor(state_colour.get(row.state, "text")))
        if self._selected is None and rows:
            self._selected = rows[0].id
        for r, row in enumerate(rows):
            if row.id == self._selected:
                self.table.selectRow(r)
        self.table.blockSignals(False)
        self._show_transcript()

    def _on_select(self) -> None:
        selected = self.table.selectionModel().selectedRows()
        if selected and selected[0].row() < len(self._rows):
            self._selected = self._rows[selected[0].row()].id
            self._show_transcript()
            self.selection_changed.emit()

    def _show_transcript(self) -> None:
        row = next((r for r in self._rows if r.id == self._selected), None)
        if row is None:
            self.transcript.setHtml("")
            self._shown_key = None
            return
        if not row.transcript:
            self._shown_key = None
            # In replay: text is recorded as each turn ends, and traces from before text
            # records existed have none.
            self.transcript.setHtml(f"<i>agent {row.id}: no text recorded up to here</i>")
            return
        th = self._theme
        style = {"prompt": f"color:{th.muted}", "tool": f"color:{th.prefill}",
                 "committed": f"color:{th.text}",
                 "accepted_draft": f"background:{th.free};color:{th.background}"}
        # A task's prompt starts a fresh conversation (a new sequence): marked, it does not read
        # as a system message in the middle of the last one.
        new_task = f"\n<span style='{style['prompt']}'>── new task ──</span>\n"
        parts, budget = [], TRANSCRIPT_CHARS
        for back, (text, kind) in enumerate(reversed(row.transcript), 1):
            text = text[-budget:]
            shown = html.escape(_UNPRINTABLE.sub("\u00b7", text))
            if kind in ("committed", "accepted_draft"):
                shown = shown.replace("\n", "\u21b5\n")  # generated line breaks stay visible
            parts.append(f"<span style='{style.get(kind, '')}'>{shown}</span>")
            budget -= len(text)
            if budget <= 0:
                break
            if kind == "prompt" and back < len(row.transcript):  # an earlier task before it
                parts.append(new_task)
        body = "".join(reversed(parts)).replace("\n", "<br>")
        legend = (f"<p style='color:{th.muted}'>agent {row.id} · {row.cat} · {row.state} — "
                  f"<span style='{style['accepted_draft']}'>accepted draft</span> "
                  f"<span style='{style['tool']}'>tool output</span> "
                  f"<span style='{style['prompt']}'>prompt</span></p>")
        if self._shown_key != (row.id, len(body)):
            self._shown_key = (row.id, len(body))
            self.transcript.setHtml(legend + f"<div style='font-family:monospace'>{body}</div>")
            bar = self.transcript.verticalScrollBar()
            bar.setValue(bar.maximum())
