"""The calibrated step-time curve t(N) with the budget T marked and the live operating point
(pass tokens, measured step time) over it, so a step past the knee is visible as such."""
from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtWidgets import QVBoxLayout, QWidget

from app.history import History
from app.theme import Theme
from app.views.plot_factory import axis_holds, dashed, make_plot
from app.views.plot_text import AxisLabel, PlotTitle

TRAIL_STEPS = 64  # recent operating points drawn faintly behind the live one
PLOT_MIN_PX = (180, 120)  # the ms axis, the N axis's label, and a knee to see
# Past the calibrated curve the axes grow to this much beyond the live point, and shrink back
# only once it needs under half of that: a swarm's long contexts keep the live point above the
# curve, moving every step, and axes that followed it repainted themselves and the grid every
# frame.
ROOM_PAST_CURVE = 1.3


def _title_wordings(context: int | None) -> tuple[str, ...]:
    """Live steps at longer contexts (a swarm's lanes hold thousands of tokens) sit above the
    curve: the title says what context it was measured at, where the calibration says."""
    ctx = "" if context is None else f" (ctx {context})"
    return f"t(N) calibrated{ctx} · live point", f"t(N){ctx} · live point", f"t(N){ctx}"


class CostCurveView(QWidget):
    def __init__(self, theme: Theme, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.plot = make_plot(theme, left="ms")
        self.tokens_label = AxisLabel(self.plot, theme, "query tokens per pass (N)",
                                      "tokens per pass (N)", "pass tokens (N)", "N")
        self.plot.setMinimumSize(*PLOT_MIN_PX)
        self.title = PlotTitle(self.plot, theme, *_title_wordings(None))
        # the fit the policies plan with, over the points as measured
        self.curve = self.plot.plot(pen=pg.mkPen(theme.committed, width=2))
        self.measured = pg.ScatterPlotItem(size=5, brush=theme.committed, pen=None)
        self.trail = pg.ScatterPlotItem(size=5, brush=theme.qcolor("free", 90), pen=None)
        self.live = pg.ScatterPlotItem(size=13, brush=theme.qcolor("free"),
                                       pen=pg.mkPen(theme.text, width=1.5))
        self.budget_line = pg.InfiniteLine(angle=90, pen=dashed(theme, "text"), label="T",
                                           labelOpts={"color": theme.text, "position": 0.92})
        for item in (self.measured, self.trail, self.live, self.budget_line):
            self.plot.addItem(item)
        self.budget_line.setVisible(False)
        # The axes fit the calibrated curve, stretched only while the live point lies beyond it
        # (_cover): a range that followed every trail point would redraw the axes and grid each
        # frame, and one slow outlier (a long prefill) would flatten the curve's knee for long.
        self.plot.disableAutoRange()
        self._curve_extent = (1.0, 1.0)  # (N, ms) of the calibrated points
        self._shown: tuple[float, float] | None = None  # (N, ms) the axes hold
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot)

    def set_calibration(self, calibration) -> None:
        """`calibration` has .points [(n, ms)], .t_ms(n) and .budget (engine.spec.calibration),
        or is None."""
        if calibration is None:
            self.curve.setData([], [])
            self.measured.setData([], [])
            self.budget_line.setVisible(False)
            self.title.set(*_title_wordings(None))
            return
        self.title.set(*_title_wordings(calibration.context))
        ns, ms = zip(*calibration.points)
        self.curve.setData(list(ns), [calibration.t_ms(n) for n in ns])
        self.measured.setData(list(ns), list(ms))
        self._curve_extent = (float(max(ns)), float(max(ms)))
        self._shown = None  # fitted afresh to the new curve
        self._cover(1.0, 1.0)
        self.budget_line.setValue(calibration.budget)
        self.budget_line.setVisible(True)  # first: a hidden label ignores a new format
        self.budget_line.label.setFormat(f"T = {calibration.budget}")

    def show_history(self, history: History, stop: int) -> None:
        if stop == 0:
            return
        lo = max(0, stop - TRAIL_STEPS)
        n = history.column("pass_tokens", lo, stop)
        ms = history.column("dt_ms", lo, stop)
        self.trail.setData(n, ms)
        self.live.setData([n[-1]], [ms[-1]])
        self._cover(float(n[-1]), float(ms[-1]))

    def _cover(self, n: float, ms: float) -> None:
        """Axes holding the calibrated curve and the point (n, ms): unchanged while they hold it
        and it needs at least half of them; else refitted, with room past the curve."""
        need = (max(n, self._curve_extent[0]), max(ms, self._curve_extent[1]))
        if self._shown is not None and all(map(axis_holds, need, self._shown)):
            return
        self._shown = tuple(x if x == curve else x * ROOM_PAST_CURVE
                            for x, curve in zip(need, self._curve_extent))
        self.plot.setXRange(0, self._shown[0] * 1.05, padding=0)
        # headroom: the live point stays below the T label (at 0.92 of the height)
        self.plot.setYRange(0, self._shown[1] * 1.25, padding=0)
