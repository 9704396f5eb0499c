"""Themed pyqtgraph plots, so every view draws axes, grid and text the same way."""
from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGraphicsItem

from app.theme import Theme
from app.views.plot_text import SpacedValueAxis, WholeNumberAxis

pg.setConfigOptions(imageAxisOrder="row-major", antialias=False)
LEFT_AXIS_PX = 52
RIGHT_MARGIN_PX = 10  # half a tick label: one at the right end of the axis is not cut


def make_plot(theme: Theme, left: str = "", whole_x: bool = False) -> pg.PlotWidget:
    """A plot with its axes themed; its title and bottom axis label, if any, are a PlotTitle and
    an AxisLabel (plot_text.py). `whole_x`: its x axis counts things, ticked at whole numbers."""
    axes = {"left": SpacedValueAxis(orientation="left")}
    if whole_x:
        axes["bottom"] = WholeNumberAxis(orientation="bottom")
    plot = pg.PlotWidget(background=theme.background, axisItems=axes)
    item = plot.getPlotItem()
    left_margin, top_margin, _, bottom_margin = item.layout.getContentsMargins()
    item.layout.setContentsMargins(left_margin, top_margin, RIGHT_MARGIN_PX, bottom_margin)
    for side in ("left", "bottom"):
        axis = item.getAxis(side)
        # Axes replay a QPicture of their text on every viewport repaint (~2 ms each); a pixmap
        # cache redraws them only when their range changes.
        axis.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        axis.setPen(pg.mkPen(theme.grid))
        axis.setTextPen(pg.mkPen(theme.muted))
    if left:
        item.getAxis("left").setLabel(left, color=theme.muted)
    # A fixed width: a left axis that sized itself to its tick text would re-lay out the plot
    # (and repaint it whole) whenever the widest tick label changed; it also aligns stacked plots.
    item.getAxis("left").setWidth(LEFT_AXIS_PX)
    item.showGrid(x=True, y=True, alpha=0.25)
    item.hideButtons()
    plot.setMenuEnabled(False)
    return plot


def axis_holds(value: float, top: float) -> bool:
    """Whether an axis up to `top` still suits `value`: it holds it, and it needs at least half
    of it. Refitted only where it does not (grow at once, shrink past half), an axis under a
    value that moves every frame repaints rarely; each refit repaints it and its grid."""
    return 0.5 * top <= value <= top


def dashed(theme: Theme, field: str, width: float = 1.5) -> pg.QtGui.QPen:
    return pg.mkPen(getattr(theme, field), width=width, style=Qt.PenStyle.DashLine)


def hline(theme: Theme, field: str, label: str, at: float = 0.02) -> pg.InfiniteLine:
    """A dashed horizontal line, its label above it `at` that share of the plot's width (from the
    left edge if under half, else up to the right one: two lines' labels apart)."""
    edge = 0 if at < 0.5 else 1
    return pg.InfiniteLine(angle=0, movable=False, pen=dashed(theme, field, 1.2), label=label,
                           labelOpts={"color": getattr(theme, field), "position": at,
                                      "anchors": [(edge, 1), (edge, 1)]})
