"""Seed 000's lower strip, live: one row per lane, recent steps as columns. Each cell is the lane's
pass: its committed token, accepted drafts, rejected drafts, then padded slots up to the pass
width. Beside it, padding waste as a running percentage."""
from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtGui import QFontMetricsF
from PySide6.QtWidgets import QVBoxLayout, QWidget

from app.history import History
from app.theme import Theme
from app.views.live_label import LiveLabel
from app.views.plot_factory import make_plot
from app.views.plot_text import AxisLabel, PlotTitle, thinned_row_ticks

RECENT_STEPS = 16     # columns on screen
MAX_SLOTS = 17        # cell width cap: 1 committed + 16 drafts (wider passes are clipped)
STRIP_MIN_PX = (190, 90)  # the agent axis and a few rows, the steps' label under them


class LaneStripView(QWidget):
    def __init__(self, theme: Theme, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._palette = {name: np.array(theme.rgb(name), dtype=np.uint8)
                         for name in ("background", "committed", "accepted", "rejected", "padding")}
        self.plot = make_plot(theme, left="agent")
        self.steps_label = AxisLabel(self.plot, theme, "recent steps →", "steps →")
        self.plot.setMinimumSize(*STRIP_MIN_PX)
        self.title = PlotTitle(self.plot, theme,
                               "Lanes: accepted vs rejected drafts, padding to pass width",
                               "accepted vs rejected drafts, padding to pass width",
                               "accepted vs rejected drafts")
        self._tick_metrics = QFontMetricsF(self.plot.font())
        self.plot.getViewBox().sigResized.connect(self._tick_agents)
        self.plot.getViewBox().setMouseEnabled(x=False, y=False)
        self.plot.getViewBox().invertY(True)
        self.plot.getAxis("bottom").setTicks([[]])
        self.image = pg.ImageItem()
        self._agents: list[int] = []
        self._ticked: tuple[list[int], list] | None = None  # the agents, and their ticks shown
        self.plot.addItem(self.image)
        self.plot.setXRange(0, RECENT_STEPS, padding=0)  # before the first step: one empty row
        self.plot.setYRange(-0.5, 0.5, padding=0)
        self.plot.getAxis("left").setTicks([[]])  # an agent's tick each, once there are lanes
        self.plot.getAxis("left").enableAutoSIPrefix(False)  # agent ids, not a quantity
        self.waste = LiveLabel(role="muted")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.waste)

    def show_history(self, history: History, stop: int) -> None:
        if stop == 0:
            return
        recent = history.records(max(0, stop - RECENT_STEPS), stop)
        agents = sorted({lane.agent for rec in recent for lane in rec.lanes})
        row_of = {agent: i for i, agent in enumerate(agents)}
        slots = min(MAX_SLOTS, 1 + max((lane.k + lane.pad for rec in recent for lane in rec.lanes),
                                       default=0))
        cell = slots + 1  # one background slot separates steps
        image = np.empty((max(len(agents), 1), RECENT_STEPS * cell, 3), dtype=np.uint8)
        image[:] = self._palette["background"]
        p = self._palette
        offset = (RECENT_STEPS - len(recent)) * cell  # newest step at the right edge
        for col, rec in enumerate(recent):
            x = offset + col * cell
            for lane in rec.lanes:
                row = image[row_of[lane.agent], x:x + slots]
                spans = ((1, "committed"), (lane.acc, "accepted"), (lane.k - lane.acc, "rejected"),
                         (lane.pad, "padding"))
                at = 0
                for n, name in spans:
                    row[at:min(at + n, slots)] = p[name]
                    at += n
        self.image.setImage(image, autoLevels=False)
        self.image.setRect(0, -0.5, RECENT_STEPS, len(agents))
        self.plot.setXRange(0, RECENT_STEPS, padding=0)
        self.plot.setYRange(-0.5, max(len(agents), 1) - 0.5, padding=0)
        self._agents = agents
        self._tick_agents()
        pad = history.column("padding", 0, stop).sum()
        would = history.column("pad_if_padded", 0, stop).sum()
        pass_tokens = history.column("pass_tokens", 0, stop).sum()
        layout = history.record(stop - 1).ragged
        waste = f"{pad / max(pass_tokens, 1):.1%}"
        if layout == "packed":
            padded = f"{would / max(pass_tokens + would, 1):.1%}"
            self.waste.setText(f"padding waste ({layout}): {waste} of pass tokens · padded "
                               f"layout would waste {padded}",
                               f"padding waste ({layout}) {waste} · padded would waste {padded}",
                               f"waste {waste} · padded {padded}")
        else:
            self.waste.setText(f"padding waste ({layout}): {waste} of pass tokens",
                               f"padding waste ({layout}) {waste}", f"waste {waste}")

    def _tick_agents(self, *_) -> None:
        """An agent's tick a row, thinned where the rows are lower than their labels. Set only
        when they change: new ticks redraw the axis, and the lanes change rarely."""
        rows = max(len(self._agents), 1)
        ticks = thinned_row_ticks([(i, str(a)) for i, a in enumerate(self._agents)],
                                  self.plot.getViewBox().height() / rows, self._tick_metrics)
        if (self._agents, ticks) != self._ticked:
            self._ticked = (self._agents, ticks)
            self.plot.getAxis("left").setTicks([ticks])
