"""Every view built from make_dummy() records, checked for what it draws, not just that it runs."""
import numpy as np
import pytest
from PySide6.QtCore import QPointF

from app.dashboard import Dashboard
from app.history import History
from app.theme import THEMES, Theme
from app.views.acceptance_view import AcceptanceView
from app.views.budget_view import BudgetView, per_agent_draft
from app.views.cost_curve_view import CostCurveView
from app.views.decisions_view import DecisionsView
from app.views.lane_strip import LaneStripView
from engine.spec.calibration import Calibration
from engine.telemetry.records import LaneRecord, StepRecord


@pytest.fixture
def history():
    h = History()
    h.extend([StepRecord.make_dummy(i, batch=1 + i % 8, budget=16, ragged="padded")
              for i in range(300)])
    return h


@pytest.mark.parametrize("name", THEMES)
def test_theme_fills_the_qss_template(name):
    theme = Theme.load(name)
    qss = theme.stylesheet()
    assert "$" not in qss and theme.committed in qss
    with pytest.raises(ValueError):
        Theme.load("sepia")


def test_seed_table_numbers():
    assert [per_agent_draft(24, b) for b in (1, 2, 4, 8, 16)] == [23, 11, 5, 2, 0.5]
    assert per_agent_draft(8, 16) == 0


def test_dashboard_draws_every_view(qtbot, history):
    dashboard = Dashboard(Theme.load("dark"))
    qtbot.addWidget(dashboard)
    dashboard.set_calibration(Calibration.make_dummy())
    dashboard.show_history(history, len(history), force=True)
    last = history.record(-1)
    x, y = dashboard.batch.batch_curve.getData()
    assert len(x) > 0 and y[-1] == last.batch
    assert dashboard.batch.headline.text().startswith(f"B = {last.batch}")
    assert f"{last.pass_tokens} of T=16" in dashboard.budget.detail.text()
    assert dashboard.acceptance.headline.text().startswith("mean acceptance length")
    assert dashboard.decisions.reasons.count() > 0
    assert "spec-off estimate" in dashboard.decisions.goodput.text()
    assert dashboard.agents.table.rowCount() == 8
    assert dashboard.cost.budget_line.value() == Calibration.make_dummy().budget
    assert dashboard.cost.budget_line.label.toPlainText() == f"T = {Calibration.make_dummy().budget}"
    live_x, live_y = dashboard.cost.live.getData()
    assert (live_x[0], live_y[0]) == (last.pass_tokens, pytest.approx(last.dt_ms))


@pytest.mark.parametrize("low,high", [(-0.6, 1.6), (6.4, 7.6), (-0.6, 40.6)])
def test_the_acceptance_views_agents_and_draft_positions_tick_at_whole_numbers(qtbot, low, high):
    """Two agents' bars once read 0, 0.5, 1.0 under them."""
    view = AcceptanceView(Theme.load("dark"))
    qtbot.addWidget(view)
    for plot in (view.lane_plot, view.position_plot):
        levels = plot.getAxis("bottom").tickValues(low, high, 80)
        ticks = [value for _, values in levels for value in values]
        assert ticks and all(value == round(value) for value in ticks)


def test_every_view_draws_a_live_history_whose_old_records_are_gone(qtbot):
    dashboard = Dashboard(Theme.load("dark"))
    qtbot.addWidget(dashboard)
    dashboard.set_calibration(Calibration.make_dummy())
    history = History(keep=300)
    history.extend([StepRecord.make_dummy(i, batch=1 + i % 8) for i in range(2000)])
    assert history.record(0) is None
    dashboard.show_history(history, len(history), force=True)  # agents from the kept records
    assert dashboard.batch.headline.text().startswith(f"B = {history.record(-1).batch}")
    t = history.column("t")
    old = dashboard.batch.batch_plot.getViewBox().mapViewToScene(  # within step 5's span
        QPointF(float(t[5] + t[6]) / 2, 1.0))
    dashboard.batch._on_mouse([old])  # hovering an old step: its numbers, no reason
    assert dashboard.batch.hover.text().startswith("step 5 · ") and "fixed" not in \
        dashboard.batch.hover.text()


def test_the_spec_off_estimate_is_the_same_work_at_the_steps_own_pace(qtbot):
    """Steps 3x slower than calibrated (long contexts, a busy CPU): a session with speculation
    off reads x1.00 against itself, not x0.33 against the idle machine's curve; drafting steps
    as slow read what the same work takes without drafts, scaled alike."""
    view = DecisionsView(Theme.load("dark"))
    qtbot.addWidget(view)
    calibration = Calibration.make_dummy()
    view.set_calibration(calibration)
    plain = [LaneRecord(i, "chat", 0, 0, 0, 900) for i in range(4)]
    copying = [LaneRecord(i, "code-edit", 4, 3, 0, 900) for i in range(4)]
    off_ms, drafting_ms = 3 * calibration.step_ms(4), 3 * calibration.step_ms(4, 16)
    history = History()
    history.extend([StepRecord(i, i * 0.1, 3 * calibration.step_ms(4, 0, 50 * (i % 2)), 4,
                               50 * (i % 2), 8, "off", "packed", plain, "off")
                    for i in range(10)])
    view.show_history(history, 10)
    assert view.goodput.text().endswith("×1.00")
    history = History()
    history.extend([StepRecord(i, i * 0.1, drafting_ms, 4, 0, 8, "fixed", "packed", copying,
                               "k=4") for i in range(10)])
    view.show_history(history, 10)
    # 16 tokens a step in drafting_ms against 4 in off_ms
    assert view.goodput.text().endswith(f"×{(16 / drafting_ms) / (4 / off_ms):.2f}")
    assert 1.5 < (16 / drafting_ms) / (4 / off_ms) < 4
    # A tool output's prefill rides in each step: off does it once too, then decodes the 16
    # tokens in 4 steps, not in the one step drafting took (which would price only 4 tokens
    # against the whole prefill).
    slow = 3 * calibration.step_ms(4, 16, 100)
    history = History()
    history.extend([StepRecord(i, i * 0.1, slow, 4, 100, 8, "fixed", "packed", copying, "k=4")
                    for i in range(10)])
    view.show_history(history, 10)
    prefill_ms = 3 * (calibration.step_ms(4, 0, 100) - calibration.step_ms(4))
    same_work_off_ms = prefill_ms + 4 * 3 * calibration.step_ms(4)
    assert view.goodput.text().endswith(f"×{same_work_off_ms / slow:.2f}")


def test_cost_curve_draws_the_fit_over_the_points_as_measured(qtbot):
    view = CostCurveView(Theme.load("dark"))
    qtbot.addWidget(view)
    view.set_calibration(Calibration(points=[(1, 10.0), (2, 12.0), (4, 11.0), (8, 16.0)]))
    assert list(view.curve.getData()[1]) == [10.0, 11.5, 11.5, 16.0]
    assert list(view.measured.getData()[1]) == [10.0, 12.0, 11.0, 16.0]
    title = view.plot.getPlotItem().titleLabel
    assert "context" not in title.text  # an older cache's curve does not say
    view.set_calibration(Calibration(points=[(1, 10.0), (2, 12.0)], context=64))
    assert "calibrated (ctx 64)" in title.text  # live steps at longer contexts sit above
    view.set_calibration(None)
    assert len(view.measured.getData()[0]) == 0 and "context" not in title.text


def test_budget_table_highlights_live_batch_and_shows_overflow(qtbot):
    view = BudgetView(Theme.load("dark"))
    qtbot.addWidget(view)
    history = History()
    lanes = [LaneRecord(i, "chat", 6, 2, 0, 10) for i in range(3)]  # 3 + 18 = 21 > T = 12
    history.extend([StepRecord(0, 0.0, 30.0, 3, 0, 12, "fixed", "packed", lanes, "k=6")])
    view.show_history(history, 1)
    rows = [view.table.item(r, 0).text() for r in range(view.table.rowCount())]
    assert rows == ["1", "2", "3  ◀ live", "4", "8", "16"]
    assert view.table.item(2, 2).text() == "9"          # free to speculate: 12 - 3
    assert "9 over budget" in view.detail.text()
    assert list(view.overflow.opts["x0"]) == [12] and list(view.overflow.opts["width"]) == [9]


def test_a_pass_far_past_the_budget_is_cut_at_the_axis_end_with_its_label_inside(qtbot):
    """A step drafting 300 past T = 3 does not zoom the chart out to 300 tokens, which would
    squeeze T and the reference bars into a sliver: its bar is cut at twice the widest
    reference batch, and its label, which gives the numbers, sits right of it in the plot."""
    view = BudgetView(Theme.load("dark"))
    qtbot.addWidget(view)
    view.resize(700, 380)
    view.show()
    qtbot.waitExposed(view)
    history = History()
    lanes = [LaneRecord(i, "code-edit", 100, 90, 0, 300) for i in range(3)]
    history.extend([StepRecord(0, 0.0, 400.0, 3, 0, 3, "goodput", "packed", lanes, "")])
    for _ in range(2):  # the second draw sees the first's layout
        view.show_history(history, 1)
        qtbot.wait(50)  # the view box places its items once events run
    label, box = view._labels[0].sceneBoundingRect(), view.plot.getViewBox().sceneBoundingRect()
    assert view._labels[0].toPlainText() == "303 of T=3, +300 over"
    assert box.left() < label.left() and label.right() <= box.right()
    assert list(view.overflow.opts["x0"]) == [3] and list(view.overflow.opts["width"]) == [29]
    assert max(x + w for x, w in zip(view.bars.opts["x0"], view.bars.opts["width"])) == 32
    assert view.plot.getViewBox().viewRange()[0][1] < 303 / 3  # far from zoomed out to 303


def test_the_seed_table_fits_its_columns_and_gives_way_to_the_chart_when_narrow(qtbot):
    view = BudgetView(Theme.load("dark"))
    qtbot.addWidget(view)
    history = History()
    lanes = [LaneRecord(i, "chat", 1, 1, 0, 10) for i in range(12)]
    history.extend([StepRecord(0, 0.0, 30.0, 12, 0, 5, "goodput", "packed", lanes, "")])
    view.resize(1000, 380)
    view.show()
    qtbot.waitExposed(view)
    view.show_history(history, 1)
    qtbot.wait(20)
    table = view.table
    assert table.isVisible() and table.horizontalHeader().length() <= table.viewport().width()
    assert view.plot.width() > table.width()  # the chart has the larger share of the row
    view.resize(500, 380)
    qtbot.waitUntil(lambda: not table.isVisible(), timeout=2000)
    qtbot.wait(20)  # the layout places the legend once events run
    assert view.legend.isVisible()
    assert view.plot.y() < view.legend.y() < view.detail.y()  # under the chart
    view.resize(1000, 380)
    qtbot.waitUntil(table.isVisible, timeout=2000)


def test_lane_strip_colours_accepted_rejected_and_padding(qtbot):
    theme = Theme.load("dark")
    view = LaneStripView(theme)
    qtbot.addWidget(view)
    history = History()
    lanes = [LaneRecord(0, "chat", 3, 1, 0, 10), LaneRecord(1, "json", 1, 0, 2, 10)]
    history.extend([StepRecord(0, 0.0, 10.0, 2, 0, 16, "fixed", "padded", lanes, "")])
    view.show_history(history, 1)
    image = view.image.image                            # [lanes, steps * cell, 3]
    cell = image.shape[1] // 16
    newest = image[:, -cell:-1]                         # the newest step sits at the right edge
    expect0 = ["committed", "accepted", "rejected", "rejected"]
    expect1 = ["committed", "rejected", "padding", "padding"]
    for row, names in ((0, expect0), (1, expect1)):
        for slot, name in enumerate(names):
            assert tuple(newest[row, slot]) == theme.rgb(name)
    assert "padding waste (padded): 25.0%" in view.waste.text()  # 2 pad of 8 pass tokens


def test_views_cope_with_speculation_off_and_an_empty_history(qtbot):
    dashboard = Dashboard(Theme.load("light"))
    qtbot.addWidget(dashboard)
    dashboard.show_history(History(), 0, force=True)   # nothing yet: no exception, nothing drawn
    # ... but the axes a session opens in, not +-0.5 around nothing (as while a model loads)
    assert dashboard.batch.batch_plot.getViewBox().viewRange()[0] == [0, 60]
    assert dashboard.batch.batch_plot.getViewBox().viewRange()[1][1] > 16
    assert dashboard.budget.plot.getViewBox().viewRange()[0][1] >= 32
    assert not dashboard.budget.budget_line.isVisible()
    history = History()
    history.extend([StepRecord.make_dummy(i, batch=4, policy="off") for i in range(10)])
    dashboard.show_history(history, 10, force=True)
    assert dashboard.budget.budget_line.isVisible()
    assert dashboard.acceptance.headline.text() == "no drafts in the last 10 steps (speculation off)"
    assert np.all(history.column("drafted") == 0)
    # goodput on, sending nothing (B = T leaves no budget): not "off"
    history.extend([StepRecord.make_dummy(10, batch=4, budget=4, policy="goodput")])
    dashboard.show_history(history, 11, force=True)
    assert dashboard.acceptance.headline.text() == "no drafts in the last 11 steps"


def test_qt_binding_keeps_reference_counts(qtbot):
    """PySide6 6.12.0 on Python 3.11 drops a reference to None on each call returning None; a
    running window then aborts within minutes (pyproject pins below it)."""
    import sys

    from PySide6.QtWidgets import QTableWidget
    table = QTableWidget(2, 2)
    qtbot.addWidget(table)
    before = sys.getrefcount(None)
    for _ in range(2000):
        table.item(0, 0)
    assert sys.getrefcount(None) >= before - 100


def test_the_ceilings_are_named_and_drawn_where_near_the_batch(qtbot):
    dashboard = Dashboard(Theme.load("dark"))
    qtbot.addWidget(dashboard)
    history = History()
    history.extend([StepRecord.make_dummy(i, batch=4) for i in range(10)])
    view = dashboard.batch
    view.set_ceilings(6, 64)
    dashboard.show_history(history, 10, force=True)
    assert "ceilings: batch 6, speculation 64" in view.batch_plot.getPlotItem().titleLabel.text
    top = view.batch_plot.getViewBox().viewRange()[1][1]
    assert 6 * 1.1 < top < 64  # the batch ceiling with room for its label; 64 is named only
    view.set_ceilings(32, 64)  # both far above the batch: the batch alone sets the axis
    dashboard.show_history(history, 10, force=True)
    assert 4 < view.batch_plot.getViewBox().viewRange()[1][1] < 32


def test_decisions_wrap_long_reasons_and_name_the_policy_once(qtbot):
    view = DecisionsView(Theme.load("dark"))
    qtbot.addWidget(view)
    view.resize(320, 300)
    view.show()
    lanes = [LaneRecord(i, "chat", 2, 1, 0, 900) for i in range(5)]
    reason = ("goodput: B=5 T=5 -> sum k=10, 9.5 tok in 38.9 ms; two lanes drafting, the rest "
              "below their acceptance floor")
    history = History()
    history.extend([StepRecord(i, i * 0.1, 40.0, 5, 0, 5, "goodput", "packed", lanes,
                               f"{reason} ({i})") for i in range(3)]
                   + [StepRecord(3, 0.3, 40.0, 5, 0, 5, "fixed", "packed", lanes, "B=5 > spec "
                                 "ceiling 4")])
    view.show_history(history, 4)
    qtbot.waitUntil(lambda: view.reasons.count() == 4)
    lines = [view.reasons.item(i).text() for i in range(4)]
    assert lines[0] == "step 3: [fixed] B=5 > spec ceiling 4"
    assert lines[1] == f"step 2: {reason} (2)"
    listed = view.reasons
    assert listed.horizontalScrollBar().maximum() == 0
    for i in range(4):
        rect = listed.visualItemRect(listed.item(i))
        assert rect.width() <= listed.viewport().width()
    assert listed.visualItemRect(listed.item(1)).height() > 2 * listed.fontMetrics().height()


def test_a_transcript_marks_where_a_new_task_begins(qtbot):
    """A new task is a fresh conversation: its system prompt must not read as part of the last
    one's text; the first task needs no mark."""
    from app.agent_rows import AgentRow
    from app.views.agents_view import AgentsView

    view = AgentsView(Theme.load("dark"))
    qtbot.addWidget(view)
    view.set_rows([AgentRow(0, "decode", "chat", 9, None, [
        ("<|im_start|>system\nfirst task", "prompt"), ("an answer", "committed"),
        ("<|im_start|>system\nsecond task", "prompt"), ("more", "committed")])])
    text = view.transcript.text.toPlainText()
    assert text.count("new task") == 1
    assert text.index("an answer") < text.index("new task") < text.index("second task")


def test_the_cost_curve_holds_its_axes_while_a_live_point_above_the_curve_moves(qtbot):
    """A swarm's steps at long contexts sit above the calibrated curve and move every step: the
    axes grow once to hold them, not every frame (each change repainted the axes and grid), and
    shrink back to the curve once the steps need under half."""
    view = CostCurveView(Theme.load("dark"))
    qtbot.addWidget(view)
    view.set_calibration(Calibration(points=[(1, 10.0), (8, 16.0), (64, 40.0)]))
    box = view.plot.getViewBox()
    curve_range = box.viewRange()
    changes, last = 0, box.viewRange()

    def show(dt_ms: list[float]) -> None:
        nonlocal changes, last
        lanes = [LaneRecord(i, "chat", 0, 0, 0, 2000) for i in range(8)]
        history = History()
        history.extend([StepRecord(i, 0.1 * i, ms, 8, 0, 8, "off", "packed", lanes, "off")
                        for i, ms in enumerate(dt_ms)])
        for stop in range(1, len(dt_ms) + 1):
            view.show_history(history, stop)
            shown = box.viewRange()
            assert shown[1][0] <= dt_ms[stop - 1] <= shown[1][1]  # the live point is in view
            changes, last = changes + (shown != last), shown

    show([50.0, 57.0, 52.0, 60.0, 55.0, 62.0, 51.0, 58.0])  # above the curve, moving
    assert changes == 1
    show([150.0])  # far above: the axes grow at once
    assert changes == 2
    show([20.0, 18.0])  # back on the curve: the axes fit it again
    assert changes == 3 and box.viewRange() == curve_range
