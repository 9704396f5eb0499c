"""Seed 000's chart, live: the current step as a bar on a 0..T axis (committed, drafted, prefill,
padding, unused, and any overflow past T), above the seed's reference bars for B = 1, 2, 4, 8, 16,
with the seed's table beside it computed from the T in force and the live B highlighted."""
from __future__ import annotations

import math

import pyqtgraph as pg
from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QBrush, QFontMetricsF
from PySide6.QtWidgets import (QHBoxLayout, QHeaderView, QLabel, QSizePolicy, QTableWidget,
                               QTableWidgetItem, QVBoxLayout, QWidget)

from app.history import History
from app.theme import Theme
from app.views.live_label import LiveLabel
from app.views.plot_factory import dashed, make_plot
from app.views.plot_text import AxisLabel, PlotTitle

REFERENCE_BATCHES = (1, 2, 4, 8, 16)
LIVE_Y = len(REFERENCE_BATCHES) + 0.6   # the live bar sits above the reference bars
BAR_HEIGHT = 0.62
# "budget full" sits in the gap between the live bar and the B=1 bar (as a share of the y range),
# clear of the bars' own labels
BUDGET_LABEL_AT = (len(REFERENCE_BATCHES) - 0.2 + 0.6) / (LIVE_Y + 1.2)
RANGE_STEPS = 32    # the x axis covers the widest pass of this many recent steps ...
# ... up to this many times the wider of T and the largest reference batch. The chart is about
# the budget's scale: a tool output's prefill (hundreds of tokens) or fixed K=16 at many lanes
# would squeeze T and the reference bars into a sliver, so a wider pass is cut at the axis end
# and its label gives the numbers.
MOST_ZOOMED_OUT = 2
NARROW_PX = 700     # below this width the chart alone, without the table beside it
LABELLED_PX = 260   # below this chart height "budget full" would sit on the B=1 row's label
# Below this the chart's rows (a line of text each) and its axis would run into each other; its
# title gives its row to them below TITLED_PX.
CHART_MIN_PX = (260, 140)
TITLED_PX = 200
LEGEND_LINES = 2


def per_agent_draft(budget: int, batch: int) -> float:
    """Seed 000's split of the free budget: (T - B) / B drafts per agent, never negative."""
    return max(budget - batch, 0) / batch


def _fmt(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _live_text(pass_tokens: int, budget: int) -> str:
    over = pass_tokens - budget
    return f"{pass_tokens} of T={budget}" + (f", +{over} over" if over > 0 else "")


class BudgetView(QWidget):
    def __init__(self, theme: Theme, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._theme = theme
        self._budget = None
        self._shown: tuple[History, int] | None = None  # what the chart shows, for a resize
        self.plot = make_plot(theme)
        self.tokens_label = AxisLabel(self.plot, theme, "tokens of compute per step",
                                      "tokens per step")
        self.plot.setMinimumSize(*CHART_MIN_PX)
        self.title = PlotTitle(self.plot, theme, "Batching eats the free speculation budget",
                               titled_px=TITLED_PX)
        self.plot.getViewBox().setMouseEnabled(x=False, y=False)
        self.plot.getViewBox().sigResized.connect(self._on_plot_resized)
        self.bars = pg.BarGraphItem(x0=[], y=[], width=[], height=BAR_HEIGHT)
        self.overflow = pg.BarGraphItem(x0=[], y=[], width=[], height=BAR_HEIGHT + 0.2,
                                        brush=theme.qcolor("overflow", 70),
                                        pen=pg.mkPen(theme.overflow, width=2))
        self.budget_line = pg.InfiniteLine(angle=90, pen=dashed(theme, "text"), label="budget full",
                                           labelOpts={"color": theme.text,
                                                      "position": BUDGET_LABEL_AT})
        for item in (self.bars, self.overflow, self.budget_line):
            self.plot.addItem(item)
        self.budget_line.hide()  # until a step says what the budget is
        self.plot.setXRange(0, 2 * REFERENCE_BATCHES[-1], padding=0)
        self.plot.setYRange(-0.6, LIVE_Y + 0.6, padding=0)
        # One label per bar, made once and moved each frame (creating items per frame is slow).
        self._labels = [pg.TextItem(color=theme.text, anchor=(0, 0.5))
                        for _ in range(1 + len(REFERENCE_BATCHES))]
        for label in self._labels:
            self.plot.addItem(label)
        self._label_metrics = QFontMetricsF(self._labels[0].textItem.font())  # sizes the axis
        ticks = [(LIVE_Y, "live")] + [(len(REFERENCE_BATCHES) - 1 - i, f"B={b}")
                                      for i, b in enumerate(REFERENCE_BATCHES)]
        self.plot.getAxis("left").setTicks([ticks])
        self.plot.getAxis("left").setStyle(hideOverlappingLabels=False)
        self.legend = QLabel(self._legend_html())
        self.legend.setWordWrap(True)
        # Two lines at the chart's least width: a wrapped label's own least height is one line's,
        # and a pane held at its least size then drew the legend over the chart's axis.
        self.legend.setMinimumHeight(LEGEND_LINES * self.legend.fontMetrics().lineSpacing())
        self.detail = LiveLabel(role="muted", lines=2)

        self.table = _SeedTable()
        self._left = QVBoxLayout()
        self._left.addWidget(self.plot, 1)
        self._left.addWidget(self.detail)
        self._right = QVBoxLayout()  # the legend under the table, where the chart's height is not
        self._right.addWidget(self.table)
        self._right.addWidget(self.legend)
        self._right.addStretch(1)
        self._narrow = False
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(self._left, 1)
        layout.addLayout(self._right)

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        """Too narrow for both, the chart keeps the row: the table's numbers are the reference
        bars' own, and their labels say them. The legend then sits under the chart."""
        super().resizeEvent(event)
        narrow = self.width() < NARROW_PX
        if narrow != self._narrow:
            self._narrow = narrow
            self.table.setVisible(not narrow)
            (self._left if narrow else self._right).insertWidget(1, self.legend)

    def _legend_html(self) -> str:
        th = self._theme
        # short names: the legend must stay on a line or two where the window is small
        # ("free": the reference rows' budget to speculate; "unused": the live pass's)
        parts = [("committed", "committed"), ("accepted", "accepted"), ("rejected", "rejected"),
                 ("prefill", "prefill"), ("padding", "padding"), ("unused", "unused"),
                 ("free", "free"), ("overflow", "over T")]
        # a no-break space keeps each swatch with its name where the legend wraps
        return " ".join(f"<span style='color:{getattr(th, f)}'>■</span>&nbsp;{text}"
                        for f, text in parts)

    def _on_plot_resized(self, *_) -> None:
        """The axis's room for the live label, and "budget full"'s, are in pixels: refitted
        when the chart is resized, not only at the next step (a replay may not have one)."""
        if self._shown is not None:
            self.show_history(*self._shown)

    def show_history(self, history: History, stop: int) -> None:
        if stop == 0:
            return
        self._shown = (history, stop)
        rec = history.record(stop - 1)
        th = self._theme
        budget = rec.budget
        segments = [("committed", rec.batch), ("accepted", rec.accepted),
                    ("rejected", rec.drafted - rec.accepted), ("prefill", rec.prefill),
                    ("padding", rec.padding)]
        # The axis fits the widest pass of recent steps, in steps of 8 tokens, and its live label
        # right of it: a range that followed every step would redraw the axes, grid and every
        # bar each frame (~10 ms), not just the bars that changed.
        recent = int(history.column("pass_tokens", max(0, stop - RANGE_STEPS), stop).max())
        most = MOST_ZOOMED_OUT * max(budget, REFERENCE_BATCHES[-1])
        widest = -(-min(max(budget, recent, REFERENCE_BATCHES[-1]), most) // 8) * 8
        x0, widths, ys, brushes = [], [], [], []
        start = 0
        for field, count in segments:
            if count and start < widest:
                x0.append(start), widths.append(min(count, widest - start)), ys.append(LIVE_Y)
                brushes.append(th.qcolor(field))
            start += count
        if start < budget:
            x0.append(start), widths.append(budget - start), ys.append(LIVE_Y)
            brushes.append(th.qcolor("unused"))
        for row, b in enumerate(REFERENCE_BATCHES):
            y = len(REFERENCE_BATCHES) - 1 - row
            x0 += [0, b]
            widths += [b, max(budget - b, 0)]
            ys += [y, y]
            brushes += [th.qcolor("committed", 150), th.qcolor("free", 150)]
        self.bars.setOpts(x0=x0, width=widths, y=ys, height=BAR_HEIGHT, brushes=brushes,
                          pen=pg.mkPen(th.background, width=1))
        over = rec.pass_tokens - budget
        self.overflow.setOpts(x0=[budget] if over > 0 else [],
                              width=[min(over, widest - budget)] if over > 0 else [],
                              y=[LIVE_Y] if over > 0 else [], height=BAR_HEIGHT + 0.2)
        self.budget_line.setValue(budget)
        self.budget_line.show()
        self.budget_line.label.setVisible(self.plot.height() >= LABELLED_PX)  # else the line alone
        label_share = self._label_share(max(widest, recent), budget)
        self.plot.setXRange(0, widest / (1 - label_share) + 1, padding=0)
        self.plot.setYRange(-0.6, LIVE_Y + 0.6, padding=0)
        self._place_labels(rec, budget, widest)
        parts = (f"B={rec.batch}, {rec.drafted} drafted ({rec.accepted} accepted), "
                 f"prefill {rec.prefill}, padding {rec.padding}")
        self.detail.setText(  # the live bar's label gives the total where the step's is cut
            f"step {rec.step}: {parts} → {rec.pass_tokens} of T={budget}"
            + (f", {over} over budget" if over > 0 else ""), parts)
        if budget != self._budget or self.table.property("live") != rec.batch:
            self._fill_table(budget, rec.batch)

    def _label_share(self, widest: int, budget: int) -> float:
        """The share of the axis that the live label of a pass of `widest` tokens needs right of
        its bar. Its width is in pixels, so the share grows as the plot narrows. Measured for the
        widest recent pass, not the live one, so that the range holds while the text changes."""
        view_px = self.plot.getViewBox().width()
        if view_px <= 0:  # not laid out yet
            return 0.25
        # + the label's offset from its bar and its own margins
        label_px = self._label_metrics.horizontalAdvance(_live_text(widest, budget)) + 12
        return min(math.ceil(20 * label_px / view_px) / 20, 0.7)

    def _place_labels(self, rec, budget: int, widest: int) -> None:
        texts = [(LIVE_Y, _live_text(rec.pass_tokens, budget),
                  min(max(rec.pass_tokens, budget), widest))]
        for row, b in enumerate(REFERENCE_BATCHES):
            texts.append((len(REFERENCE_BATCHES) - 1 - row,
                           f"{_fmt(per_agent_draft(budget, b))} per agent", max(b, budget)))
        for label, (y, text, x) in zip(self._labels, texts):
            if label.toPlainText() != text:  # setText re-renders the text even when unchanged
                label.setText(text)
            label.setPos(x + 0.2, y)

    def _fill_table(self, budget: int, live: int) -> None:
        self._budget = budget
        self.table.setProperty("live", live)
        batches = sorted(set(REFERENCE_BATCHES) | ({live} if live > 0 else set()))
        self.table.setRowCount(len(batches))
        th = self._theme
        for row, b in enumerate(batches):
            cells = [f"{b}" + ("  ◀ live" if b == live else ""),
                     str(b), str(max(budget - b, 0)), _fmt(per_agent_draft(budget, b))]
            for col, text in enumerate(cells):
                item = self.table.item(row, col)
                if item is None:  # items are reused: the live B changes many times a second
                    item = QTableWidgetItem()
                    self.table.setItem(row, col, item)
                item.setText(text)
                item.setBackground(th.qcolor("highlight") if b == live else QBrush())
                item.setForeground(th.qcolor("committed") if b == live else th.qcolor("text"))


class _SeedTable(QTableWidget):
    """Seed 000's table, as wide as its columns and no wider, so that the chart beside it gets
    the rest of the row. Two-line headers keep the columns narrow; the first column has room
    for any live B, so the table's width never changes as B does (a changed width would lay out
    and repaint the whole row)."""

    def __init__(self) -> None:
        super().__init__(0, 4)
        self.setHorizontalHeaderLabels(["agents", "committed", "free to\nspeculate",
                                        "draft /\nagent"])
        self.verticalHeader().setVisible(False)
        self.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)
        header = self.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Fixed)
        header.resizeSection(0, self.fontMetrics().horizontalAdvance("64  ◀ live") + 16)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Maximum)

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        """As wide as the columns; as tall as the most rows it shows (the five reference
        batches and a live B between them), so the legend sits right under them."""
        scrollbar = self.verticalScrollBar().sizeHint().width()
        width = self.horizontalHeader().length() + 2 * self.frameWidth() + scrollbar
        rows = len(REFERENCE_BATCHES) + 1
        height = (self.horizontalHeader().sizeHint().height()
                  + rows * self.verticalHeader().defaultSectionSize() + 2 * self.frameWidth())
        return QSize(width, height)
