"""Text in a plot that gives way as the plot gets small, where pyqtgraph would cut it or draw it
over its neighbours: a title or a bottom axis label takes the longest of its wordings that fits
the plot's width, or none (the pane's own title names every plot); a title also gives its row to
the data in a plot too short to spare one. Value labels on a vertical axis keep apart in a short
plot, and row labels are thinned to every n-th where one a row would overlap."""
from __future__ import annotations

import math

import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, QRectF
from PySide6.QtGui import QFont, QFontMetricsF

from app.theme import Theme

TITLE_SIZE = "10pt"
TEXT_MARGIN_PX = 8     # a plot text's document margins, either side of its glyphs
TITLED_PX = 150        # a plot shorter than this gives its title's row to the data
TICK_GAP_PX = 2        # between neighbouring tick labels
VALUE_LABEL_LINES = 1.5  # the least distance of two value labels on a vertical axis, in lines


class _FittedText(QObject):
    """The first of a plot text's wordings (longest first) that fits, refitted as the plot is
    resized."""

    def __init__(self, plot: pg.PlotWidget, wordings: tuple[str, ...]) -> None:
        super().__init__(plot)
        self._plot = plot
        self._wordings = wordings
        self._shown: str | None = ""  # not a wording: the first fit shows one
        plot.installEventFilter(self)

    @property
    def text(self) -> str | None:
        """The wording shown; None where the plot shows none."""
        return self._shown

    def set(self, *wordings: str) -> None:
        if wordings != self._wordings:
            self._wordings = wordings
            self._fit()

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 - Qt's name
        if event.type() in (QEvent.Type.Resize, QEvent.Type.Show):
            self._fit()
        return False

    def _fit(self) -> None:
        plot = self._plot
        # not laid out yet, its size says nothing
        shown = self._choose() if plot.isVisible() else self._wordings[0]
        if shown != self._shown:
            self._shown = shown
            self._show(shown)
            # The plot sets its item's geometry only when resized, held to the item's least
            # size then: a longer text's, which stayed after the text shrank at the plot's first
            # show (the item ran past the plot's edge, its title and axes cut).
            plot.getPlotItem().setGeometry(QRectF(plot.viewport().rect()))

    def _fitting(self, metrics: QFontMetricsF) -> str | None:
        """The first wording as wide as the data or narrower (the texts span the data's
        column, not the left axis's nor the plot's margins)."""
        item = self._plot.getPlotItem()
        left = item.getAxis("left")
        margin_left, _, margin_right, _ = item.layout.getContentsMargins()
        room = (self._plot.width() - (left.width() if left.isVisible() else 0)
                - margin_left - margin_right - TEXT_MARGIN_PX)
        return next((w for w in self._wordings if metrics.horizontalAdvance(w) <= room), None)

    def _choose(self) -> str | None:
        raise NotImplementedError

    def _show(self, text: str | None) -> None:
        raise NotImplementedError


class PlotTitle(_FittedText):
    def __init__(self, plot: pg.PlotWidget, theme: Theme, *wordings: str,
                 titled_px: int = TITLED_PX) -> None:
        super().__init__(plot, wordings)
        self._colour, self._titled_px = theme.text, titled_px
        font = QFont()
        font.setPointSizeF(float(TITLE_SIZE.removesuffix("pt")))
        self._metrics = QFontMetricsF(font)
        self._fit()

    def _choose(self) -> str | None:
        return None if self._plot.height() < self._titled_px else self._fitting(self._metrics)

    def _show(self, text: str | None) -> None:
        item = self._plot.getPlotItem()
        if text is None:
            item.setTitle(None)
            item.titleLabel.setText("")  # hidden, its text still held the plot's least width
        else:
            item.setTitle(text, color=self._colour, size=TITLE_SIZE)


class AxisLabel(_FittedText):
    """The label under a plot's bottom axis."""

    def __init__(self, plot: pg.PlotWidget, theme: Theme, *wordings: str) -> None:
        super().__init__(plot, wordings)
        self._colour = theme.muted
        self._metrics = QFontMetricsF(plot.font())
        self._fit()

    def _choose(self) -> str | None:
        return self._fitting(self._metrics)

    def _show(self, text: str | None) -> None:
        axis = self._plot.getPlotItem().getAxis("bottom")
        axis.setLabel(text or "", color=self._colour)
        axis.resizeEvent()  # centres the label under the axis; pyqtgraph does it on resize only


class SpacedValueAxis(pg.AxisItem):
    """A vertical axis whose value labels keep apart: pyqtgraph puts at least two and a quarter
    intervals on an axis however short, and 0.2, 0.4, 0.6 and 0.8 in a 50 px plot ran into each
    other. Its labelled ticks step up the 1, 2, 5 scale until they are VALUE_LABEL_LINES apart;
    the ticks it would have labelled stay as the next level, labelled only where pyqtgraph finds
    room."""

    def tickSpacing(self, minVal, maxVal, size):  # noqa: N802 N803 - pyqtgraph's names
        levels = super().tickSpacing(minVal, maxVal, size)
        span = abs(maxVal - minVal)
        if not levels or span == 0 or size <= 0:
            return levels
        least = VALUE_LABEL_LINES * QFontMetricsF(self.font()).height() * span / size
        major = step = levels[0][0]
        while step < least:
            step = _next_nice(step)
        return levels if step == major else [(step, 0), (major, 0)]


class WholeNumberAxis(pg.AxisItem):
    """An axis of things counted one by one (agent ids, draft positions): pyqtgraph steps a short
    range in fractions, and two agents read 0, 0.5, 1.0."""

    def tickSpacing(self, minVal, maxVal, size):  # noqa: N802 N803 - pyqtgraph's names
        levels = [level for level in super().tickSpacing(minVal, maxVal, size) if level[0] >= 1]
        return levels or [(1.0, 0)]


def _next_nice(step: float) -> float:
    """The step after `step` on the 1, 2, 5, 10, 20, ... scale."""
    power = 10 ** math.floor(math.log10(step) + 1e-9)
    return next(nice * power for nice in (2, 5, 10) if nice * power > step * (1 + 1e-9))


def thinned_row_ticks(ticks: list[tuple[float, str]], row_px: float,
                      metrics: QFontMetricsF) -> list[tuple[float, str]]:
    """Every n-th of `ticks` (row, label), rows `row_px` pixels apart on a vertical axis; n the
    least that keeps neighbouring labels apart."""
    every = max(1, math.ceil((metrics.height() + TICK_GAP_PX) / max(row_px, 1e-9)))
    return ticks[::every]
