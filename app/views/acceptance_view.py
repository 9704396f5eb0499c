"""Acceptance over the recent window: per draft position, per category, per lane, and the mean
acceptance length with the bonus token counted."""
from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtWidgets import QGridLayout, QWidget

from app.acceptance import AcceptanceStats
from app.history import History
from app.theme import Theme
from app.views.live_label import LiveLabel
from app.views.plot_factory import make_plot
from app.views.plot_text import PlotTitle

ROLLING_STEPS = 256
SHARED_AXIS_PX = 6
SCALE_AXIS_PX = 30   # the first plot's 0..1 scale: "0.5" and a tick
SHARE_TICKS = [[(0.0, "0"), (0.5, "0.5"), (1.0, "1")]]  # auto ticks crowded a short plot
# Each plot's least room for its title, bars and tick labels (three category names; an agent id
# every few bars).
PLOT_MIN_PX = {"position": (100, 100), "category": (120, 100), "lane": (80, 100)}
COLUMN_STRETCH = (6, 5, 4)  # the first plot's scale takes its share; the agents' ids are short


class AcceptanceView(QWidget):
    def __init__(self, theme: Theme, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.headline = LiveLabel("mean acceptance length –", role="headline", lines=2)
        # The titles say what the x axes count: axis labels under them would cost each plot a
        # text line of its height.
        self.position_plot = make_plot(theme, whole_x=True)
        self.category_plot = make_plot(theme)
        self.lane_plot = make_plot(theme, whole_x=True)
        self.lane_plot.getAxis("bottom").enableAutoSIPrefix(False)  # agent ids, not a quantity
        self.titles = [PlotTitle(self.position_plot, theme, "by draft position", "by position",
                                 "by pos.", titled_px=0),
                       PlotTitle(self.category_plot, theme, "by category", "by cat.",
                                 titled_px=0),
                       PlotTitle(self.lane_plot, theme, "by agent", "agent", titled_px=0)]
        self.bars = {}
        self._category_ticks: list | None = None
        for name, plot, field in (("position", self.position_plot, "accepted"),
                                  ("category", self.category_plot, "free"),
                                  ("lane", self.lane_plot, "committed")):
            plot.setMinimumSize(*PLOT_MIN_PX[name])
            plot.setYRange(0, 1.05, padding=0)
            plot.getAxis("left").setTicks(SHARE_TICKS)
            plot.getViewBox().setMouseEnabled(x=False, y=False)
            self.bars[name] = pg.BarGraphItem(x=[], height=[], width=0.7,
                                              brush=theme.qcolor(field), pen=None)
            plot.addItem(self.bars[name])
        # The three share the 0..1 scale: only the first labels it, so the narrow plots beside
        # it keep their width for bars and category names (which overlapped at 1600 px).
        for plot in (self.category_plot, self.lane_plot):
            plot.getAxis("left").setStyle(showValues=False)
            plot.getAxis("left").setWidth(SHARED_AXIS_PX)
        self.position_plot.getAxis("left").setWidth(SCALE_AXIS_PX)
        layout = QGridLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.headline, 0, 0, 1, 3)
        layout.addWidget(self.position_plot, 1, 0)
        layout.addWidget(self.category_plot, 1, 1)
        layout.addWidget(self.lane_plot, 1, 2)
        for column, stretch in enumerate(COLUMN_STRETCH):
            layout.setColumnStretch(column, stretch)

    def show_history(self, history: History, stop: int) -> None:
        if stop == 0:
            return
        stats = AcceptanceStats.from_records(history.records(max(0, stop - ROLLING_STEPS), stop))
        positions = list(range(1, len(stats.by_position) + 1))
        self.bars["position"].setOpts(x=positions, height=list(stats.by_position), width=0.7)
        self.position_plot.setXRange(0.4, max(len(positions), 4) + 0.6, padding=0)
        cats = sorted(stats.by_category)
        self.bars["category"].setOpts(x=list(range(len(cats))),
                                      height=[stats.by_category[c] for c in cats], width=0.7)
        # Short tick names: three bars share a narrow plot. Set only when they change: new ticks
        # repaint the axis.
        ticks = [[(i, c.split("-")[0]) for i, c in enumerate(cats)]]
        if ticks != self._category_ticks:
            self._category_ticks = ticks
            self.category_plot.getAxis("bottom").setTicks(ticks)
        self.category_plot.setXRange(-0.6, max(len(cats), 3) - 0.4, padding=0)
        agents = sorted(stats.by_agent)
        self.bars["lane"].setOpts(x=agents, height=[stats.by_agent[a] for a in agents], width=0.7)
        if agents:
            self.lane_plot.setXRange(min(agents) - 0.6, max(agents) + 0.6, padding=0)
        length = stats.mean_acceptance_length
        drafted = history.column("drafted", max(0, stop - ROLLING_STEPS), stop).sum()
        accepted = history.column("accepted", max(0, stop - ROLLING_STEPS), stop).sum()
        steps = min(stop, ROLLING_STEPS)
        if length is None:
            off = " (speculation off)" if history.record(stop - 1).policy == "off" else ""
            self.headline.setText(f"no drafts in the last {steps} steps{off}", f"no drafts{off}")
        else:
            share = f"{accepted / drafted:.0%}"
            self.headline.setText(
                f"mean acceptance length {length:.2f} (bonus counted) · acceptance {share} "
                f"over the last {steps} steps",
                f"mean acceptance length {length:.2f} (bonus counted) · acceptance {share}",
                f"acceptance length {length:.2f} · {share} accepted",
                f"length {length:.2f} · {share}")
