"""Live batch size over time as a step plot, with the batch and speculation ceilings, and tokens/s
on a linked plot beside it. Also hosts the replay cursor and the range selection."""
from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Signal
from PySide6.QtWidgets import QVBoxLayout, QWidget

from app.history import History
from app.theme import Theme
from app.views.live_label import LiveLabel
from app.views.plot_factory import axis_holds, hline, make_plot
from app.views.plot_text import AxisLabel, PlotTitle
from engine.controls import Controls

FOLLOW_WINDOW_S = 60.0  # seconds of history on screen while following live
FOLLOW_LEAD = 0.2       # share of the window left empty ahead of the live edge after a jump
# Below these the plots' text would run into each other: the batch plot's data and ceilings, the
# tok/s plot's data, its time ticks and their label.
BATCH_PLOT_MIN_PX = (240, 60)
RATE_PLOT_MIN_PX = (240, 90)
TITLED_PX = 110  # the batch plot names the ceilings in a title down to this height
CEILING_LABEL_SHARE = 0.3  # the most of the batch plot's height the ceilings' labels may take


class BatchView(QWidget):
    follow_lost = Signal()            # the user zoomed or panned away from the live edge
    range_selected = Signal(int, int)  # [lo, hi) step indices of the selected region

    def __init__(self, theme: Theme, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._history: History | None = None
        self._stop = 0
        self.follow = True
        self.headline = LiveLabel("B = –   ·   – tok/s", role="headline")
        self.hover = LiveLabel(role="muted")

        self.batch_plot = make_plot(theme, left="lanes")
        self.batch_plot.setMinimumSize(*BATCH_PLOT_MIN_PX)
        # worded by set_ceilings
        self.batch_title = PlotTitle(self.batch_plot, theme, "", titled_px=TITLED_PX)
        self.rate_plot = make_plot(theme, left="tok/s")
        # Seconds, whatever the range: a replay under a second long read "(x0.001)". Before its
        # label is set, which would scale it once (pyqtgraph scales on showing a label).
        self.rate_plot.getAxis("bottom").enableAutoSIPrefix(False)
        self.time_label = AxisLabel(self.rate_plot, theme, "session time (s)", "time (s)")
        self.rate_plot.setMinimumSize(*RATE_PLOT_MIN_PX)
        self.rate_plot.setXLink(self.batch_plot)
        # the time axis under both: the batch plot's own would repeat it
        self.batch_plot.getAxis("bottom").setStyle(showValues=False)
        for plot in (self.batch_plot, self.rate_plot):
            plot.getPlotItem().setClipToView(True)
            plot.getPlotItem().setDownsampling(auto=True, mode="peak")
            plot.getViewBox().sigRangeChangedManually.connect(self._on_manual_range)
        self.batch_plot.getViewBox().setMouseEnabled(y=False)
        self.rate_plot.getViewBox().setMouseEnabled(y=False)
        self.batch_curve = self.batch_plot.plot(stepMode="right", pen=pg.mkPen(theme.line, width=2))
        self.rate_curve = self.rate_plot.plot(pen=pg.mkPen(theme.line_alt, width=1.5))
        self.batch_ceiling = hline(theme, "free", "batch ceiling {value:.0f}")
        self.spec_ceiling = hline(theme, "accepted", "speculation ceiling {value:.0f}", at=0.98)
        self._ceiling_label_px = self.batch_ceiling.label.boundingRect().height()
        self.batch_plot.getViewBox().sigResized.connect(self._on_plot_resized)
        self.batch_plot.addItem(self.batch_ceiling)
        self.batch_plot.addItem(self.spec_ceiling)
        self.cursor = pg.InfiniteLine(angle=90, pen=pg.mkPen(theme.text, width=1))
        self.region = pg.LinearRegionItem(brush=theme.qcolor("highlight", 45))
        self.region.sigRegionChangeFinished.connect(self._on_region)
        self.batch_plot.addItem(self.cursor)
        self.batch_plot.addItem(self.region)
        self.set_replay(False)
        # Before the first step (while a model loads): the ranges a session opens in, not
        # pyqtgraph's +-0.5 around nothing, and the default ceilings.
        defaults = Controls()
        self.set_ceilings(defaults.batch_ceiling, defaults.spec_ceiling)
        self.batch_plot.setXRange(0, FOLLOW_WINDOW_S, padding=0)
        self.batch_plot.setYRange(0, _top(0, (defaults.batch_ceiling, defaults.spec_ceiling)),
                                  padding=0)
        self.rate_plot.setYRange(0, 1, padding=0)
        self._mouse = pg.SignalProxy(self.batch_plot.scene().sigMouseMoved, rateLimit=30,
                                     slot=self._on_mouse)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.headline)
        layout.addWidget(self.batch_plot, 1)  # (its time axis is the tok/s plot's)
        layout.addWidget(self.rate_plot, 1)
        layout.addWidget(self.hover)

    def set_replay(self, replay: bool) -> None:
        self.cursor.setVisible(replay)
        self.region.setVisible(replay)
        if replay:  # live, _follow sets the tok/s range; in replay it fits the whole session
            self.rate_plot.enableAutoRange(axis="y")

    def set_ceilings(self, batch_ceiling: int, spec_ceiling: int) -> None:
        self.batch_ceiling.setValue(batch_ceiling)
        self.spec_ceiling.setValue(spec_ceiling)
        # named in the title too: a ceiling far above the batch is off the axis (_top)
        self.batch_title.set(
            f"Batch (B) · ceilings: batch {batch_ceiling}, speculation {spec_ceiling}",
            f"ceilings: batch {batch_ceiling}, speculation {spec_ceiling}",
            f"ceilings: batch {batch_ceiling}, spec. {spec_ceiling}")

    def show_history(self, history: History, stop: int) -> None:
        self._history, self._stop = history, stop
        if stop == 0:
            return
        t = history.column("t", 0, stop)
        batch = history.column("batch", 0, stop)
        rate = history.tokens_per_s(0, stop)
        self.batch_curve.setData(t, batch)
        self.rate_curve.setData(t, rate)
        self.headline.setText(f"B = {int(batch[-1])}   ·   {rate[-1]:.1f} tok/s")
        if self.cursor.isVisible():
            self.cursor.setValue(t[-1])
        self._fit_batch_axis()
        if self.follow:
            self._follow(float(t[-1]), rate)

    def _on_plot_resized(self) -> None:
        if self._stop:  # in replay no new step comes to refit the axis
            self._fit_batch_axis()

    def _fit_batch_axis(self) -> None:
        """The batch axis's top, with room above a ceiling for its label; a plot too short to
        keep that room draws the lines unlabelled (the title names them while it shows).
        (Unchanged ranges cost nothing.)"""
        peak = float(self._history.column("batch", 0, self._stop).max())
        view_px = self.batch_plot.getViewBox().height()
        labelled = view_px <= 0 or self._ceiling_label_px <= CEILING_LABEL_SHARE * view_px
        for line in (self.batch_ceiling, self.spec_ceiling):
            line.label.setVisible(labelled)
        label_share = self._ceiling_label_px / view_px if labelled and view_px > 0 else 0.0
        ceilings = (int(self.batch_ceiling.value()), int(self.spec_ceiling.value()))
        self.batch_plot.setYRange(0, _top(peak, ceilings, label_share), padding=0)

    def _follow(self, end: float, rate) -> None:
        """Scroll in jumps, not every frame: a moved range repaints both plots, their axes and
        grid (~30 ms a frame at 1600x1000); a fixed one repaints only the curves' new points."""
        lo, hi = self.batch_plot.getViewBox().viewRange()[0]
        if not lo <= end <= hi or abs(hi - lo - FOLLOW_WINDOW_S) > 1e-6 * FOLLOW_WINDOW_S:
            lo = max(0.0, end - (1 - FOLLOW_LEAD) * FOLLOW_WINDOW_S)
            self.batch_plot.setXRange(lo, lo + FOLLOW_WINDOW_S, padding=0)
        # The same for tok/s: grow the axis at once, shrink it only when the peak has halved.
        top = self.rate_plot.getViewBox().viewRange()[1][1]
        first = self._history.index_at(lo)
        peak = float(rate[min(first, len(rate) - 1):].max())
        if not axis_holds(peak, top):
            self.rate_plot.setYRange(0, max(peak * 1.25, 1.0), padding=0)

    def select_range(self, t0: float, t1: float) -> None:
        self.region.setRegion((t0, t1))

    def _on_manual_range(self, *_) -> None:
        if self.follow:
            self.follow = False
            self.follow_lost.emit()

    def _on_region(self) -> None:
        if self._history is None:
            return
        t0, t1 = self.region.getRegion()
        self.range_selected.emit(self._history.index_at(t0), self._history.index_at(t1))

    def _on_mouse(self, event) -> None:
        history = self._history
        if history is None or self._stop == 0:
            return
        point = self.batch_plot.getViewBox().mapSceneToView(event[0])
        i = min(max(history.index_at(point.x()) - 1, 0), self._stop - 1)
        t, batch, drafted, accepted, dt_ms = (float(history.column(name, i, i + 1)[0]) for name
                                              in ("t", "batch", "drafted", "accepted", "dt_ms"))
        rec = history.record(i)  # None for a live session's old step: its reason is not kept
        numbers = (f"step {i} · t {t:.2f} s · B {batch:.0f} · drafted {drafted:.0f} · "
                   f"accepted {accepted:.0f} · {dt_ms:.1f} ms")
        # the reason is the first to go in a narrow pane (the Decisions pane lists it too)
        self.hover.setText(numbers + (f" · {rec.policy}: {rec.reason}" if rec else ""), numbers)


def _top(peak: float, ceilings: tuple[int, ...], label_share: float = 0.0) -> float:
    """The batch axis's top: the batch and the ceilings near it (one far above would flatten the
    batch; the title names both), with room for a ceiling's label above its line: at least
    `label_share` of the axis."""
    highest = max([peak, *(c for c in ceilings if c <= 2 * peak + 4 or c <= 16)])
    return max(1.15 * highest + 1, highest / (1 - label_share))
