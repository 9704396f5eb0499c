"""The agents table (state, category, tokens, acceptance) and the selected agent's transcript,
with accepted draft tokens highlighted so the user can see what speculation produced."""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QHeaderView, QSplitter, QTableWidget, QTableWidgetItem,
                               QVBoxLayout, QWidget)

from app.agent_rows import AgentRow
from app.theme import Theme
from app.views.transcript_view import TranscriptView
from engine.controls import CATEGORIES

COLUMNS = ("agent", "state", "category", "tokens", "acceptance")
# The widest text each column holds besides its name: columns sized to them once, the table is
# as wide as its columns whatever rows come (columns sized to their contents cut the last one
# when the table was given a share of a 1366-px window, and changed width as rows filled in).
WIDEST_CELLS = ("999", "waiting", max(CATEGORIES, key=len), "999999", "100%")
CELL_PADDING_PX = 16
TRANSCRIPT_MIN_PX = 120


class AgentsView(QWidget):
    selection_changed = Signal()  # live rows carry only the selected agent's text: fetch anew

    def __init__(self, theme: Theme, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._theme = theme
        self._rows: list[AgentRow] = []
        self._selected: int | None = None
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
        self.transcript = TranscriptView(theme)
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
        self.transcript.show_row(next((r for r in self._rows if r.id == self._selected), None))
