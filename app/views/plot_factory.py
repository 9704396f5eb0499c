"""Themed pyqtgraph plots, so every view draws axes, grid and text the same way."""
from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGraphicsItem

from app.theme import Theme

pg.setConfigOptions(imageAxisOrder="row-major", antialias=False)
LEFT_AXIS_PX = 52
TITLE_SIZE = "10pt"


def make_plot(theme: Theme, title: str = "", left: str = "", bottom: str = "") -> pg.PlotWidget:
    plot = pg.PlotWidget(background=theme.background)
    item = plot.getPlotItem()
    if title:
        item.setTitle(title, color=theme.text, size=TITLE_SIZE)
    for side, label in (("left", left), ("bottom", bottom)):
        axis = item.getAxis(side)
        # Axes replay a QPicture of their text on every viewport repaint (~2 ms each); a pixmap
        # cache redraws them only when their range changes.
        axis.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        axis.setPen(pg.mkPen(theme.grid))
        axis.setTextPen(pg.mkPen(theme.muted))
        if label:
            axis.setLabel(label, color=theme.muted)
    # A fixed width: a left axis that sized itself to its tick text would re-lay out the plot
    # (and repaint it whole) whenever the widest tick label changed; it also aligns stacked plots.
    item.getAxis("left").setWidth(LEFT_AXIS_PX)
    item.showGrid(x=True, y=True, alpha=0.25)
    item.hideButtons()
    plot.setMenuEnabled(False)
    return plot


def dashed(theme: Theme, field: str, width: float = 1.5) -> pg.QtGui.QPen:
    return pg.mkPen(getattr(theme, field), width=width, style=Qt.PenStyle.DashLine)


def hline(theme: Theme, field: str, label: str) -> pg.InfiniteLine:
    return pg.InfiniteLine(angle=0, movable=False, pen=dashed(theme, field, 1.2), label=label,
                           labelOpts={"color": getattr(theme, field), "position": 0.02,
                                      "anchors": [(0, 1), (0, 1)]})
