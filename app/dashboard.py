"""All views in one grid, redrawn together from one History up to one step (live: the newest;
replay: the scrubber's). The window owns when to redraw; the dashboard owns what.

Each view has a least size at which its text stays whole and apart; in a window too small for all
of them at once the grid keeps those sizes and scrolls, where it used to hold the window larger
than asked (818x611 for --size 800x500)."""
from __future__ import annotations

import time
from typing import Callable

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QFrame, QGroupBox, QScrollArea, QSplitter, QVBoxLayout, QWidget

from app.agent_rows import AgentRow, AgentTally
from app.history import History
from app.theme import Theme
from app.views.acceptance_view import AcceptanceView
from app.views.agents_view import AgentsView
from app.views.batch_view import BatchView
from app.views.budget_view import BudgetView
from app.views.cost_curve_view import CostCurveView
from app.views.decisions_view import DecisionsView
from app.views.lane_strip import LaneStripView

SLOW_REFRESH_S = 0.25  # tables and text change slowly; redrawing them at frame rate wastes time

# What each pane shows, for someone new to it: its tooltip, and Help -> What the views show.
VIEW_HELP = {
    "Batch size over time": "Lanes decoding at each step (B), under the batch ceiling (the most "
                            "lanes at once) and the speculation ceiling (no drafts above it), "
                            "and the tokens emitted a second.",
    "Speculation budget (this step)": "One step's pass in tokens of compute: a committed token "
                                      "per decoding lane, drafts accepted and rejected, prefill "
                                      "and padding, against T, the tokens a pass holds for "
                                      "about the time of one (dashed; measured by calibration). "
                                      "A pass past T takes longer; goodput goes there where its "
                                      "drafts are likely enough to pay. The table: the free "
                                      "budget per agent at B = 1 to 16.",
    "Lane strip": "One row per lane over recent steps: its committed token, accepted and "
                  "rejected drafts, and padded slots up to the pass width; the padding the layout "
                  "wastes, and what the other layout would.",
    "Acceptance": "Drafts accepted by draft position, by workload and by agent. The mean "
                  "acceptance length counts the bonus token: tokens a lane emits a step while "
                  "it drafts.",
    "Cost curve": "t(N): the calibrated time of a pass of N tokens, T where it passes (1 + eps) "
                  "t(1), and recent steps' own times, the live one circled (long contexts and a "
                  "busy CPU sit above the curve).",
    "Decisions": "Each step's policy and its reason, and the tokens emitted a second of step "
                 "time against an estimate of the same work with speculation off.",
    "Agents": "Each agent's state (decoding, in a tool call, done), workload, tokens and "
              "acceptance; an API client's conversation (Session → Serve OpenAI's API) is an "
              "agent of workload api, in a tool call while its client works. Select one to read "
              "its transcript: accepted drafts, tool output and the prompt marked.",
}


def _boxed(title: str, widget: QWidget) -> QGroupBox:
    box = QGroupBox(title)
    box.setToolTip(VIEW_HELP[title])
    layout = QVBoxLayout(box)
    layout.setContentsMargins(2, 2, 2, 2)
    layout.addWidget(widget)
    return box


class Dashboard(QWidget):
    def __init__(self, theme: Theme, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.batch = BatchView(theme)
        self.budget = BudgetView(theme)
        self.lanes = LaneStripView(theme)
        self.acceptance = AcceptanceView(theme)
        self.cost = CostCurveView(theme)
        self.decisions = DecisionsView(theme)
        self.agents = AgentsView(theme)
        self._slow_at = 0.0
        self.agents.selection_changed.connect(self._refresh_slow_views_soon)
        self._tally = AgentTally()
        self._drawn: tuple[History, int] | None = None  # what the fast views show now
        self._slow_drawn: tuple | None = None  # (history, step, events) the slow views show

        def row(*pairs: tuple[str, QWidget, int]) -> QSplitter:
            split = QSplitter(Qt.Orientation.Horizontal)
            for title, widget, stretch in pairs:
                split.addWidget(_boxed(title, widget))
            split.setSizes([stretch * 100 for _, _, stretch in pairs])
            return split

        rows = QSplitter(Qt.Orientation.Vertical)
        rows.addWidget(row(("Batch size over time", self.batch, 5),
                           ("Speculation budget (this step)", self.budget, 6)))
        rows.addWidget(row(("Lane strip", self.lanes, 5), ("Acceptance", self.acceptance, 4),
                           ("Cost curve", self.cost, 3)))
        rows.addWidget(row(("Decisions", self.decisions, 4), ("Agents", self.agents, 7)))
        rows.setSizes([380, 300, 240])
        self.grid = QScrollArea()
        self.grid.setFrameShape(QFrame.Shape.NoFrame)
        self.grid.setWidgetResizable(True)
        self.grid.setWidget(rows)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(self.grid)

    def least_grid_size(self) -> QSize:
        """The least size at which every view's text stays whole and apart; below it the grid
        scrolls."""
        return self.grid.widget().minimumSizeHint()

    def _refresh_slow_views_soon(self) -> None:
        self._slow_at, self._slow_drawn = 0.0, None  # the next redraw refreshes them

    @property
    def fast_views(self):
        return (self.batch, self.budget, self.lanes, self.cost)

    def set_calibration(self, calibration) -> None:
        self.cost.set_calibration(calibration)
        self.decisions.set_calibration(calibration)

    def show_history(self, history: History, stop: int,
                     agents: Callable[[], list[AgentRow]] | None = None, force: bool = False) -> None:
        """Redraw every view at step `stop`; `agents` (live rows, fetched only when the slow views
        refresh) None means rebuilding the rows from the history."""
        if force or (history, stop) != self._drawn:  # no new step: nothing of theirs changed
            self._drawn = (history, stop)
            for view in self.fast_views:
                view.show_history(history, stop)
        now = time.monotonic()
        changed = (history, stop, history.event_count) != self._slow_drawn
        if force or (changed and now - self._slow_at >= SLOW_REFRESH_S):
            self._slow_at, self._slow_drawn = now, (history, stop, history.event_count)
            # Rolling aggregates over hundreds of steps: a quarter second behind is invisible.
            self.acceptance.show_history(history, stop)
            self.decisions.show_history(history, stop)
            self.agents.set_rows(self._tally.rows(history, stop) if agents is None else agents())
